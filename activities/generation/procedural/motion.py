"""How the character moves and how candidates differ: the looping :class:`Pose` and the per-candidate look.

:meth:`Pose.at` gives the offset, tilt, squash and swing of a preset's motion at phase ``t`` of the loop;
:class:`CandidateLook` jitters the body colour, scales the motion, tilts accessories and picks the background of one
candidate, deterministically from (seed, candidate).
"""

from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass

from activities.generation.drawing import Affine, Colour, colour_distance
from activities.generation.procedural.prompt import WHITE, CharacterSpec, stable_fraction
from workflows.presets import Motion


def _hls(colour: Colour) -> tuple[float, float, float]:
    """``colour`` as (hue, lightness, saturation), each in [0, 1]."""
    return colorsys.rgb_to_hls(*(channel / 255.0 for channel in colour))


def _from_hls(hue: float, lightness: float, saturation: float) -> Colour:
    """The RGB colour of (hue, lightness, saturation), the hue wrapped and the others clamped to [0, 1]."""
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
