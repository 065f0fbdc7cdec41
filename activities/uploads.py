"""An uploaded character picture: check it is a usable picture before anything decodes it in full, and clean it as
the original product did (cut out, laid on pure white, cropped to the character and padded square).

Pure: bytes in, PNG out; the ``prepare_upload`` activity reads and stores the artifacts. Checks run in order of cost:
the byte count, the format and the size from the header (a decompression bomb is refused before any pixel is
decoded), the declared size against the file's (a PNG's pixels cannot be compressed beyond deflate's bound), then
decoding the first frame, which a truncated or corrupt file fails (Pillow's ``ImageFile.LOAD_TRUNCATED_IMAGES`` must
stay off, and is checked).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError
from scipy import ndimage

from workflows.contract import MAX_UPLOAD_BYTES, MAX_UPLOAD_PIXELS

FORMATS: dict[str, str] = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "WEBP": "image/webp",
    "GIF": "image/gif",
    "BMP": "image/bmp",
    "TIFF": "image/tiff",
}
"""The Pillow readers an upload is opened with, and the media type each reads: ``UPLOAD_MEDIA_TYPES``."""
MEDIA_TYPES = {**FORMATS, "MPO": "image/jpeg"}
"""Media types by the format Pillow reports: the JPEG reader reports a JPEG with more pictures after the first (as
many phone cameras write them) as MPO."""
ACCEPTED = "PNG, JPEG, WebP, GIF, BMP or TIFF"
MIN_EDGE = 64
"""The shortest side an upload may have, in pixels."""
DEFLATE_RATIO = 1032
"""The most deflate can compress: a 258-byte match coded in 2 bits. A PNG's compressed pixels are at least its raw
scanlines' size over this, so a smaller file cannot hold the picture its header declares."""
PNG_BITS = {
    "1": 1,
    "L;2": 2,
    "L;4": 4,
    "L": 8,
    "I;16B": 16,
    "RGB": 24,
    "RGB;16B": 48,
    "P;1": 1,
    "P;2": 2,
    "P;4": 4,
    "P": 8,
    "LA": 16,
    "LA;16B": 32,
    "RGBA": 32,
    "RGBA;16B": 64,
}
"""Bits per pixel of a PNG's scanlines (its bit depth times its colour type's samples), by the raw mode Pillow reads
them in (``PngImagePlugin._MODES``)."""
SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
"""Single-channel modes holding 16-bit samples, which Pillow's conversions would clip rather than scale."""
WORK_EDGE = 2048
"""Pictures are cleaned at most this long on their longer side (or twice the output edge, if that is more)."""
MARGIN = 0.05
"""White margin on each side of the cleaned picture, as a fraction of its edge."""
REAL_ALPHA = 0.01
"""An alpha channel is used as the cut-out when at least this fraction of the pixels is at most half opaque."""
BORDER = 0.02
"""Width of the border strip the background colour is estimated from, as a fraction of the shorter side."""
PLAIN_SPREAD = 60.0
"""A border whose colours lie further than this (RGB distance, 95th percentile) from their median is no plain
background: the picture is kept whole rather than keyed."""
KEY_GAP, KEY_SOFT = 12.0, 40.0
"""A pixel is background up to ``KEY_GAP`` beyond the border's own spread of colours from the background colour and
character from ``KEY_SOFT`` further on (RGB distance, 0-255 per channel); opacity rises linearly between."""
CORE_DEPTH = 2
"""Pixels this deep inside the clearly-character ones are its pure colours (the outer ones may be mixed)."""
NEARBY_SIGMA = 3.0
"""Radius (Gaussian sigma, px) over which the character's pure colours are averaged for the pixels around them."""
NEARBY_WEIGHT = 0.05
"""The least Gaussian weight of character pixels around a pixel for their colour to count as its own."""
MIX_RESIDUAL = 0.5
"""A pixel is a mix of the background and the character's colour nearby when it lies this close to the line between
them, as a fraction of its distance from the background; a pixel further off (an outline) has a colour of its own."""
CONTENT = 0.5
"""The opacity from which a pixel counts as the character when cropping to it."""
WHITE = 255.0


class UploadError(Exception):
    """The upload is not a usable picture (empty, too large, not an accepted format, a decompression bomb,
    truncated, tiny, blank): the activity reports ``FailureType.INVALID_UPLOAD``. The message says what is wrong."""


@dataclass(frozen=True)
class UploadInfo:
    """What an accepted upload is.

    Attributes:
        media_type: Its media type, one of ``UPLOAD_MEDIA_TYPES``.
        width: Width in pixels, upright (after its EXIF orientation).
        height: Height in pixels, upright.
        frames: Frames it holds (more than 1 for an animation; only the first is used).
    """

    media_type: str
    width: int
    height: int
    frames: int


def check_upload(data: bytes) -> UploadInfo:
    """Check an upload is a picture a character can be made from, decoding its first frame.

    Raises:
        UploadError: The upload is 0 bytes or more than ``MAX_UPLOAD_BYTES``, not a picture in one of the accepted
            formats, more than ``MAX_UPLOAD_PIXELS`` pixels (or what Pillow takes for a decompression bomb), under
            :data:`MIN_EDGE` px on a side, or cannot be decoded (truncated or corrupt).
        RuntimeError: Pillow's ``ImageFile.LOAD_TRUNCATED_IMAGES`` is set in this process (a worker's mistake: a
            truncated upload would decode padded with grey).
    """
    return _decode(data)[0]


def clean_character(data: bytes, size: int) -> bytes:
    """The upload as the character picture production starts from: cut out, on pure white, square, as an RGB PNG.

    The first frame, upright, is cut out with its own alpha channel when it has a real one (see :data:`REAL_ALPHA`);
    otherwise its background colour (the median of its border) is keyed out softly, the background's share taken out
    of the edge pixels' colour before they are laid on white. A picture without a plain border is kept whole. The
    result is cropped to the character's bounding box, resized to fit ``size`` less a :data:`MARGIN` on each side,
    and centred on a white square of ``size``.

    Args:
        data: The uploaded file.
        size: Edge of the square output, in pixels.

    Raises:
        UploadError: As :func:`check_upload`; or the picture is blank (nothing stands out from its background).
        RuntimeError: As :func:`check_upload`.
        ValueError: ``size`` is not positive.
    """
    if size < 1:
        raise ValueError(f"size must be positive, got {size}")
    image = _rgba(_decode(data)[1])
    longest = max(WORK_EDGE, 2 * size)
    if max(image.size) > longest:
        image = _fit(image, longest)
    pixels = np.asarray(image, np.float32)
    colour, alpha = pixels[..., :3], pixels[..., 3] / 255
    if np.mean(alpha <= 0.5) >= REAL_ALPHA:
        white = alpha[..., None] * colour + (1 - alpha[..., None]) * WHITE
    else:
        white, alpha = _key(colour)
    rows, columns = np.nonzero(alpha >= CONTENT)
    if not rows.size:
        raise UploadError("the picture is blank: nothing stands out from its background")
    crop = white[rows.min() : rows.max() + 1, columns.min() : columns.max() + 1]
    character = _fit(Image.fromarray(np.rint(np.clip(crop, 0, 255)).astype(np.uint8)), round(size * (1 - 2 * MARGIN)))
    canvas = Image.new("RGB", (size, size), (255, 255, 255))
    canvas.paste(character, ((size - character.width) // 2, (size - character.height) // 2))
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG")
    return buffer.getvalue()


def _decode(data: bytes) -> tuple[UploadInfo, Image.Image]:
    """The checked upload's facts and its first frame, decoded and upright."""
    if not data:
        raise UploadError("the upload is 0 bytes")
    if len(data) > MAX_UPLOAD_BYTES:
        raise UploadError(f"the upload is {len(data):,} bytes; at most {MAX_UPLOAD_BYTES:,} are accepted")
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is set: truncated uploads would pass as pictures")
    try:
        image = Image.open(io.BytesIO(data), formats=list(FORMATS))
    except Image.DecompressionBombError as exc:
        raise UploadError(f"the picture is too large to decode (a decompression bomb): {exc}") from exc
    except UnidentifiedImageError as exc:
        raise UploadError(f"the upload is not a picture in an accepted format ({ACCEPTED})") from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise UploadError(f"the picture's header cannot be read: {exc}") from exc
    width, height = image.size
    # Anything Pillow would warn about as a possible decompression bomb is refused as well.
    limit = min(MAX_UPLOAD_PIXELS, Image.MAX_IMAGE_PIXELS or MAX_UPLOAD_PIXELS)
    if width * height > limit:
        raise UploadError(
            f"the picture is {width}x{height} px ({width * height:,} pixels); at most {limit:,} pixels are accepted"
        )
    if min(width, height) < MIN_EDGE:
        raise UploadError(f"the picture is {width}x{height} px; a character picture needs at least {MIN_EDGE} px")
    if len(data) < _least_bytes(image):
        raise UploadError(
            f"the picture declares {width}x{height} px but is only {len(data):,} bytes: it is truncated or a "
            "decompression bomb"
        )
    media_type = MEDIA_TYPES[image.format or ""]
    try:
        frames = getattr(image, "n_frames", 1)
        image.load()
        upright = ImageOps.exif_transpose(image)
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as exc:
        raise UploadError(f"the picture is truncated or corrupt: {exc}") from exc
    return UploadInfo(media_type, upright.width, upright.height, frames), upright


def _least_bytes(image: ImageFile.ImageFile) -> int:
    """The fewest bytes a file can hold ``image``'s declared pixels in: for a PNG, its pixel bits (without the
    scanlines' filter bytes and padding, which only add) over :data:`DEFLATE_RATIO`; a raw mode not in
    :data:`PNG_BITS` counts 1 bit a pixel, the least any takes.

    The other formats have no such hard bound, so only ``MAX_UPLOAD_PIXELS`` limits what they make the decoder
    allocate: a progressive JPEG codes a run of up to 32767 empty blocks in a few bits, a GIF's first frame may cover
    a corner of its screen, a BMP's RLE skips pixels, a WebP's or TIFF's coding is up to its writer.
    """
    if image.format != "PNG":
        return 0
    bits = PNG_BITS.get(str(image.tile[0].args), 1) if image.tile else 1
    return image.width * image.height * bits // (8 * DEFLATE_RATIO)


def _rgba(image: Image.Image) -> Image.Image:
    """``image`` as 8-bit RGBA: 16-bit samples scaled (not clipped), palettes, CMYK and the rest through Pillow."""
    if image.mode in SIXTEEN_BIT_MODES:
        grey = np.clip(np.rint(np.asarray(image, np.float32) / 257), 0, 255).astype(np.uint8)
        return Image.fromarray(grey).convert("RGBA")
    try:
        return image.convert("RGBA")
    except ValueError as exc:
        raise UploadError(f"the picture's colour mode {image.mode} is not supported") from exc


def _fit(image: Image.Image, edge: int) -> Image.Image:
    """``image`` resized with Lanczos to be ``edge`` px on its longer side, keeping its aspect (at least 1 px)."""
    scale = edge / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)


def _key(colour: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the picture on white, its opacity) with its background colour keyed out.

    The background colour ``B`` and its spread are read from the border (:func:`_background`). A pixel up to
    :data:`KEY_GAP` beyond the spread from ``B`` is background (opacity 0). One at least :data:`KEY_SOFT` further and
    :data:`CORE_DEPTH` px inside such pixels is the character's pure colour (opacity 1). A pixel between is a mix of
    ``B`` and ``F``, the pure colours around it (their Gaussian average, :data:`NEARBY_SIGMA`), when it lies near the
    line from ``B`` to ``F`` (:data:`MIX_RESIDUAL`): its opacity is its share of the way from ``B`` to ``F``. Any
    other pixel (one with a colour of its own, such as a thin outline, or no pure colour nearby) takes an opacity
    rising linearly over ``KEY_SOFT``. The background's share of each pixel's colour is then replaced by white. A
    border too varied for a plain background (:data:`PLAIN_SPREAD`) leaves the picture whole and opaque.

    Args:
        colour: HxWx3 float32 RGB, 0-255.
    """
    background, spread = _background(colour)
    if spread > PLAIN_SPREAD:
        return colour, np.ones(colour.shape[:2], np.float32)
    offset = colour - background
    distance = np.linalg.norm(offset, axis=-1)
    ramp = np.clip((distance - spread - KEY_GAP) / KEY_SOFT, 0, 1)
    core = ndimage.binary_erosion(ramp >= 1, iterations=CORE_DEPTH)
    weight = ndimage.gaussian_filter(core.astype(np.float32), NEARBY_SIGMA)
    summed = ndimage.gaussian_filter(offset * core[..., None], (NEARBY_SIGMA, NEARBY_SIGMA, 0))
    towards = summed / np.maximum(weight, NEARBY_WEIGHT)[..., None]
    share = np.sum(offset * towards, axis=-1) / np.maximum(np.sum(towards**2, axis=-1), 1.0)
    residual = np.linalg.norm(offset - share[..., None] * towards, axis=-1)
    mixed = (weight >= NEARBY_WEIGHT) & (residual <= MIX_RESIDUAL * distance)
    alpha = np.where(core, 1.0, np.where(ramp > 0, np.where(mixed, np.clip(share, 0, 1), ramp), 0.0))
    alpha = alpha.astype(np.float32)[..., None]
    foreground = np.clip(background + offset / np.maximum(alpha, 1e-3), 0, 255)
    return alpha * foreground + (1 - alpha) * WHITE, alpha[..., 0]


def _background(colour: np.ndarray) -> tuple[np.ndarray, float]:
    """(the background colour, the spread of the border's colours around it) of HxWx3 RGB ``colour``: the median
    colour of a :data:`BORDER` strip, and the 95th percentile RGB distance of the strip's pixels from it."""
    height, width = colour.shape[:2]
    strip = max(1, round(BORDER * min(height, width)))
    border = np.concatenate(
        [
            colour[:strip].reshape(-1, 3),
            colour[-strip:].reshape(-1, 3),
            colour[strip:-strip, :strip].reshape(-1, 3),
            colour[strip:-strip, -strip:].reshape(-1, 3),
        ]
    )
    background = np.median(border, axis=0)
    return background, float(np.percentile(np.linalg.norm(border - background, axis=1), 95))
