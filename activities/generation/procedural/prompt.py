"""Reading the character from text: creature kinds, their anatomy, accessories, colour words and style words.

:class:`CharacterSpec` is who is drawn (kind, body colour, worn accessories), read from the character prompt and refined
by a reviewer's custom words; :class:`StyleTweaks` is how heavily it is outlined and shaded, read from the style.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum

from activities.generation.drawing import Colour, colour_distance, mix

WHITE: Colour = (255.0, 255.0, 255.0)


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
    """What sits on top of (or beside) the head."""

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
    """The middle of the face."""

    BUTTON = "button"
    MUZZLE = "muzzle"
    SNOUT = "snout"
    BEAK = "beak"
    NONE = "none"


class Silhouette(StrEnum):
    """The outline of the body."""

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


def words(text: str) -> list[str]:
    """The lower-case words of ``text``, with "bow tie" and "top hat" each read as one word."""
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
        said = words(text)
        reading = cls()
        body_colours: list[Colour] = []
        loose_colours: list[Colour] = []
        for index, word in enumerate(said):
            kind = _lookup(word, KIND_WORDS)
            accessory = _lookup(word, ACCESSORY_WORDS)
            if isinstance(kind, Kind) and reading.kind is None:
                reading.kind = kind
            if isinstance(accessory, Accessory):
                reading.accessories.setdefault(accessory, None)
            if word not in COLOUR_WORDS:
                continue
            colour = _shaded(COLOUR_WORDS[word], said[index - 1] if index else "")
            target = _attached_word(said[index + 1 : index + 1 + _ATTACH_REACH])
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
        """The anatomy of this character's kind."""
        return ANATOMY[self.kind]

    def _default_colour(self, accessory: Accessory) -> Colour:
        colour = _DEFAULT_ACCESSORY_COLOURS[accessory]
        if colour_distance(colour, self.body) >= 100.0:
            return colour
        return max((COLOUR_WORDS[name] for name in _CONTRAST_COLOURS), key=lambda c: colour_distance(c, self.body))


@dataclass(frozen=True)
class StyleTweaks:
    """Outline weight and shading strength, from words of the style ("flat", "bold", "soft", "glossy"...)."""

    outline: float = 1.0
    shading: float = 1.0

    @classmethod
    def from_style(cls, style: str) -> StyleTweaks:
        """Read the tweaks of ``style`` (case-insensitive); words it does not know change nothing."""
        named = set(words(style))
        outline = 1.25 if named & {"bold", "thick", "sticker"} else 0.8 if named & {"thin", "delicate"} else 1.0
        shading = 0.6 if "flat" in named else 1.4 if named & {"soft", "glossy", "shiny", "3d"} else 1.0
        return cls(outline=outline, shading=shading)


def custom_words(prompt: str, *own: str) -> str:
    """What a reviewer added to ``prompt``: the prompt with each of the ``own`` texts (the character's or action's
    own prompts it may quote) taken out, case-insensitively; empty when the prompt is just those."""
    for text in own:
        if text.strip():
            prompt = re.sub(re.escape(text.strip()), " ", prompt, flags=re.IGNORECASE)
    return " ".join(prompt.split())
