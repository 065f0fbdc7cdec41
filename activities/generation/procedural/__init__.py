"""The procedural generator: an offline, deterministic cartoon character, the default backend.

The character is read from the prompt (body colour, creature kind, accessories) and drawn with the signed-distance
shapes of :mod:`activities.generation.drawing` on plain white, as hosted models return characters and clips. Each
action is drawn with its staging (motion, expression, prop); its clip is one loop of the motion, with the flaws of a
real image-to-video clip. Because a drawing's alpha is exactly the coverage used to composite it, :func:`render` and
:func:`render_clip` also return the true alpha, which quality tests and benchmarks compare matting results against.

The work is split over the submodules:

- :mod:`.prompt`: reading the character and the style from text (:class:`CharacterSpec`, :class:`StyleTweaks`);
- :mod:`.keywords`: an action's :class:`Staging`, read from its prompts for a custom action;
- :mod:`.motion`: the looping :class:`Pose`, the per-candidate :class:`CandidateLook` and :class:`Variation`;
- :mod:`.scene` and :mod:`.render`: what one drawing shows (:class:`Scene`) and drawing it (:func:`render`), with the
  painter of :mod:`.painter` and its layers (:mod:`.face`, :mod:`.accessories`, :mod:`.props`, :mod:`.brush`);
- :mod:`.upload`: keying an uploaded character against white and posing it by affine warps;
- :mod:`.stills`, :mod:`.clip` and :mod:`.defects`: the image roles, the clip role and the clip's flaws;
- :mod:`.generator`: :class:`ProceduralGenerator`, the four roles off the event loop.
"""

from __future__ import annotations

from activities.generation.procedural.clip import (
    RenderedClip,
    SourceFrame,
    clip_edge,
    clip_frames,
    clip_mp4,
    encode_mp4,
    render_clip,
    source_frame_count,
)
from activities.generation.procedural.defects import Defect, DefectKind, defect_schedule
from activities.generation.procedural.generator import ProceduralGenerator
from activities.generation.procedural.keywords import REST, Staging, infer_staging, staging_for
from activities.generation.procedural.motion import GROUND_X, GROUND_Y, CandidateLook, Pose, Variation
from activities.generation.procedural.prompt import (
    ACCESSORY_WORDS,
    ANATOMY,
    COLOUR_WORDS,
    KIND_WORDS,
    WHITE,
    Accessory,
    Anatomy,
    CharacterSpec,
    Ears,
    Kind,
    Nose,
    Silhouette,
    StyleTweaks,
    custom_words,
    stable_fraction,
)
from activities.generation.procedural.render import DESIGN_SIZE, FRAMING, MARGIN, RenderedFrame, render
from activities.generation.procedural.scene import Scene, action_scene, character_scene
from activities.generation.procedural.stills import (
    StartFrameNote,
    character_images,
    edited_frames,
    start_frame_images,
    start_frame_variation,
)
from activities.generation.procedural.upload import PicturePose, key_white, warped

__all__ = [
    "ACCESSORY_WORDS",
    "ANATOMY",
    "COLOUR_WORDS",
    "DESIGN_SIZE",
    "FRAMING",
    "GROUND_X",
    "GROUND_Y",
    "KIND_WORDS",
    "MARGIN",
    "REST",
    "WHITE",
    "Accessory",
    "Anatomy",
    "CandidateLook",
    "CharacterSpec",
    "Defect",
    "DefectKind",
    "Ears",
    "Kind",
    "Nose",
    "PicturePose",
    "Pose",
    "ProceduralGenerator",
    "RenderedClip",
    "RenderedFrame",
    "Scene",
    "Silhouette",
    "SourceFrame",
    "Staging",
    "StartFrameNote",
    "StyleTweaks",
    "Variation",
    "action_scene",
    "character_images",
    "character_scene",
    "clip_edge",
    "clip_frames",
    "clip_mp4",
    "custom_words",
    "defect_schedule",
    "edited_frames",
    "encode_mp4",
    "infer_staging",
    "key_white",
    "render",
    "render_clip",
    "source_frame_count",
    "stable_fraction",
    "staging_for",
    "start_frame_images",
    "start_frame_variation",
    "warped",
]
