"""The ``rembg`` coarse step: a subject mask from one of rembg's ONNX sessions, e.g. ``rembg:isnet-anime``.

Only sessions whose weights allow commercial use are offered (:data:`SESSIONS`). rembg's own default session,
``bria-rmbg`` (BRIA RMBG-2.0), has non-commercial weights, so this step never falls back to it: no variant means
:data:`DEFAULT_SESSION`, ``isnet-anime``, an IS-Net trained on anime characters (SkyTNT/anime-segmentation). Its
flat colours, dark outlines and stylised shapes are much closer to cartoon emoji than the photographs the general
sessions were trained on.

Weights. The session ``<s>`` loads ``<model_dir>/rembg-<s>/<s>.onnx`` (weight set ``rembg-<s>`` in
:data:`~gpu_activity_worker.weights.CATALOGUE`). rembg looks for its model file under ``$U2NET_HOME`` when that is set
and downloads it only when the file is not there; a file that is there is used as-is, unchecked. So the factory
first requires the file (a missing one raises
:class:`~gpu_activity_worker.weights.WeightsMissingError` before rembg runs, hence rembg never downloads), then
points ``U2NET_HOME`` at the weight set's folder while rembg creates the session. The environment is process-global:
that happens under a lock, and the previous value is restored.

What the step returns is exactly the session's mask: rembg resizes the image to the model's input size, runs it,
stretches the output to [0, 1] per image and resizes it back. Edges are cleaned by a later ``defringe`` step.

No ``apply_batch``: rembg's released ONNX files take one image per run and ``predict`` does its own per-image pre-
and post-processing, so concurrent activities simply run sessions in parallel (onnxruntime's ``run`` is
thread-safe). ``isnet-general-use`` is not offered: only the DIS code is Apache-2.0, its weights carry no licence and
were trained on DIS5K, whose terms are non-commercial.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import rembg
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, InvalidGraph, InvalidProtobuf
from PIL import Image

from gpu_activity_worker.device import onnx_providers
from gpu_activity_worker.engines.base import MatteState, StepContext
from gpu_activity_worker.vocabulary import InvalidPipelineError, MattingError
from gpu_activity_worker.weights import WeightsMissingError, require

SESSIONS = frozenset({"u2net", "u2netp", "isnet-anime", "birefnet-general", "birefnet-general-lite"})
"""rembg sessions this step offers: those whose weights allow commercial use (see the module docstring)."""

DEFAULT_SESSION = "isnet-anime"
"""The session used when the pipeline names no variant (never rembg's own non-commercial default)."""

_HOME_VARIABLE = "U2NET_HOME"
_home_lock = threading.Lock()


def weights_name(session: str) -> str:
    """The weight set holding ``session``'s model, e.g. ``rembg-isnet-anime``."""
    return f"rembg-{session}"


@contextmanager
def _rembg_home(folder: Path) -> Iterator[None]:
    """Point rembg at ``folder`` for the duration, restoring the previous value after (under a process-wide lock)."""
    with _home_lock:
        previous = os.environ.get(_HOME_VARIABLE)
        os.environ[_HOME_VARIABLE] = str(folder)
        try:
            yield
        finally:
            if previous is None:
                del os.environ[_HOME_VARIABLE]
            else:
                os.environ[_HOME_VARIABLE] = previous


def _to_pil(image: np.ndarray) -> Image.Image:
    """float32 HxWx3 in [0, 1] to an RGB image; exact for the pipeline's images, which came from uint8."""
    return Image.fromarray(np.clip(np.rint(image * 255), 0, 255).astype(np.uint8), "RGB")


class RembgStep:
    """Coarse step: the mask of one rembg session as the alpha.

    Thread-safe: rembg's ``predict`` keeps no state between calls (it only reads the session) and onnxruntime's
    ``InferenceSession.run`` may be called from several threads at once.
    """

    def __init__(self, session: str, model: Any, device: str) -> None:
        self.session = session
        self._model = model
        self._device = device

    @property
    def device(self) -> str:
        """``cuda`` or ``cpu``: where onnxruntime actually runs the session."""
        return self._device

    @property
    def precision(self) -> str:
        """Always ``fp32``: rembg's released ONNX files are fp32 graphs, run as they are."""
        return "fp32"

    def apply(self, state: MatteState) -> MatteState:
        """Set ``alpha`` (float32 HxW in [0, 1]) to the session's mask of ``state.image``."""
        image = _to_pil(state.image)
        mask = self._model.predict(image)[0]
        alpha = np.asarray(mask, dtype=np.float32) / 255
        return replace(state, alpha=alpha)


def _load(session: str, model_file: Path, providers: list[str]) -> Any:
    """rembg's session ``session`` on ``model_file`` (which must exist: rembg would otherwise download it)."""
    name = weights_name(session)
    try:
        with _rembg_home(model_file.parent):
            return rembg.new_session(session, providers=providers)
    except (InvalidProtobuf, InvalidGraph, InvalidArgument, Fail) as err:
        raise WeightsMissingError(
            f"weights {name!r}: {model_file} is not a usable ONNX model ({err}); the file is damaged or incomplete: "
            f"run `popcon models fetch {name}` again"
        ) from err


def create_step(variant: str | None, context: StepContext) -> RembgStep:
    """The step factory: load the session's weights from the model folder onto the context's device.

    Args:
        variant: A rembg session from :data:`SESSIONS`; ``None`` means :data:`DEFAULT_SESSION`.
        context: Device and model folder.

    Raises:
        InvalidPipelineError: ``variant`` is not an allowed session.
        WeightsMissingError: The session's ONNX file is not in the model folder, or is not a loadable model.
        MattingError: ``cuda`` was asked for and onnxruntime cannot run the session on it.
    """
    session = variant or DEFAULT_SESSION
    if session not in SESSIONS:
        raise InvalidPipelineError(f"step 'rembg' has no variant {session!r} (variants: one of {sorted(SESSIONS)})")
    filename = f"{session}.onnx"
    folder = require(context.model_dir, weights_name(session), must_contain=filename)
    device, providers = onnx_providers(context.device)
    model = _load(session, folder / filename, providers)
    if device == "cuda" and "CUDAExecutionProvider" not in model.inner_session.get_providers():
        # onnxruntime lists CUDA whenever its shim is installed, and falls back to the CPU when the CUDA libraries
        # fail to load; report where the session really runs, and refuse when CUDA was required.
        if context.device == "cuda":
            raise MattingError("POPCON_MATTING_DEVICE=cuda but onnxruntime could not start CUDA for rembg")
        device = "cpu"
    return RembgStep(session, model, device)
