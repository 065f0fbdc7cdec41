"""Interrupted GPU work back at once when a lost GPU worker's machine starts one again (issue 21).

Temporal learns that a worker is lost only when the heartbeat timeout of its activities runs out
(:data:`~workflows.contract.HEARTBEAT_TIMEOUT`), and then retries each one at its own priority: at the back of its
owner's part of the GPU queue, behind the set's own queued slots (measured by ``benchmarks/gpu_kill.py``: see
docs/architecture.md, "Interrupted work first").
The machine knows sooner: a worker process that starts there can tell which of its predecessors died, and what they
were running. So:

- **A journal per process.** While an activity runs on this GPU worker, :class:`JournalRunning` keeps an entry for it
  in the process's :class:`RunningJournal` (the workflow, run and activity ids, the attempt, its task token, its
  priority), closed when the activity ends however it ends (completed, failed, cancelled). Entries are appended as
  JSON lines (an entry, later a ``done`` line for it; a torn line is skipped when read) and rewritten without the
  closed ones every :data:`COMPACT_AFTER` closed entries. No fsync: a process that dies loses nothing the kernel was
  given; a machine that loses power may lose the last lines, and then those activities wait out their heartbeat
  timeout as before. Beside the journal the process holds an exclusive ``flock`` on a lock file for its whole life:
  the kernel releases it when the process dies, however it dies (SIGKILL, the OOM killer, a crash).
- **Recovery before polling.** A GPU worker that starts opens its own journal, then claims every journal of the
  folder whose lock it can take (its writer is dead; two workers starting together never claim the same one), and
  for each entry still open (:func:`recover`): raises the activity to :data:`~workflows.contract.RECOVERY_PRIORITY`
  with UpdateActivityOptions (the ``priority.priority_key`` field only: the server merges it into the activity's own
  priority, and dispatches with that merged over its workflow's, so the set's fairness key and weight stay; an
  activity already at that priority or a higher one, a reviewer's work, is left as it is: its priority is read from
  the server, since a worker is told only an activity's own priority, not the one it inherits), then fails the dead
  attempt by its task token with a retryable ``WorkerShutdown``, so Temporal retries it after the retry policy's
  interval (1 s for the GPU activities) instead of after the heartbeat timeout, ahead of every set's production.
  Then it deletes the journal, whatever the answers: recovery is a shortcut, the heartbeat timeout stays the
  guarantee.

Sound whatever happened meanwhile: the server takes a task token only for the attempt it was issued for (a token of an
attempt that timed out, finished or was retried since is answered "not found", counted as ``stale``), so recovery
never fails an attempt running on another worker; and raising the priority of an activity whose next attempt already
runs elsewhere changes nothing for that attempt, only where a later one would be queued. The attempt is failed by its
token, never by activity id (which fails whatever attempt is current).

What it cannot recover: a machine lost for good, or a journal the next worker does not see (a container re-created
without a volume for the folder, another machine): those activities wait out their heartbeat timeout and their queue,
as before. A frozen worker (SIGSTOP, a stuck driver) still holds its lock and is not recovered either; nor is a
RunPod dispatcher (another kind of process: its jobs are resumed from their heartbeat details). The folder must be on
a local disk (``flock`` over NFS is not to be trusted). One exception to the token rule: after an operator's
ResetActivity the attempt count starts again at 1, so a dead worker's token for attempt 1 could fail the reset
activity's new first attempt (a wasted attempt, retried at once; nothing is lost).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import logging
import os
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from google.protobuf.field_mask_pb2 import FieldMask
from temporalio import activity
from temporalio.api.activity.v1 import ActivityOptions
from temporalio.api.common.v1 import Priority as PriorityProto
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest, UpdateActivityOptionsRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from workflows.contract import PRODUCTION_PRIORITY, RECOVERY_PRIORITY, FailureType

log = logging.getLogger(__name__)

JOURNAL_FORMAT = 1
LOCK_SUFFIX = ".lock"
JOURNAL_SUFFIX = ".journal"
COMPACT_AFTER = 256
"""Closed entries a journal keeps before it is rewritten with its open ones only."""
STALE_TEMPORARY_S = 60.0
"""A lock file still under its temporary name this long after it was made belongs to a process that died making it."""
RPC_TIMEOUT = timedelta(seconds=10)
PARALLEL_RPCS = 16
RECOVERED = "lost GPU workers' activities recovered"
"""The log line of a start's recovery, with the :class:`RecoveryReport`'s figures."""
RAISE_MASK = "priority.priority_key"
"""The one field recovery changes (the server reads field mask paths in snake or camel case)."""


# --- Entries -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One attempt of an activity running on a GPU worker, as its journal records it."""

    namespace: str
    workflow_id: str
    run_id: str
    activity_id: str
    activity_type: str
    attempt: int
    task_token: bytes
    priority_key: int | None = None
    """Its own priority as the worker was told it (None: its workflow's, which the server does not tell)."""
    fairness_key: str | None = None
    fairness_weight: float | None = None

    @classmethod
    def of(cls, info: activity.Info) -> Entry:
        """The entry of the running activity ``info`` describes."""
        return cls(
            namespace=info.namespace,
            workflow_id=info.workflow_id or "",
            run_id=info.workflow_run_id or "",
            activity_id=info.activity_id,
            activity_type=info.activity_type,
            attempt=info.attempt,
            task_token=info.task_token,
            priority_key=info.priority.priority_key or None,
            fairness_key=info.priority.fairness_key or None,
            fairness_weight=info.priority.fairness_weight or None,
        )

    def describe(self) -> str:
        return f"{self.activity_type} {self.workflow_id}#{self.activity_id} attempt {self.attempt}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "task_token": base64.b64encode(self.task_token).decode()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        """Raises ``KeyError``, ``TypeError`` or ``ValueError`` for anything but an entry :meth:`to_json` wrote."""
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}  # a newer writer's extras
        entry = cls(**{**known, "task_token": base64.b64decode(data["task_token"], validate=True)})
        if not (isinstance(entry.attempt, int) and entry.activity_id and entry.task_token):
            raise ValueError(f"not a journal entry: {data!r}")
        return entry


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


@dataclass
class JournalContents:
    """What a journal file holds: its header and the entries still open."""

    header: dict[str, Any]
    entries: dict[int, Entry]
    unreadable: int = 0
    """Lines skipped: a torn last line (its writer died mid-write), or anything that is not a record."""


def read_journal(path: Path) -> JournalContents:
    """Read a journal, skipping lines that cannot be read; a missing file is an empty journal."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return JournalContents({}, {})
    contents = JournalContents({}, {})
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if "journal" in record:
                contents.header = dict(record)
            elif "done" in record:
                contents.entries.pop(int(record["done"]), None)
            else:
                contents.entries[int(record["n"])] = Entry.from_json(record["entry"])
        except (ValueError, KeyError, TypeError):
            contents.unreadable += 1
    return contents


# --- This process's journal ----------------------------------------------------------------------------------------


class RunningJournal:
    """This process's journal of the activities it runs, its lock held until :meth:`close` or the process's death.

    Open it with :meth:`open`, give it to the worker with :class:`JournalRunning`, and close it once the worker has
    stopped. A write that fails (a full disk) turns the journal off with a warning: activities go on, and a loss of
    this worker is then noticed by the heartbeat timeout, as without a journal.
    """

    def __init__(self, folder: Path, stem: str, lock_fd: int, header: dict[str, Any]) -> None:
        """Use :meth:`open`."""
        self.folder = folder
        self.lock_path = folder / f"{stem}{LOCK_SUFFIX}"
        self.path = folder / f"{stem}{JOURNAL_SUFFIX}"
        self._lock_fd = lock_fd
        self._header = header
        self._open: dict[int, Entry] = {}
        self._next = 1
        self._closed_since_compaction = 0
        self._mutex = threading.Lock()
        self._off = False
        self._fd: int | None = os.open(
            self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        self._append(header)

    @classmethod
    def open(cls, folder: Path, *, server: str, namespace: str, identity: str) -> RunningJournal:
        """Create this process's journal in ``folder`` (made if missing) and take its lock.

        Args:
            folder: Shared by the GPU workers of this machine, each with a journal of its own.
            server: The Temporal frontend the worker polls: only a worker of the same server recovers the journal.
            namespace: Likewise.
            identity: The worker's identity (told in the failures recovery reports).

        Raises:
            OSError: The folder cannot be written.
        """
        folder.mkdir(parents=True, exist_ok=True)
        header = {
            "journal": JOURNAL_FORMAT,
            "pid": os.getpid(),
            "identity": identity,
            "server": server,
            "namespace": namespace,
            "opened": datetime.now(UTC).isoformat(timespec="milliseconds"),
        }
        for _ in range(5):
            stem = f"gpu-{os.getpid()}-{secrets.token_hex(4)}"
            # Locked under a name recovery does not look at, then published: a lock file recovery can see is held.
            temporary = folder / f".{stem}{LOCK_SUFFIX}.tmp"
            fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.rename(temporary, folder / f"{stem}{LOCK_SUFFIX}")
            except OSError:  # a worker's clean-up took it for a dead process's leftover meanwhile
                os.close(fd)
                continue
            try:
                return cls(folder, stem, fd, header)
            except OSError:
                (folder / f"{stem}{LOCK_SUFFIX}").unlink(missing_ok=True)
                os.close(fd)
                raise
        raise OSError(f"could not create a GPU journal in {folder}")

    def begin(self, info: activity.Info) -> int | None:
        """Record the activity ``info`` describes as running; returns its entry's number for :meth:`end`."""
        entry = Entry.of(info)
        with self._mutex:
            if self._off or self._fd is None:
                return None
            number = self._next
            self._next += 1
            try:
                self._append({"n": number, "entry": entry.to_json()})
            except OSError as err:
                self._turn_off(err)
                return None
            self._open[number] = entry
            return number

    def end(self, number: int | None) -> None:
        """Record that the activity of entry ``number`` ended (``None``, from a journal that was off: nothing)."""
        if number is None:
            return
        with self._mutex:
            if self._open.pop(number, None) is None or self._off or self._fd is None:
                return
            try:
                self._append({"done": number})
                self._closed_since_compaction += 1
                if self._closed_since_compaction >= COMPACT_AFTER:
                    self._compact()
            except OSError as err:
                self._turn_off(err)

    def running(self) -> list[Entry]:
        """The activities running now, as recorded."""
        with self._mutex:
            return list(self._open.values())

    def close(self) -> None:
        """Close the journal and let go of its lock; with no activity running (a worker that stopped gracefully) its
        files are deleted, else they are left for the next worker to recover."""
        with self._mutex:
            if self._fd is None:
                return
            os.close(self._fd)
            self._fd = None
            if not self._open and not self._off:
                for path in (self.path, self.lock_path):
                    path.unlink(missing_ok=True)
            os.close(self._lock_fd)

    def _append(self, record: dict[str, Any]) -> None:
        assert self._fd is not None
        data = _line(record)
        if os.write(self._fd, data) != len(data):
            raise OSError(f"short write to {self.path}")

    def _compact(self) -> None:
        """Rewrite the journal with its open entries only (to a temporary file renamed over it)."""
        temporary = self.folder / f".{self.path.name}.tmp"
        records = [self._header, *({"n": number, "entry": entry.to_json()} for number, entry in self._open.items())]
        temporary.write_bytes(b"".join(_line(record) for record in records))
        os.replace(temporary, self.path)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        assert self._fd is not None
        os.close(self._fd)
        self._fd = fd
        self._closed_since_compaction = 0

    def _turn_off(self, err: OSError) -> None:
        self._off = True
        log.warning(
            "the GPU journal cannot be written: a loss of this worker will be noticed by the heartbeat timeout only",
            extra={"journal": str(self.path), "error": str(err)},
        )


class JournalRunning(Interceptor):
    """A worker interceptor that keeps an entry in ``journal`` for every activity while it runs.

    Args:
        journal: This process's journal.
    """

    def __init__(self, journal: RunningJournal) -> None:
        self.journal = journal

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _JournaledActivity(next, self.journal)


class _JournaledActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, journal: RunningJournal) -> None:
        super().__init__(next)
        self._journal = journal

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        number = self._journal.begin(activity.info())
        try:
            return await super().execute_activity(input)
        finally:
            self._journal.end(number)


# --- Lost journals ---------------------------------------------------------------------------------------------------


@dataclass
class LostJournal:
    """The journal of a dead process, claimed by this one (its lock held) until :meth:`discard` or :meth:`release`."""

    lock_path: Path
    path: Path
    contents: JournalContents
    _fd: int

    @property
    def entries(self) -> list[Entry]:
        """The activities its process was running when it died."""
        return list(self.contents.entries.values())

    def discard(self) -> None:
        """Delete the journal and its lock file (while holding the lock), then let go of it."""
        for path in (self.path, self.folder / f".{self.path.name}.tmp", self.lock_path):
            path.unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        """Let go of the lock, leaving the journal for another worker."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def folder(self) -> Path:
        return self.lock_path.parent


def _claim(lock_path: Path) -> int | None:
    """The lock file's descriptor, its lock taken, if its holder is dead and nobody else claimed it first."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Another worker may have claimed it, recovered it and deleted it between our open and our lock.
        if not os.path.samestat(os.fstat(fd), os.stat(lock_path)):
            raise FileNotFoundError(lock_path)
    except OSError:  # BlockingIOError: its writer lives (or another worker holds it now)
        os.close(fd)
        return None
    return fd


def _remove_abandoned_locks(folder: Path) -> None:
    """Delete lock files left under their temporary name by a process that died opening its journal."""
    for temporary in folder.glob(f".*{LOCK_SUFFIX}.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - temporary.stat().st_mtime < STALE_TEMPORARY_S:
                continue
            fd = _claim(temporary)
            if fd is not None:
                temporary.unlink(missing_ok=True)
                os.close(fd)


def claim_lost_journals(folder: Path, *, own: RunningJournal | None = None) -> list[LostJournal]:
    """Every journal in ``folder`` whose writer is dead, each claimed by this process until it is discarded or
    released (another process asking meanwhile does not get it).

    Args:
        folder: The journals' folder (missing: none).
        own: This process's journal, never claimed.
    """
    if not folder.is_dir():
        return []
    _remove_abandoned_locks(folder)
    claimed = []
    for lock_path in sorted(folder.glob(f"*{LOCK_SUFFIX}")):
        if own is not None and lock_path == own.lock_path:
            continue
        fd = _claim(lock_path)
        if fd is not None:
            path = lock_path.with_suffix(JOURNAL_SUFFIX)
            claimed.append(LostJournal(lock_path, path, read_journal(path), fd))
    return claimed


# --- Recovery ------------------------------------------------------------------------------------------------------


@dataclass
class RecoveryReport:
    """What :func:`recover` found and did."""

    journals: int = 0
    """Journals of dead processes recovered."""
    entries: int = 0
    """Activities they were running."""
    raised: int = 0
    """Activities raised to :data:`RECOVERY_PRIORITY`."""
    ahead: int = 0
    """Activities left at the priority they had, already ahead of :data:`RECOVERY_PRIORITY` (a reviewer's work)."""
    failed: int = 0
    """Dead attempts failed, so that they are retried at once."""
    stale: int = 0
    """Attempts the server no longer had running (timed out and retried, finished, or their set closed)."""
    left: int = 0
    """Journals of another Temporal server or namespace, left for its own workers."""
    errors: list[str] = field(default_factory=list)

    def log_fields(self) -> dict[str, Any]:
        return {name: value for name, value in asdict(self).items() if value or name != "errors"}


def server_of(client: Client) -> str:
    """The frontend ``client`` is connected to, as journals name it."""
    return client.service_client.config.target_host


async def current_priority(client: Client, entry: Entry) -> int | None:
    """The priority key the activity of ``entry`` is dispatched with now: its own, else its workflow's, else the
    server's default (:data:`~workflows.contract.PRODUCTION_PRIORITY`, 3); ``None`` when it is no longer pending.

    Raises:
        RPCError: ``NOT_FOUND`` when the workflow run is not there (deleted, or another server's).
    """
    description = await client.workflow_service.describe_workflow_execution(
        DescribeWorkflowExecutionRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=entry.workflow_id, run_id=entry.run_id),
        ),
        retry=True,
        timeout=RPC_TIMEOUT,
    )
    for pending in description.pending_activities:
        if pending.activity_id == entry.activity_id:
            inherited = description.workflow_execution_info.priority.priority_key
            return pending.priority.priority_key or inherited or PRODUCTION_PRIORITY
    return None


async def raise_priority(client: Client, entry: Entry) -> None:
    """Put the activity of ``entry`` at :data:`RECOVERY_PRIORITY`; its fairness key and weight stay as they are.

    Raises:
        RPCError: ``NOT_FOUND`` when the activity is no longer pending (it finished, or its set closed).
    """
    await client.workflow_service.update_activity_options(
        UpdateActivityOptionsRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=entry.workflow_id, run_id=entry.run_id),
            id=entry.activity_id,
            activity_options=ActivityOptions(priority=PriorityProto(priority_key=RECOVERY_PRIORITY)),
            update_mask=FieldMask(paths=[RAISE_MASK]),
            identity=client.identity,
        ),
        retry=True,
        timeout=RPC_TIMEOUT,
    )


async def fail_attempt(client: Client, entry: Entry, lost_worker: str) -> None:
    """Fail the attempt of ``entry`` by its task token with a retryable ``WorkerShutdown``.

    Raises:
        RPCError: ``NOT_FOUND`` when the server no longer has that attempt running.
    """
    error = FailureType.WORKER_SHUTDOWN.error(
        f"the GPU worker running attempt {entry.attempt} ({lost_worker or 'unknown'}) was lost; the next GPU worker "
        f"started on its machine ({client.identity}) failed it so that it is tried again at once"
    )
    await client.get_async_activity_handle(task_token=entry.task_token).fail(error, rpc_timeout=RPC_TIMEOUT)


async def _recover_entry(
    client: Client, entry: Entry, lost_worker: str, report: RecoveryReport, limit: asyncio.Semaphore
) -> None:
    async with limit:
        report.entries += 1
        try:
            priority = await current_priority(client, entry) if entry.workflow_id else None
            if priority is not None and priority <= RECOVERY_PRIORITY:
                report.ahead += 1
            elif priority is not None:
                await raise_priority(client, entry)
                report.raised += 1
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                report.errors.append(f"raising {entry.describe()}: {err}")
        try:
            await fail_attempt(client, entry, lost_worker)
            report.failed += 1
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                report.stale += 1
            else:
                report.errors.append(f"failing {entry.describe()}: {err}")


async def recover(client: Client, folder: Path, *, own: RunningJournal | None = None) -> RecoveryReport:
    """Bring back what the dead GPU workers of ``folder`` were running (see the module), then delete their journals.

    Args:
        client: Connected to the server and namespace the journals must name (others are left alone).
        folder: The journals' folder.
        own: This process's journal, never claimed.
    """
    report = RecoveryReport()
    lost = claim_lost_journals(folder, own=own)
    server, limit = server_of(client), asyncio.Semaphore(PARALLEL_RPCS)
    try:
        for journal in lost:
            header = journal.contents.header
            if header.get("server", server) != server or header.get("namespace", client.namespace) != client.namespace:
                report.left += 1
                journal.release()
                continue
            report.journals += 1
            lost_worker = str(header.get("identity", ""))
            ours = [entry for entry in journal.entries if entry.namespace == client.namespace]
            await asyncio.gather(*(_recover_entry(client, entry, lost_worker, report, limit) for entry in ours))
            journal.discard()
    finally:
        for journal in lost:
            journal.release()
    return report


async def start_journal(client: Client, folder: Path) -> RunningJournal | None:
    """What a GPU worker does before it polls: open its own journal in ``folder``, then :func:`recover` the journals
    of its dead predecessors there. A folder that cannot be written is a warning, not a failure: the worker then runs
    without a journal (``None``), as with the journal off.
    """
    try:
        journal = RunningJournal.open(
            folder, server=server_of(client), namespace=client.namespace, identity=client.identity
        )
    except OSError as err:
        log.warning(
            "the GPU journal is off: its folder cannot be written", extra={"folder": str(folder), "error": str(err)}
        )
        return None
    started = time.perf_counter()
    try:
        report = await recover(client, folder, own=journal)
    except Exception:  # a shortcut that failed must not keep the worker from starting
        log.exception("recovering lost GPU workers' activities failed", extra={"folder": str(folder)})
        return journal
    log.info(
        RECOVERED,
        extra={
            **report.log_fields(),
            "folder": str(folder),
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
        },
    )
    return journal
