"""How the character moves and how candidates differ: the looping :class:`Pose`, :class:`CandidateLook` and
:class:`Variation`.

:meth:`Pose.at` gives the offset, tilt, squash and swing of a motion at phase ``t`` of the loop. A character
candidate's :class:`CandidateLook` jitters its body colour and tilts its accessories, deterministically from (seed,
candidate); a :class:`Variation` scales and leans the motion of one start frame, take or frame edit, deterministically
from its own key.
"""

from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass, replace

from activities.generation.drawing import Affine, Colour
from activities.generation.procedural.prompt import CharacterSpec, stable_fraction
from workflows.presets import Motion


def _hls(colour: Colour) -> tuple[float, float, float]:
    """``colour`` as (hue, lightness, saturation), each in [0, 1]."""
    return colorsys.rgb_to_hls(*(channel / 255.0 for channel in colour))


def _from_hls(hue: float, lightness: float, saturation: float) -> Colour:
    """The RGB colour of (hue, lightness, saturation), the hue wrapped and the others clamped to [0, 1]."""
    r, g, b = colorsys.hls_to_rgb(hue % 1.0, min(max(lightness, 0.0), 1.0), min(max(saturation, 0.0), 1.0))
    return r * 255.0, g * 255.0, b * 255.0


@dataclass(frozen=True)
class CandidateLook:
    """What makes the character candidates of one prompt differ, fixed per (seed, candidate)."""

    body: Colour
    accessory_tilt: float

    @classmethod
    def for_candidate(cls, spec: CharacterSpec, seed: int, candidate: int) -> CandidateLook:
        """Jitter the body's hue and lightness a little and tilt the accessories."""
        hue, lightness, saturation = _hls(spec.body)
        hue += (stable_fraction("hue", seed, candidate) - 0.5) * 0.04
        lightness += (stable_fraction("lightness", seed, candidate) - 0.5) * 0.06
        return cls(
            body=_from_hls(hue, lightness, saturation),
            accessory_tilt=(stable_fraction("tilt", seed, candidate) - 0.5) * 0.24,
        )


@dataclass(frozen=True)
class Variation:
    """How one start frame, take or frame edit moves differently from its siblings.

    Attributes:
        amplitude: Scales the motion (1 is the motion as designed; 0 stands still at rest).
        lean: A slight tilt of the whole character about its feet, in radians, held through the loop.
        swell: A take's change of amplitude over its loop: the amplitude at phase ``t`` is ``amplitude * (1 + swell *
            sin²(πt))``, so it is ``amplitude`` at ``t = 0`` (the start frame) and the loop still closes.
    """

    amplitude: float = 1.0
    lean: float = 0.0
    swell: float = 0.0

    @classmethod
    def pick(cls, *key: object) -> Variation:
        """A small deterministic variation for ``key`` (e.g. seed, action name, candidate): amplitude 0.9..1.1 and a
        lean within ±0.03 rad."""
        return cls(
            amplitude=0.9 + 0.2 * stable_fraction("amplitude", *key),
            lean=(stable_fraction("lean", *key) - 0.5) * 0.06,
        )

    def for_take(self, *key: object) -> Variation:
        """This variation with the swell of the take ``key`` (e.g. seed, action name, take), within ±0.12."""
        return Variation(self.amplitude, self.lean, (stable_fraction("swell", *key) - 0.5) * 0.24)

    def amplitude_at(self, t: float) -> float:
        """The amplitude at phase ``t``; periodic in ``t`` with period 1."""
        return self.amplitude * (1.0 + self.swell * math.sin(math.pi * t) ** 2)

    def pose(self, motion: Motion, t: float) -> Pose:
        """The pose of ``motion`` at phase ``t`` as this variation moves it."""
        pose = Pose.at(motion, t, self.amplitude_at(t))
        return replace(pose, tilt=pose.tilt + self.lean)


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
        """The pose at phase ``t`` of the loop; periodic in ``t`` with period 1."""
        t %= 1.0
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
            case Motion.NOD:
                # Twice per loop the body folds down towards the feet, as wide as ever (grow undoes the squash's
                # widening), and comes back upright.
                stretch = 1.0 - 0.06 * a * math.sin(2.0 * math.pi * t) ** 2
                return cls(stretch=stretch, grow=math.sqrt(stretch))

    def transform(self) -> Affine:
        """Design space of the character at rest -> design space of the frame."""
        squash = Affine.scaling(self.grow / math.sqrt(self.stretch), self.grow * self.stretch, GROUND_X, GROUND_Y)
        return squash.then(Affine.rotation(self.tilt, GROUND_X, GROUND_Y)).then(Affine.translation(self.dx, self.dy))
