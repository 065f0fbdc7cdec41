"""Model folders with random weights, laid out as ``popcon models fetch`` lays out the published ones.

The engines load them through their own factories (``create_step``), so tests and the GPU benchmark exercise the same
loading, device and precision code as production. Random weights give arbitrary masks: good for shapes, code paths
and speed (which does not depend on the values of the weights), never for quality. Load them inside
:func:`testkit.weights.unpinned`, since their digests are not the catalogue's.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from sam2.build_sam import build_sam2
from transformers import AutoConfig, VitDetConfig, VitMatteConfig, VitMatteForImageMatting, VitMatteImageProcessor
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from gpu_activity_worker.engines.sam2 import VARIANTS as SAM2_VARIANTS
from gpu_activity_worker.engines.vitmatte import WEIGHTS as VITMATTE_WEIGHTS

# --- SAM 2.1 -------------------------------------------------------------------------------------------------------


def sam2_folder(model_dir: Path, variant: str = "tiny", seed: int = 0) -> Path:
    """SAM 2.1 hiera ``variant`` from the ``sam2`` package's own config, random weights, as the official checkpoint
    (``<model_dir>/sam2.1-hiera-<variant>/sam2.1_hiera_<variant>.pt`` holding ``{"model": state_dict}``)."""
    spec = SAM2_VARIANTS[variant]
    torch.manual_seed(seed)
    model = build_sam2(spec.config, ckpt_path=None, device="cpu")
    folder = model_dir / spec.weights
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict()}, folder / spec.checkpoint)
    return folder


# --- ViTMatte ------------------------------------------------------------------------------------------------------


def _vitmatte_small() -> VitMatteConfig:
    """hustvl/vitmatte-small-composition-1k's config.json: ViTDet-S (384 wide, 12 blocks, 6 heads, windowed attention
    but in blocks 2, 5, 8 and 11, which are global) and its detail branch."""
    backbone = VitDetConfig(
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        mlp_ratio=4,
        num_channels=4,
        image_size=512,
        pretrain_image_size=224,
        patch_size=16,
        window_block_indices=[0, 1, 3, 4, 6, 7, 9, 10],
        residual_block_indices=[2, 5, 8, 11],
        use_relative_position_embeddings=True,
        window_size=14,
    )
    return VitMatteConfig(
        backbone_config=backbone,
        hidden_size=384,
        convstream_hidden_sizes=[48, 96, 192],
        fusion_hidden_sizes=[256, 128, 64, 32],
    )


def _vitmatte_toy() -> VitMatteConfig:
    """ViTMatte's architecture (windowed + global attention, residual block, relative positions) at toy size."""
    backbone = VitDetConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        mlp_ratio=2,
        num_channels=4,
        image_size=64,
        pretrain_image_size=64,
        patch_size=16,
        window_block_indices=[0],
        residual_block_indices=[1],
        use_relative_position_embeddings=True,
        window_size=2,
    )
    return VitMatteConfig(
        backbone_config=backbone, hidden_size=16, convstream_hidden_sizes=[4, 8, 8], fusion_hidden_sizes=[16, 8, 8, 4]
    )


VITMATTE_ARCHITECTURES = {"small": _vitmatte_small, "toy": _vitmatte_toy}


def vitmatte_model(architecture: str = "toy", seed: int = 0, scale: float | None = None) -> VitMatteForImageMatting:
    """ViTMatte with random weights; ``scale`` redraws every parameter from N(0, scale) (a toy model's defaults
    give a flat alpha)."""
    torch.manual_seed(seed)
    model = VitMatteForImageMatting(VITMATTE_ARCHITECTURES[architecture]()).eval()
    if scale is not None:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.normal_(0.0, scale)
    return model


def vitmatte_folder(
    model_dir: Path, architecture: str = "toy", variant: str = "small", scale: float | None = None
) -> Path:
    """``vitmatte-<variant>`` holding a random ViTMatte of ``architecture`` (config, weights, processor)."""
    folder = model_dir / VITMATTE_WEIGHTS[variant]
    vitmatte_model(architecture, scale=scale).save_pretrained(folder)
    VitMatteImageProcessor().save_pretrained(folder)
    return folder


# --- BiRefNet ------------------------------------------------------------------------------------------------------

BIREFNET_CONFIG_SOURCE = """
from transformers import PretrainedConfig


class BiRefNetConfig(PretrainedConfig):
    model_type = "SegformerForSemanticSegmentation"

    def __init__(self, bb_pretrained=False, **kwargs):
        self.bb_pretrained = bb_pretrained
        super().__init__(**kwargs)
"""

BIREFNET_MODEL_SOURCE = '''
import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel

from .BiRefNet_config import BiRefNetConfig


class Settings:
    """Stands in for BiRefNet's own plain Config class."""

    width = 6


class BiRefNet(PreTrainedModel):
    """BiRefNet's interface: a list of logits maps, coarse to fine, the last one at the input's resolution."""

    config_class = BiRefNetConfig

    def __init__(self, bb_pretrained=True, config=BiRefNetConfig()):
        super().__init__(config)
        width = Settings.width
        self.encoder = nn.Conv2d(3, width, 3, stride=2, padding=1)
        self.coarse = nn.Conv2d(width, 1, 1)
        self.fine = nn.Conv2d(width + 3, 1, 3, padding=1)
        {init_tail}

    def forward(self, x):
        features = torch.relu(self.encoder(x))
        upsampled = F.interpolate(features, size=x.shape[2:], mode="bilinear", align_corners=True)
        return [self.coarse(features), self.fine(torch.cat([upsampled, x], dim=1))]
'''

BIREFNET_INIT_TAILS = {
    "post_init": "self.post_init()",
    # BiRefNet's remote code before its transformers-5 fix: no post_init().
    "skips_post_init": "pass",
    # Older copies of it (e.g. RMBG-2.0) also replace self.config with a plain settings object.
    "plain_config": "self.config = Settings()",
}

BIREFNET_CONFIG_JSON = {
    "model_type": "SegformerForSemanticSegmentation",
    "architectures": ["BiRefNet"],
    "auto_map": {"AutoConfig": "BiRefNet_config.BiRefNetConfig", "AutoModelForImageSegmentation": "birefnet.BiRefNet"},
    "bb_pretrained": False,
}

_SERIAL = itertools.count()


def birefnet_folder(model_dir: Path, name: str = "birefnet-general", init_tail: str = "post_init") -> Path:
    """A tiny BiRefNet stand-in saved as its Hub snapshot is: remote code, config.json, fp16 model.safetensors. It
    has BiRefNet's interface, not its architecture: for the code path, not for speed.

    transformers names a remote-code module by its folder's name and its source's hash, and maps a config class to
    the model class first loaded with it; a serial number in the config source keeps stand-ins of the same name in
    different folders apart, as different repositories' code is (and the module cache bounded across runs).
    """
    folder = model_dir / name
    folder.mkdir(parents=True)
    (folder / "BiRefNet_config.py").write_text(f"# stand-in {next(_SERIAL)}{BIREFNET_CONFIG_SOURCE}")
    (folder / "birefnet.py").write_text(BIREFNET_MODEL_SOURCE.replace("{init_tail}", BIREFNET_INIT_TAILS[init_tail]))
    (folder / "config.json").write_text(json.dumps(BIREFNET_CONFIG_JSON))
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True, local_files_only=True)
    model_class = get_class_from_dynamic_module("birefnet.BiRefNet", folder, local_files_only=True)
    torch.manual_seed(0)
    state = model_class(config).state_dict()
    save_file({key: value.half().contiguous() for key, value in state.items()}, folder / "model.safetensors")
    return folder
