"""What each role asks the Wan models: prompts with the framing the original product used, negative prompts, seeds.

Every prompt is the request's own text, then a direction that must survive (the plain white background the matting
relies on, the full body, the same character); when too long, the request's text is shortened, never the direction.
Prompts are cut to 800 characters, the smallest limit of the models used (Wan 2.2 and 2.1; Wan 2.5 takes 2000,
Wan 2.6 image-to-video 1500), negative prompts to 500; the service itself would cut longer ones at the end.

Sources: https://www.alibabacloud.com/help/en/model-studio/text-to-image-v2-api-reference,
https://www.alibabacloud.com/help/en/model-studio/image-to-video-api-reference.
"""

from __future__ import annotations

import hashlib

from workflows.contract import EditFrameInput, GenerateCharacterInput, GenerateClipInput, GenerateStartFrameInput
from workflows.presets import CLIP_DIRECTION

MAX_PROMPT_CHARS = 800
MAX_NEGATIVE_PROMPT_CHARS = 500
MAX_SEED = 2**31 - 1
"""``parameters.seed`` takes 0 to 2147483647; image ``i`` of a task uses ``seed + i``."""

CHARACTER_FRAMING = (
    "One single full-body character shown from head to toe, centred, the whole body inside the frame with a wide "
    "margin, square 1:1 picture, on a plain solid pure white #FFFFFF background, not transparent, no scenery, no "
    "shadow on the background. One character only, not a sticker sheet."
)
CHARACTER_NEGATIVE = (
    "sticker sheet, character sheet, multiple characters, multiple views, turnaround, grid, collage, transparent "
    "background, checkerboard, scenery, gradient background, coloured background, patterned background, shadow on the "
    "background, text, letters, caption, watermark, signature, logo, border, frame, cropped, cut off, partial body, "
    "close-up, blurry, low quality, deformed"
)
START_FRAME_DIRECTION = (
    "Keep the same character as in the image: the same design, colours, proportions and style. Full body from head "
    "to toe, centred, the whole body inside the frame, on a plain solid pure white #FFFFFF background, no scenery, no "
    "shadow on the background, one character only."
)
EDIT_FRAME_DIRECTION = (
    "Keep everything else as in the image: the same character, style, size and position in the frame, on the plain "
    "solid pure white #FFFFFF background."
)
IMAGE_EDIT_NEGATIVE = (
    "different character, changed design, changed colours, extra characters, multiple views, scenery, coloured "
    "background, gradient background, transparent background, shadow on the background, text, watermark, logo, "
    "border, cropped, cut off, partial body, blurry, low quality, deformed"
)
CLIP_NEGATIVE = (
    "blurry, low quality, distorted, deformed, flickering, morphing, extra limbs, extra characters, camera movement, "
    "zoom, cut, scene change, scenery, coloured background, shadow on the background, text, watermark, character "
    "leaving the frame, cropped"
)


def compose(text: str, direction: str) -> str:
    """``text`` then ``direction``, within :data:`MAX_PROMPT_CHARS`: ``text`` is what gets shortened."""
    room = max(MAX_PROMPT_CHARS - len(direction) - 1, 0)
    return f"{text.strip()[:room].rstrip()} {direction}"[:MAX_PROMPT_CHARS]


def character_prompt(request: GenerateCharacterInput) -> str:
    """The character: its description and style, then the original product's framing."""
    return compose(_sentence(request.prompt) + _style(request.style), CHARACTER_FRAMING)


def start_frame_prompt(request: GenerateStartFrameInput) -> str:
    """An image edit of the character image: the character in the action's pose, the same character."""
    text = _sentence(f"The character of the image, {request.prompt.strip()}") + _style(request.style)
    return compose(text, START_FRAME_DIRECTION)


def edit_frame_prompt(request: EditFrameInput) -> str:
    """An image edit of one extracted frame: the reviewer's change, nothing else."""
    return compose(_sentence(request.prompt) + _style(request.style), EDIT_FRAME_DIRECTION)


def clip_prompt(request: GenerateClipInput) -> str:
    """The clip: the motion prompt, then what every clip must keep (:data:`~workflows.presets.CLIP_DIRECTION`)."""
    return compose(_sentence(request.motion_prompt), CLIP_DIRECTION)


def candidate_seed(seed: int, scope: str, candidate: int = 0) -> int:
    """The service seed of one candidate: a base hashed from the set seed and the scope, plus the candidate index.

    Consecutive candidates get consecutive seeds, as the service gives image ``i`` of a task ``seed + i``.

    Args:
        seed: The set's seed.
        scope: What is generated, e.g. ``"character"``, ``"start:wave"``, ``"edit:wave:3"``, ``"clip:wave:0"``.
        candidate: The candidate index.
    """
    digest = hashlib.sha256(f"popcon-dashscope:{seed}:{scope}".encode()).digest()
    return (int.from_bytes(digest[:4], "big") + candidate) % (MAX_SEED + 1)


def _sentence(text: str) -> str:
    return text.strip().rstrip(".") + "."


def _style(style: str) -> str:
    return f" Style: {_sentence(style)}" if style.strip() else ""
