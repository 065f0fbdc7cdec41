"""The registry of matting steps: step name -> how to build it, without importing it.

Each engine lives in one module of this package that exposes ``create_step(variant, context)`` (a
:data:`~gpu_activity_worker.engines.base.StepFactory`). The registry stores the module *path* and imports it only when
a pipeline that uses the step is built, so a CPU-only worker never imports torch or onnxruntime. Adding a model engine
is one module plus one :func:`register_step` line below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from gpu_activity_worker.engines.base import (
    InvalidPipelineError,
    StepFactory,
    StepRole,
    UnknownPipelineError,
)


@dataclass(frozen=True)
class StepSpec:
    """A registered step: what it is and how to build it.

    Attributes:
        name: The engine name used in pipeline names (the part before ':').
        role: Whether the step makes an alpha (coarse) or improves one (refiner).
        factory: The factory itself, or the path of a module whose ``create_step`` is the factory.
        variants: Allowed variants (the part after ':'); ``None`` accepts any variant, e.g. a model file name.
            Giving no variant is always allowed and means the engine's default.
        summary: One line for error messages and listings.
    """

    name: str
    role: StepRole
    factory: StepFactory | str
    variants: frozenset[str] | None = frozenset()
    summary: str = ""

    def check_variant(self, variant: str | None) -> None:
        """Raise :class:`InvalidPipelineError` if ``variant`` is not one this step accepts."""
        if variant is None or self.variants is None or variant in self.variants:
            return
        allowed = f"one of {sorted(self.variants)}" if self.variants else "none"
        raise InvalidPipelineError(f"step {self.name!r} has no variant {variant!r} (variants: {allowed})")

    def load_factory(self) -> StepFactory:
        """The factory, importing the engine module on first use."""
        if not isinstance(self.factory, str):
            return self.factory
        factory: StepFactory = importlib.import_module(self.factory).create_step
        return factory


_STEPS: dict[str, StepSpec] = {}


def register_step(spec: StepSpec) -> None:
    """Add a step to the registry.

    Raises:
        ValueError: A step of that name is already registered.
    """
    if spec.name in _STEPS:
        raise ValueError(f"matting step {spec.name!r} is already registered")
    _STEPS[spec.name] = spec


def known_steps() -> list[str]:
    """Names of every registered step, sorted."""
    return sorted(_STEPS)


def step_spec(name: str) -> StepSpec:
    """The registered step called ``name``.

    Raises:
        UnknownPipelineError: No such step; the message lists the known ones.
    """
    try:
        return _STEPS[name]
    except KeyError:
        raise UnknownPipelineError(f"unknown matting step {name!r}; known steps: {', '.join(known_steps())}") from None


register_step(
    StepSpec(
        "floodfill",
        StepRole.COARSE,
        "gpu_activity_worker.engines.classical",
        summary="weight-free: flood-fill a plain (uniform or smoothly graded) background from the border",
    )
)
register_step(
    StepSpec(
        "defringe",
        StepRole.REFINER,
        "gpu_activity_worker.engines.defringe",
        variants=frozenset({"colour"}),
        summary="re-estimate alpha at the edge against the background, then unmix the background out of the colours "
        "(defringe:colour keeps the alpha and only unmixes, e.g. after vitmatte)",
    )
)
register_step(
    StepSpec(
        "rembg",
        StepRole.COARSE,
        "gpu_activity_worker.engines.rembg",
        variants=frozenset({"u2net", "u2netp", "isnet-anime", "birefnet-general", "birefnet-general-lite"}),
        summary="a rembg ONNX session's mask (commercial-use weights only; default isnet-anime)",
    )
)
register_step(
    StepSpec(
        "birefnet",
        StepRole.COARSE,
        "gpu_activity_worker.engines.birefnet",
        variants=frozenset({"general", "lite"}),
        summary="BiRefNet in torch: high-resolution subject segmentation (default general; lite is smaller and faster)",
    )
)
register_step(
    StepSpec(
        "vitmatte",
        StepRole.REFINER,
        "gpu_activity_worker.engines.vitmatte",
        variants=frozenset({"small", "base"}),
        summary="ViTMatte: re-predict alpha in a band around the coarse edge (hair, fur, soft edges; default small)",
    )
)
register_step(
    StepSpec(
        "sam2",
        StepRole.REFINER,
        "gpu_activity_worker.engines.sam2",
        variants=frozenset({"tiny", "small", "base-plus", "large"}),
        summary="SAM 2.1 prompted by the coarse alpha: fills holes, restores thin parts, drops blobs (default tiny)",
    )
)
