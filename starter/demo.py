"""The demo: one set of eight emoji end to end on the local stack, from a prompt or an uploaded picture. Start frames
are approved as a reviewer would (all at once), one frame candidate is picked by hand, the set is approved, and it is
exported as generic files and as a LINE animated emoji package."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from core.settings import ArtifactSettings
from starter.client import EmojiSetClient
from starter.devstack import DevStack, DevStackSettings
from starter.download import download_result
from starter.watch import watch_until
from workflows.contract import EmojiSetInput, Phase, PickCandidateInput

DEMO_PROMPT = "a round orange cat with a blue scarf"
DEMO_NEIGHBOURS = 1
"""One clip frame either side of each chosen one (the default is two): three candidates per slot keep the demo within
about two minutes on a fresh two-core machine."""


async def run_demo(
    settings: DevStackSettings,
    artifacts: ArtifactSettings,
    *,
    out: Path,
    prompt: str,
    character: Path | None,
    frames: int,
    console: Console,
) -> Path:
    """Start the stack if needed, run a set through its reviews and assembly, and write its files to ``out``."""
    started = await DevStack(settings).start()
    if started:
        console.print(f"started {', '.join(started)} (stop with `make stop`)")
    client = await EmojiSetClient.connect(settings, artifacts)
    image = client.upload(character.read_bytes()) if character is not None else None
    set_id = await client.start(
        EmojiSetInput(
            character_prompt=None if image else prompt,
            character_image=image,
            frames_per_emoji=frames,
            neighbours=DEMO_NEIGHBOURS,
            owner="demo",
        )
    )
    console.print(f"set [bold]{set_id}[/bold]\nWeb UI: {client.web_ui_url(set_id)}")
    state = await watch_until(client, set_id, console)
    while state.phase is Phase.AWAITING_START_FRAME_REVIEW:
        approved = await client.approve_start_frames(set_id, reviewer="demo")
        console.print(f"approved the start frames of {', '.join(approved)}")
        state = await watch_until(client, set_id, console)
    if state.phase is not Phase.AWAITING_REVIEW:
        raise RuntimeError(f"the demo set ended as {state.phase.value}: {state.notice or state.cancel_reason}")
    first = state.actions[0].frames[0]
    other = next((c.index for c in first.usable() if c.index != first.pick), None)
    if other is not None:
        await client.pick(PickCandidateInput(emoji=state.actions[0].name, frame=0, candidate=other), set_id=set_id)
        console.print(f"picked candidate {other} of {state.actions[0].name} frame 0 by hand")
    await client.approve(set_id, reviewer="demo")
    result = await client.result(set_id)
    for path in download_result(result, out, artifacts):
        console.print(f"  {path}")
    refused = [f"{package.target.value}: {package.error}" for package in result.packages if package.error]
    if refused:
        raise RuntimeError(f"the demo set was not exported: {'; '.join(refused)}")
    for package in result.packages:
        largest = max(file.file.size_bytes for file in package.files if file.emoji)
        console.print(f"{package.target.value} package: {len(package.files)} files, largest emoji {largest:,} bytes")
    console.print(f"[green]done[/green]: {len(result.emojis)} emoji in {out}\nWeb UI: {client.web_ui_url(set_id)}")
    return out
