"""Refusals in plain words after the control's own label, instead of the validator's ("String should have at most
800 characters", a regular expression, a field's name in the code).

:func:`plain` words one problem of a pydantic :class:`~pydantic.ValidationError` without naming its field;
:func:`labelled` puts a label in front. :func:`message_label` is the set page's label of a message model's field, and
:func:`field_label` a field's name in words.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_core import ErrorDetails

from workflows.contract import (
    CancelInput,
    DropActionInput,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
)

ACTION_NAME = "use lower-case letters, digits and hyphens, starting with a letter or digit, at most 40 characters"
PATTERNS = {
    r"^[a-z0-9][a-z0-9-]{0,39}$": ACTION_NAME,
    r"^[a-z0-9_-]+$": "use lower-case letters, digits, hyphens and underscores",
}
"""What a pattern the contract holds a text to asks for, by the pattern."""
EMPTY = {
    "Pose prompt": "write the pose",
    "Motion prompt": "write the movement",
    "Frame prompt": "write what to change",
    "Export targets": "choose at least one platform",
    "Points": "add at least one point",
}
"""What an empty field (or list) of the label is asked for; any other: :data:`FILL_IN`."""
FILL_IN = "fill this in"
BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
}
"""A number's bound by the problem's type: its key in the problem's context, and its words."""
WORDS = {
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "yes or no",
    "missing": "missing",
    "extra_forbidden": "not a field this control sends",
}
"""Problems worded the same whatever their field."""
MESSAGE_LABELS = {
    (RegenerateStartFrameInput.__name__, "prompt"): "Pose prompt",
    (RegenerateFrameInput.__name__, "prompt"): "Frame prompt",
    (RegenerateActionInput.__name__, "motion_prompt"): "Motion prompt",
    (DropActionInput.__name__, "reason"): "Reason",
    (CancelInput.__name__, "reason"): "Reason",
}
"""The set page's label of a message model's field, where the field's own name is not it."""


def labelled(label: str | None, message: str) -> str:
    """``message`` after ``label`` (alone without one)."""
    return f"{label}: {message}" if label else message


def plain(problem: ErrorDetails, label: str | None = None) -> str:
    """One validation problem in plain words, without the field's name (``label`` says what an empty one asks).

    Args:
        problem: One of :meth:`~pydantic.ValidationError.errors`.
        label: The field's label.
    """
    kind, context, given = problem["type"], problem.get("ctx", {}), problem.get("input")
    if kind in ("string_too_short", "too_short") and context.get("min_length") == 1:
        return EMPTY.get(label or "", FILL_IN)
    if kind == "string_too_long":
        count = f" (this one has {len(given):,})" if isinstance(given, str) else ""
        return f"at most {context['max_length']:,} characters{count}"
    if kind == "string_too_short":
        return f"at least {context['min_length']:,} characters"
    if kind in ("too_short", "too_long"):
        most = "at least" if kind == "too_short" else "at most"
        limit = context["min_length" if kind == "too_short" else "max_length"]
        return f"{most} {limit:,} (this one has {context['actual_length']:,})"
    if kind == "string_pattern_mismatch":
        return PATTERNS.get(context["pattern"], "use only the letters and signs this field takes")
    if kind in BOUNDS:
        key, words = BOUNDS[kind]
        shown = f" (not {_number(given)})" if isinstance(given, int | float) and not isinstance(given, bool) else ""
        return f"{words} {_number(context[key])}{shown}"
    if kind == "enum":
        return f"choose one of {context['expected']}"
    return WORDS.get(kind) or problem["msg"].removeprefix("Value error, ")


def message_label(model: str, loc: Sequence[int | str]) -> str | None:
    """The set page's label of the field ``loc`` of the message model named ``model`` (None for the whole model).

    A field the page has no label of its own for is named by its name, in words ("candidate" is "Candidate").
    """
    if not loc:
        return None
    field = str(loc[0])
    return MESSAGE_LABELS.get((model, field)) or field_label(field)


def field_label(name: str) -> str:
    """A field's name in words, as a label: ``motion_prompt`` is "Motion prompt"."""
    return name.replace("_", " ").capitalize()


def unnamed(refusal: Exception, name: str) -> str:
    """A refusal of :mod:`starter.review.limits`, which starts with the value's ``name``, without it."""
    return str(refusal).removeprefix(f"{name} ")


def _number(value: object) -> str:
    """A bound or a value as the page shows it: thousands separated (a duration as pydantic words it)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
