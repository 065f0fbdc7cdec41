"""Every role's settings class, for tests that check the ``POPCON_*`` variables as a whole."""

from __future__ import annotations

from activities.settings import DashScopeSettings, OrchestrationSettings, PaidGenerationSettings
from core.settings import (
    ArtifactSettings,
    CostSettings,
    DeploymentSettings,
    FairnessSettings,
    ObservabilitySettings,
    PopconSettings,
    TemporalSettings,
    WebhookSettings,
)
from gpu_activity_worker.runpod.settings import RunPodSettings
from gpu_activity_worker.settings import GpuWorkerSettings
from starter.devstack import DevStackSettings
from starter.review.settings import ReviewSettings

SETTINGS_ROLES: tuple[type[PopconSettings], ...] = (
    TemporalSettings,
    DeploymentSettings,
    ArtifactSettings,
    ObservabilitySettings,
    OrchestrationSettings,
    PaidGenerationSettings,
    CostSettings,
    WebhookSettings,
    FairnessSettings,
    DashScopeSettings,
    GpuWorkerSettings,
    RunPodSettings,
    DevStackSettings,
    ReviewSettings,
)


def every_setting() -> set[str]:
    """The field names of every role, i.e. every ``POPCON_<NAME>`` variable some process reads."""
    return set().union(*(set(role.model_fields) for role in SETTINGS_ROLES))
