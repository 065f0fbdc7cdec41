"""Refining a cut-out with clicks: erase the region segmented from them, or restore it from the pristine source.

A click segmenter turns clicks on a frame into a region (bool HxW) and carries that region through the emoji's
following frames. There are two, one module each, registered in :class:`Refiners` by module path and imported only
when used (a CPU-only worker never imports torch):

- ``clicks`` (:mod:`.clicks`): weight-free region growing from the clicks on the source frame, bounded by colour
  edges, background clicks growing a competing region; the following frames are segmented again from the same
  clicks.
- ``sam2`` (:mod:`.sam2`): SAM 2.1 prompted by the clicks as points of one object, with the worker's own ``sam2``
  step (its weights loaded once); the following frames by SAM2's video propagation.

Which one runs: the workflow asks for ``sam2[:variant]`` when the set's matting pipeline uses SAM2 (the set's
``describe_pipeline`` has loaded those weights where the set is matted) and for ``clicks`` otherwise. A worker that
cannot build SAM2 (no weights in its model folder, no gpu extra) runs ``clicks`` instead and says so in the result's
``refiner``; so does the RunPod dispatcher, which serves ``refine_matte`` in its own process (no endpoint job: the
weight-free segmenter takes a fraction of a second on its CPU).

Per frame, the region is then applied to the current cut-out: ``erase`` sets alpha 0 there (nothing outside the
region changes, so the region is in effect intersected with the current alpha); ``restore`` makes it opaque with the
source frame's colours. Each new cut-out is stored under its key and scored again
(:func:`~gpu_activity_worker.scoring.score_matte`).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from core.artifacts import ArtifactStore, get_in_set
from gpu_activity_worker.matting import decode_rgb, decode_rgba, encode_png
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.scoring import score_matte
from gpu_activity_worker.vocabulary import MattingError
from gpu_activity_worker.weights import WeightsMissingError
from workflows.contract import (
    FailureType,
    MatteFrameOutput,
    RefineMatteInput,
    RefineMatteOutput,
    RefineMode,
    RefinePoint,
)

log = logging.getLogger(__name__)

FALLBACK = "clicks"
"""The segmenter a worker runs when it cannot build the one asked for."""


class InvalidRefineError(MattingError):
    """A refinement that cannot be done as asked: an unknown refiner, clicks outside the frame, a source and its
    cut-out of different sizes. The same request fails again."""

    failure_type = FailureType.INVALID_REQUEST


class ClickSegmenter(Protocol):
    """Clicks on a frame to a region, and the region through following frames. Thread-safe.

    Attributes:
        name: The refiner's name as the result reports it, e.g. ``clicks`` or ``sam2:small``.
        device: Where it runs, ``cpu`` or ``cuda``.
        precision: e.g. ``fp32``.
        uses_gpu: Whether it needs the worker's GPU turn.
    """

    name: str
    device: str
    precision: str
    uses_gpu: bool

    def segment(self, image: np.ndarray, points: Sequence[RefinePoint], mode: RefineMode) -> np.ndarray:
        """bool HxW: the region the clicks point at on ``image`` (uint8 HxWx3, the source frame)."""
        ...

    def carry(
        self,
        first_image: np.ndarray,
        first: np.ndarray,
        images: Sequence[np.ndarray],
        points: Sequence[RefinePoint],
        mode: RefineMode,
    ) -> list[np.ndarray]:
        """The region on each of ``images`` (the following frames, in order), given the region ``first`` that
        :meth:`segment` found on ``first_image``."""
        ...


SegmenterFactory = Callable[[str | None, Pipelines], ClickSegmenter]
"""Builds a segmenter from its variant and the worker's pipelines (whose steps hold the models)."""

BUILTIN_SEGMENTERS: Mapping[str, str] = {
    "clicks": "gpu_activity_worker.refine.clicks",
    "sam2": "gpu_activity_worker.refine.sam2",
}
"""Refiner name -> the module whose ``create_segmenter`` builds it."""


class Refiners:
    """The click segmenters of one worker, each built once on first use and then shared. Thread-safe.

    Args:
        pipelines: The worker's pipelines: ``sam2`` uses their SAM2 step.
        segmenters: Refiner name -> a factory, or the path of a module whose ``create_segmenter`` is one;
            ``None`` is :data:`BUILTIN_SEGMENTERS`.
    """

    def __init__(self, pipelines: Pipelines, segmenters: Mapping[str, str | SegmenterFactory] | None = None) -> None:
        self._pipelines = pipelines
        self._factories = dict(BUILTIN_SEGMENTERS if segmenters is None else segmenters)
        self._built: dict[str, ClickSegmenter] = {}
        self._lock = threading.RLock()

    def get(self, name: str) -> ClickSegmenter:
        """The segmenter called ``name`` (``engine`` or ``engine:variant``); :data:`FALLBACK` when this worker
        cannot build it (its weights or the gpu extra are missing).

        Raises:
            InvalidRefineError: No such refiner, or no such variant of it.
        """
        with self._lock:
            segmenter = self._built.get(name)
            if segmenter is not None:
                return segmenter
            engine, _, variant = name.partition(":")
            factory = self._factories.get(engine)
            if factory is None:
                raise InvalidRefineError(f"unknown refiner {name!r}; refiners: {', '.join(sorted(self._factories))}")
            if isinstance(factory, str):
                factory = importlib.import_module(factory).create_segmenter
            try:
                segmenter = factory(variant or None, self._pipelines)
            except (WeightsMissingError, ImportError) as err:
                if engine == FALLBACK:
                    raise
                log.warning("refiner %s is not available on this worker (%s): refining with %s", name, err, FALLBACK)
                segmenter = self.get(FALLBACK)
            except MattingError as err:
                raise InvalidRefineError(f"refiner {name!r}: {err}") from err
            self._built[name] = segmenter
            return segmenter


def refined(source: np.ndarray, matte: np.ndarray, region: np.ndarray, mode: RefineMode) -> np.ndarray:
    """The cut-out ``matte`` (uint8 HxWx4) with ``region`` erased (alpha 0) or restored (opaque, with the colours of
    ``source``, uint8 HxWx3); nothing outside the region changes."""
    rgba = matte.copy()
    if mode is RefineMode.ERASE:
        rgba[..., 3][region] = 0
    else:
        rgba[..., :3][region] = source[region]
        rgba[..., 3][region] = 255
    return rgba


def refine_matte(
    request: RefineMatteInput,
    store: ArtifactStore,
    refiners: Refiners,
    gpu_slot: contextlib.AbstractContextManager[object] | None = None,
) -> RefineMatteOutput:
    """Refine the request's cut-outs with its clicks, store and score each new version. Blocking: run it in a thread.

    The clicks are on the first frame; the region found there is carried through the others (the following frames
    of its emoji) by the segmenter. Everything is read and checked before any segmenting.

    Args:
        request: The frames (source, current cut-out, output key), the clicks, the mode, the refiner.
        store: The artifact store holding the sources and cut-outs and receiving the new versions.
        refiners: The worker's click segmenters.
        gpu_slot: Held while a segmenter that needs the GPU runs (see :class:`gpu_activity_worker.slots.GpuGate`);
            the weight-free one never waits for it.

    Returns:
        One result per frame, in the order of the request's frames, and the refiner that ran.

    Raises:
        InvalidRefineError: Unknown refiner, clicks outside the first frame, a source and its cut-out (or the frames)
            of different sizes.
        CorruptImageError: A source or cut-out is not an image.
        ArtifactError: A source or cut-out is missing or does not match its reference, or a new version could not be
            stored.
    """
    started = time.perf_counter()
    segmenter = refiners.get(request.refiner)
    sources, mattes = [], []
    for target in request.frames:
        source = decode_rgb(get_in_set(store, target.source, target.output_key), target.source.uri)
        matte = decode_rgba(get_in_set(store, target.matte, target.output_key), target.matte.uri)
        if source.shape[:2] != matte.shape[:2]:
            raise InvalidRefineError(
                f"{target.matte.uri} is {matte.shape[1]}x{matte.shape[0]}, "
                f"its source {source.shape[1]}x{source.shape[0]}"
            )
        sources.append(source)
        mattes.append(matte)
    height, width = sources[0].shape[:2]
    outside = [f"({p.x}, {p.y})" for p in request.points if p.x >= width or p.y >= height]
    if outside:
        raise InvalidRefineError(f"points outside the {width}x{height} frame: {', '.join(outside)}")
    if any(source.shape != sources[0].shape for source in sources[1:]):
        raise InvalidRefineError("the following frames carry the correction only when they are all the same size")
    holding = gpu_slot if segmenter.uses_gpu and gpu_slot is not None else contextlib.nullcontext()
    with holding:
        first = segmenter.segment(sources[0], request.points, request.mode)
        regions = [first]
        if len(sources) > 1:
            regions += segmenter.carry(sources[0], first, sources[1:], request.points, request.mode)
    per_frame_s = (time.perf_counter() - started) / len(sources)
    outputs = []
    for target, source, matte, region in zip(request.frames, sources, mattes, regions, strict=True):
        stored_at = time.perf_counter()
        rgba = refined(source, matte, region, request.mode)
        stored = store.put(target.output_key, encode_png(rgba), "image/png", width=width, height=height)
        score, parts = score_matte(rgba[..., 3])
        outputs.append(
            MatteFrameOutput(
                matte=stored,
                score=score,
                score_parts=parts,
                pipeline=f"refine:{segmenter.name}",
                device=segmenter.device,
                precision=segmenter.precision,
                elapsed_ms=(per_frame_s + time.perf_counter() - stored_at) * 1000,
            )
        )
    return RefineMatteOutput(frames=outputs, refiner=segmenter.name)
