"""Real emoji art with true alpha, from npm packages, for the matting benchmark.

Four pinned packages give the ground truth:

* ``openmoji`` 17.0.0 (CC BY-SA 4.0): flat line art with dark outlines. The package ships SVGs only, so each one is
  rendered with the system's librsvg (through ctypes: no extra Python package) at 618x618, the size of OpenMoji's
  own PNG exports, then resized to 256x256 in premultiplied space and stored as straight 8-bit RGBA.
* ``@lobehub/fluent-emoji-anim-2``, ``-3`` and ``-4`` 1.0.0 (MIT, each; Microsoft's Fluent Emoji, animated, split
  over three packages with no file in common): shaded 3D-style art, animated WebP at 256x256 with up to 73 frames.

Tarballs come from the npm client (``npm pack``) and are checked against the pinned sha512 before anything is
extracted. Everything lands in ``benchmarks/.cache/`` (git-ignored): the small openmoji tarball is kept, the large
Fluent ones are deleted once their sampled files are out (their listings and frame counts are kept). The samples are
fixed by a seed, so every run and machine scores the same frames.

The procedural generator's clips (:func:`procedural_clips`) add drawings whose alpha is exactly their coverage, as
:func:`activities.generation.procedural.render_clip` returns them.

Every dataset is split once, by clip (an animation, a procedural clip, a still: never by frame), into two parts
(:data:`PARTS`): ``tune``, the clips the benchmark scored before the split, which the classical pipeline's constants
were tuned on and which tuning may use from now on, and ``held-out``, clips that were never scored before the split
and that no tuning may look at. The split follows each dataset's seeded order, so it does not move with the sample
sizes asked for: the tune part is the start of the order (:data:`TUNE_FLUENT_PER_PACKAGE`, :data:`TUNE_PROCEDURAL`,
the :data:`TUNE_STILLS` of the original sample), the held-out part what follows, less the emoji of the tests' own
frames (:data:`TEST_FIXTURE_EMOJI`), which tests were written against.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import io
import json
import re
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image

from activities.generation.procedural import render_clip, start_frame_images
from activities.generation.procedural.clip import RenderedClip
from workflows.contract import ActionSpec, ArtifactRef, CharacterRef, GenerateClipInput, GenerateStartFrameInput
from workflows.presets import PRESETS

CACHE = Path(__file__).resolve().parent / ".cache"
SIZE = 256
"""Side of every benchmark frame."""

RENDER_SIZE = 618
"""OpenMoji SVGs are rendered at the size of the project's own PNG exports, then resized to :data:`SIZE`."""

SEED = 20250101

TUNE, HELD_OUT = "tune", "held-out"
PARTS = (TUNE, HELD_OUT)
"""The two parts of every dataset (see the module docstring)."""

TUNE_FLUENT_PER_PACKAGE = 70
"""The tune part of the Fluent animations: the first 70 emoji of each package's seeded order, the 210 animations the
benchmark scored before the split."""

TUNE_PROCEDURAL = 16
"""The tune part of the procedural clips: the first 16 of :func:`procedural_clips`."""

TUNE_STILLS = 40
"""The tune part of the OpenMoji stills: the original seeded sample of 40."""

TEST_FIXTURE_EMOJI = frozenset(
    {
        "1f578-fe0f",
        "1f607",
        "1f481-200d-2640-fe0f",
        "1f604",
        "1f575-200d-2642-fe0f",
        "1f6b4-200d-2640-fe0f",
    }
)
"""The Fluent emoji (skin tones folded, :data:`SKIN_TONE`) whose frames the classical engine's tests use
(``tests/gpu_activity_worker/data``): never in the held-out part."""


@dataclass(frozen=True)
class NpmPackage:
    """A pinned npm package and the sha512 integrity of its tarball (npm's ``dist.integrity``)."""

    name: str
    version: str
    integrity: str
    keep_tarball: bool

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def folder(self) -> Path:
        """Cache folder of the files extracted from this package."""
        return CACHE / f"{self.name.rpartition('/')[2]}-{self.version}"


OPENMOJI = NpmPackage(
    "openmoji",
    "17.0.0",
    "sha512-EBnYrNGdcdw+OSXmENeNE1yBNRu6tOraTmoOyUbJkTmvT/+XETp8RZLSJFzD3lrPc5N9CzsyPnRTk0Vp4UaI9w==",
    keep_tarball=True,
)
FLUENT_ANIM = NpmPackage(
    "@lobehub/fluent-emoji-anim-2",
    "1.0.0",
    "sha512-S6yzf0RZXrQbXdxCWuHA9BAoLdBRk2flX+ne4TPGEH/qApwisCAKHoAAGjKSlTY3OVeZ9b7t/NEbmpjawnQYJA==",
    keep_tarball=False,
)
FLUENT_ANIM_3 = NpmPackage(
    "@lobehub/fluent-emoji-anim-3",
    "1.0.0",
    "sha512-UzRSUDMjdfdt9vER5bhjHkPqgc3EEgfGtYs6ndvizOTvQOxYQ57ow2RTkWSDZxwW30X4EYBi2eWTS7CXDDoFsg==",
    keep_tarball=False,
)
FLUENT_ANIM_4 = NpmPackage(
    "@lobehub/fluent-emoji-anim-4",
    "1.0.0",
    "sha512-IIkl5ztSd1HrzvIDt/uGsFoC1WODXRdYq5uROrnkyqi9DbToEcJ1nlY86PnoUXeFS9nBCnHfiYk3ouSEGThFmA==",
    keep_tarball=False,
)
FLUENT_ANIMS = (FLUENT_ANIM, FLUENT_ANIM_3, FLUENT_ANIM_4)
"""The three Fluent animated packages: one emoji set split in three, with no file in common (all MIT)."""


@dataclass(frozen=True)
class Clip:
    """One emoji: a single still or consecutive animation frames, straight uint8 RGBA HxWx4 each."""

    name: str
    frames: list[np.ndarray]

    @property
    def animated(self) -> bool:
        return len(self.frames) > 1

    def load(self) -> Clip:
        """The clip itself (a :class:`ClipSource` that is loaded already)."""
        return self


class ClipSource(Protocol):
    """A clip that is loaded (decoded, rendered) only when it is scored, so a large sample needs little memory."""

    @property
    def name(self) -> str: ...

    def load(self) -> Clip: ...


def _sha512_integrity(path: Path) -> str:
    digest = hashlib.sha512()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return "sha512-" + base64.b64encode(digest.digest()).decode()


def tarball(package: NpmPackage) -> Path:
    """The package's tarball in the cache, downloaded with ``npm pack`` if needed and checked against its sha512.

    Raises:
        RuntimeError: npm failed, or the tarball's sha512 is not the pinned one (the file is then deleted).
    """
    downloads = CACHE / "npm"
    downloads.mkdir(parents=True, exist_ok=True)
    path = downloads / f"{package.name.lstrip('@').replace('/', '-')}-{package.version}.tgz"
    if not path.exists():
        print(f"downloading {package.spec} with npm pack ...", flush=True)
        done = subprocess.run(
            ["npm", "pack", package.spec, "--pack-destination", str(downloads), "--json", "--silent"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm pack {package.spec} failed: {done.stderr.strip() or done.stdout.strip()}")
        path = downloads / json.loads(done.stdout)[0]["filename"]
    if _sha512_integrity(path) != package.integrity:
        path.unlink()
        raise RuntimeError(f"{package.spec}: the tarball's sha512 is not the pinned {package.integrity}")
    return path


def _extract(package: NpmPackage, members: list[str]) -> None:
    """Copy the ``members`` (paths inside the tarball) missing from the package's cache folder, by their base name."""
    package.folder.mkdir(parents=True, exist_ok=True)
    missing = {member for member in members if not (package.folder / Path(member).name).exists()}
    if not missing:
        return
    path = tarball(package)
    with tarfile.open(path) as archive:
        for member in archive:
            if member.name in missing:
                source = archive.extractfile(member)
                if source is None:
                    raise RuntimeError(f"{package.spec}: {member.name} is not a regular file")
                (package.folder / Path(member.name).name).write_bytes(source.read())
                missing.discard(member.name)
    if missing:
        raise RuntimeError(f"{package.spec} has no {', '.join(sorted(missing))}")
    if not package.keep_tarball:
        path.unlink()


def _member_names(package: NpmPackage, prefix: str, suffix: str) -> list[str]:
    """Sorted tarball paths under ``prefix`` ending in ``suffix``; the listing is cached beside the extracted files."""
    listing = package.folder / "members.json"
    if not listing.exists():
        package.folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball(package)) as archive:
            listing.write_text(json.dumps(sorted(archive.getnames())))
    names: list[str] = json.loads(listing.read_text())
    return [name for name in names if name.startswith(prefix) and name.endswith(suffix)]


def _sample(names: list[str], count: int, seed: int) -> list[str]:
    picks = np.random.default_rng(seed).choice(len(names), size=min(count, len(names)), replace=False)
    return [names[i] for i in sorted(picks)]


class _Rectangle(ctypes.Structure):
    _fields_ = [(field, ctypes.c_double) for field in ("x", "y", "width", "height")]


def render_svg(svg: bytes, size: int) -> np.ndarray:
    """Render an SVG over transparency with librsvg and cairo (system libraries, through ctypes).

    Returns:
        Premultiplied RGBA, float64 in [0, 1], ``size`` x ``size`` x 4.

    Raises:
        RuntimeError: librsvg could not parse or render the SVG.
    """
    rsvg = ctypes.CDLL("librsvg-2.so.2")
    cairo = ctypes.CDLL("libcairo.so.2")
    gobject = ctypes.CDLL("libgobject-2.0.so.0")
    rsvg.rsvg_handle_new_from_data.restype = ctypes.c_void_p
    rsvg.rsvg_handle_new_from_data.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p]
    rsvg.rsvg_handle_render_document.restype = ctypes.c_int
    rsvg.rsvg_handle_render_document.argtypes = [ctypes.c_void_p] * 2 + [ctypes.POINTER(_Rectangle), ctypes.c_void_p]
    cairo.cairo_image_surface_create.restype = ctypes.c_void_p
    cairo.cairo_image_surface_create.argtypes = [ctypes.c_int] * 3
    cairo.cairo_create.restype = ctypes.c_void_p
    cairo.cairo_image_surface_get_data.restype = ctypes.c_void_p
    for function in ("cairo_create", "cairo_surface_flush", "cairo_image_surface_get_data", "cairo_destroy"):
        getattr(cairo, function).argtypes = [ctypes.c_void_p]
    cairo.cairo_image_surface_get_stride.argtypes = [ctypes.c_void_p]
    cairo.cairo_surface_destroy.argtypes = [ctypes.c_void_p]
    gobject.g_object_unref.argtypes = [ctypes.c_void_p]

    handle = rsvg.rsvg_handle_new_from_data(svg, len(svg), None)
    if not handle:
        raise RuntimeError("librsvg could not parse the SVG")
    surface = cairo.cairo_image_surface_create(0, size, size)  # CAIRO_FORMAT_ARGB32: premultiplied, native order
    context = cairo.cairo_create(surface)
    try:
        if not rsvg.rsvg_handle_render_document(handle, context, ctypes.byref(_Rectangle(0, 0, size, size)), None):
            raise RuntimeError("librsvg could not render the SVG")
        cairo.cairo_surface_flush(surface)
        stride = cairo.cairo_image_surface_get_stride(surface)
        raw = ctypes.string_at(cairo.cairo_image_surface_get_data(surface), size * stride)
    finally:
        cairo.cairo_destroy(context)
        cairo.cairo_surface_destroy(surface)
        gobject.g_object_unref(handle)
    bgra = np.frombuffer(raw, np.uint8).reshape(size, stride)[:, : size * 4].reshape(size, size, 4)
    return bgra[..., [2, 1, 0, 3]].astype(np.float64) / 255  # little-endian ARGB32 is B, G, R, A in memory


def resize_premultiplied(premultiplied: np.ndarray, size: int) -> np.ndarray:
    """Resize premultiplied RGBA (float in [0, 1]) with Lanczos and return straight uint8 RGBA.

    Resampling premultiplied colour keeps the colour of transparent pixels out of the edge.
    """
    channels = [
        np.asarray(
            Image.fromarray(premultiplied[..., c].astype(np.float32), mode="F").resize(
                (size, size), Image.Resampling.LANCZOS
            )
        )
        for c in range(4)
    ]
    resized = np.clip(np.stack(channels, axis=2), 0.0, 1.0)
    alpha = resized[..., 3:]
    straight = np.divide(resized[..., :3], alpha, out=np.zeros_like(resized[..., :3]), where=alpha > 0)
    return np.rint(np.dstack([np.clip(straight, 0.0, 1.0), alpha]) * 255).astype(np.uint8)


def _check_part(part: str) -> None:
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}: one of {', '.join(PARTS)}")


def openmoji_stills(count: int = TUNE_STILLS, seed: int = SEED, part: str = TUNE) -> list[Clip]:
    """A fixed, seeded sample of OpenMoji colour emoji, rendered and resized to 256x256 (cached as PNG).

    The tune part is the first ``count`` of the original sample of :data:`TUNE_STILLS`; the held-out part a seeded
    sample of the other SVGs.

    Raises:
        ValueError: An unknown part, or more tune stills than the part has.
    """
    _check_part(part)
    names = _member_names(OPENMOJI, "package/color/svg/", ".svg")
    tune = _sample(names, TUNE_STILLS, seed)
    if part == TUNE:
        if count > TUNE_STILLS:
            raise ValueError(f"the tune part has {TUNE_STILLS} stills, not {count}")
        members = tune[:count]
    else:
        members = _sample(sorted(set(names) - set(tune)), count, seed + 1)
    pngs = [OPENMOJI.folder / f"{Path(member).stem}.png" for member in members]
    missing = [member for member, png in zip(members, pngs, strict=True) if not png.exists()]
    _extract(OPENMOJI, missing)
    for member in missing:
        svg = OPENMOJI.folder / Path(member).name
        Image.fromarray(resize_premultiplied(render_svg(svg.read_bytes(), RENDER_SIZE), SIZE)).save(
            OPENMOJI.folder / f"{svg.stem}.png"
        )
        svg.unlink()
    return [Clip(f"openmoji {png.stem}", [np.asarray(Image.open(png).convert("RGBA"))]) for png in pngs]


def _frame_counts(package: NpmPackage, prefix: str) -> dict[str, int]:
    """Frames in each WebP under ``prefix`` in the tarball (about a third of the Fluent files are stills); cached."""
    index = package.folder / "frame-counts.json"
    if not index.exists():
        package.folder.mkdir(parents=True, exist_ok=True)
        found: dict[str, int] = {}
        with tarfile.open(tarball(package)) as archive:
            for member in archive:
                source = archive.extractfile(member) if member.name.startswith(prefix) else None
                if source is not None and member.name.endswith(".webp"):
                    with Image.open(io.BytesIO(source.read())) as image:
                        found[member.name] = getattr(image, "n_frames", 1)
        index.write_text(json.dumps(found, indent=0, sort_keys=True))
    counts: dict[str, int] = json.loads(index.read_text())
    return counts


def fluent_animations(count: int = 6, frames: int = 24, seed: int = SEED) -> list[Clip]:
    """A fixed, seeded sample of Fluent animated emoji: the first ``frames`` consecutive frames of each."""
    counts = _frame_counts(FLUENT_ANIM, "package/assets/")
    members = _sample(sorted(name for name, n in counts.items() if n >= frames), count, seed)
    _extract(FLUENT_ANIM, members)
    clips = []
    for member in members:
        with Image.open(FLUENT_ANIM.folder / Path(member).name) as animation:
            decoded = []
            for index in range(min(frames, getattr(animation, "n_frames", 1))):
                animation.seek(index)
                frame = animation.convert("RGBA")
                if frame.size != (SIZE, SIZE):
                    frame = frame.resize((SIZE, SIZE), Image.Resampling.LANCZOS)
                decoded.append(np.asarray(frame))
        clips.append(Clip(f"fluent {Path(member).stem}", decoded))
    return clips


SKIN_TONE = re.compile(r"-1f3f[b-f]")
"""The Fitzpatrick modifiers in a Fluent file name: the five skin-tone variants of an emoji share its animation."""


@dataclass(frozen=True)
class FluentAnimation:
    """One Fluent animated WebP of the sample, decoded by :meth:`load`: its first ``frames`` consecutive frames."""

    package: NpmPackage
    member: str
    frames: int

    @property
    def name(self) -> str:
        return f"anim-{self.package.name.rpartition('-')[2]} {Path(self.member).stem}"

    def load(self) -> Clip:
        return Clip(self.name, _decode_webp(self.package.folder / Path(self.member).name, self.frames))


def _decode_webp(path: Path, frames: int) -> list[np.ndarray]:
    """The first ``frames`` frames of an animated WebP as straight uint8 RGBA, :data:`SIZE` square."""
    with Image.open(path) as animation:
        decoded = []
        for index in range(min(frames, getattr(animation, "n_frames", 1))):
            animation.seek(index)
            frame = animation.convert("RGBA")
            if frame.size != (SIZE, SIZE):
                frame = frame.resize((SIZE, SIZE), Image.Resampling.LANCZOS)
            decoded.append(np.asarray(frame))
    return decoded


def _seeded_order(members: Sequence[str], seed: int, stream: int) -> list[str]:
    """``members`` with skin-tone variants folded into one each, in a seeded order.

    Each emoji's variants (:data:`SKIN_TONE`) count once, its variant picked by the seed; the emoji come in a seeded
    permutation, so a smaller sample is the start of a larger one and a quick run scores a subset of the full run.
    """
    groups: dict[str, list[str]] = {}
    for member in sorted(members):
        groups.setdefault(SKIN_TONE.sub("", member), []).append(member)
    rng = np.random.default_rng([seed, stream])
    picks = [variants[int(rng.integers(len(variants)))] for _, variants in sorted(groups.items())]
    return [picks[i] for i in rng.permutation(len(picks))]


def _fixture(member: str) -> bool:
    """Whether a Fluent file is one of the emoji the tests use (:data:`TEST_FIXTURE_EMOJI`)."""
    return SKIN_TONE.sub("", Path(member).stem) in TEST_FIXTURE_EMOJI


def fluent_sample(count: int = 210, frames: int = 8, seed: int = SEED, part: str = TUNE) -> list[FluentAnimation]:
    """A fixed, seeded sample of ``count`` Fluent animations of one part, spread evenly over the three packages.

    Only WebPs with at least ``frames`` frames count (about a third of the files are stills), one per emoji (skin-tone
    variants fold into one). Per package, the tune part is the first :data:`TUNE_FLUENT_PER_PACKAGE` emoji of its
    seeded order and the held-out part the emoji after them, less :data:`TEST_FIXTURE_EMOJI`. The sampled files are
    extracted to the cache; the frames are decoded when each animation is loaded.

    Raises:
        ValueError: An unknown part, or more animations than the part has.
    """
    _check_part(part)
    sample: list[FluentAnimation] = []
    for stream, package in enumerate(FLUENT_ANIMS):
        share = count // len(FLUENT_ANIMS) + (stream < count % len(FLUENT_ANIMS))
        counts = _frame_counts(package, "package/assets/")
        order = _seeded_order([name for name, n in counts.items() if n >= frames], seed, stream)
        if part == TUNE:
            if share > TUNE_FLUENT_PER_PACKAGE:
                raise ValueError(f"the tune part has {TUNE_FLUENT_PER_PACKAGE} animations per package, not {share}")
            members = order[:share]
        else:
            members = [member for member in order[TUNE_FLUENT_PER_PACKAGE:] if not _fixture(member)][:share]
        if len(members) < share:
            raise ValueError(f"{package.spec} has {len(members)} {part} animations of {frames} frames, not {share}")
        _extract(package, members)
        sample.extend(FluentAnimation(package, member, frames) for member in sorted(members))
    return sample


PROCEDURAL_CHARACTERS = (
    "a round orange cat with a blue scarf",
    "a pink bunny with a top hat, headphones and a scarf",
    "a green frog with glasses",
    "a white ghost with a red bow",
    "a brown bear with a crown",
    "a grey robot with headphones",
    "a yellow chick with a flower",
    "a purple dragon with sunglasses",
)
"""The procedural characters: colours from white (white on white) to dark, several kinds and accessories."""

PROCEDURAL_SECONDS, PROCEDURAL_FPS = 1.0, 12
"""Each procedural clip is one loop of its action in 12 frames."""


@dataclass(frozen=True)
class ProceduralClip:
    """One clip of the procedural generator, rendered by :meth:`load` with its true alpha."""

    prompt: str
    action: str
    candidate: int
    take: int
    seed: int

    @property
    def name(self) -> str:
        character = self.prompt.removeprefix("a ").split(" with ")[0]
        return f"procedural {character} {self.action} c{self.candidate}t{self.take}s{self.seed}"

    def load(self) -> Clip:
        """The clip's undamaged frames as straight uint8 RGBA, from :func:`render_clip`.

        ``render_clip`` gives each frame over white (``clean``, uint8) and its true alpha; the premultiplied colour is
        ``clean - 255 * (1 - alpha)``, exact to half a level, so the frame over white is ``clean`` again. The clip's
        deliberate defects (``rgb``) are left out: the true alpha is that of the undamaged drawing.
        """
        rendered = self.render()
        frames = []
        for clean, alpha in zip(rendered.clean, rendered.alpha, strict=True):
            premultiplied = clean.astype(np.float64) / 255 - (1 - alpha[..., None].astype(np.float64))
            a = alpha[..., None].astype(np.float64)
            straight = np.divide(premultiplied, a, out=np.ones_like(premultiplied), where=a > 0)
            frames.append(np.rint(np.dstack([np.clip(straight, 0, 1), a]) * 255).astype(np.uint8))
        return Clip(self.name, frames)

    def render(self) -> RenderedClip:
        """The clip as :func:`render_clip` draws it: frames over white, their true alpha and the effects' share."""
        ref = ArtifactRef(uri="memory://benchmark", sha256="0" * 64, size_bytes=1, media_type="image/png")
        action = ActionSpec.of_preset(PRESETS[self.action])
        character = CharacterRef(image=ref, prompt=self.prompt, candidate=self.candidate)
        common = {"set_id": "benchmark", "action": action, "character": character, "generator": "procedural"}
        start = start_frame_images(
            GenerateStartFrameInput(
                **common,
                prompt=action.pose_prompt,
                style="flat cartoon sticker",
                first_candidate=self.candidate,
                count=1,
                size=SIZE,
                seed=self.seed,
            ),
            b"",
        )[0].data
        request = GenerateClipInput(
            **common,
            start_frame=ref,
            motion_prompt=action.motion_prompt,
            take=self.take,
            seconds=PROCEDURAL_SECONDS,
            fps=PROCEDURAL_FPS,
            size=SIZE,
            seed=self.seed,
        )
        return render_clip(request, start)


def procedural_clips(count: int = TUNE_PROCEDURAL, seed: int = SEED, part: str = TUNE) -> list[ProceduralClip]:
    """A fixed, seeded set of ``count`` procedural clips of one part: each character in turn, each preset action in a
    seeded order, and a seeded candidate, take and generator seed for each.

    The clips are drawn in one seeded sequence: the tune part is its first :data:`TUNE_PROCEDURAL`, the held-out part
    what follows.

    Raises:
        ValueError: An unknown part, or more tune clips than the part has.
    """
    _check_part(part)
    if part == TUNE and count > TUNE_PROCEDURAL:
        raise ValueError(f"the tune part has {TUNE_PROCEDURAL} procedural clips, not {count}")
    first = 0 if part == TUNE else TUNE_PROCEDURAL
    return _procedural_sequence(first + count, seed)[first:]


def _procedural_sequence(count: int, seed: int) -> list[ProceduralClip]:
    """The first ``count`` clips of the seeded sequence (a longer sequence starts with a shorter one)."""
    rng = np.random.default_rng([seed, len(FLUENT_ANIMS)])
    actions = [sorted(PRESETS)[i] for i in rng.permutation(len(PRESETS))]
    return [
        ProceduralClip(
            prompt=PROCEDURAL_CHARACTERS[index % len(PROCEDURAL_CHARACTERS)],
            action=actions[index % len(actions)],
            candidate=int(rng.integers(4)),
            take=int(rng.integers(3)),
            seed=int(rng.integers(1000)),
        )
        for index in range(count)
    ]
