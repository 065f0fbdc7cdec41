"""The ``sam2`` click segmenter with a random-weight SAM 2.1 hiera-tiny built offline (as tests/gpu_activity_worker/
test_sam2.py builds it): its masks are arbitrary, so these check that the worker's own SAM2 step is used, the
shapes, the propagation through following frames, and that a region only ever erases or restores. SAM2 embeds every
image at 1024x1024 (seconds on a CPU): few images."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.artifacts import FileArtifactStore
from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.engines.base import StepContext
from gpu_activity_worker.matting import decode_rgba
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.refine import Refiners, refine_matte
from gpu_activity_worker.refine.sam2 import Sam2Segmenter
from testkit.model_folders import sam2_folder
from testkit.set_keys import source_key, version_key
from testkit.weights import unpinned
from workflows.contract import RefineMatteInput, RefineMode, RefinePoint, RefineTarget

SIZE = 48


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def refiners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Refiners]:
    """Refiners over pipelines whose model folder holds a random-weight SAM 2.1 hiera-tiny checkpoint."""
    root = tmp_path_factory.mktemp("models")
    sam2_folder(root, "tiny")
    with unpinned("sam2"):
        yield Refiners(Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=root)))


def _frame(shift: int) -> np.ndarray:
    image = np.full((SIZE, SIZE, 3), 255, dtype=np.uint8)
    yy, xx = np.indices((SIZE, SIZE))
    image[np.hypot(yy - 24, xx - 16 - shift) <= 10] = (240, 140, 30)
    return image


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_the_worker_s_sam2_step_segments_the_clicks(refiners: Refiners) -> None:
    segmenter = refiners.get("sam2")

    assert isinstance(segmenter, Sam2Segmenter) and segmenter.name == "sam2"
    assert segmenter.uses_gpu and (segmenter.device, segmenter.precision) == ("cpu", "fp32")
    region = segmenter.segment(_frame(0), [RefinePoint(x=16, y=24)], RefineMode.ERASE)
    assert region.shape == (SIZE, SIZE) and region.dtype == np.bool_


def test_refine_matte_propagates_through_the_following_frames(refiners: Refiners, tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    targets, mattes = [], []
    for shift in range(2):
        frame = _frame(4 * shift)
        matte = np.dstack([frame, np.full((SIZE, SIZE), 200, dtype=np.uint8)])
        folder = f"f{shift}"
        targets.append(
            RefineTarget(
                source=store.put(source_key(f"{folder}/source.png"), _png(frame), "image/png"),
                matte=store.put(source_key(f"{folder}/matte.png"), _png(matte), "image/png", width=SIZE, height=SIZE),
                output_key=version_key(0, frame=shift),
            )
        )
        mattes.append(matte)
    points = [RefinePoint(x=16, y=24), RefinePoint(x=40, y=5, foreground=False)]
    request = RefineMatteInput(frames=targets, points=points, mode=RefineMode.ERASE, refiner="sam2")

    output = refine_matte(request, store, refiners)

    assert output.refiner == "sam2" and len(output.frames) == 2
    for result, matte in zip(output.frames, mattes, strict=True):
        assert result.pipeline == "refine:sam2" and 0.0 <= result.score <= 1.0
        rgba = decode_rgba(store.get(result.matte), result.matte.uri)
        assert set(np.unique(rgba[..., 3])) <= {0, 200}, "erase only ever takes alpha away"
        np.testing.assert_array_equal(rgba[..., :3], matte[..., :3])
