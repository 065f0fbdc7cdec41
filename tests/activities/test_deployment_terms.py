"""The deployment's terms a new set is told (``describe_deployment``): here, the temporal mode of a set that names
none."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.testing import ActivityEnvironment

from activities.production import ProductionActivities
from activities.settings import OrchestrationSettings
from core.artifacts import FileArtifactStore
from workflows.contract import DescribeDeploymentInput, TemporalMode


def test_a_deployment_stabilises_by_default() -> None:
    assert OrchestrationSettings(_env_file=None).default_temporal is TemporalMode.STABILISE


@pytest.mark.parametrize("mode", list(TemporalMode))
async def test_the_deployments_temporal_mode_is_in_its_terms(
    mode: TemporalMode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POPCON_DEFAULT_TEMPORAL", mode.value)
    settings = OrchestrationSettings(_env_file=None)
    activities = ProductionActivities(FileArtifactStore(tmp_path), default_temporal=settings.default_temporal)

    terms = await ActivityEnvironment().run(
        activities.describe_deployment, DescribeDeploymentInput(generator="procedural")
    )

    assert terms.temporal is mode


def test_an_unknown_temporal_mode_is_refused_with_the_ones_there_are(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPCON_DEFAULT_TEMPORAL", "smooth")

    with pytest.raises(ValidationError, match="'none', 'stabilise' or 'sam2'"):
        OrchestrationSettings(_env_file=None)
