"""The start form: from posted fields (and an uploaded picture) to an :class:`EmojiSetInput`, or errors per field.

Each error is in plain words beside its field, whose label (:data:`LABELS`) the form's error summary puts in front
of it: the contract's own messages are reworded (:mod:`starter.review.wording`).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from starlette.datastructures import FormData, UploadFile

from activities.uploads import UploadError, UploadInfo, check_upload
from starter.client import EmojiSetClient
from starter.review import wording
from starter.review.limits import InputRefused, parse_decimal, parse_number
from workflows.contract import (
    MAX_UPLOAD_BYTES,
    ArtifactRef,
    DeadlinePolicy,
    EmojiSetInput,
    ExportTarget,
    ReviewPolicy,
    StagePolicy,
)
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
MB = 1024 * 1024
"""A megabyte, as the form counts a picture's size."""
DECIMAL_FIELDS = frozenset({"clip_seconds"})
"""The number fields that take a decimal point; the others are whole numbers."""
TEXT_FIELDS = ("style", "matting_pipeline", "generator", "owner")
REVIEW_FIELDS = ("character", "start_frames", "final", "on_deadline")
"""The review policy's fields the form posts as ``review_<name>`` (its deadline is posted in hours)."""
ADVANCED_FIELDS = frozenset({"clip_seconds", "clip_fps", "image_size", "character_candidates", "seed", "generator"})
"""The fields in the form's folded "Advanced" part: it is shown open when one of them has an error."""
LABELS = {
    "character_prompt": "Character prompt",
    "character_file": "Character picture",
    "style": "Style",
    "actions": "Actions",
    "custom_actions": "Custom actions",
    "frames_per_emoji": "Frames per emoji",
    "takes_per_action": "Takes (clips) per action",
    "neighbours": "Neighbour frames as candidates",
    "start_frame_candidates": "Start frame candidates",
    "matting_pipeline": "Matting pipeline",
    "export_targets": "Export targets",
    "review_character": "Character review",
    "review_start_frames": "Start frame review",
    "review_final": "Final review",
    "deadline_hours": "Deadline per wait (hours)",
    "review_on_deadline": "At the deadline",
    "owner": "Owner",
    "clip_seconds": "Clip seconds",
    "clip_fps": "Clip fps",
    "image_size": "Frame size (px)",
    "character_candidates": "Character candidates",
    "seed": "Seed",
    "generator": "Generator",
}
"""Each field's label on the form, by its error's key (a custom action's row is ``custom-<index>``)."""
CUSTOM_LABELS = {"name": "Name", "pose_prompt": "Pose prompt", "motion_prompt": "Motion prompt"}
"""The labels of a custom action's fields, which its row's error names."""
DEADLINE_CHOICES = [
    (DeadlinePolicy.AUTO_APPROVE.value, "go on with the automatic picks"),
    (DeadlinePolicy.EXPIRE.value, "end the set (expired)"),
]
"""What a passed deadline does, in the form's words."""
WORDED_BY_FORM = frozenset({"character_prompt", "actions"})
"""Fields whose errors the form words itself: the contract's message about one it has worded is not repeated."""


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
    upload_name: str | None = None
    """The file name of a usable picture the refused form came with (it is not kept: the form asks for it again)."""
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

    @property
    def advanced_open(self) -> bool:
        """Whether a field of the folded "Advanced" part has an error (the part is shown open)."""
        return not ADVANCED_FIELDS.isdisjoint(self.errors)

    def summary(self) -> list[tuple[str | None, str]]:
        """The error summary: each error after its field's label, with the id of its field (None: the whole form)."""
        return [
            (None if key == "form" else f"field-{key}", wording.labelled(label(key), message))
            for key, message in self.errors.items()
        ]


def _text(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _texts(form: FormData, name: str) -> list[str]:
    return [value.strip() if isinstance(value, str) else "" for value in form.getlist(name)]


async def parse_start_form(
    form: FormData, client: EmojiSetClient, owners: frozenset[str] | None = None
) -> tuple[EmojiSetInput | None, StartForm]:
    """The set the form asks for, or None and the form with its errors (an upload refused, a field out of range).

    ``owners``: the owners the reviewer may start sets for (None: any). A blank owner is their only one, if they have
    one; another is refused next to the field.

    Every field is checked before anything is kept: the uploaded picture is stored (through ``client``) only when the
    form is accepted, so a refused form leaves nothing behind. Nor is the picture kept for the next submit: the form
    names it and asks for it again.
    """
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
    unknown = [name for name in view.actions if name not in PRESETS]
    if unknown:
        view.error(
            "actions", f"no preset called {', '.join(unknown)}: choose one from the list, or add a custom action"
        )
    if owners is not None:
        if not view.values["owner"] and len(owners) == 1:
            view.values["owner"] = next(iter(owners))
        if view.values["owner"] not in owners:
            view.error("owner", f"you may start sets only for {', '.join(sorted(owners)) or 'no owner'}")

    prompt = view.values["character_prompt"]
    picture = await _picture(form, view)
    if prompt and (picture is not None or "character_file" in view.errors):
        view.error("character_prompt", "give the character either as a prompt or as a picture, not both")
    elif not prompt and picture is None and "character_file" not in view.errors:
        view.error("character_prompt", "give the character: a prompt, or upload a picture")

    fields: dict[str, Any] = {
        **_numbers(form, view),
        **{name: view.values[name] for name in TEXT_FIELDS if view.values[name] not in ("", None)},
    }
    review: dict[str, Any] = {name: view.review[name] for name in REVIEW_FIELDS}
    if picture is not None:  # an uploaded picture is the character as it is: nothing to review
        review["character"] = StagePolicy.AUTO.value
    try:
        review["deadline"] = timedelta(hours=parse_decimal(view.deadline_hours, "deadline"))
    except InputRefused as refused:
        view.error("deadline_hours", wording.unnamed(refused, "deadline"))
    image = None if picture is None else _unstored(*picture)
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
        # said already, in the form's own words (or the picture's refusal says it): not repeated
        worded = WORDED_BY_FORM & view.errors.keys() | (
            {"character_prompt"} if "character_file" in view.errors else set()
        )
        for problem in invalid.errors():
            key = _error_key(problem["loc"], problem["msg"])
            if key not in worded:
                view.error(key, _message(key, problem))
    if view.errors or request is None:
        return None, view
    if picture is not None:
        stored = await asyncio.to_thread(client.upload, picture[0])  # checked once more by the client, then stored
        request = request.model_copy(update={"character_image": stored})
    return request, view


async def _picture(form: FormData, view: StartForm) -> tuple[bytes, UploadInfo] | None:
    """The uploaded picture and what it is, checked (decoded) but not stored; None, and the refusal in ``view``,
    when it cannot be used; None when no file was chosen."""
    upload = form.get("character_file")
    if not isinstance(upload, UploadFile) or not upload.filename:
        return None
    data = await upload.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        size = max(upload.size or 0, len(data))
        view.error("character_file", f"the picture is {size / MB:.1f} MB; the limit is {MAX_UPLOAD_BYTES / MB:g} MB")
        return None
    try:
        info = await asyncio.to_thread(check_upload, data)
    except UploadError as refused:
        view.error("character_file", str(refused))
        return None
    view.upload_name = upload.filename
    return data, info


def _unstored(data: bytes, info: UploadInfo) -> ArtifactRef:
    """What the contract checks of the checked picture before it is stored (its media type is the stored one's)."""
    return ArtifactRef(
        uri="upload:unstored",
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        media_type=info.media_type,
        width=info.width,
        height=info.height,
    )


def _numbers(form: FormData, view: StartForm) -> dict[str, int | float]:
    """The number fields the form gives, parsed strictly (ASCII digits; a point only in :data:`DECIMAL_FIELDS`); a
    field left empty takes the contract's default, and one that is no such number gets its error in ``view``."""
    numbers: dict[str, int | float] = {}
    for name in NUMBER_FIELDS:
        text = view.values[name]
        if name not in form or not text:
            continue
        parse = parse_decimal if name in DECIMAL_FIELDS else parse_number
        try:
            numbers[name] = parse(text, name)
        except InputRefused as refused:
            view.error(name, wording.unnamed(refused, name))
    return numbers


def label(key: str) -> str | None:
    """The label of the field an error's ``key`` names (a custom action's row: its number; the whole form: None)."""
    if key == "form":
        return None
    if key.startswith("custom-"):
        return f"Custom action {int(key.removeprefix('custom-')) + 1}"
    return LABELS.get(key) or wording.field_label(key)


def _message(key: str, problem: ErrorDetails) -> str:
    """A validation problem in plain words for the error slot ``key`` (a custom action's field after its label)."""
    loc = problem["loc"]
    if key.startswith("custom-") and len(loc) > 2:
        part = CUSTOM_LABELS.get(str(loc[2]), wording.field_label(str(loc[2])))
        return wording.labelled(part, wording.plain(problem, part))
    return wording.plain(problem, LABELS.get(key))


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
