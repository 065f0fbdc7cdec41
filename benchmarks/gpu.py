"""GPU benchmark: the torch engines on an accelerator, and the GPU worker's frame slots, in one prepared command.

**Engines.** Each engine whose architecture is available without downloaded weights is built through its own factory
(``create_step``: device selection, precision, loading) from a model folder written with random weights in the
published layout (``testkit/model_folders.py``): SAM 2.1 hiera tiny and small (the ``sam2`` package's configs; image
prediction, and propagation through a clip), ViTMatte-S (transformers' classes with the published small config),
and the BiRefNet step with the tests' tiny remote-code model (its code path only: the stand-in is not BiRefNet's
architecture, so its times say nothing of BiRefNet's). For each frame size, precision (fp32, fp16, bf16: autocast)
and batch (one ``apply_batch`` call), the median wall time of the repeats per frame, and the peak GPU memory.
**Speed does not depend on the values of the weights** (the same operations run on any numbers); the masks are
meaningless, and each half-precision run's alpha is compared with fp32's only to show the casts run and stay finite.

**Slots.** The GPU worker's own activity (``MattingActivities.matte_slot``: the slot gate, micro-batching lanes, the
finisher threads, the store) mattes one action's slots (12 slots x 5 candidates, all taken at once) at 1, 2 and 4 GPU
slots, with micro-batching off and on: frames per second, and the GPU busy fraction (the time at least one slot held
the GPU, ``GpuGate.busy_seconds``, over the wall time; waiting, reading and storing do not count). Temporal's own round
trips are ``benchmarks/dispatch.py``'s.

Writes ``figures.json``, ``report.md`` and ``log.txt`` to ``--out``; every configuration that fails (out of memory, an
error) is recorded as such and the run goes on.

    python -m benchmarks.gpu --out out/gpu              # a CUDA machine: every figure (docs/gpu.md)
    python -m benchmarks.gpu --out out/gpu-smoke --smoke  # the CPU, tiny sizes: the script's own test (make test)
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import os
import platform
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from temporalio.testing import ActivityEnvironment
from transformers.utils import logging as transformers_logging

from core.artifacts import FileArtifactStore
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.engines import birefnet, builtin_steps, sam2, vitmatte
from gpu_activity_worker.engines.base import BatchableStep, MatteState, StepContext
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.vocabulary import Device, Precision
from testkit.model_folders import birefnet_folder, sam2_folder, vitmatte_folder
from testkit.weights import unpinned
from workflows.contract import MatteSlotInput
from workflows.keys import candidate_key

log = logging.getLogger("benchmarks.gpu")
RANDOM_WEIGHTS = "random weights: speed only (it does not depend on the weights' values)"


@dataclass(frozen=True)
class Plan:
    """What one run measures."""

    device: Device
    sizes: tuple[int, ...]
    precisions: tuple[Precision, ...]
    batches: tuple[int, ...]
    repeats: int
    warm_up: bool
    sam2_variants: tuple[str, ...]
    clip_frames: int
    vitmatte_architecture: str
    slot_pipeline: str
    slot_sizes: tuple[int, ...]
    slot_batches: tuple[int, ...]
    slots: int
    candidates: int
    slot_frame_size: int


FULL = Plan(
    device="cuda",
    sizes=(512, 1024),
    precisions=("fp32", "fp16", "bf16"),
    batches=(1, 2, 4, 8),
    repeats=5,
    warm_up=True,
    sam2_variants=("tiny", "small"),
    clip_frames=12,
    vitmatte_architecture="small",
    slot_pipeline="classical+sam2:tiny",
    slot_sizes=(1, 2, 4),
    slot_batches=(1, 4),
    slots=12,
    candidates=5,
    slot_frame_size=512,
)
SMOKE = Plan(
    device="cpu",
    sizes=(64,),
    precisions=("fp32", "bf16"),
    batches=(1, 2),
    repeats=1,
    warm_up=False,
    sam2_variants=("tiny",),
    clip_frames=2,
    vitmatte_architecture="toy",
    slot_pipeline="classical+vitmatte",
    slot_sizes=(1, 2),
    slot_batches=(1, 2),
    slots=2,
    candidates=2,
    slot_frame_size=64,
)
"""Every code path of :data:`FULL` at sizes a CPU runs in seconds."""


@dataclass
class EngineFigure:
    engine: str
    task: str
    size: int
    precision: str
    batch: int
    ms_per_frame: float | None = None
    peak_mb: float | None = None
    max_diff_vs_fp32: float | None = None
    error: str | None = None


@dataclass
class SlotFigure:
    pipeline: str
    gpu_slots: int
    max_batch: int
    frames: int
    seconds: float | None = None
    frames_per_s: float | None = None
    gpu_busy: float | None = None
    error: str | None = None


@dataclass
class Report:
    machine: dict[str, Any]
    plan: dict[str, Any]
    engines: list[EngineFigure] = field(default_factory=list)
    slots: list[SlotFigure] = field(default_factory=list)
    seconds: float = 0.0


# --- Inputs --------------------------------------------------------------------------------------------------------


def _frame(size: int, shift: int = 0, seed: int = 0) -> np.ndarray:
    """float32 HxWx3: an orange disc with a dark outline on a light plain background, a little noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.indices((size, size))
    radius = np.hypot(yy - size / 2, xx - size / 2 - shift)
    image = np.full((size, size, 3), (0.97, 0.96, 0.94), dtype=np.float32)
    image[radius < size / 3] = (0.95, 0.55, 0.15)
    image[np.abs(radius - size / 3) < max(1.0, size / 100)] = (0.15, 0.1, 0.05)
    return np.clip(image + rng.normal(0, 0.004, image.shape), 0, 1).astype(np.float32)


def _coarse(size: int, shift: int = 0) -> np.ndarray:
    """The disc's alpha, anti-aliased: what a coarse step hands a refiner."""
    yy, xx = np.indices((size, size))
    return np.clip(size / 3 + 0.5 - np.hypot(yy - size / 2, xx - size / 2 - shift), 0, 1).astype(np.float32)


def _states(size: int, count: int, *, coarse: bool) -> list[MatteState]:
    return [
        MatteState(image=_frame(size, shift=i, seed=i), alpha=_coarse(size, shift=i) if coarse else None)
        for i in range(count)
    ]


# --- Engines -------------------------------------------------------------------------------------------------------


def _synchronise(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timed(plan: Plan, work: Callable[[], Any]) -> tuple[float, Any]:
    """Median seconds of the plan's repeats of ``work`` (after a warm-up run, if it has one), and the last result."""
    device, result = plan.device, work() if plan.warm_up else None
    times = []
    for _ in range(plan.repeats):
        _synchronise(device)
        started = time.perf_counter()
        result = work()
        _synchronise(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def _alphas(states: Sequence[MatteState]) -> np.ndarray:
    return np.stack([state.alpha for state in states if state.alpha is not None])


def _measure_step(
    name: str, make: Callable[[Precision], BatchableStep], plan: Plan, *, coarse: bool, report: Report
) -> None:
    """Every size, precision and batch of one engine's ``apply_batch``; half precision compared with fp32."""
    for precision in plan.precisions:
        try:
            step = make(precision)
        except Exception as err:
            log.exception("%s %s: could not build the step", name, precision)
            report.engines.append(EngineFigure(name, "image", 0, precision, 0, error=_reason(err)))
            continue
        log.info("%s: built on %s in %s", name, step.device, step.precision)
        for size in plan.sizes:
            for batch in plan.batches:
                figure = EngineFigure(name, "image", size, precision, batch)
                states = _states(size, batch, coarse=coarse)
                try:
                    _reset_peak(plan.device)
                    seconds, out = _timed(plan, partial(step.apply_batch, states))
                    figure.ms_per_frame = 1000 * seconds / batch
                    figure.peak_mb = _peak_mb(plan.device)
                    alphas = _alphas(out)
                    if not np.isfinite(alphas).all():
                        figure.error = "non-finite alpha"
                    reference = _reference(report, figure)
                    if reference is not None:
                        figure.max_diff_vs_fp32 = float(np.abs(alphas - reference).max())
                    _REFERENCES[(name, size, batch, precision)] = alphas
                except Exception as err:
                    log.exception("%s %s %d px batch %d failed", name, precision, size, batch)
                    figure.error = _reason(err)
                report.engines.append(figure)
                log.info("%s", figure)
        _free(plan.device)


_REFERENCES: dict[tuple[str, int, int, str], np.ndarray] = {}


def _reference(report: Report, figure: EngineFigure) -> np.ndarray | None:
    if figure.precision == "fp32":
        return None
    return _REFERENCES.get((figure.engine, figure.size, figure.batch, "fp32"))


def _measure_propagation(name: str, make: Callable[[Precision], sam2.Sam2Step], plan: Plan, report: Report) -> None:
    """SAM2's video propagation of the first frame's mask through a clip: ms per frame."""
    for precision in plan.precisions:
        step = make(precision)
        for size in plan.sizes:
            figure = EngineFigure(name, f"propagation, {plan.clip_frames} frames", size, precision, 1)
            frames = [(_frame(size, shift=i, seed=i) * 255).astype(np.uint8) for i in range(plan.clip_frames)]
            try:
                _reset_peak(plan.device)
                track = partial(sam2.propagate_masks, step, frames, _coarse(size) > 0.5)
                seconds, masks = _timed(plan, track)
                figure.ms_per_frame = 1000 * seconds / len(frames)
                figure.peak_mb = _peak_mb(plan.device)
                if len(masks) != len(frames):
                    figure.error = f"{len(masks)} masks for {len(frames)} frames"
            except Exception as err:
                log.exception("%s propagation %s %d px failed", name, precision, size)
                figure.error = _reason(err)
            report.engines.append(figure)
            log.info("%s", figure)
        _free(plan.device)


def _engines(plan: Plan, model_dir: Path, report: Report) -> None:
    def context(precision: Precision) -> StepContext:
        return StepContext(device=plan.device, model_dir=model_dir, precision=precision)

    for variant in plan.sam2_variants:
        sam2_folder(model_dir, variant)

        def make_sam2(precision: Precision, variant: str = variant) -> sam2.Sam2Step:
            return sam2.create_step(variant, context(precision))

        _measure_step(f"sam2:{variant}", make_sam2, plan, coarse=True, report=report)
        _measure_propagation(f"sam2:{variant}", make_sam2, plan, report)
    vitmatte_folder(model_dir, plan.vitmatte_architecture)
    _measure_step(
        f"vitmatte:small ({plan.vitmatte_architecture} architecture)",
        lambda precision: vitmatte.create_step("small", context(precision)),
        plan,
        coarse=True,
        report=report,
    )
    birefnet_folder(model_dir)
    _measure_step(
        "birefnet (tests' stand-in model: code path only)",
        lambda precision: birefnet.create_step("general", context(precision)),
        plan,
        coarse=False,
        report=report,
    )


# --- Slots ---------------------------------------------------------------------------------------------------------


def _slot_requests(store: FileArtifactStore, plan: Plan) -> list[MatteSlotInput]:
    requests = []
    for slot in range(plan.slots):
        sources = []
        for candidate in range(plan.candidates):
            image = (_frame(plan.slot_frame_size, shift=candidate, seed=slot * 10 + candidate) * 255).astype(np.uint8)
            buffer = io.BytesIO()
            Image.fromarray(image).save(buffer, format="PNG")
            key = candidate_key("bench", "wave", slot, candidate, "source.png")
            sources.append(store.put(key, buffer.getvalue(), "image/png", width=image.shape[1], height=image.shape[0]))
        outputs = [candidate_key("bench", "wave", slot, c, "matte.png") for c in range(plan.candidates)]
        requests.append(MatteSlotInput(pipeline=plan.slot_pipeline, candidates=sources, output_keys=outputs))
    return requests


async def _slots(plan: Plan, model_dir: Path, root: Path, report: Report) -> None:
    """One action's slots, all taken at once, through the worker's own matting activity at each GPU capacity and
    batch size; a warm-up action first (loading the pipeline)."""
    for batch in plan.slot_batches:
        context = StepContext(device=plan.device, model_dir=model_dir, max_batch=batch)
        pipelines = Pipelines(builtin_steps(), context)
        for capacity in plan.slot_sizes:
            store = FileArtifactStore(root / f"slots-{batch}-{capacity}")
            requests = _slot_requests(store, plan)
            figure = SlotFigure(plan.slot_pipeline, capacity, batch, plan.slots * plan.candidates)
            matting = MattingActivities(store, pipelines, capacity=capacity, prefetch=0, batch=batch)
            try:
                await ActivityEnvironment().run(matting.matte_slot, requests[0])  # warm-up: loads the engines
                busy_before = matting.gate.busy_seconds()
                started = time.perf_counter()
                outputs = await asyncio.gather(
                    *(ActivityEnvironment().run(matting.matte_slot, request) for request in requests)
                )
                figure.seconds = time.perf_counter() - started
                figure.frames_per_s = figure.frames / figure.seconds
                figure.gpu_busy = (matting.gate.busy_seconds() - busy_before) / figure.seconds
                failed = [r.error for output in outputs for r in output.results if r.output is None]
                if failed:
                    figure.error = f"{len(failed)} candidates failed: {failed[0]}"
            except Exception as err:
                log.exception("slots at capacity %d, batch %d failed", capacity, batch)
                figure.error = _reason(err)
            finally:
                matting.close()
            report.slots.append(figure)
            log.info("%s", figure)
        _free(plan.device)


# --- Device helpers ------------------------------------------------------------------------------------------------


def _reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_mb(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None


def _free(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


def _reason(err: BaseException) -> str:
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return "out of GPU memory"
    return f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"


def _machine(device: str) -> dict[str, Any]:
    machine: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "device": device,
    }
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        machine |= {
            "gpu": properties.name,
            "gpu_memory_gb": round(properties.total_memory / 2**30, 1),
            "compute_capability": f"{properties.major}.{properties.minor}",
            "cuda": torch.version.cuda,
            "bf16": torch.cuda.is_bf16_supported(),
        }
    try:
        import onnxruntime

        machine["onnxruntime_providers"] = onnxruntime.get_available_providers()
    except ImportError:
        machine["onnxruntime_providers"] = None
    return machine


# --- Report --------------------------------------------------------------------------------------------------------


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(report: Report) -> str:
    """The report's tables, as docs/gpu.md shows them."""
    machine = ", ".join(f"{key} {value}" for key, value in report.machine.items())
    lines = [
        f"Machine: {machine}. Ran {report.seconds:.0f} s.",
        "",
        f"Engines ({RANDOM_WEIGHTS}; median of {report.plan['repeats']} runs"
        f"{' after a warm-up' if report.plan['warm_up'] else ''}, per frame):",
        "",
        "| engine | task | px | precision | batch | ms / frame | peak MB | max diff vs fp32 | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for figure in report.engines:
        lines.append(
            f"| {figure.engine} | {figure.task} | {figure.size} | {figure.precision} | {figure.batch} | "
            f"{_cell(figure.ms_per_frame)} | {_cell(figure.peak_mb, 0)} | {_cell(figure.max_diff_vs_fp32, 3)} | "
            f"{figure.error or ''} |"
        )
    lines += [
        "",
        f"The GPU worker's frame slots ({report.plan['slots']} slots x {report.plan['candidates']} candidates of "
        f"{report.plan['slot_frame_size']} px, all taken at once, through MattingActivities.matte_slot; GPU busy = "
        "time a slot held the GPU / wall time):",
        "",
        "| pipeline | GPU slots | max batch | frames | s | frames / s | GPU busy | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for slot in report.slots:
        lines.append(
            f"| {slot.pipeline} | {slot.gpu_slots} | {slot.max_batch} | {slot.frames} | {_cell(slot.seconds, 2)} | "
            f"{_cell(slot.frames_per_s)} | {_cell(slot.gpu_busy, 2)} | {slot.error or ''} |"
        )
    return "\n".join(lines) + "\n"


async def run(plan: Plan, out: Path) -> Report:
    """Measure everything in ``plan``, writing ``figures.json``, ``report.md`` (and the log) to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    report = Report(machine=_machine(plan.device), plan=asdict(plan))
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="popcon-gpu-bench-") as scratch,
        unpinned("sam2"),
        unpinned("vitmatte"),
        unpinned("birefnet"),
    ):
        models = Path(scratch) / "models"
        _engines(plan, models, report)
        await _slots(plan, models, Path(scratch), report)
    report.seconds = time.perf_counter() - started
    (out / "figures.json").write_text(json.dumps(asdict(report), indent=1) + "\n")
    (out / "report.md").write_text(markdown(report))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for figures.json, report.md and log.txt")
    parser.add_argument("--smoke", action="store_true", help="the CPU, tiny sizes: every code path in seconds")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="override the plan's device")
    args = parser.parse_args()
    plan = SMOKE if args.smoke else FULL
    if args.device:
        plan = replace(plan, device=args.device)
    if plan.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here: run on a GPU machine, or --smoke (the CPU, tiny sizes)")
    args.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.FileHandler(args.out / "log.txt"), logging.StreamHandler()],
    )
    logging.getLogger("temporalio.activity").setLevel(logging.WARNING)  # a line per matted slot otherwise
    transformers_logging.disable_progress_bar()
    try:
        report = asyncio.run(run(plan, args.out))
    except Exception:
        log.error("the benchmark stopped: %s", traceback.format_exc())
        raise
    print(markdown(report))


if __name__ == "__main__":
    main()
