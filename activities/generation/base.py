"""What an image generator is: given one frame's request, return ``count`` candidate images."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from workflows.contract import FailureType, GenerateFrameInput


@dataclass(frozen=True)
class GeneratedImage:
    """One candidate as encoded bytes (PNG or JPEG)."""

    data: bytes
    media_type: str
    width: int
    height: int


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


class ImageGenerator(Protocol):
    """A generation backend. Instances are created once per worker and shared by concurrent activities."""

    name: ClassVar[str]

    async def generate(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        """Return exactly ``request.count`` candidates for the frame, candidate ``i`` being
        ``request.first_candidate + i``. Deterministic generators derive each candidate from the seed, pose, frame
        and candidate index only."""
        ...
