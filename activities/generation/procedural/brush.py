"""What every part of the character painter shares: the fixed palette, the layout of body and face, and :class:`Brush`.

A :class:`Brush` holds the state of one frame being painted (its scene, pose and the colours derived from the body) and
the helpers that put shapes on the canvas: filled, outlined, or mirrored about the vertical centre line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from activities.generation.drawing import (
    Affine,
    Arc,
    Box,
    Canvas,
    Circle,
    Colour,
    Ellipse,
    Fill,
    Offset,
    Polygon,
    RadialShade,
    Segment,
    Shape,
    Union,
    luminance,
    mix,
)
from activities.generation.procedural.prompt import WHITE, Anatomy, Ears, Nose, Silhouette
from activities.generation.procedural.scene import Scene

# The fixed palette: colours that do not depend on the character's body colour.
INK: Colour = (44.0, 32.0, 48.0)
PAPER: Colour = (250.0, 250.0, 252.0)
BLUSH: Colour = (255.0, 120.0, 150.0)
MOUTH: Colour = (120.0, 36.0, 54.0)
TONGUE: Colour = (240.0, 112.0, 124.0)
INNER_EAR: Colour = (255.0, 170.0, 185.0)
BEAK: Colour = (255.0, 170.0, 60.0)


@dataclass(frozen=True)
class _Face:
    """Where the face sits on the body."""

    eye_y: float = 142.0
    eye_dx: float = 24.0
    mouth_y: float = 164.0


def _face_for(anatomy: Anatomy) -> _Face:
    """Where the face sits for ``anatomy``: higher and wider for eye bumps, the mouth lower under a beak or snout."""
    if anatomy.ears is Ears.EYE_BUMPS:
        return _Face(eye_y=108.0, eye_dx=30.0, mouth_y=154.0)
    if anatomy.nose in (Nose.BEAK, Nose.SNOUT):
        return _Face(mouth_y=170.0)
    return _Face()


def _body_shape(silhouette: Silhouette) -> Shape:
    """The body of a silhouette, on the design grid."""
    if silhouette is Silhouette.BOXY:
        return Box(128.0, 150.0, 64.0, 56.0, radius=22.0)
    if silhouette is Silhouette.GHOSTLY:
        scallops = tuple(Circle(81.5 + 31.0 * i, 200.0, 15.5) for i in range(4))
        return Union((Circle(128.0, 142.0, 62.0), Box(128.0, 174.0, 62.0, 26.0), *scallops))
    return Ellipse(128.0, 150.0, 66.0, 58.0)


def mirrored(shape: Shape) -> Shape:
    """The same primitive reflected about the vertical centre line x = 128.

    Raises:
        TypeError: ``shape`` is not a primitive (a circle, ellipse, box, segment, polygon or arc).
    """
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


class Brush:
    """The state of one frame being painted and the helpers that put shapes onto its canvas.

    Shapes are laid out on the design grid of the character at rest and placed by the pose, unless told otherwise.

    Args:
        canvas: Where the frame is painted.
        scene: What is drawn: the character, its look, the style, the action's staging and the motion's variation.
        t: The phase of the motion's loop, in [0, 1).
    """

    def __init__(self, canvas: Canvas, scene: Scene, t: float) -> None:
        self.canvas = canvas
        self.spec = scene.spec
        self.anatomy = scene.spec.anatomy
        self.look = scene.look
        self.staging = scene.staging
        self.t = t
        self.pose = scene.pose(t)
        self.placement = self.pose.transform()
        self.face = _face_for(self.anatomy)
        self.body_shape = _body_shape(self.anatomy.silhouette)
        self.pixels_per_unit = canvas.view.scale
        style = scene.style
        self.outline_width = 2.4 * style.outline
        body = scene.look.body
        self.outline: Colour = mix(INK, mix(body, (0.0, 0.0, 0.0), 0.6), 0.25)
        self.ink: Colour = (236.0, 232.0, 240.0) if luminance(body) < 80.0 else self.outline
        self.body_fill = RadialShade(
            100.0,
            112.0,
            110.0,
            mix(body, WHITE, 0.2 * style.shading),
            mix(body, (20.0, 10.0, 30.0), 0.2 * style.shading),
        )
        self.accent: Colour = mix(body, (20.0, 10.0, 30.0), 0.28)
        self.patches: Colour = mix(INK, body, 0.15)

    # Helpers

    def thin(self, half_width: float) -> float:
        """A stroke half-width in design units, never under half a pixel so thin lines stay visible when small."""
        return max(half_width, 0.5 / self.pixels_per_unit)

    def fill(self, shape: Shape, fill: Fill, softness: float = 1.0, placement: Affine | None = None) -> None:
        """Paint ``shape`` with ``fill``, placed by the pose unless ``placement`` is given."""
        self.canvas.paint(shape, fill, self.placement if placement is None else placement, softness=softness)

    def outlined(self, shape: Shape, fill: Fill, placement: Affine | None = None, width: float | None = None) -> None:
        """``shape`` with a closed dark outline around it."""
        self.fill(Offset(shape, self.outline_width if width is None else width), self.outline, placement=placement)
        self.fill(shape, fill, placement=placement)

    def pair(self, shape: Shape, fill: Fill, outline: bool = True, softness: float = 1.0) -> None:
        """``shape`` and its mirror image, outlined or not."""
        for part in (shape, mirrored(shape)):
            if outline:
                self.outlined(part, fill)
            else:
                self.fill(part, fill, softness=softness)
