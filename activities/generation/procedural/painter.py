"""The character painter: paints one frame of the character, back to front, layer by layer.

The body, ears and feet are painted here; the face, the accessories and the arms and props by the layers it combines
(:mod:`.face`, :mod:`.accessories`, :mod:`.props`), all sharing the state and helpers of :class:`.brush.Brush`.
"""

from __future__ import annotations

import math

from activities.generation.drawing import Box, Circle, Ellipse, Fill, Polygon, Segment, Shape, mix
from activities.generation.procedural.accessories import AccessoryPainting
from activities.generation.procedural.brush import BEAK, INNER_EAR, PAPER
from activities.generation.procedural.face import FacePainting
from activities.generation.procedural.prompt import COLOUR_WORDS, WHITE, Ears, Nose
from activities.generation.procedural.props import PropPainting
from workflows.presets import Motion


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


class CharacterPainter(FacePainting, AccessoryPainting, PropPainting):
    """Paints one frame of the character, back to front, onto a canvas."""

    def paint(self) -> None:
        """Paint every layer onto the canvas, back to front: the character, then its effects."""
        self.paint_character()
        self.paint_effects()

    def paint_character(self) -> None:
        """Paint the character and what it holds, back to front."""
        if self.staging.motion is Motion.WAVE:
            self.raised_arm()
        self.ears_behind()
        self.feet()
        self.body()
        self.ears_in_front()
        self.face_features()
        self.accessories()
        self.arms()

    def paint_effects(self) -> None:
        """Paint what is shown around the character, over it: the action's prop and the motion's effects."""
        self.props()
        self.motion_effects()

    def ears_behind(self) -> None:
        """The ears (or horns, bolts, eye bumps) behind the body, with their inner parts."""
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
            inner_colour = (120.0, 126.0, 140.0) if self.anatomy.ears is Ears.BOLTS else INNER_EAR
            self.pair(inner, mix(self.patches, inner_colour, 0.3) if self.anatomy.eye_patches else inner_colour, False)

    def feet(self) -> None:
        """Both feet, for kinds that have them."""
        if not self.anatomy.feet:
            return
        colour: Fill = BEAK if self.anatomy.nose is Nose.BEAK else self.accent
        self.pair(Ellipse(102.0, 209.0, 17.0, 10.0), colour)

    def body(self) -> None:
        """The antenna or tuft, the body with its outline and belly, and a soft highlight."""
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
            self.fill(Ellipse(128.0, 160.0, 50.0, 46.0), PAPER)
        self.fill(
            Ellipse(100.0, 114.0, 13.0, 7.0, -0.5),
            mix(self.look.body, WHITE, 0.55),
            softness=6.0 * self.pixels_per_unit,
        )

    def ears_in_front(self) -> None:
        """Floppy ears, which hang in front of the body."""
        if self.anatomy.ears is Ears.FLOPPY:
            self.pair(Ellipse(70.0, 132.0, 14.0, 30.0, 0.45), self.accent)
