"""The S3 artifact store against an S3-compatible HTTP server on loopback (moto's server mode)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from core.artifacts import ArtifactError, ForeignArtifact, open_store
from core.s3_artifacts import S3ArtifactStore
from core.settings import ArtifactSettings
from testkit.s3 import s3_server


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with s3_server("emoji") as env:
        yield env["POPCON_S3_ENDPOINT_URL"]


def store_for(endpoint: str, root: str = "s3://emoji/sets-root") -> S3ArtifactStore:
    settings = ArtifactSettings(
        _env_file=None,
        artifact_root=root,
        s3_endpoint_url=endpoint,
        s3_access_key_id="popcon",
        s3_secret_access_key="popcon-secret",
        s3_region="us-east-1",
    )
    store = open_store(settings)
    assert isinstance(store, S3ArtifactStore)
    return store


def test_put_then_get_round_trips(s3_endpoint: str) -> None:
    store = store_for(s3_endpoint)
    ref = store.put("sets/a/frame.png", b"\x89PNG pixels", "image/png", width=4, height=4)
    assert ref.uri == "s3://emoji/sets-root/sets/a/frame.png"
    assert (ref.size_bytes, ref.media_type, ref.width) == (11, "image/png", 4)
    assert store.get(ref) == b"\x89PNG pixels"


def test_same_key_overwrites(s3_endpoint: str) -> None:
    store = store_for(s3_endpoint)
    store.put("k.png", b"first", "image/png")
    second = store.put("k.png", b"second", "image/png")
    assert store.get(second) == b"second"


def test_find_reads_a_key_or_says_none(s3_endpoint: str) -> None:
    store = store_for(s3_endpoint)
    store.put("sets/a/record.json", b"{}", "application/json")

    assert store.find("sets/a/record.json") == b"{}"
    assert store.find("sets/a/none.json") is None


def test_a_reader_on_another_machine_reads_the_same_reference(s3_endpoint: str) -> None:
    writer, reader = store_for(s3_endpoint), store_for(s3_endpoint)
    ref = writer.put("shared.png", b"shared", "image/png")
    assert reader.get(ref) == b"shared"


@pytest.mark.parametrize(
    "uri",
    [
        "s3://emoji/other-prefix/shared.png",
        "s3://another-bucket/sets-root/shared.png",
        "s3://emoji/sets-root/../other-prefix/shared.png",
        "s3://emoji/sets-rootx/shared.png",
        "file:///etc/hostname",
    ],
)
def test_a_reference_outside_the_bucket_and_prefix_is_refused(s3_endpoint: str, uri: str) -> None:
    store = store_for(s3_endpoint)
    other = store_for(s3_endpoint, "s3://emoji/other-prefix")
    ref = other.put("shared.png", b"shared", "image/png").model_copy(update={"uri": uri})
    with pytest.raises(ForeignArtifact, match="it is not read"):
        store.get(ref)
    assert not ForeignArtifact.failure_type.retryable


def test_changed_or_missing_objects_are_detected(s3_endpoint: str) -> None:
    store = store_for(s3_endpoint)
    ref = store.put("tamper.png", b"original", "image/png")
    store.put("tamper.png", b"tampered", "image/png")
    with pytest.raises(ArtifactError, match="does not match the reference's sha256") as refused:
        store.get(ref)
    assert hashlib.sha256(b"tampered").hexdigest() not in str(refused.value)
    with pytest.raises(ArtifactError, match="missing"):
        store.get(ref.model_copy(update={"uri": "s3://emoji/sets-root/nothing.png"}))


@pytest.mark.parametrize("key", ["../x.png", "sets/a/../b/x.png", "/x.png", "sets//x.png", "sets/./x.png"])
def test_keys_cannot_escape_the_prefix(s3_endpoint: str, key: str) -> None:
    with pytest.raises(ValueError, match="not a relative key of safe segments"):
        store_for(s3_endpoint).put(key, b"x", "image/png")
