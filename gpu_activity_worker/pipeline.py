"""Matting pipelines: parse a name such as ``rembg:isnet-anime+defringe`` into steps, build them once, run them.

A pipeline name is steps joined by '+', each ``engine`` or ``engine:variant``
(:data:`~workflows.contract.PIPELINE_PATTERN`). A step name may also be an alias for several steps
(:data:`ALIASES`; ``classical`` is the weight-free default). The first step must be a coarse step (it makes the
alpha) and the others refiners; :meth:`Pipelines.parse` checks all of this from the step registry alone, without
importing or loading any engine, so a bad name is rejected before any work.

A worker makes one :class:`Pipelines` from its step registry and step context. :meth:`Pipelines.build` builds each
pipeline once, and each step once even when several pipelines share it (that is where model weights load); the
built pipelines are shared by concurrent activities.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpu_activity_worker.batching import batched
from gpu_activity_worker.engines import StepRegistry, StepSpec
from gpu_activity_worker.engines.base import MatteState, MattingStep, StepContext, StepRole
from gpu_activity_worker.vocabulary import InvalidPipelineError, MattingError, UnknownPipelineError
from workflows.contract import PIPELINE_PATTERN

ALIASES: dict[str, tuple[str, ...]] = {"classical": ("floodfill", "defringe")}
"""Step names that stand for several steps."""


@dataclass(frozen=True)
class MatteResult:
    """A finished cut-out.

    Attributes:
        rgba: uint8 HxWx4, straight (unpremultiplied) colour. After ``defringe``, RGB holds the foreground colour
            even where alpha is 0, so resampling or compositing never pulls in the old background.
        alpha: float32 HxW in [0, 1], the alpha before quantisation to uint8.
        device: Where the pipeline ran, e.g. ``cpu`` or ``cuda+cpu`` (distinct step devices in step order).
        precision: Numeric precision, e.g. ``fp32`` or ``fp16+fp32``.
    """

    rgba: np.ndarray
    alpha: np.ndarray
    device: str
    precision: str


@dataclass(frozen=True)
class StepRef:
    """One step of a pipeline name: an engine and its optional variant."""

    engine: str
    variant: str | None = None

    def __str__(self) -> str:
        return self.engine if self.variant is None else f"{self.engine}:{self.variant}"


def _expand(name: str) -> list[StepRef]:
    refs: list[StepRef] = []
    for token in name.split("+"):
        engine, _, variant = token.partition(":")
        if engine not in ALIASES:
            refs.append(StepRef(engine, variant or None))
        elif variant:
            raise InvalidPipelineError(f"{engine!r} is an alias of {'+'.join(ALIASES[engine])} and takes no variant")
        else:
            refs.extend(StepRef(step) for step in ALIASES[engine])
    return refs


def _joined(values: Sequence[str]) -> str:
    """Distinct values in order, joined by '+': ``cuda+cpu`` for a GPU model followed by a CPU refiner."""
    return "+".join(dict.fromkeys(values))


def _to_uint8(values: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(values * 255), 0, 255).astype(np.uint8)


class MattingPipeline:
    """A built pipeline: its steps, ready to run. Thread-safe; get one with :meth:`Pipelines.build`."""

    def __init__(self, name: str, refs: Sequence[StepRef], steps: Sequence[MattingStep]) -> None:
        self.name = name
        self.refs = tuple(refs)
        self._steps = tuple(steps)

    @property
    def step_names(self) -> list[str]:
        """The steps, aliases expanded, e.g. ``['floodfill', 'defringe']`` for ``classical``."""
        return [str(ref) for ref in self.refs]

    @property
    def device(self) -> str:
        """Where the steps run, e.g. ``cpu`` or ``cuda+cpu``."""
        return _joined([step.device for step in self._steps])

    @property
    def precision(self) -> str:
        """Precision of the steps, e.g. ``fp32`` or ``fp16+fp32``."""
        return _joined([step.precision for step in self._steps])

    def run(self, rgb: np.ndarray, steps_slot: contextlib.AbstractContextManager[object] | None = None) -> MatteResult:
        """Cut the subject out of one image.

        Args:
            rgb: uint8 HxWx3.
            steps_slot: Held while the steps run (a GPU slot); converting the image in and out happens outside it.

        Returns:
            Straight RGBA, the float alpha, and where and how precisely it was computed.

        Raises:
            ValueError: ``rgb`` is not a uint8 HxWx3 array.
            UnsupportedImageError: A step cannot handle this image (e.g. no plain background for ``floodfill``).
        """
        if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
            raise ValueError(f"expected a uint8 HxWx3 image, got {rgb.dtype} with shape {rgb.shape}")
        state = MatteState(image=rgb.astype(np.float32) / 255)
        with steps_slot or contextlib.nullcontext():
            for step in self._steps:
                state = step.apply(state)
        if state.alpha is None:
            raise MattingError(f"pipeline {self.name!r} produced no alpha: its coarse step {self.refs[0]} is broken")
        alpha = np.clip(state.alpha, 0.0, 1.0).astype(np.float32)
        colour = state.image if state.foreground is None else state.foreground
        rgba = np.dstack([_to_uint8(colour), _to_uint8(alpha)])
        return MatteResult(rgba=rgba, alpha=alpha, device=self.device, precision=self.precision)


class Pipelines:
    """The matting pipelines of one worker: names checked against its step registry, pipelines and steps built once.

    Thread-safe: concurrent activities share it and the pipelines it builds.

    Args:
        registry: The steps pipeline names may use.
        context: Device, weights folder and batching of every step built; ``None`` is the default
            :class:`StepContext`.
    """

    def __init__(self, registry: StepRegistry, context: StepContext | None = None) -> None:
        self._registry = registry
        self._context = context or StepContext()
        self._lock = threading.RLock()
        self._steps: dict[StepRef, MattingStep] = {}
        self._pipelines: dict[str, MattingPipeline] = {}

    def parse(self, name: str) -> tuple[StepRef, ...]:
        """The steps of a pipeline name, checked against the registry (nothing is imported or loaded).

        Raises:
            InvalidPipelineError: Bad syntax, an unknown variant, a refiner first, a second coarse step, a repeated
                step.
            UnknownPipelineError: A step no engine provides; the message lists the known steps and aliases.
        """
        if not PIPELINE_PATTERN.fullmatch(name):
            raise InvalidPipelineError(
                f"matting pipeline {name!r} is not a valid name: steps joined by '+', each 'engine' or "
                "'engine:variant', e.g. 'classical' or 'rembg:isnet-anime+defringe'"
            )
        refs = _expand(name)
        specs = [self._spec(ref, name) for ref in refs]
        for ref, spec in zip(refs, specs, strict=True):
            spec.check_variant(ref.variant)
        if specs[0].role is not StepRole.COARSE:
            raise InvalidPipelineError(
                f"pipeline {name!r} starts with {refs[0]}, a refiner: it needs a coarse step before it that makes the "
                f"alpha, e.g. 'floodfill+{refs[0]}'"
            )
        for ref, spec in zip(refs[1:], specs[1:], strict=True):
            if spec.role is StepRole.COARSE:
                raise InvalidPipelineError(
                    f"pipeline {name!r} has a second coarse step {ref} after {refs[0]}: "
                    "only the first step makes the alpha"
                )
        engines = [ref.engine for ref in refs]
        repeated = sorted({engine for engine in engines if engines.count(engine) > 1})
        if repeated:
            raise InvalidPipelineError(f"pipeline {name!r} uses {', '.join(repeated)} more than once")
        return tuple(refs)

    def build(self, name: str) -> MattingPipeline:
        """The pipeline called ``name``, built on first use and then shared by every caller.

        Args:
            name: A pipeline name, e.g. ``classical`` or ``rembg:isnet-anime+defringe``.

        Raises:
            PipelineError: The name is not usable (see :meth:`parse`).
        """
        with self._lock:
            pipeline = self._pipelines.get(name)
            if pipeline is None:
                refs = self.parse(name)
                pipeline = self._pipelines[name] = MattingPipeline(name, refs, [self._built_step(ref) for ref in refs])
            return pipeline

    def step(self, name: str) -> MattingStep:
        """One step by name (``sam2`` or ``sam2:small``), built on first use and shared with the pipelines using it
        (behind its micro-batcher when the worker batches: the batcher's ``step`` is the step itself).

        Raises:
            PipelineError: No such step, or no such variant of it.
        """
        engine, _, variant = name.partition(":")
        ref = StepRef(engine, variant or None)
        self._spec(ref, name).check_variant(ref.variant)
        return self._built_step(ref)

    def _built_step(self, ref: StepRef) -> MattingStep:
        """The step for ``ref``, built on first use (under the lock: a model loads its weights once, not per caller).

        A batchable step is wrapped in its micro-batcher here, once, so every caller of the step shares the batcher.
        """
        with self._lock:
            step = self._steps.get(ref)
            if step is None:
                factory = self._registry.spec(ref.engine).load_factory()
                step = self._steps[ref] = batched(factory(ref.variant, self._context), self._context)
            return step

    def _spec(self, ref: StepRef, pipeline: str) -> StepSpec:
        try:
            return self._registry.spec(ref.engine)
        except UnknownPipelineError:
            aliases = ", ".join(f"{alias} = {'+'.join(steps)}" for alias, steps in sorted(ALIASES.items()))
            raise UnknownPipelineError(
                f"unknown matting step {ref.engine!r} in pipeline {pipeline!r}; "
                f"known steps: {', '.join(self._registry.names())}; aliases: {aliases}"
            ) from None
