"""Worker versioning: which Worker Deployment Version a worker is, and moving a deployment to a build.

Two Worker Deployments, one per role (docs/deploy.md):

* ``<name>`` (``POPCON_DEPLOYMENT_NAME``, default ``popcon``): the orchestration workers. Their workflows are pinned:
  a set finishes on the build it started on, except that it moves to the current build when it continues as new
  while it waits for a person (``workflows.emoji_set``).
* ``<name>-gpu``: the GPU workers and the RunPod dispatcher. Their activities are stateless, so a GPU build is
  upgraded on its own (it serves every orchestration build's sets, under the contract's compatibility rules).

A build id names the code a role runs: ``POPCON_BUILD_ID``, or the package version with a digest of the role's
packages (``0.2.0-1a2b3c4d5e``), so two copies of the same code agree and any change to it is a new build.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.metadata
import logging
import time
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from temporalio.api.enums.v1 import RoutingConfigUpdateState, VersionDrainageStatus, WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from core.settings import PROJECT_DIR, DeploymentSettings

log = logging.getLogger(__name__)
DISTRIBUTION = "popcon-emoji-pipeline"


class Role(StrEnum):
    """What a worker serves: the sets' workflows and CPU activities, or the GPU queue."""

    ORCHESTRATION = "orchestration"
    GPU = "gpu"


ROLE_PACKAGES = {
    Role.ORCHESTRATION: ("workflows", "core", "activities"),
    Role.GPU: ("workflows", "core", "gpu_activity_worker"),
}
"""The packages whose code makes a role's build (the GPU image holds only its own)."""


def deployment_name(settings: DeploymentSettings, role: Role) -> str:
    """The Worker Deployment of a role: ``<name>`` for orchestration, ``<name>-gpu`` for the GPU queue."""
    return settings.deployment_name if role is Role.ORCHESTRATION else f"{settings.deployment_name}-gpu"


@functools.cache
def code_digest(packages: tuple[str, ...], root: Path = PROJECT_DIR) -> str:
    """A sha256 over the Python sources of ``packages`` under ``root`` (their paths and bytes), as installed."""
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def package_version(root: Path = PROJECT_DIR) -> str:
    """The project's version: from the ``pyproject.toml`` beside the code when there is one (a checkout, or an image
    that runs the code from its folder without installing it), else from the installed package's metadata."""
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    return importlib.metadata.version(DISTRIBUTION)


def build_id(settings: DeploymentSettings, role: Role) -> str:
    """This worker's build: the configured one, else ``<package version>-<digest of the role's code>``."""
    return settings.build_id or f"{package_version()}-{code_digest(ROLE_PACKAGES[role])[:10]}"


def worker_version(settings: DeploymentSettings, role: Role) -> WorkerDeploymentVersion:
    return WorkerDeploymentVersion(deployment_name(settings, role), build_id(settings, role))


def worker_deployment(settings: DeploymentSettings, role: Role) -> WorkerDeploymentConfig | None:
    """What a worker of ``role`` passes as ``deployment_config``; ``None`` when versioning is off (unversioned).

    Its workflows are pinned: a set finishes on the build it started on. The behavior is the worker's default, not
    declared on the workflow classes: the server refuses a workflow task that names a behavior from an unversioned
    worker, and the same classes run unversioned where the server has no worker versioning.
    """
    if not settings.worker_versioning:
        return None
    return WorkerDeploymentConfig(
        version=worker_version(settings, role),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


# --- Reading and moving a deployment -----------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionSummary:
    """One build of a deployment, as the server sees it."""

    build_id: str
    status: str
    """``inactive`` (its workers polled, never current), ``current``, ``ramping``, ``draining`` (no longer current,
    sets still pinned to it), ``drained`` (none left: its workers may stop)."""
    drainage: str | None


@dataclass(frozen=True)
class DeploymentStatus:
    name: str
    current: str | None
    ramping: str | None
    ramp_percentage: float
    versions: list[VersionSummary]
    routing_settled: bool
    """Whether the last change of current / ramping build has reached every task queue."""
    conflict_token: bytes

    def version(self, build: str) -> VersionSummary | None:
        return next((v for v in self.versions if v.build_id == build), None)


def _status_name(value: WorkerDeploymentVersionStatus.ValueType) -> str:
    return WorkerDeploymentVersionStatus.Name(value).removeprefix("WORKER_DEPLOYMENT_VERSION_STATUS_").lower()


def _drainage_name(value: VersionDrainageStatus.ValueType) -> str | None:
    name = VersionDrainageStatus.Name(value).removeprefix("VERSION_DRAINAGE_STATUS_").lower()
    return None if name == "unspecified" else name


async def describe_deployment(client: Client, name: str) -> DeploymentStatus | None:
    """The deployment's current and ramping builds and every build's status; ``None`` when no worker of it has
    polled yet."""
    try:
        answer = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=name)
        )
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    info = answer.worker_deployment_info
    routing = info.routing_config
    state = info.routing_config_update_state
    return DeploymentStatus(
        name=name,
        current=routing.current_deployment_version.build_id or None,
        ramping=routing.ramping_deployment_version.build_id or None,
        ramp_percentage=routing.ramping_version_percentage,
        versions=[
            VersionSummary(
                build_id=summary.deployment_version.build_id,
                status=_status_name(summary.status),
                drainage=_drainage_name(summary.drainage_info.status or summary.drainage_status),
            )
            for summary in info.version_summaries
        ],
        routing_settled=state
        in (
            RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_COMPLETED,
            RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_UNSPECIFIED,
        ),
        conflict_token=answer.conflict_token,
    )


async def wait_for_build(
    client: Client, version: WorkerDeploymentVersion, *, timeout_s: float = 30
) -> DeploymentStatus:
    """Wait until the server knows ``version`` (its workers have polled)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = await describe_deployment(client, version.deployment_name)
        if status is not None and status.version(version.build_id) is not None:
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no worker of {version.to_canonical_string()} has polled within {timeout_s:g} s: start its workers "
                "first"
            )
        await asyncio.sleep(0.2)


async def set_current(
    client: Client, version: WorkerDeploymentVersion, *, ramp_percentage: float | None = None, timeout_s: float = 30
) -> DeploymentStatus:
    """Make ``version`` its deployment's current build (or, with ``ramp_percentage``, its ramping build for that
    share of new sets), once its workers poll; returns once the change has reached every task queue."""
    status = await wait_for_build(client, version, timeout_s=timeout_s)
    if ramp_percentage is None:
        await client.workflow_service.set_worker_deployment_current_version(
            SetWorkerDeploymentCurrentVersionRequest(
                namespace=client.namespace,
                deployment_name=version.deployment_name,
                build_id=version.build_id,
                conflict_token=status.conflict_token,
                identity=client.identity,
            )
        )
    else:
        await client.workflow_service.set_worker_deployment_ramping_version(
            SetWorkerDeploymentRampingVersionRequest(
                namespace=client.namespace,
                deployment_name=version.deployment_name,
                build_id=version.build_id,
                percentage=ramp_percentage,
                conflict_token=status.conflict_token,
                identity=client.identity,
            )
        )
    deadline = time.monotonic() + timeout_s
    while True:
        settled = await describe_deployment(client, version.deployment_name)
        assert settled is not None  # it was found above
        target = settled.current if ramp_percentage is None else settled.ramping
        if target == version.build_id and settled.routing_settled:
            return settled
        if time.monotonic() > deadline:
            raise TimeoutError(f"{version.to_canonical_string()} did not settle as the deployment's target")
        await asyncio.sleep(0.1)


async def promote_on_start(client: Client, settings: DeploymentSettings, role: Role) -> None:
    """What a starting worker does with its build (``POPCON_BUILD_PROMOTION``): make it current when the deployment
    has none (``if-none``: a first deploy), always (``always``: the dev stack), or leave it to the operator.

    The server may be out of reach meanwhile (a restart): the worker goes on polling, and this tries again every
    few seconds until it is done.
    """
    if not settings.worker_versioning or settings.build_promotion == "never":
        return
    delay = 1.0
    while True:
        try:
            await _promote(client, settings, role)
            return
        except (RPCError, TimeoutError) as err:
            log.warning("could not make this worker's build current yet, trying again: %s", err)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


async def _promote(client: Client, settings: DeploymentSettings, role: Role) -> None:
    version = worker_version(settings, role)
    status = await wait_for_build(client, version)
    if status.current == version.build_id:
        return
    if settings.build_promotion == "if-none" and status.current is not None:
        log.warning(
            "build %s is not current (%s is): it takes no new sets until it is made current, see docs/deploy.md",
            version.to_canonical_string(),
            status.current,
        )
        return
    await set_current(client, version)
    log.info("build %s is current", version.to_canonical_string())
