"""Animated emoji frames built in code, for export tests and benchmarks: the procedural character, cut out."""

from __future__ import annotations

import numpy as np
from PIL import Image

from activities.export.platforms.base import EmojiFrames
from activities.generation.procedural import Variation, action_scene, render
from workflows.contract import ActionSpec
from workflows.presets import PRESETS

CHARACTER = "a round orange cat with a blue scarf"
STYLE = "flat cartoon sticker"


def procedural_emoji(action: str, *, frames: int = 12, size: int = 256, seed: int = 0) -> EmojiFrames:
    """Preset ``action`` of the procedural character as an approved emoji of ``frames`` frames with their true alpha.

    Frame ``f`` is the drawing at phase ``f / frames`` of the action's loop, its motion as designed (no candidate's or
    take's variation, no clip defects): RGB composited over white, alpha exactly the drawing's coverage.
    """
    preset = PRESETS[action]
    scene = action_scene(
        CHARACTER,
        0,
        ActionSpec.of_preset(preset),
        custom="",
        style=STYLE,
        seed=seed,
        variation=Variation(),
    )
    images = []
    for frame in range(frames):
        drawn = render(scene, size, frame / frames)
        rgba = np.dstack([drawn.composite(), np.rint(drawn.alpha * 255).astype(np.uint8)])
        images.append(Image.fromarray(rgba, "RGBA"))
    return EmojiFrames(action, images, preset.frame_duration_ms)
