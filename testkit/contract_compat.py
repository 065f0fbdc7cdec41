"""Checks that today's contract still reads what a release wrote: the payloads of its histories and its schemas.

* :func:`history_payloads` lists every contract payload of a recorded history with its position (the wire name that
  says which type decodes it, see :func:`testkit.histories.payload_positions`).
* :func:`unknown_fields` walks a payload's JSON beside the type that decodes it and lists every field the type does not
  have: a field lost or renamed since the payload was written (a model that ignores unknown fields would drop it
  silently).
* :func:`schema_breaks` compares a released position's JSON schema with today's: a field removed, a new field without
  a default, a released default changed, an enum value removed, a type changed.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory


def history_payloads(history: WorkflowHistory) -> Iterator[tuple[str, list[Payload]]]:
    """(position, payloads) for every workflow input and result, activity input and result, update input and result
    and signal input of a history."""
    workflow_type = ""
    activities: dict[int, str] = {}
    updates: dict[str, str] = {}
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes
            workflow_type = started.workflow_type.name
            yield from _each_arg(f"workflow {workflow_type} input", started.input.payloads)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            continued = event.workflow_execution_continued_as_new_event_attributes
            yield from _each_arg(f"workflow {continued.workflow_type.name} input", continued.input.payloads)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            yield (
                f"workflow {workflow_type} result",
                list(event.workflow_execution_completed_event_attributes.result.payloads),
            )
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            activities[event.event_id] = scheduled.activity_type.name
            yield f"activity {scheduled.activity_type.name} input", list(scheduled.input.payloads)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            yield f"activity {activities[completed.scheduled_event_id]} result", list(completed.result.payloads)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            updates[request.meta.update_id] = request.input.name
            yield f"update {request.input.name} input", list(request.input.args.payloads)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            update = event.workflow_execution_update_completed_event_attributes
            if update.outcome.HasField("success"):
                yield f"update {updates[update.meta.update_id]} result", list(update.outcome.success.payloads)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signal = event.workflow_execution_signaled_event_attributes
            yield from _each_arg(f"signal {signal.signal_name} input", signal.input.payloads)


def _each_arg(prefix: str, payloads: Any) -> Iterator[tuple[str, list[Payload]]]:
    for index, payload in enumerate(payloads):
        yield f"{prefix} {index}", [payload]


# --- Fields a payload holds that a type does not ------------------------------------------------------------------


def unknown_fields(hint: Any, value: Any, path: str = "$") -> list[str]:
    """The JSON paths of ``value``'s object keys that ``hint`` (a model, or a container of models) has no field for."""
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        if not isinstance(value, dict):
            return []
        names = {field.alias or name: field.annotation for name, field in hint.model_fields.items()}
        found = []
        for key, item in value.items():
            if key not in names:
                found.append(f"{path}.{key}")
            else:
                found += unknown_fields(names[key], item, f"{path}.{key}")
        return found
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        candidates = [arg for arg in args if arg is not type(None)]
        if value is None or not candidates:
            return []
        return min((unknown_fields(arg, value, path) for arg in candidates), key=len)
    if origin is typing.Annotated:
        return unknown_fields(args[0], value, path)
    if origin in (list, set, frozenset) and isinstance(value, list):
        return [
            found for index, item in enumerate(value) for found in unknown_fields(args[0], item, f"{path}[{index}]")
        ]
    if origin is tuple and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(value)
        return [
            found
            for index, (arg, item) in enumerate(zip(args, value, strict=False))
            for found in unknown_fields(arg, item, f"{path}[{index}]")
        ]
    if origin is dict and isinstance(value, dict):
        return [found for key, item in value.items() for found in unknown_fields(args[1], item, f"{path}.{key}")]
    return []


def payload_json(payload: Payload) -> Any:
    return json.loads(payload.data) if payload.data else None


# --- Schema compatibility -----------------------------------------------------------------------------------------


def schema_breaks(
    released: dict[str, Any],
    current: dict[str, Any],
    released_defs: dict[str, Any],
    current_defs: dict[str, Any],
    path: str = "$",
) -> list[str]:
    """Why a payload valid under ``released`` (a JSON schema with its ``$defs``) may not decode, or may decode to
    another value, under ``current``.

    A field removed, a new field without a default (a released payload lacks it), a default changed (a payload that
    left the field out means the old default), an enum value removed, a type changed.
    """
    old, new = _resolve(released, released_defs), _resolve(current, current_defs)
    if "anyOf" in old or "anyOf" in new:
        old_branches, new_branches = old.get("anyOf", [old]), new.get("anyOf", [new])
        breaks = []
        for branch in old_branches:
            attempts = [schema_breaks(branch, other, released_defs, current_defs, path) for other in new_branches]
            best = min(attempts, key=len)
            breaks += best
        return breaks
    breaks = []
    if "type" in old and "type" in new and old["type"] != new["type"]:
        return [f"{path}: type {old['type']} became {new['type']}"]
    old_values, new_values = _values(old), _values(new)
    if old_values is not None and new_values is not None:
        breaks += [f"{path}: value {value!r} removed" for value in old_values if value not in new_values]
    old_fields, new_fields = old.get("properties", {}), new.get("properties", {})
    for name, field in old_fields.items():
        if name not in new_fields:
            breaks.append(f"{path}.{name}: removed (or renamed)")
            continue
        if "default" in field and new_fields[name].get("default", field["default"]) != field["default"]:
            breaks.append(f"{path}.{name}: default {field['default']!r} became {new_fields[name]['default']!r}")
        breaks += schema_breaks(field, new_fields[name], released_defs, current_defs, f"{path}.{name}")
    for name in set(new.get("required", [])) - set(old.get("required", [])):
        breaks.append(f"{path}.{name}: required, but a released payload may lack it")
    for key in ("items", "additionalProperties"):
        if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            breaks += schema_breaks(old[key], new[key], released_defs, current_defs, f"{path}[]")
    for index, (before, after) in enumerate(zip(old.get("prefixItems", []), new.get("prefixItems", []), strict=False)):
        breaks += schema_breaks(before, after, released_defs, current_defs, f"{path}[{index}]")
    return breaks


def _values(schema: dict[str, Any]) -> list[Any] | None:
    """The values an enum or a constant allows; None when the schema does not list them."""
    if "enum" in schema:
        return list(schema["enum"])
    return [schema["const"]] if "const" in schema else None


def _resolve(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        extra = {key: value for key, value in schema.items() if key != "$ref"}
        schema = {**definitions[schema["$ref"].rsplit("/", 1)[-1]], **extra}
    if "allOf" in schema and len(schema["allOf"]) == 1:
        extra = {key: value for key, value in schema.items() if key != "allOf"}
        schema = {**_resolve(schema["allOf"][0], definitions), **extra}
    return schema
