"""A lost GPU worker's activities back at once when the next GPU worker starts on its machine (issue 21).

The journal on its own (entries, torn lines, compaction, its lock held while its writer lives and free once it is
killed), then recovery against a real dev server: a GPU worker process SIGKILLed mid-slot and another started on the
same journal folder fails the dead attempt (a ``WorkerShutdown``, not a heartbeat timeout) and raises the activity to
:data:`RECOVERY_PRIORITY`; a token of an attempt already retried elsewhere is refused and changes nothing there; and
with the journal off the heartbeat timeout is back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.api.enums.v1 import PendingActivityState, TimeoutType
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowHandle
from temporalio.common import Priority
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from core.artifacts import FileArtifactStore
from core.settings import PROJECT_DIR
from gpu_activity_worker import recovery
from gpu_activity_worker.recovery import (
    JournalRunning,
    RunningJournal,
    claim_lost_journals,
    read_journal,
    recover,
    server_of,
)
from gpu_activity_worker.settings import GpuWorkerSettings
from testkit.images import sticker_png
from testkit.servers import start_throwaway_server
from testkit.set_keys import matte_key, source_key
from workflows.calls import MATTE_RETRY, matte_slot
from workflows.contract import (
    GPU_TASK_QUEUE,
    HEARTBEAT_TIMEOUT,
    PRODUCTION_PRIORITY,
    RECOVERY_PRIORITY,
    ActivityName,
    FailureType,
    MatteSlotInput,
)

OWNER_KEY = "owner-a"


def _info(attempt: int = 1, **changes: Any) -> activity.Info:
    fields: dict[str, Any] = {
        "attempt": attempt,
        "task_token": f"token-{attempt}".encode(),
        "priority": Priority(priority_key=PRODUCTION_PRIORITY, fairness_key=OWNER_KEY),
        **changes,
    }
    return dataclasses.replace(ActivityEnvironment.default_info(), **fields)


def _journal(folder: Path, server: str = "127.0.0.1:7233") -> RunningJournal:
    return RunningJournal.open(folder, server=server, namespace="default", identity="1@here")


# --- Settings --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"), [(None, "data/gpu-journal"), ("", None), ("/var/journals", "/var/journals")]
)
def test_the_journal_folder_is_under_the_data_folder_unless_set_and_empty_turns_it_off(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("POPCON_GPU_JOURNAL_DIR", raising=False)
    else:
        monkeypatch.setenv("POPCON_GPU_JOURNAL_DIR", value)

    folder = GpuWorkerSettings(_env_file=None).journal_folder(Path("data"))

    assert folder == (None if expected is None else Path(expected))


# --- The journal ---------------------------------------------------------------------------------------------------


def test_an_entry_is_open_while_its_activity_runs_and_closed_when_it_ends(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    first = journal.begin(_info(1))
    second = journal.begin(_info(2, activity_id="8"))

    (entry,) = [e for e in read_journal(journal.path).entries.values() if e.attempt == 1]
    assert entry.task_token == b"token-1" and entry.priority_key == PRODUCTION_PRIORITY
    assert entry.fairness_key == OWNER_KEY

    journal.end(first)

    contents = read_journal(journal.path)
    assert [e.activity_id for e in contents.entries.values()] == ["8"]
    assert contents.header["server"] == "127.0.0.1:7233" and contents.header["pid"] == os.getpid()
    assert journal.running() == list(contents.entries.values())
    journal.end(second)
    assert read_journal(journal.path).entries == {}


def test_a_torn_last_line_and_lines_that_are_not_records_are_skipped(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    journal.begin(_info(1))
    journal.begin(_info(2, activity_id="8"))
    with journal.path.open("ab") as file:
        file.write(b'5\n[1]\n{"done": "x"}\n{"n": 3, "entry": {"namespace": "default", "workflow_id": "w", "ta')

    contents = read_journal(journal.path)

    assert sorted(e.attempt for e in contents.entries.values()) == [1, 2]
    assert contents.unreadable == 4


def test_a_journal_is_compacted_to_its_open_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery, "COMPACT_AFTER", 4)
    journal = _journal(tmp_path)
    journal.begin(_info(1))
    for attempt in range(2, 12):
        journal.end(journal.begin(_info(attempt, activity_id=str(attempt))))
    last = journal.begin(_info(12, activity_id="12"))

    lines = journal.path.read_bytes().splitlines()
    contents = read_journal(journal.path)
    assert len(lines) < 10, "closed entries were dropped"
    assert sorted(e.attempt for e in contents.entries.values()) == [1, 12] and contents.unreadable == 0
    journal.end(last)
    assert [e.attempt for e in read_journal(journal.path).entries.values()] == [1]


def test_closing_deletes_an_idle_journal_and_leaves_a_busy_one_for_the_next_worker(tmp_path: Path) -> None:
    idle = _journal(tmp_path)
    idle.end(idle.begin(_info(1)))
    idle.close()
    assert list(tmp_path.iterdir()) == []

    busy = _journal(tmp_path)
    busy.begin(_info(1))
    busy.close()

    (lost,) = claim_lost_journals(tmp_path)
    assert [e.attempt for e in lost.entries] == [1]
    lost.discard()
    assert list(tmp_path.iterdir()) == []


def test_a_journal_that_cannot_be_written_turns_itself_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = _journal(tmp_path)

    def disk_full(self: RunningJournal, record: dict[str, Any]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunningJournal, "_append", disk_full)
    assert journal.begin(_info(1)) is None
    monkeypatch.undo()
    assert journal.begin(_info(2)) is None, "off for the rest of the process's life"
    journal.end(None)
    journal.close()


HOLDER = """
import dataclasses, sys, time
from pathlib import Path
from temporalio.testing import ActivityEnvironment
from gpu_activity_worker.recovery import RunningJournal

journal = RunningJournal.open(Path(sys.argv[1]), server="127.0.0.1:7233", namespace="default", identity="holder")
journal.begin(dataclasses.replace(ActivityEnvironment.default_info(), attempt=3, task_token=b"held"))
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process with a journal in ``tmp_path`` and one activity running in it."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        cwd=PROJECT_DIR,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT_DIR)},
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_live_workers_journal_is_never_claimed_and_a_killed_ones_is_once(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    own = _journal(tmp_path)
    own.begin(_info(1))

    assert claim_lost_journals(tmp_path, own=own) == [], "the holder lives; our own journal is not claimed"

    holder.kill()
    holder.wait()
    (lost,) = claim_lost_journals(tmp_path, own=own)
    assert [(e.attempt, e.task_token) for e in lost.entries] == [(3, b"held")]
    assert lost.contents.header["pid"] == holder.pid
    assert claim_lost_journals(tmp_path, own=own) == [], "claimed by us: nobody else gets it meanwhile"

    lost.discard()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([own.path.name, own.lock_path.name])
    own.close()


def test_a_lock_file_abandoned_under_its_temporary_name_is_removed(tmp_path: Path) -> None:
    old, fresh = tmp_path / ".gpu-1-aa.lock.tmp", tmp_path / ".gpu-2-bb.lock.tmp"
    old.touch()
    fresh.touch()
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))

    assert claim_lost_journals(tmp_path) == []

    assert not old.exists() and fresh.exists(), "a fresh one may be a worker opening its journal right now"


# --- Against a dev server --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def own_server() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of this module's own: the session's stack has a GPU worker that would take these slots."""
    env = await start_throwaway_server()
    yield env
    await env.shutdown()


class Probe(BaseModel):
    """One slot matted on ``task_queue`` with the workflow's options for ``matte_slot`` but its heartbeat timeout."""

    task_queue: str
    request: dict[str, Any]
    heartbeat_timeout_s: float
    priority_key: int | None = None
    """The activity's own priority key; None: it inherits its workflow's."""


@workflow.defn(sandboxed=False)
class MatteOneSlot:
    """This module's own workflow: one ``matte_slot`` call, so it needs no generation."""

    @workflow.run
    async def run(self, probe: Probe) -> Any:
        return await workflow.execute_activity(
            ActivityName.MATTE_SLOT,
            probe.request,
            task_queue=probe.task_queue,
            start_to_close_timeout=matte_slot.start_to_close,
            heartbeat_timeout=timedelta(seconds=probe.heartbeat_timeout_s),
            retry_policy=MATTE_RETRY,
            priority=Priority(priority_key=probe.priority_key) if probe.priority_key else Priority.default,
        )


async def _start(
    client: Client, queue: str, probe: Probe, priority_key: int = PRODUCTION_PRIORITY
) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        MatteOneSlot.run,
        probe,
        id=f"recovery-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        priority=Priority(priority_key=priority_key, fairness_key=OWNER_KEY),
    )


async def _until(
    handle: WorkflowHandle[Any, Any], ready: Callable[[PendingActivityInfo], bool], what: str, timeout_s: float
) -> PendingActivityInfo:
    """The workflow's pending activity once ``ready`` says so."""
    deadline = time.monotonic() + timeout_s
    while True:
        pending = list((await handle.describe()).raw_description.pending_activities)
        if pending and ready(pending[0]):
            return pending[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout_s:.0f} s: {pending}")
        await asyncio.sleep(0.1)


def _started(attempt: int, identity: str = "") -> Callable[[PendingActivityInfo], bool]:
    return lambda pending: (
        pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        and pending.attempt == attempt
        and pending.last_worker_identity.startswith(identity)
    )


class Attempts:
    """A ``matte_slot`` stand-in that records each attempt and runs until the test releases it, never heartbeating
    (so an attempt nobody releases meets its heartbeat timeout)."""

    def __init__(self) -> None:
        self.infos: dict[int, activity.Info] = {}
        self.releases: dict[int, asyncio.Future[Exception | None]] = {}

    def release(self, attempt: int, error: Exception | None = None) -> None:
        self.releases.setdefault(attempt, asyncio.get_running_loop().create_future()).set_result(error)

    async def started(self, attempt: int, timeout_s: float = 20.0) -> activity.Info:
        async with asyncio.timeout(timeout_s):
            while attempt not in self.infos:
                await asyncio.sleep(0.05)
        return self.infos[attempt]

    @activity.defn(name=ActivityName.MATTE_SLOT)
    async def matte_slot(self, request: dict[str, Any]) -> dict[str, Any]:
        info = activity.info()
        self.infos[info.attempt] = info
        error = await self.releases.setdefault(info.attempt, asyncio.get_running_loop().create_future())
        if error is not None:
            raise error
        return {"attempt": info.attempt}


async def test_the_journal_interceptor_records_an_activity_while_it_runs(
    own_server: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = own_server.client
    queue = f"recovery-{uuid.uuid4().hex[:8]}"
    journal = _journal(tmp_path, server_of(client))
    attempts = Attempts()
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[MatteOneSlot],
        activities=[attempts.matte_slot],
        interceptors=[JournalRunning(journal)],
    )
    async with worker:
        handle = await _start(client, queue, Probe(task_queue=queue, request={}, heartbeat_timeout_s=30))
        info = await attempts.started(1)

        (entry,) = read_journal(journal.path).entries.values()
        assert (entry.workflow_id, entry.run_id, entry.activity_id) == (
            info.workflow_id,
            info.workflow_run_id,
            info.activity_id,
        )
        assert entry.task_token == info.task_token and entry.attempt == 1
        assert (entry.priority_key, entry.fairness_key) == (None, None), "its own: it inherits the workflow's"

        attempts.release(1)
        assert await handle.result() == {"attempt": 1}
    assert read_journal(journal.path).entries == {}
    journal.close()


@pytest.mark.parametrize(
    ("workflow_priority", "own_priority", "raised"),
    [(PRODUCTION_PRIORITY, None, True), (PRODUCTION_PRIORITY, 1, False), (1, None, False)],
    ids=["production", "a-reviewers-activity", "a-reviewers-set"],
)
async def test_a_dead_attempt_is_failed_at_once_and_raised_unless_it_is_ahead_already(
    own_server: WorkflowEnvironment, tmp_path: Path, workflow_priority: int, own_priority: int | None, raised: bool
) -> None:
    client = own_server.client
    queue = f"recovery-{uuid.uuid4().hex[:8]}"
    attempts = Attempts()
    async with Worker(client, task_queue=queue, workflows=[MatteOneSlot], activities=[attempts.matte_slot]):
        probe = Probe(task_queue=queue, request={}, heartbeat_timeout_s=60, priority_key=own_priority)
        handle = await _start(client, queue, probe, workflow_priority)
        dead = _journal(tmp_path, server_of(client))
        dead.begin(await attempts.started(1))
        dead.close()  # as a killed worker leaves it (its attempt 1 hangs on here, as if on a frozen machine)

        report = await recover(client, tmp_path)

        assert (report.entries, report.failed, report.stale, report.errors) == (1, 1, 0, [])
        assert (report.raised, report.ahead) == ((1, 0) if raised else (0, 1))
        pending = await _until(handle, _started(2), "attempt 2 running", 10)  # long before the 60 s timeout
        assert pending.last_failure.application_failure_info.type == FailureType.WORKER_SHUTDOWN.value
        assert pending.priority.priority_key == (RECOVERY_PRIORITY if raised else own_priority or 0)
        for attempt in (2, 1):
            attempts.release(attempt)
        assert await handle.result() == {"attempt": 2}


async def test_a_token_of_an_attempt_already_retried_elsewhere_is_refused_and_changes_nothing_there(
    own_server: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A worker that restarts after the heartbeat timeout fired: the next attempt already runs on another worker.
    Failing the dead attempt's token is refused (the server checks the attempt); the raised priority leaves the
    running attempt alone and goes to the next one, with the set's fairness key kept."""
    client = own_server.client
    queue = f"recovery-{uuid.uuid4().hex[:8]}"
    attempts = Attempts()
    async with Worker(client, task_queue=queue, workflows=[MatteOneSlot], activities=[attempts.matte_slot]):
        handle = await _start(client, queue, Probe(task_queue=queue, request={}, heartbeat_timeout_s=2))
        first = await attempts.started(1)
        await attempts.started(2)  # attempt 1 never beat: its heartbeat timeout fired
        dead = _journal(tmp_path / "journals", server_of(client))
        dead.begin(first)
        dead.close()  # left with its entry open, its lock free: as a killed worker leaves it

        report = await recover(client, tmp_path / "journals")

        assert (report.journals, report.entries, report.raised, report.failed, report.stale) == (1, 1, 1, 0, 1)
        assert report.errors == [] and list((tmp_path / "journals").iterdir()) == []
        pending = await _until(handle, _started(2), "attempt 2 running", 5)
        assert pending.last_failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
        assert pending.priority.priority_key == RECOVERY_PRIORITY

        assert pending.priority.fairness_key == "", "the activity's own key only: it still inherits the set's"

        attempts.release(2, ApplicationError("once more", type=FailureType.MATTING_FAILED.value))
        third = await attempts.started(3)
        assert third.priority.priority_key == RECOVERY_PRIORITY, "the next attempt is dispatched at it"
        attempts.release(3)
        assert await handle.result() == {"attempt": 3}
        attempts.release(1)


async def test_a_journal_of_another_server_is_left_for_its_own_workers(
    own_server: WorkflowEnvironment, tmp_path: Path
) -> None:
    other = _journal(tmp_path, server="elsewhere:7233")
    other.begin(_info(1))
    other.close()

    report = await recover(own_server.client, tmp_path)

    assert (report.journals, report.left, report.entries) == (0, 1, 0)
    assert [e.attempt for e in read_journal(other.path).entries.values()] == [1]


# --- A GPU worker process killed mid-slot ----------------------------------------------------------------------------


class GpuWorkers:
    """The real GPU worker (``python -m benchmarks.load_gpu_worker``: its own ``main``, the ``sleep`` stand-in engine
    registered) as processes on ``data_dir``, one GPU slot and none taken ahead, unversioned."""

    def __init__(self, client: Client, data_dir: Path, journal_dir: str | None) -> None:
        self.data_dir = data_dir
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("POPCON_")}
        self.env.update(
            {
                "PYTHONPATH": str(PROJECT_DIR),
                "POPCON_TEMPORAL_ADDRESS": server_of(client),
                "POPCON_TEMPORAL_NAMESPACE": client.namespace,
                "POPCON_WORKER_VERSIONING": "false",
                "POPCON_DATA_DIR": str(data_dir),
                "POPCON_ARTIFACT_ROOT": (data_dir / "artifacts").as_uri(),
                "POPCON_MODEL_DIR": str(data_dir / "models"),
                "POPCON_MATTING_DEVICE": "cpu",
                "POPCON_GPU_CONCURRENCY": "1",
                "POPCON_GPU_PREFETCH": "0",
            }
        )
        if journal_dir is not None:
            self.env["POPCON_GPU_JOURNAL_DIR"] = journal_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def log(self) -> Path:
        return self.data_dir / "gpu-worker.log"

    def start(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.load_gpu_worker"],
                cwd=self.data_dir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


def _journaled(folder: Path) -> bool:
    return any(read_journal(path).entries for path in folder.glob("*.journal"))


async def _kill_mid_slot(
    client: Client, data_dir: Path, *, journal_dir: str | None, heartbeat_timeout: timedelta, wait_s: float
) -> tuple[PendingActivityInfo, GpuWorkers]:
    """A slot started on a GPU worker process, that process SIGKILLed, another started: the slot's pending activity
    once its second attempt runs on the new worker (waited for ``wait_s`` at most)."""
    store = FileArtifactStore(data_dir / "artifacts")
    slot = f"slot-{uuid.uuid4().hex[:8]}"
    request = MatteSlotInput(
        pipeline="sleep:60000",  # a minute on the "GPU": the first attempt is still running when it is killed
        candidates=[store.put(source_key("0.png", slot), sticker_png(), "image/png")],
        output_keys=[matte_key(0, set_id=slot)],
    )
    queue = f"recovery-{uuid.uuid4().hex[:8]}"
    probe = Probe(
        task_queue=GPU_TASK_QUEUE,
        request=request.model_dump(mode="json"),
        heartbeat_timeout_s=heartbeat_timeout.total_seconds(),
    )
    workers = GpuWorkers(client, data_dir, journal_dir)
    try:
        async with Worker(client, task_queue=queue, workflows=[MatteOneSlot]):
            first = workers.start()
            handle = await _start(client, queue, probe)
            await _until(handle, _started(1, f"{first.pid}@"), "running on the first GPU worker", 40)
            if journal_dir is None:  # the server says started: the worker's journal says so a moment later
                async with asyncio.timeout(10):
                    while not _journaled(data_dir / "gpu-journal"):
                        await asyncio.sleep(0.02)
            first.kill()
            first.wait()
            second = workers.start()
            pending = await _until(handle, _started(2, f"{second.pid}@"), "running on the second GPU worker", wait_s)
            await handle.terminate("test over")
            return pending, workers
    finally:
        workers.stop()


@pytest.mark.slow
async def test_a_gpu_worker_killed_mid_slot_has_its_slot_failed_and_raised_by_the_next_one(
    own_server: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The heartbeat timeout is made long (60 s) and the test waits less (40 s), so that only the recovery can bring
    the slot back meanwhile; the benchmark measures the real timeout's case."""
    pending, workers = await _kill_mid_slot(
        own_server.client, tmp_path, journal_dir=None, heartbeat_timeout=HEARTBEAT_TIMEOUT * 10, wait_s=40
    )

    failure = pending.last_failure
    assert failure.application_failure_info.type == FailureType.WORKER_SHUTDOWN.value, failure
    assert "was lost" in failure.message and not failure.application_failure_info.non_retryable
    assert pending.priority.priority_key == RECOVERY_PRIORITY
    log = workers.log.read_text()
    assert '"journals": 1' in log and '"failed": 1' in log and '"raised": 1' in log, log[-3000:]
    journals = tmp_path / "gpu-journal"
    assert journals.is_dir() and len(list(journals.glob("*.journal"))) == 1, "the dead one's deleted, the new one's"


@pytest.mark.slow
async def test_with_the_journal_off_a_killed_gpu_workers_slot_waits_for_its_heartbeat_timeout(
    own_server: WorkflowEnvironment, tmp_path: Path
) -> None:
    pending, _ = await _kill_mid_slot(
        own_server.client, tmp_path, journal_dir="", heartbeat_timeout=HEARTBEAT_TIMEOUT, wait_s=40
    )

    assert pending.last_failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
    assert pending.priority.priority_key != RECOVERY_PRIORITY
    assert not (tmp_path / "gpu-journal").exists()
