"""The coarse step ``birefnet``: BiRefNet segmentation in torch, through transformers' remote-code loading.

BiRefNet (Zheng et al., "Bilateral Reference for High-Resolution Dichotomous Image Segmentation", CAAI AIR 2024,
arXiv 2401.03407; MIT licence) cuts out the salient subject at high resolution. Variants: ``general``
(``ZhengPeng7/BiRefNet``, Swin-L backbone, the default) and ``lite`` (``ZhengPeng7/BiRefNet_lite``, Swin-T: 178 MB
of fp16 weights instead of 444 MB, and faster); ``toonout`` is below. Each of these two loads offline from
``<model_dir>/birefnet-general`` or ``birefnet-lite``: a snapshot of the Hub repository holding the model's own code
(``birefnet.py``, ``BiRefNet_config.py``), ``config.json`` and ``model.safetensors``.

Inference follows the model card: each image is resized to :attr:`BiRefNetStep.input_size` squared (1024), normalised
with the ImageNet statistics, and the sigmoid of the model's last output (the full-resolution logits) is resized back
to the image, bilinearly. Several images of any sizes share one forward pass (:meth:`BiRefNetStep.apply_batch`).

BiRefNet's alpha is a segmentation: tight, but its edge pixels keep background colour, which shows as a halo on
flat cartoon art. Follow it with ``defringe`` (``birefnet+defringe``).

Variant ``toonout``: ToonOut (Muratori & Seytre, Kartoon AI, "ToonOut: Fine-tuned Background Removal for Anime
Characters", arXiv 2509.06839), BiRefNet (Swin-L, 1024x1024) fine-tuned on 1,228 anime images; pixel accuracy on
its test set 95.3% -> 99.5%. Licence: MIT for code and weights (github.com/MatteoKartoon/BiRefNet: ``LICENSE``, whose
README lists it as "MIT License (code + weights)"; the model card huggingface.co/joelseytre/toonout: "License: MIT");
its training data set is CC-BY-4.0, which binds the data set, not the weights. The weights are not a Hub snapshot but
one raw PyTorch state dict, ``birefnet_finetuned_toonout.pth`` (about 885 MB, fp32), saved from a DDP and
``torch.compile`` wrapper (keys prefixed ``module.`` / ``_orig_mod.``), with no code or ``config.json``: the authors'
demo (``toonout_demo.ipynb``) builds ``ZhengPeng7/BiRefNet`` and loads the stripped state dict into it, strictly.
So does :func:`load_toonout`: the model code and ``config.json`` come from the ``birefnet-general`` folder (so both
weight sets must be fetched), the checkpoint from ``birefnet-toonout``, loaded with ``weights_only=True`` (no
pickled code runs) and every key and shape checked, as for the other variants. Input and output as above
(1024x1024, ImageNet statistics, sigmoid of the last output), which is what the ToonOut demo does.

Before the model, ``toonout`` composites the frame onto mid grey #808080 (:func:`onto_grey`), as the original popcon
did before ToonOut (its dev logs: "frames composited onto mid grey (#808080, ToonOut's training background)"; its
code is not public, so the exact formula is ours). Frames arrive opaque on white, with no alpha to composite by, so
the white background is taken as the transparency: the near-white region connected to the frame border, and an
anti-aliased rim of :data:`GREY_RIM` pixels around it, is unmixed against white (its least opacity over white,
``1 - min(R, G, B)``) and recomposited over grey. Pure white becomes exactly #808080; the subject, and white enclosed
by it (eyes, teeth, highlights), are untouched. ToonOut's own code does not do this (its demo feeds the plain RGB
image, and its training set-up keeps each image's own background: ``background_color_synthesis = False``); the grey
is the original product's choice, kept for this variant only.
"""

from __future__ import annotations

import logging
import pickle
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from scipy import ndimage
from torch.nn import functional
from transformers import AutoConfig, AutoModelForImageSegmentation, PretrainedConfig
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from gpu_activity_worker.device import autocast, torch_device, torch_precision
from gpu_activity_worker.engines.base import MatteState, StepContext
from gpu_activity_worker.vocabulary import InvalidPipelineError
from gpu_activity_worker.weights import WeightsMissingError, require

logger = logging.getLogger(__name__)

WEIGHTS = {"general": "birefnet-general", "lite": "birefnet-lite", "toonout": "birefnet-toonout"}
"""Weight set (``popcon models fetch`` name) of each variant."""

TOONOUT_CODE = "birefnet-general"
"""The weight set whose model code and ``config.json`` ToonOut's state dict is loaded into (its checkpoint has none)."""

TOONOUT_FILE = "birefnet_finetuned_toonout.pth"

TOONOUT_PREFIXES = ("module.", "_orig_mod.")
"""Key prefixes of ToonOut's checkpoint (DDP, then ``torch.compile``), stripped in this order as ToonOut's own
``birefnet.utils.check_state_dict`` does."""

GREY = 128 / 255
"""The background ``toonout``'s frames are composited onto: #808080."""

WHITE_TOLERANCE = 0.1
"""Largest least-opacity over white (``1 - min(R, G, B)``, about 25/255) of a pixel of the white background."""

GREY_RIM = 2
"""Pixels around the white background, unmixed against white too: the anti-aliased edge of the subject."""

_FOUR_CONNECTED = ndimage.generate_binary_structure(2, 1)

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


def _build_directly(
    folder: Path, config: PretrainedConfig, state: dict[str, torch.Tensor] | None = None
) -> torch.nn.Module:
    """Build the remote-code class named by ``config.json`` and load the weights into it, every key checked.

    This is what ``from_pretrained`` does, minus transformers' loading machinery that the remote code trips over.
    The weights are the folder's ``model.safetensors`` unless ``state`` is given (ToonOut's checkpoint).
    """
    reference = getattr(config, "auto_map", {}).get(AUTO_CLASS)
    if reference is None:
        raise ValueError(f"config.json has no auto_map entry for {AUTO_CLASS}")
    model_class = get_class_from_dynamic_module(reference, folder, local_files_only=True)
    # Positional, as from_pretrained passes it: BiRefNet's __init__ takes (bb_pretrained, config) and reads its
    # settings from its own default config, so its backbone never fetches ImageNet weights.
    model: torch.nn.Module = model_class(config)
    try:
        missing, unexpected = model.load_state_dict(
            load_file(folder / WEIGHTS_FILE) if state is None else state, strict=False
        )
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


def toonout_state(path: Path) -> dict[str, torch.Tensor]:
    """ToonOut's checkpoint as a state dict for BiRefNet's code: loaded with ``weights_only=True`` (tensors only, no
    pickled code runs), keys stripped of :data:`TOONOUT_PREFIXES`.

    Raises:
        ValueError: Not a loadable checkpoint (truncated, not a state dict, or holding more than tensors).
    """
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError) as err:
        raise ValueError(f"{path.name} is not a loadable PyTorch checkpoint: {err}") from err
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state_dict"), dict):
        checkpoint = checkpoint["state_dict"]
    if not isinstance(checkpoint, dict) or not all(isinstance(value, torch.Tensor) for value in checkpoint.values()):
        raise ValueError(f"{path.name} is not a state dict of tensors")
    state = {}
    for key, value in checkpoint.items():
        for prefix in TOONOUT_PREFIXES:
            key = key.removeprefix(prefix)
        state[key] = value
    return state


def load_toonout(code_folder: Path, weights_file: Path, name: str) -> torch.nn.Module:
    """ToonOut: BiRefNet's code and ``config.json`` from ``code_folder``, the state dict from ``weights_file``; offline,
    in fp32 and eval mode, on the CPU (see the module docstring).

    Raises:
        WeightsMissingError: Either folder is incomplete or corrupt, or the checkpoint does not fit the code.
    """
    try:
        config = AutoConfig.from_pretrained(code_folder, trust_remote_code=True, local_files_only=True)
        model = _build_directly(code_folder, config, toonout_state(weights_file))
    except (OSError, ValueError) as err:
        raise WeightsMissingError(
            f"weights {name!r} ({weights_file}, on the code of {code_folder}) cannot be loaded ({err}): fetch them "
            f"again with `popcon models fetch {name} {TOONOUT_CODE}` on a machine with network"
        ) from err
    return model.eval()


def onto_grey(image: np.ndarray) -> np.ndarray:
    """float32 HxWx3: ``image`` (opaque, on white) with its white background composited onto #808080 instead.

    The background is the near-white region (least opacity over white at most :data:`WHITE_TOLERANCE`) 4-connected to
    the frame border; it and :data:`GREY_RIM` pixels around it are unmixed against white and recomposited over grey:
    ``I - (1 - a) * (1 - GREY)`` with ``a = 1 - min(R, G, B)``, so pure white becomes grey and a saturated or dark
    pixel stays as it is. Everything else (the subject, white it encloses) is untouched.
    """
    opacity = 1.0 - image.min(axis=2)
    labels, _ = ndimage.label(opacity <= WHITE_TOLERANCE, structure=_FOUR_CONNECTED)
    border = np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))
    background = np.isin(labels, border[border > 0])
    region = (
        ndimage.binary_dilation(background, structure=_FOUR_CONNECTED, iterations=GREY_RIM) if GREY_RIM else background
    )
    shift = np.where(region, (1.0 - opacity) * (1.0 - GREY), 0.0).astype(np.float32)
    return np.asarray(image - shift[..., None], dtype=np.float32)


class BiRefNetStep:
    """Coarse step: BiRefNet's alpha (see the module docstring).

    Thread-safe: the forward pass runs under a lock, one at a time. Concurrent forward passes would each hold a
    1024x1024 batch's activations (gigabytes on a GPU, which runs them one after another anyway) and on the CPU
    would oversubscribe cores torch already uses; micro-batching is how concurrent callers share a pass. Resizing
    runs outside the lock, and nothing else is shared between calls.
    """

    input_size: int = 1024
    """Side of the square every image is resized to for the model (the model card's 1024x1024)."""

    def __init__(self, model: torch.nn.Module, device: str, precision: str = "fp32", *, on_grey: bool = False) -> None:
        self._model = model.to(device).eval()
        self.on_grey = on_grey
        """Composite each frame's white background onto #808080 first (:func:`onto_grey`; the ``toonout`` variant)."""
        self._lock = threading.Lock()
        self.device = device
        self.precision = precision
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
            with self._lock, autocast(self.device, self.precision):
                logits = self._model(batch)[-1]
            probabilities = logits.float().sigmoid()
            return [
                replace(state, alpha=self._alpha(probabilities[index : index + 1], state.image.shape[:2]))
                for index, state in enumerate(states)
            ]

    def _model_input(self, image: np.ndarray) -> torch.Tensor:
        """1 x 3 x size x size: ``image`` (float32 HxWx3 in [0, 1]) resized and normalised (on grey first, when
        :attr:`on_grey`)."""
        if self.on_grey:
            image = onto_grey(image)
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

    ``toonout`` needs two weight sets: ``birefnet-toonout`` (the checkpoint) and ``birefnet-general`` (the code).

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
    if chosen == "toonout":
        weights_folder = require(context.model_dir, name, must_contain=TOONOUT_FILE)
        code_folder = require(context.model_dir, TOONOUT_CODE, must_contain="config.json")
        device = torch_device(context.device)
        model = load_toonout(code_folder, weights_folder / TOONOUT_FILE, name)
        return BiRefNetStep(model, device, torch_precision(device, context.precision), on_grey=True)
    folder = require(context.model_dir, name, must_contain="config.json")
    device = torch_device(context.device)
    return BiRefNetStep(load_model(folder, name), device, torch_precision(device, context.precision))
