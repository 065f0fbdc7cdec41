"""The demo: one set of eight emoji end to end on the local stack, with a pick by hand and an approval, like a
reviewer would, exported as generic files and as a LINE animated emoji package."""

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


async def run_demo(
    settings: DevStackSettings, artifacts: ArtifactSettings, *, out: Path, prompt: str, frames: int, console: Console
) -> Path:
    """Start the stack if needed, run a set through review and assembly, and write its files to ``out``."""
    started = await DevStack(settings).start()
    if started:
        console.print(f"started {', '.join(started)} (stop with `make stop`)")
    client = await EmojiSetClient.connect(settings)
    set_id = await client.start(
        EmojiSetInput(character_prompt=prompt, frames_per_emoji=frames, candidates_per_frame=2, owner="demo")
    )
    console.print(f"set [bold]{set_id}[/bold]\nWeb UI: {client.web_ui_url(set_id)}")
    state = await watch_until(client, set_id, console)
    if state.phase is not Phase.AWAITING_REVIEW:
        raise RuntimeError(f"the demo set ended as {state.phase.value}: {state.notice or state.cancel_reason}")
    first = state.emojis[0].frames[0]
    other = next((c.index for c in first.usable() if c.index != first.pick), None)
    if other is not None:
        await client.pick(PickCandidateInput(emoji=state.emojis[0].pose, frame=0, candidate=other), set_id=set_id)
        console.print(f"picked candidate {other} of {state.emojis[0].pose} frame 0 by hand")
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
