"""The compatibility checks the released-history tests rely on catch each kind of break, and pass an added field."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from testkit.contract_compat import schema_breaks, unknown_fields


class Ref(BaseModel):
    uri: str
    width: int | None = None


class Slot(BaseModel):
    frame: int
    refs: list[Ref] = Field(default_factory=list)
    mode: str = "erase"


def _schema(model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = TypeAdapter(model).json_schema(ref_template="#/$defs/{model}")
    return schema, schema.pop("$defs", {})


def _breaks(released: Any, current: Any) -> list[str]:
    old, old_defs = _schema(released)
    new, new_defs = _schema(current)
    return schema_breaks(old, new, old_defs, new_defs)


def test_a_payload_with_a_field_its_model_lost_is_found_at_any_depth() -> None:
    payload = {"frame": 3, "refs": [{"uri": "file:///a", "height": 4}], "colour": "red"}

    assert unknown_fields(Slot, payload) == ["$.refs[0].height", "$.colour"]
    assert unknown_fields(Slot, {"frame": 3, "refs": [{"uri": "file:///a", "width": 4}]}) == []
    assert unknown_fields(list[Slot] | None, [{"frame": 1, "mode": "erase", "kept": 1}]) == ["$[0].kept"]


def test_an_added_field_with_a_default_breaks_nothing() -> None:
    class SlotWithMore(Slot):
        note: str = ""
        kinds: list[str] = Field(default_factory=list)

    assert _breaks(Slot, SlotWithMore) == []


def test_a_removed_or_renamed_field_breaks() -> None:
    class Renamed(BaseModel):
        index: int
        refs: list[Ref] = Field(default_factory=list)
        mode: str = "erase"

    assert "$.frame: removed (or renamed)" in _breaks(Slot, Renamed)


def test_a_changed_default_breaks_a_payload_that_left_the_field_out() -> None:
    class Restoring(BaseModel):
        frame: int
        refs: list[Ref] = Field(default_factory=list)
        mode: str = "restore"

    assert _breaks(Slot, Restoring) == ["$.mode: default 'erase' became 'restore'"]


def test_a_new_required_field_breaks() -> None:
    class Stricter(Slot):
        owner: str

    assert _breaks(Slot, Stricter) == ["$.owner: required, but a released payload may lack it"]


def test_a_changed_type_or_a_lost_enum_value_breaks_even_when_nested() -> None:
    class TextRef(BaseModel):
        uri: str
        width: str | None = None

    class TextSlot(BaseModel):
        frame: int
        refs: list[TextRef] = Field(default_factory=list)
        mode: str = "erase"

    assert _breaks(Slot, TextSlot) == ["$.refs[].width: type integer became string"]
    assert _breaks(Literal["erase", "restore"], Literal["erase"]) == ["$: value 'restore' removed"]
    assert _breaks(Literal["erase"], Literal["erase", "restore"]) == []
