"""The GPU benchmark's ``--smoke`` form, run as its command: every engine, precision, batch and slot configuration of
the full run goes through the same code on the CPU at tiny sizes, so the prepared device run cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu import SMOKE

pytestmark = pytest.mark.slow


def test_the_smoke_run_measures_every_configuration_and_writes_its_report(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--out", str(tmp_path), "--smoke"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((tmp_path / "figures.json").read_text())
    report = (tmp_path / "report.md").read_text()

    engines = figures["engines"]
    assert not [row for row in engines if row["error"]], [row for row in engines if row["error"]]
    assert all(row["ms_per_frame"] > 0 for row in engines)
    measured = {(row["engine"], row["task"], row["precision"], row["batch"]) for row in engines}
    per_engine = len(SMOKE.precisions) * len(SMOKE.batches) * len(SMOKE.sizes)
    for engine in (
        "sam2:tiny",
        "vitmatte:small (toy architecture)",
        "birefnet (tests' stand-in model: code path only)",
    ):
        assert sum(1 for key in measured if key[0] == engine and key[1] == "image") == per_engine, engine
    assert {key[2] for key in measured if key[1].startswith("propagation")} == set(SMOKE.precisions)
    assert all(
        row["max_diff_vs_fp32"] is not None for row in engines if row["precision"] != "fp32" and row["task"] == "image"
    )

    slots = figures["slots"]
    assert {(row["gpu_slots"], row["max_batch"]) for row in slots} == {
        (capacity, batch) for capacity in SMOKE.slot_sizes for batch in SMOKE.slot_batches
    }
    assert not [row for row in slots if row["error"]]
    assert all(row["frames_per_s"] > 0 and 0 < row["gpu_busy"] <= 1 for row in slots)
    assert "random weights: speed only" in report and "| sam2:tiny | image | 64 | bf16 | 2 |" in report
    assert (tmp_path / "log.txt").read_text(), "the log is written beside the figures"
    assert figures["machine"]["torch"] == torch.__version__


def test_the_full_run_refuses_a_machine_without_cuda(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the full run would start")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "no CUDA device here" in done.stderr
