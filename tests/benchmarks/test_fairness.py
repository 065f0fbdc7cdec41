"""The fairness benchmark's measuring, on a tiny race (A starts 3 sets, B 1) on a fresh fair dev server.

Only that it produces figures: no timing is asserted on these shared machines.
"""

from __future__ import annotations

from benchmarks.fairness import Config, goal_line, measure_run, row, table


async def test_a_tiny_race_on_a_fair_server_produces_every_figure() -> None:
    config = Config(a_sets=3, b_delay_s=0.1, actions=1, frames=2, image_size=64, timeout_s=60)

    run = await measure_run("fairness on", config, fair=True, a_sets=config.a_sets)

    assert run.b_s > 0 and len(run.a_s) == 3 and all(took > 0 for took in run.a_s)
    assert run.makespan_s >= max(run.a_s) and run.makespan_s > 0
    assert run.b_queued_s >= 0 and run.b_running_s > 0, "B's activities are read from its history"
    figures = row([run])
    lines = table([figures], alone_s=run.b_s).splitlines()
    assert lines[2].startswith("| fairness on | ") and "| 1.00x |" in lines[2]
    assert goal_line(figures, alone_s=run.b_s).startswith("fairness on within 1.5x of alone: met")
