"""Built-in catalogue of actions: the 24 emoji a set can be made of.

An action is one emoji of a set. Its **pose prompt** makes the start frame (the character in that pose, an image edit
of the character image); its **motion prompt** makes the clip (image-to-video from the approved start frame), written
as body mechanics, the way video models follow best ("raises the right arm ... the forearm rotates at the elbow").
The motion, expression and prop are what the offline procedural generator draws; the frame timing is what the
exported animation uses. Plain data: safe in workflow code.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Motion(StrEnum):
    """How the character moves over one loop of the clip."""

    WAVE = "wave"  # an arm swings side to side
    BOUNCE = "bounce"  # the body hops up and down, squashing on landing
    SHAKE = "shake"  # quick side-to-side jitter
    SWAY = "sway"  # slow tilt left and right
    PULSE = "pulse"  # a held prop grows and shrinks
    FLOAT = "float"  # slow drift up and down
    POP = "pop"  # quick grow then settle
    NOD = "nod"  # the body dips forward and back up


class Expression(StrEnum):
    """The face drawn for an action."""

    HAPPY = "happy"
    LAUGH = "laugh"
    CRY = "cry"
    LOVE = "love"
    SLEEP = "sleep"
    ANGRY = "angry"
    SURPRISED = "surprised"
    WINK = "wink"
    THINK = "think"


class Prop(StrEnum):
    """An effect or accessory shown with the character for an action."""

    NONE = "none"
    HEART = "heart"
    THUMB = "thumb"
    TEAR = "tear"
    ZZZ = "zzz"
    STEAM = "steam"
    SPARKLE = "sparkle"
    QUESTION = "question"


CLIP_DIRECTION = (
    "Fixed camera, the character stays centred and whole inside the frame, plain solid white background throughout, "
    "effects kept apart from the character, the movement ends back in the starting pose so that it loops."
)
"""Appended to every motion prompt: what every clip must keep, whatever the action."""


class ActionPreset(BaseModel):
    """One entry of the catalogue."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    pose_prompt: str = Field(description="The start frame: the character in this pose (an image edit).")
    motion_prompt: str = Field(description="The clip: the movement from the start frame, as body mechanics.")
    motion: Motion
    expression: Expression
    prop: Prop = Prop.NONE
    frame_duration_ms: int = Field(default=83, ge=20, le=1000, description="Display time of each exported frame.")


def _preset(
    name: str,
    pose: str,
    motion_prompt: str,
    motion: Motion,
    expression: Expression,
    prop: Prop = Prop.NONE,
    frame_duration_ms: int = 83,
) -> ActionPreset:
    return ActionPreset(
        name=name,
        pose_prompt=pose,
        motion_prompt=motion_prompt,
        motion=motion,
        expression=expression,
        prop=prop,
        frame_duration_ms=frame_duration_ms,
    )


M, E, P = Motion, Expression, Prop
PRESETS: dict[str, ActionPreset] = {
    preset.name: preset
    for preset in (
        _preset(
            "happy",
            "standing relaxed with a big warm smile, arms loose at the sides",
            "the whole body rocks gently left and right from the feet, the head tilts with it, the smile stays",
            M.SWAY,
            E.HAPPY,
        ),
        _preset(
            "laugh",
            "laughing out loud, eyes squeezed shut, mouth wide open",
            "the shoulders and belly shake up and down with each laugh, the head tips back slightly on each beat",
            M.BOUNCE,
            E.LAUGH,
            frame_duration_ms=70,
        ),
        _preset(
            "cry",
            "crying, big tears on the cheeks, mouth wobbling",
            "the shoulders tremble quickly side to side, tears run down the cheeks and drop away from the face",
            M.SHAKE,
            E.CRY,
            P.TEAR,
        ),
        _preset(
            "wave",
            "waving hello with the right hand raised beside the head, friendly smile",
            "the right arm stays raised; the forearm rotates at the elbow side to side three times while the upper "
            "arm and the body stay still",
            M.WAVE,
            E.HAPPY,
        ),
        _preset(
            "wink",
            "winking one eye with a playful grin",
            "one eye closes and reopens once while the head gives a small quick nod, a small sparkle pops beside it",
            M.POP,
            E.WINK,
            P.SPARKLE,
        ),
        _preset(
            "angry",
            "furious, frowning, fists clenched, steam above the head",
            "the body trembles quickly left and right with tension, puffs of steam rise from the top of the head",
            M.SHAKE,
            E.ANGRY,
            P.STEAM,
            frame_duration_ms=60,
        ),
        _preset(
            "jump",
            "crouched slightly, ready to jump for joy",
            "the knees bend, the body springs straight up, lands and squashes a little, then rises back to standing",
            M.BOUNCE,
            E.HAPPY,
        ),
        _preset(
            "nod",
            "facing forward with a gentle agreeable smile",
            "the head and upper body dip forward twice in a calm nod and come back upright each time",
            M.NOD,
            E.HAPPY,
        ),
        _preset(
            "heart",
            "holding a big red heart in both hands, blushing",
            "the arms push the heart gently forward and back, the heart swells and shrinks like a heartbeat",
            M.PULSE,
            E.LOVE,
            P.HEART,
            frame_duration_ms=90,
        ),
        _preset(
            "thumbs-up",
            "giving a thumbs up, confident grin",
            "the arm thrusts the thumb forward once with a small bounce of the whole body, then settles",
            M.POP,
            E.WINK,
            P.THUMB,
        ),
        _preset(
            "sleep",
            "sleeping peacefully, eyes closed, small zzz above the head",
            "the chest rises and falls slowly with each breath, the body drifts up and down a little, zzz float up",
            M.FLOAT,
            E.SLEEP,
            P.ZZZ,
            frame_duration_ms=120,
        ),
        _preset(
            "surprised",
            "shocked and surprised, mouth open in an O, eyes wide",
            "the body jolts up a little in surprise and settles, small sparks flash beside the head",
            M.POP,
            E.SURPRISED,
            P.SPARKLE,
        ),
        _preset(
            "think",
            "thinking hard, looking up, a question mark above the head",
            "the head tilts slowly from one side to the other and back, the question mark bobs above it",
            M.SWAY,
            E.THINK,
            P.QUESTION,
            frame_duration_ms=110,
        ),
        _preset(
            "dance",
            "dancing happily, one foot lifted, arms out",
            "the hips sway left and right to a beat, the body leans with them, small sparkles around",
            M.SWAY,
            E.HAPPY,
            P.SPARKLE,
        ),
        _preset(
            "thanks",
            "bowing politely with a grateful smile",
            "the upper body bends forward from the waist in a bow and comes back upright",
            M.NOD,
            E.HAPPY,
            frame_duration_ms=100,
        ),
        _preset(
            "clap",
            "clapping the hands in front of the chest, delighted",
            "the hands meet and part in front of the chest in quick claps while the body bobs on each clap",
            M.BOUNCE,
            E.LAUGH,
            frame_duration_ms=70,
        ),
        _preset(
            "shy",
            "shy and blushing, hands together, looking aside",
            "the body sways slowly side to side from the feet, shoulders raised a little, the blush stays",
            M.SWAY,
            E.LOVE,
        ),
        _preset(
            "sad",
            "sad and downcast, one tear, shoulders dropped",
            "the body sinks slowly and rises again with a sigh, a tear runs down and drops away",
            M.FLOAT,
            E.CRY,
            P.TEAR,
            frame_duration_ms=110,
        ),
        _preset(
            "ok",
            "making an OK sign with one hand, cheerful",
            "the hand with the OK sign pops forward once with a small nod of the head, then settles",
            M.POP,
            E.HAPPY,
            P.THUMB,
        ),
        _preset(
            "no",
            "refusing, frowning, shaking the head",
            "the head and shoulders turn quickly left and right several times, the body stays planted",
            M.SHAKE,
            E.ANGRY,
        ),
        _preset(
            "celebrate",
            "celebrating with both arms up, sparkles around",
            "the body hops up and down on the spot with the arms up, sparkles burst around it",
            M.BOUNCE,
            E.LAUGH,
            P.SPARKLE,
        ),
        _preset(
            "nervous",
            "nervous, wide eyes, a sweat drop beside the head",
            "the body trembles in small quick shivers left and right, the sweat drop slides down",
            M.SHAKE,
            E.SURPRISED,
            P.TEAR,
        ),
        _preset(
            "sorry",
            "apologetic, head lowered, hands together",
            "the head and upper body bow forward in a small apologetic bob and come back up",
            M.NOD,
            E.CRY,
        ),
        _preset(
            "love",
            "eyes closed in bliss, a heart floating beside the head",
            "the body rocks gently, the heart floats up beside the head and swells softly",
            M.FLOAT,
            E.LOVE,
            P.HEART,
            frame_duration_ms=100,
        ),
    )
}
"""The catalogue, by name. Order is the order shown to users."""

DEFAULT_ACTIONS: tuple[str, ...] = ("wave", "laugh", "heart", "thumbs-up", "cry", "angry", "sleep", "surprised")
"""Eight: the smallest set LINE takes, so that a default set is one LINE accepts as a whole."""
