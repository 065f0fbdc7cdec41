"""Image generation backends by name: one module per backend, one entry in :func:`builtin_generators`.

A worker builds its :class:`GeneratorRegistry` once (:func:`builtin_generators`); tests and benchmarks add stand-in
generators to a registry of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from activities.generation.base import Generator

GeneratorFactory = Callable[[], Generator]
"""Builds one backend; it reads its own settings, if any."""


class GeneratorRegistry:
    """Generator factories by backend name.

    Args:
        factories: The backends to start with.
    """

    def __init__(self, factories: Mapping[str, GeneratorFactory] | None = None) -> None:
        self._factories = dict(factories or {})

    def register(self, name: str, factory: GeneratorFactory) -> None:
        """Add the backend ``name``.

        Raises:
            ValueError: A backend of that name is already registered.
        """
        if name in self._factories:
            raise ValueError(f"generator {name!r} is already registered")
        self._factories[name] = factory

    def create(self, name: str) -> Generator:
        """Build backend ``name``.

        Raises:
            KeyError: No such backend; the message lists the known ones.
        """
        try:
            factory = self._factories[name]
        except KeyError:
            raise KeyError(f"unknown generator {name!r}; available: {sorted(self._factories)}") from None
        return factory()


def builtin_generators() -> GeneratorRegistry:
    """A new registry of the built-in backends, ``procedural`` and ``dashscope``."""
    # Imported here, not at the top: importing this package (e.g. for .base) does not import every backend.
    from activities.generation.dashscope import create_dashscope_generator
    from activities.generation.procedural import ProceduralGenerator

    return GeneratorRegistry({"procedural": ProceduralGenerator, "dashscope": create_dashscope_generator})
