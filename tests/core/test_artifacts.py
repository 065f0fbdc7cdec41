"""The file artifact store: atomic, verified, deterministic, confined to its root."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from core.artifacts import ArtifactError, FileArtifactStore, ForeignArtifact, get_in_set, open_store
from core.settings import ArtifactSettings
from workflows.contract import ArtifactRef, FailureType
from workflows.keys import candidate_key, export_key, is_key, key_segment, package_key


def test_put_then_get_round_trips_and_describes_the_blob(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    ref = store.put("sets/a/x.png", b"pixels", "image/png", width=2, height=3)
    assert ref.uri == (tmp_path / "sets/a/x.png").as_uri()
    assert (ref.size_bytes, ref.media_type, ref.width, ref.height) == (6, "image/png", 2, 3)
    assert store.get(ref) == b"pixels"


def test_same_key_overwrites_instead_of_duplicating(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    store.put("k.png", b"first", "image/png")
    second = store.put("k.png", b"second", "image/png")
    assert store.get(second) == b"second"
    assert [p.name for p in tmp_path.iterdir()] == ["k.png"], "no temporary files are left behind"


def test_changed_or_missing_content_is_detected(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    ref = store.put("k.png", b"original", "image/png")
    (tmp_path / "k.png").write_bytes(b"tampered")
    with pytest.raises(ArtifactError, match="does not match the reference's sha256") as refused:
        store.get(ref)
    # Nothing of what is stored, nor where: the real digest would let a refused reader name the file.
    assert hashlib.sha256(b"tampered").hexdigest() not in str(refused.value)
    assert str(tmp_path) not in str(refused.value).replace(ref.uri, "")
    (tmp_path / "k.png").unlink()
    with pytest.raises(ArtifactError, match="missing"):
        store.get(ref)


def test_changed_or_missing_content_is_retryable_a_foreign_reference_is_not() -> None:
    # A store shared by several machines may show a fresh write late; a reference outside it never becomes readable.
    assert ArtifactError.failure_type is FailureType.ARTIFACT_ERROR and FailureType.ARTIFACT_ERROR.retryable
    assert ForeignArtifact.failure_type is FailureType.FOREIGN_ARTIFACT and not FailureType.FOREIGN_ARTIFACT.retryable


@pytest.mark.parametrize(
    "key",
    [
        "../outside.png",
        "sets/a/../../outside.png",
        "sets/victim/../attacker/x.png",  # resolves inside the root, and is still refused: a key names one place
        "/etc/passwd",
        "sets//a.png",
        "sets/./a.png",
        "sets/a/",
        "sets/a b.png",
        "sets/\\..\\x.png",
        "x" * 1025,
    ],
)
def test_a_key_of_dots_an_absolute_path_or_odd_characters_is_refused_on_write_and_read(
    tmp_path: Path, key: str
) -> None:
    store = FileArtifactStore(tmp_path / "store")
    store.put("sets/victim/x.png", b"victim", "image/png")
    with pytest.raises(ValueError, match="not a relative key of safe segments"):
        store.put(key, b"x", "image/png")
    with pytest.raises(ValueError, match="not a relative key of safe segments"):
        store.find(key)
    assert store.find("sets/victim/x.png") == b"victim"


def settings_for(root: str) -> ArtifactSettings:
    return ArtifactSettings(_env_file=None, artifact_root=root)


def test_open_store_accepts_file_uris_and_paths(tmp_path: Path) -> None:
    assert isinstance(open_store(settings_for(tmp_path.as_uri())), FileArtifactStore)
    assert isinstance(open_store(settings_for(str(tmp_path))), FileArtifactStore)
    with pytest.raises(ValueError, match="unsupported artifact store"):
        open_store(settings_for("ftp://example/x"))


def test_keys_are_deterministic_and_safe() -> None:
    assert candidate_key("set-1", "wave", 3, 1, "matte.png") == "sets/set-1/wave/frame-003/candidate-01.matte.png"
    unsafe = key_segment("../a b/ü")
    assert "/" not in unsafe and unsafe != ".." and unsafe == key_segment("../a b/ü")
    assert key_segment("a b") != key_segment("a_b"), "sanitised ids stay unique"
    assert key_segment("...") != "..." and is_key(key_segment("..."))


@pytest.mark.parametrize("name", ["../../victim/character/candidate-00.gif", "a/b.png", "..", ""])
def test_a_package_or_export_file_name_is_one_segment_of_its_set(name: str) -> None:
    with pytest.raises(ValueError):
        package_key("set-1", "slack", name)
    with pytest.raises(ValueError):
        export_key("set-1", name)


def _reference_to(path: Path) -> ArtifactRef:
    """A well-formed reference to any file, with its true sha256: what a crafted input would carry."""
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    return ArtifactRef(uri=path.as_uri(), sha256=digest, size_bytes=len(data), media_type="image/png")


def test_a_reference_outside_the_root_is_refused_whatever_its_sha256(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "secret.txt"
    outside.write_bytes(b"not for workers")
    store = FileArtifactStore(root)
    (root / "sets").mkdir(parents=True)
    (root / "sets" / "link.png").symlink_to(outside)
    crafted = [
        _reference_to(outside),
        _reference_to(outside).model_copy(update={"uri": f"{root.as_uri()}/sets/../../secret.txt"}),
        _reference_to(outside).model_copy(update={"uri": (root / "sets" / "link.png").as_uri()}),
        _reference_to(outside).model_copy(update={"uri": f"file://other-host{outside}"}),
        _reference_to(outside).model_copy(update={"uri": "s3://bucket/secret.txt"}),
    ]
    for ref in crafted:
        with pytest.raises(ForeignArtifact, match=r"not read|reads only") as refused:
            store.get(ref)
        assert str(root) not in str(refused.value).replace(ref.uri, ""), "the store's root is not disclosed"
    assert not ForeignArtifact.failure_type.retryable and issubclass(ForeignArtifact, ArtifactError)


def test_a_write_that_fails_says_so_and_leaves_nothing_behind(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    (tmp_path / "set" / "a.png").mkdir(parents=True)  # the path is taken

    with pytest.raises(ArtifactError, match=r"set/a\.png: could not be stored"):
        store.put("set/a.png", b"png", "image/png")

    assert [p.name for p in (tmp_path / "set").iterdir()] == ["a.png"], "no temporary file left"


def test_a_crashed_writers_temporary_file_goes_with_the_next_write_of_its_key(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    store.put("set/b.png", b"other key", "image/png")
    (tmp_path / "set" / ".a.png.k3j2h1g0.partial").write_bytes(b"half a pn")  # killed mid-write
    (tmp_path / "set" / ".b.png.k3j2h1g0.partial").write_bytes(b"half a pn")

    store.put("set/a.png", b"png", "image/png")

    assert sorted(p.name for p in (tmp_path / "set").iterdir()) == [".b.png.k3j2h1g0.partial", "a.png", "b.png"]


def test_find_reads_a_key_or_says_none(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    store.put("set/record.json", b"{}", "application/json")

    assert store.find("set/record.json") == b"{}"
    assert store.find("set/none.json") is None


def test_work_for_one_set_reads_only_that_sets_files(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    own = store.put("sets/mine/wave/take-00/frame-0001.png", b"mine", "image/png")
    other = store.put("sets/victim/character/candidate-00.png", b"victim", "image/png")
    upload = store.put("uploads/" + "0" * 64, b"upload", "image/png")
    within = candidate_key("mine", "wave", 1, 0, "matte.png")

    assert store.key_of(own) == "sets/mine/wave/take-00/frame-0001.png"
    assert get_in_set(store, own, within) == b"mine"
    for ref in (other, upload):
        with pytest.raises(ForeignArtifact, match="not a file of the set this request writes to"):
            get_in_set(store, ref, within)
