"""Painting the arms and the action's props: arms at rest or waving, and what the character holds or shows next to it.

The props are a held heart, a thumb up, tears, a sleep bubble and zzz, steam, sparkles and a question mark; those
floating next to the character move through their own loop with the phase ``t``. Some motions also draw the effects
of a cartoon around the character, as image-to-video models do: curved motion lines beside a waving hand, speed lines
and a sweat drop beside a shaking body, a burst of short strokes around a popping one. Effects are small blobs
separated from the character, which segmentation models tend to drop; the renderer keeps their alpha apart
(:attr:`.render.RenderedFrame.effect_alpha`) so matting tests can tell how many of them a pipeline kept.
"""

from __future__ import annotations

import math

from activities.generation.drawing import (
    Affine,
    Arc,
    Box,
    Circle,
    Ellipse,
    Polygon,
    Segment,
    Union,
    heart,
    polyline,
    star,
)
from activities.generation.procedural.brush import Brush, mirrored
from activities.generation.procedural.prompt import WHITE
from workflows.presets import Motion, Prop

_STILL = Affine()
"""Placement of props that stay where they are in the frame instead of moving with the character."""


class PropPainting(Brush):
    """The arm and prop layers of the character painter."""

    def raised_arm(self) -> None:
        """The waving arm, raised behind the body and swinging with the pose."""
        angle = -1.05 + self.pose.arm_swing
        shoulder_x, shoulder_y = 176.0, 150.0
        hand_x, hand_y = shoulder_x + 34.0 * math.cos(angle), shoulder_y + 34.0 * math.sin(angle)
        self.outlined(Segment(shoulder_x, shoulder_y, hand_x, hand_y, 11.0), self.body_fill)

    def arms(self) -> None:
        """The arms in front of the body: at rest, holding the heart or giving a thumb up."""
        prop = self.staging.prop
        rest = Ellipse(66.0, 176.0, 10.0, 14.0, 0.5)
        if prop is Prop.HEART:
            self.held_heart()
            self.pair(Ellipse(100.0, 192.0, 10.0, 12.0, 0.3), self.body_fill)
            return
        self.outlined(rest, self.body_fill)
        if prop is Prop.THUMB:
            self.thumbs_up()
        elif self.staging.motion is not Motion.WAVE:
            self.outlined(mirrored(rest), self.body_fill)

    def held_heart(self) -> None:
        """A big heart held in front of the body, growing and shrinking with the pose."""
        scale = self.pose.prop_scale
        place = Affine.scaling(scale, scale, 128.0, 190.0).then(self.placement)
        self.outlined(heart(128.0, 190.0, 52.0), (235.0, 60.0, 82.0), place)
        self.fill(Ellipse(114.0, 180.0, 6.0, 3.5, -0.7), WHITE, placement=place)

    def thumbs_up(self) -> None:
        """A hand with its thumb up, on the right."""
        self.outlined(Segment(190.0, 164.0, 190.0, 142.0, 6.5), self.body_fill)
        self.outlined(Box(196.0, 172.0, 14.0, 12.0, 7.0), self.body_fill)
        for y in (168.0, 175.0):
            self.fill(Segment(186.0, y, 205.0, y, self.thin(0.8)), self.outline)

    def motion_effects(self) -> None:
        """The effects the motion draws around the character, if any."""
        motion = self.staging.motion
        if motion is Motion.WAVE:
            self.wave_lines()
        elif motion is Motion.SHAKE:
            self.shake_lines()
            self.sweat_drop()
        elif motion is Motion.POP:
            self.burst()

    def wave_lines(self) -> None:
        """Two curved motion lines beyond the waving hand, trailing behind it as it swings."""
        angle = -1.05 + self.pose.arm_swing
        trailing = -math.copysign(0.2, math.cos(2.0 * math.pi * self.t))  # the swing's velocity is cos(2 pi t)
        centre = min(angle + trailing, -0.95)  # never out past the frame margin on the right
        for radius, span in ((56.0, 0.24), (62.0, 0.16)):
            self.fill(Arc(176.0, 150.0, radius, centre - span, centre + span, self.thin(1.3)), self.outline)

    def shake_lines(self) -> None:
        """Short vertical speed lines on both sides of the body, flickering with the jitter."""
        strength = abs(math.sin(6.0 * math.pi * self.t))
        if strength < 0.2:
            return
        for side in (-1.0, 1.0):
            for dx, dy, length in ((0.0, -14.0, 9.0), (4.0, 2.0, 13.0), (0.0, 18.0, 8.0)):
                x, y = 128.0 + side * (86.0 + dx), 150.0 + dy
                half = 0.5 * length * (0.6 + 0.4 * strength)
                self.fill(Segment(x, y - half, x, y + half, self.thin(1.2)), self.outline)

    def sweat_drop(self) -> None:
        """A sweat drop beside the head, top right, swelling and shrinking through the loop."""
        size = 0.75 + 0.25 * math.sin(2.0 * math.pi * self.t)
        x, y = 202.0, 96.0
        drop = Union(
            (
                Circle(x, y, 4.6 * size),
                Polygon(((x, y - 10.0 * size), (x - 4.2 * size, y - 1.6 * size), (x + 4.2 * size, y - 1.6 * size))),
            )
        )
        self.outlined(drop, (150.0, 205.0, 250.0), width=self.thin(1.1))

    def burst(self) -> None:
        """Short strokes radiating from above each side of the head while the character pops, fading as it settles."""
        strength = 4.0 * math.exp(-4.0 * self.t) * abs(math.sin(3.0 * math.pi * self.t))
        if strength < 0.25:
            return
        length = 7.0 * min(1.0, strength)
        for side in (-1.0, 1.0):
            cx, cy = 128.0 + side * 70.0, 66.0
            for theta in (-0.5, 0.0, 0.5):
                direction = math.pi / 2.0 - side * (math.pi / 4.0 + theta)
                ux, uy = math.cos(direction), -math.sin(direction)
                start, end = 3.0, 3.0 + length
                segment = Segment(cx + start * ux, cy + start * uy, cx + end * ux, cy + end * uy, self.thin(1.4))
                self.fill(segment, (255.0, 170.0, 40.0))

    def props(self) -> None:
        """The action's prop next to the character, if any (the heart and thumb are drawn with the arms)."""
        prop = self.staging.prop
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
        """A tear rolling down from each eye, half a loop apart."""
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
        """A bubble growing and shrinking beside the nose."""
        radius = 4.0 + 2.5 * (1.0 + math.sin(2.0 * math.pi * self.t))
        x, y = 134.0 + radius, self.face.eye_y + 10.0 + radius * 0.2
        self.outlined(Circle(x, y, radius), (242.0, 248.0, 255.0), width=self.thin(1.2))
        self.fill(Circle(x - radius * 0.35, y - radius * 0.35, radius * 0.22), WHITE)

    def zzz(self) -> None:
        """Three Z letters rising and growing, a third of a loop apart."""
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
        """A puff of steam rising from each side of the head, half a loop apart."""
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
        """Three four-pointed stars twinkling around the character."""
        for (x, y, size), phase in zip(
            ((50.0, 76.0, 11.0), (208.0, 70.0, 8.0), (214.0, 136.0, 7.0)), (0.0, 0.33, 0.66), strict=True
        ):
            twinkle = 0.55 + 0.45 * math.sin(math.pi * (self.t + phase)) ** 2
            shape = star(x, y, size * twinkle, size * twinkle * 0.32, 4)
            self.outlined(shape, (255.0, 214.0, 70.0), _STILL, width=self.thin(1.3))

    def question_mark(self) -> None:
        """A question mark bobbing and rocking above the right of the head."""
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
