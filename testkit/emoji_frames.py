"""Animated emoji frames built in code, for export tests and benchmarks: the procedural character, cut out."""

from __future__ import annotations

import numpy as np
from PIL import Image

from activities.export.platforms.base import EmojiFrames
from activities.generation.procedural import render_frame
from workflows.contract import GenerateFrameInput
from workflows.presets import PRESETS


def procedural_emoji(pose: str, *, frames: int = 12, size: int = 256, seed: int = 0) -> EmojiFrames:
    """The procedural generator's ``pose`` with its true alpha, as an approved emoji of ``frames`` frames."""
    preset = PRESETS[pose]
    images = []
    for frame in range(frames):
        request = GenerateFrameInput(
            set_id="export-test",
            pose=preset,
            character_prompt="a round orange cat with a blue scarf",
            style="flat cartoon sticker",
            prompt=preset.prompt,
            frame=frame,
            frame_count=frames,
            first_candidate=0,
            count=1,
            generator="procedural",
            image_size=size,
            seed=seed,
        )
        rgb, alpha = render_frame(request, 0)
        images.append(Image.fromarray(np.dstack([rgb, np.rint(alpha * 255).astype(np.uint8)]), "RGBA"))
    return EmojiFrames(pose, images, preset.frame_duration_ms)
