"""Each platform's upload package: its layout, its extra images, its refusals."""

from __future__ import annotations

import io
import zipfile

import pytest
from PIL import Image

from activities.export.platforms import BUILTIN_TARGETS, builtin_target
from activities.export.platforms.base import DoesNotFitError, EmojiFrames
from testkit.emoji_frames import procedural_emoji
from workflows.contract import ExportTarget
from workflows.presets import DEFAULT_ACTIONS


@pytest.fixture(scope="module")
def eight() -> list[EmojiFrames]:
    return [procedural_emoji(pose, frames=8, size=96) for pose in DEFAULT_ACTIONS]


def test_every_platform_of_the_contract_has_a_target_module() -> None:
    assert set(BUILTIN_TARGETS) == {target.value for target in ExportTarget} - {"generic"}
    with pytest.raises(KeyError, match="unknown export target 'myspace'"):
        builtin_target("myspace")


def test_line_emoji_package_is_numbered_files_and_a_tab_image_in_one_zip(eight: list[EmojiFrames]) -> None:
    package = builtin_target("line-emoji").package(eight)

    names = [file.name for file in package.files]
    assert names == [f"{i:03d}.png" for i in range(1, 9)] + ["tab.png"]
    assert [file.emoji for file in package.files[:8]] == list(DEFAULT_ACTIONS)
    assert package.archive is not None
    with zipfile.ZipFile(io.BytesIO(package.archive)) as archive:
        assert archive.namelist() == names
    with Image.open(io.BytesIO(package.files[-1].data)) as tab:
        assert tab.size == (96, 74) and getattr(tab, "n_frames", 1) == 1
    fitted = package.files[0].fitted
    assert fitted is not None and (fitted.width, fitted.height, fitted.loop_s, fitted.plays) == (180, 180, 1.0, 4)


def test_line_sticker_package_has_an_animated_main_image(eight: list[EmojiFrames]) -> None:
    package = builtin_target("line-sticker").package(eight)

    names = [file.name for file in package.files]
    assert names == [f"{i:02d}.png" for i in range(1, 9)] + ["main.png", "tab.png"]
    with Image.open(io.BytesIO(package.files[8].data)) as main:
        assert main.size == (240, 240) and getattr(main, "n_frames", 1) > 1
    assert package.files[0].fitted is not None and package.files[0].fitted.height == 270


def test_a_set_line_does_not_take_is_refused_before_any_encoding(eight: list[EmojiFrames]) -> None:
    with pytest.raises(
        DoesNotFitError, match="set_count: LINE animated emoji takes sets of 8 to 40 emoji, this one has 7"
    ):
        builtin_target("line-emoji").package(eight[:7])
    with pytest.raises(DoesNotFitError, match="set_count: LINE animated stickers takes sets of 8, 16, 24 emoji"):
        builtin_target("line-sticker").package(eight[:7])


def test_two_identical_emoji_are_refused(eight: list[EmojiFrames]) -> None:
    twins = [eight[0], *eight[1:7], EmojiFrames("wave-again", eight[0].frames, eight[0].frame_duration_ms)]
    with pytest.raises(DoesNotFitError, match=r"duplicate_emoji: 008\.png shows the same frames as 001\.png"):
        builtin_target("line-emoji").package(twins)


def test_telegram_package_has_a_sticker_and_a_custom_emoji_per_emoji() -> None:
    package = builtin_target("telegram").package([procedural_emoji("wave", frames=6, size=64)])

    assert [file.name for file in package.files] == ["stickers/wave.webm", "emoji/wave.webm"]
    assert package.archive is None
    sticker, emoji = (file.fitted for file in package.files)
    assert sticker is not None and emoji is not None
    assert (sticker.width, sticker.height, emoji.width, emoji.height) == (512, 512, 100, 100)
