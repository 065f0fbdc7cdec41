"""Anti-aliased vector drawing with signed distance functions, in numpy.

A :class:`Shape` knows its bounding box and its signed distance (negative inside) at any points of its own "design"
coordinate space. A :class:`Canvas` paints shapes back to front through an :class:`Affine` from design space to pixels:
the coverage of a pixel is ``clip(0.5 - distance_in_pixels, 0, 1)``, which is exact analytic anti-aliasing, and it is
composited with "over" into premultiplied colour and a transmittance. The resulting alpha is therefore exactly the
coverage used to composite the drawing over a background. Only the pixels of each shape's bounding box are evaluated.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.floating[Any]]
"""Float arrays; the canvas works in float32."""
Colour = tuple[float, float, float]
"""An sRGB colour, each channel 0..255 (floats allowed)."""


def mix(a: Colour, b: Colour, amount: float) -> Colour:
    """Linear blend from ``a`` (amount 0) to ``b`` (amount 1)."""
    return (a[0] + (b[0] - a[0]) * amount, a[1] + (b[1] - a[1]) * amount, a[2] + (b[2] - a[2]) * amount)


def luminance(colour: Colour) -> float:
    """Perceived brightness 0..255 (Rec. 601 weights)."""
    return 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2]


def colour_distance(a: Colour, b: Colour) -> float:
    """Euclidean distance in RGB, 0..~441."""
    return math.dist(a, b)


# --- Transforms --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Affine:
    """The map ``(x, y) -> (a*x + b*y + e, c*x + d*y + f)``."""

    a: float = 1.0
    b: float = 0.0
    c: float = 0.0
    d: float = 1.0
    e: float = 0.0
    f: float = 0.0

    @staticmethod
    def translation(dx: float, dy: float) -> Affine:
        return Affine(e=dx, f=dy)

    @staticmethod
    def scaling(sx: float, sy: float, cx: float = 0.0, cy: float = 0.0) -> Affine:
        """Scale by ``(sx, sy)`` about the point ``(cx, cy)``."""
        return Affine(a=sx, d=sy, e=cx - sx * cx, f=cy - sy * cy)

    @staticmethod
    def rotation(angle: float, cx: float = 0.0, cy: float = 0.0) -> Affine:
        """Rotate by ``angle`` radians (clockwise on screen, y pointing down) about ``(cx, cy)``."""
        cos, sin = math.cos(angle), math.sin(angle)
        return Affine(a=cos, b=-sin, c=sin, d=cos, e=cx - cos * cx + sin * cy, f=cy - sin * cx - cos * cy)

    def then(self, outer: Affine) -> Affine:
        """The transform applying ``self`` first, then ``outer``."""
        return Affine(
            a=outer.a * self.a + outer.b * self.c,
            b=outer.a * self.b + outer.b * self.d,
            c=outer.c * self.a + outer.d * self.c,
            d=outer.c * self.b + outer.d * self.d,
            e=outer.a * self.e + outer.b * self.f + outer.e,
            f=outer.c * self.e + outer.d * self.f + outer.f,
        )

    def inverse(self) -> Affine:
        det = self.a * self.d - self.b * self.c
        a, b, c, d = self.d / det, -self.b / det, -self.c / det, self.a / det
        return Affine(a=a, b=b, c=c, d=d, e=-(a * self.e + b * self.f), f=-(c * self.e + d * self.f))

    @property
    def scale(self) -> float:
        """Mean length scale (square root of the area scale): converts design distances to pixels."""
        return math.sqrt(abs(self.a * self.d - self.b * self.c))

    def apply(self, x: float, y: float) -> tuple[float, float]:
        return self.a * x + self.b * y + self.e, self.c * x + self.d * y + self.f

    def map_bounds(self, bounds: Bounds) -> Bounds:
        """The axis-aligned box around the mapped corners of ``bounds``."""
        x0, y0, x1, y1 = bounds
        corners = [self.apply(x, y) for x in (x0, x1) for y in (y0, y1)]
        xs, ys = [p[0] for p in corners], [p[1] for p in corners]
        return min(xs), min(ys), max(xs), max(ys)


Bounds = tuple[float, float, float, float]
"""``(x0, y0, x1, y1)``, an axis-aligned box."""


# --- Shapes ------------------------------------------------------------------------------------------------------


class Shape(Protocol):
    """A region given by its signed distance: negative inside, zero on the edge, in design units."""

    def bounds(self) -> Bounds:
        """A box containing every point where the distance is <= 0."""
        ...

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        """Signed distance at points ``(x, y)`` (broadcastable arrays)."""
        ...


def _rotate_into(x: FloatArray, y: FloatArray, cx: float, cy: float, angle: float) -> tuple[FloatArray, FloatArray]:
    """Coordinates relative to ``(cx, cy)`` in a frame rotated by ``angle``."""
    dx, dy = x - cx, y - cy
    if angle == 0.0:
        return dx, dy
    cos, sin = math.cos(angle), math.sin(angle)
    return dx * cos + dy * sin, dy * cos - dx * sin


def _radius_bounds(cx: float, cy: float, reach: float) -> Bounds:
    return cx - reach, cy - reach, cx + reach, cy + reach


@dataclass(frozen=True)
class Circle:
    cx: float
    cy: float
    r: float

    def bounds(self) -> Bounds:
        return _radius_bounds(self.cx, self.cy, self.r)

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        return np.hypot(x - self.cx, y - self.cy) - self.r


@dataclass(frozen=True)
class Ellipse:
    """An ellipse with radii ``rx, ry``, rotated by ``angle``; distance is a close first-order approximation."""

    cx: float
    cy: float
    rx: float
    ry: float
    angle: float = 0.0

    def bounds(self) -> Bounds:
        return _radius_bounds(self.cx, self.cy, max(self.rx, self.ry))

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        u, v = _rotate_into(x, y, self.cx, self.cy, self.angle)
        scaled = np.hypot(u / self.rx, v / self.ry)
        gradient = np.hypot(u / (self.rx * self.rx), v / (self.ry * self.ry))
        return scaled * (scaled - 1.0) / np.maximum(gradient, 1e-6)


@dataclass(frozen=True)
class Box:
    """A rectangle of half-size ``(hw, hh)`` with corner radius ``radius``, rotated by ``angle``."""

    cx: float
    cy: float
    hw: float
    hh: float
    radius: float = 0.0
    angle: float = 0.0

    def bounds(self) -> Bounds:
        if self.angle == 0.0:
            return self.cx - self.hw, self.cy - self.hh, self.cx + self.hw, self.cy + self.hh
        return _radius_bounds(self.cx, self.cy, math.hypot(self.hw, self.hh))

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        u, v = _rotate_into(x, y, self.cx, self.cy, self.angle)
        qx = np.abs(u) - (self.hw - self.radius)
        qy = np.abs(v) - (self.hh - self.radius)
        outside = np.hypot(np.maximum(qx, 0.0), np.maximum(qy, 0.0))
        inside = np.minimum(np.maximum(qx, qy), 0.0)
        return outside + inside - self.radius


@dataclass(frozen=True)
class Segment:
    """A capsule: every point within ``radius`` of the segment from ``(ax, ay)`` to ``(bx, by)``."""

    ax: float
    ay: float
    bx: float
    by: float
    radius: float

    def bounds(self) -> Bounds:
        r = self.radius
        return (
            min(self.ax, self.bx) - r,
            min(self.ay, self.by) - r,
            max(self.ax, self.bx) + r,
            max(self.ay, self.by) + r,
        )

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        dx, dy = self.bx - self.ax, self.by - self.ay
        length_sq = max(dx * dx + dy * dy, 1e-12)
        px, py = x - self.ax, y - self.ay
        h = np.clip((px * dx + py * dy) / length_sq, 0.0, 1.0)
        return np.hypot(px - h * dx, py - h * dy) - self.radius


@dataclass(frozen=True)
class Arc:
    """A stroke of half-width ``width`` along a circle of radius ``r``, from angle ``start`` to ``end`` (radians,
    clockwise on screen from +x, ``start < end``), with round caps."""

    cx: float
    cy: float
    r: float
    start: float
    end: float
    width: float

    def bounds(self) -> Bounds:
        return _radius_bounds(self.cx, self.cy, self.r + self.width)

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        half = (self.end - self.start) / 2.0
        u, v = _rotate_into(x, y, self.cx, self.cy, self.start + half)
        v = np.abs(v)
        cap_x, cap_y = self.r * math.cos(half), self.r * math.sin(half)
        within = u * math.sin(half) - v * math.cos(half) >= 0.0
        along = np.abs(np.hypot(u, v) - self.r)
        to_cap = np.hypot(u - cap_x, v - cap_y)
        return np.where(within, along, to_cap) - self.width


@dataclass(frozen=True)
class Polygon:
    """A simple polygon (convex or not) through ``points``, grown by ``radius`` for rounded corners."""

    points: tuple[tuple[float, float], ...]
    radius: float = 0.0

    def bounds(self) -> Bounds:
        xs, ys = [p[0] for p in self.points], [p[1] for p in self.points]
        return min(xs) - self.radius, min(ys) - self.radius, max(xs) + self.radius, max(ys) + self.radius

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        nearest_sq: FloatArray | None = None
        inside = np.zeros(np.broadcast_shapes(np.shape(x), np.shape(y)), dtype=bool)
        for (ax, ay), (bx, by) in zip(self.points, self.points[1:] + self.points[:1], strict=True):
            dx, dy = bx - ax, by - ay
            px, py = x - ax, y - ay
            h = np.clip((px * dx + py * dy) / max(dx * dx + dy * dy, 1e-12), 0.0, 1.0)
            edge_sq = (px - h * dx) ** 2 + (py - h * dy) ** 2
            nearest_sq = edge_sq if nearest_sq is None else np.minimum(nearest_sq, edge_sq)
            crosses = (ay > y) != (by > y)
            inside ^= crosses & (px < dx * py / (dy if dy != 0.0 else 1e-12))
        assert nearest_sq is not None
        nearest = np.sqrt(nearest_sq)
        return np.where(inside, -nearest, nearest) - self.radius


@dataclass(frozen=True)
class Union:
    shapes: tuple[Shape, ...]

    def bounds(self) -> Bounds:
        boxes = [shape.bounds() for shape in self.shapes]
        return min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes)

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        result = self.shapes[0].distance(x, y)
        for shape in self.shapes[1:]:
            result = np.minimum(result, shape.distance(x, y))
        return result


@dataclass(frozen=True)
class Intersection:
    shape: Shape
    mask: Shape

    def bounds(self) -> Bounds:
        a, b = self.shape.bounds(), self.mask.bounds()
        return max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        return np.maximum(self.shape.distance(x, y), self.mask.distance(x, y))


@dataclass(frozen=True)
class Offset:
    """``shape`` grown by ``amount`` (shrunk when negative): outlines and rounding."""

    shape: Shape
    amount: float

    def bounds(self) -> Bounds:
        x0, y0, x1, y1 = self.shape.bounds()
        grow = max(self.amount, 0.0)
        return x0 - grow, y0 - grow, x1 + grow, y1 + grow

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        return self.shape.distance(x, y) - self.amount


@dataclass(frozen=True)
class Stroke:
    """The band of half-width ``width`` along the edge of ``shape`` (a ring for a circle)."""

    shape: Shape
    width: float

    def bounds(self) -> Bounds:
        return Offset(self.shape, self.width).bounds()

    def distance(self, x: FloatArray, y: FloatArray) -> FloatArray:
        return np.abs(self.shape.distance(x, y)) - self.width


def polyline(points: Sequence[tuple[float, float]], radius: float) -> Union:
    """Round-capped strokes of half-width ``radius`` through consecutive ``points``."""
    return Union(tuple(Segment(*a, *b, radius) for a, b in itertools.pairwise(points)))


def heart(cx: float, cy: float, width: float) -> Union:
    """A heart ``width`` wide whose square body is centred at ``(cx, cy)``: a square on its corner and two discs."""
    side = width / (1.0 + 1.0 / math.sqrt(2.0))
    lobe = side / (2.0 * math.sqrt(2.0))
    return Union(
        (
            Box(cx, cy, side / 2.0, side / 2.0, radius=side * 0.08, angle=math.pi / 4.0),
            Circle(cx - lobe, cy - lobe, side / 2.0),
            Circle(cx + lobe, cy - lobe, side / 2.0),
        )
    )


def star(cx: float, cy: float, outer: float, inner: float, points: int, angle: float = 0.0) -> Polygon:
    """A star with ``points`` tips at radius ``outer`` and notches at ``inner``, slightly rounded."""
    vertices = []
    for i in range(points * 2):
        reach = outer if i % 2 == 0 else inner
        theta = angle - math.pi / 2.0 + math.pi * i / points
        vertices.append((cx + reach * math.cos(theta), cy + reach * math.sin(theta)))
    return Polygon(tuple(vertices), radius=outer * 0.04)


# --- Fills -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RadialShade:
    """A soft radial gradient in design space: ``light`` at ``(cx, cy)`` easing to ``dark`` at ``radius``."""

    cx: float
    cy: float
    radius: float
    light: Colour
    dark: Colour

    def colours(self, x: FloatArray, y: FloatArray) -> FloatArray:
        """Colour at each point, shape ``(..., 3)``."""
        t = np.clip(np.hypot(x - self.cx, y - self.cy) / self.radius, 0.0, 1.0)
        eased = (t * t * (3.0 - 2.0 * t))[..., None]
        light = np.asarray(self.light, dtype=np.float32)
        dark = np.asarray(self.dark, dtype=np.float32)
        return light + (dark - light) * eased


Fill = Colour | RadialShade


# --- Canvas ------------------------------------------------------------------------------------------------------


class Canvas:
    """A square drawing surface: premultiplied colour and transmittance (1 - alpha), both float32.

    ``view`` maps design coordinates to pixels; each :meth:`paint` may add a further transform applied first.
    """

    def __init__(self, size: int, view: Affine) -> None:
        self.size = size
        self.view = view
        self.premultiplied: FloatArray = np.zeros((size, size, 3), dtype=np.float32)
        self.transmittance: FloatArray = np.ones((size, size), dtype=np.float32)

    @property
    def alpha(self) -> FloatArray:
        """Coverage of everything painted so far: exactly 0 where nothing was, exactly 1 where opaque."""
        return 1.0 - self.transmittance

    def paint(self, shape: Shape, fill: Fill, transform: Affine | None = None, softness: float = 1.0) -> None:
        """Composite ``shape`` filled with ``fill`` over what is already painted.

        Args:
            shape: The region, in design coordinates.
            fill: A flat colour or a gradient (evaluated in the shape's design coordinates).
            transform: Applied to the shape before the canvas view (the pose of a character, say).
            softness: Width of the edge ramp in pixels; 1 is exact anti-aliasing, more gives a soft edge.
        """
        to_pixels = self.view if transform is None else transform.then(self.view)
        x0, y0, x1, y1 = to_pixels.map_bounds(shape.bounds())
        pad = softness + 1.0
        col0, col1 = max(0, math.floor(x0 - pad)), min(self.size, math.ceil(x1 + pad))
        row0, row1 = max(0, math.floor(y0 - pad)), min(self.size, math.ceil(y1 + pad))
        if col0 >= col1 or row0 >= row1:
            return
        x, y = _design_coordinates(to_pixels.inverse(), col0, col1, row0, row1)
        distance = shape.distance(x, y) * np.float32(to_pixels.scale / softness)
        coverage = np.broadcast_to(np.clip(0.5 - distance, 0.0, 1.0), (row1 - row0, col1 - col0))
        if not coverage.any():
            return
        keep = 1.0 - coverage
        colour = np.asarray(fill, dtype=np.float32) if isinstance(fill, tuple) else fill.colours(x, y)
        region = self.premultiplied[row0:row1, col0:col1]
        region *= keep[..., None]
        region += coverage[..., None] * colour
        self.transmittance[row0:row1, col0:col1] *= keep


def _design_coordinates(to_design: Affine, col0: int, col1: int, row0: int, row1: int) -> tuple[FloatArray, FloatArray]:
    """Design coordinates of the pixel centres of a window; 1-D broadcastable arrays when axis-aligned."""
    px = np.arange(col0, col1, dtype=np.float32) + np.float32(0.5)
    py = np.arange(row0, row1, dtype=np.float32)[:, None] + np.float32(0.5)
    if to_design.b == 0.0 and to_design.c == 0.0:
        return (to_design.a * px + to_design.e)[None, :], to_design.d * py + to_design.f
    return to_design.a * px + to_design.b * py + to_design.e, to_design.c * px + to_design.d * py + to_design.f
