"""The chaos suite's form (short or full), its fault-free baseline, and the table of results it prints at the end."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from testkit.chaos import ChaosReport, Outcome, run_set

FULL_ENV = "CHAOS_FULL"
"""``CHAOS_FULL=1`` runs the full form whatever the marker expression."""

_REPORT = pytest.StashKey["ChaosReport"]()


def full_form(config: pytest.Config) -> bool:
    """The full form: ``CHAOS_FULL=1``, or a marker expression that selects ``chaos`` (``-m chaos``)."""
    if os.environ.get(FULL_ENV, "") not in ("", "0"):
        return True
    expression = config.option.markexpr or ""
    return re.search(r"(?<!not )\bchaos\b", expression) is not None


@pytest.fixture(scope="session")
def full(request: pytest.FixtureRequest) -> bool:
    return full_form(request.config)


@pytest.fixture(scope="session")
def chaos_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chaos")


@pytest.fixture(scope="session")
def shared_store(chaos_dir: Path) -> Path:
    """Where every run's store lives while its set runs: the same absolute path, so references match byte for
    byte."""
    return chaos_dir / "store"


@pytest.fixture(scope="session")
def chaos_report(request: pytest.FixtureRequest, chaos_dir: Path, full: bool) -> ChaosReport:
    report = ChaosReport(path=chaos_dir / "chaos-report.txt", form="full" if full else "short")
    request.config.stash[_REPORT] = report
    return report


@pytest.fixture(scope="session")
async def baseline(chaos_dir: Path, shared_store: Path, chaos_report: ChaosReport) -> AsyncIterator[Outcome]:
    """The fault-free run of the same set and seed, once per session."""
    outcome = await run_set(chaos_dir / "baseline", store=shared_store)
    assert outcome.completed, f"the fault-free baseline did not complete ({outcome.status}):\n{outcome.diagnostics}"
    chaos_report.details.append(
        f"baseline: makespan {outcome.stats.makespan_s:.1f} s, {len(outcome.artifacts)} artifacts, "
        f"scheduled {dict(sorted(outcome.stats.scheduled.items()))}, retried {outcome.stats.retried_summary()}"
    )
    yield outcome


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    report = config.stash.get(_REPORT, None)
    if report is None or not report.rows:
        return
    terminalreporter.write_sep("=", "chaos suite")
    terminalreporter.write_line(report.render())
    terminalreporter.write_line(f"(written to {report.path})")
