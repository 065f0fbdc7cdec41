"""Platform exports on the demo set and on real animated emoji art: every file within its limits, and what it cost.

``python -m benchmarks.platform_exports`` fits two sets of 8 emoji to every platform target and prints, per target
and emoji: bytes, canvas, frames, playback, the ladder rung that first fitted, SSIM against the lossless frames over
white and over a dark chat background, and the validator's verdict on the file read back. It writes the same tables
to ``docs/platform-exports.md``.

- ``demo``: the demo's character in 8 poses (the procedural generator, 12 frames of 256 px, cut out by the default
  ``classical`` matting pipeline, as the workflow does).
- ``fluent``: 8 animations of ``@lobehub/fluent-emoji-anim-2`` (real shaded 3D-style art with true alpha; npm), 12
  frames spread over their first 24 frames.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from activities.export.platforms import BUILTIN_TARGETS, builtin_target, validate
from activities.export.platforms.base import DoesNotFitError, EmojiFrames
from activities.export.platforms.fitting import evenly_spaced
from benchmarks.emoji_data import fluent_animations
from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.pipeline import Pipelines
from testkit.emoji_frames import procedural_emoji

DOCS = Path(__file__).resolve().parent.parent / "docs"
DEMO_POSES = ("wave", "laugh", "heart", "thumbs-up", "cry", "angry", "sleep", "surprised")


@dataclass(frozen=True)
class Row:
    corpus: str
    target: str
    emoji: str
    file: str
    bytes: int
    limit: int
    size: str
    frames: int
    playback: str
    rung: str
    ssim_white: float
    ssim_dark: float
    verdict: str


def demo_set() -> list[EmojiFrames]:
    """The demo character in 8 poses, cut out by the classical pipeline from its drawn frames."""
    classical = Pipelines(builtin_steps()).build("classical")
    emojis = []
    for pose in DEMO_POSES:
        drawn = procedural_emoji(pose, size=256)
        matted = [Image.fromarray(classical.run(np.asarray(frame)[..., :3]).rgba, "RGBA") for frame in drawn.frames]
        emojis.append(EmojiFrames(pose, matted, drawn.frame_duration_ms))
    return emojis


def fluent_set() -> list[EmojiFrames]:
    clips = fluent_animations(count=8, frames=24)
    return [
        EmojiFrames(
            clip.name.removeprefix("fluent "), [Image.fromarray(clip.frames[i]) for i in evenly_spaced(24, 12)], 83
        )
        for clip in clips
    ]


def rows_for(corpus: str, emojis: Sequence[EmojiFrames], target_name: str) -> tuple[list[Row], str | None, float]:
    """The package's rows, or the refusal, and the seconds it took."""
    target = builtin_target(target_name)
    started = time.perf_counter()
    try:
        package = target.package(emojis)
    except DoesNotFitError as err:
        return [], str(err), time.perf_counter() - started
    elapsed = time.perf_counter() - started
    rows = []
    for file in package.files:
        if file.fitted is None:
            continue
        fitted = file.fitted
        rules = target.rules if (fitted.width, fitted.height) == target.rules.size.canvas() else None
        violations = validate.check_file(rules, file.data) if rules else []
        playback = f"{fitted.loop_s:g} s x {fitted.plays}" if fitted.plays else f"{fitted.loop_s:g} s, loops"
        rows.append(
            Row(
                corpus,
                target_name,
                file.emoji or "",
                file.name,
                len(file.data),
                target.rules.max_bytes,
                f"{fitted.width}x{fitted.height}",
                fitted.frames,
                playback,
                fitted.rung,
                fitted.ssim_white,
                fitted.ssim_dark,
                "valid" if not violations else ", ".join(v.rule for v in violations),
            )
        )
    return rows, None, elapsed


def table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| set | target | emoji | file | bytes (limit) | canvas | frames | playback | rung | SSIM white | SSIM dark "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.corpus} | {r.target} | {r.emoji} | {r.file} | {r.bytes:,} ({r.limit:,}) | {r.size} | {r.frames} | "
            f"{r.playback} | {r.rung} | {r.ssim_white:.4f} | {r.ssim_dark:.4f} | {r.verdict} |"
        )
    return lines


def summary(
    rows: Sequence[Row], refusals: dict[tuple[str, str], str], times: dict[tuple[str, str], float]
) -> list[str]:
    lines = [
        "| set | target | files | all within limits and valid | largest / limit | median SSIM white | min SSIM white | "
        "median SSIM dark | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (corpus, target), seconds in times.items():
        chosen = [r for r in rows if (r.corpus, r.target) == (corpus, target)]
        if not chosen:
            lines.append(f"| {corpus} | {target} | 0 | refused: {refusals[(corpus, target)]} | | | | | {seconds:.1f} |")
            continue
        valid = all(r.verdict == "valid" and r.bytes <= r.limit for r in chosen)
        largest = max(chosen, key=lambda r: r.bytes)
        lines.append(
            f"| {corpus} | {target} | {len(chosen)} | {'yes' if valid else 'NO'} | "
            f"{largest.bytes:,} / {largest.limit:,} | "
            f"{statistics.median(r.ssim_white for r in chosen):.4f} | {min(r.ssim_white for r in chosen):.4f} | "
            f"{statistics.median(r.ssim_dark for r in chosen):.4f} | {seconds:.1f} |"
        )
    return lines


def main(targets: Sequence[str], write_docs: bool) -> None:
    corpora = {"demo": demo_set(), "fluent": fluent_set()}
    rows: list[Row] = []
    refusals: dict[tuple[str, str], str] = {}
    times: dict[tuple[str, str], float] = {}
    for corpus, emojis in corpora.items():
        for target in targets:
            found, refusal, seconds = rows_for(corpus, emojis, target)
            rows += found
            times[(corpus, target)] = seconds
            if refusal:
                refusals[(corpus, target)] = refusal
    head = summary(rows, refusals, times)
    print("\n".join(head))
    if write_docs:
        text = [
            "# Platform exports, measured",
            "",
            "`python -m benchmarks.platform_exports` (see its docstring for the two sets). Per target: every file",
            "is read back by the validator's independent readers (PyAV, the acTL chunk) and checked against the",
            "target's rule table; SSIM compares the decoded frames with the lossless frames at the same canvas,",
            "composited over white and over a dark chat background (#1F1F1F). Rules: [platforms.md](platforms.md).",
            "",
            *head,
            "",
            "## Every file",
            "",
            *table(rows),
            "",
        ]
        (DOCS / "platform-exports.md").write_text("\n".join(text))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", choices=sorted(BUILTIN_TARGETS), help="default: every target")
    parser.add_argument("--no-docs", action="store_true", help="print only; do not rewrite docs/platform-exports.md")
    arguments = parser.parse_args()
    main(arguments.target or list(BUILTIN_TARGETS), write_docs=not arguments.no_docs)
