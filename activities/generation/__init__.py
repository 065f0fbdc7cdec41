"""Image generation backends behind a small registry: one module per backend, registered by name."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from activities.generation.base import ImageGenerator
from activities.settings import Settings

GeneratorFactory = Callable[[Settings], ImageGenerator]
_FACTORIES: dict[str, GeneratorFactory] = {}


def register_generator(name: str) -> Callable[[GeneratorFactory], GeneratorFactory]:
    """Register a factory building the backend ``name`` from the settings."""

    def decorate(factory: GeneratorFactory) -> GeneratorFactory:
        _FACTORIES[name] = factory
        return factory

    return decorate


def available_generators() -> list[str]:
    _load_builtin_backends()
    return sorted(_FACTORIES)


def create_generator(name: str, settings: Settings) -> ImageGenerator:
    """Build backend ``name``; ``KeyError`` with the known names when it does not exist."""
    _load_builtin_backends()
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise KeyError(f"unknown generator {name!r}; available: {sorted(_FACTORIES)}") from None
    return factory(settings)


BUILTIN_BACKENDS = ("procedural", "dashscope")


def _load_builtin_backends() -> None:
    """Import the built-in backend modules, which register themselves."""
    for module in BUILTIN_BACKENDS:
        importlib.import_module(f"{__name__}.{module}")
