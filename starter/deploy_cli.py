"""``popcon deploy``: which builds serve the sets, making a new build current, and waking the sets that wait on an old
one. The runbook is docs/deploy.md; ``temporal worker deployment ...`` does the same steps one at a time."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from temporalio.common import WorkerDeploymentVersion

from core.settings import DeploymentSettings, TemporalSettings
from core.versioning import Role, deployment_name, describe_deployment, set_current
from starter.client import EmojiSetClient

app = typer.Typer(
    help="Worker versioning: the builds that serve sets, and rolling out a new one.", no_args_is_help=True
)
console = Console(soft_wrap=True)


@app.command()
def status() -> None:
    """Both deployments: current and ramping build, every build's status (draining, drained), and the running sets
    pinned to each build."""
    asyncio.run(_status())


async def _status() -> None:
    settings = DeploymentSettings()
    sets = await EmojiSetClient.connect(TemporalSettings())
    for role in Role:
        name = deployment_name(settings, role)
        found = await describe_deployment(sets.temporal, name)
        if found is None:
            console.print(f"{name}: no worker has polled yet")
            continue
        pinned = await sets.running_sets_by_build(name) if role is Role.ORCHESTRATION else {}
        ramp = f", ramping {found.ramping} at {found.ramp_percentage:g}%" if found.ramping else ""
        table = Table(title=f"{name} ({role.value}): current {found.current or '-'}{ramp}")
        for column in ("build", "status", "running sets"):
            table.add_column(column)
        for version in found.versions:
            state = version.status + (f" ({version.drainage})" if version.drainage else "")
            count = str(len(pinned.get(version.build_id, []))) if role is Role.ORCHESTRATION else "-"
            table.add_row(version.build_id, state, count)
        console.print(table)


@app.command()
def promote(
    orchestration: Annotated[str, typer.Option(help="The orchestration build to make current (or ramp).")] = "",
    gpu: Annotated[str, typer.Option(help="The GPU build to make current (or ramp): before the orchestration's.")] = "",
    ramp: Annotated[
        float | None, typer.Option(min=0, max=100, help="Ramp: this percentage of new sets / GPU work only.")
    ] = None,
) -> None:
    """Make builds current once their workers poll: the GPU deployment's first (it must read what the new
    orchestration build sends), then the orchestration's. Sets running on older builds stay on them."""
    if not orchestration and not gpu:
        raise typer.BadParameter("name a build: --orchestration BUILD and / or --gpu BUILD")
    asyncio.run(_promote({Role.GPU: gpu, Role.ORCHESTRATION: orchestration}, ramp))


async def _promote(builds: dict[Role, str], ramp: float | None) -> None:
    settings = DeploymentSettings()
    sets = await EmojiSetClient.connect(TemporalSettings())
    for role, build in builds.items():
        if not build:
            continue
        version = WorkerDeploymentVersion(deployment_name(settings, role), build)
        try:
            await set_current(sets.temporal, version, ramp_percentage=ramp)
        except TimeoutError as err:
            console.print(f"[red]error:[/red] {err}")
            raise typer.Exit(1) from err
        target = "current" if ramp is None else f"ramping at {ramp:g}%"
        console.print(f"{version.to_canonical_string()} is {target}")


@app.command()
def wake() -> None:
    """Wake the running sets pinned to a build that is not current: those waiting for a person with nothing in
    flight move to the current build now instead of at their next check (every 15 minutes)."""
    asyncio.run(_wake())


async def _wake() -> None:
    settings = DeploymentSettings()
    sets = await EmojiSetClient.connect(TemporalSettings())
    name = deployment_name(settings, Role.ORCHESTRATION)
    found = await describe_deployment(sets.temporal, name)
    current = found.current if found else None
    woken = 0
    for build, ids in (await sets.running_sets_by_build(name)).items():
        if build == current:
            continue
        for set_id in ids:
            await sets.check_for_new_build(set_id)
            woken += 1
    console.print(f"woke {woken} set(s) on builds other than the current one ({current or 'none'})")
