"""RunPod dispatch benchmark: a set matted through the dispatcher and a RunPod endpoint, against the ideal makespan.

The set of benchmarks/dispatch.py (12 frame slots of up to 5 candidates: 12 ``matte_slot`` activities, 58 candidates,
as the clip's first and last frames have a neighbour on one side only) runs on the real dev server, orchestration
worker and dispatcher; the endpoint is the RunPod stand-in of the tests (testkit/runpod_standin.py), whose workers are
processes running RunPod's real worker loop with our real handler. The engine is the ``sleep`` stand-in of
benchmarks/dispatch.py (a fixed latency L per candidate); artifacts live in an S3-compatible server on loopback. The
dispatcher sends each slot as jobs of up to ``--frames-per-job`` candidates, and each endpoint worker holds
``--jobs-per-worker`` jobs (one on its GPU, the others waiting behind it); both default to the settings' defaults
(``POPCON_RUNPOD_FRAMES_PER_JOB``, ``POPCON_RUNPOD_HANDLER_CONCURRENCY``).

For endpoints of each ``--workers`` size, kept warm (min workers = max workers), and each ``--latency``, it prints the
matting makespan (first matting activity scheduled -> last one completed, from the server's event times), the ideal
``ceil(frames / workers) * L`` (every worker's GPU busy on one frame at a time, whatever job or slot the frames belong
to), the efficiency ``ideal / makespan``, the speed-up over ``frames * L``, and the jobs' mean queue time (delayTime)
and time on a worker (executionTime, which includes the wait behind the worker's other jobs) as RunPod reports them,
and how many workers ran any of the jobs. Then, at 3 workers scaled to zero and the first latency, the first set
(every worker cold-starts) against the next one (warm). The figures, and what bounds them, are in
docs/architecture.md ("RunPod endpoint workers kept busy").

    python -m benchmarks.runpod_dispatch [--latency 0.5 0.06] [--workers 1 3 24] [--poll 0.1] [--cold-start 0]
        [--frames-per-job N] [--jobs-per-worker K] [--no-cold]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr
from temporalio.client import Client

from activities.settings import OrchestrationSettings
from activities.worker import build_worker
from benchmarks.dispatch import CANDIDATES, SLOTS, run_set
from benchmarks.sleep_engine import sleep_steps
from core.artifacts import open_store
from core.settings import ArtifactSettings
from gpu_activity_worker.runpod.dispatcher import build_dispatcher_worker
from gpu_activity_worker.runpod.settings import RunPodSettings
from testkit.runpod_standin import EndpointConfig, RunPodStandIn
from testkit.s3 import S3_KEYS, s3_server
from testkit.servers import start_throwaway_server
from testkit.stack import standin_paid_queue

HANDLER_COMMAND = (
    sys.executable,
    "-c",
    "from benchmarks.sleep_engine import sleep_steps; from gpu_activity_worker.runpod.handler import main; "
    "main(sleep_steps())",
)
"""An endpoint worker: our real handler, with the ``sleep`` engine of benchmarks.dispatch."""


@dataclass(frozen=True)
class Run:
    label: str
    workers: int
    latency_s: float
    frames: int
    """Candidates matted: fewer than 12 x 5, as the clip's first and last frames have a neighbour on one side only."""
    jobs: int
    busy_workers: int
    """Workers that ran any of the set's jobs."""
    makespan_s: float
    peak_in_flight: int
    mean_delay_ms: float
    mean_execution_ms: float


@dataclass(frozen=True)
class Bench:
    """What every run shares."""

    client: Client
    artifacts: ArtifactSettings
    runpod: RunPodSettings
    worker_env: dict[str, str]
    latencies_ms: list[int]
    cold_start_s: float
    log_dir: Path


@asynccontextmanager
async def endpoint_with(bench: Bench, workers: int, *, warm: bool) -> AsyncIterator[RunPodStandIn]:
    """A RunPod endpoint of ``workers`` workers, and the dispatcher serving the GPU queue through it.

    Warm: every worker is started (min workers = max) and has asked for a job before this returns. Otherwise the
    endpoint starts with no worker and scales to zero 5 s after its last job.
    """
    config = EndpointConfig(
        max_workers=workers,
        min_workers=workers if warm else 0,
        idle_timeout_s=600 if warm else 5,
        cold_start_s=bench.cold_start_s,
        execution_timeout_ms=600_000,
        worker_command=HANDLER_COMMAND,
        worker_env=bench.worker_env,
        log_dir=bench.log_dir,
    )
    async with RunPodStandIn(config) as endpoint:
        settings = bench.runpod.model_copy(
            update={
                "runpod_endpoint_id": config.endpoint_id,
                "runpod_api_key": SecretStr(config.api_key),
                "runpod_base_url": endpoint.base_url,
                "runpod_workers": workers,
            }
        )
        worker, dispatcher = build_dispatcher_worker(
            bench.client, settings, open_store(bench.artifacts), inline=False, steps=sleep_steps()
        )
        try:
            async with worker:
                if warm:
                    await endpoint.wait_until(lambda: _ready_workers(endpoint) == workers, timeout=300)
                yield endpoint
        finally:
            await dispatcher.aclose()


def _ready_workers(endpoint: RunPodStandIn) -> int:
    return sum(worker.asked_at is not None for worker in endpoint.workers.values())


async def measured_set(bench: Bench, endpoint: RunPodStandIn, label: str, latency_ms: int) -> Run:
    """One set; its makespan and the RunPod timings of its jobs."""
    before = len(endpoint.jobs)
    makespan, _, peak = await run_set(bench.client, latency_ms)
    jobs = endpoint.submitted()[before:]
    delays = [job.report()["delayTime"] for job in jobs]
    executions = [job.report()["executionTime"] for job in jobs]
    return Run(
        label,
        endpoint.config.max_workers,
        latency_ms / 1000,
        sum(len(job.input["request"]["output_keys"]) for job in jobs),
        len(jobs),
        len({job.worker_id for job in jobs}),
        makespan,
        peak,
        statistics.mean(delays),
        statistics.mean(executions),
    )


async def warm_runs(bench: Bench, workers: int) -> list[Run]:
    """One warm endpoint of ``workers`` workers: a short warm-up set, then one set per latency."""
    async with endpoint_with(bench, workers, warm=True) as endpoint:
        await measured_set(bench, endpoint, "warm-up", 10)
        return [await measured_set(bench, endpoint, "warm", latency_ms) for latency_ms in bench.latencies_ms]


@dataclass(frozen=True)
class ColdStarts:
    """Per new worker: spawn to first job-take (the endpoint's view), and the handler's own load time (its log)."""

    spawn_to_take_s: list[float]
    handler_ms: list[float]


def handler_cold_start_ms(log: Path) -> float:
    """The ``cold_start_ms`` a worker's handler logged once its engines were loaded."""
    for line in log.read_text().splitlines():
        if '"cold start done"' in line:
            value: float = json.loads(line)["cold_start_ms"]
            return value
    raise ValueError(f"{log}: the handler logged no cold start")


async def cold_runs(bench: Bench, workers: int) -> tuple[Run, Run, ColdStarts]:
    """After scale-to-zero: the first set (cold), then the next (warm)."""
    async with endpoint_with(bench, workers, warm=False) as endpoint:
        await measured_set(bench, endpoint, "warm-up", 10)
        await endpoint.wait_until(lambda: not endpoint.workers, timeout=120)
        started = len(endpoint.worker_history)
        cold = await measured_set(bench, endpoint, "cold", bench.latencies_ms[0])
        warm = await measured_set(bench, endpoint, "warm after cold", bench.latencies_ms[0])
        new = [worker for worker in endpoint.worker_history[started:] if worker.cold_start_s is not None]
        return (
            cold,
            warm,
            ColdStarts(
                [worker.cold_start_s for worker in new if worker.cold_start_s is not None],
                [handler_cold_start_ms(bench.log_dir / f"{worker.id}.log") for worker in new],
            ),
        )


def ideal_makespan_s(frames: int, latency_s: float, workers: int) -> float:
    """The shortest matting makespan: ``workers`` GPUs, one frame at a time each, ``latency_s`` per frame."""
    return math.ceil(frames / workers) * latency_s


def print_table(runs: list[Run], settings: RunPodSettings) -> None:
    print(
        f"{SLOTS} frame slots of up to {CANDIDATES} candidates; jobs of up to {settings.runpod_frames_per_job}"
        f" candidates, {settings.runpod_handler_concurrency} jobs held per worker, dispatcher poll"
        f" {settings.runpod_poll_interval_s} s; busy = workers that ran a job; serial = frames x L; peak = slots"
        " in flight"
    )
    print(
        f"{'run':>16} {'workers':>7} {'L s':>5} {'frames':>6} {'jobs':>5} {'busy':>5} {'makespan s':>11} {'ideal s':>8}"
        f" {'efficiency':>11} {'vs serial':>10} {'peak':>5} {'delay ms':>9} {'exec ms':>8}"
    )
    for run in runs:
        ideal = ideal_makespan_s(run.frames, run.latency_s, run.workers)
        print(
            f"{run.label:>16} {run.workers:>7} {run.latency_s:>5.2f} {run.frames:>6} {run.jobs:>5}"
            f" {run.busy_workers:>5} {run.makespan_s:>11.2f} {ideal:>8.2f} {ideal / run.makespan_s:>11.3f}"
            f" {run.frames * run.latency_s / run.makespan_s:>9.2f}x {run.peak_in_flight:>5}"
            f" {run.mean_delay_ms:>9.0f} {run.mean_execution_ms:>8.0f}"
        )


async def main(
    latencies_s: list[float],
    poll_s: float,
    cold_start_s: float,
    worker_counts: list[int],
    frames_per_job: int | None,
    jobs_per_worker: int | None,
    *,
    cold: bool,
) -> None:
    latencies_ms = [round(latency_s * 1000) for latency_s in latencies_s]
    with s3_server("bench") as s3_env, tempfile.TemporaryDirectory() as tmp:
        env = await start_throwaway_server()
        artifacts = ArtifactSettings(
            _env_file=None,
            data_dir=Path(tmp),
            artifact_root=s3_env["POPCON_ARTIFACT_ROOT"],
            s3_endpoint_url=s3_env["POPCON_S3_ENDPOINT_URL"],
            s3_access_key_id=S3_KEYS["POPCON_S3_ACCESS_KEY_ID"],
            s3_secret_access_key=SecretStr(S3_KEYS["POPCON_S3_SECRET_ACCESS_KEY"]),
            s3_region=S3_KEYS["POPCON_S3_REGION"],
        )
        runpod = RunPodSettings(_env_file=None, runpod_poll_interval_s=poll_s)
        runpod = runpod.model_copy(
            update={
                "runpod_frames_per_job": frames_per_job or runpod.runpod_frames_per_job,
                "runpod_handler_concurrency": jobs_per_worker or runpod.runpod_handler_concurrency,
            }
        )
        worker_env = {
            **s3_env,
            "OMP_NUM_THREADS": "1",
            "POPCON_RUNPOD_PRELOAD_PIPELINE": f"sleep:{latencies_ms[0]}",
            "POPCON_RUNPOD_HANDLER_CONCURRENCY": str(runpod.runpod_handler_concurrency),
            "RUNPOD_LOG_LEVEL": "WARN",
        }
        bench = Bench(env.client, artifacts, runpod, worker_env, latencies_ms, cold_start_s, Path(tmp))
        orchestration, generation = build_worker(
            env.client,
            OrchestrationSettings(_env_file=None, orchestration_activity_concurrency=8),
            open_store(artifacts),
            paid=standin_paid_queue(),
        )
        async with orchestration:
            runs = [run for workers in worker_counts for run in await warm_runs(bench, workers)]
            cold_starts = None
            if cold:
                cold_run, warm_run, cold_starts = await cold_runs(bench, 3)
                runs += [cold_run, warm_run]
        await generation.aclose()
        await env.shutdown()
    print_table(runs, runpod)
    if cold_starts is None:
        return
    print(
        f"cold start of the {len(cold_starts.handler_ms)} new workers: spawn -> first job-take mean "
        f"{statistics.mean(cold_starts.spawn_to_take_s):.2f} s (container start {cold_start_s:.1f} s, then Python, "
        f"imports and the handler), of which the handler's own start (SDK import, store, engines) mean "
        f"{statistics.mean(cold_starts.handler_ms):.0f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.5, 0.06], help="GPU latency per frame, s")
    parser.add_argument("--poll", type=float, default=0.1, help="the dispatcher's status poll interval, seconds")
    parser.add_argument("--cold-start", type=float, default=0.0, help="extra container start per new worker, seconds")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 3, 24], help="endpoint sizes for warm runs")
    parser.add_argument("--frames-per-job", type=int, default=None, help="candidates per job (default: settings)")
    parser.add_argument("--jobs-per-worker", type=int, default=None, help="jobs a worker holds (default: settings)")
    parser.add_argument("--no-cold", action="store_true", help="skip the scale-to-zero runs")
    args = parser.parse_args()
    asyncio.run(
        main(
            args.latency,
            args.poll,
            args.cold_start,
            args.workers,
            args.frames_per_job,
            args.jobs_per_worker,
            cold=not args.no_cold,
        )
    )
