"""The EmojiSet workflow's messages: the input of each update that a reviewer or a backend sends.

Every one is a request (:class:`~workflows.contract.base._Request`); most updates return a part of the state
(:mod:`workflows.contract.state`). :class:`RefinePoint`, a click of ``refine_frame``, travels on to the GPU in
``refine_matte``'s input.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from workflows.contract.base import _Request
from workflows.contract.vocabulary import MAX_REFINE_POINTS, ActionId, RefineMode

CustomPrompt = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]


class PickCharacterInput(_Request):
    """Update ``pick_character``: use another character candidate (before start frames are made from it)."""

    candidate: int = Field(ge=0)


class ApproveCharacterInput(_Request):
    """Update ``approve_character``: go on with the picked character (policy ``human``)."""

    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""


class PickStartFrameInput(_Request):
    """Update ``pick_start_frame``: choose which start frame candidate an action uses (not yet approving it)."""

    action: str
    candidate: int = Field(ge=0)


class ApproveStartFramesInput(_Request):
    """Update ``approve_start_frames``: animate these actions from their picked start frames (empty: every action
    whose start frame awaits review)."""

    actions: list[str] = Field(default_factory=list)
    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""


class RegenerateStartFrameInput(_Request):
    """Update ``regenerate_start_frame``: new start frame candidates for an action from a custom pose prompt."""

    action: str
    prompt: CustomPrompt
    candidates: int | None = Field(default=None, ge=1, le=4)


class PickCandidateInput(_Request):
    """Update ``pick_candidate``: choose by hand which candidate a frame slot uses."""

    emoji: str
    frame: int = Field(ge=0)
    candidate: int = Field(ge=0)


class PickTakeInput(_Request):
    """Update ``pick_take``: use one take for a whole emoji (each slot's chosen frame of that take)."""

    emoji: str
    take: int = Field(ge=0)


class RegenerateActionInput(_Request):
    """Update ``regenerate_action``: a new take of an emoji's clip from a custom motion prompt; its frames join
    every slot's candidates."""

    emoji: str
    motion_prompt: CustomPrompt


class RegenerateFrameInput(_Request):
    """Update ``regenerate_frame``: new candidates for one frame slot, an image edit of its picked (or chosen) frame
    with a custom prompt."""

    emoji: str
    frame: int = Field(ge=0)
    prompt: CustomPrompt
    candidates: int | None = Field(default=None, ge=1, le=4)


class RefinePoint(_Request):
    """One click on a frame, in its pixel coordinates (x to the right, y down, from the top-left pixel)."""

    x: int = Field(ge=0)
    y: int = Field(ge=0)
    foreground: bool = Field(
        default=True, description="On the region to erase or restore; False: beside it, a barrier it stops at."
    )


class RefineFrameInput(_Request):
    """Update ``refine_frame``: correct a matted candidate's cut-out with clicks; the refined candidate becomes the
    slot's pick (by hand), and ``undo_refine`` takes the correction back."""

    emoji: str
    frame: int = Field(ge=0)
    candidate: int = Field(ge=0)
    points: list[RefinePoint] = Field(min_length=1, max_length=MAX_REFINE_POINTS)
    mode: RefineMode
    following: bool = Field(
        default=False, description="Carry the same correction through the emoji's following frames (their picks)."
    )

    @model_validator(mode="after")
    def _has_foreground(self) -> RefineFrameInput:
        if not any(point.foreground for point in self.points):
            raise ValueError("at least one point must be on the region (foreground); background points only bound it")
        return self


class UndoRefineInput(_Request):
    """Update ``undo_refine``: bring back a candidate's cut-out from before its last refinement."""

    emoji: str
    frame: int = Field(ge=0)
    candidate: int = Field(ge=0)
    following: bool = Field(
        default=False, description="Also undo the last refinement of the following frames' picks, if they have one."
    )


class ApproveInput(_Request):
    """Update ``approve``: assemble the set with the current picks."""

    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""


class DropActionInput(_Request):
    """Update ``drop_action``: take an emoji out of the set and stop its work in flight (never the last emoji, never
    once the set is approved)."""

    action: ActionId
    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""
    reason: Annotated[str, StringConstraints(strip_whitespace=True, max_length=500)] = ""
    force: bool = Field(
        default=False, description="Drop it even when a platform target then refuses the set (LINE takes 8 to 40)."
    )


class CancelInput(_Request):
    """Update ``cancel``: stop the set; nothing is assembled."""

    reason: Annotated[str, StringConstraints(strip_whitespace=True, max_length=500)] = ""
    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""
