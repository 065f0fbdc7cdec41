"""Stand-in generators that fail the way hosted backends do, for workflow tests, and a registry that offers them."""

from __future__ import annotations

from activities.generation import GeneratorRegistry, builtin_generators
from activities.generation.base import GeneratedImage, GenerationRefused, GenerationThrottled
from activities.generation.procedural import ProceduralGenerator
from workflows.contract import GenerateFrameInput


class RefusesFrameOne(ProceduralGenerator):
    """Refuses frame 1 of every emoji unless a reviewer gave a custom prompt (the preset prompt is then absent)."""

    name = "refuses-frame-one"

    async def generate(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        if request.frame == 1 and request.pose.prompt in request.prompt:
            raise GenerationRefused("DataInspectionFailed: the prompt was refused")
        return await super().generate(request)


class ThrottledOnce(ProceduralGenerator):
    """Throttled on the first attempt of every frame, then fine: the retry policy absorbs it."""

    name = "throttled-once"

    def __init__(self) -> None:
        self.attempts: dict[tuple[str, str, int], int] = {}

    async def generate(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        key = (request.set_id, request.pose.name, request.frame)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        if self.attempts[key] == 1:
            raise GenerationThrottled("Throttling.RateQuota", retry_after_s=0.05)
        return await super().generate(request)


def standin_generators() -> GeneratorRegistry:
    """The built-in backends plus :class:`RefusesFrameOne` and :class:`ThrottledOnce`."""
    registry = builtin_generators()
    for generator in (RefusesFrameOne, ThrottledOnce):
        registry.register(generator.name, generator)
    return registry
