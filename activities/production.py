"""Production activities of the orchestration worker: the character, start frames, clips, their frames, frame edits.

Each reads its input images from the artifact store, calls the set's generator for one role (see
:mod:`activities.generation.base`) or decodes a clip (:mod:`activities.clips`), and stores what it made under
deterministic keys (:mod:`workflows.keys`), so a retried activity overwrites its own output. Payloads carry only
references.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import clips, uploads
from activities.generation import GeneratorRegistry, builtin_generators
from activities.generation.base import GeneratedImage, GenerationError, Generator
from core.artifacts import ArtifactError, ArtifactStore
from core.settings import CostSettings, WebhookSettings
from core.webhooks import DestinationRefused, check_destination
from workflows import keys
from workflows.contract import (
    ActivityName,
    ArtifactRef,
    CheckGeneratorInput,
    ClipFrame,
    ClipOutput,
    DeploymentTerms,
    DescribeDeploymentInput,
    EditFrameInput,
    ExtractFramesInput,
    ExtractFramesOutput,
    FailureType,
    GenerateCharacterInput,
    GenerateClipInput,
    GeneratedCandidate,
    GeneratedImages,
    GenerateStartFrameInput,
    GeneratorRole,
    PrepareUploadInput,
    TemporalMode,
    Usage,
)

T = TypeVar("T")


class ProductionActivities:
    """Holds one instance of each generator used so far, shared by concurrent activities.

    Args:
        store: Where inputs are read and outputs stored.
        generators: The backends a set may name; ``None`` is :func:`~activities.generation.builtin_generators`.
        costs: The prices and default budget a new set is told; ``None`` reads ``POPCON_PRICES`` and
            ``POPCON_BUDGET_*``.
        webhooks: The deployment's webhook and secrets; ``None`` reads ``POPCON_WEBHOOK_*``.
        default_temporal: The temporal mode a new set that names none is told.
    """

    def __init__(
        self,
        store: ArtifactStore,
        generators: GeneratorRegistry | None = None,
        *,
        costs: CostSettings | None = None,
        webhooks: WebhookSettings | None = None,
        default_temporal: TemporalMode = TemporalMode.STABILISE,
    ) -> None:
        self._store = store
        self._default_temporal = default_temporal
        self._registry = builtin_generators() if generators is None else generators
        self._costs = CostSettings() if costs is None else costs
        self._webhooks = WebhookSettings() if webhooks is None else webhooks
        self._generators: dict[str, Generator] = {}
        self._lock = asyncio.Lock()

    async def _generator(self, name: str) -> Generator:
        async with self._lock:
            if name not in self._generators:
                try:
                    self._generators[name] = self._registry.create(name)
                except KeyError as err:
                    raise FailureType.UNKNOWN_GENERATOR.error(str(err.args[0])) from err
            return self._generators[name]

    async def _read(self, ref: ArtifactRef) -> bytes:
        try:
            return await asyncio.to_thread(self._store.get, ref)
        except ArtifactError as err:
            raise err.failure_type.error(str(err)) from err

    async def _put(self, key: str, data: bytes, media_type: str, width: int | None = None) -> ArtifactRef:
        return await asyncio.to_thread(self._store.put, key, data, media_type, width=width, height=width)

    @activity.defn(name=ActivityName.CHECK_GENERATOR)
    async def check_generator(self, request: CheckGeneratorInput) -> str:
        """Fail with a non-retryable ``UnknownGenerator`` error when the backend does not exist."""
        return type(await self._generator(request.generator)).__name__

    @activity.defn(name=ActivityName.DESCRIBE_DEPLOYMENT)
    async def describe_deployment(self, request: DescribeDeploymentInput) -> DeploymentTerms:
        """The deployment's terms for a new set: its prices, the models of the set's generator and the clip length
        it bills, the default budget, whether it has a webhook, the default temporal mode (no models for a generator
        that does not exist: ``check_generator`` says so). Refuses (non-retryably) a webhook whose secret is not
        configured or whose address is not allowed: ``InvalidRequest`` for the set's own, ``DeploymentMisconfigured``
        for the deployment's; a host that does not resolve for now is tried again."""
        try:
            generator: Generator | None = await self._generator(request.generator)
        except ApplicationError:
            generator = None
        webhooks = self._webhooks
        url = request.webhook.url if request.webhook is not None else webhooks.webhook_url
        if url:
            failure = (
                FailureType.INVALID_REQUEST if request.webhook is not None else FailureType.DEPLOYMENT_MISCONFIGURED
            )
            secret = request.webhook.secret if request.webhook is not None else "default"
            if secret not in webhooks.webhook_secrets:
                raise failure.error(f"the webhook secret {secret!r} is not configured: set POPCON_WEBHOOK_SECRETS")
            try:
                await asyncio.to_thread(check_destination, url, allow_private=webhooks.webhook_allow_private)
            except DestinationRefused as refused:
                if refused.temporary:
                    raise FailureType.WEBHOOK_UNAVAILABLE.error(str(refused)) from refused
                raise failure.error(str(refused)) from refused
        clip_seconds = None
        if generator is not None and request.clip_seconds is not None:
            clip_seconds = generator.clip_seconds(request.clip_seconds)
        return DeploymentTerms(
            prices=self._costs.prices,
            models={role: generator.model(role) for role in GeneratorRole} if generator is not None else {},
            budget=self._costs.default_budget(),
            webhook=bool(webhooks.webhook_url),
            clip_seconds=clip_seconds,
            temporal=self._default_temporal,
        )

    @activity.defn(name=ActivityName.PREPARE_UPLOAD)
    async def prepare_upload(self, request: PrepareUploadInput) -> ArtifactRef:
        """Check the uploaded picture and store it cleaned: cut out, on white, cropped and padded square."""
        data = await self._read(request.upload)
        try:
            cleaned = await asyncio.to_thread(uploads.clean_character, data, request.size)
        except uploads.UploadError as err:
            raise FailureType.INVALID_UPLOAD.error(str(err)) from err
        return await self._put(keys.character_key(request.set_id, 0), cleaned, "image/png", request.size)

    @activity.defn(name=ActivityName.GENERATE_CHARACTER)
    async def generate_character(self, request: GenerateCharacterInput) -> GeneratedImages:
        """Character candidates from the prompt."""
        generator = await self._generator(request.generator)
        model = generator.model(GeneratorRole.CHARACTER)  # before the paid call: a generator without one pays nothing
        images = await _generated(generator.character(request), request.generator)
        return await self._stored(
            images,
            request.first_candidate,
            request.count,
            request.generator,
            lambda i: keys.character_key(request.set_id, i),
            model,
        )

    @activity.defn(name=ActivityName.GENERATE_START_FRAME)
    async def generate_start_frame(self, request: GenerateStartFrameInput) -> GeneratedImages:
        """Start frame candidates: the character in the action's pose."""
        generator = await self._generator(request.generator)
        model = generator.model(GeneratorRole.START_FRAME)
        character = await self._read(request.character.image)
        images = await _generated(generator.start_frame(request, character), request.generator)
        return await self._stored(
            images,
            request.first_candidate,
            request.count,
            request.generator,
            lambda i: keys.start_frame_key(request.set_id, request.action.name, i),
            model,
        )

    @activity.defn(name=ActivityName.EDIT_FRAME)
    async def edit_frame(self, request: EditFrameInput) -> GeneratedImages:
        """New candidates for one frame slot: an image edit of its frame with the custom prompt."""
        generator = await self._generator(request.generator)
        model = generator.model(GeneratorRole.EDIT_FRAME)
        source = await self._read(request.source)
        images = await _generated(generator.edit_frame(request, source), request.generator)
        return await self._stored(
            images,
            request.first_candidate,
            request.count,
            request.generator,
            lambda i: keys.candidate_key(request.set_id, request.action.name, request.frame, i, "source.png"),
            model,
        )

    @activity.defn(name=ActivityName.GENERATE_CLIP)
    async def generate_clip(self, request: GenerateClipInput) -> ClipOutput:
        """One image-to-video take from the approved start frame."""
        generator = await self._generator(request.generator)
        usage = Usage(
            model=generator.model(GeneratorRole.CLIP),
            video_seconds=generator.clip_seconds(request.seconds),
            attempt=activity.info().attempt,
        )
        start_frame = await self._read(request.start_frame)
        clip = await _generated(generator.clip(request, start_frame), request.generator)
        key = keys.clip_key(request.set_id, request.action.name, request.take)
        stored = await asyncio.to_thread(self._store.put, key, clip.data, clip.media_type)
        return ClipOutput(clip=stored, generator=request.generator, task_id=clip.task_id, usage=usage)

    @activity.defn(name=ActivityName.EXTRACT_FRAMES)
    async def extract_frames(self, request: ExtractFramesInput) -> ExtractFramesOutput:
        """Decode a take's clip, choose the emoji's frames over a smooth loop, and store every candidate frame."""
        data = await self._read(request.clip)
        try:
            extraction = await asyncio.to_thread(
                clips.extract_frames, data, frames=request.frames, neighbours=request.neighbours, size=request.size
            )
        except clips.ClipError as err:
            raise FailureType.INVALID_CLIP.error(f"{request.action} take {request.take}: {err}") from err
        stored: dict[int, ArtifactRef] = {}
        for slot in extraction.slots:
            for frame in slot:
                if frame.source_frame not in stored:
                    key = keys.clip_frame_key(request.set_id, request.action, request.take, frame.source_frame)
                    stored[frame.source_frame] = await self._put(key, frame.png, "image/png", request.size)
        return ExtractFramesOutput(
            slots=[
                [
                    ClipFrame(
                        source_frame=f.source_frame, offset=f.offset, image=stored[f.source_frame], quality=f.quality
                    )
                    for f in slot
                ]
                for slot in extraction.slots
            ],
            source_frames=extraction.source_frames,
            fps=extraction.fps,
            loop=extraction.loop,
        )

    async def _stored(
        self,
        images: list[GeneratedImage],
        first: int,
        count: int,
        generator: str,
        key_of: Callable[[int], str],
        model: str,
    ) -> GeneratedImages:
        if len(images) != count:
            raise FailureType.GENERATION_FAILED.error(f"{generator} returned {len(images)} images, expected {count}")
        candidates = []
        for offset, image in enumerate(images):
            index = first + offset
            ref = await asyncio.to_thread(
                self._store.put, key_of(index), image.data, image.media_type, width=image.width, height=image.height
            )
            candidates.append(GeneratedCandidate(index=index, image=ref))
        usage = Usage(model=model, images=len(candidates), attempt=activity.info().attempt)
        return GeneratedImages(candidates=candidates, generator=generator, usage=usage)

    async def aclose(self) -> None:
        """Release generator resources (HTTP clients)."""
        for generator in self._generators.values():
            close = getattr(generator, "aclose", None)
            if close is not None:
                await close()


async def _generated(call: Awaitable[T], generator: str) -> T:
    """Await a generator role, reporting its failures as their typed ApplicationErrors."""
    try:
        return await call
    except GenerationError as err:
        delay = None if err.retry_after_s is None else timedelta(seconds=err.retry_after_s)
        raise err.failure_type.error(f"{generator}: {err}", next_retry_delay=delay) from err
