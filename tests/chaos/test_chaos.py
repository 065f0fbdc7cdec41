"""Chaos suite: faults on the real local stack while a set runs, and proof that nothing was lost or duplicated.

Each scenario starts its own stack (the Temporal dev server on an SQLite file and free ports, the orchestration worker
``python -m activities`` and the GPU worker ``python -m gpu_activity_worker`` as processes, see
:class:`testkit.chaos.ChaosStack`), runs one small automatic set (``classical`` CPU matting, ``procedural``
generator, 2 actions x 4 frames, 1 neighbour, 1 take, a fixed seed) and strikes once, at a moment read from the
set's workflow (its history and pending activities), never guessed with a sleep. A worker is killed while it is
frozen (SIGSTOP, then SIGKILL) once its workflow shows it running the activity: some last a tenth of a second, and
the kill then lands mid-activity for sure (:func:`testkit.chaos.freeze_running`).

* ``gpu-kill-matting``: SIGKILL of the GPU worker while it mattes a slot, restarted at once (as a supervisor would);
* ``orchestration-kill-*``: SIGKILL of the orchestration worker during start frames, clips or matting, restarted;
* ``server-restart``: the dev server stopped while a slot is matted and started again on its database (same
  ``--db-filename`` and port) after an outage of 30 s (10 s in the short form); ``server-restart-long`` (full form
  only) after 60 s;
* ``gpu-sigstop``: SIGSTOP of the GPU worker mid-slot for longer than the slot's heartbeat timeout, then SIGCONT;
* ``write-error-*``: a directory at the exact path of an artifact not yet written, so the store's rename fails (we
  run as root: permissions would not stop it), removed once the failure was seen in the activity's attempts;
* ``partial-write``: truncated temporary files, named as the store names its own, left beside artifacts to come by
  a "crashed" writer.

After each fault the set must complete, every file under the set's prefix must be sha256-identical to the
fault-free baseline (run once per session; the full mapping is compared, so missing files, extra files such as
leftover temporaries, and changed bytes all show), and the workflow must have scheduled the same activities per
type. Timings are measured, never asserted: each scenario adds a row (fault, stall, makespan increase, goal,
activities retried, scheduled, artifacts) to a table printed at the end of the session and written to
``<pytest tmp>/chaos0/chaos-report.txt``. The stall is the time from the fault until the work it interrupted ran
again (the last in-flight activity's new attempt started, or its result was recorded; the first workflow task
after the fault completed), from history event times. Goals: 10 s for a lost worker, outage + 5 s for a server
restart.

How to run:

* short form (part of ``make test``; left out by ``make test-fast`` as ``slow``): ``.venv/bin/python -m pytest
  tests/chaos`` runs one scenario per kind of fault, ``gpu-kill-matting``, ``orchestration-kill-clips``,
  ``server-restart`` (10 s outage), ``gpu-sigstop``, ``write-error-matte`` and ``partial-write`` (about 2 minutes);
  the others are skipped;
* full form: ``.venv/bin/python -m pytest -m chaos`` (or ``CHAOS_FULL=1`` with any selection) runs every
  scenario, the server restarts after 30 s and 60 s outages (about 6 minutes).

Add ``-s`` (or read the report file) to see the table as rows arrive; it is also printed in the terminal summary.
Each scenario's folder (``<pytest tmp>/chaos0/<scenario>``) keeps its logs, ``history.json`` and store.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from testkit.chaos import (
    GPU,
    ORCHESTRATION,
    SERVER,
    SET_ID,
    ChaosReport,
    ChaosRun,
    Fault,
    FaultPlan,
    Outcome,
    blocked_key,
    compare,
    excerpt,
    freeze_running,
    heartbeat_timeout_s,
    in_flight,
    leave_partial_write,
    run_set,
    wait_for_failed_attempt,
    wait_for_running,
)
from workflows import keys
from workflows.contract import ActivityName

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

SHORT_OUTAGE_S = 10.0
FULL_OUTAGE_S = 30.0
LONG_OUTAGE_S = 60.0
"""Finished work must outlast an outage this long (the full form's ``server-restart-long``)."""
LOST_WORKER_GOAL_S = 10.0
SERVER_GOAL_MARGIN_S = 5.0
ORCHESTRATION_ACTIVITIES = {
    ActivityName.CHECK_GENERATOR,
    ActivityName.CHECK_EXPORTS,
    ActivityName.GENERATE_CHARACTER,
    ActivityName.GENERATE_START_FRAME,
    ActivityName.GENERATE_CLIP,
    ActivityName.EXTRACT_FRAMES,
    ActivityName.ASSEMBLE_EMOJI,
    ActivityName.ASSEMBLE_CONTACT_SHEET,
    ActivityName.EXPORT_PACKAGE,
}


def _now() -> datetime:
    return datetime.now(UTC)


# --- Fault plans ---------------------------------------------------------------------------------------------------


def kill_worker_during(worker: str, activity: ActivityName) -> FaultPlan:
    """SIGKILL ``worker`` while it runs ``activity``, then start it again at once."""

    async def plan(run: ChaosRun) -> Fault:
        at, running = await freeze_running(run.stack, run.handle, activity, worker)
        run.stack.kill(worker)
        await run.stack.restart()
        kinds = sorted({p.activity_type.name for p in running})
        return Fault(f"SIGKILL {worker} during {activity.value}", at, [p.activity_id for p in running], kinds)

    return plan


def kill_orchestration_during_matting() -> FaultPlan:
    """SIGKILL the orchestration worker (the workflow's worker) while the GPU worker mattes, restart at once."""

    async def plan(run: ChaosRun) -> Fault:
        await wait_for_running(run.handle, ActivityName.MATTE_SLOT)
        lost = await in_flight(run.handle, queue_types=ORCHESTRATION_ACTIVITIES)
        at = run.stack.kill(ORCHESTRATION)
        await run.stack.restart()
        return Fault(f"SIGKILL {ORCHESTRATION} during matte_slot", at, lost, [f"{len(lost)} own activities running"])

    return plan


def restart_server(outage_s: float) -> FaultPlan:
    """Stop the dev server (SIGTERM) while a slot is matted; start it again on its database after ``outage_s``."""

    async def plan(run: ChaosRun) -> Fault:
        await wait_for_running(run.handle, ActivityName.MATTE_SLOT)
        lost = await in_flight(run.handle)
        at = run.stack.kill(SERVER, signal.SIGTERM)
        await asyncio.sleep(outage_s)
        back = await run.stack.restart()
        return Fault(
            f"server restart after {outage_s:.0f} s outage",
            at,
            lost,
            [f"down {(back - at).total_seconds():.1f} s", f"outage {outage_s:.0f} s"],
        )

    return plan


def pause_gpu_worker(margin_s: float = 4.0) -> FaultPlan:
    """SIGSTOP the GPU worker mid-slot for the slot's heartbeat timeout plus ``margin_s``, then SIGCONT."""

    async def plan(run: ChaosRun) -> Fault:
        at, running = await freeze_running(run.stack, run.handle, ActivityName.MATTE_SLOT, GPU)
        timeout = await heartbeat_timeout_s(run.handle, running[0].activity_id)
        hold = timeout + margin_s
        await asyncio.sleep(hold - (_now() - at).total_seconds())
        resumed = run.stack.resume(GPU)
        return Fault(
            f"SIGSTOP {GPU} {hold:.0f} s (heartbeat timeout {timeout:.0f} s), SIGCONT",
            at,
            [p.activity_id for p in running],
            [f"stopped {(resumed - at).total_seconds():.1f} s"],
        )

    return plan


def block_write(key: str, activity: ActivityName, failures: int) -> FaultPlan:
    """A directory where ``key`` will be written, from the start of the set until ``activity`` has failed
    ``failures`` times on it."""

    async def plan(run: ChaosRun) -> Fault:
        with blocked_key(run.root, key):
            first = await wait_for_failed_attempt(run.handle, activity, attempts=1)
            at = first.last_attempt_complete_time.ToDatetime(tzinfo=UTC)
            if failures > 1:
                await wait_for_failed_attempt(run.handle, activity, attempts=failures)
            lifted = _now()
        name = key.rsplit("/", 2)[-2:]
        return Fault(
            f"write error on {'/'.join(name)} ({activity.value}) x{failures}",
            at,
            [first.activity_id],
            [f"failure: {first.last_failure.message[:120]}", f"lifted {(lifted - at).total_seconds():.1f} s later"],
        )

    return plan


def leave_partial_writes(*keys_: str) -> FaultPlan:
    """Truncated temporary files beside artifacts not written yet, as a writer killed mid-write leaves them."""

    async def plan(run: ChaosRun) -> Fault:
        at = _now()
        left = [leave_partial_write(run.root, key) for key in keys_]
        return Fault(
            "partial writes left beside " + ", ".join(k.rsplit("/", 1)[-1] for k in keys_),
            at,
            notes=[str(path.relative_to(run.root)) for path in left],
            measured=False,
        )

    return plan


# --- Scenarios -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    id: str
    plan: Callable[[bool], FaultPlan]
    """The plan, given whether this is the full form."""
    short: bool
    goal: Callable[[bool], float | None]
    """The stall goal in seconds (None: no goal), given whether this is the full form."""


SET = SET_ID
SCENARIOS = [
    Scenario(
        "gpu-kill-matting",
        lambda full: kill_worker_during(GPU, ActivityName.MATTE_SLOT),
        short=True,
        goal=lambda full: LOST_WORKER_GOAL_S,
    ),
    Scenario(
        "orchestration-kill-start-frames",
        lambda full: kill_worker_during(ORCHESTRATION, ActivityName.GENERATE_START_FRAME),
        short=False,
        goal=lambda full: LOST_WORKER_GOAL_S,
    ),
    Scenario(
        "orchestration-kill-clips",
        lambda full: kill_worker_during(ORCHESTRATION, ActivityName.GENERATE_CLIP),
        short=True,
        goal=lambda full: LOST_WORKER_GOAL_S,
    ),
    Scenario(
        "orchestration-kill-matting",
        lambda full: kill_orchestration_during_matting(),
        short=False,
        goal=lambda full: LOST_WORKER_GOAL_S,
    ),
    Scenario(
        "server-restart",
        lambda full: restart_server(FULL_OUTAGE_S if full else SHORT_OUTAGE_S),
        short=True,
        goal=lambda full: (FULL_OUTAGE_S if full else SHORT_OUTAGE_S) + SERVER_GOAL_MARGIN_S,
    ),
    Scenario(
        "server-restart-long",
        lambda full: restart_server(LONG_OUTAGE_S),
        short=False,
        goal=lambda full: LONG_OUTAGE_S + SERVER_GOAL_MARGIN_S,
    ),
    Scenario("gpu-sigstop", lambda full: pause_gpu_worker(), short=True, goal=lambda full: None),
    Scenario(
        "write-error-matte",
        lambda full: block_write(keys.candidate_key(SET, "laugh", 3, 0, "matte.png"), ActivityName.MATTE_SLOT, 2),
        short=True,
        goal=lambda full: None,
    ),
    Scenario(
        "write-error-export",
        lambda full: block_write(keys.export_key(SET, "wave.gif"), ActivityName.ASSEMBLE_EMOJI, 1),
        short=False,
        goal=lambda full: None,
    ),
    Scenario(
        "partial-write",
        lambda full: leave_partial_writes(
            keys.clip_key(SET, "wave", 0),
            keys.candidate_key(SET, "laugh", 1, 1, "matte.png"),
            keys.export_key(SET, "laugh.webp"),
        ),
        short=True,
        goal=lambda full: None,
    ),
]


def _row(scenario: Scenario, outcome: Outcome, baseline: Outcome, full: bool) -> tuple[list[str], str]:
    fault = outcome.fault
    recovery = outcome.recovery()
    stall = recovery.stall_s if recovery is not None else None
    goal = scenario.goal(full)
    verdict = "-" if goal is None or stall is None else f"<= {goal:.0f} s: {'met' if stall <= goal else 'MISSED'}"
    makespan = (
        f"{outcome.stats.makespan_s - baseline.stats.makespan_s:+.1f}"
        if outcome.stats.started_at and outcome.stats.closed_at
        else "-"
    )
    scheduled_same = outcome.stats.scheduled == baseline.stats.scheduled
    diff = compare(baseline.artifacts, outcome.artifacts)
    row = [
        scenario.id,
        fault.name if fault else f"(no fault: {outcome.fault_error!r})"[:60],
        f"{stall:.1f}" if stall is not None else "-",
        makespan,
        verdict,
        outcome.stats.retried_summary(),
        "same" if scheduled_same else "DIFFERENT",
        ("identical" if diff.identical else "DIFFER") if outcome.completed else "NOT COMPLETED",
    ]
    status = outcome.status.name.lower() if outcome.status else "unknown"
    lines = [f"{scenario.id}: {status}, makespan {outcome.stats.makespan_s:.1f} s, wall {outcome.wall_s:.0f} s"]
    if fault is not None:
        lines.append(f"  fault at {fault.at.isoformat()}, in flight {fault.in_flight}; {'; '.join(fault.notes)}")
    if recovery is not None:
        lines.append(f"  recovery: {recovery.detail or '-'}")
    lines += [f"  {note}" for note in outcome.restarts()]
    if not scheduled_same:
        lines.append(f"  scheduled {dict(outcome.stats.scheduled)} vs baseline {dict(baseline.stats.scheduled)}")
    if not diff.identical:
        lines.append(f"  artifacts: {diff.describe()}")
    return row, "\n".join(lines)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
async def test_set_survives_fault(
    scenario: Scenario,
    full: bool,
    baseline: Outcome,
    chaos_dir: Path,
    shared_store: Path,
    chaos_report: ChaosReport,
) -> None:
    if not (scenario.short or full):
        pytest.skip("full chaos form only: run `pytest -m chaos` or set CHAOS_FULL=1")
    outcome = await run_set(chaos_dir / scenario.id, scenario.plan(full), store=shared_store)
    row, detail = _row(scenario, outcome, baseline, full)
    chaos_report.add(row, detail)
    print("\n" + " | ".join(row) + "\n" + detail)

    since = outcome.fault.at if outcome.fault else outcome.stats.started_at
    context = f"{detail}\n{outcome.diagnostics}\nhistory from the fault:\n" + (
        excerpt(outcome.events, since) if since else "(no history)"
    )
    assert outcome.fault_error is None, f"the fault did not strike as planned: {outcome.fault_error!r}\n{context}"
    assert outcome.completed, f"the set did not complete after the fault\n{context}"
    diff = compare(baseline.artifacts, outcome.artifacts)
    assert diff.identical, f"artifacts differ from the fault-free run: {diff.describe()}\n{context}"
    assert outcome.stats.scheduled == baseline.stats.scheduled, f"other activities were scheduled\n{context}"
