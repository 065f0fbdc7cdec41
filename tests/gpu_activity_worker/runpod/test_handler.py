"""The RunPod handler called as RunPod's worker loop calls it: ``await handler({"id", "input"})`` -> output or error."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from core.artifacts import ArtifactStore, FileArtifactStore
from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepContext, StepRole
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.runpod.handler import MattingHandler
from gpu_activity_worker.runpod.jobs import INLINE_SCHEME, MatteJobOutput, parse_job_error
from testkit.images import sticker_png
from workflows.contract import ArtifactRef, FailureType, MatteFrameInput, PipelineDescription

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
    source: ArtifactRef, pipeline: str = "classical", *, output_key: str = "sets/s/wave/0/0/matte.png", **extra: Any
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
    source = store.put("sets/s/wave/0/0/source.png", sticker_png(), "image/png", width=64, height=64)

    output = MatteJobOutput.model_validate(await handler.handle(matte_job(source)))

    assert output.inline_matte is None
    assert output.result.pipeline == "classical" and output.result.device == "cpu"
    assert output.result.matte.uri.endswith("sets/s/wave/0/0/matte.png")
    with Image.open(io.BytesIO(store.get(output.result.matte))) as matte:
        alpha = np.asarray(matte.convert("RGBA"))[..., 3]
    assert alpha[32, 32] == 255 and alpha[0, 0] == 0


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
    sticker = store.put("sticker.png", sticker_png(), "image/png")
    corrupt = store.put("corrupt.png", b"not an image", "image/png")
    noise = store.put("noise.png", noise_png(), "image/png")
    missing = sticker.model_copy(update={"uri": (Path(store.root) / "gone.png").as_uri()})

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
    assert output.result.matte.uri == f"{INLINE_SCHEME}sets/s/wave/0/0/matte.png"
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


@dataclass
class MeetingStep:
    """A stand-in coarse step that lets frames through only together: all ``meet.parties`` of them at once, or none.

    Frames that do not run at the same time never meet: the barrier times out and their jobs fail.
    """

    meet: threading.Barrier
    device: str = "cpu"
    precision: str = "fp32"
    threads: list[str] = field(default_factory=list)

    def apply(self, state: MatteState) -> MatteState:
        self.threads.append(threading.current_thread().name)
        self.meet.wait()
        return MatteState(image=state.image, alpha=np.ones(state.image.shape[:2], dtype=np.float32))


async def test_the_worker_loop_takes_as_many_jobs_as_the_handler_has_threads(
    handler: MattingHandler, store: FileArtifactStore, steps: StepRegistry
) -> None:
    jobs = handler.concurrency(1)
    assert jobs == 2, "the handler fixture runs two jobs at once"
    step = MeetingStep(threading.Barrier(jobs, timeout=30))
    steps.register(StepSpec("meeting", StepRole.COARSE, lambda variant, context: step))
    source = store.put("sticker.png", sticker_png(), "image/png", width=64, height=64)

    results = await asyncio.gather(
        *(handler.handle(matte_job(source, "meeting", output_key=f"meeting/{job}.png")) for job in range(jobs))
    )

    assert all("error" not in result for result in results), f"the jobs did not all run at once: {results}"
    assert [MatteJobOutput.model_validate(result).result.pipeline for result in results] == ["meeting"] * jobs
    assert len(set(step.threads)) == jobs and all(name.startswith("runpod-job") for name in step.threads), (
        "each job ran on a thread of the handler's own pool"
    )
