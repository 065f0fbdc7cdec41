"""Painting what the character wears: scarf, hat, crown, glasses, bow, bowtie, headphones and flower."""

from __future__ import annotations

import math

from activities.generation.drawing import (
    Affine,
    Arc,
    Box,
    Circle,
    Colour,
    Intersection,
    Offset,
    Polygon,
    Segment,
    Stroke,
    luminance,
    mix,
)
from activities.generation.procedural.brush import Brush
from activities.generation.procedural.prompt import COLOUR_WORDS, WHITE, Accessory


class AccessoryPainting(Brush):
    """The accessory layer of the character painter."""

    def accessories(self) -> None:
        """Every accessory the character wears, in the order the prompt named them."""
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
        """The pose's placement, with the candidate's accessory tilt about (``x``, ``y``) before it."""
        return Affine.rotation(self.look.accessory_tilt, x, y).then(self.placement)

    def wear_scarf(self, colour: Colour) -> None:
        """A band around the body, curving like a ring seen from a little above, with one end hanging down."""
        tail = Affine.rotation(0.15 + self.look.accessory_tilt, 152.0, 182.0).then(self.placement)
        self.outlined(Box(152.0, 194.0, 7.5, 14.0, 3.0), colour, tail)
        for y in (201.0, 205.0):
            self.fill(Box(152.0, y, 7.5, 1.0), mix(colour, WHITE, 0.45), placement=tail)
        self.outlined(Intersection(Offset(self.body_shape, 3.0), Stroke(Circle(128.0, 58.0, 120.0), 7.5)), colour)

    def wear_bowtie(self, colour: Colour) -> None:
        """A bowtie under the face: two triangles and a knot."""
        place = self.tilted(128.0, 190.0)
        self.outlined(Polygon(((128.0, 190.0), (112.0, 181.0), (112.0, 199.0)), 2.5), colour, place)
        self.outlined(Polygon(((128.0, 190.0), (144.0, 181.0), (144.0, 199.0)), 2.5), colour, place)
        self.outlined(Circle(128.0, 190.0, 4.5), mix(colour, (0.0, 0.0, 0.0), 0.15), place)

    def wear_glasses(self, colour: Colour) -> None:
        """Round rims around both eyes, joined by a bridge."""
        face = self.face
        rim = self.thin(1.3)
        for x in (128.0 - face.eye_dx, 128.0 + face.eye_dx):
            self.fill(Stroke(Circle(x, face.eye_y, 15.0), rim), colour)
        self.fill(
            Segment(128.0 - face.eye_dx + 15.0, face.eye_y - 2.0, 128.0 + face.eye_dx - 15.0, face.eye_y - 2.0, rim),
            colour,
        )

    def wear_hat(self, colour: Colour) -> None:
        """A top hat with a band and a brim, on top of the head."""
        place = self.tilted(128.0, 95.0)
        band = (60.0, 58.0, 72.0) if luminance(colour) > 110 else COLOUR_WORDS["red"]
        self.outlined(Box(128.0, 74.0, 24.0, 21.0, 4.0), colour, place)
        self.fill(Box(128.0, 87.0, 24.0, 4.5), band, placement=place)
        self.outlined(Box(128.0, 95.0, 37.0, 4.5, 4.0), colour, place)

    def wear_crown(self, colour: Colour) -> None:
        """A three-pointed crown with a red and two blue jewels, on top of the head."""
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
        """A bow on the right of the head."""
        place = self.tilted(160.0, 100.0)
        self.outlined(Polygon(((160.0, 100.0), (142.0, 88.0), (144.0, 112.0)), 4.0), colour, place)
        self.outlined(Polygon(((160.0, 100.0), (178.0, 88.0), (176.0, 112.0)), 4.0), colour, place)
        self.outlined(Circle(160.0, 100.0, 5.0), mix(colour, WHITE, 0.25), place)

    def wear_flower(self, colour: Colour) -> None:
        """A five-petalled flower on the left of the head."""
        place = self.tilted(94.0, 102.0)
        for i in range(5):
            angle = 2.0 * math.pi * i / 5.0
            self.outlined(Circle(94.0 + 8.0 * math.cos(angle), 102.0 + 8.0 * math.sin(angle), 6.5), colour, place)
        self.fill(Circle(94.0, 102.0, 4.5), COLOUR_WORDS["yellow"], placement=place)

    def wear_headphones(self, colour: Colour) -> None:
        """A band over the head with a cup on each side."""
        self.outlined(Arc(128.0, 150.0, 74.0, -math.pi + 0.2, -0.2, 3.5), colour)
        for cup in (Box(60.0, 150.0, 9.0, 17.0, 5.0), Box(196.0, 150.0, 9.0, 17.0, 5.0)):
            self.outlined(cup, colour)
        self.pair(Box(68.0, 150.0, 2.0, 12.0, 2.0), mix(colour, (0.0, 0.0, 0.0), 0.3), outline=False)
