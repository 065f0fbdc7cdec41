"""The GPU side's shared vocabulary: what any of its modules may name without importing the engines.

- The matting failures: :class:`MattingError` and its kinds, each carrying the contract's
  :class:`~workflows.contract.FailureType` it is reported as (by the activities, the RunPod handler and the
  dispatcher), so renaming a class changes nothing on the wire.
- The names of where a step runs (:data:`Device`) and what it computes in (:data:`Precision`), as the settings, the
  device resolution and the engines spell them.

The engines' own base (what a step is, the state that flows through a pipeline) is
:mod:`gpu_activity_worker.engines.base`; this module imports nothing of the GPU side, so the weights, the device
resolution, the settings and the RunPod wire format use it without the engines package.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from workflows.contract import FailureType

Device = Literal["auto", "cpu", "cuda"]
"""Where model engines run: ``auto`` picks CUDA when an engine finds it, else the CPU; ``cpu`` or ``cuda`` force one."""

Precision = Literal["auto", "fp32", "fp16", "bf16"]
"""What torch engines compute in: ``auto`` (fp16 autocast on CUDA, fp32 on the CPU), ``fp32``, ``fp16`` or ``bf16``."""


class MattingError(Exception):
    """A matting pipeline could not produce a cut-out; ``failure_type`` is how activities and jobs report it."""

    failure_type: ClassVar[FailureType] = FailureType.MATTING_FAILED


class UnsupportedImageError(MattingError):
    """The image is outside what a step can handle (e.g. a textured background for the classical engine).

    Retrying the same image gives the same error; another pipeline (a model engine) may succeed.
    """

    failure_type = FailureType.UNSUPPORTED_IMAGE


class CorruptImageError(MattingError):
    """The source bytes are not a readable image."""

    failure_type = FailureType.CORRUPT_IMAGE


class PipelineError(MattingError, ValueError):
    """A pipeline name is not usable. Raised before any work, so a caller can reject the request up front."""

    failure_type = FailureType.UNKNOWN_PIPELINE


class UnknownPipelineError(PipelineError):
    """A pipeline names a step that no engine provides."""


class InvalidPipelineError(PipelineError):
    """A pipeline's steps exist but do not fit together (bad syntax, unknown variant, a refiner with no coarse step)."""
