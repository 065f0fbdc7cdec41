"""What an action looks like when drawn: its :class:`Staging` (motion, expression, prop).

A preset names all three; a custom action names none, so they are read from the words of its pose and motion prompts
with small keyword tables ("waving" -> a wave, "heart" -> a pulsing heart held with love, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from activities.generation.procedural.prompt import words
from workflows.contract import ActionSpec
from workflows.presets import Expression, Motion, Prop


@dataclass(frozen=True)
class Staging:
    """How an action is drawn: the motion of its loop, the face, and the prop shown with the character."""

    motion: Motion
    expression: Expression
    prop: Prop


REST = Staging(Motion.SWAY, Expression.HAPPY, Prop.NONE)
"""The character standing at rest (drawn with no motion), as character candidates show it."""

MOTION_WORDS: dict[str, Motion] = {
    **dict.fromkeys(("wave", "waves", "waving", "hand", "hands", "hello", "hi", "bye", "goodbye"), Motion.WAVE),
    **dict.fromkeys(
        ("jump", "jumps", "jumping", "hop", "hops", "hopping", "bounce", "bounces", "bouncing", "spring", "leap"),
        Motion.BOUNCE,
    ),
    **dict.fromkeys(("nod", "nods", "nodding", "bow", "bows", "bowing", "bob", "bobs", "dip", "dips"), Motion.NOD),
    **dict.fromkeys(
        ("shake", "shakes", "shaking", "tremble", "trembles", "trembling", "shiver", "shivers", "jitter", "quiver"),
        Motion.SHAKE,
    ),
    **dict.fromkeys(
        ("float", "floats", "floating", "drift", "drifts", "drifting", "breath", "breathe", "breathing", "hover"),
        Motion.FLOAT,
    ),
    **dict.fromkeys(("heart", "hearts", "heartbeat", "pulse", "pulses", "pulsing", "throb", "swell"), Motion.PULSE),
    **dict.fromkeys(("pop", "pops", "popping", "jolt", "jolts", "burst", "bursts", "startle"), Motion.POP),
    **dict.fromkeys(("sway", "sways", "swaying", "rock", "rocks", "rocking", "dance", "dancing", "tilt"), Motion.SWAY),
}
"""Words naming a motion; the first one in the prompts wins, else :attr:`Motion.SWAY`."""

EXPRESSION_WORDS: dict[str, Expression] = {
    **dict.fromkeys(("happy", "smile", "smiles", "smiling", "grin", "cheerful", "joy"), Expression.HAPPY),
    **dict.fromkeys(("laugh", "laughs", "laughing", "giggle", "giggling", "lol", "haha"), Expression.LAUGH),
    **dict.fromkeys(("cry", "cries", "crying", "tear", "tears", "sob", "sobbing", "sad", "upset"), Expression.CRY),
    **dict.fromkeys(("love", "loving", "heart", "hearts", "blush", "blushing", "kiss", "adore"), Expression.LOVE),
    **dict.fromkeys(("sleep", "sleeps", "sleeping", "asleep", "nap", "napping", "snore", "zzz"), Expression.SLEEP),
    **dict.fromkeys(("angry", "furious", "mad", "rage", "grumpy", "annoyed"), Expression.ANGRY),
    **dict.fromkeys(("surprised", "surprise", "shocked", "shock", "wow", "gasp", "amazed"), Expression.SURPRISED),
    **dict.fromkeys(("wink", "winks", "winking"), Expression.WINK),
    **dict.fromkeys(
        ("think", "thinks", "thinking", "wonder", "wondering", "hmm", "question", "puzzled"), Expression.THINK
    ),
}
"""Words naming a face; the first one in the prompts wins, else :attr:`Expression.HAPPY`."""

PROP_WORDS: dict[str, Prop] = {
    **dict.fromkeys(("heart", "hearts"), Prop.HEART),
    **dict.fromkeys(("thumb", "thumbs", "ok", "okay"), Prop.THUMB),
    **dict.fromkeys(("tear", "tears", "cry", "crying", "sweat"), Prop.TEAR),
    **dict.fromkeys(("zzz", "sleep", "sleeping", "asleep", "snore"), Prop.ZZZ),
    **dict.fromkeys(("steam", "fume", "fumes", "fuming", "smoke"), Prop.STEAM),
    **dict.fromkeys(("sparkle", "sparkles", "sparkling", "star", "stars", "glitter", "sparks"), Prop.SPARKLE),
    **dict.fromkeys(("question", "confused", "puzzled"), Prop.QUESTION),
}
"""Words naming a prop; the first one in the prompts wins, else :attr:`Prop.NONE`."""


def infer_staging(text: str) -> Staging:
    """The staging that the words of ``text`` name (case-insensitive), with a gentle happy sway for what they do not.

    Each of motion, expression and prop is the one named by the earliest word that names one.
    """
    said = words(text)
    motion = next((MOTION_WORDS[word] for word in said if word in MOTION_WORDS), Motion.SWAY)
    expression = next((EXPRESSION_WORDS[word] for word in said if word in EXPRESSION_WORDS), Expression.HAPPY)
    prop = next((PROP_WORDS[word] for word in said if word in PROP_WORDS), Prop.NONE)
    return Staging(motion, expression, prop)


def staging_for(action: ActionSpec) -> Staging:
    """How ``action`` is drawn: what it names, and for what it leaves open (a custom action), what the words of its
    pose and motion prompts name."""
    inferred = infer_staging(f"{action.pose_prompt} {action.motion_prompt}")
    return Staging(
        inferred.motion if action.motion is None else action.motion,
        inferred.expression if action.expression is None else action.expression,
        inferred.prop if action.prop is None else action.prop,
    )
