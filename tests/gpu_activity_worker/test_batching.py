"""Micro-batching: batched results equal unbatched ones, batches form and respect max_batch, errors reach the right
callers, and Pipelines wraps steps only when max_batch > 1: batchable ones in a batcher, the others to serve a slot's
lanes one at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpu_activity_worker.batching import MicroBatcher, OneLaneAtATime
from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepContext, StepRole
from gpu_activity_worker.pipeline import Pipelines, StepRef
from gpu_activity_worker.vocabulary import MattingError, UnsupportedImageError

FILL_BY_COUNT_MS = 10_000.0
"""A wait so long that batches close by count, never by timeout: with a multiple of max_batch callers arriving at
once, batch sizes are deterministic (a bug shows as a 10 s stall, not a hang)."""

T = TypeVar("T")
R = TypeVar("R")

NET_SIZE = 32
"""Side the torch step resizes every image to, so images of any size share a batch."""


class TinyNet(torch.nn.Module):
    """Three convolutions and a sigmoid: an alpha from an image."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 1, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.layers(x))


class TinyTorchStep:
    """A deterministic batchable model step; records the size of every ``apply_batch`` call."""

    device, precision = "cpu", "fp32"

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.net = TinyNet().eval()
        self.batch_sizes: list[int] = []
        self._recording = threading.Lock()

    def _alphas(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.inference_mode():
            inputs = [torch.from_numpy(image).permute(2, 0, 1)[None] for image in images]
            batch = torch.cat([F.interpolate(x, size=(NET_SIZE, NET_SIZE), mode="bilinear") for x in inputs])
            out = self.net(batch)
            return [
                F.interpolate(alpha[None], size=image.shape[:2], mode="bilinear")[0, 0].numpy()
                for alpha, image in zip(out, images, strict=True)
            ]

    def apply(self, state: MatteState) -> MatteState:
        return replace(state, alpha=self._alphas([state.image])[0])

    def apply_batch(self, states: Sequence[MatteState]) -> list[MatteState]:
        with self._recording:
            self.batch_sizes.append(len(states))
        alphas = self._alphas([state.image for state in states])
        return [replace(state, alpha=alpha) for state, alpha in zip(states, alphas, strict=True)]


class RecordingStep:
    """A cheap batchable step: alpha = mean colour. An image whose top-left red is 1 is unsupported; ``broken`` is
    raised by every call; ``drop_one`` makes batches return one result too few."""

    device, precision = "cpu", "fp32"

    def __init__(self, *, broken: BaseException | None = None, drop_one: bool = False) -> None:
        self.broken = broken
        self.drop_one = drop_one
        self.batch_sizes: list[int] = []
        self.alone = 0
        self._recording = threading.Lock()

    def matte(self, state: MatteState) -> MatteState:
        if self.broken is not None:
            raise self.broken
        if state.image[0, 0, 0] == 1.0:
            raise UnsupportedImageError("bad image")
        return replace(state, alpha=state.image.mean(axis=-1))

    def apply(self, state: MatteState) -> MatteState:
        with self._recording:
            self.alone += 1
        return self.matte(state)

    def apply_batch(self, states: Sequence[MatteState]) -> list[MatteState]:
        with self._recording:
            self.batch_sizes.append(len(states))
        results = [self.matte(state) for state in states]
        return results[1:] if self.drop_one else results


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def built() -> list[TinyTorchStep]:
    """Every step built from ``tinynet-batching-test``."""
    return []


@pytest.fixture
def steps(built: list[TinyTorchStep]) -> StepRegistry:
    """The built-in steps and ``tinynet-batching-test``, whose builds are listed in ``built``."""

    def create(variant: str | None, context: StepContext) -> TinyTorchStep:
        built.append(TinyTorchStep())
        return built[-1]

    registry = builtin_steps()
    registry.register(StepSpec("tinynet-batching-test", StepRole.COARSE, create))
    return registry


def _images(count: int) -> list[np.ndarray]:
    """Distinct uint8 images of different sizes, so a mix-up between callers shows."""
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (40 + 8 * (i % 3), 48 + 4 * i, 3), dtype=np.uint8) for i in range(count)]


def _states(count: int) -> list[MatteState]:
    return [MatteState(image=image.astype(np.float32) / 255) for image in _images(count)]


def _all_at_once(call: Callable[[T], R], items: Sequence[T]) -> list[R | BaseException]:
    """``call`` on every item, each in its own thread, all released together; an exception is returned, not raised."""
    barrier = threading.Barrier(len(items))

    def run(item: T) -> R | BaseException:
        barrier.wait()
        try:
            return call(item)
        except BaseException as err:
            return err

    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(run, items))


def test_pipeline_results_are_identical_batched_and_unbatched(steps: StepRegistry, built: list[TinyTorchStep]) -> None:
    name = "tinynet-batching-test"
    images = _images(8)
    off = Pipelines(steps, StepContext(max_batch=1)).build(name)
    unbatched = [off.run(image) for image in images]
    batching = Pipelines(steps, StepContext(max_batch=4, max_batch_wait_ms=FILL_BY_COUNT_MS)).build(name)
    batched = _all_at_once(batching.run, images)

    assert built[0].batch_sizes == []
    assert built[1].batch_sizes == [4, 4]
    for alone, together in zip(unbatched, batched, strict=True):
        assert not isinstance(together, BaseException)
        np.testing.assert_array_equal(together.rgba, alone.rgba)
        np.testing.assert_allclose(together.alpha, alone.alpha, rtol=0, atol=1e-6)


def test_batches_never_exceed_max_batch() -> None:
    step = RecordingStep()
    batcher = MicroBatcher(step, 4, FILL_BY_COUNT_MS)
    states = _states(12)
    results = _all_at_once(batcher.apply, states)

    assert step.batch_sizes == [4, 4, 4]
    for state, result in zip(states, results, strict=True):
        assert not isinstance(result, BaseException)
        np.testing.assert_array_equal(result.alpha, step.matte(state).alpha)


def test_a_lone_request_runs_alone_after_the_wait_and_starts_no_thread() -> None:
    step = RecordingStep()
    batcher = MicroBatcher(step, 4, 20)
    threads = threading.active_count()
    state = _states(1)[0]

    for _ in range(3):
        np.testing.assert_array_equal(batcher.apply(state).alpha, step.matte(state).alpha)

    assert step.batch_sizes == [1, 1, 1]
    assert threading.active_count() == threads


def test_an_unsupported_image_fails_only_its_own_caller() -> None:
    step = RecordingStep()
    batcher = MicroBatcher(step, 4, FILL_BY_COUNT_MS)
    states = _states(8)
    bad = replace(states[5], image=states[5].image.copy())
    bad.image[0, 0, 0] = 1.0
    states[5] = bad

    results = _all_at_once(batcher.apply, states)

    assert step.batch_sizes == [4, 4]
    assert step.alone == 4, "only the failed batch's callers re-run alone"
    assert isinstance(results[5], UnsupportedImageError)
    for i, (state, result) in enumerate(zip(states, results, strict=True)):
        if i != 5:
            assert not isinstance(result, BaseException)
            np.testing.assert_array_equal(result.alpha, state.image.mean(axis=-1))


def test_a_broken_step_fails_every_caller_and_a_lone_failure_is_not_rerun() -> None:
    step = RecordingStep(broken=RuntimeError("model broken"))
    results = _all_at_once(MicroBatcher(step, 4, FILL_BY_COUNT_MS).apply, _states(4))
    assert all(isinstance(result, RuntimeError) for result in results)
    assert (step.batch_sizes, step.alone) == ([4], 4)

    lone = RecordingStep(broken=RuntimeError("model broken"))
    with pytest.raises(RuntimeError, match="model broken"):
        MicroBatcher(lone, 4, 1).apply(_states(1)[0])
    assert (lone.batch_sizes, lone.alone) == ([1], 0)


def test_a_wrong_number_of_results_fails_the_batch() -> None:
    batcher = MicroBatcher(RecordingStep(drop_one=True), 4, FILL_BY_COUNT_MS)
    results = _all_at_once(batcher.apply, _states(4))
    assert all(isinstance(result, MattingError) and "3 results for 4" in str(result) for result in results)


class Abort(BaseException):
    """Stands in for KeyboardInterrupt in the leader thread."""


def test_an_aborted_batch_releases_its_callers_and_the_next_leader_takes_over() -> None:
    step = RecordingStep(broken=Abort())
    batcher = MicroBatcher(step, 4, FILL_BY_COUNT_MS)
    assert all(isinstance(result, Abort) for result in _all_at_once(batcher.apply, _states(4)))

    step.broken = None
    results = _all_at_once(batcher.apply, _states(4))
    assert not any(isinstance(result, BaseException) for result in results)
    assert step.batch_sizes == [4, 4]


def test_pipelines_batch_batchable_steps_and_take_turns_on_the_others_when_max_batch_is_above_1(
    steps: StepRegistry, built: list[TinyTorchStep]
) -> None:
    ref = StepRef("tinynet-batching-test")
    on = Pipelines(steps, StepContext(max_batch=4, max_batch_wait_ms=2))
    on.build("tinynet-batching-test+defringe")

    wrapped = on._built_step(ref)
    assert isinstance(wrapped, MicroBatcher)
    assert wrapped.step is built[0]
    assert (wrapped.max_batch, wrapped.device, wrapped.precision) == (4, "cpu", "fp32")
    defringe = on._built_step(StepRef("defringe"))
    assert isinstance(defringe, OneLaneAtATime) and (defringe.device, defringe.precision) == ("cpu", "fp32")
    assert Pipelines(steps, StepContext(max_batch=1))._built_step(ref) is built[1]


@pytest.mark.parametrize(("max_batch", "wait_ms"), [(0, 5.0), (4, -1.0)])
def test_invalid_settings_are_rejected(max_batch: int, wait_ms: float) -> None:
    with pytest.raises(ValueError):
        MicroBatcher(RecordingStep(), max_batch, wait_ms)
