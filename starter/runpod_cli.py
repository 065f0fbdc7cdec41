"""``popcon runpod``: deploy the RunPod Serverless endpoint that runs the matting handler, and smoke-test it.

Everything comes from the ``POPCON_RUNPOD_*`` settings (and the artifact store's); secrets are never printed: an error's
reason is redacted (:func:`core.redact.redact`) whatever RunPod or the endpoint put in it. Both commands exit with
code 1 when something fails, with a one-line reason (``smoke``: one per pipeline that failed).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from pydantic import ValidationError
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


def _settings() -> RunPodSettings:
    """The ``POPCON_RUNPOD_*`` settings; values they refuse exit 1 with a line per variable, not a traceback."""
    try:
        return RunPodSettings()
    except ValidationError as err:
        for error in err.errors():
            where = f"POPCON_{'_'.join(map(str, error['loc'])).upper()}: " if error["loc"] else ""
            console.print(f"[red]error:[/red] {escape(redact(where + error['msg'].removeprefix('Value error, ')))}")
        raise typer.Exit(1) from err


@app.command()
def deploy(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the writes (secrets redacted) instead of sending them.")
    ] = False,
) -> None:
    """Create or update the endpoint's template and the endpoint from the settings (idempotent: found by name).

    Checks first that the chosen GPUs run serverless workers on CUDA 13 (RunPod's GPU catalogue) and that the container
    disk holds the image, and prints where workers can start. A dry run still reads the account's templates and
    endpoints and the catalogue, to show whether each would be created or updated.
    """
    try:
        result = provision.deploy_configured(
            _settings(),
            GpuWorkerSettings(),
            ArtifactSettings(),
            log_level=ObservabilitySettings().log_level,
            dry_run=dry_run,
        )
    except provision.ProvisionError as err:
        raise _fail(err) from err
    for line in result.checks:
        console.print(line, markup=False)
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
    pipelines: Annotated[
        list[str] | None,
        typer.Option(
            "--pipeline",
            help="A matting pipeline to send the test frame through; repeat for several. Default: each pipeline the "
            "image serves (POPCON_RUNPOD_PIPELINES).",
        ),
    ] = None,
    timeout_s: Annotated[
        float, typer.Option("--timeout", help="Longest wait for each answer in seconds, cold start included.")
    ] = 600.0,
    inline: Annotated[
        bool | None,
        typer.Option(
            "--inline/--store",
            help="Carry the frame inside the job, or through the artifact store; default: the store if it is s3://.",
        ),
    ] = None,
) -> None:
    """Send one real frame per served pipeline through the endpoint (POPCON_RUNPOD_ENDPOINT_ID) and check each answer.

    Every pipeline is tried; the command exits 1 when any of them failed.
    """
    settings = _settings()
    failed = False
    for pipeline in pipelines or settings.runpod_pipelines:
        try:
            result = asyncio.run(
                provision.smoke_configured(
                    settings, ArtifactSettings(), pipeline=pipeline, timeout_s=timeout_s, inline=inline
                )
            )
        except provision.ProvisionError as err:
            console.print(f"[red]error:[/red] pipeline {escape(pipeline)}: {escape(redact(str(err)))}")
            failed = True
            continue
        output = result.output
        timings = ", ".join(
            f"{name} {value:.0f} ms"
            for name, value in (("queue", result.delay_ms), ("execution", result.execution_ms))
            if value is not None
        )
        console.print(
            f"smoke test passed: job {result.job_id}, pipeline {output.pipeline} on {output.device} "
            f"({output.precision}), score {output.score:.2f}, "
            f"{'inline' if result.inline else 'matte ' + output.matte.uri}" + (f", {timings}" if timings else ""),
            markup=False,
        )
    if failed:
        raise typer.Exit(1)
