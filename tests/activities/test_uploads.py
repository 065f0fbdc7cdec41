"""Character uploads: every refusal, and the cleaning (cut-out, keying, white, crop, square with margin) on pictures
made in code in every format and colour mode an upload may come in."""

from __future__ import annotations

import io
import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile, ImageFilter
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.testing import ActivityEnvironment

from activities.production import ProductionActivities
from activities.uploads import FORMATS, UploadError, UploadInfo, check_upload, clean_character
from core.artifacts import FileArtifactStore
from workflows.calls import failure_reason
from workflows.contract import MAX_UPLOAD_BYTES, UPLOAD_MEDIA_TYPES, FailureType, PrepareUploadInput

ORANGE = (230, 120, 40)
GREEN = (40, 160, 70)
SIZE = 256


def encoded(image: Image.Image, format: str, **options: object) -> bytes:
    """``image`` saved in ``format`` with Pillow's ``options``."""
    buffer = io.BytesIO()
    image.save(buffer, format=format, **options)
    return buffer.getvalue()


def coverage(width: int = 300, height: int = 200) -> np.ndarray:
    """HxW float: an anti-aliased disc of radius 60 centred at (120, 100)."""
    yy, xx = np.indices((height, width))
    return np.clip(60.5 - np.hypot(xx - 120, yy - 100), 0, 1)


def disc() -> np.ndarray:
    """HxWx3 uint8: the orange disc on white."""
    cover = coverage()[..., None]
    return np.rint(cover * ORANGE + (1 - cover) * 255).astype(np.uint8)


def cut_out(hidden: tuple[int, int, int] = GREEN) -> np.ndarray:
    """HxWx4 uint8 straight RGBA: the orange disc, its coverage as alpha, ``hidden`` under the transparent pixels."""
    cover = coverage()
    rgb = np.where(cover[..., None] > 0, np.array(ORANGE), np.array(hidden))
    return np.dstack([rgb, np.rint(255 * cover)]).astype(np.uint8)


def cleaned(data: bytes, size: int = SIZE) -> np.ndarray:
    """The cleaned upload's pixels (int), checked to be a square RGB PNG of ``size``."""
    image = Image.open(io.BytesIO(clean_character(data, size)))
    assert (image.format, image.mode, image.size) == ("PNG", "RGB", (size, size))
    return np.asarray(image).astype(int)


def content_box(pixels: np.ndarray, threshold: int = 250) -> tuple[int, int, int, int]:
    """(top, bottom, left, right), inclusive, of the pixels that are not white."""
    ink = pixels.min(axis=-1) < threshold
    rows, columns = np.nonzero(ink.any(axis=1))[0], np.nonzero(ink.any(axis=0))[0]
    return int(rows[0]), int(rows[-1]), int(columns[0]), int(columns[-1])


def off_blend(pixels: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    """Each pixel's RGB distance from the blends of white and ``colour``, the line run on past ``colour`` by half
    (Lanczos overshoots at an edge, along that line)."""
    white = np.array([255.0, 255.0, 255.0])
    direction = np.array(colour, float) - white
    t = np.clip(((pixels - white) @ direction) / (direction @ direction), 0, 1.5)
    return np.linalg.norm(pixels - (white + t[..., None] * direction), axis=-1)


def png_header(width: int, height: int, idat: bytes | None = None) -> bytes:
    """A PNG of its signature, an 8-bit RGB IHDR, ``idat`` as its IDAT if given, and IEND: what a decompression bomb's
    header says, without (all) its pixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = b"" if idat is None else chunk(b"IDAT", idat)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + pixels + chunk(b"IEND", b"")


def small_bomb() -> bytes:
    """103 bytes declaring 6320x6320 px (under ``MAX_UPLOAD_PIXELS``): the start of a deflated stream of black
    scanlines, which Pillow would allocate the whole picture for before finding it cut short."""
    stream = zlib.compressobj(9)
    deflated = stream.compress(bytes(1_000_000)) + stream.flush(zlib.Z_SYNC_FLUSH)
    data = png_header(6320, 6320, deflated[:46])
    assert len(data) == 103
    return data


def noisy_jpeg() -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    return encoded(Image.fromarray(pixels), "JPEG", quality=90)


# --- Refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upload", "message"),
    [
        (lambda: b"", "the upload is 0 bytes"),
        (
            lambda: png_header(64, 64).ljust(MAX_UPLOAD_BYTES + 1, b"\0"),
            "the upload is 20,971,521 bytes; at most 20,971,520 are accepted",
        ),
        (lambda: b"a character: a round orange cat with a blue scarf\n", "the upload is not a picture in an accepted"),
        (
            lambda: b'<svg xmlns="http://www.w3.org/2000/svg" width="256" height="256"><circle r="9"/></svg>',
            "the upload is not a picture in an accepted format (PNG, JPEG, WebP, GIF, BMP or TIFF)",
        ),
        (lambda: encoded(Image.new("RGB", (128, 128)), "ICO"), "the upload is not a picture in an accepted format"),
        (lambda: encoded(Image.new("RGB", (128, 128)), "PPM"), "the upload is not a picture in an accepted format"),
        (lambda: png_header(30_000, 30_000), "the picture is too large to decode (a decompression bomb)"),
        (
            lambda: png_header(7_000, 7_000),
            "the picture is 7000x7000 px (49,000,000 pixels); at most 40,000,000 pixels are accepted",
        ),
        (
            small_bomb,
            "the picture declares 6320x6320 px but is only 103 bytes: it is truncated or a decompression bomb",
        ),
        (lambda: encoded(Image.new("RGB", (40, 30)), "PNG"), "the picture is 40x30 px; a character picture needs at"),
        (lambda: encoded(Image.new("RGB", (300, 63)), "PNG"), "the picture is 300x63 px"),
        (lambda: noisy_jpeg()[:6000], "the picture is truncated or corrupt: image file is truncated"),
        (lambda: encoded(Image.fromarray(disc()), "PNG")[:-200], "the picture is truncated or corrupt"),
    ],
    ids=[
        "empty",
        "too-many-bytes",
        "text",
        "svg",
        "ico",
        "ppm",
        "bomb-header",
        "49-megapixels",
        "declared-size-bomb",
        "tiny",
        "too-low",
        "truncated-jpeg",
        "truncated-png",
    ],
)
def test_an_upload_is_refused(upload: Callable[[], bytes], message: str) -> None:
    data = upload()
    with pytest.raises(UploadError, match=re.escape(message)):
        check_upload(data)
    with pytest.raises(UploadError, match=re.escape(message)):
        clean_character(data, SIZE)


@pytest.mark.parametrize(
    ("upload", "message"),
    [
        (lambda: b"%PDF-1.4 not a picture", "InvalidUpload: the upload is not a picture in an accepted format (PNG,"),
        (lambda: noisy_jpeg()[:6000], "InvalidUpload: the picture is truncated or corrupt: image file is truncated"),
        (lambda: png_header(30_000, 30_000), "InvalidUpload: the picture is too large to decode (a decompression"),
    ],
    ids=["not-a-picture", "truncated", "bomb"],
)
async def test_the_activity_reports_a_bad_upload_as_invalid_upload_with_its_own_message(
    tmp_path: Path, upload: Callable[[], bytes], message: str
) -> None:
    """Not retryable; and what the set shows people (the failure's innermost cause) is the refusal, not Pillow's
    error underneath it."""
    store = FileArtifactStore(tmp_path)
    request = PrepareUploadInput(set_id="s", upload=store.put("uploads/u", upload(), "image/png"), size=SIZE)

    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(ProductionActivities(store).prepare_upload, request)

    assert refused.value.type == FailureType.INVALID_UPLOAD.value and refused.value.non_retryable
    converter = DataConverter.default
    failure = Failure()
    converter.failure_converter.to_failure(refused.value, converter.payload_converter, failure)
    back = converter.failure_converter.from_failure(failure, converter.payload_converter)
    assert isinstance(back, FailureError)
    shown = failure_reason(back)
    assert shown.startswith(message)


@pytest.mark.parametrize("mode", ["1", "P", "L", "LA", "I;16", "RGB", "RGBA"])
def test_a_png_compressed_as_far_as_deflate_goes_is_not_taken_for_a_bomb(mode: str) -> None:
    """One colour at zlib's best, a few percent over deflate's bound: accepted, whatever its bit depth and colour
    type."""
    data = encoded(Image.new(mode, (2048, 2048)), "PNG", compress_level=9)
    assert check_upload(data) == UploadInfo("image/png", 2048, 2048, 1)


def test_a_blank_picture_has_no_character() -> None:
    with pytest.raises(UploadError, match="the picture is blank"):
        clean_character(encoded(Image.new("RGB", (200, 200), GREEN), "PNG"), SIZE)


def test_pillow_must_not_load_truncated_images(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(RuntimeError, match="LOAD_TRUNCATED_IMAGES"):
        check_upload(encoded(Image.fromarray(disc()), "PNG"))


def test_the_formats_are_the_contracts_media_types() -> None:
    assert set(FORMATS.values()) == UPLOAD_MEDIA_TYPES


# --- What an upload is -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("format", "media_type"),
    [
        ("PNG", "image/png"),
        ("JPEG", "image/jpeg"),
        ("WEBP", "image/webp"),
        ("GIF", "image/gif"),
        ("BMP", "image/bmp"),
        ("TIFF", "image/tiff"),
    ],
)
def test_every_accepted_format_is_read(format: str, media_type: str) -> None:
    data = encoded(Image.fromarray(disc()), format)
    assert check_upload(data) == UploadInfo(media_type, 300, 200, 1)
    pixels = cleaned(data)
    assert np.abs(pixels[SIZE // 2, SIZE // 2] - ORANGE).max() < 12


def test_an_animation_is_read_by_its_first_frame() -> None:
    first = Image.fromarray(cut_out())
    second = Image.new("RGBA", (300, 200), (*GREEN, 255))
    for format in ("GIF", "WEBP"):
        data = encoded(first, format, save_all=True, append_images=[second], duration=100, loop=0)
        assert check_upload(data).frames == 2
        pixels = cleaned(data)
        assert np.abs(pixels[SIZE // 2, SIZE // 2] - ORANGE).max() < 16
        assert pixels[5, 5].min() > 250  # the first frame's transparent corner, not the second's green


def test_a_phone_cameras_multi_picture_jpeg_is_a_jpeg() -> None:
    picture = Image.fromarray(disc())
    data = encoded(picture, "MPO", save_all=True, append_images=[picture.rotate(90)])
    assert Image.open(io.BytesIO(data)).format == "MPO"
    assert check_upload(data) == UploadInfo("image/jpeg", 300, 200, 2)


# --- Cleaning ----------------------------------------------------------------------------------------------------


def test_an_rgba_upload_is_cut_out_by_its_alpha() -> None:
    # Under the transparent pixels lies green the alpha hides: none of it may show.
    pixels = cleaned(encoded(Image.fromarray(cut_out()), "PNG"))
    assert off_blend(pixels, ORANGE).max() < 8
    assert pixels[0, 0].tolist() == [255, 255, 255]


def photo(*, outline: int = 0, blur: float = 1.0) -> bytes:
    """A photo-like JPEG: the orange disc (radius 120, with an ``outline`` px near-black outline) on a green backdrop
    with a light gradient and sensor noise, softened by a Gaussian ``blur``."""
    rng = np.random.default_rng(1)
    yy, xx = np.indices((400, 600))
    gradient = np.stack([0.02 * xx, 0.02 * yy, 0 * xx], axis=-1)
    backdrop = np.array(GREEN, float) + gradient + rng.normal(0, 4, (400, 600, 3))
    radius = np.hypot(xx - 240, yy - 200)
    paint = np.where((outline > 0) & (radius > 120 - outline)[..., None], 20.0, np.array(ORANGE, float))
    cover = np.clip(120.5 - radius, 0, 1)[..., None]
    pixels = np.clip(backdrop + cover * (paint - backdrop), 0, 255).astype(np.uint8)
    return encoded(Image.fromarray(pixels).filter(ImageFilter.GaussianBlur(blur)), "JPEG", quality=90)


def test_a_photo_on_a_coloured_background_is_keyed_to_white() -> None:
    pixels = cleaned(photo())
    white = pixels.min(axis=-1) == 255
    assert white[:10].all() and white[-10:].all() and white[:, :10].all() and white[:, -10:].all()
    # The pixels are white, the disc's orange or blends of the two; no green is left at the edge (a pixel half green
    # and half orange, as a plain key leaves it, is greener than it is red).
    assert not (pixels[..., 1] > pixels[..., 0]).any()
    assert np.percentile(off_blend(pixels, ORANGE), 99) < 20


def test_keying_keeps_a_thin_dark_outline() -> None:
    # A 2 px outline, too thin to count as the character's colour nearby: its pixels lie far off the line from the
    # green to the orange, so they are the character's own colour, not a mix of the two to whiten.
    pixels = cleaned(photo(outline=2, blur=0.0))
    row = pixels[SIZE // 2].sum(axis=-1)
    inked = np.nonzero(row < 255 * 3 - 30)[0]
    assert row[inked[0] : inked[0] + 4].min() < 150
    assert row[inked[-1] - 3 : inked[-1] + 1].min() < 150


def test_the_character_is_cropped_and_centred_on_a_square_with_a_five_percent_margin() -> None:
    # A wide character (an orange bar 200 x 50) off-centre on white.
    pixels = np.full((300, 400, 3), 255, np.uint8)
    pixels[40:90, 30:230] = ORANGE
    top, bottom, left, right = content_box(cleaned(encoded(Image.fromarray(pixels), "PNG")))
    margin = round(0.05 * SIZE)
    assert abs(left - margin) <= 1 and abs(SIZE - 1 - right - margin) <= 1
    height = bottom - top + 1
    assert abs(height - 0.9 * SIZE / 4) <= 2
    assert abs(top - (SIZE - height) / 2) <= 1


def test_exif_orientation_is_applied() -> None:
    # Stored sideways with EXIF orientation 6 (rotate 90 degrees clockwise to view): red on the left as stored is on
    # top as viewed.
    stored = np.full((200, 300, 3), 255, np.uint8)
    stored[60:140, 20:120] = (220, 30, 30)
    stored[60:140, 180:280] = (30, 30, 220)
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encoded(Image.fromarray(stored), "JPEG", exif=exif, quality=95)
    assert check_upload(data) == UploadInfo("image/jpeg", 200, 300, 1)
    pixels = cleaned(data)
    red = np.nonzero((pixels[..., 0] > 180) & (pixels[..., 2] < 80))[0]
    blue = np.nonzero((pixels[..., 2] > 180) & (pixels[..., 0] < 80))[0]
    assert red.max() < blue.min()


def test_palette_cmyk_and_16_bit_pictures_are_read() -> None:
    picture = Image.fromarray(disc())
    cmyk = cleaned(encoded(picture.convert("CMYK"), "JPEG", quality=95))
    assert np.abs(cmyk[SIZE // 2, SIZE // 2] - ORANGE).max() < 16
    palette = cleaned(encoded(picture.convert("P", palette=Image.Palette.ADAPTIVE, colors=16), "PNG"))
    assert np.abs(palette[SIZE // 2, SIZE // 2] - ORANGE).max() < 16
    # 16-bit grey: a mid-grey disc (32896 = 128 * 257) on white, scaled to 8 bits rather than clipped to white.
    grey16 = np.where(disc()[..., 1] < 200, 32896, 65535).astype(np.uint16)
    assert Image.fromarray(grey16).mode == "I;16"
    deep = cleaned(encoded(Image.fromarray(grey16), "PNG"))
    assert deep[SIZE // 2, SIZE // 2].tolist() == [128, 128, 128]


def test_a_picture_without_a_plain_background_is_kept_whole() -> None:
    pixels = cleaned(noisy_jpeg())
    margin = round(0.05 * SIZE)
    assert content_box(pixels) == (margin, SIZE - 1 - margin, margin, SIZE - 1 - margin)
