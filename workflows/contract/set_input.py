"""The EmojiSet workflow's input: the character, the actions, the review policy, what the finished set is made into.

:class:`EmojiSetInput` starts a set and is part of its state. :class:`ActionSpec` is one action as production uses it:
the state and the generation activities carry it.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints, field_validator, model_validator

from workflows.contract.base import ArtifactRef, _Model
from workflows.contract.events import Webhook
from workflows.contract.ledger import Budget, calls_at_start
from workflows.contract.vocabulary import (
    MAX_ACTIONS,
    MAX_CANDIDATES_PER_SET,
    MAX_FRAMES_PER_EMOJI,
    MAX_FRAMES_PER_SET,
    MAX_TAKES_PER_ACTION,
    PIPELINE_PATTERN,
    UPLOAD_MEDIA_TYPES,
    ActionId,
    ExportTarget,
    TemporalMode,
)
from workflows.presets import DEFAULT_ACTIONS, PRESETS, ActionPreset, Expression, Motion, Prop

Prompt = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=800)]


class DeadlinePolicy(StrEnum):
    """What happens when a review deadline passes with no decision."""

    AUTO_APPROVE = "auto_approve"
    """Go on with the automatic picks (the set is assembled if every frame has a usable candidate)."""
    EXPIRE = "expire"


class StagePolicy(StrEnum):
    """Whether a stage waits for a person or goes on with its automatic pick."""

    AUTO = "auto"
    HUMAN = "human"


class ReviewPolicy(_Model):
    """Which stages wait for people, how long they get, and what a passed deadline does.

    The deadline runs from the moment the set starts waiting for a person at a stage (the character, the first start
    frame, the final review) and starts again at the next stage.
    """

    character: StagePolicy = Field(default=StagePolicy.AUTO, description="Wait for pick_character / approve.")
    start_frames: StagePolicy = Field(
        default=StagePolicy.HUMAN, description="Each action's start frame waits for approve_start_frames."
    )
    final: StagePolicy = Field(default=StagePolicy.HUMAN, description="The finished frames wait for approve.")
    deadline: timedelta = Field(default=timedelta(hours=24), gt=timedelta(0), le=timedelta(days=30))
    on_deadline: DeadlinePolicy = DeadlinePolicy.AUTO_APPROVE

    @classmethod
    def automatic(cls) -> ReviewPolicy:
        """No stage waits: a fully automatic set, for backends and the demo."""
        return cls(character=StagePolicy.AUTO, start_frames=StagePolicy.AUTO, final=StagePolicy.AUTO)


class CustomAction(_Model):
    """An action of the set's own beside the presets: its name and both prompts."""

    name: ActionId
    pose_prompt: Prompt = Field(description="The start frame: the character in this pose.")
    motion_prompt: Prompt = Field(description="The clip: the movement, best written as body mechanics.")
    frame_duration_ms: int = Field(default=83, ge=20, le=1000)


class ActionSpec(_Model):
    """One action as production uses it: a preset, or a custom action (whose motion hints are left to generators)."""

    name: str
    pose_prompt: str
    motion_prompt: str
    frame_duration_ms: int
    motion: Motion | None = None
    expression: Expression | None = None
    prop: Prop | None = None
    preset: bool = True

    @classmethod
    def of_preset(cls, preset: ActionPreset) -> ActionSpec:
        return cls(**preset.model_dump())

    @classmethod
    def of_custom(cls, action: CustomAction) -> ActionSpec:
        return cls(**action.model_dump(), preset=False)


class EmojiSetInput(_Model):
    """Start a set: a character (a prompt, or an uploaded picture) and the actions to animate, one emoji each.

    Also part of the set's state, which clients of any age read, so unknown fields are ignored when it is read back;
    a start request is validated with :meth:`of_request`, which refuses them.
    """

    character_prompt: Prompt | None = Field(
        default=None, description="Who the character is, e.g. 'a round orange cat with a blue scarf'."
    )
    character_image: ArtifactRef | None = Field(
        default=None, description="An uploaded character picture, stored by the client (see EmojiSetClient.upload)."
    )
    style: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = "flat cartoon sticker"
    actions: list[ActionId] = Field(default_factory=lambda: list(DEFAULT_ACTIONS))
    custom_actions: list[CustomAction] = Field(default_factory=list)
    takes_per_action: int = Field(default=1, ge=1, le=MAX_TAKES_PER_ACTION, description="Clips per action.")
    frames_per_emoji: int = Field(default=12, ge=2, le=MAX_FRAMES_PER_EMOJI)
    neighbours: int = Field(
        default=2, ge=0, le=4, description="Clip frames either side of each chosen frame kept as its candidates."
    )
    clip_seconds: float = Field(default=2.0, ge=1.0, le=10.0, description="Asked of the image-to-video model.")
    clip_fps: int = Field(default=24, ge=8, le=60, description="Asked of the image-to-video model.")
    character_candidates: int = Field(default=2, ge=1, le=4, description="Characters drawn from the prompt.")
    start_frame_candidates: int = Field(default=2, ge=1, le=4, description="Start frames drawn per action.")
    matting_pipeline: str = "classical"
    temporal: TemporalMode = Field(
        default=TemporalMode.NONE,
        description="Make each emoji's picked frames consistent with each other after matting (less flicker): "
        "none, stabilise (weight-free) or sam2 (SAM 2 video tracking, then stabilise). Left out: the deployment's "
        "mode (POPCON_DEFAULT_TEMPORAL, stabilise unless set), written here when the set starts.",
    )
    generator: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]+$")] = "procedural"
    image_size: int = Field(default=256, ge=64, le=1024, description="Edge of the square emoji frames, in pixels.")
    seed: int = Field(default=0, ge=0, lt=2**31)
    owner: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""
    tier: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]{0,32}$")] = Field(
        default="",
        description="The owner's service tier, e.g. 'pro': its share of the queues is the tier's weight "
        "(POPCON_FAIRNESS_WEIGHTS); empty = weight 1.",
    )
    max_parallel_matting: int = Field(default=32, ge=1, le=512, description="Matting activities in flight at once.")
    review: ReviewPolicy = Field(default_factory=ReviewPolicy)
    export_targets: list[ExportTarget] = Field(
        default_factory=lambda: [ExportTarget.GENERIC, ExportTarget.LINE_EMOJI],
        min_length=1,
        description="The generic files and / or platform packages made when the set is approved.",
    )
    budget: Budget | None = Field(
        default=None,
        description="The most the set may spend (paid calls, estimated cost); None = the deployment's default.",
    )
    webhook: Webhook | None = Field(
        default=None, description="Where the set's events go; None = the deployment's webhook, if it has one."
    )

    @field_validator("export_targets")
    @classmethod
    def _unique_targets(cls, targets: list[ExportTarget]) -> list[ExportTarget]:
        if len(set(targets)) != len(targets):
            raise ValueError(f"export targets must be unique, got {[t.value for t in targets]}")
        return targets

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, actions: list[str]) -> list[str]:
        unknown = [a for a in actions if a not in PRESETS]
        if unknown:
            raise ValueError(
                f"unknown action preset(s) {unknown}; known presets: {list(PRESETS)} (or add a custom action)"
            )
        return actions

    @field_validator("matting_pipeline")
    @classmethod
    def _pipeline_syntax(cls, name: str) -> str:
        if not PIPELINE_PATTERN.match(name):
            raise ValueError(
                f"matting pipeline {name!r} is not a valid name: steps joined by '+', each 'engine' or "
                "'engine:variant', e.g. 'classical' or 'rembg:isnet-anime+defringe'"
            )
        return name

    @model_validator(mode="after")
    def _consistent(self) -> EmojiSetInput:
        if (self.character_prompt is None) == (self.character_image is None):
            raise ValueError("give the character either as character_prompt or as character_image (an upload)")
        if self.character_image is not None and self.character_image.media_type not in UPLOAD_MEDIA_TYPES:
            raise ValueError(
                f"character_image is {self.character_image.media_type}; uploads are one of {sorted(UPLOAD_MEDIA_TYPES)}"
            )
        names = self.action_names()
        if not names:
            raise ValueError("a set needs at least one action (a preset or a custom action)")
        doubles = sorted({n for n in names if names.count(n) > 1})
        if doubles:
            raise ValueError(f"action names must be unique, got {doubles} twice (a custom action may not reuse one)")
        if len(names) > MAX_ACTIONS:
            raise ValueError(f"at most {MAX_ACTIONS} actions per set, got {len(names)}")
        slots = len(names) * self.frames_per_emoji
        if slots > MAX_FRAMES_PER_SET:
            raise ValueError(f"a set has at most {MAX_FRAMES_PER_SET} frames, this one asks for {slots}")
        candidates = slots * self.takes_per_action * (2 * self.neighbours + 1)
        if candidates > MAX_CANDIDATES_PER_SET:
            raise ValueError(
                f"a set has at most {MAX_CANDIDATES_PER_SET} frame candidates (frames x takes x (2 x neighbours + 1)), "
                f"this one asks for {candidates}"
            )
        needed = self.calls_at_start()
        if self.budget is not None and self.budget.paid_calls is not None and self.budget.paid_calls < needed:
            raise ValueError(
                f"a budget of {self.budget.paid_calls} paid calls is below what the set needs at start: {needed} "
                f"({'1 character, ' if self.character_prompt is not None else ''}{len(names)} start frame calls and "
                f"{len(names) * self.takes_per_action} clips)"
            )
        return self

    def calls_at_start(self) -> int:
        """The generator calls the set makes with no regeneration."""
        return calls_at_start(
            prompt=self.character_prompt is not None, actions=len(self.action_names()), takes=self.takes_per_action
        )

    @classmethod
    def of_request(cls, data: object) -> EmojiSetInput:
        """A start request as a person or a backend wrote it: unknown fields (a typo) are refused."""
        return cls.model_validate(data, extra="forbid")

    def action_names(self) -> list[str]:
        return [*self.actions, *(custom.name for custom in self.custom_actions)]

    def action_specs(self) -> list[ActionSpec]:
        """Presets first, in the order asked, then the custom actions."""
        return [ActionSpec.of_preset(PRESETS[name]) for name in self.actions] + [
            ActionSpec.of_custom(custom) for custom in self.custom_actions
        ]
