"""The weights folder: offline-first lookups, verification against the catalogue's digests at fetch and at load, and
`popcon models fetch` against a real HTTP server on loopback (and a stand-in Hub for snapshots)."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpu_activity_worker import fetch_weights, weights
from gpu_activity_worker.weights import (
    CATALOGUE,
    FetchError,
    HubSnapshot,
    ModelWeights,
    UrlFile,
    WeightsMismatchError,
    WeightsMissingError,
)
from starter import cli
from starter.cli import app
from testkit.file_server import serving
from workflows.contract import NON_RETRYABLE_FAILURES, FailureType

PAYLOAD = b"onnx-bytes" * 1000
WEIGHTS = b"safetensors-bytes" * 1000

UNPINNED: frozenset[str] = frozenset()
"""Weight sets with a weight file the catalogue has no sha256 for (none today: each was found in a public record)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def file_server() -> Iterator[str]:
    """Serves PAYLOAD at /model.onnx and 404 elsewhere."""
    with serving({"/model.onnx": PAYLOAD}) as served:
        yield served.base_url


@pytest.fixture
def catalogue_entry(monkeypatch: pytest.MonkeyPatch, file_server: str) -> ModelWeights:
    entry = ModelWeights(
        "test-model",
        "rembg",
        "Apache-2.0",
        UrlFile(f"{file_server}/model.onnx", "model.onnx", sha256(PAYLOAD), hashlib.md5(PAYLOAD).hexdigest()),
    )
    monkeypatch.setitem(CATALOGUE, entry.name, entry)
    return entry


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_fetch_downloads_checks_and_places_the_weights(tmp_path: Path, catalogue_entry: ModelWeights) -> None:
    folder = weights.fetch(tmp_path, catalogue_entry.name)

    assert folder == tmp_path / "test-model" and (folder / "model.onnx").read_bytes() == PAYLOAD
    assert weights.is_present(tmp_path, catalogue_entry)
    assert weights.require(tmp_path, "test-model", must_contain="model.onnx") == folder
    assert [p.name for p in tmp_path.iterdir()] == ["test-model"], "no staging folder is left behind"


def test_a_checksum_mismatch_leaves_nothing(
    tmp_path: Path, catalogue_entry: ModelWeights, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = catalogue_entry.source
    assert isinstance(source, UrlFile)
    monkeypatch.setitem(
        CATALOGUE, "test-model", ModelWeights("test-model", "rembg", "x", UrlFile(source.url, "model.onnx", "0" * 64))
    )
    with pytest.raises(FetchError, match="does not match") as caught:
        weights.fetch(tmp_path, "test-model")
    assert f"sha256 expected {'0' * 64}, actual {sha256(PAYLOAD)}" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_survives_a_bad_download(
    tmp_path: Path, catalogue_entry: ModelWeights, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = weights.fetch(tmp_path, catalogue_entry.name)
    source = catalogue_entry.source
    assert isinstance(source, UrlFile)
    bad = UrlFile(source.url, "model.onnx", sha256(PAYLOAD), md5="0" * 32)  # the sha256 matches, the md5 does not
    monkeypatch.setitem(CATALOGUE, "test-model", ModelWeights("test-model", "rembg", "x", bad))

    with pytest.raises(FetchError, match=f"md5 expected {'0' * 32}, actual {hashlib.md5(PAYLOAD).hexdigest()}"):
        weights.fetch(tmp_path, "test-model")

    assert (folder / "model.onnx").read_bytes() == PAYLOAD
    assert [p.name for p in tmp_path.iterdir()] == ["test-model"]


def test_an_md5_pin_is_checked(tmp_path: Path, file_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"{file_server}/model.onnx"
    good = ModelWeights("md5-model", "rembg", "x", UrlFile(url, "model.onnx", md5=hashlib.md5(PAYLOAD).hexdigest()))
    bad = ModelWeights("md5-bad", "rembg", "x", UrlFile(url, "model.onnx", md5="0" * 32))
    monkeypatch.setitem(CATALOGUE, good.name, good)
    monkeypatch.setitem(CATALOGUE, bad.name, bad)

    assert (weights.fetch(tmp_path, good.name) / "model.onnx").read_bytes() == PAYLOAD
    with pytest.raises(FetchError, match=r"does not match the catalogue: md5 expected 0{32}, actual [0-9a-f]{32}"):
        weights.fetch(tmp_path, bad.name)
    assert [p.name for p in tmp_path.iterdir()] == ["md5-model"], "the mismatch leaves nothing behind"


def test_no_network_is_said_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{closed_port()}/model.onnx"
    monkeypatch.setitem(CATALOGUE, "offline", ModelWeights("offline", "rembg", "x", UrlFile(url, "model.onnx")))
    with pytest.raises(FetchError, match=r"no network: could not reach 127\.0\.0\.1"):
        weights.fetch(tmp_path, "offline", timeout_s=2)
    assert list(tmp_path.iterdir()) == []


def test_an_http_error_is_reported(tmp_path: Path, file_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = ModelWeights("gone", "rembg", "x", UrlFile(f"{file_server}/gone.onnx", "gone.onnx"))
    monkeypatch.setitem(CATALOGUE, "gone", entry)
    with pytest.raises(FetchError, match="answered 404"):
        weights.fetch(tmp_path, "gone")


def test_unknown_names_list_the_catalogue(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="unknown weights 'nope'; known: birefnet-general"):
        weights.fetch(tmp_path, "nope")


def test_missing_weights_name_the_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(WeightsMissingError, match="run `popcon models fetch birefnet-general`"):
        weights.require(tmp_path, "birefnet-general", must_contain="config.json")
    with pytest.raises(WeightsMissingError, match="set POPCON_MODEL_DIR"):
        weights.require(None, "birefnet-general")


@pytest.mark.slow  # huggingface_hub tries the network for about 20 s before it gives up
def test_hub_snapshots_without_network_fail_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(CATALOGUE, "hub", ModelWeights("hub", "birefnet", "MIT", HubSnapshot("org/repo", "0" * 40)))
    with pytest.raises(FetchError, match="org/repo"):
        weights.fetch(tmp_path, "hub")
    assert list(tmp_path.iterdir()) == []


def _is_digest(value: str | None, algorithm: str, hex_digits: int) -> bool:
    """A real ``algorithm`` digest: lower-case hex of the right length, not a placeholder or the empty file's."""
    return (
        value is not None
        and re.fullmatch(f"[0-9a-f]{{{hex_digits}}}", value) is not None
        and len(set(value)) > 1
        and value != hashlib.new(algorithm, b"").hexdigest()
    )


def test_every_catalogue_entry_is_pinned() -> None:
    unpinned = set()
    seen: dict[str, str] = {}
    for entry in CATALOGUE.values():
        source = entry.source
        if isinstance(source, HubSnapshot):
            assert re.fullmatch("[0-9a-f]{40}", source.revision), f"{entry.name} is pinned to a commit"
            assert source.sha256, f"{entry.name} lists its weight files"
            for filename in source.sha256:
                assert filename.endswith(weights.WEIGHT_SUFFIXES), f"{entry.name}: {filename} is a weight file"
                assert any(fnmatch.fnmatch(filename, pattern) for pattern in source.allow_patterns), (
                    f"{entry.name}: {filename} is fetched"
                )
        else:
            assert source.url.startswith("https://"), entry.name
            assert source.md5 is None or _is_digest(source.md5, "md5", 32), f"{entry.name}: md5"
        for pin in weights.file_pins(entry):
            assert pin.sha256 is None or _is_digest(pin.sha256, "sha256", 64), f"{entry.name}: {pin.filename}"
            if pin.sha256 is None:
                unpinned.add(entry.name)
            else:
                assert seen.setdefault(pin.sha256, entry.name) == entry.name, f"{entry.name}: a copied digest"
    assert unpinned == UNPINNED, "every weight file carries its sha256 (and a pinned one leaves UNPINNED)"
    assert {weights.pin_status(entry) for entry in CATALOGUE.values() if entry.name not in UNPINNED} == {"sha256"}


# --- verification at load ------------------------------------------------------------------------------------------


@pytest.fixture
def snapshot_entry(monkeypatch: pytest.MonkeyPatch) -> ModelWeights:
    """A Hub weight set pinning one weight file, as the BiRefNet and ViTMatte entries do."""
    entry = ModelWeights(
        "hub-model", "birefnet", "MIT", HubSnapshot("org/repo", "0" * 40, sha256={"model.safetensors": sha256(WEIGHTS)})
    )
    monkeypatch.setitem(CATALOGUE, entry.name, entry)
    return entry


def write_snapshot(folder: Path, payload: bytes = WEIGHTS) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "birefnet.py").write_text("# model code")
    (folder / "model.safetensors").write_bytes(payload)
    return folder


def flip_a_byte(path: Path) -> None:
    """Change one byte in place (same size), and move the mtime on so a test does not depend on clock granularity."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_good_digests_pass(tmp_path: Path, snapshot_entry: ModelWeights, catalogue_entry: ModelWeights) -> None:
    write_snapshot(tmp_path / "hub-model")
    (tmp_path / "test-model").mkdir()
    (tmp_path / "test-model" / "model.onnx").write_bytes(PAYLOAD)

    assert weights.require(tmp_path, "hub-model", must_contain="config.json") == tmp_path / "hub-model"
    assert weights.require(tmp_path, "test-model", must_contain="model.onnx") == tmp_path / "test-model"


def test_a_flipped_byte_is_refused_naming_file_and_digests(tmp_path: Path, snapshot_entry: ModelWeights) -> None:
    folder = write_snapshot(tmp_path / "hub-model")
    flip_a_byte(folder / "model.safetensors")
    actual = sha256((folder / "model.safetensors").read_bytes())

    with pytest.raises(WeightsMismatchError) as caught:
        weights.require(tmp_path, "hub-model", must_contain="config.json")

    message = str(caught.value)
    assert str(folder / "model.safetensors") in message
    assert f"sha256 expected {sha256(WEIGHTS)}, actual {actual}" in message
    assert "run `popcon models fetch hub-model`" in message
    assert isinstance(caught.value, WeightsMissingError), "the engines' existing handling applies"
    assert caught.value.failure_type is FailureType.WEIGHTS_MISSING
    assert caught.value.failure_type in NON_RETRYABLE_FAILURES and not caught.value.failure_type.retryable


def test_a_damaged_url_file_is_refused(tmp_path: Path, catalogue_entry: ModelWeights) -> None:
    (tmp_path / "test-model").mkdir()
    (tmp_path / "test-model" / "model.onnx").write_bytes(PAYLOAD[:-1])  # truncated
    with pytest.raises(WeightsMismatchError, match=r"model\.onnx does not match the catalogue: sha256 expected "):
        weights.require(tmp_path, "test-model", must_contain="model.onnx")


def test_a_listed_weight_file_that_is_missing_is_refused(tmp_path: Path, snapshot_entry: ModelWeights) -> None:
    folder = write_snapshot(tmp_path / "hub-model")
    (folder / "model.safetensors").unlink()
    with pytest.raises(WeightsMissingError, match=r"lack model\.safetensors: run `popcon models fetch hub-model`"):
        weights.require(tmp_path, "hub-model", must_contain="config.json")


def test_a_weight_file_the_catalogue_does_not_pin_is_refused(tmp_path: Path, snapshot_entry: ModelWeights) -> None:
    """transformers prefers model.safetensors to pytorch_model.bin: a stray weight file must not load unverified."""
    folder = write_snapshot(tmp_path / "hub-model")
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    (folder / "notes.txt").write_text("not weights")
    with pytest.raises(WeightsMismatchError, match=r"does not pin \(pytorch_model\.bin; it pins model\.safetensors\)"):
        weights.require(tmp_path, "hub-model", must_contain="config.json")


def test_a_folder_is_hashed_once_per_process_until_it_changes(
    tmp_path: Path, snapshot_entry: ModelWeights, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[str] = []
    file_digest = hashlib.file_digest

    def counting(stream: Any, algorithm: str) -> Any:
        hashed.append(algorithm)
        return file_digest(stream, algorithm)

    monkeypatch.setattr(hashlib, "file_digest", counting)
    folder = write_snapshot(tmp_path / "hub-model")

    for _ in range(3):
        weights.require(tmp_path, "hub-model", must_contain="config.json")
    assert hashed == ["sha256"], "a good folder is hashed once"

    flip_a_byte(folder / "model.safetensors")
    for _ in range(3):
        with pytest.raises(WeightsMismatchError):
            weights.require(tmp_path, "hub-model", must_contain="config.json")
    assert hashed == ["sha256"] * 2, "a changed file is hashed again, and a refused one once"

    (folder / "model.safetensors").write_bytes(WEIGHTS)  # repaired (its ctime moves on)
    os.utime(folder / "model.safetensors", ns=(0, 0))
    weights.require(tmp_path, "hub-model", must_contain="config.json")
    assert hashed == ["sha256"] * 3


def test_unpinned_weights_load_but_are_listed_as_unpinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    unpinned = ModelWeights("bare", "sam2", "x", UrlFile("https://example.org/bare.pt", "bare.pt"))
    md5_only = ModelWeights("old", "rembg", "x", UrlFile("https://example.org/old.onnx", "old.onnx", md5="0" * 32))
    no_list = ModelWeights("hub-bare", "vitmatte", "x", HubSnapshot("org/bare", "0" * 40))
    for entry in (unpinned, md5_only, no_list):
        monkeypatch.setitem(CATALOGUE, entry.name, entry)
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "bare.pt").write_bytes(b"anything")
    write_snapshot(tmp_path / "hub-bare")

    with caplog.at_level("WARNING", logger=weights.__name__):
        assert weights.require(tmp_path, "bare", must_contain="bare.pt") == tmp_path / "bare"
    assert "weights 'bare' are unpinned" in caplog.text
    assert weights.require(tmp_path, "hub-bare", must_contain="config.json") == tmp_path / "hub-bare"

    assert weights.pin_status(unpinned) == "UNPINNED: bare.pt"
    assert weights.pin_status(md5_only) == "UNPINNED: old.onnx (md5 only)"
    assert weights.pin_status(no_list) == "UNPINNED: *"
    listed = fetch_weights.catalogue_lines()
    assert "bare\tsam2\tUNPINNED: bare.pt" in listed and "rembg-u2net\trembg\tsha256" in listed
    monkeypatch.setenv("POPCON_MODEL_DIR", str(tmp_path))
    monkeypatch.setattr(cli, "console", Console(width=250))
    table = CliRunner().invoke(app, ["models", "list"]).output
    assert [line.split("│")[5].strip() for line in table.splitlines() if "│ bare " in line] == ["UNPINNED: bare.pt"]

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "old.onnx").write_bytes(b"anything")
    with pytest.raises(
        WeightsMismatchError, match=f"md5 expected {'0' * 32}, actual {hashlib.md5(b'anything').hexdigest()}"
    ):
        weights.require(tmp_path, "old", must_contain="old.onnx")


def test_the_gpu_image_can_list_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert fetch_weights.main(["--list"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == fetch_weights.catalogue_lines() and len(printed) == len(CATALOGUE)


# --- Hub snapshots --------------------------------------------------------------------------------------------------


@pytest.fixture
def stand_in_hub(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """``huggingface_hub.snapshot_download`` replaced by one that writes these files (name -> bytes) to local_dir."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    files = {"config.json": b"{}", "birefnet.py": b"# code", "model.safetensors": WEIGHTS}

    def snapshot_download(repo_id: str, *, revision: str, local_dir: Path, allow_patterns: list[str]) -> str:
        for name, data in files.items():
            if any(fnmatch.fnmatch(name, pattern) for pattern in allow_patterns):
                (Path(local_dir) / name).write_bytes(data)
        return str(local_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return files


def test_a_snapshot_is_fetched_and_verified(
    tmp_path: Path, snapshot_entry: ModelWeights, stand_in_hub: dict[str, bytes]
) -> None:
    folder = weights.fetch(tmp_path, "hub-model")

    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    assert weights.require(tmp_path, "hub-model", must_contain="config.json") == folder
    assert [p.name for p in tmp_path.iterdir()] == ["hub-model"]


def test_a_snapshot_with_a_bad_weight_file_leaves_nothing(
    tmp_path: Path, snapshot_entry: ModelWeights, stand_in_hub: dict[str, bytes]
) -> None:
    stand_in_hub["model.safetensors"] = WEIGHTS[:-1] + b"X"
    with pytest.raises(FetchError) as caught:
        weights.fetch(tmp_path, "hub-model")
    assert (
        f"org/repo@{'0' * 40}: model.safetensors does not match the catalogue: sha256 expected {sha256(WEIGHTS)}, "
        f"actual {sha256(stand_in_hub['model.safetensors'])}"
    ) in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_snapshot_without_its_weight_file_is_refused(
    tmp_path: Path, snapshot_entry: ModelWeights, stand_in_hub: dict[str, bytes]
) -> None:
    del stand_in_hub["model.safetensors"]
    with pytest.raises(FetchError, match=r"has no model\.safetensors, which the catalogue pins"):
        weights.fetch(tmp_path, "hub-model")
    assert list(tmp_path.iterdir()) == []


def test_cli_lists_and_fetches(tmp_path: Path, catalogue_entry: ModelWeights, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPCON_MODEL_DIR", str(tmp_path))
    runner = CliRunner()

    fetched = runner.invoke(app, ["models", "fetch", "test-model", "nope"])
    listed = runner.invoke(app, ["models", "list"])

    assert fetched.exit_code == 1, "one of the names failed"
    assert "test-model:" in fetched.output and "unknown weights 'nope'" in fetched.output
    assert (tmp_path / "test-model" / "model.onnx").exists()
    assert "test-model" in listed.output and "birefnet-general" in listed.output
    assert "sha256" in listed.output and "pinned" in listed.output and "UNPINNED" not in listed.output


def test_the_toonout_entry_is_the_published_checkpoint_at_a_pinned_revision() -> None:
    entry = CATALOGUE["birefnet-toonout"]
    source = entry.source

    assert entry.engine == "birefnet" and entry.licence.startswith("MIT")
    assert isinstance(source, UrlFile) and source.filename == "birefnet_finetuned_toonout.pth"
    assert re.fullmatch(
        r"https://huggingface\.co/joelseytre/toonout/resolve/[0-9a-f]{40}/birefnet_finetuned_toonout\.pth", source.url
    )
    assert source.sha256 is not None and _is_digest(source.sha256, "sha256", 64) and source.md5 is None
    assert weights.pin_status(entry) == "sha256"
    code = CATALOGUE["birefnet-general"]  # the code its state dict loads into
    assert code.engine == "birefnet" and isinstance(code.source, HubSnapshot)
    assert {"birefnet.py", "BiRefNet_config.py", "config.json"} <= set(code.source.allow_patterns)
