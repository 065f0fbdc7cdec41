"""Model weights: one folder, offline-first loading, and a fetch command for a connected machine.

Every weight set lives under ``<model_dir>/<name>/`` (``POPCON_MODEL_DIR``). Engines only ever read from there
(:func:`require`); nothing downloads at inference time. ``popcon models fetch NAME...`` fills the folder on a
machine with network (a GPU image bakes it in at build time); without network it says so and which host it tried.

Every weight file is pinned by its sha256 (``None`` only where no public record of it is found: such a file is loaded
unverified, and listed as unpinned). ``fetch`` checks it (and rembg's md5) before a download replaces anything, and
:func:`require` checks it again before an engine loads the folder, so a damaged, truncated or swapped file is refused
with the file, the expected and the actual digest. A process hashes each file once: it keeps the digest with the
file's identity (device, inode, size, mtime, ctime) and hashes again only when one of them changes, so neither a good
nor a refused folder costs a re-hash of gigabytes on every activity.

The catalogue is plain data, importable without torch or onnxruntime, so listing and fetching work from a CPU-only
install.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx

from gpu_activity_worker.vocabulary import MattingError
from workflows.contract import FailureType


class WeightsMissingError(MattingError):
    """A weight set is not in the model folder. Retrying does not help: fetch it first."""

    failure_type = FailureType.WEIGHTS_MISSING


class WeightsMismatchError(WeightsMissingError):
    """A weight file is not the published one (its digest differs from the catalogue's): damaged, truncated, replaced.

    The weight set is, in effect, not in the folder: the same non-retryable failure as a missing one, with the same
    remedy (fetch it again), and a message that names the file, the expected and the actual digest.
    """


class FetchError(Exception):
    """Weights could not be downloaded (no network, bad answer, checksum mismatch)."""


@dataclass(frozen=True)
class UrlFile:
    """One file downloaded from a URL, checked against the digests its publisher gives.

    Attributes:
        url: Where the file is downloaded from.
        filename: Its name in the weight set's folder.
        sha256: Its sha256 (hex); ``None`` when no public record of it was found (the entry is then unpinned).
        md5: Its md5 (hex), when the publisher gives one (rembg pins its release assets by md5): checked on fetch
            along with the sha256, and at load when there is no sha256.
    """

    url: str
    filename: str
    sha256: str | None = None
    md5: str | None = None


@dataclass(frozen=True)
class HubSnapshot:
    """A Hugging Face Hub repository at a pinned revision.

    Attributes:
        repo_id: The Hub repository.
        revision: The commit the snapshot is taken at; it pins the small files (code, json) too.
        allow_patterns: The files fetched from it.
        sha256: The sha256 (hex) of each weight file of the snapshot (the Hub's LFS ``oid`` at the revision), by file
            name; ``None`` for a weight file whose digest is unknown. A folder must hold no other weight file than
            these (a loader could pick it over the pinned one), unless the mapping is empty: an unpinned snapshot.
    """

    repo_id: str
    revision: str
    allow_patterns: tuple[str, ...] = ("*.json", "*.py", "*.safetensors", "*.txt", "*.md")
    sha256: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelWeights:
    """One downloadable weight set.

    Attributes:
        name: Folder name under the model dir, and the name ``popcon models fetch`` takes.
        engine: The matting step that loads it.
        licence: The weights' licence (what matters for commercial use).
        source: Where the weights come from.
    """

    name: str
    engine: str
    licence: str
    source: UrlFile | HubSnapshot


_REMBG_RELEASE = "https://github.com/danielgatis/rembg/releases/download/v0.0.0"  # md5s: rembg/sessions/*.py
_SAM2_RELEASE = "https://dl.fbaipublicfiles.com/segment_anything_2/092824"  # checkpoints/download_ckpts.sh

# Where each sha256 comes from. Neither rembg nor Meta publishes one (rembg pins its release assets by md5, which
# `fetch` checks as well, so a wrong sha256 here fails the fetch instead of passing); the values below are the ones
# independent public manifests pin these exact URLs to, each found in more than one of them:
# - rembg assets: the Nix package TeamWolfyta/Yukino packages/rembg/default.nix (fetchurl SRI hashes of these URLs,
#   enforced by every Nix build) for u2net, u2netp and isnet-anime; mumu-0922/QuestCut-AI models/MODEL_SOURCES.md
#   (sha256 next to the same md5 and 972,666,916 bytes) for BiRefNet-general; for BiRefNet-general-lite, manifests
#   that record it with the same md5 and 224,005,088 bytes (it is also the sha256 of the author's own release asset,
#   github.com/ZhengPeng7/BiRefNet/releases/download/v1/BiRefNet-general-bb_swin_v1_tiny-epoch_232.onnx).
# - SAM 2.1 checkpoints: computational-cell-analytics/micro-sam micro_sam/v2/util.py (HASHES["sam2.1"], checked by
#   pooch on download from these URLs); other manifests note they equal the Hub's LFS oids of facebook/sam2.1-hiera-*.
# - Hub snapshots: the LFS oid of the weight file at the pinned revision, as recorded by manifests that pin the same
#   revision (and its size): model.safetensors of BiRefNet 444,473,596 bytes, of BiRefNet_lite 177,634,392 bytes, of
#   vitmatte-small 103,294,572 bytes; pytorch_model.bin of vitmatte-base.
_SAM2_SHA256 = {
    "tiny": "7402e0d864fa82708a20fbd15bc84245c2f26dff0eb43a4b5b93452deb34be69",  # 156,008,466 bytes
    "small": "6d1aa6f30de5c92224f8172114de081d104bbd23dd9dc5c58996f0cad5dc4d38",  # 184,416,285 bytes
    "base-plus": "a2345aede8715ab1d5d31b4a509fb160c5a4af1970f199d9054ccfb746c004c5",  # 323,606,802 bytes
    "large": "2647878d5dfa5098f2f8649825738a9345572bae2d4350a2468587ece47dd318",  # 898,083,611 bytes
}

CATALOGUE: dict[str, ModelWeights] = {
    weights.name: weights
    for weights in (
        # rembg ONNX sessions, stored as <model_dir>/rembg-<session>/<session>.onnx
        ModelWeights(
            "rembg-u2net",
            "rembg",
            "Apache-2.0",
            UrlFile(
                f"{_REMBG_RELEASE}/u2net.onnx",
                "u2net.onnx",
                sha256="8d10d2f3bb75ae3b6d527c77944fc5e7dcd94b29809d47a739a7a728a912b491",  # Yukino (Nix)
                md5="60024c5c889badc19c04ad937298a77b",
            ),
        ),
        ModelWeights(
            "rembg-u2netp",
            "rembg",
            "Apache-2.0",
            UrlFile(
                f"{_REMBG_RELEASE}/u2netp.onnx",
                "u2netp.onnx",
                sha256="309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8",  # Yukino (Nix)
                md5="8e83ca70e441ab06c318d82300c84806",
            ),
        ),
        ModelWeights(
            "rembg-isnet-anime",
            "rembg",
            "Apache-2.0",
            UrlFile(
                f"{_REMBG_RELEASE}/isnet-anime.onnx",
                "isnet-anime.onnx",
                # Yukino (Nix); also the sha256 of its source, skytnt/anime-seg isnetis.onnx (176,069,933 bytes)
                sha256="f15622d853e8260172812b657053460e20806f04b9e05147d49af7bed31a6e99",
                md5="6f184e756bb3bd901c8849220a83e38e",
            ),
        ),
        ModelWeights(
            "rembg-birefnet-general",
            "rembg",
            "MIT",
            UrlFile(
                f"{_REMBG_RELEASE}/BiRefNet-general-epoch_244.onnx",
                "birefnet-general.onnx",
                sha256="58f621f00f5d756097615970a88a791584600dcf7c45b18a0a6267535a1ebd3c",  # QuestCut-AI
                md5="7a35a0141cbbc80de11d9c9a28f52697",
            ),
        ),
        ModelWeights(
            "rembg-birefnet-general-lite",
            "rembg",
            "MIT",
            UrlFile(
                f"{_REMBG_RELEASE}/BiRefNet-general-bb_swin_v1_tiny-epoch_232.onnx",
                "birefnet-general-lite.onnx",
                sha256="5600024376f572a557870a5eb0afb1e5961636bef4e1e22132025467d0f03333",  # = the author's v1 asset
                md5="4fab47adc4ff364be1713e97b7e66334",
            ),
        ),
        ModelWeights(
            "birefnet-general",
            "birefnet",
            "MIT",
            HubSnapshot(
                "ZhengPeng7/BiRefNet",
                # The commit that calls post_init(), which transformers 5 requires of remote-code models.
                "e2bf8e4460fc8fa32bba5ea4d94b3233d367b0e4",
                allow_patterns=("birefnet.py", "BiRefNet_config.py", "config.json", "model.safetensors"),
                sha256={"model.safetensors": "9ab37426bf4de0567af6b5d21b16151357149139362e6e8992021b8ce356a154"},
            ),
        ),
        ModelWeights(
            "birefnet-lite",
            "birefnet",
            "MIT",
            HubSnapshot(
                "ZhengPeng7/BiRefNet_lite",
                "aa62cd87eafb9cc43056d08ef3615a14628b831d",
                allow_patterns=("birefnet.py", "BiRefNet_config.py", "config.json", "model.safetensors"),
                sha256={"model.safetensors": "4417d89795250e698c3cb0ae8df15743810065f646f48a694fdfa7ca052d0815"},
            ),
        ),
        ModelWeights(
            # ToonOut (arXiv 2509.06839): BiRefNet fine-tuned on anime. One raw state dict, no code: it loads into the
            # code of birefnet-general, which must be fetched too. MIT for code and weights: the model card
            # huggingface.co/joelseytre/toonout ("License: MIT"; its training data set is CC-BY 4.0) and
            # github.com/MatteoKartoon/BiRefNet LICENSE (its README: "MIT License (code + weights)").
            "birefnet-toonout",
            "birefnet",
            "MIT (weights and code; training data set CC-BY-4.0)",
            UrlFile(
                "https://huggingface.co/joelseytre/toonout/resolve/cbf720eca394edcde66b861a8a8c20fbabe9c748/"
                "birefnet_finetuned_toonout.pth",
                "birefnet_finetuned_toonout.pth",
                # snowyukitty/snowy-bg-remover src/snowy_bg_remover/model_specs.py (this URL at this revision); an
                # independent ToonOut ONNX export script asserts the same digest of the file before loading it.
                sha256="8c7f8a0bc24400f4caade76622f75ff22ca1e93e169add9d2b70093e2487fbe5",
            ),
        ),
        *(
            ModelWeights(
                f"sam2.1-hiera-{size}",
                "sam2",
                "Apache-2.0",
                UrlFile(
                    f"{_SAM2_RELEASE}/sam2.1_hiera_{size.replace('-', '_')}.pt",
                    f"sam2.1_hiera_{size.replace('-', '_')}.pt",
                    sha256=sha256,
                ),
            )
            for size, sha256 in _SAM2_SHA256.items()
        ),
        ModelWeights(
            "vitmatte-small",
            "vitmatte",
            "Apache-2.0 (weights), MIT (code)",
            HubSnapshot(
                "hustvl/vitmatte-small-composition-1k",
                "6a58ad7646403c1df626fbd746900aec7361ea1d",
                sha256={"model.safetensors": "bda9289db1bb6762d978b42d1c62ae3f34daf7497171a347a1d09657efd788cb"},
            ),
        ),
        ModelWeights(
            "vitmatte-base",
            "vitmatte",
            "Apache-2.0 (weights), MIT (code)",
            # The Hub repository ships only a pickled checkpoint (pytorch_model.bin).
            HubSnapshot(
                "hustvl/vitmatte-base-composition-1k",
                "bf486d01a7d9e3dbcc8400f7942835caf0eaf76e",
                allow_patterns=("*.json", "*.bin", "*.md"),
                sha256={"pytorch_model.bin": "b2521bcc4b719fb24611c39605b6642162fd7502e69b3cc846506ca921757b41"},
            ),
        ),
    )
}
"""Every weight set popcon knows, by name. Engines add theirs here (one line each)."""


def weights_dir(model_dir: Path, name: str) -> Path:
    return model_dir / name


def require(model_dir: Path | None, name: str, *, must_contain: str | None = None) -> Path:
    """The folder of weight set ``name``, which must exist (and hold ``must_contain`` when given), with its weight
    files verified against the catalogue's digests (see :func:`verify`).

    Raises:
        WeightsMissingError: With the command that fetches them.
        WeightsMismatchError: A weight file is not the published one (names the file, expected and actual digest).
    """
    if model_dir is None:
        raise WeightsMissingError(f"no model folder is configured for {name!r}: set POPCON_MODEL_DIR")
    folder = weights_dir(model_dir, name)
    wanted = folder / must_contain if must_contain else folder
    if not wanted.exists():
        raise WeightsMissingError(
            f"weights {name!r} are not in {folder}: run `popcon models fetch {name}` on a machine with network "
            f"(or copy the folder there); POPCON_MODEL_DIR={model_dir}"
        )
    if name in CATALOGUE:
        verify(folder, CATALOGUE[name])
    return folder


@dataclass(frozen=True)
class FilePin:
    """One weight file of a weight set and the digests the catalogue has for it."""

    filename: str
    sha256: str | None
    md5: str | None = None


def file_pins(weights: ModelWeights) -> tuple[FilePin, ...]:
    """The weight files of ``weights`` the catalogue lists, with their digests (``None`` where it has none)."""
    source = weights.source
    if isinstance(source, UrlFile):
        return (FilePin(source.filename, source.sha256, source.md5),)
    return tuple(FilePin(filename, sha256) for filename, sha256 in source.sha256.items())


def unpinned_files(weights: ModelWeights) -> tuple[str, ...]:
    """The weight files of ``weights`` without a sha256 (every one, as ``"*"``, for a snapshot that lists none)."""
    pins = file_pins(weights)
    return tuple(pin.filename for pin in pins if pin.sha256 is None) if pins else ("*",)


def pin_status(weights: ModelWeights) -> str:
    """How ``weights`` are pinned, for listings: ``"sha256"``, or ``"UNPINNED: <files>"`` (verified by md5 only, or
    not at all)."""
    if not (unpinned := unpinned_files(weights)):
        return "sha256"
    md5 = {pin.filename for pin in file_pins(weights) if pin.md5}
    return "UNPINNED: " + ", ".join(f"{filename} (md5 only)" if filename in md5 else filename for filename in unpinned)


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".gguf", ".h5", ".msgpack")
"""File suffixes of weights: what a Hub snapshot folder may hold only as the catalogue lists them."""

_log = logging.getLogger(__name__)
_hash_lock = threading.Lock()
_digests: dict[tuple[str, str], tuple[tuple[int, ...], str]] = {}
"""(resolved path, algorithm) -> (the file's identity when hashed, its hex digest): a process's memory of digests."""
_reported_unpinned: set[str] = set()


def verify(folder: Path, weights: ModelWeights) -> None:
    """Check the weight files in ``folder`` against the digests the catalogue has for ``weights``.

    Each file is checked by its sha256 (by its md5 when the catalogue has only that); a file without either is loaded
    unverified (logged once; ``popcon models list`` shows it as unpinned). A Hub snapshot folder must hold no weight
    file the catalogue does not list. The digest of each file is remembered with its identity (device, inode, size,
    mtime, ctime) for the life of the process, for a match and a mismatch alike: checking again costs a ``stat``,
    and only a changed file is hashed again.

    Raises:
        WeightsMissingError: A listed weight file is not in the folder.
        WeightsMismatchError: A weight file's digest differs from the catalogue's, or a snapshot folder holds a weight
            file the catalogue does not list.
    """
    name = weights.name
    fix = f"run `popcon models fetch {name}` on a machine with network (or copy a good folder there)"
    source = weights.source
    if isinstance(source, HubSnapshot) and source.sha256:
        extra = sorted(
            path.name
            for path in folder.iterdir()
            if path.suffix in WEIGHT_SUFFIXES and path.name not in source.sha256 and path.is_file()
        )
        if extra:
            raise WeightsMismatchError(
                f"weights {name!r} in {folder} hold weight files the catalogue does not pin ({', '.join(extra)}; "
                f"it pins {', '.join(sorted(source.sha256))}), which a loader could pick instead: remove them, or {fix}"
            )
    for pin in file_pins(weights):
        path = folder / pin.filename
        if not path.is_file():
            raise WeightsMissingError(f"weights {name!r} in {folder} lack {pin.filename}: {fix}")
        algorithm, expected = ("sha256", pin.sha256) if pin.sha256 else ("md5", pin.md5)
        if expected is None:
            if name not in _reported_unpinned:
                _reported_unpinned.add(name)
                _log.warning("weights %r are unpinned: %s is loaded unverified", name, path)
            continue
        if (actual := file_digest(path, algorithm)) != expected.lower():
            raise WeightsMismatchError(
                f"weights {name!r}: {path} does not match the catalogue: {algorithm} expected {expected.lower()}, "
                f"actual {actual} (damaged, truncated or not the published file): {fix}"
            )


def file_digest(path: Path, algorithm: str) -> str:
    """The hex ``algorithm`` digest of the file at ``path``, hashed once per process while the file is unchanged."""
    with _hash_lock:
        stat = path.stat()
        identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        key = (str(path.resolve()), algorithm)
        known = _digests.get(key)
        if known is not None and known[0] == identity:
            return known[1]
        with path.open("rb") as stream:
            digest = hashlib.file_digest(stream, algorithm).hexdigest()
        # The identity from before hashing: a file changed meanwhile has another one now, and is hashed again.
        _digests[key] = (identity, digest)
        return digest


def is_present(model_dir: Path, weights: ModelWeights) -> bool:
    folder = weights_dir(model_dir, weights.name)
    if isinstance(weights.source, UrlFile):
        return (folder / weights.source.filename).is_file()
    return (folder / "config.json").is_file()


def fetch(model_dir: Path, name: str, *, timeout_s: float = 60.0) -> Path:
    """Download weight set ``name`` into the model folder (atomically); returns its folder.

    Raises:
        KeyError: Unknown name (the message lists the catalogue).
        FetchError: No network, a bad answer or a checksum mismatch; nothing half-written is left behind.
    """
    try:
        weights = CATALOGUE[name]
    except KeyError:
        raise KeyError(f"unknown weights {name!r}; known: {', '.join(sorted(CATALOGUE))}") from None
    folder = weights_dir(model_dir, name)
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=model_dir, prefix=f".{name}."))
    try:
        if isinstance(weights.source, UrlFile):
            _download(weights.source, staging, timeout_s)
        else:
            _snapshot(weights.source, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(staging, folder)
    return folder


def _download(source: UrlFile, folder: Path, timeout_s: float) -> None:
    target = folder / source.filename
    pins = {name: pin for name, pin in (("sha256", source.sha256), ("md5", source.md5)) if pin}
    digests = {name: hashlib.new(name) for name in pins}
    try:
        with httpx.stream("GET", source.url, follow_redirects=True, timeout=timeout_s) as answer:
            answer.raise_for_status()
            with target.open("wb") as out:
                for chunk in answer.iter_bytes(1 << 20):
                    for digest in digests.values():
                        digest.update(chunk)
                    out.write(chunk)
    except httpx.TransportError as err:
        raise FetchError(f"no network: could not reach {urlparse(source.url).hostname} ({err})") from err
    except httpx.HTTPStatusError as err:
        raise FetchError(f"{source.url} answered {err.response.status_code}") from err
    for name, pin in pins.items():
        if (got := digests[name].hexdigest()) != pin.lower():
            raise FetchError(
                f"{source.url} does not match the catalogue: {name} expected {pin.lower()}, actual {got} "
                "(the download is not the published file, and was discarded)"
            )


def _snapshot(source: HubSnapshot, folder: Path) -> None:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError as err:
        raise FetchError(
            f"fetching {source.repo_id} from the Hugging Face Hub needs the gpu extra: pip install -e '.[gpu]'"
        ) from err
    try:
        snapshot_download(
            source.repo_id,
            revision=source.revision,
            local_dir=folder,
            allow_patterns=list(source.allow_patterns),
        )
    except (LocalEntryNotFoundError, httpx.TransportError, OSError) as err:
        raise FetchError(f"no network: could not reach the Hugging Face Hub for {source.repo_id} ({err})") from err
    except HfHubHTTPError as err:
        raise FetchError(f"{source.repo_id}@{source.revision}: {err}") from err
    for filename, pin in source.sha256.items():
        path = folder / filename
        if not path.is_file():
            raise FetchError(f"{source.repo_id}@{source.revision} has no {filename}, which the catalogue pins")
        if pin is None:
            continue
        with path.open("rb") as stream:
            got = hashlib.file_digest(stream, "sha256").hexdigest()
        if got != pin.lower():
            raise FetchError(
                f"{source.repo_id}@{source.revision}: {filename} does not match the catalogue: sha256 expected "
                f"{pin.lower()}, actual {got} (the download is not the published file, and was discarded)"
            )
