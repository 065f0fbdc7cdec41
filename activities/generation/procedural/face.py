"""Painting the face: blush, eye patches, nose, eyes, brows, mouth and whiskers, as the action's expression has them."""

from __future__ import annotations

import math

from activities.generation.drawing import (
    Arc,
    Box,
    Circle,
    Ellipse,
    Intersection,
    Offset,
    Polygon,
    Segment,
    Shape,
    mix,
    polyline,
)
from activities.generation.procedural.brush import BEAK, BLUSH, MOUTH, PAPER, TONGUE, Brush
from activities.generation.procedural.prompt import WHITE, Nose
from workflows.presets import Expression


class FacePainting(Brush):
    """The face layer of the character painter."""

    def face_features(self) -> None:
        """Blush, eye patches, nose, eyes, mouth and whiskers."""
        face = self.face
        blush_strength = 0.85 if self.staging.expression is Expression.LOVE else 0.55
        blush = mix(self.look.body, BLUSH, blush_strength)
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
        """The nose of the kind: button, muzzle, snout or beak (or none)."""
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
            self.outlined(snout, mix(self.look.body, BLUSH, 0.35), width=self.thin(1.4))
            self.pair(Ellipse(123.0, y + 6.0, 2.0, 3.2), self.outline, outline=False)
        elif nose is Nose.BEAK:
            self.outlined(
                Polygon(((119.0, y - 1.0), (137.0, y - 1.0), (128.0, y + 8.0)), 2.5), BEAK, width=self.thin(1.5)
            )

    def whiskers(self) -> None:
        """Three whiskers on each cheek."""
        y = self.face.eye_y + 14.0
        for dy, spread in ((-2.0, -6.0), (2.0, 0.0), (6.0, 6.0)):
            self.pair(Segment(94.0, y + dy, 52.0, y + dy + spread, self.thin(0.6)), self.ink, outline=False)

    # Eyes

    def eyes(self) -> None:
        """Both eyes as the expression has them (open, squeezed shut, closed, winking), and the brows."""
        face = self.face
        left, right = 128.0 - face.eye_dx, 128.0 + face.eye_dx
        y = face.eye_y
        expression = self.staging.expression
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
        """An open eye at (``x``, ``y``), looking as the expression does; ``side`` is -1 for the left eye."""
        expression = self.staging.expression
        size = 1.15 if expression in (Expression.SURPRISED, Expression.LOVE, Expression.CRY) else 1.0
        pupil = {Expression.SURPRISED: 0.55, Expression.LOVE: 1.08, Expression.CRY: 1.05}.get(expression, 0.95)
        look_x, look_y = (3.0, -4.0) if expression is Expression.THINK else (0.0, 0.8)
        sclera: Shape = Ellipse(x, y, 10.5 * size, 12.5 * size)
        if expression is Expression.ANGRY:
            sclera = Intersection(sclera, Box(x, y + 10.0, 18.0, 16.0, angle=-0.35 * side))
        self.outlined(sclera, PAPER, width=self.thin(1.5))
        px, py = x + look_x, y + look_y
        self.fill(Intersection(Circle(px, py, 7.5 * pupil * size), sclera), (40.0, 30.0, 46.0))
        self.fill(Circle(px - 2.6 * size, py - 3.2 * size, 2.7 * size), WHITE)
        self.fill(Circle(px + 2.5 * size, py + 2.8 * size, 1.3 * size), WHITE)

    def brows(self, left: float, right: float, y: float) -> None:
        """The brows of the expressions that have them (angry, cry, surprised, think)."""
        expression = self.staging.expression
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
        """The mouth of the expression, and fangs for kinds that have them."""
        x, y = 128.0, self.face.mouth_y
        expression = self.staging.expression
        stroke = self.thin(1.4)
        if expression is Expression.LAUGH:
            self.open_mouth(x, y - 3.0, 15.0, 14.0)
        elif expression is Expression.WINK:
            self.open_mouth(x, y - 2.0, 14.0, 8.0)
        elif expression is Expression.LOVE:
            self.open_mouth(x, y - 2.0, 8.0, 8.0, teeth=False)
        elif expression is Expression.SURPRISED:
            o = Ellipse(x, y + 1.0, 6.5, 8.5)
            self.outlined(o, MOUTH, width=self.thin(1.5))
            self.fill(Intersection(Ellipse(x, y + 7.0, 5.0, 4.0), o), TONGUE)
        elif expression is Expression.SLEEP:
            self.outlined(Ellipse(x + 2.0, y + 1.0, 3.0, 3.8), MOUTH, width=self.thin(1.3))
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
            self.pair(Polygon(((119.0, y), (125.0, y), (122.0, y + 6.0)), 0.8), PAPER)

    def open_mouth(self, x: float, y: float, half_width: float, depth: float, teeth: bool = True) -> None:
        """A D-shaped open mouth hanging from ``y``, with white upper teeth and a tongue."""
        mouth = Offset(
            Intersection(Ellipse(x, y, half_width - 2.0, depth - 2.0), Box(x, y + depth, 2 * half_width, depth)), 2.0
        )
        self.fill(Offset(mouth, self.thin(1.5)), self.outline)
        self.fill(mouth, MOUTH)
        if teeth:
            self.fill(Intersection(mouth, Box(x, y - 1.0, half_width, 0.28 * depth + 1.0)), PAPER)
        self.fill(Intersection(mouth, Ellipse(x, y + depth, 0.6 * half_width, 0.45 * depth)), TONGUE)

    def gritted_teeth(self, x: float, y: float) -> None:
        """A row of clenched teeth centred on (``x``, ``y``)."""
        teeth = Box(x, y, 12.0, 6.0, radius=3.0)
        self.outlined(teeth, PAPER, width=self.thin(1.5))
        line = self.thin(0.7)
        self.fill(Segment(x - 11.0, y, x + 11.0, y, line), self.outline)
        for dx in (-5.0, 0.0, 5.0):
            self.fill(Segment(x + dx, y - 5.5, x + dx, y + 5.5, line), self.outline)
