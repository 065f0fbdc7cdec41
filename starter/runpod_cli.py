"""``popcon runpod``: deploy the RunPod Serverless endpoint that runs the matting handler, and smoke-test it.

Everything comes from the ``POPCON_RUNPOD_*`` settings (and the artifact store's); secrets are never printed: an error's
reason is redacted (:func:`core.redact.redact`) whatever RunPod or the endpoint put in it. Both commands exit with
code 1 and a one-line reason when something fails.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from core.redact import redact
from core.settings import ArtifactSettings, ObservabilitySettings
from gpu_activity_worker.runpod import provision
from gpu_activity_worker.runpod.settings import RunPodSettings
from gpu_activity_worker.settings import GpuWorkerSettings

app = typer.Typer(help="The RunPod Serverless endpoint that runs the matting handler.", no_args_is_help=True)
console = Console(soft_wrap=True)


def _fail(err: provision.ProvisionError) -> typer.Exit:
    console.print(f"[red]error:[/red] {escape(redact(str(err)))}")
    return typer.Exit(1)


@app.command()
def deploy(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the writes (secrets redacted) instead of sending them.")
    ] = False,
) -> None:
    """Create or update the endpoint's template and the endpoint from the settings (idempotent: found by name).

    A dry run still reads the account's templates and endpoints, to show whether each would be created or updated.
    """
    try:
        result = provision.deploy_configured(
            RunPodSettings(),
            GpuWorkerSettings(),
            ArtifactSettings(),
            log_level=ObservabilitySettings().log_level,
            dry_run=dry_run,
        )
    except provision.ProvisionError as err:
        raise _fail(err) from err
    if dry_run:
        console.print("dry run: nothing was sent; deploy would send:")
        for call in result.calls:
            console.print(call.describe(), markup=False, highlight=False)
        return
    for line in result.summary:
        console.print(line, markup=False)
    if result.run_url:
        console.print(f"jobs go to {result.run_url}", markup=False)
    console.print(f"dispatchers and `popcon runpod smoke` need POPCON_RUNPOD_ENDPOINT_ID={result.endpoint_id}")


@app.command()
def smoke(
    pipeline: Annotated[str, typer.Option(help="The matting pipeline the endpoint runs on the test frame.")] = (
        "classical"
    ),
    timeout_s: Annotated[
        float, typer.Option("--timeout", help="Longest wait for the answer in seconds, cold start included.")
    ] = 600.0,
    inline: Annotated[
        bool | None,
        typer.Option(
            "--inline/--store",
            help="Carry the frame inside the job, or through the artifact store; default: the store if it is s3://.",
        ),
    ] = None,
) -> None:
    """Send one real frame through the endpoint (POPCON_RUNPOD_ENDPOINT_ID) and check the answer."""
    try:
        result = asyncio.run(
            provision.smoke_configured(
                RunPodSettings(), ArtifactSettings(), pipeline=pipeline, timeout_s=timeout_s, inline=inline
            )
        )
    except provision.ProvisionError as err:
        raise _fail(err) from err
    output = result.output
    timings = ", ".join(
        f"{name} {value:.0f} ms"
        for name, value in (("queue", result.delay_ms), ("execution", result.execution_ms))
        if value is not None
    )
    console.print(
        f"smoke test passed: job {result.job_id}, pipeline {output.pipeline} on {output.device} ({output.precision}), "
        f"score {output.score:.2f}, {'inline' if result.inline else 'matte ' + output.matte.uri}"
        + (f", {timings}" if timings else ""),
        markup=False,
    )
