"""Pipeline names, the step registry, the per-process cache, and running a pipeline."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import pytest

from gpu_activity_worker import engines, pipeline
from gpu_activity_worker.engines import StepSpec, register_step, step_spec
from gpu_activity_worker.engines.base import (
    InvalidPipelineError,
    MatteState,
    MattingError,
    MattingStep,
    StepContext,
    StepRole,
    UnknownPipelineError,
)
from gpu_activity_worker.pipeline import StepRef, build_pipeline, parse_pipeline


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
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Isolated registry and caches, with fake steps ``fakemodel`` (any variant, on 'cuda') and ``fakerefine``;
    the list records every ``fakemodel`` build, by variant."""
    monkeypatch.setattr(engines, "_STEPS", dict(engines._STEPS))
    monkeypatch.setattr(pipeline, "_steps", {})
    monkeypatch.setattr(pipeline, "_pipelines", {})
    built: list[str | None] = []

    def build_model(variant: str | None, context: StepContext) -> MattingStep:
        built.append(variant)
        return FakeStep(device="cuda", precision="fp16")

    register_step(StepSpec("fakemodel", StepRole.COARSE, build_model, variants=None))
    register_step(StepSpec("fakerefine", StepRole.REFINER, lambda variant, context: FakeStep(coarse=False)))
    return built


def _disc_on_white(size: int = 64) -> np.ndarray:
    yy, xx = np.indices((size, size))
    alpha = np.clip(0.5 - (np.hypot(yy - size / 2, xx - size / 2) - size / 4), 0.0, 1.0)[..., None]
    return np.rint((np.array([0.8, 0.2, 0.1]) * alpha + (1 - alpha)) * 255).astype(np.uint8)


def test_classical_is_floodfill_then_defringe() -> None:
    assert parse_pipeline("classical") == (StepRef("floodfill"), StepRef("defringe"))
    assert parse_pipeline("floodfill+defringe") == parse_pipeline("classical")
    assert parse_pipeline("floodfill") == (StepRef("floodfill"),)


def test_variants(calls: list[str | None]) -> None:
    assert parse_pipeline("fakemodel:isnet-anime+defringe") == (
        StepRef("fakemodel", "isnet-anime"),
        StepRef("defringe"),
    )
    assert str(StepRef("fakemodel", "isnet-anime")) == "fakemodel:isnet-anime"
    with pytest.raises(InvalidPipelineError, match="no variant 'x'"):
        parse_pipeline("floodfill:x")
    with pytest.raises(InvalidPipelineError, match="alias"):
        parse_pipeline("classical:x")


def test_unknown_step_names_the_known_steps_and_aliases() -> None:
    with pytest.raises(UnknownPipelineError) as caught:
        parse_pipeline("birefnet-nope+defringe")

    message = str(caught.value)
    assert "'birefnet-nope'" in message
    assert "defringe, floodfill" in message
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
        parse_pipeline(name)


def test_a_second_coarse_step_is_refused(calls: list[str | None]) -> None:
    with pytest.raises(InvalidPipelineError, match="second coarse step fakemodel"):
        parse_pipeline("floodfill+fakemodel")


def test_registry() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_step(StepSpec("floodfill", StepRole.COARSE, "gpu_activity_worker.engines.classical"))
    with pytest.raises(UnknownPipelineError, match="known steps: birefnet, defringe, floodfill, rembg, sam2, vitmatte"):
        step_spec("nope")
    step = step_spec("floodfill").load_factory()(None, StepContext())
    assert (step.device, step.precision) == ("cpu", "fp32")


def test_engines_are_imported_only_when_built() -> None:
    code = (
        "import sys\n"
        "from gpu_activity_worker.pipeline import parse_pipeline\n"
        "parse_pipeline('classical')\n"
        "assert 'gpu_activity_worker.engines.classical' not in sys.modules\n"
        "assert 'scipy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_each_step_and_pipeline_is_built_once(calls: list[str | None]) -> None:
    first = build_pipeline("fakemodel:v1+fakerefine")

    assert build_pipeline("fakemodel:v1+fakerefine") is first
    build_pipeline("fakemodel:v1")  # another pipeline sharing the step reuses it
    build_pipeline("fakemodel:v1", StepContext(device="cpu"))  # another context builds its own
    build_pipeline("fakemodel:v2")
    assert calls == ["v1", "v1", "v2"]


def test_concurrent_builds_load_once(calls: list[str | None]) -> None:
    def build(_: int) -> pipeline.MattingPipeline:
        return build_pipeline("fakemodel:shared")

    with ThreadPoolExecutor(max_workers=8) as pool:
        built = list(pool.map(build, range(32)))

    assert calls == ["shared"]
    assert all(p is built[0] for p in built)


def test_device_and_precision_of_mixed_steps(calls: list[str | None]) -> None:
    mixed = build_pipeline("fakemodel+defringe")

    assert mixed.step_names == ["fakemodel", "defringe"]
    assert (mixed.device, mixed.precision) == ("cuda+cpu", "fp16+fp32")
    result = mixed.run(_disc_on_white())
    assert (result.device, result.precision) == ("cuda+cpu", "fp16+fp32")


def test_run_classical() -> None:
    rgb = _disc_on_white()
    classical = build_pipeline("classical")

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
        build_pipeline("classical").run(bad)


def test_a_coarse_step_that_makes_no_alpha_is_reported(calls: list[str | None]) -> None:
    register_step(StepSpec("broken", StepRole.COARSE, lambda variant, context: FakeStep(coarse=False)))

    with pytest.raises(MattingError, match="produced no alpha"):
        build_pipeline("broken").run(_disc_on_white())
