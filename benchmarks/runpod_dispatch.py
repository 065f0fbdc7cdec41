"""RunPod dispatch benchmark: a set matted through the dispatcher and a RunPod endpoint, against the ideal makespan.

The set of benchmarks/dispatch.py (12 frame slots x 5 candidates: 12 ``matte_slot`` activities, 60 RunPod jobs, one
per candidate) runs on the real dev server, orchestration worker and dispatcher; the endpoint is the RunPod stand-in
of the tests (testkit/runpod_standin.py), whose workers are processes running RunPod's real worker loop with our real
handler. The engine is the ``sleep`` stand-in of benchmarks/dispatch.py (a fixed latency L per candidate); artifacts
live in an S3-compatible server on loopback.

For endpoints of 1 (serial), 3 and 12 (one per slot) workers, kept warm (min workers = max workers), it prints the
matting makespan (first matting activity scheduled -> last one completed, from the server's event times), the ideal
``ceil(60 / workers) * L``, the speed-up over ``60 * L`` and the efficiency ``ideal / makespan``, with the jobs' mean
queue time (delayTime) and run time (executionTime) as RunPod reports them. Unlike a GPU worker's turn, a slot here
is no unit of GPU time: its candidates are separate jobs on whichever workers are free, so the ideal counts jobs, not
slots (``ceil(12 / workers) * 5 * L`` for one slot per worker turn would overstate it when the workers do not divide
the slots). Then, at 3 workers scaled to zero, the first set (every worker cold-starts) against the next one (warm).

    python -m benchmarks.runpod_dispatch [--latency 0.5] [--poll 0.1] [--cold-start 0] [--workers 1 3 12]
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
from benchmarks.dispatch import CANDIDATES, SLOTS, run_set, sleep_steps
from core.artifacts import open_store
from core.settings import ArtifactSettings
from gpu_activity_worker.runpod.dispatcher import build_dispatcher_worker
from gpu_activity_worker.runpod.settings import RunPodSettings
from testkit.runpod_standin import EndpointConfig, RunPodStandIn
from testkit.s3 import S3_KEYS, s3_server
from testkit.servers import start_throwaway_server

JOBS = SLOTS * CANDIDATES
"""RunPod jobs per set: one per candidate."""
HANDLER_COMMAND = (
    sys.executable,
    "-c",
    "from benchmarks.dispatch import sleep_steps; from gpu_activity_worker.runpod.handler import main; "
    "main(sleep_steps())",
)
"""An endpoint worker: our real handler, with the ``sleep`` engine of benchmarks.dispatch."""


@dataclass(frozen=True)
class Run:
    label: str
    workers: int
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
    latency_ms: int
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
    return Run(label, endpoint.config.max_workers, makespan, peak, statistics.mean(delays), statistics.mean(executions))


async def warm_runs(bench: Bench, workers: int) -> Run:
    async with endpoint_with(bench, workers, warm=True) as endpoint:
        await measured_set(bench, endpoint, "warm-up", 10)
        return await measured_set(bench, endpoint, "warm", bench.latency_ms)


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
        cold = await measured_set(bench, endpoint, "cold", bench.latency_ms)
        warm = await measured_set(bench, endpoint, "warm after cold", bench.latency_ms)
        new = [worker for worker in endpoint.worker_history[started:] if worker.cold_start_s is not None]
        return (
            cold,
            warm,
            ColdStarts(
                [worker.cold_start_s for worker in new if worker.cold_start_s is not None],
                [handler_cold_start_ms(bench.log_dir / f"{worker.id}.log") for worker in new],
            ),
        )


def ideal_makespan_s(jobs: int, latency_s: float, workers: int) -> float:
    """The shortest matting makespan: ``workers`` jobs at once, each ``latency_s``, whatever slot they belong to."""
    return math.ceil(jobs / workers) * latency_s


def print_table(runs: list[Run], latency_s: float) -> None:
    serial = JOBS * latency_s
    one_worker = next((run.makespan_s for run in runs if run.workers == 1 and run.label == "warm"), None)
    print(
        f"{SLOTS} frame slots x {CANDIDATES} candidates = {JOBS} RunPod jobs, L = {latency_s:.2f} s per candidate;"
        " peak = slots in flight"
    )
    print(
        f"{'run':>16} {'workers':>7} {'makespan s':>11} {'ideal s':>8} {'efficiency':>11} {f'vs {JOBS} L':>8}"
        f" {'vs 1 worker':>12} {'peak':>5} {'delay ms':>9} {'exec ms':>8}"
    )
    for run in runs:
        ideal = ideal_makespan_s(JOBS, latency_s, run.workers)
        versus_one = f"{one_worker / run.makespan_s:.2f}x" if one_worker else "-"
        print(
            f"{run.label:>16} {run.workers:>7} {run.makespan_s:>11.2f} {ideal:>8.2f} {ideal / run.makespan_s:>11.3f}"
            f" {serial / run.makespan_s:>7.2f}x {versus_one:>12} {run.peak_in_flight:>5} {run.mean_delay_ms:>9.0f}"
            f" {run.mean_execution_ms:>8.0f}"
        )


async def main(latency_s: float, poll_s: float, cold_start_s: float, worker_counts: list[int]) -> None:
    latency_ms = round(latency_s * 1000)
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
        worker_env = {
            **s3_env,
            "OMP_NUM_THREADS": "1",
            "POPCON_RUNPOD_PRELOAD_PIPELINE": f"sleep:{latency_ms}",
            "RUNPOD_LOG_LEVEL": "WARN",
        }
        bench = Bench(env.client, artifacts, runpod, worker_env, latency_ms, cold_start_s, Path(tmp))
        orchestration, generation = build_worker(
            env.client,
            OrchestrationSettings(_env_file=None, orchestration_activity_concurrency=8),
            open_store(artifacts),
        )
        async with orchestration:
            runs = [await warm_runs(bench, workers) for workers in worker_counts]
            cold, warm, cold_starts = await cold_runs(bench, 3)
        await generation.aclose()
        await env.shutdown()
    print_table([*runs, cold, warm], latency_s)
    print(
        f"cold start of the {len(cold_starts.handler_ms)} new workers: spawn -> first job-take mean "
        f"{statistics.mean(cold_starts.spawn_to_take_s):.2f} s (container start {cold_start_s:.1f} s, then Python, "
        f"imports and the handler), of which the handler's own start (SDK import, store, engines) mean "
        f"{statistics.mean(cold_starts.handler_ms):.0f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.5, help="GPU latency per candidate, seconds")
    parser.add_argument("--poll", type=float, default=0.1, help="the dispatcher's status poll interval, seconds")
    parser.add_argument("--cold-start", type=float, default=0.0, help="extra container start per new worker, seconds")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 3, SLOTS], help="endpoint sizes for warm runs")
    args = parser.parse_args()
    asyncio.run(main(args.latency, args.poll, args.cold_start, args.workers))
