"""Matting steps by name: step name -> how to build it, without importing it.

Each engine lives in one module of this package that exposes ``create_step(variant, context)`` (a
:data:`~gpu_activity_worker.engines.base.StepFactory`). A :class:`StepRegistry` stores the module *path* and the
engine is imported only when a pipeline that uses the step is built, so a CPU-only worker never imports torch or
onnxruntime. A worker builds its registry once (:func:`builtin_steps`, the engines of this package); tests and
benchmarks add stand-in steps to a registry of their own. Adding a model engine is one module plus one entry in
``_BUILTIN_STEPS`` below.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass

from gpu_activity_worker.engines.base import StepFactory, StepRole
from gpu_activity_worker.vocabulary import InvalidPipelineError, UnknownPipelineError


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


class StepRegistry:
    """Matting steps by name: what each is and how to build it.

    A worker builds one (usually :func:`builtin_steps`) and hands it to its
    :class:`~gpu_activity_worker.pipeline.Pipelines`; tests and benchmarks add stand-in steps to their own.

    Args:
        specs: The steps to start with.

    Raises:
        ValueError: Two of ``specs`` have the same name.
    """

    def __init__(self, specs: Iterable[StepSpec] = ()) -> None:
        self._specs: dict[str, StepSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: StepSpec) -> None:
        """Add a step.

        Raises:
            ValueError: A step of that name is already registered.
        """
        if spec.name in self._specs:
            raise ValueError(f"matting step {spec.name!r} is already registered")
        self._specs[spec.name] = spec

    def names(self) -> list[str]:
        """Names of every registered step, sorted."""
        return sorted(self._specs)

    def spec(self, name: str) -> StepSpec:
        """The registered step called ``name``.

        Raises:
            UnknownPipelineError: No such step; the message lists the known ones.
        """
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownPipelineError(
                f"unknown matting step {name!r}; known steps: {', '.join(self.names())}"
            ) from None


_BUILTIN_STEPS = (
    StepSpec(
        "floodfill",
        StepRole.COARSE,
        "gpu_activity_worker.engines.classical",
        summary="weight-free: flood-fill a plain (uniform or smoothly graded) background from the border",
    ),
    StepSpec(
        "defringe",
        StepRole.REFINER,
        "gpu_activity_worker.engines.defringe",
        variants=frozenset({"colour"}),
        summary="re-estimate alpha at the edge against the background, then unmix the background out of the colours "
        "(defringe:colour keeps the alpha and only unmixes, e.g. after vitmatte)",
    ),
    StepSpec(
        "effects",
        StepRole.REFINER,
        "gpu_activity_worker.engines.effects",
        summary="restore the small effects (sparks, sweat drops, motion lines) a model's mask dropped beside the "
        "subject; put it before defringe, e.g. birefnet+effects+defringe",
    ),
    StepSpec(
        "rembg",
        StepRole.COARSE,
        "gpu_activity_worker.engines.rembg",
        variants=frozenset({"u2net", "u2netp", "isnet-anime", "birefnet-general", "birefnet-general-lite"}),
        summary="a rembg ONNX session's mask (commercial-use weights only; default isnet-anime)",
    ),
    StepSpec(
        "birefnet",
        StepRole.COARSE,
        "gpu_activity_worker.engines.birefnet",
        variants=frozenset({"general", "lite", "toonout"}),
        summary=(
            "BiRefNet in torch: high-resolution subject segmentation (default general; lite is smaller and faster; "
            "toonout is fine-tuned on cartoon characters and sees the frame on mid grey)"
        ),
    ),
    StepSpec(
        "vitmatte",
        StepRole.REFINER,
        "gpu_activity_worker.engines.vitmatte",
        variants=frozenset({"small", "base"}),
        summary="ViTMatte: re-predict alpha in a band around the coarse edge (hair, fur, soft edges; default small)",
    ),
    StepSpec(
        "sam2",
        StepRole.REFINER,
        "gpu_activity_worker.engines.sam2",
        variants=frozenset({"tiny", "small", "base-plus", "large"}),
        summary="SAM 2.1 prompted by the coarse alpha: fills holes, restores thin parts, drops blobs (default tiny)",
    ),
)


def builtin_steps() -> StepRegistry:
    """A new registry of the built-in engines (each imported only when a pipeline using it is built)."""
    return StepRegistry(_BUILTIN_STEPS)
