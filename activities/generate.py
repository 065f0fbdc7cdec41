"""Generation activities: draw a frame's candidates with the chosen backend and store them."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.artifacts import ArtifactStore
from activities.generation import create_generator
from activities.generation.base import GenerationError, ImageGenerator
from activities.settings import Settings
from workflows.contract import CheckGeneratorInput, GeneratedCandidate, GenerateFrameInput, GenerateFrameOutput
from workflows.keys import candidate_key


class GenerationActivities:
    """Holds one instance of each generator used so far, shared by concurrent activities."""

    def __init__(self, settings: Settings, store: ArtifactStore) -> None:
        self._settings = settings
        self._store = store
        self._generators: dict[str, ImageGenerator] = {}
        self._lock = asyncio.Lock()

    async def _generator(self, name: str) -> ImageGenerator:
        async with self._lock:
            if name not in self._generators:
                try:
                    self._generators[name] = create_generator(name, self._settings)
                except KeyError as err:
                    raise ApplicationError(str(err.args[0]), type="UnknownGenerator", non_retryable=True) from err
            return self._generators[name]

    @activity.defn(name="check_generator")
    async def check_generator(self, request: CheckGeneratorInput) -> str:
        """Fail with a non-retryable ``UnknownGenerator`` error when the backend does not exist."""
        return type(await self._generator(request.generator)).__name__

    @activity.defn(name="generate_frame")
    async def generate_frame(self, request: GenerateFrameInput) -> GenerateFrameOutput:
        """Generate ``count`` candidates for one frame and store each (and its true alpha when known)."""
        generator = await self._generator(request.generator)
        try:
            images = await generator.generate(request)
        except GenerationError as err:
            raise ApplicationError(
                str(err),
                type=type(err).__name__,
                non_retryable=not err.retryable,
                next_retry_delay=None if err.retry_after_s is None else timedelta(seconds=err.retry_after_s),
            ) from err
        if len(images) != request.count:
            raise ApplicationError(f"{request.generator} returned {len(images)} images, expected {request.count}")
        candidates = []
        for offset, image in enumerate(images):
            index = request.first_candidate + offset
            key = candidate_key(request.set_id, request.pose.name, request.frame, index, "source.png")
            source = await asyncio.to_thread(
                self._store.put, key, image.data, image.media_type, width=image.width, height=image.height
            )
            true_alpha = None
            if image.true_alpha_png is not None:
                alpha_key = candidate_key(request.set_id, request.pose.name, request.frame, index, "alpha.png")
                true_alpha = await asyncio.to_thread(
                    self._store.put,
                    alpha_key,
                    image.true_alpha_png,
                    "image/png",
                    width=image.width,
                    height=image.height,
                )
            candidates.append(GeneratedCandidate(index=index, image=source, true_alpha=true_alpha))
        return GenerateFrameOutput(candidates=candidates, generator=request.generator)

    async def aclose(self) -> None:
        """Release generator resources (HTTP clients)."""
        for generator in self._generators.values():
            close = getattr(generator, "aclose", None)
            if close is not None:
                await close()
