"""The coarse step ``birefnet``: BiRefNet segmentation in torch, through transformers' remote-code loading.

BiRefNet (Zheng et al., "Bilateral Reference for High-Resolution Dichotomous Image Segmentation", CAAI AIR 2024,
arXiv 2401.03407; MIT licence) cuts out the salient subject at high resolution. Variants: ``general``
(``ZhengPeng7/BiRefNet``, Swin-L backbone, the default) and ``lite`` (``ZhengPeng7/BiRefNet_lite``, Swin-T: 178 MB
of fp16 weights instead of 444 MB, and faster). Each loads offline from ``<model_dir>/birefnet-general`` or
``birefnet-lite``: a snapshot of the Hub repository holding the model's own code (``birefnet.py``,
``BiRefNet_config.py``), ``config.json`` and ``model.safetensors``.

Inference follows the model card: each image is resized to :attr:`BiRefNetStep.input_size` squared (1024), normalised
with the ImageNet statistics, and the sigmoid of the model's last output (the full-resolution logits) is resized back
to the image, bilinearly. Several images of any sizes share one forward pass (:meth:`BiRefNetStep.apply_batch`).

BiRefNet's alpha is a segmentation: tight, but its edge pixels keep background colour, which shows as a halo on
flat cartoon art. Follow it with ``defringe`` (``birefnet+defringe``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from torch.nn import functional
from transformers import AutoConfig, AutoModelForImageSegmentation, PretrainedConfig
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from gpu_activity_worker.device import torch_device, torch_precision
from gpu_activity_worker.engines.base import InvalidPipelineError, MatteState, StepContext
from gpu_activity_worker.weights import WeightsMissingError, require

logger = logging.getLogger(__name__)

WEIGHTS = {"general": "birefnet-general", "lite": "birefnet-lite"}
"""Weight set (``popcon models fetch`` name) of each variant."""

DEFAULT_VARIANT = "general"

AUTO_CLASS = "AutoModelForImageSegmentation"
"""The ``auto_map`` entry of ``config.json`` that names the model class in the remote code."""

WEIGHTS_FILE = "model.safetensors"

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _check_keys(missing: Sequence[str], unexpected: Sequence[str]) -> None:
    """Refuse weights that do not fit the model: a half-initialised network still makes a plausible-looking mask."""
    if missing or unexpected:
        raise ValueError(
            f"the weights do not fit the model code: {len(missing)} missing (e.g. {list(missing)[:3]}), "
            f"{len(unexpected)} unexpected (e.g. {list(unexpected)[:3]})"
        )


def _build_directly(folder: Path, config: PretrainedConfig) -> torch.nn.Module:
    """Build the remote-code class named by ``config.json`` and load the safetensors weights into it, every key checked.

    This is what ``from_pretrained`` does, minus transformers' loading machinery that the remote code trips over.
    """
    reference = getattr(config, "auto_map", {}).get(AUTO_CLASS)
    if reference is None:
        raise ValueError(f"config.json has no auto_map entry for {AUTO_CLASS}")
    model_class = get_class_from_dynamic_module(reference, folder, local_files_only=True)
    # Positional, as from_pretrained passes it: BiRefNet's __init__ takes (bb_pretrained, config) and reads its
    # settings from its own default config, so its backbone never fetches ImageNet weights.
    model: torch.nn.Module = model_class(config)
    try:
        missing, unexpected = model.load_state_dict(load_file(folder / WEIGHTS_FILE), strict=False)
    except RuntimeError as err:  # a tensor of the wrong shape
        raise ValueError(f"the weights do not fit the model code: {err}") from err
    _check_keys(missing, unexpected)
    return model.float()


def _load(folder: Path) -> torch.nn.Module:
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True, local_files_only=True)
    try:
        model, info = AutoModelForImageSegmentation.from_pretrained(
            folder,
            config=config,
            trust_remote_code=True,
            local_files_only=True,
            dtype=torch.float32,
            output_loading_info=True,
        )
    except (AttributeError, RuntimeError) as err:
        logger.info("transformers cannot load the model in %s (%s); building its class directly", folder, err)
        return _build_directly(folder, config)
    _check_keys(sorted(info["missing_keys"]), sorted(info["unexpected_keys"]))
    return model


def load_model(folder: Path, name: str) -> torch.nn.Module:
    """BiRefNet from a weights folder, offline, in fp32 and eval mode, on the CPU.

    ``AutoModelForImageSegmentation.from_pretrained(folder, trust_remote_code=True, local_files_only=True)`` first.
    BiRefNet's remote code was written for transformers 4, and copies of it live on in other repositories (RMBG-2.0,
    fine-tunes): before its transformers-5 fix (Hub commit ``e2bf8e4`` of ``ZhengPeng7/BiRefNet``) the model skipped
    ``post_init()``, so transformers 5 finds no ``all_tied_weights_keys``, and older copies replace ``self.config``
    with a plain settings object, so transformers finds no ``config.model_type`` (both ``AttributeError``); code that
    computes values while transformers builds the model on the meta device fails with a ``RuntimeError``. On those
    errors the class that ``config.json``'s ``auto_map`` names is built directly, on the CPU, and
    ``model.safetensors`` loaded into it, every key and shape checked. (``from_pretrained`` also raises a
    ``RuntimeError`` for a tensor of the wrong shape; the direct path then reports it.)

    Args:
        folder: The weight set's folder (from :func:`~gpu_activity_worker.weights.require`).
        name: The weight set's name, for error messages.

    Raises:
        WeightsMissingError: The folder is incomplete or corrupt (a broken ``config.json``, missing code or weights,
            weights that do not fit the code); the message names the fetch command.
        ImportError: A package the remote code imports is missing (timm, kornia, einops: the ``gpu`` extra).
    """
    try:
        model = _load(folder)
    except (OSError, ValueError) as err:
        raise WeightsMissingError(
            f"weights {name!r} in {folder} cannot be loaded ({err}): fetch them again with "
            f"`popcon models fetch {name}` on a machine with network"
        ) from err
    return model.eval()


class BiRefNetStep:
    """Coarse step: BiRefNet's alpha (see the module docstring).

    Thread-safe: the forward pass runs under a lock, one at a time. Concurrent forward passes would each hold a
    1024x1024 batch's activations (gigabytes on a GPU, which runs them one after another anyway) and on the CPU
    would oversubscribe cores torch already uses; micro-batching is how concurrent callers share a pass. Resizing
    runs outside the lock, and nothing else is shared between calls.
    """

    input_size: int = 1024
    """Side of the square every image is resized to for the model (the model card's 1024x1024)."""

    def __init__(self, model: torch.nn.Module, device: str) -> None:
        self._model = model.to(device).eval()
        self._lock = threading.Lock()
        self.device = device
        self.precision = torch_precision(device)
        self._mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
        self._std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)

    def apply(self, state: MatteState) -> MatteState:
        """Set ``alpha`` to BiRefNet's (float32 HxW in [0, 1])."""
        return self.apply_batch([state])[0]

    def apply_batch(self, states: Sequence[MatteState]) -> list[MatteState]:
        """:meth:`apply` for several images (of any sizes) in one forward pass.

        Every image is resized to the same square on its own, so the results equal :meth:`apply`'s up to
        floating-point summation order.
        """
        if not states:
            return []
        with torch.inference_mode():
            batch = torch.cat([self._model_input(state.image) for state in states])
            with (
                self._lock,
                torch.autocast(device_type=self.device, dtype=torch.float16, enabled=self.precision == "fp16"),
            ):
                logits = self._model(batch)[-1]
            probabilities = logits.float().sigmoid()
            return [
                replace(state, alpha=self._alpha(probabilities[index : index + 1], state.image.shape[:2]))
                for index, state in enumerate(states)
            ]

    def _model_input(self, image: np.ndarray) -> torch.Tensor:
        """1 x 3 x size x size: ``image`` (float32 HxWx3 in [0, 1]) resized and normalised."""
        pixels = torch.from_numpy(np.ascontiguousarray(image)).to(self.device).permute(2, 0, 1).unsqueeze(0)
        size = (self.input_size, self.input_size)
        resized = functional.interpolate(pixels, size=size, mode="bilinear", align_corners=False, antialias=True)
        return (resized - self._mean) / self._std

    @staticmethod
    def _alpha(probability: torch.Tensor, shape: tuple[int, ...]) -> np.ndarray:
        """float32 HxW: a 1 x 1 x size x size probability map resized back to the image."""
        resized = functional.interpolate(
            probability, size=(shape[0], shape[1]), mode="bilinear", align_corners=False, antialias=True
        )
        return np.asarray(resized[0, 0].clamp(0.0, 1.0).cpu().numpy(), dtype=np.float32)


def create_step(variant: str | None, context: StepContext) -> BiRefNetStep:
    """The step factory: load the variant's weights (``general`` by default) once, offline, onto the context's device.

    Raises:
        InvalidPipelineError: Unknown variant.
        WeightsMissingError: The weights are not in the model folder, or are broken (the message names the fetch
            command).
        MattingError: ``cuda`` was asked for and there is none.
    """
    chosen = variant or DEFAULT_VARIANT
    if chosen not in WEIGHTS:
        raise InvalidPipelineError(f"step 'birefnet' has no variant {chosen!r} (variants: {sorted(WEIGHTS)})")
    name = WEIGHTS[chosen]
    folder = require(context.model_dir, name, must_contain="config.json")
    device = torch_device(context.device)
    return BiRefNetStep(load_model(folder, name), device)
