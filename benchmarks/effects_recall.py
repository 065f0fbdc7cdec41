"""The ``effects`` refiner on the procedural clips: how much of the dropped effects it restores, what noise it adds.

Each procedural clip (:func:`benchmarks.emoji_data.procedural_clips`) is rendered with its true alpha and the part of
it its effects add (sparkles, sweat drops, motion lines, pop strokes: ``RenderedClip.effect_alpha``), over white, as
drawn and through H.264 at CRF 18, 23 and 28 (:func:`benchmarks.matting_quality.h264`). A segmentation model that
keeps the character and drops its effects is stood in for by the character's own hard mask (true alpha minus the
effects, at 0.5); ``effects`` runs on that and is scored:

- **recall**: of the effect pixels (effect alpha >= 0.5, outside the character's mask), the share restored
  (alpha >= 0.5);
- **noise alpha**: background pixels the step made opaque more than a pixel away from anything drawn (true alpha <=
  0.02 within 1 px), as a share of the frame: compression noise or stray blobs taken for effects; the worst frame is
  reported beside the mean;
- **edge spill**: pixels of true alpha < 0.5 within a pixel of something drawn that the step made opaque: the
  anti-aliased rim of a restored effect, which restores at alpha 1 and is ``defringe``'s to re-estimate (it runs
  after ``effects`` in a pipeline).

Goals (issue 11): recall >= 0.9, compression noise adds at most 0.1% false alpha (noise alpha, worst frame).

    python -m benchmarks.effects_recall [--clips 16]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
from scipy import ndimage

from benchmarks.emoji_data import procedural_clips
from benchmarks.matting_quality import h264
from gpu_activity_worker.engines.base import MatteState
from gpu_activity_worker.engines.effects import EffectsStep

SETTINGS: tuple[int | None, ...] = (None, 18, 23, 28)
"""H.264 CRF of each setting; None: the frames as drawn."""
RECALL_GOAL = 0.9
FALSE_ALPHA_GOAL = 1e-3


def _restore(step: EffectsStep, rgb: np.ndarray, coarse: np.ndarray) -> np.ndarray:
    state = MatteState(image=rgb.astype(np.float32) / 255, alpha=coarse.astype(np.float32))
    alpha = step.apply(state).alpha
    assert alpha is not None
    return alpha >= 0.5


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=16)
    args = parser.parse_args(argv)
    step = EffectsStep()
    clips = [clip.render() for clip in procedural_clips(args.clips)]
    with_effects = sum(int((clip.effect_alpha >= 0.5).any()) for clip in clips)
    print(f"{len(clips)} procedural clips ({with_effects} with effects), {sum(len(c.clean) for c in clips)} frames")
    print(
        "| setting | effect pixels | recall | noise alpha mean | noise alpha worst frame | edge spill mean |"
        " ms/frame | goals |"
    )
    print("|---|---|---|---|---|---|---|---|")
    passed = True
    for crf in SETTINGS:
        found = total = 0
        false_alpha: list[float] = []
        spill: list[float] = []
        seconds = 0.0
        for clip in clips:
            frames = list(clip.clean) if crf is None else h264(list(clip.clean), crf)
            for rgb, alpha, effect in zip(frames, clip.alpha, clip.effect_alpha, strict=True):
                character = (alpha - effect) >= 0.5
                effects = (effect >= 0.5) & ~character
                started = time.process_time()
                restored = _restore(step, rgb, character)
                seconds += time.process_time() - started
                found += int((restored & effects).sum())
                total += int(effects.sum())
                added = restored & ~character & (alpha < 0.5)
                drawn = ndimage.binary_dilation(alpha > 0.02, structure=np.ones((3, 3), dtype=bool))
                false_alpha.append(float(np.mean(added & ~drawn)))
                spill.append(float(np.mean(added & drawn)))
        recall = found / max(total, 1)
        mean_false = float(np.mean(false_alpha))
        worst_false = float(np.max(false_alpha))
        ok = recall >= RECALL_GOAL and worst_false <= FALSE_ALPHA_GOAL
        passed &= ok
        name = "as drawn" if crf is None else f"H.264 CRF {crf}"
        print(
            f"| {name} | {total} | {recall:.3f} | {mean_false:.4%} | {worst_false:.4%} | {float(np.mean(spill)):.4%} | "
            f"{1000 * seconds / len(false_alpha):.1f} | {'PASS' if ok else 'MISS'} |"
        )
    print(f"\n{len(SETTINGS)} settings; goals recall >= {RECALL_GOAL}, noise alpha <= {FALSE_ALPHA_GOAL:.1%} per frame")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
