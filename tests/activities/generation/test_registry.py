"""The generator registry: backends by name, each built by its factory."""

from __future__ import annotations

import pytest

from activities.generation import GeneratorRegistry, builtin_generators
from activities.generation.procedural import ProceduralGenerator


def test_the_builtin_registry_builds_its_backends_by_name() -> None:
    registry = builtin_generators()

    assert isinstance(registry.create("procedural"), ProceduralGenerator)
    with pytest.raises(KeyError, match=r"unknown generator 'nope'; available: \['dashscope', 'procedural'\]"):
        registry.create("nope")


def test_each_registry_is_its_own() -> None:
    registry = GeneratorRegistry({"procedural": ProceduralGenerator})
    with pytest.raises(ValueError, match="'procedural' is already registered"):
        registry.register("procedural", ProceduralGenerator)
    registry.register("stand-in", ProceduralGenerator)

    assert isinstance(registry.create("stand-in"), ProceduralGenerator)
    with pytest.raises(KeyError, match="unknown generator 'stand-in'"):
        builtin_generators().create("stand-in")
