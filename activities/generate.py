"""Generation activities: draw a frame's candidates with the chosen backend and store them."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity

from activities.generation import GeneratorRegistry, builtin_generators
from activities.generation.base import GenerationError, ImageGenerator
from core.artifacts import ArtifactStore
from workflows.contract import (
    ActivityName,
    CheckGeneratorInput,
    FailureType,
    GeneratedCandidate,
    GenerateFrameInput,
    GenerateFrameOutput,
)
from workflows.keys import candidate_key


class GenerationActivities:
    """Holds one instance of each generator used so far, shared by concurrent activities.

    Args:
        store: Where the candidates are stored.
        generators: The backends a set may name; ``None`` is :func:`~activities.generation.builtin_generators`.
    """

    def __init__(self, store: ArtifactStore, generators: GeneratorRegistry | None = None) -> None:
        self._store = store
        self._registry = builtin_generators() if generators is None else generators
        self._generators: dict[str, ImageGenerator] = {}
        self._lock = asyncio.Lock()

    async def _generator(self, name: str) -> ImageGenerator:
        async with self._lock:
            if name not in self._generators:
                try:
                    self._generators[name] = self._registry.create(name)
                except KeyError as err:
                    raise FailureType.UNKNOWN_GENERATOR.error(str(err.args[0])) from err
            return self._generators[name]

    @activity.defn(name=ActivityName.CHECK_GENERATOR)
    async def check_generator(self, request: CheckGeneratorInput) -> str:
        """Fail with a non-retryable ``UnknownGenerator`` error when the backend does not exist."""
        return type(await self._generator(request.generator)).__name__

    @activity.defn(name=ActivityName.GENERATE_FRAME)
    async def generate_frame(self, request: GenerateFrameInput) -> GenerateFrameOutput:
        """Generate ``count`` candidates for one frame and store each."""
        generator = await self._generator(request.generator)
        try:
            images = await generator.generate(request)
        except GenerationError as err:
            delay = None if err.retry_after_s is None else timedelta(seconds=err.retry_after_s)
            raise err.failure_type.error(str(err), next_retry_delay=delay) from err
        if len(images) != request.count:
            raise FailureType.GENERATION_FAILED.error(
                f"{request.generator} returned {len(images)} images, expected {request.count}"
            )
        candidates = []
        for offset, image in enumerate(images):
            index = request.first_candidate + offset
            key = candidate_key(request.set_id, request.pose.name, request.frame, index, "source.png")
            source = await asyncio.to_thread(
                self._store.put, key, image.data, image.media_type, width=image.width, height=image.height
            )
            candidates.append(GeneratedCandidate(index=index, image=source))
        return GenerateFrameOutput(candidates=candidates, generator=request.generator)

    async def aclose(self) -> None:
        """Release generator resources (HTTP clients)."""
        for generator in self._generators.values():
            close = getattr(generator, "aclose", None)
            if close is not None:
                await close()
