"""The DashScope backend against a local stand-in of the service (testkit/dashscope_standin.py)."""

from __future__ import annotations

import dataclasses
import email.utils
import io
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any

import pytest
from PIL import Image
from pydantic import SecretStr
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from activities.generation.base import GeneratedImage, GenerationError, GenerationRefused, GenerationThrottled
from activities.generation.dashscope import (
    BACKGROUND_PROMPT,
    MAX_PROMPT_CHARS,
    MAX_SEED,
    DashScopeGenerator,
    build_prompt,
    candidate_seed,
    create_dashscope_generator,
    generation_edge,
)
from activities.settings import DashScopeSettings
from testkit.dashscope_standin import Endpoint, FakeDashScope, seed_colour
from workflows.contract import GenerateFrameInput
from workflows.presets import PRESETS

API_KEY = "sk-test-5f2b8c91d04e4a7e9a1c"
MODEL = "wan2.2-t2i-flash"


def frame_request(**overrides: Any) -> GenerateFrameInput:
    values: dict[str, Any] = {
        "set_id": "set-1",
        "pose": PRESETS["wave"],
        "character_prompt": "a round orange cat with a blue scarf",
        "style": "flat cartoon sticker",
        "prompt": "a round orange cat with a blue scarf, waving hello with one hand, friendly smile",
        "frame": 3,
        "frame_count": 12,
        "first_candidate": 0,
        "count": 2,
        "generator": "dashscope",
        "image_size": 64,
        "seed": 42,
    }
    return GenerateFrameInput(**{**values, **overrides})


def make_generator(base_url: str, *, api_key: str | None = API_KEY, timeout_s: float = 10.0) -> DashScopeGenerator:
    return DashScopeGenerator(
        api_key=None if api_key is None else SecretStr(api_key),
        base_url=base_url,
        model=MODEL,
        poll_interval_s=0.01,
        timeout_s=timeout_s,
    )


@pytest.fixture
def fake() -> Iterator[FakeDashScope]:
    with FakeDashScope(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def generator(fake: FakeDashScope) -> AsyncIterator[DashScopeGenerator]:
    async with aclosing(make_generator(fake.base_url)) as built:
        yield built


def centre_colour(image: GeneratedImage) -> tuple[int, ...]:
    with Image.open(io.BytesIO(image.data)) as decoded:
        pixel = decoded.convert("RGB").getpixel((image.width // 2, image.height // 2))
    assert isinstance(pixel, tuple)
    return pixel


def same_colour(actual: tuple[int, ...], expected: tuple[int, int, int]) -> bool:
    return all(abs(a - e) <= 2 for a, e in zip(actual, expected, strict=True))


class Attempt:
    """One attempt of a tiny activity calling ``generate``, with the heartbeat details of the previous attempt."""

    def __init__(self, generator: DashScopeGenerator, heartbeat_details: list[Any]) -> None:
        self.generator = generator
        self.env = ActivityEnvironment()
        self.env.info = dataclasses.replace(self.env.info, heartbeat_details=heartbeat_details)
        self.heartbeats: list[Any] = []
        self.env.on_heartbeat = lambda *details: self.heartbeats.append(details[0])

    async def run(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        @activity.defn(name="generate_frame")
        async def generate_frame(request: GenerateFrameInput) -> list[GeneratedImage]:
            return await self.generator.generate(request)

        return await self.env.run(generate_frame, request)


# --- Happy path ----------------------------------------------------------------------------------------------------


async def test_generates_the_candidates_end_to_end(fake: FakeDashScope, generator: DashScopeGenerator) -> None:
    request = frame_request(count=2, image_size=128)

    images = await generator.generate(request)

    (submit,) = fake.submits()
    assert submit.headers["authorization"] == f"Bearer {API_KEY}"
    assert submit.headers["x-dashscope-async"] == "enable"
    assert submit.headers["content-type"] == "application/json"
    assert submit.body["model"] == MODEL
    prompt = submit.body["input"]["prompt"]
    assert prompt.startswith(request.prompt)
    assert "Style: flat cartoon sticker." in prompt
    assert prompt.endswith(BACKGROUND_PROMPT)
    assert "text" in submit.body["input"]["negative_prompt"]
    seed = candidate_seed(42, 3, 0)
    assert submit.body["parameters"] == {
        "size": "1024*1024",
        "n": 2,
        "seed": seed,
        "prompt_extend": False,
        "watermark": False,
    }
    polls = fake.polls()
    assert len(polls) == 3  # PENDING, RUNNING, SUCCEEDED
    assert all(poll.headers["authorization"] == f"Bearer {API_KEY}" for poll in polls)
    downloads = fake.downloads()
    assert len(downloads) == 2
    assert all("authorization" not in download.headers for download in downloads)

    assert len(images) == 2
    for index, image in enumerate(images):
        assert (image.media_type, image.width, image.height) == ("image/png", 128, 128)
        with Image.open(io.BytesIO(image.data)) as decoded:
            assert (decoded.format, decoded.size) == ("PNG", (128, 128))
        assert same_colour(centre_colour(image), seed_colour(seed + index))


async def test_more_candidates_than_a_task_makes_are_split(fake: FakeDashScope, generator: DashScopeGenerator) -> None:
    images = await generator.generate(frame_request(count=6, first_candidate=2))

    parameters = [submit.body["parameters"] for submit in fake.submits()]
    assert [(p["n"], p["seed"]) for p in parameters] == [(4, candidate_seed(42, 3, 2)), (2, candidate_seed(42, 3, 6))]
    assert len(images) == 6
    for index, image in enumerate(images):
        assert same_colour(centre_colour(image), seed_colour(candidate_seed(42, 3, 2 + index)))


def test_seeds_are_deterministic_and_consecutive_per_candidate() -> None:
    seed = candidate_seed(7, 5, 0)
    assert seed == candidate_seed(7, 5, 0)
    assert 0 <= seed <= MAX_SEED
    assert candidate_seed(7, 5, 3) == (seed + 3) % (MAX_SEED + 1)
    assert len({seed, candidate_seed(7, 6, 0), candidate_seed(8, 5, 0)}) == 3


@pytest.mark.parametrize(("image_size", "edge"), [(64, 1024), (256, 1024), (1024, 1024), (1200, 1200), (2048, 1440)])
def test_generation_size_is_the_nearest_the_model_supports(image_size: int, edge: int) -> None:
    assert generation_edge(image_size) == edge


def test_long_prompts_are_cut_before_the_background_instruction() -> None:
    prompt = build_prompt(frame_request(prompt="a very detailed cat " * 40))

    assert len(prompt) <= MAX_PROMPT_CHARS
    assert prompt.startswith("a very detailed cat")
    assert prompt.endswith(BACKGROUND_PROMPT)


async def test_factory_builds_from_the_dashscope_settings(fake: FakeDashScope, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPCON_DASHSCOPE_API_KEY", API_KEY)
    monkeypatch.setenv("POPCON_DASHSCOPE_BASE_URL", fake.base_url)
    monkeypatch.setenv("POPCON_DASHSCOPE_POLL_INTERVAL_S", "0.01")
    monkeypatch.setenv("POPCON_DASHSCOPE_TIMEOUT_S", "5")
    monkeypatch.delenv("POPCON_DASHSCOPE_MODEL", raising=False)
    built = create_dashscope_generator()
    assert isinstance(built, DashScopeGenerator)
    async with aclosing(built):
        assert built.name == "dashscope"
        images = await built.generate(frame_request(count=1))

    assert len(images) == 1
    assert fake.submits()[0].body["model"] == DashScopeSettings.model_fields["dashscope_model"].default


# --- Failures ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "status", "code", "expected"),
    [
        ("submit", 400, "DataInspectionFailed", GenerationRefused),
        ("submit", 400, "InvalidParameter", GenerationRefused),
        ("submit", 401, "InvalidApiKey", GenerationRefused),
        ("submit", 429, "Throttling", GenerationThrottled),
        ("submit", 429, "Throttling.RateQuota", GenerationThrottled),
        ("submit", 429, "Throttling.AllocationQuota", GenerationThrottled),
        ("submit", 500, "InternalError", GenerationError),
        ("submit", 503, "ServiceUnavailable", GenerationError),
        ("task", 500, "InternalError", GenerationError),
        ("task", 429, "Throttling.RateQuota", GenerationThrottled),
    ],
)
async def test_error_answers_map_to_exceptions(
    fake: FakeDashScope,
    generator: DashScopeGenerator,
    endpoint: Endpoint,
    status: int,
    code: str,
    expected: type[GenerationError],
) -> None:
    fake.script_error(endpoint, status, code, "scripted failure")

    with pytest.raises(GenerationError) as caught:
        await generator.generate(frame_request())

    assert type(caught.value) is expected
    assert caught.value.failure_type.retryable is (expected is not GenerationRefused)
    assert f"DashScope {code}: scripted failure (HTTP {status}" in str(caught.value)
    assert caught.value.retry_after_s is None


@pytest.mark.parametrize("delay_s", [7.0, 30.0])
async def test_throttling_carries_retry_after(
    fake: FakeDashScope, generator: DashScopeGenerator, delay_s: float
) -> None:
    # Retry-After is either delta-seconds or an HTTP date.
    retry_after = "7" if delay_s == 7.0 else email.utils.formatdate(time.time() + delay_s, usegmt=True)
    fake.script_error(
        "submit",
        429,
        "Throttling.RateQuota",
        "Requests rate limit exceeded, please try again later.",
        headers={"Retry-After": retry_after},
    )

    with pytest.raises(GenerationThrottled) as caught:
        await generator.generate(frame_request())

    assert caught.value.retry_after_s is not None
    assert delay_s - 2 <= caught.value.retry_after_s <= delay_s


async def test_throttled_submits_create_no_task_and_a_later_attempt_succeeds(
    fake: FakeDashScope, generator: DashScopeGenerator
) -> None:
    fake.script_error("submit", 429, "Throttling", "Requests throttling triggered.", times=2)

    for _ in range(2):
        with pytest.raises(GenerationThrottled):
            await generator.generate(frame_request())
    images = await generator.generate(frame_request())

    assert len(images) == 2
    assert len(fake.submits()) == 3
    assert len(fake.tasks) == 1


async def test_a_wrong_key_is_refused(fake: FakeDashScope) -> None:
    async with aclosing(make_generator(fake.base_url, api_key="sk-wrong-key-0000")) as wrong:
        with pytest.raises(GenerationRefused, match="InvalidApiKey") as caught:
            await wrong.generate(frame_request())

    assert "sk-wrong-key-0000" not in str(caught.value)


@pytest.mark.parametrize("api_key", [None, ""])
async def test_a_missing_key_is_refused_before_any_request(fake: FakeDashScope, api_key: str | None) -> None:
    async with aclosing(make_generator(fake.base_url, api_key=api_key)) as keyless:
        with pytest.raises(GenerationRefused, match="POPCON_DASHSCOPE_API_KEY"):
            await keyless.generate(frame_request())

    assert fake.requests == []


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        ("InternalError.Timeout", "An internal timeout error has occured during execution.", GenerationError),
        ("DataInspectionFailed", "Output data may contain inappropriate content.", GenerationRefused),
        ("InvalidParameter", "The size is not match the allowed size.", GenerationRefused),
    ],
)
async def test_a_failed_task_maps_by_its_code(
    fake: FakeDashScope, generator: DashScopeGenerator, code: str, message: str, expected: type[GenerationError]
) -> None:
    fake.task_failure = (code, message)

    with pytest.raises(GenerationError) as caught:
        await generator.generate(frame_request())

    assert type(caught.value) is expected
    assert f"DashScope {code}: {message} (task " in str(caught.value)


@pytest.mark.parametrize(
    ("code", "expected"),
    [("InternalError.Timeout", GenerationError), ("DataInspectionFailed", GenerationRefused)],
)
async def test_partial_results_name_the_missing_candidates(
    fake: FakeDashScope, generator: DashScopeGenerator, code: str, expected: type[GenerationError]
) -> None:
    fake.image_failures = {1: (code, "image failed")}

    with pytest.raises(GenerationError) as caught:
        await generator.generate(frame_request(count=3, first_candidate=4))

    assert type(caught.value) is expected
    assert "made 2 of 3 image(s); candidate 5: " + code + ": image failed" in str(caught.value)
    assert fake.downloads() == []


async def test_network_errors_are_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with aclosing(make_generator(f"http://127.0.0.1:{port}/api/v1")) as unreachable:
        with pytest.raises(GenerationError, match="ConnectError") as caught:
            await unreachable.generate(frame_request())

    assert caught.value.failure_type.retryable


async def test_a_task_that_never_finishes_times_out(fake: FakeDashScope) -> None:
    fake.never_finish = True

    async with aclosing(make_generator(fake.base_url, timeout_s=0.2)) as impatient:
        with pytest.raises(GenerationError, match=r"not finished after 0\.2s") as caught:
            await impatient.generate(frame_request())

    assert type(caught.value) is GenerationError
    assert len(fake.submits()) == 1


# --- Resuming from heartbeats ---------------------------------------------------------------------------------------


async def test_a_retried_attempt_resumes_the_heartbeated_task(fake: FakeDashScope) -> None:
    request = frame_request(count=6)
    fake.never_finish = True
    async with aclosing(make_generator(fake.base_url, timeout_s=0.2)) as impatient:
        first = Attempt(impatient, [])
        with pytest.raises(GenerationError, match="not finished"):
            await first.run(request)
    assert len(fake.tasks) == 2
    assert first.heartbeats[-1] == {"task_ids": dict(zip(("0", "4"), fake.tasks, strict=True))}

    fake.never_finish = False
    async with aclosing(make_generator(fake.base_url)) as patient:
        images = await Attempt(patient, [first.heartbeats[-1]]).run(request)

    assert len(images) == 6
    assert len(fake.submits()) == 2


async def test_an_expired_heartbeated_task_is_dropped_then_resubmitted(
    fake: FakeDashScope, generator: DashScopeGenerator
) -> None:
    request = frame_request()
    first = Attempt(generator, [])
    await first.run(request)
    fake.forget_tasks()

    second = Attempt(generator, [first.heartbeats[-1]])
    with pytest.raises(GenerationError, match="is UNKNOWN") as caught:
        await second.run(request)
    assert caught.value.failure_type.retryable
    assert second.heartbeats[-1] == {"task_ids": {}}

    images = await Attempt(generator, [second.heartbeats[-1]]).run(request)
    assert len(images) == 2
    assert len(fake.submits()) == 2


async def test_a_retryably_failed_task_is_not_resumed(fake: FakeDashScope, generator: DashScopeGenerator) -> None:
    fake.task_failure = ("InternalError", "An internal error has occured, please try again later.")
    first = Attempt(generator, [])
    with pytest.raises(GenerationError):
        await first.run(frame_request())
    assert first.heartbeats[-1] == {"task_ids": {}}

    fake.task_failure = None
    await Attempt(generator, [first.heartbeats[-1]]).run(frame_request())
    assert len(fake.submits()) == 2


# --- The key stays secret -------------------------------------------------------------------------------------------


async def test_the_key_never_appears_in_logs_or_errors(
    fake: FakeDashScope, generator: DashScopeGenerator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await Attempt(generator, []).run(frame_request())
    fake.script_error("task", 401, "InvalidApiKey", "Invalid API-key provided.")
    with pytest.raises(GenerationRefused) as caught:
        await generator.generate(frame_request())

    assert "submitted DashScope task" in caplog.text
    for text in (caplog.text, str(caught.value), repr(caught.value), repr(generator)):
        assert API_KEY not in text
