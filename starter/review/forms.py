"""The start form: from posted fields (and an uploaded picture) to an :class:`EmojiSetInput`, or errors per field."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from starlette.datastructures import FormData, UploadFile

from core.artifacts import ArtifactStore
from starter.client import EmojiSetClient, UploadRefused
from starter.review.images import SHA256
from workflows import keys
from workflows.contract import MAX_UPLOAD_BYTES, EmojiSetInput, ExportTarget, ReviewPolicy, StagePolicy
from workflows.presets import DEFAULT_ACTIONS, PRESETS

NUMBER_FIELDS = (
    "frames_per_emoji",
    "takes_per_action",
    "neighbours",
    "clip_seconds",
    "clip_fps",
    "character_candidates",
    "start_frame_candidates",
    "image_size",
    "seed",
)
TEXT_FIELDS = ("style", "matting_pipeline", "generator", "owner")
REVIEW_FIELDS = ("character", "start_frames", "final")


def default(name: str) -> Any:
    return EmojiSetInput.model_fields[name].get_default(call_default_factory=True)


@dataclass
class CustomRow:
    name: str = ""
    pose_prompt: str = ""
    motion_prompt: str = ""


@dataclass
class StartForm:
    """What the form shows: the values as posted (or the contract's defaults) and an error per field."""

    values: dict[str, Any]
    actions: list[str]
    custom: list[CustomRow]
    targets: list[str]
    review: dict[str, str]
    deadline_hours: str
    upload_sha: str | None = None
    upload_name: str | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def blank(cls) -> StartForm:
        values: dict[str, Any] = {name: default(name) for name in (*NUMBER_FIELDS, *TEXT_FIELDS)}
        values["character_prompt"] = ""
        policy = ReviewPolicy()
        return cls(
            values=values,
            actions=list(DEFAULT_ACTIONS),
            custom=[CustomRow()],
            targets=[t.value for t in default("export_targets")],
            review={name: getattr(policy, name).value for name in REVIEW_FIELDS},
            deadline_hours=f"{policy.deadline.total_seconds() / 3600:g}",
        )

    def error(self, key: str, message: str) -> None:
        self.errors[key] = f"{self.errors[key]}; {message}" if key in self.errors else message


def _text(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _texts(form: FormData, name: str) -> list[str]:
    return [value.strip() if isinstance(value, str) else "" for value in form.getlist(name)]


async def parse_start_form(
    form: FormData, client: EmojiSetClient, store: ArtifactStore
) -> tuple[EmojiSetInput | None, StartForm]:
    """The set the form asks for, or None and the form with its errors (an upload refused, a field out of range)."""
    view = StartForm.blank()
    view.values["character_prompt"] = _text(form, "character_prompt")
    for name in (*NUMBER_FIELDS, *TEXT_FIELDS):
        if name in form:
            view.values[name] = _text(form, name)
    view.actions = [a for a in _texts(form, "actions") if a]
    names, poses, motions = (_texts(form, f"custom_{part}") for part in ("name", "pose", "motion"))
    view.custom = [CustomRow(n, p, m) for n, p, m in zip(names, poses, motions, strict=False) if n or p or m] or [
        CustomRow()
    ]
    view.targets = [t for t in _texts(form, "export_targets") if t]
    view.review = {name: _text(form, f"review_{name}") or view.review[name] for name in REVIEW_FIELDS}
    view.deadline_hours = _text(form, "deadline_hours") or view.deadline_hours

    prompt = view.values["character_prompt"]
    image = None
    upload = form.get("character_file")
    if isinstance(upload, UploadFile) and upload.filename:
        data = await upload.read(MAX_UPLOAD_BYTES + 1)
        try:
            image = await asyncio.to_thread(client.upload, data)
        except UploadRefused as refused:
            view.error("character_file", str(refused))
        else:
            view.upload_sha, view.upload_name = image.sha256, upload.filename
    elif not prompt:
        # A picture uploaded with a form that had other errors: found again by its content's key, never by a path.
        sha = _text(form, "character_upload")
        stored = store.find(keys.upload_key(sha)) if SHA256.fullmatch(sha) else None
        if stored is not None:
            try:
                image = await asyncio.to_thread(client.upload, stored)
            except UploadRefused as refused:
                view.error("character_file", str(refused))
            else:
                view.upload_sha, view.upload_name = image.sha256, _text(form, "character_upload_name") or "picture"
    if prompt and (image is not None or "character_file" in view.errors):
        view.error("character_prompt", "give the character either as a prompt or as a picture, not both")
    elif not prompt and image is None and "character_file" not in view.errors:
        view.error("character_prompt", "give the character: a prompt, or upload a picture")

    fields: dict[str, Any] = {
        name: view.values[name] for name in (*NUMBER_FIELDS, *TEXT_FIELDS) if view.values[name] not in ("", None)
    }
    review: dict[str, Any] = {name: view.review[name] for name in REVIEW_FIELDS}
    try:
        review["deadline"] = timedelta(hours=float(view.deadline_hours))
    except ValueError:
        view.error("deadline_hours", f"{view.deadline_hours!r} is not a number of hours")
    request: EmojiSetInput | None = None
    try:
        request = EmojiSetInput(
            character_prompt=prompt or None if image is None else None,
            character_image=image,
            actions=view.actions,
            custom_actions=[
                {"name": row.name, "pose_prompt": row.pose_prompt, "motion_prompt": row.motion_prompt}
                for row in view.custom
                if row.name or row.pose_prompt or row.motion_prompt
            ],
            export_targets=view.targets,
            review=review,
            **fields,
        )
    except ValidationError as invalid:
        for problem in invalid.errors():
            key = _error_key(problem["loc"], problem["msg"])
            if key == "character_prompt" and key in view.errors:
                continue  # said already, in the form's own words
            view.error(key, _message(problem["msg"]))
    if view.errors:
        return None, view
    return request, view


def _message(message: str) -> str:
    return message.removeprefix("Value error, ")


def _error_key(loc: tuple[int | str, ...], message: str) -> str:
    """The error slot of a validation problem: its field, a custom action's row, or the field a whole-model rule
    is about."""
    if not loc:
        lowered = message.lower()
        if "character" in lowered:
            return "character_prompt"
        if "action" in lowered:
            return "actions"
        if "frames" in lowered or "candidates" in lowered:
            return "frames_per_emoji"
        return "form"
    head = str(loc[0])
    if head == "custom_actions" and len(loc) > 1:
        return f"custom-{loc[1]}"
    if head == "review" and len(loc) > 1:
        return "deadline_hours" if loc[1] == "deadline" else f"review_{loc[1]}"
    if head in ("character_image",):
        return "character_file"
    return head


PRESET_NAMES = list(PRESETS)
TARGETS = [t.value for t in ExportTarget]
STAGE_POLICIES = [p.value for p in StagePolicy]
