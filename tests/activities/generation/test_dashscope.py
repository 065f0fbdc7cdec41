"""The DashScope backend against a local stand-in of the service (testkit/dashscope_standin.py): real HTTP on loopback,
no mocks. Retried attempts run in Temporal's ActivityEnvironment with the previous attempt's heartbeat, and once on a
real Temporal server with a real retry."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import email.utils
import functools
import io
import itertools
import logging
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing
from datetime import timedelta
from typing import Any, Literal

import av
import numpy as np
import pytest
from PIL import Image
from pydantic import BaseModel, SecretStr
from temporalio import activity, workflow
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.clips import ClipError, extract_frames
from activities.generation.base import (
    GeneratedClip,
    GeneratedImage,
    GenerationError,
    GenerationRefused,
    GenerationThrottled,
)
from activities.generation.dashscope import (
    CLIP_MODELS,
    DashScopeGenerator,
    DashScopeModels,
    ResultExpired,
    clip_duration,
    create_dashscope_generator,
)
from activities.generation.dashscope.api import Polling, Throttling
from activities.generation.dashscope.generator import billed_clip_seconds, generation_edge
from activities.generation.dashscope.prompts import (
    CHARACTER_FRAMING,
    CLIP_NEGATIVE,
    EDIT_FRAME_DIRECTION,
    MAX_PROMPT_CHARS,
    MAX_SEED,
    START_FRAME_DIRECTION,
    candidate_seed,
    character_prompt,
)
from activities.settings import DashScopeSettings
from core.connection import connect
from core.redact import REDACTED, redact
from core.settings import TemporalSettings
from testkit.dashscope_standin import RATE_QUOTA_MESSAGE, FakeDashScope, Kind, TaskScript, clip_mp4, seed_colour
from workflows.contract import (
    ActionSpec,
    ArtifactRef,
    CharacterRef,
    EditFrameInput,
    FailureType,
    GenerateCharacterInput,
    GenerateClipInput,
    GenerateStartFrameInput,
    GeneratorRole,
)
from workflows.presets import CLIP_DIRECTION, PRESETS

API_KEY = "sk-test-5f2b8c91d04e4a7e9a1c"
MODELS = DashScopeModels(
    character="wan2.2-t2i-flash",
    start_frame="wan2.5-i2i-preview",
    edit_frame="edit-model-under-test",
    clip="wan2.6-i2v-flash",
)
Role = Literal["character", "start_frame", "edit_frame", "clip"]
ROLES: tuple[Role, ...] = ("character", "start_frame", "edit_frame", "clip")
KIND: dict[Role, Kind] = {
    "character": "text2image",
    "start_frame": "image2image",
    "edit_frame": "image2image",
    "clip": "video",
}

WAVE = ActionSpec.of_preset(PRESETS["wave"])
REF = ArtifactRef(uri="file:///artifacts/x.png", sha256="0" * 64, size_bytes=1, media_type="image/png")


def png(edge: int = 512, colour: tuple[int, ...] = (230, 120, 40), mode: str = "RGB", fmt: str = "PNG") -> bytes:
    """A test input image: a square of ``colour`` with a white border."""
    image = Image.new(mode, (edge, edge), (255, 255, 255, 0) if mode == "RGBA" else (255, 255, 255))
    image.paste(Image.new(mode, (edge // 2, edge // 2), colour), (edge // 4, edge // 4))
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


@functools.cache
def oversized_png() -> bytes:
    """A real PNG above DashScope's 10 MB input limit (noise does not compress)."""
    noise = np.random.default_rng(0).integers(0, 256, (1900, 1900, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(noise).save(out, format="PNG", compress_level=0)
    return out.getvalue()


CHARACTER_PNG = png()
FRAME_PNG = png(colour=(40, 120, 230))


def character_request(**overrides: Any) -> GenerateCharacterInput:
    values: dict[str, Any] = {
        "set_id": "set-1",
        "prompt": "a round orange cat with a blue scarf",
        "style": "flat cartoon sticker",
        "first_candidate": 0,
        "count": 2,
        "generator": "dashscope",
        "size": 64,
        "seed": 42,
    }
    return GenerateCharacterInput(**{**values, **overrides})


def start_frame_request(**overrides: Any) -> GenerateStartFrameInput:
    values: dict[str, Any] = {
        "set_id": "set-1",
        "action": WAVE,
        "character": CharacterRef(image=REF, prompt="a round orange cat with a blue scarf"),
        "prompt": WAVE.pose_prompt,
        "style": "flat cartoon sticker",
        "first_candidate": 0,
        "count": 2,
        "generator": "dashscope",
        "size": 64,
        "seed": 42,
    }
    return GenerateStartFrameInput(**{**values, **overrides})


def edit_frame_request(**overrides: Any) -> EditFrameInput:
    values: dict[str, Any] = {
        "set_id": "set-1",
        "action": WAVE,
        "character": CharacterRef(image=REF),
        "frame": 3,
        "frames": 12,
        "source": REF,
        "prompt": "open the eyes wide",
        "style": "flat cartoon sticker",
        "first_candidate": 5,
        "count": 1,
        "generator": "dashscope",
        "size": 64,
        "seed": 42,
    }
    return EditFrameInput(**{**values, **overrides})


def clip_request(**overrides: Any) -> GenerateClipInput:
    values: dict[str, Any] = {
        "set_id": "set-1",
        "action": WAVE,
        "character": CharacterRef(image=REF),
        "start_frame": REF,
        "motion_prompt": WAVE.motion_prompt,
        "take": 0,
        "seconds": 4.0,
        "fps": 12,
        "generator": "dashscope",
        "size": 64,
        "seed": 42,
    }
    return GenerateClipInput(**{**values, **overrides})


def make_generator(
    base_url: str,
    *,
    api_key: str | None = API_KEY,
    models: DashScopeModels = MODELS,
    clip_resolution: str = "720P",
    timeout_s: float = 10.0,
    throttle_wait_s: float = 10.0,
) -> DashScopeGenerator:
    return DashScopeGenerator(
        api_key=None if api_key is None else SecretStr(api_key),
        base_url=base_url,
        models=models,
        clip_resolution=clip_resolution,
        polling=Polling(interval_s=0.01, max_interval_s=0.05),
        image_timeout_s=timeout_s,
        clip_timeout_s=timeout_s,
        throttling=Throttling(max_wait_s=throttle_wait_s, first_backoff_s=0.01, max_backoff_s=0.05),
    )


async def call(generator: DashScopeGenerator, role: Role, image: bytes | None = None) -> object:
    """Play one role with its default request (and ``image`` as its input image, if given)."""
    if role == "character":
        return await generator.character(character_request())
    if role == "start_frame":
        return await generator.start_frame(start_frame_request(), image or CHARACTER_PNG)
    if role == "edit_frame":
        return await generator.edit_frame(edit_frame_request(), image or FRAME_PNG)
    return await generator.clip(clip_request(), image or CHARACTER_PNG)


class Attempt:
    """One attempt of an activity, in Temporal's ActivityEnvironment, given the previous attempt's last heartbeat."""

    def __init__(self, previous: Attempt | None = None) -> None:
        self.env = ActivityEnvironment()
        details = [previous.heartbeats[-1]] if previous is not None and previous.heartbeats else []
        attempt = previous.env.info.attempt + 1 if previous is not None else 1
        self.env.info = dataclasses.replace(self.env.info, heartbeat_details=details, attempt=attempt)
        self.heartbeats: list[Any] = []
        self.env.on_heartbeat = lambda *beat: self.heartbeats.append(beat[0])

    async def run(self, generator: DashScopeGenerator, role: Role) -> object:
        async def attempt() -> object:
            return await call(generator, role)

        return await self.env.run(attempt)


@pytest.fixture
def fake() -> Iterator[FakeDashScope]:
    with FakeDashScope(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def generator(fake: FakeDashScope) -> AsyncIterator[DashScopeGenerator]:
    async with aclosing(make_generator(fake.base_url)) as built:
        yield built


def decoded(image: GeneratedImage) -> Image.Image:
    with Image.open(io.BytesIO(image.data)) as opened:
        assert opened.format == "PNG"
        return opened.convert("RGB")


def centre(image: GeneratedImage) -> tuple[int, ...]:
    pixel = decoded(image).getpixel((image.width // 2, image.height // 2))
    assert isinstance(pixel, tuple)
    return pixel


def close_to(actual: tuple[int, ...], expected: tuple[int, int, int]) -> bool:
    return all(abs(a - e) <= 3 for a, e in zip(actual, expected, strict=True))


def data_uri_image(uri: str) -> tuple[str, Image.Image]:
    match = re.fullmatch(r"data:(image/[a-z]+);base64,(.+)", uri, re.DOTALL)
    assert match is not None, uri[:60]
    image = Image.open(io.BytesIO(base64.b64decode(match.group(2))))
    image.load()
    return match.group(1), image


def assert_images(images: object, count: int, size: int, seed: int) -> None:
    assert isinstance(images, list) and len(images) == count
    for index, image in enumerate(images):
        assert isinstance(image, GeneratedImage)
        assert (image.media_type, image.width, image.height) == ("image/png", size, size)
        assert decoded(image).size == (size, size)
        assert close_to(centre(image), seed_colour(seed + index))


# --- Happy paths ---------------------------------------------------------------------------------------------------


async def test_character_is_text_to_image_with_the_framing(fake: FakeDashScope, generator: DashScopeGenerator) -> None:
    request = character_request(count=2, size=128)

    images = await generator.character(request)

    (submit,) = fake.submits("text2image")
    assert submit.headers["authorization"] == f"Bearer {API_KEY}"
    assert submit.headers["x-dashscope-async"] == "enable"
    assert submit.body["model"] == "wan2.2-t2i-flash"
    prompt = submit.body["input"]["prompt"]
    assert prompt.startswith("a round orange cat with a blue scarf. Style: flat cartoon sticker.")
    assert prompt.endswith(CHARACTER_FRAMING)
    assert all(words in prompt for words in ("head to toe", "1:1", "#FFFFFF", "not transparent", "not a sticker sheet"))
    assert "sticker sheet" in submit.body["input"]["negative_prompt"]
    seed = candidate_seed(42, "character", 0)
    assert submit.body["parameters"] == {
        "size": "1024*1024",
        "n": 2,
        "seed": seed,
        "prompt_extend": False,
        "watermark": False,
    }
    assert len(fake.polls()) == 3  # PENDING, RUNNING, SUCCEEDED
    assert len(fake.downloads()) == 2
    assert_images(images, 2, 128, seed)


async def test_start_frame_edits_the_character_image_into_the_pose(
    fake: FakeDashScope, generator: DashScopeGenerator
) -> None:
    images = await generator.start_frame(start_frame_request(first_candidate=2, count=3), CHARACTER_PNG)

    (submit,) = fake.submits("image2image")
    assert submit.body["model"] == "wan2.5-i2i-preview"
    prompt = submit.body["input"]["prompt"]
    assert prompt.startswith(f"The character of the image, {WAVE.pose_prompt}. Style: flat cartoon sticker.")
    assert prompt.endswith(START_FRAME_DIRECTION)
    (image,) = submit.body["input"]["images"]
    assert image == "data:image/png;base64," + base64.b64encode(CHARACTER_PNG).decode()  # in range: sent as it is
    seed = candidate_seed(42, "start:wave", 2)
    assert submit.body["parameters"] == {
        "size": "1024*1024",
        "n": 3,
        "seed": seed,
        "prompt_extend": False,
        "watermark": False,
    }
    assert_images(images, 3, 64, seed)


async def test_edit_frame_edits_the_frame_with_the_custom_prompt(
    fake: FakeDashScope, generator: DashScopeGenerator
) -> None:
    images = await generator.edit_frame(edit_frame_request(size=1200), FRAME_PNG)

    (submit,) = fake.submits("image2image")
    assert submit.body["model"] == "edit-model-under-test"
    prompt = submit.body["input"]["prompt"]
    assert prompt == f"open the eyes wide. Style: flat cartoon sticker. {EDIT_FRAME_DIRECTION}"
    _, sent = data_uri_image(submit.body["input"]["images"][0])
    assert sent.tobytes() == Image.open(io.BytesIO(FRAME_PNG)).convert("RGB").tobytes()
    seed = candidate_seed(42, "edit:wave:3", 5)
    assert (submit.body["parameters"]["size"], submit.body["parameters"]["seed"]) == ("1200*1200", seed)
    assert_images(images, 1, 1200, seed)


async def test_clip_is_image_to_video_from_the_start_frame(fake: FakeDashScope, generator: DashScopeGenerator) -> None:
    request = clip_request(seconds=4.2)

    clip = await generator.clip(request, CHARACTER_PNG)

    (submit,) = fake.submits("video")
    assert submit.body["model"] == "wan2.6-i2v-flash"
    prompt_input = submit.body["input"]
    assert prompt_input["prompt"] == f"{WAVE.motion_prompt}. {CLIP_DIRECTION}"
    assert prompt_input["negative_prompt"] == CLIP_NEGATIVE
    assert prompt_input["negative_prompt"].startswith("blurry, low quality, distorted")
    media_type, sent = data_uri_image(prompt_input["img_url"])
    assert (media_type, sent.size) == ("image/png", (512, 512))
    seed = candidate_seed(42, "clip:wave:0")
    assert submit.body["parameters"] == {
        "resolution": "720P",
        "duration": 4,
        "prompt_extend": False,
        "watermark": False,
        "seed": seed,
        "audio": False,
    }
    assert isinstance(clip, GeneratedClip)
    task_id = next(iter(fake.tasks))
    assert (clip.media_type, clip.task_id) == ("video/mp4", task_id)
    assert clip.data == clip_mp4(seed)  # stored as returned
    with av.open(io.BytesIO(clip.data), mode="r") as container:
        frames = [frame.to_image() for frame in container.decode(video=0)]
    assert len(frames) == 12
    pixel = frames[0].getpixel((30, 48))
    assert isinstance(pixel, tuple) and close_to(pixel, seed_colour(seed))


@pytest.mark.parametrize(
    ("model", "seconds", "duration"),
    [
        ("wan2.6-i2v-flash", 4.0, 4),
        ("wan2.6-i2v-flash", 4.5, 4),  # equally close: the shorter, cheaper one
        ("wan2.6-i2v-flash", 0.5, 2),
        ("wan2.6-i2v-flash", 30.0, 15),
        ("wan2.6-i2v", 4.0, 5),
        ("wan2.5-i2v-preview", 8.0, 10),
        ("wan2.2-i2v-plus", 3.0, 5),
        ("wanx2.1-i2v-turbo", 3.6, 4),
        ("some-future-i2v", 4.0, None),
    ],
)
def test_the_clip_length_is_the_closest_the_model_makes(model: str, seconds: float, duration: int | None) -> None:
    assert clip_duration(model, seconds) == duration


@pytest.mark.parametrize(("model", "resolution"), [("wan2.2-i2v-plus", "1080P"), ("wanx2.1-i2v-turbo", "480P")])
async def test_other_clip_models_get_their_own_parameters(fake: FakeDashScope, model: str, resolution: str) -> None:
    models = dataclasses.replace(MODELS, clip=model)
    async with aclosing(make_generator(fake.base_url, models=models, clip_resolution=resolution)) as other:
        clip = await other.clip(clip_request(seconds=4.0), CHARACTER_PNG)

    parameters = fake.submits("video")[0].body["parameters"]
    assert (parameters["resolution"], parameters["duration"]) == (resolution, clip_duration(model, 4.0))
    assert "audio" not in parameters  # only Wan 2.5 and 2.6 make sound
    assert clip.task_id in fake.tasks


async def test_a_resolution_the_clip_model_does_not_make_is_refused_before_any_request(fake: FakeDashScope) -> None:
    models = dataclasses.replace(MODELS, clip="wan2.2-i2v-plus")
    async with aclosing(make_generator(fake.base_url, models=models, clip_resolution="720P")) as wrong:
        with pytest.raises(GenerationRefused, match=r"wan2.2-i2v-plus makes clips at \['1080P', '480P'\], not 720P"):
            await wrong.clip(clip_request(), CHARACTER_PNG)

    assert fake.requests == []


@pytest.mark.parametrize(
    ("role", "image", "expected_size"),
    [
        ("start_frame", png(128, mode="RGBA"), (384, 384)),  # too small for the image edit, and transparent
        ("edit_frame", png(200), (384, 384)),
        ("clip", png(200, mode="RGBA"), (360, 360)),  # too small for image-to-video
        ("clip", png(2400), (2000, 2000)),  # too large for image-to-video
    ],
)
async def test_input_images_are_fitted_to_what_the_endpoint_takes(
    fake: FakeDashScope, generator: DashScopeGenerator, role: Role, image: bytes, expected_size: tuple[int, int]
) -> None:
    await call(generator, role, image)

    body = fake.submits(KIND[role])[0].body
    media_type, sent = data_uri_image(body["input"]["img_url"] if role == "clip" else body["input"]["images"][0])
    assert (media_type, sent.mode, sent.size) == ("image/png", "RGB", expected_size)
    corner = sent.getpixel((2, 2))
    assert corner == (255, 255, 255)  # transparent parts flattened on white


async def test_a_jpeg_in_range_is_sent_as_it_is(fake: FakeDashScope, generator: DashScopeGenerator) -> None:
    jpeg = png(640, fmt="JPEG")

    await generator.clip(clip_request(), jpeg)

    assert (
        fake.submits("video")[0].body["input"]["img_url"] == "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    )


async def test_the_factory_builds_from_the_dashscope_settings(
    fake: FakeDashScope, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POPCON_DASHSCOPE_API_KEY", API_KEY)
    monkeypatch.setenv("POPCON_DASHSCOPE_BASE_URL", fake.base_url)
    monkeypatch.setenv("POPCON_DASHSCOPE_POLL_INTERVAL_S", "0.01")
    monkeypatch.setenv("POPCON_DASHSCOPE_POLL_MAX_INTERVAL_S", "0.02")
    monkeypatch.setenv("POPCON_DASHSCOPE_CLIP_MODEL", "wan2.5-i2v-preview")
    monkeypatch.setenv("POPCON_DASHSCOPE_CLIP_RESOLUTION", "480P")
    for name in ("CHARACTER_MODEL", "START_FRAME_MODEL", "EDIT_FRAME_MODEL"):
        monkeypatch.delenv(f"POPCON_DASHSCOPE_{name}", raising=False)
    built = create_dashscope_generator()
    assert isinstance(built, DashScopeGenerator) and built.name == "dashscope"
    async with aclosing(built):
        for role in ROLES:
            await call(built, role)

    defaults = DashScopeSettings.model_fields
    assert fake.submits("text2image")[0].body["model"] == defaults["dashscope_character_model"].default
    assert [s.body["model"] for s in fake.submits("image2image")] == [
        defaults["dashscope_start_frame_model"].default,
        defaults["dashscope_edit_frame_model"].default,
    ]
    video = fake.submits("video")[0].body
    assert (video["model"], video["parameters"]["resolution"], video["parameters"]["duration"]) == (
        "wan2.5-i2v-preview",
        "480P",
        5,
    )
    assert defaults["dashscope_clip_model"].default in CLIP_MODELS
    assert defaults["dashscope_clip_resolution"].default == "720P"


def test_seeds_are_deterministic_and_consecutive_per_candidate() -> None:
    seed = candidate_seed(7, "start:wave", 0)
    assert seed == candidate_seed(7, "start:wave", 0)
    assert 0 <= seed <= MAX_SEED
    assert candidate_seed(7, "start:wave", 3) == (seed + 3) % (MAX_SEED + 1)
    assert len({seed, candidate_seed(7, "start:cry", 0), candidate_seed(8, "start:wave", 0)}) == 3


@pytest.mark.parametrize(("size", "edge"), [(64, 1024), (1024, 1024), (1200, 1200), (2048, 1440)])
def test_image_sizes_are_the_nearest_the_models_take(size: int, edge: int) -> None:
    assert generation_edge(size) == edge


def test_long_prompts_are_cut_before_the_framing() -> None:
    prompt = character_prompt(character_request(prompt="a very detailed cat " * 40))

    assert len(prompt) <= MAX_PROMPT_CHARS
    assert prompt.startswith("a very detailed cat")
    assert prompt.endswith(CHARACTER_FRAMING)


# --- What a call bills ---------------------------------------------------------------------------------------------


def test_each_role_names_the_model_it_calls(generator: DashScopeGenerator) -> None:
    assert {role: generator.model(role) for role in GeneratorRole} == {
        GeneratorRole.CHARACTER: MODELS.character,
        GeneratorRole.START_FRAME: MODELS.start_frame,
        GeneratorRole.EDIT_FRAME: MODELS.edit_frame,
        GeneratorRole.CLIP: MODELS.clip,
    }


@pytest.mark.parametrize(
    ("model", "seconds", "billed"),
    [
        ("wan2.6-i2v-flash", 4.2, 4),
        ("wan2.6-i2v", 4.0, 5),
        ("wan2.5-i2v-preview", 8.0, 10),
        ("some-future-i2v", 4.0, 5),  # no duration sent: the service's default
        ("some-future-i2v", 12.0, 5),
    ],
)
def test_a_clip_bills_the_duration_asked_or_the_default(model: str, seconds: float, billed: int) -> None:
    assert billed_clip_seconds(model, seconds) == billed


async def test_a_clip_bills_the_seconds_the_service_was_asked_for(
    fake: FakeDashScope, generator: DashScopeGenerator
) -> None:
    await generator.clip(clip_request(seconds=4.2), CHARACTER_PNG)

    (accepted,) = fake.submit_log
    assert generator.clip_seconds(4.2) == accepted.seconds == 4


# --- Failure answers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("code", ["DataInspectionFailed", "IPInfringementSuspect", "InvalidParameter"])
async def test_refused_submits_are_not_retryable(
    fake: FakeDashScope, generator: DashScopeGenerator, role: Role, code: str
) -> None:
    fake.script_error("submit", 400, code, "scripted refusal")

    with pytest.raises(GenerationRefused, match=f"DashScope {code}: scripted refusal \\(HTTP 400") as caught:
        await call(generator, role)

    assert caught.value.failure_type is FailureType.GENERATION_REFUSED
    assert not caught.value.failure_type.retryable
    assert fake.tasks == {}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("http_date", [False, True])
async def test_a_throttle_longer_than_a_call_waits_fails_it_with_retry_after(
    fake: FakeDashScope, generator: DashScopeGenerator, role: Role, http_date: bool
) -> None:
    # Retry-After is either delta-seconds or an HTTP date; either is past the 10 s this generator's calls wait.
    retry_after = email.utils.formatdate(time.time() + 30, usegmt=True) if http_date else "17"
    fake.script_error(
        "submit", 429, "Throttling.RateQuota", "Requests rate limit exceeded.", headers={"Retry-After": retry_after}
    )

    waited_at_most = r"throttled 1 time\(s\) in [\d.]+ s; a call waits at most 10 s"
    with pytest.raises(GenerationThrottled, match=waited_at_most) as caught:
        await call(generator, role)

    assert caught.value.failure_type is FailureType.GENERATION_THROTTLED and caught.value.failure_type.retryable
    expected = 30.0 if http_date else 17.0
    assert caught.value.retry_after_s is not None and expected - 2 <= caught.value.retry_after_s <= expected
    assert fake.tasks == {} and len(fake.submits()) == 1, "no wait was started: the call failed at once"
    await call(generator, role)  # a later attempt goes through
    assert len(fake.submits()) == 2


@pytest.mark.parametrize(
    ("endpoint", "status", "code", "expected"),
    [
        ("submit", 500, "InternalError", GenerationError),
        ("submit", 503, "ServiceUnavailable", GenerationError),
        ("task", 500, "InternalError", GenerationError),
        ("task", 429, "Throttling", GenerationThrottled),
        ("submit", 401, "InvalidApiKey", GenerationRefused),
    ],
)
async def test_error_answers_map_by_status_and_code(
    fake: FakeDashScope,
    endpoint: Literal["submit", "task"],
    status: int,
    code: str,
    expected: type[GenerationError],
) -> None:
    fake.script_error(endpoint, status, code, "scripted failure")

    with pytest.raises(GenerationError) as caught:
        async with aclosing(make_generator(fake.base_url, throttle_wait_s=0)) as impatient:  # throttling not waited
            await call(impatient, "clip")

    assert type(caught.value) is expected
    assert caught.value.failure_type.retryable is (expected is not GenerationRefused)
    assert f"DashScope {code}: scripted failure (HTTP {status}" in str(caught.value)


@pytest.mark.parametrize("role", ROLES)
async def test_a_failed_task_is_forgotten_so_the_retry_submits_again(fake: FakeDashScope, role: Role) -> None:
    fake.script_task(TaskScript(failed=("InternalError", "An internal error has occured, please try again later.")))
    async with aclosing(make_generator(fake.base_url)) as generator:
        first = Attempt()
        with pytest.raises(GenerationError, match="DashScope InternalError: An internal error") as caught:
            await first.run(generator, role)
        assert type(caught.value) is GenerationError and caught.value.failure_type.retryable
        failed_task = next(iter(fake.tasks))
        assert first.heartbeats[0] == {"role": role, "task_id": failed_task}
        assert first.heartbeats[-1] == {"role": role}

        await Attempt(first).run(generator, role)

    assert len(fake.submits()) == 2


async def test_a_task_failed_by_content_inspection_is_refused(
    fake: FakeDashScope, generator: DashScopeGenerator
) -> None:
    fake.script_task(TaskScript(failed=("DataInspectionFailed", "Output data may contain inappropriate content.")))

    with pytest.raises(GenerationRefused, match=r"DashScope DataInspectionFailed: Output data .* \(task "):
        await call(generator, "clip")


async def test_partial_image_results_name_the_missing_candidates(
    fake: FakeDashScope, generator: DashScopeGenerator
) -> None:
    fake.script_task(TaskScript(image_failures={1: ("InternalError.Timeout", "image failed")}))

    with pytest.raises(
        GenerationError, match=re.escape("made 2 of 3 image(s); candidate 5: InternalError.Timeout: image failed")
    ):
        await generator.start_frame(start_frame_request(first_candidate=4, count=3), CHARACTER_PNG)

    assert fake.downloads() == []


@pytest.mark.parametrize("role", ROLES)
async def test_an_expired_result_costs_a_second_task(fake: FakeDashScope, role: Role) -> None:
    fake.script_task(TaskScript(expired=True))
    async with aclosing(make_generator(fake.base_url)) as generator:
        first = Attempt()
        with pytest.raises(ResultExpired, match=r"HTTP 403.*Request has expired.*a new task is needed") as caught:
            await first.run(generator, role)
        assert caught.value.failure_type is FailureType.GENERATION_FAILED and caught.value.failure_type.retryable
        assert first.heartbeats[-1] == {"role": role}

        await Attempt(first).run(generator, role)

    assert len(fake.submits()) == 2


@pytest.mark.parametrize("role", ROLES)
async def test_a_download_cut_short_is_downloaded_again_from_the_same_task(fake: FakeDashScope, role: Role) -> None:
    fake.script_task(TaskScript(cut_short=1))
    async with aclosing(make_generator(fake.base_url)) as generator:
        first = Attempt()
        with pytest.raises(GenerationError, match="was cut short") as caught:
            await first.run(generator, role)
        assert type(caught.value) is GenerationError and caught.value.failure_type.retryable
        (task_id,) = fake.tasks
        assert first.heartbeats[-1] == {"role": role, "task_id": task_id}

        result = await Attempt(first).run(generator, role)

    assert len(fake.submits()) == 1
    assert fake.tasks[task_id].downloads >= 2
    if role == "clip":
        assert isinstance(result, GeneratedClip) and result.task_id == task_id
        assert result.data == clip_mp4(fake.tasks[task_id].seed)


@pytest.mark.parametrize("endpoint", ["submit", "task"])
async def test_an_answer_that_is_not_json_is_a_retryable_error(
    fake: FakeDashScope, generator: DashScopeGenerator, endpoint: Literal["submit", "task"]
) -> None:
    fake.script_not_json(endpoint)
    first = Attempt()

    with pytest.raises(GenerationError, match=r"answered HTTP 502 with a body that is not a JSON object \(text/html\)"):
        await first.run(generator, "clip")

    if endpoint == "task":  # the task goes on: the retry polls it
        (task_id,) = fake.tasks
        assert first.heartbeats[-1] == {"role": "clip", "task_id": task_id}
        await Attempt(first).run(generator, "clip")
        assert len(fake.submits()) == 1


async def test_a_throttling_answer_that_is_not_json_is_still_throttling(fake: FakeDashScope) -> None:
    fake.script_not_json("submit", status=429)

    with pytest.raises(GenerationThrottled):
        async with aclosing(make_generator(fake.base_url, throttle_wait_s=0)) as impatient:
            await call(impatient, "character")


@pytest.mark.parametrize("endpoint", ["submit", "task"])
@pytest.mark.parametrize("status", [404, 403])
async def test_a_4xx_page_that_is_not_json_is_refused(
    fake: FakeDashScope, generator: DashScopeGenerator, endpoint: Literal["submit", "task"], status: int
) -> None:
    # A wrong base URL, or a gateway refusing the request: the same request is answered the same way.
    fake.script_not_json(endpoint, status=status, body=b"<html><body><h1>Not allowed</h1></body></html>")

    with pytest.raises(
        GenerationRefused, match=rf"answered HTTP {status} with a body that is not a JSON object"
    ) as caught:
        await call(generator, "clip")

    assert caught.value.failure_type is FailureType.GENERATION_REFUSED and not caught.value.failure_type.retryable


@pytest.mark.parametrize(
    ("body", "content_type"),
    [(b"OK", "text/plain"), (b"[]", "application/json"), (b'{"output": {"task_id": "x"', "application/json")],
    ids=["plain-text", "json-array", "cut-json"],
)
async def test_a_2xx_answer_that_is_not_a_json_object_is_a_retryable_error(
    fake: FakeDashScope, generator: DashScopeGenerator, body: bytes, content_type: str
) -> None:
    fake.script_not_json("submit", status=200, body=body, content_type=content_type)

    with pytest.raises(GenerationError, match=r"answered HTTP 200 with a body that is not a JSON object") as caught:
        await call(generator, "character")

    assert type(caught.value) is GenerationError and caught.value.failure_type.retryable
    assert fake.tasks == {}
    await call(generator, "character")  # the retry goes through


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"request_id": "r-1"}, "DashScope answered without an output: {'request_id': 'r-1'}"),
        ({"output": {"task_status": "PENDING"}, "request_id": "r-2"}, "answered a submit to /services/aigc/"),
        ({"output": {"task_id": ""}}, "without a task id"),
    ],
    ids=["no-output", "no-task-id", "empty-task-id"],
)
async def test_a_submit_answered_without_the_expected_fields_is_a_retryable_error(
    fake: FakeDashScope, generator: DashScopeGenerator, payload: dict[str, Any], message: str
) -> None:
    fake.script_answer("submit", payload)

    with pytest.raises(GenerationError, match=re.escape(message)) as caught:
        await call(generator, "clip")

    assert type(caught.value) is GenerationError and caught.value.failure_type.retryable


async def test_a_poll_answered_without_a_task_status_keeps_the_task_for_the_retry(fake: FakeDashScope) -> None:
    fake.script_answer("task", {"output": {"task_id": "whatever"}, "request_id": "r-3"})
    async with aclosing(make_generator(fake.base_url)) as generator:
        first = Attempt()
        with pytest.raises(GenerationError, match=r"answered a poll of task \S+ without a task_status") as caught:
            await first.run(generator, "clip")
        assert type(caught.value) is GenerationError and caught.value.failure_type.retryable
        (task_id,) = fake.tasks
        assert first.heartbeats[-1] == {"role": "clip", "task_id": task_id}, "the paid task is not forgotten"

        await Attempt(first).run(generator, "clip")

    assert len(fake.submits()) == 1


@pytest.mark.parametrize(
    ("role", "message"),
    [
        ("clip", r"DashScope task \S+ succeeded without a video_url"),
        ("character", r"made 0 of 2 image\(s\); candidate 0: NoResult: no image returned; candidate 1: NoResult"),
    ],
)
async def test_a_task_that_succeeded_without_results_is_forgotten_and_retryable(
    fake: FakeDashScope, role: Role, message: str
) -> None:
    fake.script_task(TaskScript(no_results=True))
    async with aclosing(make_generator(fake.base_url)) as generator:
        first = Attempt()
        with pytest.raises(GenerationError, match=message) as caught:
            await first.run(generator, role)
        assert type(caught.value) is GenerationError and caught.value.failure_type.retryable
        assert first.heartbeats[-1] == {"role": role}, "the next attempt submits a new task"

        await Attempt(first).run(generator, role)

    assert len(fake.submits()) == 2


async def test_a_result_that_is_not_an_image_is_forgotten_and_retryable(fake: FakeDashScope) -> None:
    fake.script_task(TaskScript(garbled_results=True))
    async with aclosing(make_generator(fake.base_url)) as generator:
        first = Attempt()
        with pytest.raises(
            GenerationError, match=r"DashScope returned image 0 of task \S+ that is not a readable"
        ) as caught:
            await first.run(generator, "character")
        assert type(caught.value) is GenerationError and caught.value.failure_type.retryable
        assert first.heartbeats[-1] == {"role": "character"}

        await Attempt(first).run(generator, "character")

    assert len(fake.submits()) == 2


async def test_a_clip_that_is_not_a_video_is_refused_when_its_frames_are_extracted(
    fake: FakeDashScope, generator: DashScopeGenerator
) -> None:
    fake.script_task(TaskScript(garbled_results=True))

    clip = await call(generator, "clip")  # the generator stores what it got; extract_frames decodes it

    assert isinstance(clip, GeneratedClip)
    with pytest.raises(ClipError, match=r"the clip is not a video FFmpeg can read \(\d+ bytes\)"):
        extract_frames(clip.data, frames=4, neighbours=1, size=64)


async def test_a_task_still_running_at_the_timeout_is_resumed_by_the_retry(fake: FakeDashScope) -> None:
    fake.script_task(TaskScript(never_finish=True))
    async with aclosing(make_generator(fake.base_url, timeout_s=0.2)) as impatient:
        first = Attempt()
        with pytest.raises(GenerationError, match=r"is still RUNNING after 0\.2s"):
            await first.run(impatient, "clip")
    (task_id,) = fake.tasks
    assert first.heartbeats[-1] == {"role": "clip", "task_id": task_id}
    assert len(first.heartbeats) == 1 + len(fake.polls())  # the submit, then every poll

    fake.tasks[task_id].script = TaskScript()
    async with aclosing(make_generator(fake.base_url)) as patient:
        clip = await Attempt(first).run(patient, "clip")

    assert isinstance(clip, GeneratedClip) and clip.task_id == task_id
    assert len(fake.submits()) == 1


async def test_a_resumed_task_that_expired_is_forgotten_then_submitted_again(
    fake: FakeDashScope, generator: DashScopeGenerator
) -> None:
    first = Attempt()
    await first.run(generator, "character")
    fake.forget_tasks()

    second = Attempt(first)
    with pytest.raises(GenerationError, match="is UNKNOWN") as caught:
        await second.run(generator, "character")
    assert caught.value.failure_type.retryable
    assert second.heartbeats[-1] == {"role": "character"}

    await Attempt(second).run(generator, "character")
    assert len(fake.submits()) == 2


async def test_a_heartbeat_of_another_role_is_not_resumed(fake: FakeDashScope, generator: DashScopeGenerator) -> None:
    first = Attempt()
    await first.run(generator, "character")

    await Attempt(first).run(generator, "clip")

    assert [len(fake.submits(kind)) for kind in ("text2image", "video")] == [1, 1]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("api_key", [None, ""])
async def test_a_missing_key_is_refused_before_any_request(
    fake: FakeDashScope, role: Role, api_key: str | None
) -> None:
    async with aclosing(make_generator(fake.base_url, api_key=api_key)) as keyless:
        with pytest.raises(GenerationRefused, match="no DashScope API key: set the POPCON_DASHSCOPE_API_KEY"):
            await call(keyless, role)

    assert fake.requests == []


async def test_a_wrong_key_is_refused(fake: FakeDashScope) -> None:
    async with aclosing(make_generator(fake.base_url, api_key="sk-wrong-key-0000")) as wrong:
        with pytest.raises(GenerationRefused, match="InvalidApiKey") as caught:
            await call(wrong, "character")

    assert "sk-wrong-key-0000" not in str(caught.value)


@pytest.mark.parametrize("role", ["start_frame", "edit_frame", "clip"])
async def test_images_above_the_size_limit_are_refused_before_any_request(
    fake: FakeDashScope, generator: DashScopeGenerator, role: Role
) -> None:
    oversized = oversized_png()
    assert len(oversized) > 10_000_000

    with pytest.raises(
        GenerationRefused, match=r"is \d+ bytes; DashScope takes input images of at most 10000000"
    ) as caught:
        await call(generator, role, oversized)

    assert not caught.value.failure_type.retryable
    assert fake.requests == []


async def test_an_unreadable_input_image_is_refused(fake: FakeDashScope, generator: DashScopeGenerator) -> None:
    with pytest.raises(GenerationRefused, match="the start frame cannot be read as an image"):
        await generator.clip(clip_request(), b"not an image")

    assert fake.requests == []


async def test_network_errors_are_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with aclosing(make_generator(f"http://127.0.0.1:{port}/api/v1")) as unreachable:
        with pytest.raises(GenerationError, match="ConnectError") as caught:
            await call(unreachable, "clip")

    assert caught.value.failure_type.retryable
    assert "may have created" not in str(caught.value), "a request never sent made no task"


# --- Throttling is waited out; a paid task is made once -----------------------------------------------------------

API_LOGGER = "activities.generation.dashscope.api"


@pytest.mark.parametrize("role", ["character", "clip"])
@pytest.mark.parametrize("retry_after", ["0.2", None], ids=["retry-after", "backoff"])
async def test_a_throttled_submit_backs_off_and_its_task_is_made_once(
    fake: FakeDashScope, role: Role, retry_after: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=API_LOGGER)
    headers = None if retry_after is None else {"Retry-After": retry_after}
    fake.script_error("submit", 429, "Throttling.RateQuota", RATE_QUOTA_MESSAGE, times=2, headers=headers)
    attempt = Attempt()

    async with aclosing(make_generator(fake.base_url)) as generator:
        await attempt.run(generator, role)

    assert [record.outcome for record in fake.submit_log] == ["throttled", "throttled", "accepted"]
    (task_id,) = fake.tasks
    # Each wait heartbeats (no task yet); the task is heartbeated as soon as its submit is answered.
    assert attempt.heartbeats[:3] == [{"role": role}, {"role": role}, {"role": role, "task_id": task_id}]
    if retry_after is not None:
        times = [record.at for record in fake.submit_log]
        assert all(later - earlier >= 0.2 for earlier, later in itertools.pairwise(times))
    said = [record.getMessage() for record in caplog.records if record.name == API_LOGGER]
    assert len([line for line in said if line.startswith("DashScope throttles")]) == 1, "one line per wait, not per try"
    assert any(line.startswith("DashScope took the submit of") and "after 2 throttled" in line for line in said)


async def test_a_throttle_outlasting_the_wait_allowed_fails_the_call(fake: FakeDashScope) -> None:
    fake.script_error(
        "submit", 429, "Throttling.RateQuota", RATE_QUOTA_MESSAGE, times=50, headers={"Retry-After": "0.2"}
    )

    async with aclosing(make_generator(fake.base_url, throttle_wait_s=0.5)) as generator:
        with pytest.raises(GenerationThrottled, match=r"a call waits at most 0\.5 s") as caught:
            await call(generator, "character")

    assert caught.value.retry_after_s == pytest.approx(0.2)
    assert caught.value.failure_type is FailureType.GENERATION_THROTTLED and caught.value.failure_type.retryable
    assert 2 <= len(fake.submits()) <= 3 and fake.tasks == {}


async def test_throttled_polls_back_off_and_keep_the_task(fake: FakeDashScope) -> None:
    fake.script_error("task", 429, "Throttling", RATE_QUOTA_MESSAGE, times=3)
    attempt = Attempt()

    async with aclosing(make_generator(fake.base_url)) as generator:
        clip = await attempt.run(generator, "clip")

    (task_id,) = fake.tasks
    assert isinstance(clip, GeneratedClip) and clip.task_id == task_id and len(fake.submits()) == 1
    assert attempt.heartbeats and all(beat == {"role": "clip", "task_id": task_id} for beat in attempt.heartbeats)


async def test_polls_throttled_past_the_wait_allowed_fail_the_call_and_the_retry_resumes(
    fake: FakeDashScope,
) -> None:
    fake.script_error("task", 429, "Throttling", RATE_QUOTA_MESSAGE, times=2, headers={"Retry-After": "0.2"})
    async with aclosing(make_generator(fake.base_url, throttle_wait_s=0.3)) as generator:
        first = Attempt()
        with pytest.raises(GenerationThrottled):
            await first.run(generator, "clip")
        (task_id,) = fake.tasks
        assert first.heartbeats[-1] == {"role": "clip", "task_id": task_id}, "the paid task is kept"

        clip = await Attempt(first).run(generator, "clip")

    assert isinstance(clip, GeneratedClip) and clip.task_id == task_id and len(fake.submits()) == 1


async def test_a_submit_whose_answer_is_lost_is_retried_and_may_pay_twice(
    fake: FakeDashScope, caplog: pytest.LogCaptureFixture
) -> None:
    # The window the provider leaves: the task exists, its id never came back, and nothing can find it.
    caplog.set_level(logging.WARNING, logger=API_LOGGER)
    fake.lose_answers()
    async with aclosing(make_generator(fake.base_url)) as generator:
        first = Attempt()
        with pytest.raises(GenerationError, match="the request was sent, so DashScope may have created") as caught:
            await first.run(generator, "character")
        assert type(caught.value) is GenerationError and caught.value.failure_type.retryable
        assert first.heartbeats == []

        await Attempt(first).run(generator, "character")

    assert len(fake.tasks) == 2
    assert "may have created (and may bill) a task left unknown" in caplog.text


# --- The key stays with the API ------------------------------------------------------------------------------------


async def test_the_key_is_never_sent_to_the_result_host_nor_logged(
    fake: FakeDashScope, generator: DashScopeGenerator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for role in ROLES:
        await Attempt().run(generator, role)
    fake.script_error("task", 401, "InvalidApiKey", "Invalid API-key provided.")
    with pytest.raises(GenerationRefused) as caught:
        await call(generator, "clip")

    api_calls = fake.submits() + fake.polls()
    assert api_calls and all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in api_calls)
    downloads = fake.downloads()
    assert len(downloads) == 2 + 2 + 1 + 1
    assert all("authorization" not in r.headers and API_KEY not in str(r.headers) for r in downloads)
    assert not fake.base_url.startswith(fake.results_origin)  # the results are on another origin
    assert "submitted DashScope clip task" in caplog.text
    for text in (caplog.text, str(caught.value), repr(caught.value), repr(generator)):
        assert API_KEY not in text


# --- DashScope's text never carries a key into an error -----------------------------------------------------------


def unique_key(prefix: str) -> str:
    """A key no pattern of core.redact recognises (so only its registration redacts it), new to the process."""
    return f"{prefix}-{uuid.uuid4().hex}"


def test_the_settings_register_the_api_key() -> None:
    key = unique_key("ds")
    DashScopeSettings(_env_file=None, dashscope_api_key=SecretStr(key))

    assert redact(f"quoted {key}") == f"quoted {REDACTED}"


async def test_a_refusal_that_quotes_the_key_never_puts_it_in_the_error() -> None:
    wrong_key = unique_key("wrong")
    with FakeDashScope(api_key=API_KEY, quote_refused_key=True) as quoting:
        async with aclosing(make_generator(quoting.base_url, api_key=wrong_key)) as wrong:
            with pytest.raises(GenerationRefused) as caught:
                await call(wrong, "character")

    assert "InvalidApiKey: Invalid API-key provided: [redacted] (HTTP 401" in str(caught.value)
    assert wrong_key not in str(caught.value)


QUOTING_THE_KEY: dict[str, Callable[[FakeDashScope, str], None]] = {
    "an error answer": lambda fake, key: fake.script_error("submit", 400, "InvalidParameter", f"bad header {key}"),
    "a page that is not JSON": lambda fake, key: fake.script_not_json("submit", status=403, body=key.encode()),
    "a submit without a task id": lambda fake, key: fake.script_answer("submit", {"output": {"echo": key}}),
    "an answer without an output": lambda fake, key: fake.script_answer("submit", {"echo": key}),
    "a poll without a task status": lambda fake, key: fake.script_answer("task", {"output": {"echo": key}}),
    "a failed task": lambda fake, key: fake.script_task(TaskScript(failed=("InternalError", f"saw {key}"))),
    "an image left out": lambda fake, key: fake.script_task(
        TaskScript(image_failures={0: ("InternalError", f"saw {key}")})
    ),
}


@pytest.mark.parametrize("answer", QUOTING_THE_KEY)
async def test_every_dashscope_text_in_an_error_is_redacted(answer: str) -> None:
    key = unique_key("ds")
    with FakeDashScope(api_key=key) as fake:
        QUOTING_THE_KEY[answer](fake, key)
        async with aclosing(make_generator(fake.base_url, api_key=key)) as generator:
            with pytest.raises(GenerationError) as caught:
                await call(generator, "character")

    assert key not in str(caught.value) and REDACTED in str(caught.value)


# --- A real retry on a real Temporal server ------------------------------------------------------------------------


class ClipRun(BaseModel):
    task_id: str | None
    size: int
    attempt: int


class ClipActivity:
    """A ``generate_clip``-like activity: the generator's clip of a fixed start frame."""

    def __init__(self, generator: DashScopeGenerator) -> None:
        self.generator = generator

    @activity.defn(name="dashscope_test_clip")
    async def clip(self, request: GenerateClipInput) -> ClipRun:
        try:
            clip = await self.generator.clip(request, CHARACTER_PNG)
        except GenerationError as err:
            raise err.failure_type.error(str(err)) from err
        return ClipRun(task_id=clip.task_id, size=len(clip.data), attempt=activity.info().attempt)


@workflow.defn(name="DashScopeTestClip", sandboxed=False)
class ClipWorkflow:
    @workflow.run
    async def run(self, request: GenerateClipInput) -> ClipRun:
        return await workflow.execute_activity(
            "dashscope_test_clip",
            request,
            result_type=ClipRun,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=3),
        )


@pytest.mark.parametrize(
    ("script", "submits"),
    [
        (TaskScript(cut_short=1), 1),  # the retry downloads the same task's clip again
        (TaskScript(failed=("InternalError", "An internal error has occured.")), 2),  # the retry submits anew
    ],
)
async def test_a_real_retry_resumes_or_replaces_the_clip_task(
    dev_server: WorkflowEnvironment, fake: FakeDashScope, script: TaskScript, submits: int
) -> None:
    fake.script_task(script)
    queue = f"dashscope-{uuid.uuid4().hex[:8]}"
    async with aclosing(make_generator(fake.base_url)) as generator:
        worker = Worker(
            dev_server.client,
            task_queue=queue,
            workflows=[ClipWorkflow],
            activities=[ClipActivity(generator).clip],
            workflow_runner=UnsandboxedWorkflowRunner(),
        )
        async with worker:
            run = await dev_server.client.execute_workflow(ClipWorkflow.run, clip_request(), id=queue, task_queue=queue)

    assert len(fake.submits()) == submits
    last_task = list(fake.tasks)[-1]
    assert run == ClipRun(task_id=last_task, size=len(clip_mp4(fake.tasks[last_task].seed)), attempt=2)


class CharacterActivity:
    """A ``generate_character``-like activity that heartbeats before its call, so the worker holds its next
    heartbeat for the worker's throttle interval."""

    def __init__(self, generator: DashScopeGenerator) -> None:
        self.generator = generator

    @activity.defn(name="dashscope_test_character")
    async def character(self, request: GenerateCharacterInput) -> int:
        activity.heartbeat("started")
        return len(await self.generator.character(request))


@workflow.defn(name="DashScopeTestCharacter", sandboxed=False)
class CharacterWorkflow:
    @workflow.run
    async def run(self, request: GenerateCharacterInput) -> int:
        return await workflow.execute_activity(
            "dashscope_test_character",
            request,
            result_type=int,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(minutes=2),
        )


async def test_the_task_id_is_on_the_server_before_the_first_poll(
    dev_server: WorkflowEnvironment, fake: FakeDashScope
) -> None:
    # The worker's heartbeat throttle is 60 s and a heartbeat went just before the submit: only the direct
    # RecordActivityTaskHeartbeat can have put the new task id on the server by the time the first poll is made.
    client = dev_server.client
    queue = f"dashscope-{uuid.uuid4().hex[:8]}"
    fake.hold("task")
    async with aclosing(make_generator(fake.base_url)) as generator:
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[CharacterWorkflow],
            activities=[CharacterActivity(generator).character],
            workflow_runner=UnsandboxedWorkflowRunner(),
            max_heartbeat_throttle_interval=timedelta(seconds=60),
            default_heartbeat_throttle_interval=timedelta(seconds=60),
        )
        async with worker:
            handle = await client.start_workflow(CharacterWorkflow.run, character_request(), id=queue, task_queue=queue)
            async with asyncio.timeout(30):
                while fake.waiting("task") == 0:
                    await asyncio.sleep(0.01)
            (task_id,) = fake.tasks
            (pending,) = (await handle.describe()).raw_description.pending_activities
            details = await client.data_converter.decode(pending.heartbeat_details.payloads)
            fake.release("task")
            assert await handle.result() == 2

    assert details == [{"role": "character", "task_id": task_id}]


async def test_an_activity_refused_for_its_key_leaves_no_key_in_the_history(dev_server: WorkflowEnvironment) -> None:
    wrong_key = unique_key("wrong")
    address = dev_server.client.service_client.config.target_host
    client = await connect(TemporalSettings(_env_file=None, temporal_address=address))
    queue = f"dashscope-{uuid.uuid4().hex[:8]}"
    with FakeDashScope(api_key=API_KEY, quote_refused_key=True) as quoting:
        async with aclosing(make_generator(quoting.base_url, api_key=wrong_key)) as generator:
            worker = Worker(
                client,
                task_queue=queue,
                workflows=[ClipWorkflow],
                activities=[ClipActivity(generator).clip],
                workflow_runner=UnsandboxedWorkflowRunner(),
            )
            async with worker:
                handle = await client.start_workflow(ClipWorkflow.run, clip_request(), id=queue, task_queue=queue)
                with pytest.raises(WorkflowFailureError):
                    await handle.result()

    history = (await handle.fetch_history()).to_json()
    assert "Invalid API-key provided: [redacted]" in history
    assert wrong_key not in history
