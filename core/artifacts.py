"""The artifact store (claim check): images are stored here and travel through Temporal as :class:`ArtifactRef`.

Keys are deterministic (:mod:`workflows.keys`), so a retried activity overwrites its own output instead of adding a
second copy. Writes are atomic (temporary file, then rename): a crash mid-write never leaves a torn blob.
"""

from __future__ import annotations

import glob
import hashlib
import os
import tempfile
from pathlib import Path
from typing import ClassVar, Protocol
from urllib.parse import unquote, urlparse

from core.settings import ArtifactSettings
from workflows.contract import ArtifactRef, FailureType
from workflows.keys import check_key, set_of_key

PARTIAL = ".partial"
"""How a write's temporary file ends: ``.<name>.<8 random characters>.partial``, hidden beside its target so the
rename is atomic."""


class ArtifactError(Exception):
    """A stored artifact is missing or does not match its reference."""

    failure_type: ClassVar[FailureType] = FailureType.ARTIFACT_ERROR


class ForeignArtifact(ArtifactError):
    """A reference outside this store: a crafted or stale URI is never read, whatever sha256 it carries."""

    failure_type: ClassVar[FailureType] = FailureType.FOREIGN_ARTIFACT


class ArtifactStore(Protocol):
    """Where image bytes live: :class:`FileArtifactStore` (``file://``) or ``S3ArtifactStore`` (``s3://``)."""

    def put(
        self, key: str, data: bytes, media_type: str, *, width: int | None = None, height: int | None = None
    ) -> ArtifactRef: ...

    def get(self, ref: ArtifactRef) -> bytes: ...

    def find(self, key: str) -> bytes | None:
        """What is stored under ``key``, or None: for a worker's own records, which no reference points to."""
        ...

    def key_of(self, ref: ArtifactRef) -> str | None:
        """The key ``ref`` is stored under in this store, or None when this store does not address it by key (an
        inline job's sources). Reads nothing; :meth:`get` still checks the content.

        Raises:
            ForeignArtifact: ``ref`` lies outside this store.
        """
        ...


class FileArtifactStore:
    """Artifacts as files under one root folder, addressed by ``file://`` URIs."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        """Where ``key`` lives; a key with ``..``, ``.`` or a leading ``/`` is refused, as the S3 store does, even
        when it would resolve inside the root: a key names one place, inside its set."""
        return self.root / check_key(key)

    def put(
        self, key: str, data: bytes, media_type: str, *, width: int | None = None, height: int | None = None
    ) -> ArtifactRef:
        """Store ``data`` under ``key`` atomically.

        Raises:
            ArtifactError: It could not be written (disk full, I/O error, the path taken): retryable, and nothing is
                left behind.
        """
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL)
        except OSError as err:
            raise ArtifactError(f"{key}: could not be stored: {err}") from err
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException as err:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(err, OSError):
                raise ArtifactError(f"{key}: could not be stored: {err}") from err
            raise
        # A writer of this key that crashed mid-write left its temporary file: the key is written now, drop it. (A
        # writer still at work, an overlapping attempt, then fails to rename, is retried and writes the same bytes.)
        for leftover in path.parent.glob(glob.escape(f".{path.name}.") + "?" * 8 + glob.escape(PARTIAL)):
            leftover.unlink(missing_ok=True)
        return ArtifactRef(
            uri=path.as_uri(),
            sha256=hashlib.sha256(data).hexdigest(),
            size_bytes=len(data),
            media_type=media_type,
            width=width,
            height=height,
        )

    def get(self, ref: ArtifactRef) -> bytes:
        """The bytes of ``ref``, read only from under this store's root and checked against its sha256.

        Raises:
            ForeignArtifact: ``ref`` is not a ``file://`` URI under the root (symbolic links resolved).
            ArtifactError: The artifact is missing or its content changed.
        """
        path = self._located(ref)
        try:
            data = path.read_bytes()
        except FileNotFoundError as err:
            raise ArtifactError(f"{ref.uri}: artifact is missing") from err
        check_content(ref, data)
        return data

    def key_of(self, ref: ArtifactRef) -> str:
        return self._located(ref).relative_to(self.root).as_posix()

    def _located(self, ref: ArtifactRef) -> Path:
        # The refusals name neither the store's root nor anything read: the caller learns only that it is refused.
        parsed = urlparse(ref.uri)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise ForeignArtifact(f"{ref.uri}: this store reads only file:// artifacts of its own")
        path = Path(unquote(parsed.path)).resolve()
        if not path.is_relative_to(self.root):
            raise ForeignArtifact(f"{ref.uri}: outside the artifact store; it is not read")
        return path

    def find(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise ArtifactError(f"{key}: could not be read: {err}") from err


def get_in_set(store: ArtifactStore, ref: ArtifactRef, within: str) -> bytes:
    """The bytes of ``ref``, read for work written under the key ``within``: only from the set that key lies in.

    A request (a RunPod job, a hand-made ExportSet) therefore never writes into one set what it read from another.
    A store that does not address ``ref`` by key (an inline job's) is only read as :meth:`ArtifactStore.get` reads.

    Raises:
        ForeignArtifact: ``ref`` lies in another set, outside every set, or outside the store.
        ArtifactError: As :meth:`ArtifactStore.get`.
    """
    key = store.key_of(ref)
    if key is not None and set_of_key(key) != set_of_key(within):
        raise ForeignArtifact(f"{ref.uri}: not a file of the set this request writes to; it is not read")
    return store.get(ref)


def check_content(ref: ArtifactRef, data: bytes) -> None:
    """Check ``data`` against ``ref``'s sha256.

    Raises:
        ArtifactError: It differs. The message does not give the stored content's digest: with it, a reader who was
            refused could name the file in a reference of their own.
    """
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        raise ArtifactError(f"{ref.uri}: the stored content does not match the reference's sha256")


def open_store(settings: ArtifactSettings) -> ArtifactStore:
    """The configured store: ``file:///abs/path`` (or a plain path), or ``s3://bucket/prefix`` with the S3 settings."""
    uri = settings.artifact_root_uri()
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return FileArtifactStore(Path(unquote(parsed.path) if parsed.scheme else uri))
    if parsed.scheme == "s3":
        from core.s3_artifacts import S3ArtifactStore

        secret = settings.s3_secret_access_key
        return S3ArtifactStore(
            parsed.netloc,
            parsed.path,
            endpoint_url=settings.s3_endpoint_url,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=secret.get_secret_value() if secret else None,
            region=settings.s3_region,
        )
    raise ValueError(f"unsupported artifact store {uri!r}: use file:///path or s3://bucket/prefix")
