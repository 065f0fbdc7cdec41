"""The weights folder: offline-first lookups, and `popcon models fetch` against a real HTTP server on loopback."""

from __future__ import annotations

import hashlib
import http.server
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpu_activity_worker import weights
from gpu_activity_worker.weights import CATALOGUE, FetchError, HubSnapshot, ModelWeights, UrlFile, WeightsMissingError
from starter.cli import app

PAYLOAD = b"onnx-bytes" * 1000

UNPINNED = {"sam2.1-hiera-tiny", "sam2.1-hiera-small", "sam2.1-hiera-base-plus", "sam2.1-hiera-large"}
"""URL weight sets without a checksum: Meta publishes none for the SAM 2.1 checkpoints (not in the sam2 repository's
checkpoints/download_ckpts.sh, not in the sam2 package). Any other URL entry must carry one."""


@pytest.fixture(scope="module")
def file_server() -> Iterator[str]:
    """Serves PAYLOAD at /model.onnx and 404 elsewhere."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/model.onnx":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def catalogue_entry(monkeypatch: pytest.MonkeyPatch, file_server: str) -> ModelWeights:
    entry = ModelWeights(
        "test-model",
        "rembg",
        "Apache-2.0",
        UrlFile(f"{file_server}/model.onnx", "model.onnx", hashlib.sha256(PAYLOAD).hexdigest()),
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
    with pytest.raises(FetchError, match="does not match"):
        weights.fetch(tmp_path, "test-model")
    assert list(tmp_path.iterdir()) == []


def test_an_md5_pin_is_checked(tmp_path: Path, file_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"{file_server}/model.onnx"
    good = ModelWeights("md5-model", "rembg", "x", UrlFile(url, "model.onnx", md5=hashlib.md5(PAYLOAD).hexdigest()))
    bad = ModelWeights("md5-bad", "rembg", "x", UrlFile(url, "model.onnx", md5="0" * 32))
    monkeypatch.setitem(CATALOGUE, good.name, good)
    monkeypatch.setitem(CATALOGUE, bad.name, bad)

    assert (weights.fetch(tmp_path, good.name) / "model.onnx").read_bytes() == PAYLOAD
    with pytest.raises(FetchError, match=r"md5 [0-9a-f]{32} does not match"):
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
    for entry in CATALOGUE.values():
        source = entry.source
        if isinstance(source, HubSnapshot):
            assert re.fullmatch("[0-9a-f]{40}", source.revision), f"{entry.name} is pinned to a commit"
            continue
        assert source.url.startswith("https://"), entry.name
        assert source.sha256 is None or _is_digest(source.sha256, "sha256", 64), f"{entry.name}: sha256"
        assert source.md5 is None or _is_digest(source.md5, "md5", 32), f"{entry.name}: md5"
        if source.sha256 is None and source.md5 is None:
            unpinned.add(entry.name)
    assert unpinned == UNPINNED, "every URL entry carries a checksum (and a pinned one leaves UNPINNED)"


def test_cli_lists_and_fetches(tmp_path: Path, catalogue_entry: ModelWeights, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPCON_MODEL_DIR", str(tmp_path))
    runner = CliRunner()

    fetched = runner.invoke(app, ["models", "fetch", "test-model", "nope"])
    listed = runner.invoke(app, ["models", "list"])

    assert fetched.exit_code == 1, "one of the names failed"
    assert "test-model:" in fetched.output and "unknown weights 'nope'" in fetched.output
    assert (tmp_path / "test-model" / "model.onnx").exists()
    assert "test-model" in listed.output and "birefnet-general" in listed.output
