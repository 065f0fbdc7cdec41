"""Where the orchestration worker's CPU goes: CPU seconds per activity type for the load benchmark's set.

benchmarks/load.py finds the orchestration worker's Python threads filling one core; this says which activities
spend it. The real orchestration worker (:func:`activities.worker.build_worker`) runs in this process with one
activity at a time (``orchestration_activity_concurrency`` 1, 1 on the paid queue of the generator calls, and the
interceptor lets one of the two run at a time), and a worker interceptor reads the process's CPU time (every thread)
around each activity: with one activity at a time the difference is that activity's, plus whatever workflow task ran
meanwhile (little: the workflow code is light). The dev server is a throwaway one; the GPU worker
(benchmarks/load_gpu_worker.py, ``sleep:0``) runs in its own process, so its CPU is not counted. After a warm-up set
(first calls), ``--repeat`` sets are measured one after another; it prints per type the count, CPU seconds per set
and per activity, and their share of the process's CPU over the sets, and what is left outside activities
(workflow tasks, the SDK, the client of this process).

    python -m benchmarks.load_attribution [--repeat 2] [--neighbours 1] [--size 256]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio import client as temporal_client
from temporalio import worker as temporal_worker
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.settings import OrchestrationSettings
from activities.worker import build_worker
from benchmarks.load import ACTIONS, Config
from core.artifacts import FileArtifactStore
from core.settings import PROJECT_DIR
from starter.client import EmojiSetClient
from testkit.servers import start_throwaway_server
from testkit.stack import standin_paid_queue


class _Timed(temporal_worker.ActivityInboundInterceptor):
    def __init__(
        self, next: temporal_worker.ActivityInboundInterceptor, spent: dict[str, list[float]], turn: asyncio.Lock
    ) -> None:
        super().__init__(next)
        self._spent = spent
        self._turn = turn

    async def execute_activity(self, input: temporal_worker.ExecuteActivityInput) -> Any:
        while self._turn.locked():  # the other queue's worker is running one: wait, heartbeating meanwhile
            activity.heartbeat()
            await asyncio.sleep(0.05)
        async with self._turn:
            began = time.process_time()
            try:
                return await self.next.execute_activity(input)
            finally:
                self._spent[activity.info().activity_type].append(time.process_time() - began)


class CpuPerActivity(temporal_client.Interceptor, temporal_worker.Interceptor):
    """Process CPU seconds around every activity, by type (a client interceptor, so the worker built on the
    client uses it as well)."""

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = defaultdict(list)
        self.turn = asyncio.Lock()
        """One activity at a time across both workers (the orchestration queue's and the paid queue's)."""

    def intercept_activity(
        self, next: temporal_worker.ActivityInboundInterceptor
    ) -> temporal_worker.ActivityInboundInterceptor:
        return _Timed(next, self.spent, self.turn)


async def main(config: Config, repeat: int) -> None:
    timing = CpuPerActivity()
    load_before = Path("/proc/loadavg").read_text().split()[0]
    with tempfile.TemporaryDirectory() as tmp:
        env = await start_throwaway_server()
        address = env.client.service_client.config.target_host
        client = await Client.connect(address, data_converter=pydantic_data_converter, interceptors=[timing])
        gpu = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.load_gpu_worker"],
            env={**os.environ, "PYTHONPATH": str(PROJECT_DIR), **config.worker_env(address, Path(tmp))},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=tmp,
        )
        settings = OrchestrationSettings(_env_file=None, orchestration_activity_concurrency=1)
        worker, production = build_worker(
            client, settings, FileArtifactStore(Path(tmp) / "artifacts"), paid=standin_paid_queue(concurrency=1)
        )
        sets = EmojiSetClient(client)
        try:
            async with worker:
                await sets.result(await sets.start(config.set_input(seed=10_000), set_id="warmup"))
                timing.spent.clear()
                began = time.process_time()
                for i in range(repeat):
                    await sets.result(await sets.start(config.set_input(seed=i), set_id=f"attribution-{i}"))
                total = time.process_time() - began
        finally:
            gpu.terminate()
            gpu.wait()
            await production.aclose()
            await env.shutdown()

    in_activities = sum(sum(spent) for spent in timing.spent.values())
    print(
        f"orchestration worker, one activity at a time, {repeat} set(s) of {config.actions} actions x {config.frames}"
        f" frames, {config.neighbours} neighbour(s), {config.image_size} px; load average before:"
        f" {load_before}"
    )
    print(f"{'activity':>23} {'per set':>8} {'CPU s/set':>10} {'CPU s each':>11} {'share':>6}")
    for name, spent in sorted(timing.spent.items(), key=lambda item: -sum(item[1])):
        print(
            f"{name:>23} {len(spent) / repeat:>8.1f} {sum(spent) / repeat:>10.2f} {sum(spent) / len(spent):>11.3f}"
            f" {sum(spent) / total:>6.0%}"
        )
    print(
        f"{'outside activities':>23} {'':>8} {(total - in_activities) / repeat:>10.2f} {'':>11}"
        f" {(total - in_activities) / total:>6.0%}"
    )
    print(f"{'process, all':>23} {'':>8} {total / repeat:>10.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2, help="measured sets, one after another")
    parser.add_argument("--actions", type=int, choices=range(1, len(ACTIONS) + 1), default=4, help="actions per set")
    parser.add_argument("--frames", type=int, default=12, help="frames per emoji")
    parser.add_argument("--neighbours", type=int, choices=[0, 1, 2], default=1, help="neighbours either side")
    parser.add_argument("--size", type=int, default=256, help="frame edge, px")
    args = parser.parse_args()
    config = Config(
        actions=args.actions,
        frames=args.frames,
        neighbours=args.neighbours,
        image_size=args.size,
        pipeline="sleep:0",
        orchestration_concurrency=1,
        gpu_concurrency=2,
        gpu_prefetch=2,
        warmup=1,
        log_level="WARNING",
        timeout_s=600,
    )
    asyncio.run(main(config, args.repeat))
