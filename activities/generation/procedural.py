"""The procedural generator: an offline, deterministic cartoon character, the default backend.

The character is read from the prompt (body colour, creature kind, accessories), posed per preset (expression, prop,
motion) and drawn with the signed-distance shapes of :mod:`activities.generation.drawing` over a uniform background.
Because the drawing's alpha is exactly the coverage used to composite it, every image comes with its true alpha, which
quality tests compare matting results against.

All geometry is laid out on a 256 x 256 design grid and scaled to the requested size. Frame ``f`` of ``n`` is the phase
``t = (f mod n) / n`` of a loop, so the last frame leads smoothly back to the first.
"""

from __future__ import annotations

import asyncio
import colorsys
import hashlib
import io
import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from activities.generation import register_generator
from activities.generation.base import GeneratedImage
from activities.generation.drawing import (
    Affine,
    Arc,
    Box,
    Canvas,
    Circle,
    Colour,
    Ellipse,
    Fill,
    FloatArray,
    Intersection,
    Offset,
    Polygon,
    RadialShade,
    Segment,
    Shape,
    Stroke,
    Union,
    colour_distance,
    heart,
    luminance,
    mix,
    polyline,
    star,
)
from activities.settings import Settings
from workflows.contract import GenerateFrameInput
from workflows.presets import Expression, Motion, PosePreset, Prop

DESIGN_SIZE = 256.0
"""Edge of the design grid all geometry is laid out on."""

MARGIN = 0.06
"""Fraction of the frame edge the character and its props always stay clear of."""

FRAMING = Affine.translation(0.0, 4.0).then(Affine.scaling(1.08, 1.08, 128.0, 128.0))
"""Design grid -> frame (in design units): centres and enlarges the envelope of every kind, accessory, pose and prop
over the whole loop so that it fills the frame but stays inside ``MARGIN``."""

WHITE: Colour = (255.0, 255.0, 255.0)
_INK: Colour = (44.0, 32.0, 48.0)
_PAPER: Colour = (250.0, 250.0, 252.0)
_BLUSH: Colour = (255.0, 120.0, 150.0)
_MOUTH: Colour = (120.0, 36.0, 54.0)
_TONGUE: Colour = (240.0, 112.0, 124.0)
_INNER_EAR: Colour = (255.0, 170.0, 185.0)
_BEAK: Colour = (255.0, 170.0, 60.0)

# --- Reading the prompt ------------------------------------------------------------------------------------------


class Kind(StrEnum):
    """The creature drawn."""

    CAT = "cat"
    FOX = "fox"
    BEAR = "bear"
    PANDA = "panda"
    MOUSE = "mouse"
    BUNNY = "bunny"
    DOG = "dog"
    PIG = "pig"
    FROG = "frog"
    PENGUIN = "penguin"
    CHICK = "chick"
    GHOST = "ghost"
    BLOB = "blob"
    ROBOT = "robot"
    MONSTER = "monster"


class Ears(StrEnum):
    POINTED = "pointed"
    ROUND = "round"
    BIG_ROUND = "big_round"
    LONG = "long"
    FLOPPY = "floppy"
    HORNS = "horns"
    BOLTS = "bolts"
    EYE_BUMPS = "eye_bumps"
    NONE = "none"


class Nose(StrEnum):
    BUTTON = "button"
    MUZZLE = "muzzle"
    SNOUT = "snout"
    BEAK = "beak"
    NONE = "none"


class Silhouette(StrEnum):
    ROUND = "round"
    BOXY = "boxy"
    GHOSTLY = "ghostly"


@dataclass(frozen=True)
class Anatomy:
    """What distinguishes one kind from another."""

    ears: Ears
    nose: Nose
    silhouette: Silhouette = Silhouette.ROUND
    whiskers: bool = False
    antenna: bool = False
    tuft: bool = False
    eye_patches: bool = False
    white_belly: bool = False
    fangs: bool = False
    feet: bool = True


ANATOMY: dict[Kind, Anatomy] = {
    Kind.CAT: Anatomy(Ears.POINTED, Nose.BUTTON, whiskers=True),
    Kind.FOX: Anatomy(Ears.POINTED, Nose.MUZZLE, whiskers=True),
    Kind.BEAR: Anatomy(Ears.ROUND, Nose.MUZZLE),
    Kind.PANDA: Anatomy(Ears.ROUND, Nose.MUZZLE, eye_patches=True),
    Kind.MOUSE: Anatomy(Ears.BIG_ROUND, Nose.BUTTON, whiskers=True),
    Kind.BUNNY: Anatomy(Ears.LONG, Nose.BUTTON),
    Kind.DOG: Anatomy(Ears.FLOPPY, Nose.MUZZLE),
    Kind.PIG: Anatomy(Ears.POINTED, Nose.SNOUT),
    Kind.FROG: Anatomy(Ears.EYE_BUMPS, Nose.NONE),
    Kind.PENGUIN: Anatomy(Ears.NONE, Nose.BEAK, white_belly=True),
    Kind.CHICK: Anatomy(Ears.NONE, Nose.BEAK, tuft=True),
    Kind.GHOST: Anatomy(Ears.NONE, Nose.NONE, silhouette=Silhouette.GHOSTLY, feet=False),
    Kind.BLOB: Anatomy(Ears.NONE, Nose.NONE, feet=False),
    Kind.ROBOT: Anatomy(Ears.BOLTS, Nose.NONE, silhouette=Silhouette.BOXY, antenna=True),
    Kind.MONSTER: Anatomy(Ears.HORNS, Nose.NONE, fangs=True),
}

KIND_WORDS: dict[str, Kind] = {
    **{kind.value: kind for kind in Kind},
    **dict.fromkeys(("kitten", "kitty", "kitties", "neko"), Kind.CAT),
    **dict.fromkeys(("teddy", "grizzly"), Kind.BEAR),
    **dict.fromkeys(("mice", "hamster", "rat"), Kind.MOUSE),
    **dict.fromkeys(("rabbit", "bunnies", "hare"), Kind.BUNNY),
    **dict.fromkeys(("puppy", "doggo", "pup", "corgi", "shiba"), Kind.DOG),
    **dict.fromkeys(("piglet", "piggy"), Kind.PIG),
    **dict.fromkeys(("toad",), Kind.FROG),
    **dict.fromkeys(("bird", "duck", "duckling", "chicken", "birdie"), Kind.CHICK),
    **dict.fromkeys(("spirit", "boo"), Kind.GHOST),
    **dict.fromkeys(("slime", "mochi", "jelly", "bean"), Kind.BLOB),
    **dict.fromkeys(("bot", "android", "droid", "mech"), Kind.ROBOT),
    **dict.fromkeys(("devil", "demon", "dragon", "dino", "dinosaur", "imp"), Kind.MONSTER),
}


class Accessory(StrEnum):
    """Something the character wears."""

    SCARF = "scarf"
    HAT = "hat"
    CROWN = "crown"
    GLASSES = "glasses"
    BOW = "bow"
    BOWTIE = "bowtie"
    HEADPHONES = "headphones"
    FLOWER = "flower"


ACCESSORY_WORDS: dict[str, Accessory] = {
    **{accessory.value: accessory for accessory in Accessory},
    **dict.fromkeys(("tophat", "beanie", "cap"), Accessory.HAT),
    **dict.fromkeys(("tiara",), Accessory.CROWN),
    **dict.fromkeys(("spectacles", "sunglasses", "specs"), Accessory.GLASSES),
    **dict.fromkeys(("ribbon",), Accessory.BOW),
    **dict.fromkeys(("necktie", "tie"), Accessory.BOWTIE),
    **dict.fromkeys(("headphone", "headset", "earphones"), Accessory.HEADPHONES),
    **dict.fromkeys(("daisy", "blossom", "rose"), Accessory.FLOWER),
}

_HEAD_TOP = (Accessory.HAT, Accessory.CROWN)
"""Accessories that sit on top of the head: only the last one named is worn."""

COLOUR_WORDS: dict[str, Colour] = {
    "orange": (255.0, 150.0, 60.0),
    "red": (235.0, 75.0, 75.0),
    "blue": (85.0, 150.0, 235.0),
    "green": (110.0, 200.0, 110.0),
    "yellow": (255.0, 215.0, 80.0),
    "pink": (255.0, 160.0, 195.0),
    "purple": (165.0, 115.0, 220.0),
    "violet": (165.0, 115.0, 220.0),
    "brown": (170.0, 115.0, 75.0),
    "grey": (160.0, 165.0, 175.0),
    "gray": (160.0, 165.0, 175.0),
    "black": (62.0, 60.0, 72.0),
    "white": (246.0, 246.0, 246.0),
    "teal": (60.0, 185.0, 175.0),
    "cyan": (90.0, 210.0, 230.0),
    "mint": (150.0, 230.0, 190.0),
    "navy": (55.0, 75.0, 145.0),
    "cream": (250.0, 232.0, 200.0),
    "beige": (235.0, 215.0, 180.0),
    "gold": (240.0, 190.0, 60.0),
    "golden": (240.0, 190.0, 60.0),
    "silver": (200.0, 205.0, 215.0),
    "lavender": (200.0, 170.0, 240.0),
    "peach": (255.0, 190.0, 150.0),
    "lime": (180.0, 225.0, 80.0),
    "ginger": (235.0, 130.0, 55.0),
    "tan": (215.0, 175.0, 130.0),
}
_SHADE_WORDS: dict[str, tuple[Colour, float]] = {
    "light": (WHITE, 0.35),
    "pale": (WHITE, 0.45),
    "pastel": (WHITE, 0.4),
    "dark": ((20.0, 15.0, 30.0), 0.35),
    "deep": ((20.0, 15.0, 30.0), 0.25),
}
_FALLBACK_BODIES = ("orange", "pink", "blue", "green", "yellow", "purple", "teal", "brown", "peach", "mint", "lavender")
_NATURAL_BODIES: dict[Kind, tuple[str, ...]] = {
    Kind.PANDA: ("white", "cream"),
    Kind.PENGUIN: ("navy", "black", "blue"),
    Kind.FROG: ("green", "lime", "teal"),
    Kind.CHICK: ("yellow", "gold"),
    Kind.PIG: ("pink", "peach"),
    Kind.GHOST: ("white", "lavender", "mint"),
    Kind.ROBOT: ("grey", "silver", "blue"),
}
"""Body colours to choose from when the prompt names none, for kinds with a typical colour."""
_CONTRAST_COLOURS = ("red", "blue", "green", "yellow", "purple", "pink")
_DEFAULT_ACCESSORY_COLOURS: dict[Accessory, Colour] = {
    Accessory.SCARF: COLOUR_WORDS["red"],
    Accessory.HAT: (70.0, 66.0, 86.0),
    Accessory.CROWN: COLOUR_WORDS["gold"],
    Accessory.GLASSES: (50.0, 44.0, 58.0),
    Accessory.BOW: (240.0, 80.0, 125.0),
    Accessory.BOWTIE: (220.0, 60.0, 75.0),
    Accessory.HEADPHONES: (95.0, 100.0, 120.0),
    Accessory.FLOWER: (255.0, 140.0, 180.0),
}
_ATTACH_REACH = 3
"""A colour word colours the first creature or accessory word at most this many words after it."""


def stable_fraction(*parts: object) -> float:
    """A deterministic pseudo-random number in [0, 1) from ``parts`` (stable across processes, unlike ``hash``)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _words(text: str) -> list[str]:
    text = re.sub(r"\bbow[\s-]+tie\b", "bowtie", text.lower())
    text = re.sub(r"\btop[\s-]+hat\b", "tophat", text)
    return re.findall(r"[a-z]+", text)


def _lookup(word: str, table: dict[str, Kind] | dict[str, Accessory]) -> Kind | Accessory | None:
    """The entry for ``word`` or its singular."""
    return table.get(word) or (table.get(word[:-1]) if word.endswith("s") else None)


@dataclass
class _PromptReading:
    """What a text says explicitly; anything missing is left to the fallbacks."""

    kind: Kind | None = None
    body: Colour | None = None
    accessories: dict[Accessory, Colour | None] = field(default_factory=dict)

    @classmethod
    def of(cls, text: str) -> _PromptReading:
        words = _words(text)
        reading = cls()
        body_colours: list[Colour] = []
        loose_colours: list[Colour] = []
        for index, word in enumerate(words):
            kind = _lookup(word, KIND_WORDS)
            accessory = _lookup(word, ACCESSORY_WORDS)
            if isinstance(kind, Kind) and reading.kind is None:
                reading.kind = kind
            if isinstance(accessory, Accessory):
                reading.accessories.setdefault(accessory, None)
            if word not in COLOUR_WORDS:
                continue
            colour = _shaded(COLOUR_WORDS[word], words[index - 1] if index else "")
            target = _attached_word(words[index + 1 : index + 1 + _ATTACH_REACH])
            if isinstance(target, Accessory):
                if reading.accessories.get(target) is None:
                    reading.accessories[target] = colour
            elif isinstance(target, Kind):
                body_colours.append(colour)
            else:
                loose_colours.append(colour)
        reading.body = body_colours[-1] if body_colours else loose_colours[0] if loose_colours else None
        return reading


def _shaded(colour: Colour, previous_word: str) -> Colour:
    """``colour`` lightened or darkened by a preceding 'light', 'dark', 'pale'... ."""
    if previous_word in _SHADE_WORDS:
        towards, amount = _SHADE_WORDS[previous_word]
        return mix(colour, towards, amount)
    return colour


def _attached_word(following: list[str]) -> Kind | Accessory | None:
    """The creature or accessory a colour word describes: the first one named right after it, before another colour."""
    for word in following:
        if word in COLOUR_WORDS:
            return None
        found = _lookup(word, ACCESSORY_WORDS) or _lookup(word, KIND_WORDS)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class CharacterSpec:
    """Who is drawn: kind, body colour and worn accessories (each with its colour), read from a prompt."""

    kind: Kind
    body: Colour
    accessories: tuple[tuple[Accessory, Colour], ...] = ()

    @classmethod
    def from_prompt(cls, prompt: str, seed: int) -> CharacterSpec:
        """Read the character of ``prompt`` (case-insensitive).

        Colour words colour the creature or accessory named within a few words after them ("an orange cat with a blue
        scarf"); a kind or colour the prompt does not name is chosen deterministically from a hash of prompt and seed.
        """
        reading = _PromptReading.of(prompt)
        key = (prompt.strip().lower(), seed)
        kind = reading.kind or list(Kind)[int(stable_fraction("kind", *key) * len(Kind))]
        fallbacks = _NATURAL_BODIES.get(kind, _FALLBACK_BODIES)
        body = reading.body or COLOUR_WORDS[fallbacks[int(stable_fraction("body", *key) * len(fallbacks))]]
        return cls(kind, body).with_accessories(reading.accessories)

    def refined(self, text: str) -> CharacterSpec:
        """This character changed by what ``text`` (a reviewer's custom prompt) names explicitly."""
        reading = _PromptReading.of(text)
        changed = CharacterSpec(reading.kind or self.kind, reading.body or self.body, self.accessories)
        return changed.with_accessories(reading.accessories)

    def with_accessories(self, added: dict[Accessory, Colour | None]) -> CharacterSpec:
        """Add (or recolour) accessories; an uncoloured one gets a default colour that stands out from the body.

        Only one accessory sits on top of the head (hat or crown): the last one added replaces the other.
        """
        worn = dict(self.accessories)
        for accessory, colour in added.items():
            if accessory in _HEAD_TOP:
                worn = {other: tint for other, tint in worn.items() if other is accessory or other not in _HEAD_TOP}
            if colour is not None or accessory not in worn:
                worn[accessory] = colour or self._default_colour(accessory)
        return CharacterSpec(self.kind, self.body, tuple(worn.items()))

    @property
    def anatomy(self) -> Anatomy:
        return ANATOMY[self.kind]

    def _default_colour(self, accessory: Accessory) -> Colour:
        colour = _DEFAULT_ACCESSORY_COLOURS[accessory]
        if colour_distance(colour, self.body) >= 100.0:
            return colour
        return max((COLOUR_WORDS[name] for name in _CONTRAST_COLOURS), key=lambda c: colour_distance(c, self.body))


# --- Per-candidate variation, style and pose -----------------------------------------------------------------------


def _hls(colour: Colour) -> tuple[float, float, float]:
    return colorsys.rgb_to_hls(*(channel / 255.0 for channel in colour))


def _from_hls(hue: float, lightness: float, saturation: float) -> Colour:
    r, g, b = colorsys.hls_to_rgb(hue % 1.0, min(max(lightness, 0.0), 1.0), min(max(saturation, 0.0), 1.0))
    return r * 255.0, g * 255.0, b * 255.0


_TINT_HUES = (0.0, 0.08, 0.15, 0.3, 0.45, 0.55, 0.62, 0.75, 0.88)
_PALE_TINTS = tuple(_from_hls(hue, 0.93, 0.75) for hue in _TINT_HUES)
_DEEP_TINTS = tuple(_from_hls(hue, 0.78, 0.6) for hue in _TINT_HUES)
_MIN_BACKGROUND_DISTANCE = 90.0
_MIN_BACKGROUND_HUE_GAP = 0.12
_WHITE_BACKGROUND_SHARE = 0.35


def _hue_gap(a: Colour, b: Colour) -> float:
    """Circular hue difference in [0, 0.5], or 0.5 when either colour is too grey to have a hue."""
    (hue_a, light_a, sat_a), (hue_b, light_b, sat_b) = _hls(a), _hls(b)
    if min(sat_a, sat_b) < 0.25 or not (0.08 < light_a < 0.97 and 0.08 < light_b < 0.97):
        return 0.5
    gap = abs(hue_a - hue_b) % 1.0
    return min(gap, 1.0 - gap)


def _background_options(body: Colour) -> list[Colour]:
    """White and pale tints far enough from the body colour in RGB and hue; for a very pale body (where none is),
    the deeper tints furthest from it."""
    usable = [
        colour
        for colour in (WHITE, *_PALE_TINTS)
        if colour_distance(colour, body) >= _MIN_BACKGROUND_DISTANCE
        and (colour == WHITE or _hue_gap(colour, body) >= _MIN_BACKGROUND_HUE_GAP)
    ]
    return usable or sorted(_DEEP_TINTS, key=lambda colour: -colour_distance(colour, body))[:3]


@dataclass(frozen=True)
class CandidateLook:
    """The small things that make the candidates of one frame differ, fixed per (seed, candidate)."""

    body: Colour
    amplitude: float
    accessory_tilt: float
    background: Colour

    @classmethod
    def for_candidate(cls, spec: CharacterSpec, seed: int, candidate: int) -> CandidateLook:
        """Jitter body hue and lightness a little, scale the motion, tilt accessories, and pick a background.

        The background is one uniform colour (plain white or a pale tint, never close to the body), with no vignette:
        matting engines estimate the background colour from the frame border.
        """
        hue, lightness, saturation = _hls(spec.body)
        hue += (stable_fraction("hue", seed, candidate) - 0.5) * 0.04
        lightness += (stable_fraction("lightness", seed, candidate) - 0.5) * 0.06
        body = _from_hls(hue, lightness, saturation)
        options = _background_options(body)
        tints = [colour for colour in options if colour != WHITE] or options
        if WHITE in options and stable_fraction("white", seed, candidate) < _WHITE_BACKGROUND_SHARE:
            background = WHITE
        else:
            background = tints[int(stable_fraction("tint", seed, candidate) * len(tints))]
        return cls(
            body=body,
            amplitude=0.85 + 0.3 * stable_fraction("amplitude", seed, candidate),
            accessory_tilt=(stable_fraction("tilt", seed, candidate) - 0.5) * 0.24,
            background=background,
        )


@dataclass(frozen=True)
class StyleTweaks:
    """Outline weight and shading strength, from words of the style ("flat", "bold", "soft", "glossy"...)."""

    outline: float = 1.0
    shading: float = 1.0

    @classmethod
    def from_style(cls, style: str) -> StyleTweaks:
        words = set(_words(style))
        outline = 1.25 if words & {"bold", "thick", "sticker"} else 0.8 if words & {"thin", "delicate"} else 1.0
        shading = 0.6 if "flat" in words else 1.4 if words & {"soft", "glossy", "shiny", "3d"} else 1.0
        return cls(outline=outline, shading=shading)


GROUND_X, GROUND_Y = 128.0, 218.0
"""The point between the feet: the pivot of tilt and squash."""


@dataclass(frozen=True)
class Pose:
    """Where the character is at one phase of its motion, in design units and radians."""

    dx: float = 0.0
    dy: float = 0.0
    tilt: float = 0.0
    stretch: float = 1.0
    grow: float = 1.0
    arm_swing: float = 0.0
    prop_scale: float = 1.0

    @classmethod
    def at(cls, motion: Motion, t: float, amplitude: float = 1.0) -> Pose:
        """The pose at phase ``t`` in [0, 1) of the loop; periodic in ``t`` with period 1."""
        wave = math.sin(2.0 * math.pi * t)
        a = amplitude
        match motion:
            case Motion.WAVE:
                return cls(tilt=0.05 * a * wave, arm_swing=0.5 * a * wave)
            case Motion.BOUNCE:
                hop = abs(math.sin(math.pi * t))
                return cls(dy=-14.0 * a * hop, stretch=1.0 - 0.1 * a * (1.0 - hop) ** 4 + 0.04 * a * hop)
            case Motion.SHAKE:
                jitter = math.sin(6.0 * math.pi * t)
                return cls(dx=5.0 * a * jitter, tilt=0.035 * a * jitter)
            case Motion.SWAY:
                return cls(dx=4.0 * a * wave, tilt=0.12 * a * wave)
            case Motion.PULSE:
                return cls(stretch=1.0 + 0.02 * a * wave, prop_scale=1.0 + 0.15 * a * wave)
            case Motion.FLOAT:
                return cls(dx=3.0 * a * math.sin(4.0 * math.pi * t), dy=-6.0 - 8.0 * a * wave)
            case Motion.POP:
                return cls(grow=1.0 + 0.16 * a * math.exp(-4.0 * t) * math.sin(3.0 * math.pi * t))

    def transform(self) -> Affine:
        """Design space of the character at rest -> design space of the frame."""
        squash = Affine.scaling(self.grow / math.sqrt(self.stretch), self.grow * self.stretch, GROUND_X, GROUND_Y)
        return squash.then(Affine.rotation(self.tilt, GROUND_X, GROUND_Y)).then(Affine.translation(self.dx, self.dy))


# --- Drawing the character ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Face:
    """Where the face sits on the body."""

    eye_y: float = 142.0
    eye_dx: float = 24.0
    mouth_y: float = 164.0


def _face_for(anatomy: Anatomy) -> _Face:
    if anatomy.ears is Ears.EYE_BUMPS:
        return _Face(eye_y=108.0, eye_dx=30.0, mouth_y=154.0)
    if anatomy.nose in (Nose.BEAK, Nose.SNOUT):
        return _Face(mouth_y=170.0)
    return _Face()


def _body_shape(silhouette: Silhouette) -> Shape:
    if silhouette is Silhouette.BOXY:
        return Box(128.0, 150.0, 64.0, 56.0, radius=22.0)
    if silhouette is Silhouette.GHOSTLY:
        scallops = tuple(Circle(81.5 + 31.0 * i, 200.0, 15.5) for i in range(4))
        return Union((Circle(128.0, 142.0, 62.0), Box(128.0, 174.0, 62.0, 26.0), *scallops))
    return Ellipse(128.0, 150.0, 66.0, 58.0)


def _mirrored(shape: Shape) -> Shape:
    """The same primitive reflected about the vertical centre line x = 128."""
    if isinstance(shape, Circle):
        return Circle(256.0 - shape.cx, shape.cy, shape.r)
    if isinstance(shape, Ellipse):
        return Ellipse(256.0 - shape.cx, shape.cy, shape.rx, shape.ry, -shape.angle)
    if isinstance(shape, Box):
        return Box(256.0 - shape.cx, shape.cy, shape.hw, shape.hh, shape.radius, -shape.angle)
    if isinstance(shape, Segment):
        return Segment(256.0 - shape.ax, shape.ay, 256.0 - shape.bx, shape.by, shape.radius)
    if isinstance(shape, Polygon):
        return Polygon(tuple((256.0 - x, y) for x, y in shape.points), shape.radius)
    if isinstance(shape, Arc):
        return Arc(256.0 - shape.cx, shape.cy, shape.r, math.pi - shape.end, math.pi - shape.start, shape.width)
    raise TypeError(f"cannot mirror {type(shape).__name__}")


def _ear_shapes(ears: Ears) -> tuple[Shape, Shape | None] | None:
    """The left ear and its inner part; the right ear is the mirror image."""
    if ears is Ears.POINTED:
        return Polygon(((74.0, 122.0), (80.0, 64.0), (118.0, 96.0)), 6.0), Polygon(
            ((86.0, 110.0), (87.0, 80.0), (106.0, 98.0)), 3.0
        )
    if ears is Ears.ROUND:
        return Circle(88.0, 102.0, 19.0), Circle(88.0, 102.0, 10.0)
    if ears is Ears.BIG_ROUND:
        return Circle(80.0, 100.0, 27.0), Circle(80.0, 100.0, 17.0)
    if ears is Ears.LONG:
        return Ellipse(104.0, 78.0, 12.0, 29.0, -0.18), Ellipse(104.0, 83.0, 6.0, 20.0, -0.18)
    if ears is Ears.HORNS:
        return Polygon(((90.0, 104.0), (82.0, 68.0), (110.0, 98.0)), 4.0), None
    if ears is Ears.BOLTS:
        return Box(60.0, 150.0, 8.0, 14.0, 3.0), Box(60.0, 150.0, 3.0, 9.0, 1.5)
    if ears is Ears.EYE_BUMPS:
        return Circle(98.0, 108.0, 22.0), None
    return None


_STILL = Affine()
"""Placement of props that stay where they are in the frame instead of moving with the character."""


class _CharacterPainter:
    """Paints one frame of the character, back to front, onto a canvas."""

    def __init__(
        self, canvas: Canvas, spec: CharacterSpec, look: CandidateLook, style: StyleTweaks, preset: PosePreset, t: float
    ) -> None:
        self.canvas = canvas
        self.spec = spec
        self.anatomy = spec.anatomy
        self.look = look
        self.preset = preset
        self.t = t
        self.pose = Pose.at(preset.motion, t, look.amplitude)
        self.placement = self.pose.transform()
        self.face = _face_for(self.anatomy)
        self.body_shape = _body_shape(self.anatomy.silhouette)
        self.pixels_per_unit = canvas.view.scale
        self.outline_width = 2.4 * style.outline
        body = look.body
        self.outline: Colour = mix(_INK, mix(body, (0.0, 0.0, 0.0), 0.6), 0.25)
        self.ink: Colour = (236.0, 232.0, 240.0) if luminance(body) < 80.0 else self.outline
        self.body_fill = RadialShade(
            100.0,
            112.0,
            110.0,
            mix(body, WHITE, 0.2 * style.shading),
            mix(body, (20.0, 10.0, 30.0), 0.2 * style.shading),
        )
        self.accent: Colour = mix(body, (20.0, 10.0, 30.0), 0.28)
        self.patches: Colour = mix(_INK, body, 0.15)

    # Helpers

    def thin(self, half_width: float) -> float:
        """A stroke half-width in design units, never under half a pixel so thin lines stay visible when small."""
        return max(half_width, 0.5 / self.pixels_per_unit)

    def fill(self, shape: Shape, fill: Fill, softness: float = 1.0, placement: Affine | None = None) -> None:
        self.canvas.paint(shape, fill, self.placement if placement is None else placement, softness=softness)

    def outlined(self, shape: Shape, fill: Fill, placement: Affine | None = None, width: float | None = None) -> None:
        """``shape`` with a closed dark outline around it."""
        self.fill(Offset(shape, self.outline_width if width is None else width), self.outline, placement=placement)
        self.fill(shape, fill, placement=placement)

    def pair(self, shape: Shape, fill: Fill, outline: bool = True, softness: float = 1.0) -> None:
        """``shape`` and its mirror image, outlined or not."""
        for part in (shape, _mirrored(shape)):
            if outline:
                self.outlined(part, fill)
            else:
                self.fill(part, fill, softness=softness)

    # Layers

    def paint(self) -> None:
        if self.preset.motion is Motion.WAVE:
            self.raised_arm()
        self.ears_behind()
        self.feet()
        self.body()
        self.ears_in_front()
        self.face_features()
        self.accessories()
        self.arms()
        self.props()

    def raised_arm(self) -> None:
        angle = -1.05 + self.pose.arm_swing
        shoulder_x, shoulder_y = 176.0, 150.0
        hand_x, hand_y = shoulder_x + 34.0 * math.cos(angle), shoulder_y + 34.0 * math.sin(angle)
        self.outlined(Segment(shoulder_x, shoulder_y, hand_x, hand_y, 11.0), self.body_fill)

    def ears_behind(self) -> None:
        shapes = _ear_shapes(self.anatomy.ears)
        if shapes is None:
            return
        outer, inner = shapes
        if self.anatomy.ears is Ears.HORNS:
            self.pair(outer, (250.0, 236.0, 200.0))
        elif self.anatomy.ears is Ears.BOLTS:
            self.pair(outer, (170.0, 176.0, 190.0))
        else:
            self.pair(outer, self.patches if self.anatomy.eye_patches else self.body_fill)
        if inner is not None:
            inner_colour = (120.0, 126.0, 140.0) if self.anatomy.ears is Ears.BOLTS else _INNER_EAR
            self.pair(inner, mix(self.patches, inner_colour, 0.3) if self.anatomy.eye_patches else inner_colour, False)

    def feet(self) -> None:
        if not self.anatomy.feet:
            return
        colour: Fill = _BEAK if self.anatomy.nose is Nose.BEAK else self.accent
        self.pair(Ellipse(102.0, 209.0, 17.0, 10.0), colour)

    def body(self) -> None:
        if self.anatomy.antenna:
            self.fill(Segment(128.0, 96.0, 128.0, 70.0, self.thin(0.9)), self.outline)
            self.outlined(Circle(128.0, 66.0, 6.0), COLOUR_WORDS["red"])
        if self.anatomy.tuft:
            for angle in (-0.5, 0.0, 0.5):
                self.outlined(
                    Ellipse(128.0 + 30.0 * math.sin(angle), 88.0 - 4.0 * math.cos(angle), 4.5, 11.0, angle),
                    self.body_fill,
                )
        self.outlined(self.body_shape, self.body_fill)
        if self.anatomy.white_belly:
            self.fill(Ellipse(128.0, 160.0, 50.0, 46.0), _PAPER)
        self.fill(
            Ellipse(100.0, 114.0, 13.0, 7.0, -0.5),
            mix(self.look.body, WHITE, 0.55),
            softness=6.0 * self.pixels_per_unit,
        )

    def ears_in_front(self) -> None:
        if self.anatomy.ears is Ears.FLOPPY:
            self.pair(Ellipse(70.0, 132.0, 14.0, 30.0, 0.45), self.accent)

    def face_features(self) -> None:
        face = self.face
        blush_strength = 0.85 if self.preset.expression is Expression.LOVE else 0.55
        blush = mix(self.look.body, _BLUSH, blush_strength)
        blush_shape = Ellipse(128.0 - face.eye_dx - 18.0, face.eye_y + 18.0, 10.0, 6.0)
        self.pair(blush_shape, blush, outline=False, softness=4.0 * self.pixels_per_unit)
        if self.anatomy.eye_patches:
            self.pair(Ellipse(128.0 - face.eye_dx, face.eye_y + 2.0, 14.0, 18.0, 0.5), self.patches, outline=False)
        self.nose()
        self.eyes()
        self.mouth()
        if self.anatomy.whiskers:
            self.whiskers()

    def nose(self) -> None:
        nose = self.anatomy.nose
        y = self.face.eye_y + 10.0
        if nose is Nose.BUTTON:
            self.fill(Polygon(((123.5, y - 1.5), (132.5, y - 1.5), (128.0, y + 3.0)), 1.8), (240.0, 120.0, 140.0))
        elif nose is Nose.MUZZLE:
            self.fill(Ellipse(128.0, y + 10.0, 18.0, 12.0), mix(self.look.body, WHITE, 0.7))
            self.fill(Ellipse(128.0, y + 3.0, 5.5, 3.8), self.outline)
            self.fill(Circle(126.5, y + 1.8, 1.3), WHITE)
        elif nose is Nose.SNOUT:
            snout = Ellipse(128.0, y + 6.0, 13.0, 9.0)
            self.outlined(snout, mix(self.look.body, _BLUSH, 0.35), width=self.thin(1.4))
            self.pair(Ellipse(123.0, y + 6.0, 2.0, 3.2), self.outline, outline=False)
        elif nose is Nose.BEAK:
            self.outlined(
                Polygon(((119.0, y - 1.0), (137.0, y - 1.0), (128.0, y + 8.0)), 2.5), _BEAK, width=self.thin(1.5)
            )

    def whiskers(self) -> None:
        y = self.face.eye_y + 14.0
        for dy, spread in ((-2.0, -6.0), (2.0, 0.0), (6.0, 6.0)):
            self.pair(Segment(94.0, y + dy, 52.0, y + dy + spread, self.thin(0.6)), self.ink, outline=False)

    # Eyes

    def eyes(self) -> None:
        face = self.face
        left, right = 128.0 - face.eye_dx, 128.0 + face.eye_dx
        y = face.eye_y
        expression = self.preset.expression
        if expression is Expression.LAUGH:
            for x, side in ((left, 1.0), (right, -1.0)):
                self.fill(polyline([(x - 7 * side, y - 6), (x + 6 * side, y), (x - 7 * side, y + 6)], 1.8), self.ink)
        elif expression is Expression.SLEEP:
            for x in (left, right):
                self.fill(Arc(x, y - 6.0, 9.0, math.pi / 2 - 0.9, math.pi / 2 + 0.9, 1.6), self.ink)
        elif expression is Expression.WINK:
            self.open_eye(left, y)
            self.fill(Arc(right, y + 6.0, 9.0, -math.pi / 2 - 1.0, -math.pi / 2 + 1.0, 1.8), self.ink)
        else:
            for x, side in ((left, -1.0), (right, 1.0)):
                self.open_eye(x, y, side)
        self.brows(left, right, y)

    def open_eye(self, x: float, y: float, side: float = -1.0) -> None:
        expression = self.preset.expression
        size = 1.15 if expression in (Expression.SURPRISED, Expression.LOVE, Expression.CRY) else 1.0
        pupil = {Expression.SURPRISED: 0.55, Expression.LOVE: 1.08, Expression.CRY: 1.05}.get(expression, 0.95)
        look_x, look_y = (3.0, -4.0) if expression is Expression.THINK else (0.0, 0.8)
        sclera: Shape = Ellipse(x, y, 10.5 * size, 12.5 * size)
        if expression is Expression.ANGRY:
            sclera = Intersection(sclera, Box(x, y + 10.0, 18.0, 16.0, angle=-0.35 * side))
        self.outlined(sclera, _PAPER, width=self.thin(1.5))
        px, py = x + look_x, y + look_y
        self.fill(Intersection(Circle(px, py, 7.5 * pupil * size), sclera), (40.0, 30.0, 46.0))
        self.fill(Circle(px - 2.6 * size, py - 3.2 * size, 2.7 * size), WHITE)
        self.fill(Circle(px + 2.5 * size, py + 2.8 * size, 1.3 * size), WHITE)

    def brows(self, left: float, right: float, y: float) -> None:
        expression = self.preset.expression
        width = self.thin(0.95)
        if expression is Expression.ANGRY:
            self.pair(Segment(left - 11.0, y - 20.0, left + 8.0, y - 13.0, width), self.ink, outline=False)
        elif expression is Expression.CRY:
            self.pair(Segment(left - 10.0, y - 16.0, left + 8.0, y - 22.0, width), self.ink, outline=False)
        elif expression is Expression.SURPRISED:
            self.pair(Arc(left, y - 6.0, 18.0, -math.pi / 2 - 0.45, -math.pi / 2 + 0.45, width), self.ink, False)
        elif expression is Expression.THINK:
            self.fill(Segment(left - 9.0, y - 18.0, left + 8.0, y - 18.0, width), self.ink)
            self.fill(Arc(right, y - 8.0, 16.0, -math.pi / 2 - 0.5, -math.pi / 2 + 0.5, width), self.ink)

    # Mouths

    def mouth(self) -> None:
        x, y = 128.0, self.face.mouth_y
        expression = self.preset.expression
        stroke = self.thin(1.4)
        if expression is Expression.LAUGH:
            self.open_mouth(x, y - 3.0, 15.0, 14.0)
        elif expression is Expression.WINK:
            self.open_mouth(x, y - 2.0, 14.0, 8.0)
        elif expression is Expression.LOVE:
            self.open_mouth(x, y - 2.0, 8.0, 8.0, teeth=False)
        elif expression is Expression.SURPRISED:
            o = Ellipse(x, y + 1.0, 6.5, 8.5)
            self.outlined(o, _MOUTH, width=self.thin(1.5))
            self.fill(Intersection(Ellipse(x, y + 7.0, 5.0, 4.0), o), _TONGUE)
        elif expression is Expression.SLEEP:
            self.outlined(Ellipse(x + 2.0, y + 1.0, 3.0, 3.8), _MOUTH, width=self.thin(1.3))
        elif expression is Expression.CRY:
            self.fill(Arc(x, y + 8.0, 9.0, -math.pi / 2 - 0.8, -math.pi / 2 + 0.8, stroke), self.ink)
        elif expression is Expression.ANGRY:
            self.gritted_teeth(x, y + 2.0)
        elif expression is Expression.THINK:
            self.fill(Segment(x - 4.0, y + 2.0, x + 7.0, y - 1.0, stroke), self.ink)
        elif self.anatomy.whiskers or self.anatomy.nose is Nose.BUTTON:
            for cx in (x - 4.5, x + 4.5):
                self.fill(Arc(cx, y - 6.0, 4.8, 0.25, math.pi - 0.25, stroke), self.ink)
        else:
            self.fill(Arc(x, y - 8.0, 9.0, math.pi / 2 - 0.85, math.pi / 2 + 0.85, stroke), self.ink)
        if self.anatomy.fangs and expression is not Expression.SURPRISED:
            self.pair(Polygon(((119.0, y), (125.0, y), (122.0, y + 6.0)), 0.8), _PAPER)

    def open_mouth(self, x: float, y: float, half_width: float, depth: float, teeth: bool = True) -> None:
        """A D-shaped open mouth hanging from ``y``, with white upper teeth and a tongue."""
        mouth = Offset(
            Intersection(Ellipse(x, y, half_width - 2.0, depth - 2.0), Box(x, y + depth, 2 * half_width, depth)), 2.0
        )
        self.fill(Offset(mouth, self.thin(1.5)), self.outline)
        self.fill(mouth, _MOUTH)
        if teeth:
            self.fill(Intersection(mouth, Box(x, y - 1.0, half_width, 0.28 * depth + 1.0)), _PAPER)
        self.fill(Intersection(mouth, Ellipse(x, y + depth, 0.6 * half_width, 0.45 * depth)), _TONGUE)

    def gritted_teeth(self, x: float, y: float) -> None:
        teeth = Box(x, y, 12.0, 6.0, radius=3.0)
        self.outlined(teeth, _PAPER, width=self.thin(1.5))
        line = self.thin(0.7)
        self.fill(Segment(x - 11.0, y, x + 11.0, y, line), self.outline)
        for dx in (-5.0, 0.0, 5.0):
            self.fill(Segment(x + dx, y - 5.5, x + dx, y + 5.5, line), self.outline)

    # Accessories

    def accessories(self) -> None:
        wear = {
            Accessory.SCARF: self.wear_scarf,
            Accessory.HAT: self.wear_hat,
            Accessory.CROWN: self.wear_crown,
            Accessory.GLASSES: self.wear_glasses,
            Accessory.BOW: self.wear_bow,
            Accessory.BOWTIE: self.wear_bowtie,
            Accessory.HEADPHONES: self.wear_headphones,
            Accessory.FLOWER: self.wear_flower,
        }
        for accessory, colour in self.spec.accessories:
            wear[accessory](colour)

    def tilted(self, x: float, y: float) -> Affine:
        return Affine.rotation(self.look.accessory_tilt, x, y).then(self.placement)

    def wear_scarf(self, colour: Colour) -> None:
        """A band around the body, curving like a ring seen from a little above, with one end hanging down."""
        tail = Affine.rotation(0.15 + self.look.accessory_tilt, 152.0, 182.0).then(self.placement)
        self.outlined(Box(152.0, 194.0, 7.5, 14.0, 3.0), colour, tail)
        for y in (201.0, 205.0):
            self.fill(Box(152.0, y, 7.5, 1.0), mix(colour, WHITE, 0.45), placement=tail)
        self.outlined(Intersection(Offset(self.body_shape, 3.0), Stroke(Circle(128.0, 58.0, 120.0), 7.5)), colour)

    def wear_bowtie(self, colour: Colour) -> None:
        place = self.tilted(128.0, 190.0)
        self.outlined(Polygon(((128.0, 190.0), (112.0, 181.0), (112.0, 199.0)), 2.5), colour, place)
        self.outlined(Polygon(((128.0, 190.0), (144.0, 181.0), (144.0, 199.0)), 2.5), colour, place)
        self.outlined(Circle(128.0, 190.0, 4.5), mix(colour, (0.0, 0.0, 0.0), 0.15), place)

    def wear_glasses(self, colour: Colour) -> None:
        face = self.face
        rim = self.thin(1.3)
        for x in (128.0 - face.eye_dx, 128.0 + face.eye_dx):
            self.fill(Stroke(Circle(x, face.eye_y, 15.0), rim), colour)
        self.fill(
            Segment(128.0 - face.eye_dx + 15.0, face.eye_y - 2.0, 128.0 + face.eye_dx - 15.0, face.eye_y - 2.0, rim),
            colour,
        )

    def wear_hat(self, colour: Colour) -> None:
        place = self.tilted(128.0, 95.0)
        band = (60.0, 58.0, 72.0) if luminance(colour) > 110 else COLOUR_WORDS["red"]
        self.outlined(Box(128.0, 74.0, 24.0, 21.0, 4.0), colour, place)
        self.fill(Box(128.0, 87.0, 24.0, 4.5), band, placement=place)
        self.outlined(Box(128.0, 95.0, 37.0, 4.5, 4.0), colour, place)

    def wear_crown(self, colour: Colour) -> None:
        place = self.tilted(128.0, 98.0)
        points = (
            (102.0, 98.0),
            (100.0, 68.0),
            (114.0, 82.0),
            (128.0, 62.0),
            (142.0, 82.0),
            (156.0, 68.0),
            (154.0, 98.0),
        )
        self.outlined(Polygon(points, 2.0), colour, place)
        self.outlined(Circle(128.0, 88.0, 4.0), COLOUR_WORDS["red"], place, width=self.thin(1.2))
        for x in (111.0, 145.0):
            self.outlined(Circle(x, 90.0, 3.0), COLOUR_WORDS["blue"], place, width=self.thin(1.2))

    def wear_bow(self, colour: Colour) -> None:
        place = self.tilted(160.0, 100.0)
        self.outlined(Polygon(((160.0, 100.0), (142.0, 88.0), (144.0, 112.0)), 4.0), colour, place)
        self.outlined(Polygon(((160.0, 100.0), (178.0, 88.0), (176.0, 112.0)), 4.0), colour, place)
        self.outlined(Circle(160.0, 100.0, 5.0), mix(colour, WHITE, 0.25), place)

    def wear_flower(self, colour: Colour) -> None:
        place = self.tilted(94.0, 102.0)
        for i in range(5):
            angle = 2.0 * math.pi * i / 5.0
            self.outlined(Circle(94.0 + 8.0 * math.cos(angle), 102.0 + 8.0 * math.sin(angle), 6.5), colour, place)
        self.fill(Circle(94.0, 102.0, 4.5), COLOUR_WORDS["yellow"], placement=place)

    def wear_headphones(self, colour: Colour) -> None:
        self.outlined(Arc(128.0, 150.0, 74.0, -math.pi + 0.2, -0.2, 3.5), colour)
        for cup in (Box(60.0, 150.0, 9.0, 17.0, 5.0), Box(196.0, 150.0, 9.0, 17.0, 5.0)):
            self.outlined(cup, colour)
        self.pair(Box(68.0, 150.0, 2.0, 12.0, 2.0), mix(colour, (0.0, 0.0, 0.0), 0.3), outline=False)

    # Arms and props

    def arms(self) -> None:
        prop = self.preset.prop
        rest = Ellipse(66.0, 176.0, 10.0, 14.0, 0.5)
        if prop is Prop.HEART:
            self.held_heart()
            self.pair(Ellipse(100.0, 192.0, 10.0, 12.0, 0.3), self.body_fill)
            return
        self.outlined(rest, self.body_fill)
        if prop is Prop.THUMB:
            self.thumbs_up()
        elif self.preset.motion is not Motion.WAVE:
            self.outlined(_mirrored(rest), self.body_fill)

    def held_heart(self) -> None:
        scale = self.pose.prop_scale
        place = Affine.scaling(scale, scale, 128.0, 190.0).then(self.placement)
        self.outlined(heart(128.0, 190.0, 52.0), (235.0, 60.0, 82.0), place)
        self.fill(Ellipse(114.0, 180.0, 6.0, 3.5, -0.7), WHITE, placement=place)

    def thumbs_up(self) -> None:
        self.outlined(Segment(190.0, 164.0, 190.0, 142.0, 6.5), self.body_fill)
        self.outlined(Box(196.0, 172.0, 14.0, 12.0, 7.0), self.body_fill)
        for y in (168.0, 175.0):
            self.fill(Segment(186.0, y, 205.0, y, self.thin(0.8)), self.outline)

    def props(self) -> None:
        prop = self.preset.prop
        if prop is Prop.TEAR:
            self.tears()
        elif prop is Prop.ZZZ:
            self.sleep_bubble()
            self.zzz()
        elif prop is Prop.STEAM:
            self.steam()
        elif prop is Prop.SPARKLE:
            self.sparkles()
        elif prop is Prop.QUESTION:
            self.question_mark()

    def tears(self) -> None:
        face = self.face
        for side, offset in ((-1.0, 0.0), (1.0, 0.5)):
            u = (self.t + offset) % 1.0
            size = min(1.0, 4.0 * math.sin(math.pi * u))
            if size < 0.15:
                continue
            x, y = 128.0 + side * (face.eye_dx + 6.0), face.eye_y + 12.0 + 30.0 * u
            drop = Union(
                (
                    Circle(x, y, 4.8 * size),
                    Polygon(((x, y - 11.0 * size), (x - 4.4 * size, y - 1.6 * size), (x + 4.4 * size, y - 1.6 * size))),
                )
            )
            self.outlined(drop, (130.0, 195.0, 250.0), width=self.thin(1.3))
            self.fill(Circle(x - 1.6 * size, y - 0.6 * size, 1.4 * size), WHITE)

    def sleep_bubble(self) -> None:
        radius = 4.0 + 2.5 * (1.0 + math.sin(2.0 * math.pi * self.t))
        x, y = 134.0 + radius, self.face.eye_y + 10.0 + radius * 0.2
        self.outlined(Circle(x, y, radius), (242.0, 248.0, 255.0), width=self.thin(1.2))
        self.fill(Circle(x - radius * 0.35, y - radius * 0.35, radius * 0.22), WHITE)

    def zzz(self) -> None:
        for k in range(3):
            u = (self.t + k / 3.0) % 1.0
            size = (6.0 + 8.0 * u) * min(1.0, 5.0 * math.sin(math.pi * u))
            if size < 1.5:
                continue
            x, y = 178.0 + 28.0 * u, 88.0 - 46.0 * u
            letter = polyline(
                [(x - size, y - size), (x + size, y - size), (x - size, y + size), (x + size, y + size)],
                0.22 * size + 0.6,
            )
            self.outlined(letter, (120.0, 150.0, 240.0), _STILL, width=self.thin(1.5))

    def steam(self) -> None:
        for side, offset in ((-1.0, 0.0), (1.0, 0.5)):
            u = (self.t + offset) % 1.0
            radius = 12.0 * min(1.0, 4.0 * math.sin(math.pi * u)) * (0.6 + 0.4 * u)
            if radius < 1.0:
                continue
            x, y = 128.0 + side * (56.0 + 10.0 * u), 100.0 - 28.0 * u
            puff = Union(
                (
                    Circle(x, y, radius),
                    Circle(x - 0.8 * radius, y + 0.35 * radius, 0.65 * radius),
                    Circle(x + 0.8 * radius, y + 0.35 * radius, 0.65 * radius),
                )
            )
            self.outlined(puff, (242.0, 242.0, 246.0), width=self.thin(1.4))

    def sparkles(self) -> None:
        for (x, y, size), phase in zip(
            ((50.0, 76.0, 11.0), (208.0, 70.0, 8.0), (214.0, 136.0, 7.0)), (0.0, 0.33, 0.66), strict=True
        ):
            twinkle = 0.55 + 0.45 * math.sin(math.pi * (self.t + phase)) ** 2
            shape = star(x, y, size * twinkle, size * twinkle * 0.32, 4)
            self.outlined(shape, (255.0, 214.0, 70.0), _STILL, width=self.thin(1.3))

    def question_mark(self) -> None:
        bob = 4.0 * math.sin(2.0 * math.pi * self.t)
        x, y = 204.0, 60.0 + bob
        mark = Union(
            (
                Arc(x, y - 8.0, 9.0, -math.pi - 0.25, math.pi / 2, 3.2),
                Segment(x, y + 1.0, x, y + 7.0, 3.2),
                Circle(x, y + 17.0, 3.4),
            )
        )
        self.outlined(
            mark,
            (90.0, 140.0, 235.0),
            Affine.rotation(0.15 * math.sin(2.0 * math.pi * self.t), x, y),
            width=self.thin(1.8),
        )


# --- Rendering ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderedFrame:
    """A drawn frame before compositing: premultiplied character colour, its exact alpha, and the background."""

    premultiplied: FloatArray
    alpha: FloatArray
    background: Colour

    def composite(self) -> NDArray[np.uint8]:
        """``alpha * character + (1 - alpha) * background`` in float, rounded once to uint8 RGB."""
        background = np.asarray(self.background, dtype=np.float32)
        image = self.premultiplied + (1.0 - self.alpha)[..., None] * background
        return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def character_for(request: GenerateFrameInput) -> CharacterSpec:
    """The character of a request: its character prompt, refined by any custom words in the frame prompt."""
    custom = request.prompt.replace(request.character_prompt, " ").replace(request.pose.prompt, " ")
    return CharacterSpec.from_prompt(request.character_prompt, request.seed).refined(custom)


def render_layers(request: GenerateFrameInput, candidate: int) -> RenderedFrame:
    """Draw candidate ``candidate`` of the requested frame, deterministically."""
    spec = character_for(request)
    look = CandidateLook.for_candidate(spec, request.seed, candidate)
    t = (request.frame % request.frame_count) / request.frame_count if request.frame_count > 0 else 0.0
    pixels_per_unit = request.image_size / DESIGN_SIZE
    canvas = Canvas(request.image_size, FRAMING.then(Affine.scaling(pixels_per_unit, pixels_per_unit)))
    _CharacterPainter(canvas, spec, look, StyleTweaks.from_style(request.style), request.pose, t).paint()
    return RenderedFrame(canvas.premultiplied, canvas.alpha, look.background)


def render_frame(request: GenerateFrameInput, candidate: int) -> tuple[NDArray[np.uint8], FloatArray]:
    """Draw one candidate frame.

    Returns:
        The RGB image (uint8, H x W x 3) composited over its background, and the true alpha (float32, H x W, 0..1)
        that was used to composite it.
    """
    frame = render_layers(request, candidate)
    return frame.composite(), frame.alpha


def _png(array: NDArray[np.uint8]) -> bytes:
    """PNG bytes of an RGB (H x W x 3) or greyscale (H x W) uint8 image."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


class ProceduralGenerator:
    """The offline generator: cartoon frames drawn from the prompt, with their true alpha."""

    name: ClassVar[str] = "procedural"

    async def generate(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        """Draw ``request.count`` candidates off the event loop, as PNGs with their true alpha."""
        return await asyncio.to_thread(self.generate_now, request)

    def generate_now(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        """The blocking work of :meth:`generate`."""
        images = []
        for candidate in range(request.first_candidate, request.first_candidate + request.count):
            rgb, alpha = render_frame(request, candidate)
            images.append(
                GeneratedImage(
                    data=_png(rgb),
                    media_type="image/png",
                    width=request.image_size,
                    height=request.image_size,
                    true_alpha_png=_png(np.rint(alpha * 255.0).astype(np.uint8)),
                )
            )
        return images


@register_generator("procedural")
def _create(settings: Settings) -> ProceduralGenerator:
    return ProceduralGenerator()
