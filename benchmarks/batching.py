"""Micro-batching benchmark: frames per second with batching off and on, side by side in one run.

C callers (threads, like C concurrent matting activities on the GPU worker) each matte N frames through the real
pipeline (``Pipelines.build`` and its micro-batcher) of a small torch conv net on the CPU, at max_batch 1 (off) and
above. Configurations alternate within each round and the median round is printed, with the mean batch size seen and
whether every output (uint8 RGBA) is identical to the unbatched run at the same torch thread count.

A second, simulated engine stands in for a GPU: one forward pass at a time (a lock), costing a fixed sleep plus a small
sleep per image, so a batch of 4 costs little more than one. It measures how close the batcher gets to that cost
model's ideal, not a GPU.

    python -m benchmarks.batching [--callers 4] [--frames 16] [--size 256] [--threads 1 2] [--max-batch 4 8]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import torch

from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepContext, StepRole
from gpu_activity_worker.pipeline import MatteResult, Pipelines


class ConvNet(torch.nn.Module):
    """Four 3x3 convolutions at full resolution and a sigmoid: about 1 GMAC per 256x256 image."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 1, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.layers(x))


Model = Callable[[np.ndarray], np.ndarray]
"""float32 BxHxWx3 images (all of one size) -> float32 BxHxW alphas."""


class BenchStep:
    """A batchable step around ``model``; counts forward passes and the images they served."""

    device, precision = "cpu", "fp32"

    def __init__(self, model: Model) -> None:
        self.model = model
        self._recording = threading.Lock()
        self.passes = 0
        self.images = 0

    def reset(self) -> None:
        with self._recording:
            self.passes = self.images = 0

    def apply(self, state: MatteState) -> MatteState:
        return self.apply_batch([state])[0]

    def apply_batch(self, states: Sequence[MatteState]) -> list[MatteState]:
        with self._recording:
            self.passes += 1
            self.images += len(states)
        alphas = self.model(np.stack([state.image for state in states]))
        return [replace(state, alpha=alpha) for state, alpha in zip(states, alphas, strict=True)]


def convnet() -> Model:
    """The torch model, seeded so every instance has the same weights."""
    torch.manual_seed(0)
    net = ConvNet().eval()

    def alphas(images: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return net(torch.from_numpy(images).permute(0, 3, 1, 2))[:, 0].numpy()

    return alphas


def gpu_like(fixed_s: float, per_image_s: float) -> Model:
    """A simulated GPU: one pass at a time, ``fixed_s + per_image_s * batch`` seconds each; alpha = mean colour."""
    gpu = threading.Lock()

    def alphas(images: np.ndarray) -> np.ndarray:
        with gpu:
            time.sleep(fixed_s + per_image_s * len(images))
        return images.mean(axis=-1)

    return alphas


@dataclass(frozen=True)
class Config:
    engine: str
    threads: int
    max_batch: int


@dataclass
class Outcome:
    fps: list[float]
    passes: int = 0
    images: int = 0
    identical: bool = True
    max_alpha_diff: float = 0.0


def _frames(callers: int, frames: int, size: int) -> list[list[np.ndarray]]:
    """Distinct images per caller and frame: a disc of a random colour on a random plain background, with noise."""
    rng = np.random.default_rng(0)
    yy, xx = np.indices((size, size))
    disc = (np.hypot(yy - size / 2, xx - size / 2) < size / 3)[..., None]
    return [
        [
            np.clip(
                np.where(disc, rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)) + rng.normal(0, 4, (size, size, 3)),
                0,
                255,
            ).astype(np.uint8)
            for _ in range(frames)
        ]
        for _ in range(callers)
    ]


def _run(pipelines: Pipelines, engine: str, frames: list[list[np.ndarray]]) -> tuple[float, list[MatteResult]]:
    """Frames per second with one thread per caller, each matting its frames in turn; and every result in order."""
    pipeline = pipelines.build(engine)
    start_line = threading.Barrier(len(frames) + 1)

    def caller(images: list[np.ndarray]) -> list[MatteResult]:
        start_line.wait()
        return [pipeline.run(image) for image in images]

    with ThreadPoolExecutor(len(frames)) as pool:
        futures = [pool.submit(caller, images) for images in frames]
        start_line.wait()
        started = time.perf_counter()
        results = [result for future in futures for result in future.result()]
        elapsed = time.perf_counter() - started
    return len(results) / elapsed, results


def _registry(args: argparse.Namespace) -> tuple[StepRegistry, dict[tuple[str, StepContext], BenchStep]]:
    """The built-in steps and the two benchmark engines; the dict fills with each step built, by engine and context."""
    steps: dict[tuple[str, StepContext], BenchStep] = {}

    def create(engine: str, model: Callable[[], Model], variant: str | None, context: StepContext) -> BenchStep:
        step = steps[(engine, context)] = BenchStep(model())
        return step

    registry = builtin_steps()
    registry.register(StepSpec("bench-convnet", StepRole.COARSE, partial(create, "bench-convnet", convnet)))
    gpu = partial(gpu_like, args.gpu_fixed_ms / 1000, args.gpu_per_image_ms / 1000)
    registry.register(StepSpec("bench-gpu-like", StepRole.COARSE, partial(create, "bench-gpu-like", gpu)))
    return registry, steps


def _measure(args: argparse.Namespace, configs: list[Config]) -> dict[Config, Outcome]:
    """One warm-up round, then ``args.rounds`` rounds of every configuration in turn."""
    registry, steps = _registry(args)
    contexts = {
        config: StepContext(device="cpu", max_batch=config.max_batch, max_batch_wait_ms=args.wait_ms)
        for config in configs
    }
    pipelines = {context: Pipelines(registry, context) for context in set(contexts.values())}
    frames = _frames(args.callers, args.frames, args.size)
    outcomes = {config: Outcome(fps=[]) for config in configs}
    unbatched: dict[tuple[str, int], list[MatteResult]] = {}
    for round_ in range(args.rounds + 1):
        for config in configs:
            torch.set_num_threads(config.threads)
            context = contexts[config]
            if round_ == 0:
                _run(pipelines[context], config.engine, [images[:2] for images in frames])
                continue
            step = steps[(config.engine, context)]
            step.reset()
            fps, results = _run(pipelines[context], config.engine, frames)
            outcome = outcomes[config]
            outcome.fps.append(fps)
            outcome.passes += step.passes
            outcome.images += step.images
            # max_batch 1 comes first for each engine and thread count: the reference.
            reference = unbatched.setdefault((config.engine, config.threads), results)
            for mine, theirs in zip(results, reference, strict=True):
                outcome.identical &= np.array_equal(mine.rgba, theirs.rgba)
                outcome.max_alpha_diff = max(outcome.max_alpha_diff, float(np.abs(mine.alpha - theirs.alpha).max()))
    return outcomes


def main(args: argparse.Namespace) -> None:
    batches = sorted({1, *args.max_batch})
    configs = [Config("bench-convnet", threads, batch) for threads in args.threads for batch in batches]
    configs += [Config("bench-gpu-like", 1, batch) for batch in batches]
    outcomes = _measure(args, configs)

    print(
        f"torch {torch.__version__} on the CPU; {args.callers} callers x {args.frames} frames of "
        f"{args.size}x{args.size}; batch wait {args.wait_ms} ms; frames/s = median of {args.rounds} rounds (min..max)"
    )
    print(
        f"gpu-like = simulated: one pass at a time, {args.gpu_fixed_ms} ms + {args.gpu_per_image_ms} ms per image "
        "(sleep), not a measurement of a GPU"
    )
    print(f"{'engine':<8} {'threads':>7} {'max_batch':>9} {'frames/s':>20} {'vs off':>7} {'mean batch':>10}  outputs")
    for config in configs:
        outcome = outcomes[config]
        fps = statistics.median(outcome.fps)
        off = statistics.median(outcomes[replace(config, max_batch=1)].fps)
        spread = f"{fps:.1f} ({min(outcome.fps):.1f}..{max(outcome.fps):.1f})"
        same = "identical" if outcome.identical else f"DIFFER (max alpha diff {outcome.max_alpha_diff:.2e})"
        threads = str(config.threads) if config.engine == "bench-convnet" else "-"
        print(
            f"{config.engine.removeprefix('bench-'):<8} {threads:>7} {config.max_batch:>9} {spread:>20} "
            f"{fps / off:>6.2f}x {outcome.images / outcome.passes:>10.2f}  {same}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--callers", type=int, default=4, help="concurrent callers (matting activities)")
    parser.add_argument("--frames", type=int, default=16, help="frames per caller per round")
    parser.add_argument("--size", type=int, default=256, help="image side, pixels")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch intra-op thread counts")
    parser.add_argument("--max-batch", type=int, nargs="+", default=[4, 8], help="batch sizes to compare with 1 (off)")
    parser.add_argument("--wait-ms", type=float, default=5.0, help="longest wait to fill a batch")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after one warm-up round)")
    parser.add_argument("--gpu-fixed-ms", type=float, default=20.0, help="simulated GPU: cost of any forward pass")
    parser.add_argument("--gpu-per-image-ms", type=float, default=2.0, help="simulated GPU: extra cost per image")
    main(parser.parse_args())
