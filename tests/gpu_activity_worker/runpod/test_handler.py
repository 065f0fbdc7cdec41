"""The RunPod handler called as RunPod's worker loop calls it: ``await handler({"id", "input"})`` -> output or error.

The worker loop runs the jobs a worker holds side by side, each as its own ``handle`` call: several here are
``asyncio.gather``-ed, and a stopped job is a cancelled call."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from core.artifacts import ArtifactStore, FileArtifactStore
from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import StepContext, StepRole
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.runpod.handler import MattingHandler
from gpu_activity_worker.runpod.jobs import INLINE_SCHEME, MatteJobOutput, MatteSlotJobOutput, parse_job_error
from testkit.held_step import HeldStep
from testkit.images import sticker_png
from testkit.set_keys import matte_key, source_key
from workflows.contract import ArtifactRef, FailureType, MatteFrameInput, MatteSlotInput, PipelineDescription

INLINE_LIMIT = 4_000_000


def noise_png(size: int = 64) -> bytes:
    """No plain background anywhere: the classical pipeline cannot handle it."""
    rgb = np.random.default_rng(7).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buffer, format="PNG")
    return buffer.getvalue()


class NoStore:
    """A store no inline job may touch."""

    def get(self, ref: ArtifactRef) -> bytes:
        raise AssertionError(f"an inline job read {ref.uri} from the store")

    def find(self, key: str) -> bytes | None:
        raise AssertionError(f"an inline job looked for {key} in the store")

    def key_of(self, ref: ArtifactRef) -> str | None:
        raise AssertionError(f"an inline job located {ref.uri} in the store")

    def put(
        self, key: str, data: bytes, media_type: str, *, width: int | None = None, height: int | None = None
    ) -> ArtifactRef:
        raise AssertionError(f"an inline job wrote {key} to the store")


@pytest.fixture
def store(tmp_path: Path) -> FileArtifactStore:
    return FileArtifactStore(tmp_path / "artifacts")


def handler_for(
    store: ArtifactStore, *, inline_max_bytes: int = INLINE_LIMIT, steps: StepRegistry | None = None
) -> Iterator[MattingHandler]:
    pipelines = Pipelines(builtin_steps() if steps is None else steps, StepContext(device="cpu"))
    handler = MattingHandler(store, pipelines, concurrency=2, inline_max_bytes=inline_max_bytes)
    yield handler
    handler.close()


@pytest.fixture
def steps() -> StepRegistry:
    """The handler fixture's steps: a test may add stand-ins before its first job."""
    return builtin_steps()


@pytest.fixture
def handler(store: FileArtifactStore, steps: StepRegistry) -> Iterator[MattingHandler]:
    yield from handler_for(store, steps=steps)


def matte_job(
    source: ArtifactRef, pipeline: str = "classical", *, output_key: str = matte_key(0), **extra: Any
) -> dict[str, Any]:
    request = MatteFrameInput(source=source, output_key=output_key, pipeline=pipeline)
    return {"id": "job-1", "input": {"op": "matte", "request": request.model_dump(mode="json"), **extra}}


def error_type(result: dict[str, Any]) -> FailureType:
    assert set(result) == {"error"}, result
    assert isinstance(result["error"], str), "RunPod needs a string error (a list gives HTTP 500 at job-done)"
    return parse_job_error(result["error"])[0]


async def test_a_matte_job_stores_the_cut_out_and_returns_the_activity_result(
    handler: MattingHandler, store: FileArtifactStore
) -> None:
    source = store.put(source_key("source.png"), sticker_png(), "image/png", width=64, height=64)

    output = MatteJobOutput.model_validate(await handler.handle(matte_job(source)))

    assert output.inline_matte is None
    assert output.result.pipeline == "classical" and output.result.device == "cpu"
    assert output.result.matte.uri.endswith(matte_key(0))
    with Image.open(io.BytesIO(store.get(output.result.matte))) as matte:
        alpha = np.asarray(matte.convert("RGBA"))[..., 3]
    assert alpha[32, 32] == 255 and alpha[0, 0] == 0


@pytest.mark.parametrize(
    "output_key",
    [
        "sets/victim/character/candidate-00.png",  # another set's character
        "sets/victim/wave/frame-000/candidate-00.source.png",  # a frame edit's source
        "sets/victim/packages/line-emoji/line-emoji.zip",
        "sets/test-set/../victim/wave/frame-000/candidate-00.matte.png",
        "uploads/" + "0" * 64,
    ],
)
async def test_a_job_cannot_write_anything_but_a_cut_out_of_its_sources_set(
    handler: MattingHandler, store: FileArtifactStore, output_key: str
) -> None:
    victim = store.put("sets/victim/character/candidate-00.png", sticker_png(), "image/png")
    source = store.put(source_key("source.png"), sticker_png(), "image/png", width=64, height=64)
    job = {
        "id": "job-x",
        "input": {
            "op": "matte",
            "request": {"source": source.model_dump(mode="json"), "output_key": output_key, "pipeline": "classical"},
        },
    }

    result = await handler.handle(job)

    assert error_type(result) is FailureType.INVALID_REQUEST
    assert "output_key" in result["error"]
    assert store.get(victim) == sticker_png(), "the other set's file is untouched"


async def test_a_job_cannot_write_a_cut_out_into_another_set_than_its_sources(
    handler: MattingHandler, store: FileArtifactStore
) -> None:
    source = store.put(source_key("source.png", "victim"), sticker_png(), "image/png", width=64, height=64)

    result = await handler.handle(matte_job(source, output_key=matte_key(0, set_id="attacker")))

    assert error_type(result) is FailureType.FOREIGN_ARTIFACT
    assert store.find(matte_key(0, set_id="attacker")) is None


async def test_a_describe_job_builds_the_pipeline_where_it_runs(handler: MattingHandler) -> None:
    result = await handler.handle({"id": "job-2", "input": {"op": "describe", "request": {"pipeline": "classical"}}})

    assert PipelineDescription.model_validate(result) == PipelineDescription(
        pipeline="classical", steps=["floodfill", "defringe"], device="cpu", precision="fp32"
    )


@pytest.mark.parametrize(
    "job_input",
    [
        None,
        {"request": {"pipeline": "classical"}},
        {"op": "paint", "request": {"pipeline": "classical"}},
        {"op": "describe", "request": {"pipeline": "classical"}, "priority": 1},
        {"op": "matte", "request": {"output_key": "k", "pipeline": "classical"}},
    ],
    ids=["no-input", "no-op", "unknown-op", "unknown-field", "missing-source"],
)
async def test_an_input_outside_the_contract_fails_as_invalid_request(
    handler: MattingHandler, job_input: object
) -> None:
    result = await handler.handle({"id": "job-3", "input": job_input})

    assert error_type(result) is FailureType.INVALID_REQUEST and not FailureType.INVALID_REQUEST.retryable


async def test_failures_keep_their_type_so_the_dispatcher_knows_which_a_retry_cannot_fix(
    handler: MattingHandler, store: FileArtifactStore
) -> None:
    sticker = store.put(source_key("sticker.png"), sticker_png(), "image/png")
    corrupt = store.put(source_key("corrupt.png"), b"not an image", "image/png")
    noise = store.put(source_key("noise.png"), noise_png(), "image/png")
    missing = sticker.model_copy(update={"uri": (Path(store.root) / source_key("gone.png")).as_uri()})

    cases = {
        "UnknownPipeline": matte_job(sticker, pipeline="no-such-engine"),
        "CorruptImage": matte_job(corrupt),
        "UnsupportedImage": matte_job(noise),
        "ArtifactError": matte_job(missing),
    }
    types = {expected: error_type(await handler.handle(job)) for expected, job in cases.items()}

    assert types == {expected: expected for expected in cases}
    assert [kind for kind in types if not FailureType(kind).retryable] == [
        "UnknownPipeline",
        "CorruptImage",
        "UnsupportedImage",
    ], "a missing artifact may appear on retry; the others never change"


async def test_an_inline_job_brings_its_source_and_takes_its_matte_back_without_a_store() -> None:
    data = sticker_png()
    source = ArtifactRef(
        uri="file:///dispatcher/only/source.png",
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        media_type="image/png",
    )
    for handler in handler_for(NoStore()):
        result = await handler.handle(matte_job(source, inline_source=base64.b64encode(data).decode()))

    output = MatteJobOutput.model_validate(result)
    assert output.inline_matte is not None
    matte = base64.b64decode(output.inline_matte)
    assert output.result.matte.uri == f"{INLINE_SCHEME}{matte_key(0)}"
    assert output.result.matte.sha256 == hashlib.sha256(matte).hexdigest()
    assert output.result.matte.size_bytes == len(matte) and output.result.matte.width == 64
    with Image.open(io.BytesIO(matte)) as image:
        assert image.mode == "RGBA" and image.size == (64, 64)


async def test_inline_images_over_the_limit_fail_for_good_with_a_clear_message() -> None:
    data = sticker_png()
    encoded = base64.b64encode(data).decode()
    source = ArtifactRef(
        uri="file:///dispatcher/source.png",
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        media_type="image/png",
    )

    for handler in handler_for(NoStore(), inline_max_bytes=len(encoded) - 1):
        too_big_in = await handler.handle(matte_job(source, inline_source=encoded))
    for handler in handler_for(NoStore(), inline_max_bytes=len(encoded)):
        too_big_out = await handler.handle(matte_job(source, inline_source=encoded))

    assert error_type(too_big_in) == "UnsupportedImage" and "inline limit" in too_big_in["error"]
    assert error_type(too_big_out) == "UnsupportedImage", "the RGBA matte is larger than its RGB source"
    assert "the matte of file:///dispatcher/source.png" in too_big_out["error"]
    assert "s3://" in too_big_out["error"], "the message says how to get past the limit"


async def test_inline_bytes_that_do_not_match_the_reference_are_rejected() -> None:
    data = sticker_png()
    source = ArtifactRef(uri="file:///s.png", sha256="0" * 64, size_bytes=len(data), media_type="image/png")
    for handler in handler_for(NoStore()):
        result = await handler.handle(matte_job(source, inline_source=base64.b64encode(data).decode()))
        garbled = await handler.handle(matte_job(source, inline_source="not base64!"))

    assert error_type(result) == "ArtifactError"
    assert error_type(garbled) == "CorruptImage"


# --- Slot jobs: several candidates, one result each -----------------------------------------------------------------


def slot_job(sources: list[ArtifactRef], pipeline: str = "classical", **extra: Any) -> dict[str, Any]:
    request = MatteSlotInput(
        pipeline=pipeline, candidates=sources, output_keys=[matte_key(i) for i in range(len(sources))]
    )
    return {"id": "slot-job", "input": {"op": "matte_slot", "request": request.model_dump(mode="json"), **extra}}


async def test_a_slot_job_gives_each_candidate_its_own_result(
    handler: MattingHandler, store: FileArtifactStore
) -> None:
    sticker = store.put(source_key("sticker.png"), sticker_png(), "image/png", width=64, height=64)
    corrupt = store.put(source_key("corrupt.png"), b"not an image", "image/png")
    noise = store.put(source_key("noise.png"), noise_png(), "image/png")

    output = MatteSlotJobOutput.model_validate(await handler.handle(slot_job([sticker, corrupt, noise, sticker])))

    assert [result.failure for result in output.results] == [
        None,
        FailureType.CORRUPT_IMAGE,
        FailureType.UNSUPPORTED_IMAGE,
        None,
    ], "a failure no retry fixes is that candidate's own; the others are matted"
    assert output.inline_mattes is None
    for index in (0, 3):
        matte = output.results[index].output
        assert matte is not None and matte.matte.uri.endswith(matte_key(index))
        store.get(matte.matte)


async def test_a_slot_job_fails_whole_for_a_failure_a_retry_may_fix(
    handler: MattingHandler, store: FileArtifactStore
) -> None:
    sticker = store.put(source_key("sticker.png"), sticker_png(), "image/png")
    missing = sticker.model_copy(update={"uri": (Path(store.root) / source_key("gone.png")).as_uri()})

    result = await handler.handle(slot_job([sticker, missing]))

    assert error_type(result) == "ArtifactError", "the dispatcher retries the job's candidates"


async def test_an_inline_slot_job_brings_its_sources_and_takes_each_matte_back() -> None:
    small, large = sticker_png(32), sticker_png(96)
    sources = [
        ArtifactRef(
            uri=f"file:///dispatcher/{i}.png",
            sha256=hashlib.sha256(data).hexdigest(),
            size_bytes=len(data),
            media_type="image/png",
        )
        for i, data in enumerate((small, large))
    ]
    encoded = [base64.b64encode(data).decode() for data in (small, large)]
    limit = len(encoded[1])  # the large source fits, its RGBA matte does not

    for handler in handler_for(NoStore(), inline_max_bytes=limit):
        output = MatteSlotJobOutput.model_validate(await handler.handle(slot_job(sources, inline_sources=encoded)))

    assert output.inline_mattes is not None and output.inline_mattes[1] is None
    matte = base64.b64decode(output.inline_mattes[0] or "")
    first = output.results[0].output
    assert first is not None and first.matte.uri == f"{INLINE_SCHEME}{matte_key(0)}"
    assert first.matte.sha256 == hashlib.sha256(matte).hexdigest()
    assert output.results[1].failure is FailureType.UNSUPPORTED_IMAGE, "the matte over the limit fails only itself"
    assert "inline limit" in (output.results[1].error or "")


# --- Jobs held at once, one on the GPU ------------------------------------------------------------------------------


def coloured_png(red: int) -> bytes:
    """A flat image whose red value names it in :class:`HeldStep`'s record."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (red, 0, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


class CountingStore(FileArtifactStore):
    """A file store that counts the sources read."""

    reads = 0

    def get(self, ref: ArtifactRef) -> bytes:
        self.reads += 1
        return super().get(ref)


@pytest.fixture
def held(steps: StepRegistry) -> HeldStep:
    """The ``held`` step: the test lets each image leave the GPU (:class:`HeldStep`)."""
    step = HeldStep()
    steps.register(StepSpec("held", StepRole.COARSE, lambda variant, context: step))
    return step


async def until(condition: Any) -> None:
    async with asyncio.timeout(20):
        while not condition():
            await asyncio.sleep(0.01)


async def test_jobs_held_at_once_read_their_sources_while_one_runs_on_the_gpu(
    tmp_path: Path, steps: StepRegistry, held: HeldStep
) -> None:
    store = CountingStore(tmp_path / "counting")
    sources = [store.put(source_key(f"{red}.png"), coloured_png(red), "image/png") for red in (10, 20)]
    for handler in handler_for(store, steps=steps):
        assert handler.concurrency(1) == 2, "the worker loop holds two jobs"
        jobs = [
            asyncio.create_task(handler.handle(matte_job(source, "held", output_key=matte_key(i))))
            for i, source in enumerate(sources)
        ]

        await until(lambda: store.reads == 2 and held.running == 1)
        assert len(held.entered) == 1, "the second job has its source and waits for the GPU"
        held.release.release()
        await until(lambda: len(held.entered) == 2)
        held.release.release()
        results = await asyncio.gather(*jobs)

    assert all("error" not in result for result in results), results
    assert held.peak == 1, "one job's frames on the GPU at a time"


async def test_a_job_stopped_while_it_waits_for_the_gpu_gives_its_turn_up(
    tmp_path: Path, steps: StepRegistry, held: HeldStep
) -> None:
    store = CountingStore(tmp_path / "counting")
    first, stopped, after = (
        store.put(source_key(f"{red}.png"), coloured_png(red), "image/png") for red in (10, 20, 30)
    )
    for handler in handler_for(store, steps=steps):
        running = asyncio.create_task(handler.handle(slot_job([first], "held")))
        await until(lambda: held.running == 1)
        waiting = asyncio.create_task(handler.handle(slot_job([stopped], "held")))
        await until(lambda: store.reads == 2)  # read: on its way to the GPU, or waiting there
        waiting.cancel()  # what RunPod's worker loop does to a job it is told to stop
        with pytest.raises(asyncio.CancelledError):
            await waiting
        held.release.release()
        assert "error" not in await running
        following = asyncio.create_task(handler.handle(slot_job([after], "held")))
        await until(lambda: held.running == 1)
        held.release.release()
        assert "error" not in await following

    assert held.entered == [10, 30], "the stopped job never ran; the next one took the GPU after the first"
