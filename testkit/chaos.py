"""Chaos harness: the real local stack (dev server + both worker processes), faults on its processes and its
artifact store, and what a run left behind (artifacts, history statistics, stalls).

* :class:`ChaosStack` is :class:`~starter.devstack.DevStack` on a throwaway data folder and free ports, with the
  workers configured through ``POPCON_*`` variables (CPU ``classical`` matting, the ``procedural`` generator) and
  kill / restart / pause / resume of each process.
* Strike points read the set's workflow (pending activities from ``describe``, the phase from ``get_state``), so a
  fault lands while the work it should hit is running, never after a guessed sleep.
* :func:`snapshot` maps every file under the set's prefix to its sha256 (hidden temporary files and empty folders
  included), :func:`compare` lists what is missing, extra or different from a fault-free run.
* :func:`history_stats` counts activities scheduled and retried per type; :func:`recovery` measures how long the
  work a fault interrupted took to run again, from history event times.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError

import core.artifacts
from core.connection import connect
from core.settings import PROJECT_DIR
from starter.client import EmojiSetClient
from starter.devstack import DevStack, DevStackSettings, Service, process_alive
from workflows import keys
from workflows.contract import (
    ActivityName,
    EmojiSetInput,
    EmojiSetState,
    ExportTarget,
    ReviewPolicy,
)

SERVER = "temporal"
ORCHESTRATION = "orchestration-worker"
GPU = "gpu-worker"

SET_ID = "chaos-set"
"""Every run uses the same set id (each in its own stack and store), so its artifact keys match the baseline's."""


def chaos_request(seed: int = 7, *, image_size: int = 128, clip_seconds: float = 1.0) -> EmojiSetInput:
    """A small, fully automatic set: 2 actions, 4 frames each, 1 neighbour, 1 take, a fixed seed."""
    return EmojiSetInput(
        character_prompt="a round orange cat with a blue scarf",
        actions=["wave", "laugh"],
        frames_per_emoji=4,
        neighbours=1,
        takes_per_action=1,
        character_candidates=1,
        start_frame_candidates=1,
        clip_seconds=clip_seconds,
        clip_fps=12,
        image_size=image_size,
        matting_pipeline="classical",
        generator="procedural",
        seed=seed,
        review=ReviewPolicy.automatic(),
        export_targets=[ExportTarget.GENERIC],
    )


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range.

    A port the kernel hands out (a bind to port 0) is an ephemeral one: between this check and the server's own bind,
    the kernel may give it to an outgoing connection (seen in CI: a dev server's UI port taken, "address already in
    use"). Below that range the kernel gives nothing out by itself.
    """
    low = _ephemeral_ports_start()
    for _ in range(200):
        port = random.randrange(10_000, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port between 10000 and {low}")


def _ephemeral_ports_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _now() -> datetime:
    return datetime.now(UTC)


# --- Processes -----------------------------------------------------------------------------------------------------


class ChaosStack(DevStack):
    """The background stack on ``data_dir`` with free ports; its workers read only the ``POPCON_*`` variables set
    here (the caller's are dropped) and run in ``data_dir``, so no ``.env`` of the checkout applies.

    Args:
        data_dir: Database, logs and pid files.
        artifact_root: The artifact store's folder; ``None`` is ``<data_dir>/artifacts``.
        gpu_concurrency: Frame slots the GPU worker runs at once.
        env: More ``POPCON_*`` variables for the workers.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        artifact_root: Path | None = None,
        gpu_concurrency: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        port = free_port()
        super().__init__(
            DevStackSettings(
                _env_file=None,
                data_dir=data_dir,
                dev_server_port=port,
                dev_server_ui_port=free_port(),
                temporal_address=f"127.0.0.1:{port}",
            )
        )
        self.data_dir = data_dir.resolve()
        self.artifact_root = (artifact_root or self.data_dir / "artifacts").resolve()
        self.worker_env = {
            "POPCON_DATA_DIR": str(self.data_dir),
            "POPCON_ARTIFACT_ROOT": self.artifact_root.as_uri(),
            "POPCON_MODEL_DIR": str(self.data_dir / "models"),
            "POPCON_MATTING_DEVICE": "cpu",
            "POPCON_GPU_CONCURRENCY": str(gpu_concurrency),
            "POPCON_LOG_LEVEL": "INFO",
            **(env or {}),
        }
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self.events: list[tuple[datetime, str]] = []
        """What was done to the processes, when (in the diagnostics of a run that did not complete)."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.settings.dev_server_port}"

    async def connect(self) -> Client:
        return await connect(self.settings.model_copy(update={"temporal_address": self.address}))

    def _spawn(self, service: Service) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("POPCON_")}
        env.update(self.worker_env)
        env["POPCON_TEMPORAL_ADDRESS"] = self.address
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_DIR), env.get("PYTHONPATH")]))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{service.name}.log").open("ab") as log:
            log.write(f"--- {_now().isoformat()} spawn {service.name}\n".encode())
            log.flush()
            process = subprocess.Popen(
                service.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.data_dir,
                start_new_session=True,
            )
        self._pid_file(service.name).write_text(str(process.pid))
        self._processes[service.name] = process
        self.events.append((_now(), f"spawn {service.name} pid {process.pid}"))

    def _require_pid(self, name: str) -> int:
        pid = self.pid(name)
        if pid is None:
            raise RuntimeError(f"{name} is not running")
        return pid

    def send(self, name: str, sig: signal.Signals) -> int:
        """Send ``sig`` to the service ``name``; returns its pid."""
        pid = self._require_pid(name)
        os.kill(pid, sig)
        self.events.append((_now(), f"{sig.name} {name} pid {pid}"))
        return pid

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL, *, timeout_s: float = 30.0) -> datetime:
        """Send ``sig`` (SIGKILL: a crash; SIGTERM: a stop) and wait until the process is gone; returns when the
        signal was sent."""
        at = _now()
        pid = self.send(name, sig)
        process = self._processes.get(name)
        deadline = time.monotonic() + timeout_s
        while True:
            if process is not None and process.pid == pid:
                if process.poll() is not None:
                    break
            elif not process_alive(pid):
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + timeout_s
            time.sleep(0.02)
        self._pid_file(name).unlink(missing_ok=True)
        return at

    async def restart(self) -> datetime:
        """Start whatever is not running (a supervisor's restart); returns when it was started."""
        at = _now()
        await self.start()
        return at

    def pause(self, name: str) -> datetime:
        at = _now()
        self.send(name, signal.SIGSTOP)
        return at

    def resume(self, name: str) -> datetime:
        at = _now()
        self.send(name, signal.SIGCONT)
        return at

    def resume_all(self) -> None:
        """SIGCONT every running service (a no-op for those not stopped)."""
        for name in (GPU, ORCHESTRATION, SERVER):
            pid = self.pid(name)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def shutdown(self) -> None:
        """Stop everything: paused processes are resumed first, so they can exit."""
        self.resume_all()
        self.stop(timeout_s=15)
        for process in self._processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return f"({path} missing)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def logs(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def worker_starts(log: str, since: datetime) -> list[tuple[datetime, datetime | None]]:
    """(spawned, ready) for every start of a worker after ``since``, from its log: the spawn marker this harness
    writes and the worker's ``worker started`` line (None: it never got ready)."""
    starts: list[tuple[datetime, datetime | None]] = []
    for line in log.splitlines():
        if line.startswith("--- ") and " spawn " in line:
            spawned = datetime.fromisoformat(line.split()[1])
            if spawned >= since:
                starts.append((spawned, None))
        elif '"msg": "worker started"' in line and starts and starts[-1][1] is None:
            with contextlib.suppress(ValueError, IndexError):
                ready = datetime.fromisoformat(line.split('"ts": "', 1)[1].split('"', 1)[0])
                starts[-1] = (starts[-1][0], ready)
    return starts


# --- Strike points -------------------------------------------------------------------------------------------------


class StrikeMissed(AssertionError):
    """The moment to strike did not come (the work it waited for finished, or never started)."""


async def pending_activities(handle: WorkflowHandle[object, object]) -> list[PendingActivityInfo]:
    description = await handle.describe()
    return list(description.raw_description.pending_activities)


async def wait_for_running(
    handle: WorkflowHandle[object, object],
    activity: ActivityName,
    *,
    count: int = 1,
    min_attempt: int = 1,
    timeout_s: float = 120.0,
    poll_s: float = 0.05,
) -> list[PendingActivityInfo]:
    """Wait until at least ``count`` activities of type ``activity`` are running on a worker (pending, started, at
    attempt ``min_attempt`` or later); returns every such activity."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pending = await pending_activities(handle)
        except RPCError:
            pending = []
        running = [
            p
            for p in pending
            if p.activity_type.name == activity.value
            and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            and p.attempt >= min_attempt
        ]
        if len(running) >= count:
            return running
        if time.monotonic() > deadline:
            description = await handle.describe()
            raise StrikeMissed(
                f"no {count} running {activity.value} within {timeout_s:.0f} s (status {description.status}); "
                f"pending: {[(p.activity_type.name, p.state, p.attempt) for p in pending]}"
            )
        await asyncio.sleep(poll_s)


async def next_scheduled(
    handle: WorkflowHandle[object, object], activity: ActivityName, *, skip: set[str], timeout_s: float
) -> str:
    """The id of the first activity of type ``activity`` in the history that is not in ``skip``, waiting for it
    (the history is long-polled: the event shows within milliseconds of being written)."""
    try:
        async with asyncio.timeout(timeout_s):
            async for event in handle.fetch_history_events(wait_new_event=True):
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    attrs = event.activity_task_scheduled_event_attributes
                    if attrs.activity_type.name == activity.value and attrs.activity_id not in skip:
                        return attrs.activity_id
    except TimeoutError:
        raise StrikeMissed(f"no new {activity.value} was scheduled within {timeout_s:.0f} s") from None
    raise StrikeMissed(f"the workflow closed before any {activity.value} was scheduled")


async def freeze_running(
    stack: ChaosStack,
    handle: WorkflowHandle[object, object],
    activity: ActivityName,
    worker: str,
    *,
    timeout_s: float = 120.0,
) -> tuple[datetime, list[PendingActivityInfo]]:
    """Freeze ``worker`` (SIGSTOP) while it runs an activity of type ``activity``; returns when it was frozen and
    the activities it was running then.

    Some activities last a tenth of a second, too short to catch by polling: this waits for one to be scheduled
    (from the history), freezes the worker at once, and checks that an activity of that type is running there. If
    none is (it finished first, or waits for a free slot), the worker is resumed and the next one is waited for.
    The caller then kills the frozen worker: it dies in the middle of the activity.
    """
    deadline = time.monotonic() + timeout_s
    skip: set[str] = set()
    while True:
        activity_id = await next_scheduled(handle, activity, skip=skip, timeout_s=max(deadline - time.monotonic(), 0.1))
        at = stack.pause(worker)
        identity = f"{stack._require_pid(worker)}@"
        for _ in range(20):
            running = [
                p
                for p in await pending_activities(handle)
                if p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                and p.last_worker_identity.startswith(identity)
            ]
            if any(p.activity_type.name == activity.value for p in running):
                return at, running
            await asyncio.sleep(0.05)
        stack.resume(worker)
        skip.add(activity_id)
        if time.monotonic() > deadline:
            raise StrikeMissed(f"never caught {worker} running {activity.value}")


async def heartbeat_timeout_s(handle: WorkflowHandle[object, object], activity_id: str) -> float:
    """The heartbeat timeout the workflow scheduled activity ``activity_id`` with (0: none)."""
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_id == activity_id:
                return attrs.heartbeat_timeout.ToTimedelta().total_seconds()
    raise KeyError(activity_id)


async def wait_for_failed_attempt(
    handle: WorkflowHandle[object, object], activity: ActivityName, *, attempts: int = 1, timeout_s: float = 120.0
) -> PendingActivityInfo:
    """Wait until an activity of type ``activity`` has failed ``attempts`` times (its pending attempt is past them,
    with a last failure); returns it."""
    deadline = time.monotonic() + timeout_s
    while True:
        for pending in await pending_activities(handle):
            if (
                pending.activity_type.name == activity.value
                and pending.attempt > attempts
                and pending.HasField("last_failure")
            ):
                return pending
        if time.monotonic() > deadline:
            raise StrikeMissed(f"no {activity.value} failed {attempts} time(s) within {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


async def wait_for_state(
    sets: EmojiSetClient, set_id: str, done: Callable[[EmojiSetState], bool], *, timeout_s: float = 120.0
) -> EmojiSetState:
    """Poll ``get_state`` until ``done(state)``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(RPCError):
            state = await sets.state(set_id)
            if done(state):
                return state
        if time.monotonic() > deadline:
            raise StrikeMissed(f"the set did not reach the awaited state within {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


async def wait_until_closed(
    handle: WorkflowHandle[object, object], *, timeout_s: float
) -> WorkflowExecutionStatus | None:
    """Wait for the workflow to close, riding out server outages; returns its status (None: still running)."""
    deadline = time.monotonic() + timeout_s
    status = None
    while time.monotonic() < deadline:
        with contextlib.suppress(RPCError):
            status = (await handle.describe()).status
            if status is not WorkflowExecutionStatus.RUNNING:
                return status
        await asyncio.sleep(0.25)
    return status


async def wait_for_server(stack: ChaosStack, *, timeout_s: float = 30.0) -> Client:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await stack.connect()
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


# --- Artifact store ------------------------------------------------------------------------------------------------


def set_dir(root: Path, set_id: str = SET_ID) -> Path:
    return root / keys.set_prefix(set_id)


def snapshot(root: Path, set_id: str = SET_ID) -> dict[str, str]:
    """Every file under the set's prefix (hidden ones too) as relative path -> sha256; an empty folder is listed
    as ``path/`` -> ``"dir"``, a non-regular file as ``"special"``."""
    base = set_dir(root, set_id)
    mapping: dict[str, str] = {}
    if not base.exists():
        return mapping
    for folder, dirs, files in os.walk(base):
        here = Path(folder)
        if not dirs and not files and here != base:
            mapping[f"{here.relative_to(base).as_posix()}/"] = "dir"
        for name in files:
            path = here / name
            rel = path.relative_to(base).as_posix()
            mapping[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "special"
    return mapping


@dataclass(frozen=True)
class SnapshotDiff:
    missing: list[str]
    extra: list[str]
    changed: list[str]

    @property
    def identical(self) -> bool:
        return not (self.missing or self.extra or self.changed)

    def describe(self) -> str:
        parts = []
        for what, paths in (("missing", self.missing), ("extra", self.extra), ("changed", self.changed)):
            if paths:
                parts.append(f"{what} ({len(paths)}): {', '.join(paths[:12])}{' ...' if len(paths) > 12 else ''}")
        return "; ".join(parts) or "identical"


def compare(baseline: dict[str, str], run: dict[str, str]) -> SnapshotDiff:
    return SnapshotDiff(
        missing=sorted(set(baseline) - set(run)),
        extra=sorted(set(run) - set(baseline)),
        changed=sorted(path for path in set(baseline) & set(run) if baseline[path] != run[path]),
    )


def artifact_path(root: Path, key: str) -> Path:
    return root / key


@contextlib.contextmanager
def blocked_key(root: Path, key: str) -> Iterator[Path]:
    """A directory at the exact path of an artifact not yet written: the store's rename onto it fails (EISDIR)
    until the block is lifted. Running as root, permissions would not stop the write."""
    path = artifact_path(root, key)
    if path.exists():
        raise StrikeMissed(f"{key} is written already: too late to block it")
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.rmdir()


def leave_partial_write(root: Path, key: str, data: bytes = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR") -> Path:
    """A truncated temporary file beside ``key``, named as :meth:`~core.artifacts.FileArtifactStore.put` names its
    own (``.<name>.<random>`` plus the store's suffix, if it has one): what a writer killed mid-write leaves."""
    path = artifact_path(root, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = getattr(core.artifacts, "PARTIAL", "")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return Path(tmp)


# --- History -------------------------------------------------------------------------------------------------------


def _time(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


@dataclass
class HistoryStats:
    """Per activity type: how many were scheduled, and how many ran more than one attempt."""

    scheduled: Counter[str] = field(default_factory=Counter)
    retried: Counter[str] = field(default_factory=Counter)
    attempts: Counter[str] = field(default_factory=Counter)
    workflow_task_timeouts: int = 0
    workflow_task_failures: int = 0
    started_at: datetime | None = None
    first_task_at: datetime | None = None
    closed_at: datetime | None = None
    events: int = 0

    @property
    def makespan_s(self) -> float:
        """From the first workflow task (the workers are up: their start-up is not the set's) to the close."""
        start = self.first_task_at or self.started_at
        assert start is not None and self.closed_at is not None
        return (self.closed_at - start).total_seconds()

    def retried_summary(self) -> str:
        return ", ".join(f"{name} x{n}" for name, n in sorted(self.retried.items())) or "none"


def history_stats(events: list[HistoryEvent]) -> HistoryStats:
    stats = HistoryStats(events=len(events))
    types: dict[int, str] = {}
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            stats.started_at = stats.started_at or _time(event)
        elif kind in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        ):
            stats.closed_at = _time(event)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            types[event.event_id] = name
            stats.scheduled[name] += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            name = types.get(attrs.scheduled_event_id, "?")
            stats.attempts[name] += attrs.attempt
            if attrs.attempt > 1:
                stats.retried[name] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            stats.first_task_at = stats.first_task_at or _time(event)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            stats.workflow_task_timeouts += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            stats.workflow_task_failures += 1
    return stats


@dataclass(frozen=True)
class Recovery:
    """How long after a fault the work it interrupted ran again.

    ``activities_s``: until the last activity in flight at the fault was running again (its final attempt started
    on a worker) or, when it survived without a retry, until its result was recorded. ``workflow_s``: until the
    first workflow task after the fault completed, counted from when it was scheduled (or from the fault, if it was
    scheduled before).
    """

    activities_s: float | None
    workflow_s: float | None
    detail: str

    @property
    def stall_s(self) -> float:
        return max(value for value in (self.activities_s, self.workflow_s, 0.0) if value is not None)


def recovery(events: list[HistoryEvent], fault_at: datetime, in_flight: Iterable[str]) -> Recovery:
    """See :class:`Recovery`. ``in_flight`` are the ids of the activities running when the fault struck."""
    lost = set(in_flight)
    scheduled: dict[int, str] = {}
    names: dict[str, str] = {}
    back: dict[str, tuple[datetime, str]] = {}
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_id
            names[attrs.activity_id] = attrs.activity_type.name
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            activity_id = scheduled.get(started.scheduled_event_id, "")
            if activity_id in lost and started.attempt > 1 and _time(event) > fault_at:
                back[activity_id] = (_time(event), f"attempt {started.attempt} started")
        elif kind in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        ):
            scheduled_id = (
                event.activity_task_completed_event_attributes.scheduled_event_id
                or event.activity_task_failed_event_attributes.scheduled_event_id
                or event.activity_task_timed_out_event_attributes.scheduled_event_id
            )
            activity_id = scheduled.get(scheduled_id, "")
            if activity_id in lost and activity_id not in back:
                back[activity_id] = (_time(event), "result recorded")
    activities_s = None
    detail = []
    if back:
        activity_id, (at, how) = max(back.items(), key=lambda item: item[1][0])
        activities_s = (at - fault_at).total_seconds()
        detail.append(f"{names.get(activity_id, '?')} {activity_id}: {how} {activities_s:.1f} s after the fault")
    timeouts = [
        _timeout_name(event.workflow_task_timed_out_event_attributes.timeout_type)
        for event in events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT and _time(event) >= fault_at
    ]
    if timeouts:
        detail.append(f"workflow task timeouts after the fault: {', '.join(timeouts)}")
    workflow_s = None
    first_scheduled: datetime | None = None
    for event in events:
        if _time(event) < fault_at and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            first_scheduled = None
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED and first_scheduled is None:
            first_scheduled = _time(event)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and _time(event) >= fault_at:
            start = max(first_scheduled or fault_at, fault_at)
            workflow_s = (_time(event) - start).total_seconds()
            detail.append(f"first workflow task after the fault took {workflow_s:.1f} s")
            break
    return Recovery(activities_s=activities_s, workflow_s=workflow_s, detail="; ".join(detail))


def _timeout_name(value: int) -> str:
    """``SCHEDULE_TO_START`` (a sticky queue nobody polls) or ``START_TO_CLOSE`` (a task its worker never
    finished)."""
    return TimeoutType.Name(value).removeprefix("TIMEOUT_TYPE_")  # type: ignore[arg-type]


def excerpt(events: list[HistoryEvent], since: datetime, *, limit: int = 40) -> str:
    """A readable slice of the history from ``since``: time, event type, activity type / attempt / identity."""
    names: dict[int, str] = {}
    lines: list[str] = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            names[event.event_id] = f"{attrs.activity_type.name}#{attrs.activity_id}"
        if _time(event) < since or len(lines) >= limit:
            continue
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        extra = ""
        if event.HasField("activity_task_started_event_attributes"):
            attrs_s = event.activity_task_started_event_attributes
            extra = f"{names.get(attrs_s.scheduled_event_id, '?')} attempt {attrs_s.attempt} by {attrs_s.identity}"
        elif event.HasField("activity_task_scheduled_event_attributes"):
            extra = names.get(event.event_id, "")
        elif event.HasField("activity_task_completed_event_attributes"):
            extra = names.get(event.activity_task_completed_event_attributes.scheduled_event_id, "?")
        elif event.HasField("workflow_task_timed_out_event_attributes"):
            extra = _timeout_name(event.workflow_task_timed_out_event_attributes.timeout_type)
        elif event.HasField("workflow_task_completed_event_attributes"):
            extra = event.workflow_task_completed_event_attributes.identity
        lines.append(f"{_time(event).strftime('%H:%M:%S.%f')[:-3]} {event.event_id:>4} {kind} {extra}")
    return "\n".join(lines)


# --- Runs ----------------------------------------------------------------------------------------------------------


@dataclass
class ChaosRun:
    """A set running on its own stack, handed to a fault plan."""

    stack: ChaosStack
    sets: EmojiSetClient
    handle: WorkflowHandle[object, object]
    set_id: str = SET_ID

    @property
    def root(self) -> Path:
        return self.stack.artifact_root


@dataclass
class Fault:
    """What a fault plan did: when the fault struck, which activities were in flight then, notes for the report."""

    name: str
    at: datetime
    in_flight: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    measured: bool = True
    """Whether a stall means anything: False for a fault that interrupts nothing running (it is only cleaned up)."""


FaultPlan = Callable[[ChaosRun], Coroutine[Any, Any, Fault]]


@dataclass
class Outcome:
    """A finished (or stuck) run: how it ended, what it stored, its history."""

    status: WorkflowExecutionStatus | None
    artifacts: dict[str, str]
    events: list[HistoryEvent]
    stats: HistoryStats
    fault: Fault | None
    fault_error: BaseException | None
    diagnostics: str
    wall_s: float
    logs: dict[str, str] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.status is WorkflowExecutionStatus.COMPLETED

    def restarts(self) -> list[str]:
        """How long each worker restarted after the fault took to be ready, from its log."""
        if self.fault is None:
            return []
        notes = []
        for name in (ORCHESTRATION, GPU):
            for spawned, ready in worker_starts(self.logs.get(name, ""), self.fault.at):
                took = "never ready" if ready is None else f"ready {(ready - spawned).total_seconds():.1f} s later"
                notes.append(
                    f"{name} restarted {(spawned - self.fault.at).total_seconds():.1f} s after the fault, {took}"
                )
        return notes

    def recovery(self) -> Recovery | None:
        if self.fault is None or not self.fault.measured:
            return None
        return recovery(self.events, self.fault.at, self.fault.in_flight)


async def in_flight(handle: WorkflowHandle[object, object], *, queue_types: Iterable[str] | None = None) -> list[str]:
    """Ids of the activities running on a worker now (of ``queue_types`` only, if given)."""
    wanted = None if queue_types is None else set(queue_types)
    return [
        p.activity_id
        for p in await pending_activities(handle)
        if p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        and (wanted is None or p.activity_type.name in wanted)
    ]


async def run_set(
    data_dir: Path,
    plan: FaultPlan | None = None,
    *,
    store: Path | None = None,
    request: EmojiSetInput | None = None,
    timeout_s: float = 300.0,
    gpu_concurrency: int = 1,
) -> Outcome:
    """Start a stack on ``data_dir``, run one set on it with ``plan`` striking meanwhile, wait for the set to close
    (at most ``timeout_s``), stop the stack, and collect what it left.

    ``store`` is where the store lives while the set runs (its absolute path is part of the references, and so of
    the GPU worker's result records): give every run the same one to compare their bytes. It is moved to
    ``<data_dir>/artifacts`` once the stack has stopped, so the next run starts on an empty store.
    """
    began = time.monotonic()
    live = (store or data_dir / "artifacts").resolve()
    if store is not None and live.exists():
        live.rename(live.with_name(f"{live.name}.stale-{time.time_ns()}"))
    stack = ChaosStack(data_dir, artifact_root=live, gpu_concurrency=gpu_concurrency)
    fault: Fault | None = None
    fault_error: BaseException | None = None
    status: WorkflowExecutionStatus | None = None
    events: list[HistoryEvent] = []
    diagnostics = ""
    try:
        await stack.start()
        client = await stack.connect()
        sets = EmojiSetClient(client)
        await sets.start(request or chaos_request(), set_id=SET_ID)
        handle: WorkflowHandle[object, object] = client.get_workflow_handle(SET_ID)
        run = ChaosRun(stack=stack, sets=sets, handle=handle)
        striking = asyncio.create_task(plan(run)) if plan is not None else None
        closing = asyncio.create_task(wait_until_closed(handle, timeout_s=timeout_s))
        if striking is not None:
            try:
                fault = await striking
            except Exception as err:  # reported with the outcome: the run itself goes on
                fault_error = err
                diagnostics += f"fault plan failed: {err!r}\n"
                stack.resume_all()
                await stack.restart()  # whatever the failed plan left stopped or dead runs again
        status = await closing
        client = await wait_for_server(stack)
        handle = client.get_workflow_handle(SET_ID)
        if status is not WorkflowExecutionStatus.COMPLETED:
            with contextlib.suppress(RPCError):
                diagnostics += "pending activities:\n" + "\n".join(
                    f"  {p.activity_type.name} {p.activity_id} state {p.state} attempt {p.attempt} "
                    f"last failure {p.last_failure.message!r}"
                    for p in await pending_activities(handle)
                )
        history = await handle.fetch_history()
        (data_dir / "history.json").write_text(history.to_json())
        events = list(history.events)
    finally:
        if status is not WorkflowExecutionStatus.COMPLETED:
            diagnostics += "\nprocess events:\n" + "\n".join(f"  {at.isoformat()} {what}" for at, what in stack.events)
            for name in (SERVER, ORCHESTRATION, GPU):
                diagnostics += f"\n--- {name} log (tail)\n{stack.log_tail(name)}"
        stack.shutdown()
        kept = data_dir.resolve() / "artifacts"
        if live != kept and live.exists():
            live.rename(kept)
    return Outcome(
        status=status,
        artifacts=snapshot(kept),
        events=events,
        stats=history_stats(events),
        fault=fault,
        fault_error=fault_error,
        diagnostics=diagnostics,
        wall_s=time.monotonic() - began,
        logs={name: stack.logs(name) for name in (SERVER, ORCHESTRATION, GPU)},
    )


# --- Report ----------------------------------------------------------------------------------------------------------


@dataclass
class ChaosReport:
    """One row per scenario run: written to a file under the pytest temporary folder and printed at the end."""

    path: Path
    form: str
    rows: list[list[str]] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    HEADER = ("scenario", "fault", "stall s", "makespan +s", "goal", "retried activities", "scheduled", "artifacts")

    def add(self, row: list[str], detail: str) -> None:
        self.rows.append(row)
        self.details.append(detail)
        self.path.write_text(self.render())

    def render(self) -> str:
        table = [list(self.HEADER), *self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(self.HEADER))]
        lines = [f"chaos suite, {self.form} form"]
        for n, row in enumerate(table):
            lines.append(" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
            if n == 0:
                lines.append("-+-".join("-" * width for width in widths))
        return "\n".join([*lines, "", *self.details, ""])
