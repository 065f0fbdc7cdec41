"""What a matting step is, and the state that flows through a pipeline of steps.

A pipeline such as ``rembg:isnet-anime+sam2+defringe`` is a list of steps. Each step is built once per worker process
by its factory (that is where a model engine loads its weights), then shared by every concurrent activity: ``apply``
must be thread-safe, which in practice means it never mutates the step or the state it is given. A step takes a
:class:`MatteState` and returns a new one with more filled in.

Images inside a pipeline are float32 in [0, 1]; the pipeline converts to and from uint8 at its edges.

The failures a step raises (:class:`~gpu_activity_worker.vocabulary.MattingError` and its kinds) and the device
and precision names are the GPU side's shared vocabulary, :mod:`gpu_activity_worker.vocabulary`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import numpy as np

from gpu_activity_worker.vocabulary import Device, Precision

TOLERANCE_FLOOR = 0.05
"""Smallest colour distance (RGB in [0, 1]) that counts as 'not the background', whatever the measured noise."""

NOISE_TO_TOLERANCE = 4.0
"""Tolerance per unit of measured noise: 4 median residual distances is about 6 per-channel standard deviations of
Gaussian noise, so a pure background pixel almost never exceeds it."""


class StepRole(StrEnum):
    """Where a step may stand in a pipeline."""

    COARSE = "coarse"
    """Makes an alpha from the image alone; comes first."""
    REFINER = "refiner"
    """Improves the alpha or colours of an earlier step; needs a coarse step before it."""


@dataclass(frozen=True)
class StepContext:
    """Where steps run and where they find weights. Shared by every step of a worker process.

    Attributes:
        device: ``auto`` picks CUDA when a model engine finds it, else the CPU; ``cpu`` or ``cuda`` force one.
        model_dir: Folder holding model weights, for engines that load them; ``None`` means the engine's default.
        max_batch: Most images one forward pass of a batchable step serves (1 turns micro-batching off).
        max_batch_wait_ms: How long a batch waits for more images before it runs.
        precision: What torch engines compute in: ``auto`` (fp16 autocast on CUDA, fp32 on the CPU), ``fp32``,
            ``fp16`` or ``bf16`` (autocast). The ONNX and weight-free engines always compute in fp32.
    """

    device: Device = "auto"
    model_dir: Path | None = None
    max_batch: int = 1
    max_batch_wait_ms: float = 5.0
    precision: Precision = "auto"


@dataclass(frozen=True)
class Background:
    """A background known per pixel, e.g. fitted by the classical engine.

    Attributes:
        colour: float32 HxWx3, the background colour behind every pixel (also where the subject covers it).
        noise: Median distance of true background pixels from ``colour`` (RGB distance, [0, 1] scale).
    """

    colour: np.ndarray
    noise: float

    @property
    def tolerance(self) -> float:
        """Colour distance from ``colour`` above which a pixel is not plain background."""
        return max(TOLERANCE_FLOOR, NOISE_TO_TOLERANCE * self.noise)


@dataclass(frozen=True)
class MatteState:
    """What a pipeline knows about one image so far. Steps return a changed copy and never mutate arrays in place.

    Attributes:
        image: float32 HxWx3 in [0, 1], the input image.
        alpha: float32 HxW in [0, 1], once a coarse step ran.
        foreground: float32 HxWx3 straight (unpremultiplied) foreground colour; ``None`` means the image itself.
        background: The background behind the subject, when a step could estimate it.
    """

    image: np.ndarray
    alpha: np.ndarray | None = None
    foreground: np.ndarray | None = None
    background: Background | None = None


class MattingStep(Protocol):
    """One built step of a pipeline. Built once per process, then used by concurrent activities."""

    @property
    def device(self) -> str:
        """Where this step runs: ``cpu`` or ``cuda`` (resolved, never ``auto``)."""
        ...

    @property
    def precision(self) -> str:
        """Numeric precision this step computes in, e.g. ``fp32`` or ``fp16``."""
        ...

    def apply(self, state: MatteState) -> MatteState:
        """Return ``state`` with this step's work done. Must be thread-safe and must not mutate ``state``.

        Raises:
            UnsupportedImageError: The step cannot handle this image.
        """
        ...


class BatchableStep(MattingStep, Protocol):
    """A step that can serve several images in one forward pass (model engines).

    When the worker's ``max_batch`` is above 1, concurrent activities' calls to ``apply`` are gathered and served by
    one ``apply_batch`` call (see :mod:`gpu_activity_worker.batching`).
    """

    def apply_batch(self, states: Sequence[MatteState]) -> list[MatteState]:
        """``[self.apply(s) for s in states]`` in one pass; the results must equal the unbatched ones.

        Images may differ in size. Must be thread-safe and must not mutate the states.
        """
        ...


StepFactory = Callable[[str | None, StepContext], MattingStep]
"""Builds a step from its variant (the part after ':' in ``engine:variant``, or ``None``) and the worker's context.

This is where a model engine loads its weights. A step module exposes its factory as ``create_step``.
"""
