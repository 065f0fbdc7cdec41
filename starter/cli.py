"""The ``popcon`` command line, on top of :class:`starter.client.EmojiSetClient`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from core.settings import ArtifactSettings, TemporalSettings
from gpu_activity_worker import weights as weights_catalogue
from gpu_activity_worker.fetch_weights import fetch_each
from gpu_activity_worker.settings import GpuWorkerSettings
from starter import demo as demo_module
from starter.client import EmojiSetClient, EmojiSetError
from starter.deploy_cli import app as deploy_app
from starter.devstack import DevStack, DevStackSettings
from starter.download import download_packages, download_result
from starter.runpod_cli import app as runpod_app
from starter.watch import watch_until
from workflows.contract import (
    Budget,
    CustomAction,
    DeadlinePolicy,
    DropActionInput,
    EmojiSetInput,
    ExportTarget,
    FrameState,
    PackageOutput,
    Phase,
    PickCandidateInput,
    RefineFrameInput,
    RefineMode,
    RefinePoint,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
    ReviewPolicy,
    StagePolicy,
    UndoRefineInput,
    Webhook,
)
from workflows.presets import DEFAULT_ACTIONS, PRESETS
from workflows.progress import cost_line

app = typer.Typer(help="popcon emoji pipeline: start and steer emoji sets on Temporal.", no_args_is_help=True)
dev_app = typer.Typer(help="The embedded local stack (Temporal dev server + both workers).", no_args_is_help=True)
app.add_typer(dev_app, name="dev")
models_app = typer.Typer(help="Model weights for the matting engines (offline folder POPCON_MODEL_DIR).")
app.add_typer(models_app, name="models")
app.add_typer(runpod_app, name="runpod")
app.add_typer(deploy_app, name="deploy")
console = Console(soft_wrap=True)
T = TypeVar("T")

SetId = Annotated[str, typer.Argument(help="The set id (its workflow id).")]


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine; client and validation errors become a one-line message and exit code 1."""
    try:
        return asyncio.run(coroutine)
    except (EmojiSetError, ValidationError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(1) from err


async def _client() -> EmojiSetClient:
    return await EmojiSetClient.connect(TemporalSettings(), ArtifactSettings())


@app.command()
def presets() -> None:
    """List the built-in actions (24, as the original product's catalogue)."""
    table = Table("name", "motion", "frame ms", "pose prompt (start frame)", "motion prompt (clip)")
    for preset in PRESETS.values():
        table.add_row(
            preset.name, preset.motion.value, str(preset.frame_duration_ms), preset.pose_prompt, preset.motion_prompt
        )
    console.print(table)


def _default(field: str) -> Any:
    """The contract's default for an ``EmojiSetInput`` field: the CLI shows it and never restates it."""
    return EmojiSetInput.model_fields[field].get_default(call_default_factory=True)


def _custom_action(text: str) -> CustomAction:
    """``name|pose prompt|motion prompt`` as a custom action."""
    parts = [part.strip() for part in text.split("|")]
    if len(parts) != 3:
        raise typer.BadParameter(f"a custom action is 'name|pose prompt|motion prompt', got {text!r}")
    return CustomAction(name=parts[0], pose_prompt=parts[1], motion_prompt=parts[2])


_REVIEW = ReviewPolicy()


@app.command()
def start(
    prompt: Annotated[
        str | None, typer.Option("--prompt", "-p", help="The character, e.g. 'a round orange cat'.")
    ] = None,
    character: Annotated[
        Path | None, typer.Option("--character", help="An uploaded character picture instead of a prompt.")
    ] = None,
    action: Annotated[
        list[str] | None,
        typer.Option("--action", "-a", help=f"A preset; repeat for several (default: {', '.join(DEFAULT_ACTIONS)})."),
    ] = None,
    custom: Annotated[
        list[str] | None, typer.Option("--custom", help="A custom action: 'name|pose prompt|motion prompt'.")
    ] = None,
    frames: Annotated[int, typer.Option(help="Frames per emoji.")] = _default("frames_per_emoji"),
    takes: Annotated[int, typer.Option(help="Clips (takes) per action.")] = _default("takes_per_action"),
    seconds: Annotated[float, typer.Option(help="Clip length asked of the video model.")] = _default("clip_seconds"),
    fps: Annotated[int, typer.Option(help="Clip frame rate asked of the video model.")] = _default("clip_fps"),
    style: Annotated[str, typer.Option()] = _default("style"),
    pipeline: Annotated[str, typer.Option(help="Matting pipeline.")] = _default("matting_pipeline"),
    generator: Annotated[str, typer.Option()] = _default("generator"),
    seed: Annotated[int, typer.Option()] = _default("seed"),
    owner: Annotated[str, typer.Option()] = _default("owner"),
    review_character: Annotated[StagePolicy, typer.Option(help="Character review.")] = _REVIEW.character,
    review_start_frames: Annotated[StagePolicy, typer.Option(help="Start frame review.")] = _REVIEW.start_frames,
    review_final: Annotated[StagePolicy, typer.Option(help="Final review.")] = _REVIEW.final,
    deadline_hours: Annotated[float, typer.Option(help="Deadline of each wait for a person, in hours.")] = (
        _REVIEW.deadline.total_seconds() / 3600
    ),
    on_deadline: Annotated[DeadlinePolicy, typer.Option()] = _REVIEW.on_deadline,
    target: Annotated[
        list[ExportTarget] | None,
        typer.Option(
            "--target",
            help="An export target; repeat for several (default: "
            f"{', '.join(t.value for t in _default('export_targets'))}).",
        ),
    ] = None,
    budget_calls: Annotated[
        int | None, typer.Option(help="The most paid generator calls the set may make (default: the deployment's).")
    ] = None,
    budget_cost: Annotated[
        float | None, typer.Option(help="The most the set may cost, in the price table's currency.")
    ] = None,
    webhook: Annotated[
        str | None, typer.Option(help="Where the set's signed events go (default: the deployment's webhook).")
    ] = None,
    webhook_secret: Annotated[str, typer.Option(help="The name of its secret in POPCON_WEBHOOK_SECRETS.")] = "default",
    set_id: Annotated[str | None, typer.Option(help="Choose the set id (idempotent start).")] = None,
    watch: Annotated[bool, typer.Option(help="Show progress until the set waits for a person or ends.")] = False,
) -> None:
    """Start an emoji set from a character prompt or an uploaded picture."""

    async def go() -> None:
        client = await _client()
        image = client.upload(character.read_bytes()) if character is not None else None
        request = EmojiSetInput(
            character_prompt=prompt,
            character_image=image,
            style=style,
            actions=list(action or ([] if custom and not action else DEFAULT_ACTIONS)),
            custom_actions=[_custom_action(text) for text in custom or []],
            frames_per_emoji=frames,
            takes_per_action=takes,
            clip_seconds=seconds,
            clip_fps=fps,
            matting_pipeline=pipeline,
            generator=generator,
            seed=seed,
            owner=owner,
            review=ReviewPolicy(
                character=review_character,
                start_frames=review_start_frames,
                final=review_final,
                deadline=timedelta(hours=deadline_hours),
                on_deadline=on_deadline,
            ),
            export_targets=list(target or _default("export_targets")),
            budget=None
            if budget_calls is None and budget_cost is None
            else Budget(paid_calls=budget_calls, cost=budget_cost),
            webhook=Webhook(url=webhook, secret=webhook_secret) if webhook else None,
        )
        started = await client.start(request, set_id=set_id)
        console.print(f"started [bold]{started}[/bold]\n{client.web_ui_url(started)}")
        if watch:
            await watch_until(client, started, console)

    _run(go())


@app.command()
def state(set_id: SetId, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show a set's state: phase, each action's start frames and takes, frame slots, candidates, picks."""

    async def go() -> None:
        current = await (await _client()).state(set_id)
        if as_json:
            console.print_json(current.model_dump_json())
            return
        console.print(
            f"[bold]{current.set_id}[/bold] {'failed' if current.failure else current.phase.value} "
            f"{current.frames_done()}/{current.frames_total()} frames ready"
            + (f" · waiting for {', '.join(current.awaiting())}" if current.awaiting() else "")
        )
        if current.failure:
            where = f" in {current.failure.activity}" if current.failure.activity else ""
            phase = current.failure.phase.value.replace("_", " ")
            console.print(f"[red]failed while {phase}{where}: {escape(current.failure.message)}[/red]")
        if current.cancel_reason:
            by = f" by {current.cancelled_by}" if current.cancelled_by else ""
            console.print(f"[yellow]cancelled{by}: {escape(current.cancel_reason)}[/yellow]")
        if current.notice:
            console.print(f"[yellow]{current.notice}[/yellow]")
        if current.terms is not None:
            console.print(f"cost: {escape(cost_line(current))}")
        actions = Table("emoji", "stage", "start frames (pick)", "takes", "error")
        for item in current.actions:
            takes = " ".join(f"{t.index}:{t.status.value}" for t in item.takes)
            starts = f"{len(item.start_frames)} ({item.start_frame_pick})" if item.start_frames else "-"
            actions.add_row(item.name, item.stage.value, starts, takes, item.error or "")
        for dropped in current.dropped:
            why = f"by {dropped.dropped_by}" + (f": {dropped.reason}" if dropped.reason else "")
            actions.add_row(dropped.action, "dropped", "-", "-", escape(why))
        console.print(actions)
        table = Table("emoji", "frame", "status", "pick", "candidates (index:take/frame:score)", "error")
        for item, frame in current.frames():
            if not frame.candidates:
                continue
            scores = " ".join(
                f"{c.index}:{'edit' if c.take is None else f'{c.take}/{c.source_frame}'}:"
                + (f"{c.score:.2f}" if c.score is not None else c.status.value)
                for c in frame.candidates
            )
            pick = "-" if frame.pick is None else f"{frame.pick} ({frame.picked_by.value if frame.picked_by else ''})"
            table.add_row(item.name, str(frame.index), frame.status.value, pick, scores, frame.error or "")
        console.print(table)

    _run(go())


@app.command()
def watch(set_id: SetId) -> None:
    """Show live progress until the set waits for a person or ends."""

    async def go() -> None:
        client = await _client()
        await watch_until(client, set_id, console)

    _run(go())


@app.command("pick-character")
def pick_character(set_id: SetId, candidate: int) -> None:
    """Use another character candidate (review policy character=human)."""
    _run(_report(lambda c: c.pick_character(set_id, candidate), f"character candidate {candidate} picked"))


@app.command("approve-character")
def approve_character(set_id: SetId, reviewer: Annotated[str, typer.Option()] = "") -> None:
    """Make start frames from the picked character."""
    _run(_report(lambda c: c.approve_character(set_id, reviewer=reviewer), "character approved"))


@app.command("pick-start-frame")
def pick_start_frame(set_id: SetId, action: str, candidate: int) -> None:
    """Choose an action's start frame (then approve it)."""
    _run(_report(lambda c: c.pick_start_frame(set_id, action, candidate), f"{action}: start frame {candidate} picked"))


@app.command("approve-start-frames")
def approve_start_frames(
    set_id: SetId,
    action: Annotated[list[str] | None, typer.Argument(help="Actions to approve; none: every one awaiting.")] = None,
    reviewer: Annotated[str, typer.Option()] = "",
) -> None:
    """Approve start frames: each approved action starts animating."""

    async def go() -> None:
        approved = await (await _client()).approve_start_frames(set_id, action, reviewer=reviewer)
        console.print(f"approved, animating: {', '.join(approved)}")

    _run(go())


@app.command("regenerate-start-frame")
def regenerate_start_frame(
    set_id: SetId,
    action: str,
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="The custom pose prompt.")],
) -> None:
    """New start frame candidates for an action from a custom pose prompt."""
    request = RegenerateStartFrameInput(action=action, prompt=prompt)
    _run(
        _report(
            lambda c: c.regenerate_start_frame(request, set_id=set_id),
            f"{action}: new start frames made",
        )
    )


@app.command()
def pick(set_id: SetId, emoji: str, frame: int, candidate: int) -> None:
    """Use a candidate of a frame slot by hand."""
    request = PickCandidateInput(emoji=emoji, frame=frame, candidate=candidate)
    _run(_report(lambda c: c.pick(request, set_id=set_id), f"{emoji} frame {frame}: candidate {candidate} picked"))


@app.command("pick-take")
def pick_take(set_id: SetId, emoji: str, take: int) -> None:
    """Use one take for a whole emoji."""
    _run(_report(lambda c: c.pick_take(set_id, emoji, take), f"{emoji}: take {take} picked"))


@app.command("regenerate-action")
def regenerate_action(
    set_id: SetId,
    emoji: str,
    motion: Annotated[str, typer.Option("--motion", "-m", help="The custom motion prompt for the new take.")],
    watch: Annotated[bool, typer.Option(help="Show progress until the set waits for a person or ends.")] = False,
) -> None:
    """A new take of an emoji's clip from a custom motion prompt."""

    async def go() -> None:
        client = await _client()
        take = await client.regenerate_action(RegenerateActionInput(emoji=emoji, motion_prompt=motion), set_id=set_id)
        console.print(f"{emoji}: take {take.index} animating; follow it with `popcon state` or `popcon watch`")
        if watch:
            await watch_until(client, set_id, console)

    _run(go())


@app.command("regenerate-frame")
def regenerate_frame(
    set_id: SetId,
    emoji: str,
    frame: int,
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="The custom prompt of the frame edit.")],
    candidates: Annotated[int | None, typer.Option(help="How many new candidates.")] = None,
    wait: Annotated[bool, typer.Option(help="Wait until the new candidates are matted.")] = True,
) -> None:
    """New candidates for a frame slot: an image edit of its frame with a custom prompt."""

    async def go() -> None:
        request = RegenerateFrameInput(emoji=emoji, frame=frame, prompt=prompt, candidates=candidates)
        slot = await (await _client()).regenerate_frame(request, set_id=set_id, wait=wait)
        if slot is None:
            console.print("frame edit accepted; follow it with `popcon state`")
            return
        console.print(
            f"{emoji} frame {slot.index}: {slot.status.value}, pick {slot.pick}, {len(slot.candidates)} candidates"
            + (f", {slot.error}" if slot.error else "")
        )

    _run(go())


def _point(text: str) -> RefinePoint:
    """``x,y`` (a click on the region) or ``x,y,bg`` (a background click beside it) as a refine point."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) not in (2, 3) or not all(part.isdigit() for part in parts[:2]) or parts[2:] not in ([], ["bg"]):
        raise typer.BadParameter(f"a point is 'x,y' or 'x,y,bg' in pixels of the frame, got {text!r}")
    return RefinePoint(x=int(parts[0]), y=int(parts[1]), foreground=len(parts) == 2)


def _refined(slot: FrameState, candidate: int) -> str:
    refined = slot.candidate(candidate)
    versions = len(refined.versions) if refined is not None else 0
    score = f", score {refined.score:.2f}" if refined is not None and refined.score is not None else ""
    return f"frame {slot.index}: candidate {candidate} picked, {versions} earlier version(s){score}"


@app.command()
def refine(
    set_id: SetId,
    emoji: str,
    frame: int,
    candidate: int,
    point: Annotated[
        list[str], typer.Option("--point", help="A click 'x,y' on the region, or 'x,y,bg' beside it; repeat.")
    ],
    mode: Annotated[RefineMode, typer.Option(help="erase the region, or restore it from the source frame.")],
    following: Annotated[bool, typer.Option(help="Carry the correction through the emoji's later frames.")] = False,
) -> None:
    """Correct a candidate's cut-out with clicks: erase the clicked region, or restore it from the source frame."""

    async def go() -> None:
        request = RefineFrameInput(
            emoji=emoji,
            frame=frame,
            candidate=candidate,
            points=[_point(text) for text in point],
            mode=mode,
            following=following,
        )
        slot = await (await _client()).refine_frame(request, set_id=set_id)
        console.print(f"{emoji} {_refined(slot, candidate)}")

    _run(go())


@app.command("undo-refine")
def undo_refine(
    set_id: SetId,
    emoji: str,
    frame: int,
    candidate: int,
    following: Annotated[bool, typer.Option(help="Also undo the later frames' picks' last refinement.")] = False,
) -> None:
    """Take back a candidate's last refinement."""

    async def go() -> None:
        request = UndoRefineInput(emoji=emoji, frame=frame, candidate=candidate, following=following)
        slot = await (await _client()).undo_refine(request, set_id=set_id)
        console.print(f"{emoji} {_refined(slot, candidate)}")

    _run(go())


@app.command()
def drop(
    set_id: SetId,
    emoji: str,
    reviewer: Annotated[str, typer.Option()] = "",
    reason: Annotated[str, typer.Option(help="Why, kept in the set's state.")] = "",
    force: Annotated[
        bool, typer.Option(help="Drop it even when a platform target then refuses the set (LINE takes 8 to 40).")
    ] = False,
) -> None:
    """Take an emoji out of the set; its work in flight stops, its files stay."""

    async def go() -> None:
        request = DropActionInput(action=emoji, reviewer=reviewer, reason=reason, force=force)
        client = await _client()
        await client.drop_action(request, set_id=set_id)
        state = await client.state(set_id)
        console.print(f"{emoji} dropped; the set has {', '.join(a.name for a in state.actions)}")
        for refusal in state.export_refusals:
            console.print(f"[yellow]refused:[/] {refusal}")

    _run(go())


async def _report(call: Callable[[EmojiSetClient], Awaitable[object]], done: str) -> None:
    await call(await _client())
    console.print(done)


@app.command()
def approve(set_id: SetId, reviewer: Annotated[str, typer.Option()] = "") -> None:
    """Approve a set for assembly."""

    async def go() -> None:
        await (await _client()).approve(set_id, reviewer=reviewer)
        console.print(f"{set_id} approved: it is assembled once the regenerations under way are done")

    _run(go())


@app.command()
def cancel(
    set_id: SetId, reason: Annotated[str, typer.Option()] = "", reviewer: Annotated[str, typer.Option()] = ""
) -> None:
    """Cancel a set."""

    async def go() -> None:
        await (await _client()).cancel(set_id, reason=reason, reviewer=reviewer)
        console.print(f"{set_id} cancelled")

    _run(go())


@app.command()
def result(
    set_id: SetId,
    out: Annotated[Path | None, typer.Option(help="Copy the exported files into this folder.")] = None,
) -> None:
    """Wait for a set to end and show (or download) its result."""

    async def go() -> None:
        finished = await (await _client()).result(set_id)
        if out is None:
            console.print_json(finished.model_dump_json(exclude={"state"}))
            return
        for path in download_result(finished, out, ArtifactSettings()):
            console.print(str(path))
        _report_refusals(finished.packages)

    _run(go())


def _report_refusals(packages: list[PackageOutput]) -> None:
    for package in packages:
        if package.error:
            console.print(f"[yellow]{package.target.value}: not exported[/yellow]: {package.error}")


@app.command()
def export(
    set_id: SetId,
    target: Annotated[list[ExportTarget], typer.Option("--target", "-t", help="A platform; repeat for several.")],
    out: Annotated[Path | None, typer.Option(help="Copy the packages into this folder.")] = None,
) -> None:
    """Export a completed set again for other platforms, from its approved picks (nothing else is redone)."""

    async def go() -> None:
        exported = await (await _client()).export(set_id, target)
        if out is None:
            console.print_json(exported.model_dump_json())
        else:
            for path in download_packages(exported.packages, out, ArtifactSettings()):
                console.print(str(path))
        _report_refusals(exported.packages)

    _run(go())


@app.command(name="list")
def list_sets(
    phase: Annotated[Phase | None, typer.Option(help="Only sets in this phase, e.g. awaiting_review.")] = None,
    owner: Annotated[str | None, typer.Option()] = None,
    awaiting: Annotated[
        str | None, typer.Option(help="Only sets waiting for this, e.g. start_frame_review, custom_prompt.")
    ] = None,
    limit: Annotated[int, typer.Option()] = 50,
) -> None:
    """List sets, newest first."""

    async def go() -> None:
        sets = await (await _client()).list_sets(phase=phase, owner=owner, awaiting=awaiting, limit=limit)
        table = Table("set id", "status", "phase", "waiting for", "frames", "owner", "started")
        for item in sets:
            table.add_row(
                item.set_id,
                item.status,
                item.phase or "",
                ", ".join(item.awaiting),
                f"{item.frames_done}/{item.frames_total}" if item.frames_total else "",
                item.owner or "",
                item.started_at.isoformat(timespec="seconds") if item.started_at else "",
            )
        console.print(table)

    _run(go())


@app.command()
def review(
    host: Annotated[
        str | None,
        typer.Option(help="Bind address (default 127.0.0.1; any other needs POPCON_REVIEW_SECRET or _TOKEN)."),
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8300).")] = None,
) -> None:
    """Serve the review web app: start sets, follow them live, pick, regenerate, refine, approve, download."""
    from starter.review.credentials import WeakSecret
    from starter.review.server import serve
    from starter.review.settings import ReviewSettings, TokenMissing

    settings = ReviewSettings()
    bound = host or settings.review_host
    scheme = "https" if settings.review_tls_certfile else "http"
    console.print(f"review app on {scheme}://{bound}:{port or settings.review_port}/")
    try:
        serve(host, port, settings=settings)
    except (TokenMissing, WeakSecret) as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(1) from err


@app.command("review-token")
def review_token(
    reviewer: Annotated[str, typer.Option(help="The reviewer's name: every message they send is signed with it.")],
    owner: Annotated[
        list[str] | None, typer.Option(help="An owner whose sets they may see and act on (repeat for more).")
    ] = None,
    all_owners: Annotated[bool, typer.Option(help="Every owner's sets (an operator).")] = False,
    days: Annotated[float, typer.Option(min=0.01, max=365, help="How long the token is valid.")] = 30.0,
) -> None:
    """Print an owner-scoped reviewer token signed with POPCON_REVIEW_SECRET (give it to that reviewer only)."""
    from starter.review.credentials import Reviewer, WeakSecret, check_strength, issue_token
    from starter.review.settings import ReviewSettings

    secret = ReviewSettings().review_secret
    if not reviewer.strip():
        console.print("[red]error:[/red] --reviewer names the reviewer; it cannot be blank")
        raise typer.Exit(1)
    if (not owner) == (not all_owners):
        console.print("[red]error:[/red] give the owners (--owner, repeated) or --all-owners, one of the two")
        raise typer.Exit(1)
    if secret is None:
        console.print("[red]error:[/red] set POPCON_REVIEW_SECRET (the review app's, at least 32 characters)")
        raise typer.Exit(1)
    try:
        check_strength("POPCON_REVIEW_SECRET", secret.get_secret_value())
    except WeakSecret as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(1) from err
    scope = Reviewer(name=reviewer.strip(), owners=None if all_owners else frozenset(owner or []))
    print(issue_token(secret.get_secret_value(), scope, days * 86400))


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Where the exported files go.")] = Path("out/demo"),
    prompt: Annotated[str, typer.Option()] = demo_module.DEMO_PROMPT,
    character: Annotated[
        Path | None, typer.Option(help="Make the set from this picture instead of the prompt.")
    ] = None,
    frames: Annotated[int, typer.Option()] = 12,
) -> None:
    """Run a demo set end to end on the local stack (starting it if needed) and write its files to OUT."""
    _run(
        demo_module.run_demo(
            DevStackSettings(),
            ArtifactSettings(),
            out=out,
            prompt=prompt,
            character=character,
            frames=frames,
            console=console,
        )
    )


@dev_app.command("start")
def dev_start() -> None:
    """Start the dev server and both workers in the background (no-op for what already runs)."""
    settings = DevStackSettings()
    started = _run(DevStack(settings).start())
    console.print(f"started: {', '.join(started) or 'nothing (already running)'}")
    console.print(f"Temporal Web UI: {settings.temporal_ui_url}   logs: {DevStack(settings).log_dir}")


@dev_app.command("stop")
def dev_stop() -> None:
    """Stop the background stack (workers drain first)."""
    stopped = DevStack(DevStackSettings()).stop()
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@dev_app.command("status")
def dev_status() -> None:
    """Show which services of the stack run."""
    console.print_json(json.dumps(DevStack(DevStackSettings()).status()))


@models_app.command("list")
def models_list() -> None:
    """List the weight sets the engines know, with licence, whether they are in the model folder, and whether the
    catalogue pins their files by sha256 (unpinned ones are loaded unverified)."""
    model_dir = GpuWorkerSettings().model_dir
    table = Table("name", "engine", "licence", "present", "sha256", "source")
    table.columns[0].no_wrap = True  # the name `models fetch` takes: never cut short
    for weights in weights_catalogue.CATALOGUE.values():
        source = weights.source
        where = source.url if isinstance(source, weights_catalogue.UrlFile) else f"{source.repo_id}@{source.revision}"
        present = "yes" if weights_catalogue.is_present(model_dir, weights) else "no"
        pinned = weights_catalogue.pin_status(weights)
        table.add_row(
            weights.name,
            weights.engine,
            weights.licence,
            present,
            "pinned" if pinned == "sha256" else f"[red]{pinned}[/red]",
            where,
        )
    console.print(table)
    console.print(f"model folder: {model_dir}")


@models_app.command("fetch")
def models_fetch(
    names: Annotated[list[str], typer.Argument(help="Weight sets to download (see `models list`).")],
) -> None:
    """Download weights into the model folder (run on a machine with network; then copy or bake the folder)."""

    def report(name: str, outcome: Path | str) -> None:
        console.print(f"{name}: {outcome}" if isinstance(outcome, Path) else f"[red]{name}:[/red] {outcome}")

    if not fetch_each(GpuWorkerSettings().model_dir, names, report):
        raise typer.Exit(1)


def main() -> None:
    """The ``popcon`` command: the CLI, then an exit without the interpreter's teardown.

    A Temporal client's Rust threads can outlive a short command and abort the finishing interpreter (``Fatal Python
    error: PyGILState_Release``, exit code 134, after the command's output; temporalio/sdk-python#300), which a
    script reading the exit code would take for a failure. Everything is flushed first.
    """
    try:
        app()
        code: object = 0
    except SystemExit as exit_:
        code = exit_.code
    if isinstance(code, str):
        print(code, file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
