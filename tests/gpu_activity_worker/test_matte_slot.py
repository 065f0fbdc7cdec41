"""The ``matte_slot`` activity of the GPU worker: every candidate of a frame slot in one GPU turn, batched where the
engine batches, each candidate's failure its own; and the lanes that run a slot's candidates side by side."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from core.artifacts import FileArtifactStore
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.batching import Lanes
from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepContext, StepRole
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.vocabulary import MattingError, UnsupportedImageError
from testkit.held_step import HeldStep
from testkit.images import sticker_png
from testkit.set_keys import matte_key, source_key
from workflows.contract import FailureType, MatteSlotInput, MatteSlotOutput

FILL_BY_COUNT_MS = 10_000.0
"""A batch wait so long that batches close by count, never by timeout (a bug shows as a 10 s stall, not a hang)."""
UNSUPPORTED_RED = 200
"""A flat image of this red value is one the stand-in steps cannot handle (for good)."""
FLAKY_RED = 201
"""A flat image of this red value makes the stand-in steps fail in a way a retry may fix."""


def _flat(red: int, size: int = 16) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (red, 0, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


def _noise() -> bytes:
    """No plain background anywhere: the classical pipeline cannot handle it."""
    rgb = np.random.default_rng(7).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def _slot(store: FileArtifactStore, images: list[bytes], pipeline: str) -> MatteSlotInput:
    """A slot of one candidate per image, each stored under a key of its own."""
    slot = f"slot-{uuid.uuid4().hex[:8]}"
    sources = [store.put(source_key(f"{i}.png", slot), data, "image/png") for i, data in enumerate(images)]
    keys = [matte_key(i, set_id=slot) for i in range(len(images))]
    return MatteSlotInput(pipeline=pipeline, candidates=sources, output_keys=keys)


def _red(state: MatteState) -> int:
    return round(float(state.image[0, 0, 0]) * 255)


def _cut_out(state: MatteState) -> MatteState:
    """The stand-ins' alpha: a square in the middle; fails for the reds above."""
    red = _red(state)
    if red == UNSUPPORTED_RED:
        raise UnsupportedImageError(f"red {red} is not supported")
    if red == FLAKY_RED:
        raise MattingError(f"red {red} failed this time")
    height, width = state.image.shape[:2]
    alpha = np.zeros((height, width), dtype=np.float32)
    alpha[height // 4 : 3 * height // 4, width // 4 : 3 * width // 4] = 1.0
    return replace(state, alpha=alpha)


@dataclass
class BatchStep:
    """A batchable GPU step that records every ``apply_batch`` size, the lone ``apply`` calls and their threads."""

    device: str = "cpu"
    precision: str = "fp32"
    batch_sizes: list[int] = field(default_factory=list)
    alone: list[int] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, state: MatteState) -> MatteState:
        with self.lock:
            self.alone.append(_red(state))
        return _cut_out(state)

    def apply_batch(self, states: list[MatteState]) -> list[MatteState]:
        with self.lock:
            self.batch_sizes.append(len(states))
            self.threads.add(threading.current_thread().name)
        return [_cut_out(state) for state in states]


@dataclass
class PairedStep:
    """A step that cannot batch and lets calls through only in pairs (a barrier of two), counting how many run at
    once: calls that never run alongside another one fail."""

    device: str = "cpu"
    precision: str = "fp32"
    pair: threading.Barrier = field(default_factory=lambda: threading.Barrier(2, timeout=10))
    running: int = 0
    peak: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, state: MatteState) -> MatteState:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            self.pair.wait()
        finally:
            with self.lock:
                self.running -= 1
        return _cut_out(state)


@pytest.fixture
def held() -> Iterator[HeldStep]:
    step = HeldStep(finish=_cut_out)
    yield step
    step.release.release(100)


def _steps_with(**steps: Any) -> StepRegistry:
    """The built-in steps and the given stand-ins, each a coarse step under its keyword's name."""
    registry = builtin_steps()
    for name, step in steps.items():
        registry.register(StepSpec(name, StepRole.COARSE, functools.partial(_built, step)))
    return registry


def _built(step: Any, variant: str | None, context: StepContext) -> Any:
    return step


@pytest.fixture
def store(tmp_path: Path) -> FileArtifactStore:
    return FileArtifactStore(tmp_path)


@contextlib.contextmanager
def _gpu(
    store: FileArtifactStore,
    registry: StepRegistry,
    *,
    capacity: int = 1,
    batch: int = 1,
    wait_ms: float = FILL_BY_COUNT_MS,
) -> Iterator[MattingActivities]:
    """Matting activities on ``registry``'s steps, running ``batch`` candidates of a slot at once (batch size)."""
    context = StepContext(device="cpu", max_batch=batch, max_batch_wait_ms=wait_ms)
    matting = MattingActivities(store, Pipelines(registry, context), capacity=capacity, prefetch=0, batch=batch)
    try:
        yield matting
    finally:
        matting.close()


async def _until(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _ok(output: MatteSlotOutput) -> list[bool]:
    return [result.output is not None for result in output.results]


# --- Candidates and their failures -----------------------------------------------------------------------------------


async def test_each_candidate_is_matted_stored_and_scored_and_a_bad_one_fails_on_its_own(
    store: FileArtifactStore, caplog: pytest.LogCaptureFixture
) -> None:
    request = _slot(store, [sticker_png(), b"not an image", _noise(), sticker_png(48)], "classical")
    caplog.set_level(logging.INFO)
    with _gpu(store, builtin_steps()) as matting:
        output = await ActivityEnvironment().run(matting.matte_slot, request)

    assert _ok(output) == [True, False, False, True]
    corrupt, unsupported = output.results[1], output.results[2]
    assert (corrupt.failure, unsupported.failure) == (FailureType.CORRUPT_IMAGE, FailureType.UNSUPPORTED_IMAGE)
    assert corrupt.error is not None and request.candidates[1].uri in corrupt.error
    for index in (0, 3):
        result = output.results[index].output
        assert result is not None and result.pipeline == "classical"
        assert result.matte.uri == (store.root / request.output_keys[index]).as_uri(), "stored under its own key"
        with Image.open(io.BytesIO(store.get(result.matte))) as matte:
            assert matte.mode == "RGBA" and matte.size == ((64, 64) if index == 0 else (48, 48))
        assert 0 < result.score <= 1 and set(result.score_parts) == {"coverage", "connected", "inside", "crisp"}
        assert result.elapsed_ms > 0
    [line] = [record for record in caplog.records if record.getMessage().startswith("matted slot")]
    assert (line.pipeline, line.candidates, line.failed) == ("classical", 4, 2)  # type: ignore[attr-defined]
    assert line.elapsed_ms >= 0 and line.gpu_wait_ms >= 0  # type: ignore[attr-defined]


async def test_a_reference_outside_the_store_is_that_candidates_own_failure(
    store: FileArtifactStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = FileArtifactStore(tmp_path_factory.mktemp("elsewhere"))
    request = _slot(store, [sticker_png(), sticker_png()], "classical")
    foreign = elsewhere.put("secret.png", sticker_png(), "image/png")
    request = request.model_copy(update={"candidates": [request.candidates[0], foreign]})
    with _gpu(store, builtin_steps()) as matting:
        output = await ActivityEnvironment().run(matting.matte_slot, request)

    assert _ok(output) == [True, False]
    assert output.results[1].failure is FailureType.FOREIGN_ARTIFACT
    assert "outside the artifact store" in (output.results[1].error or "")


async def test_an_unknown_pipeline_is_every_candidates_own_failure(store: FileArtifactStore) -> None:
    request = _slot(store, [sticker_png(), sticker_png()], "floodfill+no-such-step")
    with _gpu(store, builtin_steps()) as matting:
        output = await ActivityEnvironment().run(matting.matte_slot, request)

    assert [result.failure for result in output.results] == [FailureType.UNKNOWN_PIPELINE] * 2
    assert matting.gate.finishing == 0 and not matting.gate.full


async def test_a_missing_source_fails_the_whole_slot_for_a_retry_before_any_gpu_turn(
    store: FileArtifactStore, held: HeldStep
) -> None:
    request = _slot(store, [_flat(1), _flat(2)], "held")
    unseen = request.candidates[1].uri.replace("/1.png", "/not-yet-visible.png")
    missing = request.candidates[1].model_copy(update={"uri": unseen})
    request = request.model_copy(update={"candidates": [request.candidates[0], missing]})
    with _gpu(store, _steps_with(held=held)) as matting, pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(matting.matte_slot, request)

    assert (raised.value.type, raised.value.non_retryable) == ("ArtifactError", False)
    assert "not-yet-visible.png" in raised.value.message
    assert held.entered == [], "no GPU turn for a slot that is retried anyway"


async def test_a_failure_a_retry_may_fix_fails_the_whole_slot(store: FileArtifactStore) -> None:
    step = BatchStep()
    request = _slot(store, [_flat(1), _flat(FLAKY_RED), _flat(UNSUPPORTED_RED)], "batch")
    with _gpu(store, _steps_with(batch=step)) as matting, pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(matting.matte_slot, request)

    assert (raised.value.type, raised.value.non_retryable) == ("MattingError", False)
    [frame] = store.root.glob("sets/slot-*/wave/frame-000")
    finished = ["candidate-00.matte.png", "candidate-00.matte.png.result.json"]
    assert sorted(path.name for path in frame.iterdir()) == finished, "the retry takes back what was finished"


async def test_a_retried_slot_takes_back_what_an_earlier_attempt_recorded_instead_of_matting_again(
    store: FileArtifactStore, held: HeldStep
) -> None:
    request = _slot(store, [_flat(1), _flat(2)], "held")
    held.release.release(3)
    with _gpu(store, _steps_with(held=held)) as matting:
        first = await ActivityEnvironment().run(matting.matte_slot, request)
        # The next attempt (its worker was lost, or the server timed the first out while it was away) finds both.
        again = await ActivityEnvironment().run(matting.matte_slot, request)
        assert held.entered == [1, 2], "no image went to the GPU twice"
        # A record whose cut-out is gone is not taken; nor one of another pipeline.
        (store.root / request.output_keys[0]).unlink()
        await ActivityEnvironment().run(matting.matte_slot, request)
        classical = request.model_copy(update={"pipeline": "classical"})
        other = await ActivityEnvironment().run(matting.matte_slot, classical)

    assert held.entered == [1, 2, 1]
    for before, after in zip(first.results, again.results, strict=True):
        assert before.output is not None and after.output is not None
        assert (after.output.matte, after.output.score) == (before.output.matte, before.output.score)
    assert all(result.output is not None and result.output.pipeline == "classical" for result in other.results)


# --- One GPU turn per slot -------------------------------------------------------------------------------------------


async def test_a_slot_takes_one_gpu_turn_for_all_its_candidates(
    store: FileArtifactStore, held: HeldStep, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _slot(store, [_flat(1), _flat(2), _flat(3)], "held"), _slot(store, [_flat(4), _flat(5)], "held")
    with _gpu(store, _steps_with(held=held), capacity=1) as matting:
        turns: list[str] = []
        take = matting.gate.slot

        def counted(cancelled: threading.Event) -> Any:
            turns.append(threading.current_thread().name)
            return take(cancelled)

        monkeypatch.setattr(matting.gate, "slot", counted)
        running = asyncio.create_task(ActivityEnvironment().run(matting.matte_slot, first))
        await _until(lambda: held.entered == [1], "the first slot on the GPU")
        waiting = asyncio.create_task(ActivityEnvironment().run(matting.matte_slot, second))
        await _until(lambda: matting.gate.waiting == 1, "the second slot waiting for the GPU")

        for count in (1, 2, 3):
            await _until(lambda count=count: len(held.entered) == count, f"candidate {count} on the GPU")
            assert matting.gate.full and matting.gate.waiting == 1, "the second slot waits out the whole first turn"
            held.release.release()
        assert _ok(await running) == [True, True, True]
        held.release.release(2)
        assert _ok(await waiting) == [True, True]

    assert len(turns) == 2, "one turn per slot, not per candidate"
    assert held.entered == [1, 2, 3, 4, 5] and held.peak == 1
    assert matting.gate.finishing == 0


async def test_a_slot_whose_every_candidate_is_corrupt_takes_no_gpu_turn(
    store: FileArtifactStore, held: HeldStep, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = _slot(store, [b"not an image", b"nor this"], "held")
    with _gpu(store, _steps_with(held=held)) as matting:
        monkeypatch.setattr(matting.gate, "slot", lambda cancelled: pytest.fail("took a GPU turn"))
        output = await ActivityEnvironment().run(matting.matte_slot, request)

    assert [result.failure for result in output.results] == [FailureType.CORRUPT_IMAGE] * 2


# --- Batched passes --------------------------------------------------------------------------------------------------


async def test_a_batchable_engine_serves_a_slots_candidates_in_one_forward_pass(store: FileArtifactStore) -> None:
    step = BatchStep()
    request = _slot(store, [_flat(red) for red in (1, 2, 3, 4)], "batch")
    with _gpu(store, _steps_with(batch=step), batch=4) as matting:
        output = await ActivityEnvironment().run(matting.matte_slot, request)

    assert _ok(output) == [True] * 4
    assert step.batch_sizes == [4] and step.alone == []
    assert [result.output.matte.uri for result in output.results if result.output] == [
        (store.root / key).as_uri() for key in request.output_keys
    ], "each result is its own candidate's"


async def test_a_slot_larger_than_the_batch_runs_in_batches_of_at_most_max_batch(store: FileArtifactStore) -> None:
    step = BatchStep()
    request = _slot(store, [_flat(red) for red in range(1, 6)], "batch")
    with _gpu(store, _steps_with(batch=step), batch=4, wait_ms=50) as matting:
        output = await ActivityEnvironment().run(matting.matte_slot, request)

    assert _ok(output) == [True] * 5
    assert step.batch_sizes == [4, 1]


async def test_an_unsupported_image_in_a_batch_fails_only_its_own_candidate(store: FileArtifactStore) -> None:
    step = BatchStep()
    request = _slot(store, [_flat(1), _flat(UNSUPPORTED_RED), _flat(3), _flat(4)], "batch")
    with _gpu(store, _steps_with(batch=step), batch=4) as matting:
        output = await ActivityEnvironment().run(matting.matte_slot, request)

    assert _ok(output) == [True, False, True, True]
    assert output.results[1].failure is FailureType.UNSUPPORTED_IMAGE
    assert step.batch_sizes == [4] and sorted(step.alone) == [1, 3, 4, UNSUPPORTED_RED], (
        "the failed batch's candidates each run alone to find the one at fault"
    )


async def test_a_step_that_cannot_batch_takes_a_slots_candidates_one_at_a_time_and_separate_slots_at_once(
    store: FileArtifactStore,
) -> None:
    step = PairedStep()
    slots = [_slot(store, [_flat(red) for red in (1, 2, 3, 4)], "paired") for _ in range(2)]
    with _gpu(store, _steps_with(paired=step), capacity=2, batch=4) as matting:
        outputs = await asyncio.gather(*(ActivityEnvironment().run(matting.matte_slot, slot) for slot in slots))

    assert [_ok(output) for output in outputs] == [[True] * 4] * 2, "each call met one from the other slot"
    assert step.peak == 2, "never two candidates of one slot in the step at once"


# --- Lanes -----------------------------------------------------------------------------------------------------------


def test_lanes_run_at_most_their_width_at_once_and_keep_each_items_outcome_in_order() -> None:
    lock = threading.Lock()
    running, peak, threads = 0, 0, set()

    def work(item: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            threads.add(threading.current_thread().name)
        time.sleep(0.02)
        with lock:
            running -= 1
        if item == 4:
            raise ValueError("four")
        return item * 10

    with ThreadPoolExecutor(4, thread_name_prefix="lane") as pool:
        outcomes = Lanes(3, pool).map(work, list(range(7)))

    assert outcomes[:4] == [0, 10, 20, 30] and outcomes[5:] == [50, 60]
    assert isinstance(outcomes[4], ValueError)
    assert peak == 3
    assert threading.current_thread().name in threads and len(threads) == 3, "the caller is one of the lanes"


def test_one_lane_runs_everything_on_the_callers_thread() -> None:
    threads = []

    def work(item: int) -> int:
        threads.append(threading.current_thread().name)
        return item

    outcomes = Lanes().map(work, [1, 2, 3])

    assert outcomes == [1, 2, 3] and set(threads) == {threading.current_thread().name}


@pytest.mark.parametrize(("width", "executor"), [(0, None), (2, None)])
def test_lanes_need_a_width_and_threads_for_it(width: int, executor: None) -> None:
    with pytest.raises(ValueError):
        Lanes(width, executor)
