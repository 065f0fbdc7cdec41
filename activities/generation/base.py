"""What an image generator is: given one frame's request, return ``count`` candidate images."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from workflows.contract import GenerateFrameInput


@dataclass(frozen=True)
class GeneratedImage:
    """One candidate as encoded bytes (PNG or JPEG), and its true alpha as a PNG when the generator knows it."""

    data: bytes
    media_type: str
    width: int
    height: int
    true_alpha_png: bytes | None = None


class GenerationError(Exception):
    """A generation failed. ``retryable`` says whether trying again can help."""

    retryable: ClassVar[bool] = True

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class GenerationRefused(GenerationError):
    """The service refused the prompt (content policy, invalid parameters): the same request fails again."""

    retryable = False


class GenerationThrottled(GenerationError):
    """The service is rate-limiting us: retry later (``retry_after_s`` when the service says when)."""


class ImageGenerator(Protocol):
    """A generation backend. Instances are created once per worker and shared by concurrent activities."""

    name: ClassVar[str]

    async def generate(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        """Return exactly ``request.count`` candidates for the frame, candidate ``i`` being
        ``request.first_candidate + i``. Deterministic generators derive each candidate from the seed, pose, frame
        and candidate index only."""
        ...
