"""What a generator is: one backend that plays four roles, one role per call.

- :meth:`Generator.character`: character candidates from a prompt (full body, on white);
- :meth:`Generator.start_frame`: the character in an action's pose (an image edit, the character as reference);
- :meth:`Generator.edit_frame`: an image edit of one extracted frame with a custom prompt;
- :meth:`Generator.clip`: an image-to-video clip from an approved start frame with the motion prompt, as the MP4 a
  hosted model returns.

The activities read the input images from the artifact store and pass their bytes; generators never see the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from workflows.contract import (
    EditFrameInput,
    FailureType,
    GenerateCharacterInput,
    GenerateClipInput,
    GenerateStartFrameInput,
    GeneratorRole,
)


@dataclass(frozen=True)
class GeneratedImage:
    """One candidate as encoded bytes (PNG or JPEG)."""

    data: bytes
    media_type: str
    width: int
    height: int


@dataclass(frozen=True)
class GeneratedClip:
    """One take as its encoded video (an MP4 as the provider returned it)."""

    data: bytes
    media_type: str = "video/mp4"
    task_id: str | None = None
    """The provider's task, shown to operators; None for an offline generator."""


class GenerationError(Exception):
    """A generation failed; ``failure_type`` is how the activity reports it (and whether trying again can help)."""

    failure_type: ClassVar[FailureType] = FailureType.GENERATION_FAILED

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class GenerationRefused(GenerationError):
    """The service refused the prompt (content policy, invalid parameters): the same request fails again."""

    failure_type = FailureType.GENERATION_REFUSED


class GenerationThrottled(GenerationError):
    """The service is rate-limiting us: retry later (``retry_after_s`` when the service says when)."""

    failure_type = FailureType.GENERATION_THROTTLED


class Generator(Protocol):
    """A generation backend. Instances are created once per worker and shared by concurrent activities.

    Each image role returns exactly ``request.count`` candidates, candidate ``i`` being ``request.first_candidate +
    i``. Deterministic backends derive every output from the request alone (seed, action, take, candidate index), so a
    retried activity stores the same bytes under the same key.
    """

    name: ClassVar[str]

    def model(self, role: GeneratorRole) -> str:
        """The model a role calls, as the deployment's price table names it (the set's ledger)."""
        ...

    def clip_seconds(self, asked: float) -> float:
        """The length of the clip the provider makes, and bills, when ``asked`` seconds are asked for."""
        ...

    async def character(self, request: GenerateCharacterInput) -> list[GeneratedImage]:
        """Character candidates from ``request.prompt``: one full-body character on plain white."""
        ...

    async def start_frame(self, request: GenerateStartFrameInput, character: bytes) -> list[GeneratedImage]:
        """Start frame candidates: the character image ``character`` in the pose of ``request.prompt``."""
        ...

    async def edit_frame(self, request: EditFrameInput, source: bytes) -> list[GeneratedImage]:
        """New candidates for one frame slot: ``source`` (an extracted frame) edited by ``request.prompt``."""
        ...

    async def clip(self, request: GenerateClipInput, start_frame: bytes) -> GeneratedClip:
        """An image-to-video take from ``start_frame`` with ``request.motion_prompt``."""
        ...
