"""Pipeline names, the step registry, the per-worker cache, and running a pipeline."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import pytest

from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, MattingStep, StepContext, StepRole
from gpu_activity_worker.pipeline import MattingPipeline, Pipelines, StepRef
from gpu_activity_worker.vocabulary import InvalidPipelineError, MattingError, UnknownPipelineError


@dataclass
class FakeStep:
    """A model engine stand-in: a full-frame alpha (coarse) or no change (refiner)."""

    device: str = "cpu"
    precision: str = "fp32"
    coarse: bool = True

    def apply(self, state: MatteState) -> MatteState:
        if not self.coarse:
            return state
        return replace(state, alpha=np.ones(state.image.shape[:2], dtype=np.float32))


@pytest.fixture
def calls() -> list[str | None]:
    """Every ``fakemodel`` build, by variant."""
    return []


@pytest.fixture
def steps(calls: list[str | None]) -> StepRegistry:
    """The built-in steps, ``fakemodel`` (any variant, on 'cuda', its builds recorded in ``calls``), ``fakerefine``."""

    def build_model(variant: str | None, context: StepContext) -> MattingStep:
        calls.append(variant)
        return FakeStep(device="cuda", precision="fp16")

    registry = builtin_steps()
    registry.register(StepSpec("fakemodel", StepRole.COARSE, build_model, variants=None))
    registry.register(StepSpec("fakerefine", StepRole.REFINER, lambda variant, context: FakeStep(coarse=False)))
    return registry


@pytest.fixture
def pipelines(steps: StepRegistry) -> Pipelines:
    return Pipelines(steps)


def _disc_on_white(size: int = 64) -> np.ndarray:
    yy, xx = np.indices((size, size))
    alpha = np.clip(0.5 - (np.hypot(yy - size / 2, xx - size / 2) - size / 4), 0.0, 1.0)[..., None]
    return np.rint((np.array([0.8, 0.2, 0.1]) * alpha + (1 - alpha)) * 255).astype(np.uint8)


BUILTIN = Pipelines(builtin_steps())
"""The built-in steps only, with the default context."""


def test_classical_is_floodfill_then_defringe() -> None:
    assert BUILTIN.parse("classical") == (StepRef("floodfill"), StepRef("defringe"))
    assert BUILTIN.parse("floodfill+defringe") == BUILTIN.parse("classical")
    assert BUILTIN.parse("floodfill") == (StepRef("floodfill"),)


def test_variants(pipelines: Pipelines) -> None:
    assert pipelines.parse("fakemodel:isnet-anime+defringe") == (
        StepRef("fakemodel", "isnet-anime"),
        StepRef("defringe"),
    )
    assert str(StepRef("fakemodel", "isnet-anime")) == "fakemodel:isnet-anime"
    with pytest.raises(InvalidPipelineError, match="no variant 'x'"):
        pipelines.parse("floodfill:x")
    with pytest.raises(InvalidPipelineError, match="alias"):
        pipelines.parse("classical:x")


def test_unknown_step_names_the_known_steps_and_aliases() -> None:
    with pytest.raises(UnknownPipelineError) as caught:
        BUILTIN.parse("birefnet-nope+defringe")

    message = str(caught.value)
    assert "'birefnet-nope'" in message
    assert "defringe, effects, floodfill" in message
    assert "classical = floodfill+defringe" in message
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("", "not a valid name"),
        ("Classical", "not a valid name"),
        ("floodfill++defringe", "not a valid name"),
        ("defringe", "needs a coarse step before it"),
        ("defringe+floodfill", "needs a coarse step before it"),
        ("classical+defringe", "defringe more than once"),
    ],
)
def test_invalid_pipelines(name: str, match: str) -> None:
    with pytest.raises(InvalidPipelineError, match=match):
        BUILTIN.parse(name)


def test_a_second_coarse_step_is_refused(pipelines: Pipelines) -> None:
    with pytest.raises(InvalidPipelineError, match="second coarse step fakemodel"):
        pipelines.parse("floodfill+fakemodel")


def test_registry() -> None:
    registry = builtin_steps()
    with pytest.raises(ValueError, match="already registered"):
        registry.register(StepSpec("floodfill", StepRole.COARSE, "gpu_activity_worker.engines.classical"))
    known = "known steps: birefnet, defringe, effects, floodfill, rembg, sam2, vitmatte"
    with pytest.raises(UnknownPipelineError, match=known):
        registry.spec("nope")
    step = registry.spec("floodfill").load_factory()(None, StepContext())
    assert (step.device, step.precision) == ("cpu", "fp32")


def test_each_registry_is_its_own(steps: StepRegistry) -> None:
    assert "fakemodel" in steps.names()
    assert "fakemodel" not in builtin_steps().names()


def test_engines_are_imported_only_when_built() -> None:
    code = (
        "import sys\n"
        "from gpu_activity_worker.engines import builtin_steps\n"
        "from gpu_activity_worker.pipeline import Pipelines\n"
        "Pipelines(builtin_steps()).parse('classical')\n"
        "assert 'gpu_activity_worker.engines.classical' not in sys.modules\n"
        "assert 'scipy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_each_step_and_pipeline_is_built_once(steps: StepRegistry, calls: list[str | None]) -> None:
    pipelines = Pipelines(steps)
    first = pipelines.build("fakemodel:v1+fakerefine")

    assert pipelines.build("fakemodel:v1+fakerefine") is first
    pipelines.build("fakemodel:v1")  # another pipeline sharing the step reuses it
    Pipelines(steps, StepContext(device="cpu")).build("fakemodel:v1")  # another worker builds its own
    pipelines.build("fakemodel:v2")
    assert calls == ["v1", "v1", "v2"]


def test_concurrent_builds_load_once(pipelines: Pipelines, calls: list[str | None]) -> None:
    def build(_: int) -> MattingPipeline:
        return pipelines.build("fakemodel:shared")

    with ThreadPoolExecutor(max_workers=8) as pool:
        built = list(pool.map(build, range(32)))

    assert calls == ["shared"]
    assert all(p is built[0] for p in built)


def test_device_and_precision_of_mixed_steps(pipelines: Pipelines) -> None:
    mixed = pipelines.build("fakemodel+defringe")

    assert mixed.step_names == ["fakemodel", "defringe"]
    assert (mixed.device, mixed.precision) == ("cuda+cpu", "fp16+fp32")
    result = mixed.run(_disc_on_white())
    assert (result.device, result.precision) == ("cuda+cpu", "fp16+fp32")


def test_run_classical() -> None:
    rgb = _disc_on_white()
    classical = BUILTIN.build("classical")

    result = classical.run(rgb)

    assert classical.step_names == ["floodfill", "defringe"]
    assert (result.device, result.precision) == ("cpu", "fp32")
    assert result.rgba.dtype == np.uint8 and result.rgba.shape == (64, 64, 4)
    assert result.alpha.dtype == np.float32 and result.alpha.shape == (64, 64)
    assert np.array_equal(result.rgba[..., 3], np.rint(result.alpha * 255).astype(np.uint8))
    opaque = result.alpha == 1.0
    assert np.array_equal(result.rgba[opaque, :3], rgb[opaque])
    assert result.alpha[0, 0] == 0.0 and result.alpha[32, 32] == 1.0


@pytest.mark.parametrize(
    "bad", [np.zeros((8, 8, 3), dtype=np.float32), np.zeros((8, 8, 4), dtype=np.uint8), np.zeros((8, 8), np.uint8)]
)
def test_run_rejects_anything_but_uint8_rgb(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="uint8 HxWx3"):
        BUILTIN.build("classical").run(bad)


def test_a_coarse_step_that_makes_no_alpha_is_reported(steps: StepRegistry) -> None:
    steps.register(StepSpec("broken", StepRole.COARSE, lambda variant, context: FakeStep(coarse=False)))

    with pytest.raises(MattingError, match="produced no alpha"):
        Pipelines(steps).build("broken").run(_disc_on_white())
