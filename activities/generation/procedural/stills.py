"""The procedural generator's three image roles: character candidates, start frames and frame edits, as PNGs on white.

A start frame carries a :class:`StartFrameNote` in a PNG text chunk: the pose prompt, style and candidate it was made
with, which its clip request does not repeat. :func:`.clip.render_clip` reads it back: for a drawn character it draws
the clip from exactly the start frame's scene, so the clip's first frame is the start frame; for an uploaded one it
knows the pose the picture was put in. A start frame without a note (another generator's, or re-encoded) is animated
from its pixels, as an upload's is.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import NDArray
from PIL import Image, PngImagePlugin, UnidentifiedImageError
from scipy import ndimage

from activities.generation.base import GeneratedImage
from activities.generation.procedural.keywords import staging_for
from activities.generation.procedural.motion import Variation
from activities.generation.procedural.prompt import custom_words, stable_fraction
from activities.generation.procedural.render import render
from activities.generation.procedural.scene import action_scene, character_scene
from activities.generation.procedural.upload import PicturePose, decode_rgb, key_white, warped
from workflows.contract import EditFrameInput, GenerateCharacterInput, GenerateStartFrameInput

NOTE_KEY = "popcon-procedural"
"""The PNG text chunk holding a start frame's :class:`StartFrameNote`."""


@dataclass(frozen=True)
class StartFrameNote:
    """What a start frame was made with, beyond what its clip request repeats.

    Attributes:
        prompt: The pose prompt (the action's own, or a reviewer's).
        style: The set's style words.
        candidate: The start frame candidate's index.
    """

    prompt: str
    style: str
    candidate: int

    @classmethod
    def read(cls, data: bytes) -> StartFrameNote | None:
        """The note of the PNG ``data``; None when it has none (or is not a picture)."""
        try:
            with Image.open(io.BytesIO(data)) as image:
                text = image.info.get(NOTE_KEY)
        except (UnidentifiedImageError, OSError, ValueError):
            return None
        if not isinstance(text, str):
            return None
        try:
            fields = json.loads(text)
            return cls(prompt=str(fields["prompt"]), style=str(fields["style"]), candidate=int(fields["candidate"]))
        except (ValueError, KeyError, TypeError):
            return None

    def png_info(self) -> PngImagePlugin.PngInfo:
        """This note as the text chunk of a PNG."""
        info = PngImagePlugin.PngInfo()
        info.add_text(NOTE_KEY, json.dumps(asdict(self), sort_keys=True))
        return info


def start_frame_variation(seed: int, action: str, candidate: int) -> Variation:
    """How start frame ``candidate`` of ``action`` moves: it is also how every take animated from it moves."""
    return Variation.pick("start-frame", seed, action, candidate)


def _image(rgb: NDArray[np.uint8], note: StartFrameNote | None = None) -> GeneratedImage:
    """``rgb`` (H x W x 3, uint8) as a PNG candidate, with ``note`` in a text chunk when given."""
    buffer = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buffer, format="PNG", pnginfo=note.png_info() if note else None)
    height, width = rgb.shape[:2]
    return GeneratedImage(data=buffer.getvalue(), media_type="image/png", width=width, height=height)


def _candidates(first: int, count: int) -> range:
    return range(first, first + count)


def character_images(request: GenerateCharacterInput) -> list[GeneratedImage]:
    """``request.count`` characters of ``request.prompt`` standing at rest on white, one per candidate look."""
    images = []
    for candidate in _candidates(request.first_candidate, request.count):
        scene = character_scene(request.prompt, request.style, request.seed, candidate)
        images.append(_image(render(scene, request.size, 0.0).composite()))
    return images


def start_frame_images(request: GenerateStartFrameInput, character: bytes) -> list[GeneratedImage]:
    """``request.count`` start frames: the character in the pose the action's motion starts from, on white.

    A drawn character (``request.character.prompt`` set) is drawn again, refined by the words a custom pose prompt
    adds, with the action's expression and prop; an uploaded one (``character``: RGB on white) is keyed against white
    and posed by an affine warp. Candidates differ in the motion's amplitude and a slight lean.

    Raises:
        GenerationRefused: The character is an upload and ``character`` is not a picture.
    """
    action, prompt = request.action, request.character.prompt
    notes = [
        StartFrameNote(prompt=request.prompt, style=request.style, candidate=candidate)
        for candidate in _candidates(request.first_candidate, request.count)
    ]
    variations = [start_frame_variation(request.seed, action.name, note.candidate) for note in notes]
    if prompt is None:
        layers = key_white(decode_rgb(character, request.size, "character picture"))
        picture, motion = PicturePose.of(layers), staging_for(action).motion
        posed = [warped(layers, picture.warp(variation.pose(motion, 0.0))) for variation in variations]
    else:
        custom = custom_words(request.prompt, action.pose_prompt)
        scenes = [
            action_scene(
                prompt,
                request.character.candidate,
                action,
                custom=custom,
                style=request.style,
                seed=request.seed,
                variation=variation,
            )
            for variation in variations
        ]
        posed = [render(scene, request.size, 0.0) for scene in scenes]
    return [_image(frame.composite(), note) for frame, note in zip(posed, notes, strict=True)]


def edited_frames(request: EditFrameInput, source: bytes) -> list[GeneratedImage]:
    """``request.count`` new candidates for frame slot ``request.frame`` of ``request.frames``.

    A drawn character is drawn again, cleanly, at the slot's phase ``frame / frames``, refined by the words
    ``request.prompt`` adds; candidates differ slightly in amplitude and lean. For an uploaded character, ``source``
    (the extracted frame) is cleaned up: a median filter against glitches and noise, then a light unsharp mask
    against blur whose strength differs per candidate.

    Raises:
        GenerationRefused: The character is an upload and ``source`` is not a picture.
    """
    action, prompt = request.action, request.character.prompt
    keys = [
        ("edit", request.seed, action.name, request.frame, candidate)
        for candidate in _candidates(request.first_candidate, request.count)
    ]
    if prompt is None:
        picture = decode_rgb(source, request.size, "frame")
        return [_image(_cleaned(picture, stable_fraction(*key))) for key in keys]
    custom = custom_words(request.prompt, action.pose_prompt, action.motion_prompt, prompt)
    t = (request.frame % request.frames) / request.frames
    images = []
    for key in keys:
        scene = action_scene(
            prompt,
            request.character.candidate,
            action,
            custom=custom,
            style=request.style,
            seed=request.seed,
            variation=Variation.pick(*key),
        )
        images.append(_image(render(scene, request.size, t).composite()))
    return images


def _cleaned(rgb: NDArray[np.uint8], strength: float) -> NDArray[np.uint8]:
    """``rgb`` with isolated glitches and noise removed (a 3 x 3 median) and blur countered by an unsharp mask of
    amount 0.3..0.8 (``strength`` in [0, 1))."""
    median = ndimage.median_filter(rgb, size=(3, 3, 1)).astype(np.float32)
    blurred = ndimage.gaussian_filter(median, sigma=(1.0, 1.0, 0.0))
    sharpened = median + (0.3 + 0.5 * strength) * (median - blurred)
    return np.clip(np.rint(sharpened), 0, 255).astype(np.uint8)
