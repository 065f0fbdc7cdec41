"""The matting benchmark cannot flatter: its report is what the committed code produces, and its parts are split once.

The report (``docs/matting-quality.md``) carries a small fixed sample of procedural clips, which the generator draws
offline; recomputing it here takes seconds. The Fluent split is checked when the benchmark's cache holds the Fluent
listings (``python -m benchmarks.matting_quality`` fills it), the rest always.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks import emoji_data
from benchmarks.emoji_data import HELD_OUT, SKIN_TONE, TUNE, procedural_clips
from benchmarks.matting_quality import COMMAND, REPORT, committed_fixed_sample, error_by_region, fixed_sample_rows
from testkit import matting_metrics as metrics

FIXTURES = Path(__file__).resolve().parent.parent / "gpu_activity_worker" / "data"


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip("|").split("|")]


def _same_figure(committed: str, produced: str) -> bool:
    """Equal as printed; a difference in the last printed digit (another CPU's rounding) also passes."""
    return committed == produced or math.isclose(float(committed), float(produced), rel_tol=1e-3)


def test_the_committed_report_carries_the_fixed_sample_the_code_produces() -> None:
    committed = committed_fixed_sample(REPORT.read_text())
    produced = fixed_sample_rows()

    stale = f"docs/matting-quality.md is stale: regenerate it with `{COMMAND}`"
    assert [_cells(row)[:5] for row in committed] == [_cells(row)[:5] for row in produced], stale
    for old, new in zip(committed, produced, strict=True):
        figures = zip(_cells(old)[5:], _cells(new)[5:], strict=True)
        assert all(_same_figure(a, b) for a, b in figures), f"{stale}\ncommitted {old}\nproduced  {new}"


def test_the_procedural_parts_are_one_seeded_sequence_split_once() -> None:
    tune = procedural_clips(part=TUNE)
    held_out = procedural_clips(4, part=HELD_OUT)

    assert len(tune) == emoji_data.TUNE_PROCEDURAL
    assert not {clip.name for clip in tune} & {clip.name for clip in held_out}
    assert procedural_clips(3, part=TUNE) == tune[:3]  # a smaller sample is the start of the part
    assert procedural_clips(2, part=HELD_OUT) == held_out[:2]
    with pytest.raises(ValueError, match="tune part has 16"):
        procedural_clips(emoji_data.TUNE_PROCEDURAL + 1, part=TUNE)
    with pytest.raises(ValueError, match="unknown part"):
        procedural_clips(1, part="test")


def test_every_fluent_emoji_the_tests_use_is_kept_out_of_the_held_out_part() -> None:
    used = {SKIN_TONE.sub("", path.stem.removeprefix("fluent-")) for path in FIXTURES.glob("fluent-*.png")}

    assert used
    assert used <= emoji_data.TEST_FIXTURE_EMOJI


def _fluent_cached() -> bool:
    return all((package.folder / "frame-counts.json").exists() for package in emoji_data.FLUENT_ANIMS)


@pytest.mark.skipif(not _fluent_cached(), reason="the benchmark's cache has no Fluent listings (run the benchmark)")
def test_the_fluent_parts_share_no_emoji_and_the_held_out_part_none_the_tests_use() -> None:
    tune = emoji_data.fluent_sample(210, part=TUNE)
    held_out = emoji_data.fluent_sample(30, part=HELD_OUT)

    def emoji(sample: list[emoji_data.FluentAnimation]) -> set[str]:
        return {SKIN_TONE.sub("", Path(animation.member).stem) for animation in sample}

    assert len(tune) == 3 * emoji_data.TUNE_FLUENT_PER_PACKAGE
    assert not emoji(tune) & emoji(held_out)
    assert not emoji(held_out) & emoji_data.TEST_FIXTURE_EMOJI
    with pytest.raises(ValueError, match="tune part has 70"):
        emoji_data.fluent_sample(213, part=TUNE)


def test_where_the_error_lies_adds_up_to_the_clips_sad_and_mse() -> None:
    """The report's split of a clip's error by region (error_by_region) adds up to its mean SAD and MSE per frame."""
    clip = procedural_clips(1, part=TUNE)[0].load()
    truths = [rgba[..., 3] / 255 for rgba in clip.frames[:3]]
    alphas = [(truth > 0.5).astype(np.float32) for truth in truths]  # a hard cut: errors at every edge

    split = error_by_region(alphas, truths, [metrics.error_regions(truth) for truth in truths])

    assert split[:, 0].sum() == pytest.approx(np.mean([metrics.sad(a, t) for a, t in zip(alphas, truths, strict=True)]))
    assert split[:, 1].sum() == pytest.approx(np.mean([metrics.mse(a, t) for a, t in zip(alphas, truths, strict=True)]))
    assert split[0, 0] > 0  # the outer edge
