"""Model weights: one folder, offline-first loading, and a fetch command for a connected machine.

Every weight set lives under ``<model_dir>/<name>/`` (``POPCON_MODEL_DIR``). Engines only ever read from there
(:func:`require`); nothing downloads at inference time. ``popcon models fetch NAME...`` fills the folder on a
machine with network (a GPU image bakes it in at build time); without network it says so and which host it tried.

The catalogue is plain data, importable without torch or onnxruntime, so listing and fetching work from a CPU-only
install.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx

from gpu_activity_worker.engines.base import MattingError
from workflows.contract import FailureType


class WeightsMissingError(MattingError):
    """A weight set is not in the model folder. Retrying does not help: fetch it first."""

    failure_type = FailureType.WEIGHTS_MISSING


class FetchError(Exception):
    """Weights could not be downloaded (no network, bad answer, checksum mismatch)."""


@dataclass(frozen=True)
class UrlFile:
    """One file downloaded from a URL, checked against the digests its publisher gives.

    Attributes:
        url: Where the file is downloaded from.
        filename: Its name in the weight set's folder.
        sha256: Its sha256 (hex), when published.
        md5: Its md5 (hex), when that is all the publisher gives (rembg pins its release assets by md5).
    """

    url: str
    filename: str
    sha256: str | None = None
    md5: str | None = None


@dataclass(frozen=True)
class HubSnapshot:
    """A Hugging Face Hub repository at a pinned revision."""

    repo_id: str
    revision: str
    allow_patterns: tuple[str, ...] = ("*.json", "*.py", "*.safetensors", "*.txt", "*.md")


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

CATALOGUE: dict[str, ModelWeights] = {
    weights.name: weights
    for weights in (
        # rembg ONNX sessions, stored as <model_dir>/rembg-<session>/<session>.onnx
        ModelWeights(
            "rembg-u2net",
            "rembg",
            "Apache-2.0",
            UrlFile(f"{_REMBG_RELEASE}/u2net.onnx", "u2net.onnx", md5="60024c5c889badc19c04ad937298a77b"),
        ),
        ModelWeights(
            "rembg-u2netp",
            "rembg",
            "Apache-2.0",
            UrlFile(f"{_REMBG_RELEASE}/u2netp.onnx", "u2netp.onnx", md5="8e83ca70e441ab06c318d82300c84806"),
        ),
        ModelWeights(
            "rembg-isnet-anime",
            "rembg",
            "Apache-2.0",
            UrlFile(f"{_REMBG_RELEASE}/isnet-anime.onnx", "isnet-anime.onnx", md5="6f184e756bb3bd901c8849220a83e38e"),
        ),
        ModelWeights(
            "rembg-birefnet-general",
            "rembg",
            "MIT",
            UrlFile(
                f"{_REMBG_RELEASE}/BiRefNet-general-epoch_244.onnx",
                "birefnet-general.onnx",
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
            ),
        ),
        # Unpinned: Meta publishes no checksum for these (not in download_ckpts.sh, not in the sam2 package).
        *(
            ModelWeights(
                f"sam2.1-hiera-{size}",
                "sam2",
                "Apache-2.0",
                UrlFile(
                    f"{_SAM2_RELEASE}/sam2.1_hiera_{size.replace('-', '_')}.pt",
                    f"sam2.1_hiera_{size.replace('-', '_')}.pt",
                ),
            )
            for size in ("tiny", "small", "base-plus", "large")
        ),
        ModelWeights(
            "vitmatte-small",
            "vitmatte",
            "Apache-2.0 (weights), MIT (code)",
            HubSnapshot("hustvl/vitmatte-small-composition-1k", "6a58ad7646403c1df626fbd746900aec7361ea1d"),
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
            ),
        ),
    )
}
"""Every weight set popcon knows, by name. Engines add theirs here (one line each)."""


def weights_dir(model_dir: Path, name: str) -> Path:
    return model_dir / name


def require(model_dir: Path | None, name: str, *, must_contain: str | None = None) -> Path:
    """The folder of weight set ``name``, which must exist (and hold ``must_contain`` when given).

    Raises:
        WeightsMissingError: With the command that fetches them.
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
    return folder


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
            raise FetchError(f"{source.url}: {name} {got} does not match the catalogue's {pin}")


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
