"""The DashScope generator: its four roles, each one task of a Wan model (see the package docstring and
docs/dashscope.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import SecretStr

from activities.generation.base import GeneratedClip, GeneratedImage, GenerationError, GenerationRefused
from activities.generation.dashscope.api import (
    REFUSAL_CODES,
    Polling,
    ResultExpired,
    TaskClient,
    TaskHeartbeat,
    Throttling,
    quoted,
    task_error,
)
from activities.generation.dashscope.media import CLIP_INPUT, IMAGE_EDIT_INPUT, input_data_uri, square_png
from activities.generation.dashscope.prompts import (
    CHARACTER_NEGATIVE,
    CLIP_NEGATIVE,
    IMAGE_EDIT_NEGATIVE,
    candidate_seed,
    character_prompt,
    clip_prompt,
    edit_frame_prompt,
    start_frame_prompt,
)
from activities.settings import DashScopeSettings
from workflows.contract import (
    EditFrameInput,
    GenerateCharacterInput,
    GenerateClipInput,
    GenerateStartFrameInput,
    GeneratorRole,
)

logger = logging.getLogger(__name__)

TEXT_TO_IMAGE_PATH = "/services/aigc/text2image/image-synthesis"
IMAGE_EDIT_PATH = "/services/aigc/image2image/image-synthesis"
IMAGE_TO_VIDEO_PATH = "/services/aigc/video-generation/video-synthesis"
DEFAULT_EDGE, MAX_EDGE = 1024, 1440
"""Square sizes asked for: Wan 2.2 text-to-image takes sides of 512 to 1440 pixels, the Wan 2.5 image edit a total of
768*768 to 1440*1440 pixels; 1024 (or the frame size, up to 1440) fits both."""
MAX_RESULT_IMAGE_BYTES = 50_000_000
MAX_CLIP_BYTES = 300_000_000
"""Downloads larger than these are errors (a 1440*1440 PNG is a few MB, a 15 s 1080P MP4 some tens)."""


@dataclass(frozen=True)
class ClipModel:
    """What one image-to-video model takes, as documented.

    Attributes:
        durations: The clip lengths it makes, in seconds.
        resolutions: Its ``parameters.resolution`` tiers.
        audio: Whether it takes ``parameters.audio`` (generated sound, on by default: we turn it off).
    """

    durations: tuple[int, ...]
    resolutions: frozenset[str]
    audio: bool = False


CLIP_MODELS: dict[str, ClipModel] = {
    "wan2.6-i2v-flash": ClipModel(tuple(range(2, 16)), frozenset({"720P", "1080P"}), audio=True),
    "wan2.6-i2v": ClipModel((5, 10, 15), frozenset({"720P", "1080P"}), audio=True),
    "wan2.5-i2v-preview": ClipModel((5, 10), frozenset({"480P", "720P", "1080P"}), audio=True),
    "wan2.2-i2v-flash": ClipModel((5,), frozenset({"480P", "720P", "1080P"})),
    "wan2.2-i2v-plus": ClipModel((5,), frozenset({"480P", "1080P"})),
    "wanx2.1-i2v-plus": ClipModel((5,), frozenset({"720P"})),
    "wanx2.1-i2v-turbo": ClipModel((3, 4, 5), frozenset({"480P", "720P"})),
}
"""The documented image-to-video models. Another model name is sent as it is, without ``duration`` (the service's
default, 5 s for every model above) and without ``audio``."""
DEFAULT_CLIP_SECONDS = 5
"""The clip length DashScope makes (and bills) when no ``duration`` is sent: 5 s for every documented model."""


@dataclass(frozen=True)
class DashScopeModels:
    """The model of each role.

    Attributes:
        character: Text-to-image, e.g. ``wan2.2-t2i-flash``.
        start_frame: Image edit, e.g. ``wan2.5-i2i-preview``.
        edit_frame: Image edit, e.g. ``wan2.5-i2i-preview``.
        clip: Image-to-video, e.g. ``wan2.6-i2v-flash``.
    """

    character: str
    start_frame: str
    edit_frame: str
    clip: str


def generation_edge(size: int) -> int:
    """The square edge to ask an image model for: 1024, or the frame size when larger, at most 1440."""
    return min(max(size, DEFAULT_EDGE), MAX_EDGE)


def clip_duration(model: str, seconds: float) -> int | None:
    """The clip length to ask ``model`` for: of the lengths it makes, the closest to ``seconds`` (the shorter, and
    cheaper, of two equally close); ``None`` for a model not in :data:`CLIP_MODELS`."""
    known = CLIP_MODELS.get(model)
    if known is None:
        return None
    return min(known.durations, key=lambda duration: (abs(duration - seconds), duration))


def billed_clip_seconds(model: str, seconds: float) -> int:
    """The clip length DashScope makes and bills for a clip asked of ``model`` for ``seconds``: the ``duration``
    sent (:func:`clip_duration`), or the service's default (:data:`DEFAULT_CLIP_SECONDS`) when none is sent."""
    duration = clip_duration(model, seconds)
    return DEFAULT_CLIP_SECONDS if duration is None else duration


class DashScopeGenerator:
    """Generator backed by DashScope's Wan models through the asynchronous task API.

    Every call is one task. Inside a Temporal activity its id is heartbeated, and a retried attempt resumes it
    (polls it, downloads its results again) instead of paying for a new one; a task that cannot give its results
    any more (failed, cancelled, unknown, result URLs expired) is forgotten first, so the retry submits afresh.

    Args:
        api_key: The Model Studio API key; ``None`` makes every call fail as refused (not retryable).
        base_url: API root of the key's region, e.g. ``https://dashscope-intl.aliyuncs.com/api/v1``.
        models: The model of each role.
        clip_resolution: ``parameters.resolution`` of the clips, e.g. ``720P``.
        polling: How tasks are polled.
        image_timeout_s: How long one image call waits for its task before failing (retryably).
        clip_timeout_s: How long one clip call waits for its task before failing (retryably).
        throttling: How a throttled submit or poll waits before the call fails as throttled.
    """

    name: ClassVar[str] = "dashscope"

    def __init__(
        self,
        *,
        api_key: SecretStr | None,
        base_url: str,
        models: DashScopeModels,
        clip_resolution: str,
        polling: Polling,
        image_timeout_s: float,
        clip_timeout_s: float,
        throttling: Throttling,
    ) -> None:
        self._tasks = TaskClient(api_key=api_key, base_url=base_url, polling=polling, throttling=throttling)
        self._models = models
        self._clip_resolution = clip_resolution
        self._image_timeout_s = image_timeout_s
        self._clip_timeout_s = clip_timeout_s

    @classmethod
    def from_settings(cls, settings: DashScopeSettings) -> DashScopeGenerator:
        """Build the generator from the ``POPCON_DASHSCOPE_*`` settings."""
        return cls(
            api_key=settings.dashscope_api_key,
            base_url=settings.dashscope_base_url,
            models=DashScopeModels(
                character=settings.dashscope_character_model,
                start_frame=settings.dashscope_start_frame_model,
                edit_frame=settings.dashscope_edit_frame_model,
                clip=settings.dashscope_clip_model,
            ),
            clip_resolution=settings.dashscope_clip_resolution,
            polling=Polling(settings.dashscope_poll_interval_s, settings.dashscope_poll_max_interval_s),
            image_timeout_s=settings.dashscope_image_timeout_s,
            clip_timeout_s=settings.dashscope_clip_timeout_s,
            throttling=Throttling(max_wait_s=settings.dashscope_throttle_wait_s),
        )

    def clip_seconds(self, asked: float) -> float:
        """What DashScope makes and bills for a clip asked of ``asked`` seconds (:func:`billed_clip_seconds`)."""
        return billed_clip_seconds(self._models.clip, asked)

    def model(self, role: GeneratorRole) -> str:
        """The model ``role`` calls (``POPCON_DASHSCOPE_<ROLE>_MODEL``), as the set's cost ledger prices it."""
        return {
            GeneratorRole.CHARACTER: self._models.character,
            GeneratorRole.START_FRAME: self._models.start_frame,
            GeneratorRole.EDIT_FRAME: self._models.edit_frame,
            GeneratorRole.CLIP: self._models.clip,
        }[role]

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._tasks.aclose()

    async def character(self, request: GenerateCharacterInput) -> list[GeneratedImage]:
        """Character candidates: text-to-image of the prompt with the full-body, plain-white framing.

        Raises:
            GenerationRefused: No API key, or the service refused the prompt (content, parameters, key, account).
            GenerationThrottled: The service is rate-limiting (``retry_after_s`` set when it says when).
            GenerationError: Anything a retry may fix (see docs/dashscope.md).
        """
        return await self._images(
            _ImageJob(
                role="character",
                path=TEXT_TO_IMAGE_PATH,
                model=self._models.character,
                prompt=character_prompt(request),
                negative_prompt=CHARACTER_NEGATIVE,
                seed_scope="character",
                request=request,
                what=f"{request.set_id} character candidates {_span(request)}",
            )
        )

    async def start_frame(self, request: GenerateStartFrameInput, character: bytes) -> list[GeneratedImage]:
        """Start frame candidates: an image edit of the character image into the action's pose.

        Raises:
            GenerationRefused: As for :meth:`character`, and a character image DashScope cannot take (above 10 MB,
                unreadable).
            GenerationThrottled: As for :meth:`character`.
            GenerationError: As for :meth:`character`.
        """
        return await self._images(
            _ImageJob(
                role="start_frame",
                path=IMAGE_EDIT_PATH,
                model=self._models.start_frame,
                prompt=start_frame_prompt(request),
                negative_prompt=IMAGE_EDIT_NEGATIVE,
                seed_scope=f"start:{request.action.name}",
                request=request,
                what=f"{request.set_id}/{request.action.name} start frames {_span(request)}",
                source=character,
                source_name="the character image",
            )
        )

    async def edit_frame(self, request: EditFrameInput, source: bytes) -> list[GeneratedImage]:
        """New candidates for one frame slot: an image edit of the extracted frame ``source`` by the custom prompt.

        Raises:
            GenerationRefused: As for :meth:`start_frame` (for the frame image).
            GenerationThrottled: As for :meth:`character`.
            GenerationError: As for :meth:`character`.
        """
        return await self._images(
            _ImageJob(
                role="edit_frame",
                path=IMAGE_EDIT_PATH,
                model=self._models.edit_frame,
                prompt=edit_frame_prompt(request),
                negative_prompt=IMAGE_EDIT_NEGATIVE,
                seed_scope=f"edit:{request.action.name}:{request.frame}",
                request=request,
                what=f"{request.set_id}/{request.action.name}#{request.frame} edits {_span(request)}",
                source=source,
                source_name="the frame image",
            )
        )

    async def clip(self, request: GenerateClipInput, start_frame: bytes) -> GeneratedClip:
        """One take: image-to-video from the start frame with the motion prompt and the clip direction.

        The length is, of those the model makes, the closest to ``request.seconds`` (:func:`clip_duration`); the MP4
        is returned as the service made it, with its task id.

        Raises:
            GenerationRefused: As for :meth:`start_frame` (for the start frame), and a resolution the model does not
                make.
            GenerationThrottled: As for :meth:`character`.
            GenerationError: As for :meth:`character`; a download cut short is one, and its retry downloads the same
                task's clip again.
        """
        model = self._models.clip
        known = CLIP_MODELS.get(model)
        if known is not None and self._clip_resolution not in known.resolutions:
            raise GenerationRefused(
                f"{model} makes clips at {sorted(known.resolutions)}, not {self._clip_resolution}: "
                "set POPCON_DASHSCOPE_CLIP_RESOLUTION"
            )

        async def body() -> dict[str, Any]:
            image = await asyncio.to_thread(input_data_uri, start_frame, CLIP_INPUT, "the start frame")
            parameters: dict[str, Any] = {
                "resolution": self._clip_resolution,
                "prompt_extend": False,
                "watermark": False,
                "seed": candidate_seed(request.seed, f"clip:{request.action.name}:{request.take}"),
            }
            duration = clip_duration(model, request.seconds)
            if duration is not None:
                parameters["duration"] = duration
            if known is not None and known.audio:
                parameters["audio"] = False
            return {
                "model": model,
                "input": {"prompt": clip_prompt(request), "negative_prompt": CLIP_NEGATIVE, "img_url": image},
                "parameters": parameters,
            }

        beat = TaskHeartbeat("clip")
        what = f"{request.set_id}/{request.action.name} take {request.take}"
        task_id = await self._task(beat, IMAGE_TO_VIDEO_PATH, body, model, what)
        output = await self._finished(beat, task_id, self._clip_timeout_s)
        url = output.get("video_url")
        if not isinstance(url, str) or not url:
            beat.record(None)
            raise GenerationError(f"DashScope task {task_id} succeeded without a video_url")
        data = await self._download(beat, url, f"the clip of task {task_id}", MAX_CLIP_BYTES)
        return GeneratedClip(data=data, media_type="video/mp4", task_id=task_id)

    async def _images(self, job: _ImageJob) -> list[GeneratedImage]:
        """One image task's ``count`` results, each scaled to a ``size`` square PNG."""
        beat = TaskHeartbeat(job.role)
        request = job.request
        task_id = await self._task(beat, job.path, job.body, job.model, job.what)
        output = await self._finished(beat, task_id, self._image_timeout_s)
        try:
            urls = _result_urls(output, task_id, request.first_candidate, request.count)
        except GenerationError:
            beat.record(None)
            raise
        images = []
        for index, url in enumerate(urls):
            name = f"image {index} of task {task_id}"
            data = await self._download(beat, url, name, MAX_RESULT_IMAGE_BYTES)
            try:
                png = await asyncio.to_thread(square_png, data, request.size, name)
            except GenerationError:
                beat.record(None)  # the result itself is bad: downloading it again cannot help
                raise
            images.append(GeneratedImage(data=png, media_type="image/png", width=request.size, height=request.size))
        return images

    async def _task(
        self,
        beat: TaskHeartbeat,
        path: str,
        body: Callable[[], Awaitable[dict[str, Any]]],
        model: str,
        what: str,
    ) -> str:
        """The task of this call: the one a previous attempt heartbeated, else a new one, on Temporal's server before
        anything else happens (:meth:`TaskHeartbeat.record_now`)."""
        task_id = beat.resumed()
        if task_id is not None:
            logger.info("resuming DashScope %s task %s for %s", beat.role, task_id, what)
            return task_id
        submitted = await body()
        task_id = await self._tasks.submit(path, submitted, what=what, on_wait=lambda: beat.record(None))
        await beat.record_now(task_id)
        logger.info("submitted DashScope %s task %s (%s) for %s", beat.role, task_id, model, what)
        return task_id

    async def _finished(self, beat: TaskHeartbeat, task_id: str, timeout_s: float) -> Mapping[str, Any]:
        """The output of the task once it succeeded; a task that ended otherwise is forgotten, then raised."""
        output = await self._tasks.wait(task_id, timeout_s=timeout_s, on_poll=lambda: beat.record(task_id))
        if output.get("task_status") != "SUCCEEDED":
            beat.record(None)
            raise task_error(task_id, output)
        return output

    async def _download(self, beat: TaskHeartbeat, url: str, what: str, max_bytes: int) -> bytes:
        """One result; an expired URL forgets the task (only a new one can make it again), anything else keeps it."""
        try:
            return await self._tasks.download(url, what=what, max_bytes=max_bytes)
        except ResultExpired:
            beat.record(None)
            raise


ImageRequest = GenerateCharacterInput | GenerateStartFrameInput | EditFrameInput


@dataclass(frozen=True)
class _ImageJob:
    """One image role call: what to submit, and the input image to send along (image edits)."""

    role: str
    path: str
    model: str
    prompt: str
    negative_prompt: str
    seed_scope: str
    request: ImageRequest
    what: str
    source: bytes | None = None
    source_name: str = ""

    async def body(self) -> dict[str, Any]:
        """The submit body; the input image is prepared only here, so a resumed task never decodes it."""
        edge = generation_edge(self.request.size)
        prompt_input: dict[str, Any] = {"prompt": self.prompt, "negative_prompt": self.negative_prompt}
        if self.source is not None:
            image = await asyncio.to_thread(input_data_uri, self.source, IMAGE_EDIT_INPUT, self.source_name)
            prompt_input["images"] = [image]
        return {
            "model": self.model,
            "input": prompt_input,
            "parameters": {
                "size": f"{edge}*{edge}",
                "n": self.request.count,
                "seed": candidate_seed(self.request.seed, self.seed_scope, self.request.first_candidate),
                "prompt_extend": False,
                "watermark": False,
            },
        }


def _span(request: ImageRequest) -> str:
    return f"{request.first_candidate}-{request.first_candidate + request.count - 1}"


def _result_urls(output: Mapping[str, Any], task_id: str, first_candidate: int, n: int) -> list[str]:
    """The ``n`` image URLs of a succeeded task, or the error naming the candidates it did not make."""
    results = output.get("results")
    items = list(results)[:n] if isinstance(results, list) else []
    items += [{}] * (n - len(items))
    urls = [item.get("url") if isinstance(item, Mapping) else None for item in items]
    failures = [
        (first_candidate + i, str(item.get("code") or "NoResult"), str(item.get("message") or "no image returned"))
        for i, (item, url) in enumerate(zip(items, urls, strict=True))
        if not isinstance(url, str) or not url
    ]
    if not failures:
        return [url for url in urls if isinstance(url, str)]
    described = "; ".join(f"candidate {index}: {code}: {message}" for index, code, message in failures)
    text = f"DashScope task {task_id} made {n - len(failures)} of {n} image(s); {quoted(described)}"
    if all(code.startswith(REFUSAL_CODES) for _, code, _ in failures):
        raise GenerationRefused(text)
    raise GenerationError(text)


def create_dashscope_generator() -> DashScopeGenerator:
    """Registry factory: the DashScope backend from the ``POPCON_DASHSCOPE_*`` settings (the API key is checked at
    first use, so a missing key fails the first generation, not the worker)."""
    return DashScopeGenerator.from_settings(DashScopeSettings())
