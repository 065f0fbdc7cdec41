"""Built-in catalogue of pose presets.

A preset says what one emoji of a set shows (the per-pose prompt) and how it moves across its frames (the motion the
procedural generator draws and the frame timing the exported animation uses). Plain data: safe in workflow code.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Motion(StrEnum):
    """How the character moves across the frames of one emoji (one loop)."""

    WAVE = "wave"  # an arm swings side to side
    BOUNCE = "bounce"  # the body hops up and down, squashing on landing
    SHAKE = "shake"  # quick side-to-side jitter
    SWAY = "sway"  # slow tilt left and right
    PULSE = "pulse"  # a held prop grows and shrinks
    FLOAT = "float"  # slow drift up and down
    POP = "pop"  # quick grow then settle


class Expression(StrEnum):
    """The face drawn for a pose."""

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
    """An accessory held or shown next to the character for a pose."""

    NONE = "none"
    HEART = "heart"
    THUMB = "thumb"
    TEAR = "tear"
    ZZZ = "zzz"
    STEAM = "steam"
    SPARKLE = "sparkle"
    QUESTION = "question"


class PosePreset(BaseModel):
    """One entry of the catalogue."""

    model_config = ConfigDict(frozen=True)

    name: str
    prompt: str = Field(description="What the emoji shows; appended to the character prompt.")
    motion: Motion
    expression: Expression
    prop: Prop = Prop.NONE
    frame_duration_ms: int = Field(default=83, ge=20, le=1000, description="Display time of each frame.")


PRESETS: dict[str, PosePreset] = {
    preset.name: preset
    for preset in (
        PosePreset(
            name="wave",
            prompt="waving hello with one hand, friendly smile",
            motion=Motion.WAVE,
            expression=Expression.HAPPY,
        ),
        PosePreset(
            name="laugh",
            prompt="laughing out loud, eyes squeezed shut, mouth wide open",
            motion=Motion.BOUNCE,
            expression=Expression.LAUGH,
            frame_duration_ms=70,
        ),
        PosePreset(
            name="cry",
            prompt="crying, big tears rolling down the cheeks",
            motion=Motion.SHAKE,
            expression=Expression.CRY,
            prop=Prop.TEAR,
        ),
        PosePreset(
            name="heart",
            prompt="holding a big red heart, blushing",
            motion=Motion.PULSE,
            expression=Expression.LOVE,
            prop=Prop.HEART,
            frame_duration_ms=90,
        ),
        PosePreset(
            name="thumbs-up",
            prompt="giving a thumbs up, confident grin",
            motion=Motion.POP,
            expression=Expression.WINK,
            prop=Prop.THUMB,
        ),
        PosePreset(
            name="sleep",
            prompt="sleeping peacefully, floating zzz",
            motion=Motion.FLOAT,
            expression=Expression.SLEEP,
            prop=Prop.ZZZ,
            frame_duration_ms=120,
        ),
        PosePreset(
            name="angry",
            prompt="furious, frowning, steam puffing from the head",
            motion=Motion.SHAKE,
            expression=Expression.ANGRY,
            prop=Prop.STEAM,
            frame_duration_ms=60,
        ),
        PosePreset(
            name="surprised",
            prompt="shocked and surprised, mouth open in an O",
            motion=Motion.POP,
            expression=Expression.SURPRISED,
            prop=Prop.SPARKLE,
        ),
        PosePreset(
            name="think",
            prompt="thinking hard, looking up, a question mark above",
            motion=Motion.SWAY,
            expression=Expression.THINK,
            prop=Prop.QUESTION,
            frame_duration_ms=110,
        ),
        PosePreset(
            name="dance",
            prompt="dancing happily, swaying to music",
            motion=Motion.SWAY,
            expression=Expression.HAPPY,
            prop=Prop.SPARKLE,
        ),
    )
}
"""The catalogue, by name. Order is the order shown to users."""

DEFAULT_POSES: tuple[str, ...] = ("wave", "laugh", "heart", "thumbs-up", "cry", "angry", "sleep", "surprised")
"""Eight: the smallest set LINE takes, so that a default set is one LINE accepts as a whole."""
