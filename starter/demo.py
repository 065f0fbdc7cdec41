"""The demo: one set of eight emoji end to end on the local stack, from a prompt or an uploaded picture. Start frames
are approved as a reviewer would (all at once), one frame candidate is picked by hand, the set is approved, and it is
exported as generic files and as a LINE animated emoji package.

The hand pick is the one a person would make: in the first emoji, the clean clip frame that is sharpest next to the
automatic pick it replaces (:func:`choose_hand_pick`); the demo prints each candidate's sharpness.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from rich.console import Console
from scipy import ndimage

from core.artifacts import ArtifactStore, open_store
from core.settings import ArtifactSettings
from starter.client import EmojiSetClient
from starter.devstack import DevStack, DevStackSettings
from starter.download import download_result
from starter.watch import watch_until
from workflows.contract import EmojiSetInput, FrameState, Phase, PickCandidateInput
from workflows.progress import cost_line

DEMO_PROMPT = "a round orange cat with a blue scarf"
DEMO_NEIGHBOURS = 1
"""One clip frame either side of each chosen one (the default is two): three candidates per slot keep the demo within
about two minutes on a fresh two-core machine."""
CLEAN = 1.0
"""The clip-frame quality of a frame the clip analysis found neither blurred nor glitched
(:func:`activities.clips.frame_quality`): a glitched frame can be as sharp as a clean one, so only clean ones count."""

Sharpness = dict[int, dict[int, float]]
"""Each frame slot's usable candidates' sharpness: ``{slot: {candidate: sharpness}}``."""


def sharpness(cutout: bytes) -> float:
    """How sharp a cut-out is: the mean absolute Laplacian of its grey levels over its opaque pixels.

    Pixels next to transparency are left out: there the Laplacian measures the cut's edge, not the picture.

    Args:
        cutout: The cut-out, an RGBA PNG.
    """
    image = Image.open(io.BytesIO(cutout)).convert("RGBA")
    inside = ndimage.binary_erosion(np.asarray(image.getchannel("A")) == 255)
    laplacian = np.abs(ndimage.laplace(np.asarray(image.convert("L"), np.float32)))
    return float(laplacian[inside].mean()) if inside.any() else 0.0


def measure_sharpness(frames: Sequence[FrameState], store: ArtifactStore) -> Sharpness:
    """The sharpness of every usable candidate's cut-out in ``frames``, read from ``store``."""
    return {
        frame.index: {c.index: sharpness(store.get(c.matte)) for c in frame.usable() if c.matte is not None}
        for frame in frames
    }


@dataclass(frozen=True)
class HandPick:
    """A candidate to pick by hand.

    Attributes:
        slot: Its frame slot.
        candidate: Its index in the slot.
        gain: Its sharpness over that of the automatic pick it replaces.
    """

    slot: int
    candidate: int
    gain: float


def choose_hand_pick(frames: Sequence[FrameState], measured: Sharpness) -> HandPick | None:
    """The candidate a person would swap in: among the clean (:data:`CLEAN`) usable candidates other than each slot's
    pick, the one sharpest relative to the pick it replaces (the earliest slot on a tie); None when there is none."""
    best: HandPick | None = None
    for frame in frames:
        sharp = measured[frame.index]
        if frame.pick not in sharp:
            continue
        for c in frame.usable():
            if c.index != frame.pick and c.quality >= CLEAN and c.index in sharp:
                gain = sharp[c.index] / max(sharp[frame.pick], 1e-6)
                if best is None or gain > best.gain:
                    best = HandPick(frame.index, c.index, gain)
    return best


def _print_sharpness(
    console: Console, emoji: str, frames: Sequence[FrameState], measured: Sharpness, hand: HandPick | None
) -> None:
    console.print(
        f"{emoji}: each candidate's sharpness (mean |Laplacian| of its cut-out; a: automatic pick, "
        "x: blurred or glitched clip frame, *: picked by hand)"
    )
    for frame in frames:
        marks = {c.index: "x" if c.quality < CLEAN else "" for c in frame.usable()}
        if frame.pick is not None:
            marks[frame.pick] = "a"
        if hand is not None and hand.slot == frame.index:
            marks[hand.candidate] = "*"
        cells = (f"{index}{marks.get(index, '')} {value:5.1f}" for index, value in measured[frame.index].items())
        console.print(f"  frame {frame.index:2d}: " + "   ".join(cells), highlight=False)


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
    emoji = state.actions[0]
    measured = measure_sharpness(emoji.frames, open_store(artifacts))
    hand = choose_hand_pick(emoji.frames, measured)
    _print_sharpness(console, emoji.name, emoji.frames, measured, hand)
    if hand is not None:
        pick = PickCandidateInput(emoji=emoji.name, frame=hand.slot, candidate=hand.candidate)
        await client.pick(pick, set_id=set_id)
        console.print(
            f"picked candidate {hand.candidate} of {emoji.name} frame {hand.slot} by hand "
            f"({hand.gain:.2f} x as sharp as the automatic pick)"
        )
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
    console.print(f"cost: {cost_line(await client.state(set_id))}")
    console.print(f"[green]done[/green]: {len(result.emojis)} emoji in {out}\nWeb UI: {client.web_ui_url(set_id)}")
    return out
