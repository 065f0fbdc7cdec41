"""Stand-in generators that fail the way hosted backends do, for workflow tests, and a registry that offers them."""

from __future__ import annotations

import asyncio

from activities.generation import GeneratorRegistry, builtin_generators
from activities.generation.base import GeneratedClip, GeneratedImage, GenerationRefused, GenerationThrottled
from activities.generation.procedural import ProceduralGenerator
from workflows.contract import EditFrameInput, GenerateClipInput, GenerateStartFrameInput

REFUSED_ACTION = "heart"
"""The action whose preset prompts the refusing stand-ins refuse (a custom prompt passes), and that the slow one is
slow for."""


class RefusesStartFrame(ProceduralGenerator):
    """Refuses the start frame of ``heart`` unless a reviewer gave a custom pose prompt."""

    name = "refuses-start-frame"

    async def start_frame(self, request: GenerateStartFrameInput, character: bytes) -> list[GeneratedImage]:
        if request.action.name == REFUSED_ACTION and request.prompt == request.action.pose_prompt:
            raise GenerationRefused("DataInspectionFailed: the pose prompt was refused")
        return await super().start_frame(request, character)


class RefusesClip(ProceduralGenerator):
    """Refuses the clip of ``heart`` unless a reviewer gave a custom motion prompt."""

    name = "refuses-clip"

    async def clip(self, request: GenerateClipInput, start_frame: bytes) -> GeneratedClip:
        if request.action.name == REFUSED_ACTION and request.motion_prompt == request.action.motion_prompt:
            raise GenerationRefused("DataInspectionFailed: the motion prompt was refused")
        return await super().clip(request, start_frame)


class ThrottledOnce(ProceduralGenerator):
    """Throttled on the first attempt of every clip, then fine: the retry policy absorbs it."""

    name = "throttled-once"

    def __init__(self) -> None:
        self.attempts: dict[tuple[str, str, int], int] = {}

    async def clip(self, request: GenerateClipInput, start_frame: bytes) -> GeneratedClip:
        key = (request.set_id, request.action.name, request.take)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        if self.attempts[key] == 1:
            raise GenerationThrottled("Throttling.RateQuota", retry_after_s=0.05)
        return await super().clip(request, start_frame)


class SlowRegenerations(ProceduralGenerator):
    """Slow for what a reviewer asks of ``heart``: a new take's clip and a frame edit take ten minutes (cancellable:
    the activity heartbeats meanwhile), so a test can act while they are in flight."""

    name = "slow-regenerations"
    SECONDS = 600.0

    async def clip(self, request: GenerateClipInput, start_frame: bytes) -> GeneratedClip:
        if request.action.name == REFUSED_ACTION and request.take > 0:
            await asyncio.sleep(self.SECONDS)
        return await super().clip(request, start_frame)

    async def edit_frame(self, request: EditFrameInput, source: bytes) -> list[GeneratedImage]:
        if request.action.name == REFUSED_ACTION:
            await asyncio.sleep(self.SECONDS)
        return await super().edit_frame(request, source)


def standin_generators() -> GeneratorRegistry:
    """The built-in backends plus the stand-ins of this module."""
    registry = builtin_generators()
    for generator in (RefusesStartFrame, RefusesClip, ThrottledOnce, SlowRegenerations):
        registry.register(generator.name, generator)
    return registry
