"""Settings shared by every process, from the environment (``POPCON_*``) or a ``.env`` file.

Settings are split by role: each process reads the classes of the roles it plays and nothing else. Those shared by
several processes are here (Temporal, the workers' deployment and build, the artifact store, logs and metrics); each
role's own live with it (``activities.settings``, ``gpu_activity_worker.settings``,
``gpu_activity_worker.runpod.settings``, ``starter.devstack``). Every class reads the same ``POPCON_*`` names and
ignores the others' variables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.redact import RegisteredSecret
from workflows.contract import Budget, PriceTable

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = PROJECT_DIR / ".popcon"
"""Dev server database, logs and pid files, and the default artifact store, unless ``POPCON_DATA_DIR`` says else."""


class PopconSettings(BaseSettings):
    """Base of every role's settings: ``POPCON_*`` variables or ``.env``; variables of other roles are ignored."""

    model_config = SettingsConfigDict(env_prefix="POPCON_", env_file=".env", extra="ignore")


class TemporalSettings(PopconSettings):
    """Where the Temporal frontend is: every worker, the client and the CLI."""

    temporal_address: str = "localhost:7233"
    temporal_namespace: str = "default"
    temporal_ui_url: str = Field(default="http://localhost:8233", description="Base URL of the Web UI, for links.")


class DeploymentSettings(PopconSettings):
    """Which Worker Deployment Version a worker is (Temporal's worker versioning, see ``core.versioning``): both
    workers, the RunPod dispatcher and ``popcon deploy``."""

    worker_versioning: bool = Field(
        default=True, description="Join a Worker Deployment; off = an unversioned worker (a server without versioning)."
    )
    deployment_name: str = Field(
        default="popcon",
        pattern=r"^[A-Za-z0-9_-]{1,100}$",
        description="The orchestration workers' deployment; the GPU workers' is '<name>-gpu'.",
    )
    build_id: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9_.+-]{0,200}$",
        description="This worker's build; empty = <package version>-<digest of the code its role runs>.",
    )
    build_promotion: Literal["if-none", "always", "never"] = Field(
        default="if-none",
        description="Make this build current when a worker starts: if the deployment has none (a first deploy), "
        "always (the dev stack), or never (the operator does, docs/deploy.md).",
    )


class ArtifactSettings(PopconSettings):
    """The artifact store: every process that reads or writes images."""

    artifact_root: str = Field(
        default="", description="file:///path or s3://bucket/prefix; empty = <data_dir>/artifacts."
    )
    data_dir: Path = DEFAULT_DATA_DIR
    s3_endpoint_url: str | None = Field(default=None, description="Any S3-compatible service; None = AWS.")
    s3_access_key_id: str | None = None
    s3_secret_access_key: RegisteredSecret | None = None
    s3_region: str | None = None

    def artifact_root_uri(self) -> str:
        """The store's root as a URI: the configured one, or ``file://<data_dir>/artifacts``."""
        return self.artifact_root or (self.data_dir / "artifacts").resolve().as_uri()

    def is_shared(self) -> bool:
        """Whether workers on other machines (RunPod's) can reach the store: an ``s3://`` root."""
        return self.artifact_root_uri().startswith("s3://")


class ObservabilitySettings(PopconSettings):
    """Logs and metrics of a long-running process (the workers, the dispatcher, the RunPod handler)."""

    log_level: str = "INFO"
    metrics_bind: str = Field(default="", description="host:port for Prometheus /metrics; empty = off.")


class FairnessSettings(PopconSettings):
    """How the task queues share out among owners: the client that starts sets."""

    fairness_weights: dict[str, float] = Field(
        default_factory=dict,
        description='JSON, e.g. {"pro": 3}: a tier\'s weight (its owners get that many shares of a queue); a tier not '
        "listed weighs 1.",
    )

    @field_validator("fairness_weights")
    @classmethod
    def _positive(cls, weights: dict[str, float]) -> dict[str, float]:
        bad = sorted(tier for tier, weight in weights.items() if not 0 < weight <= 1000)
        if bad:
            raise ValueError(f"fairness weights are above 0 and at most 1000; not so for {bad}")
        return weights


class CostSettings(PopconSettings):
    """What sets cost and may spend: the orchestration worker tells every new set (``describe_deployment``); the
    client checks a budget against them before it starts one."""

    prices: PriceTable = Field(
        default_factory=PriceTable,
        description='JSON, e.g. {"currency": "USD", "models": {"wan2.6-i2v-flash": {"per_video_second": 0.05}}, '
        '"per_gpu_second": 0.0004}: your contract\'s prices; a model not in it is counted but not priced.',
    )
    budget_paid_calls: int | None = Field(default=None, ge=1, description="Default budget of a set that has none.")
    budget_cost: float | None = Field(default=None, gt=0, description="Default budget of a set that has none.")

    def default_budget(self) -> Budget | None:
        if self.budget_paid_calls is None and self.budget_cost is None:
            return None
        return Budget(paid_calls=self.budget_paid_calls, cost=self.budget_cost)


MIN_WEBHOOK_SECRET = 16
"""A shorter secret is refused: it would be guessable, and too short for the log scrubber to register."""


class WebhookSettings(PopconSettings):
    """Where sets' events go and how they are signed: the orchestration worker (which delivers them) and the client
    (which checks a set's webhook before it starts it)."""

    webhook_url: str = Field(default="", description="Every set's events go here unless the set names its own.")
    webhook_secrets: dict[str, RegisteredSecret] = Field(
        default_factory=dict,
        description='JSON, e.g. {"default": "..."}: the secrets events are signed with, by name (never logged); '
        "16 characters at least.",
    )
    webhook_allow_private: bool = Field(
        default=False, description="Allow webhooks on private, loopback and link-local addresses (a closed network)."
    )
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=120, description="How long one delivery attempt waits.")

    @field_validator("webhook_secrets")
    @classmethod
    def _long_enough(cls, secrets: dict[str, SecretStr]) -> dict[str, SecretStr]:
        short = sorted(name for name, secret in secrets.items() if len(secret.get_secret_value()) < MIN_WEBHOOK_SECRET)
        if short:
            raise ValueError(f"webhook secrets of {MIN_WEBHOOK_SECRET} characters at least; too short: {short}")
        return secrets
