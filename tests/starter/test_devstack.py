"""The embedded stack: dev server + both workers as background processes, restartable over its own database, with
the dev server and its Web UI on loopback."""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

from core.connection import connect
from starter.client import EmojiSetClient
from starter.devstack import DevStack, DevStackSettings, services, ui_exposure_warning
from testkit.stack import wait_for_phase
from workflows import search_attributes as sa
from workflows.contract import EmojiSetInput, Phase, ReviewPolicy


def _popcon(*args: str) -> str:
    """Run the ``popcon`` CLI (its environment is the test's ``POPCON_*``); returns what it printed."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "popcon"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def stack_settings(tmp_path: Path) -> DevStackSettings:
    port = free_port()
    return DevStackSettings(
        _env_file=None,
        data_dir=tmp_path / "data",
        dev_server_port=port,
        dev_server_ui_port=free_port(),
        temporal_address=f"127.0.0.1:{port}",
    )


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_dev_server_and_its_web_ui_listen_on_loopback_by_default(stack_settings: DevStackSettings) -> None:
    server = services(stack_settings)[0].command

    assert (option(server, "--ip"), option(server, "--ui-ip")) == ("127.0.0.1", "127.0.0.1")
    assert ui_exposure_warning(stack_settings) is None


@pytest.mark.parametrize("ui_ip", ["localhost", "::1", "127.0.0.2"])
def test_any_loopback_address_is_no_exposure(stack_settings: DevStackSettings, ui_ip: str) -> None:
    assert ui_exposure_warning(stack_settings.model_copy(update={"dev_server_ui_ip": ui_ip})) is None


async def test_a_web_ui_beyond_loopback_is_warned_about_when_the_server_starts(
    stack_settings: DevStackSettings, caplog: pytest.LogCaptureFixture
) -> None:
    exposed = stack_settings.model_copy(update={"dev_server_ui_ip": "0.0.0.0"})
    assert option(services(exposed)[0].command, "--ui-ip") == "0.0.0.0"
    caplog.set_level(logging.WARNING, "starter.devstack")
    with socket.socket() as taken:
        # The frontend's port is taken, so the start stops before it spawns anything: the warning comes first.
        taken.bind(("127.0.0.1", exposed.dev_server_port))
        taken.listen()
        with pytest.raises(RuntimeError, match="is taken by another process"):
            await DevStack(exposed).start()

    [warning] = caplog.messages
    assert f"Web UI listens on 0.0.0.0:{exposed.dev_server_ui_port}" in warning
    assert "no authentication and answers any Host header" in warning and "Keep it on loopback" in warning


@pytest.mark.slow
async def test_stack_starts_runs_a_set_and_survives_a_restart(
    stack_settings: DevStackSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in stack_settings.model_dump(mode="json").items():
        if isinstance(value, str | int) and value != "":
            monkeypatch.setenv(f"POPCON_{key.upper()}", str(value))
    stack = DevStack(stack_settings)
    try:
        assert await stack.start() == ["temporal", "orchestration-worker", "gpu-worker"]
        assert await stack.start() == [], "starting again is a no-op"
        sets = EmojiSetClient(await connect(stack_settings))
        request = EmojiSetInput(
            character_prompt="a teal ghost",
            actions=["sleep"],
            frames_per_emoji=2,
            clip_seconds=1,
            clip_fps=8,
            image_size=64,
            review=ReviewPolicy(start_frames="auto"),
        )
        set_id = await sets.start(request)
        await wait_for_phase(sets, set_id, Phase.AWAITING_REVIEW)
        status = _popcon("deploy", "status")
        assert "popcon (orchestration): current dev" in status and "popcon-gpu (gpu): current dev" in status
        assert re.search(r"dev\s+.\s+current\s+.\s+1\b", status), f"the waiting set is pinned to dev: {status}"
        assert "woke 0 set(s) on builds other than the current one (dev)" in _popcon("deploy", "wake")
        assert "popcon.dev is current" in _popcon("deploy", "promote", "--orchestration", "dev")

        assert set(stack.stop()) == {"temporal", "orchestration-worker", "gpu-worker"}
        assert all(pid is None for pid in stack.status().values())
        logs = (stack.log_dir / "gpu-worker.log").read_text()
        assert '"msg": "worker stopped"' in logs, "SIGTERM shuts the worker down gracefully"

        await stack.start()
        client = await connect(stack_settings)
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
        assert {key.name for key in sa.ALL} <= set(listed.custom_attributes)
        sets = EmojiSetClient(client)
        assert (await sets.state(set_id)).phase is Phase.AWAITING_REVIEW, "the set survived the restart"
        await sets.approve(set_id)
        assert (await sets.result(set_id)).status == "completed"
    finally:
        stack.stop()
        assert os.path.exists(stack_settings.data_dir / "temporal.sqlite")
