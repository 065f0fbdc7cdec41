"""The set page's comparing tools (``static/review.js``, ``static/compare.css``) in headless Chromium, on a fixture page
that follows the set page's DOM contract, served from a temporary folder with the real script and styles: the
player (play, pause, step, speed), a candidate swapped into the preview on hover or focus, the hover peek, the
enlarged dialog and its "Pick this one", the keyboard shortcuts, and a part of the page replaced as set.js does.

Each test runs at a desktop (1280 px) and a phone (390 px) width. Form posts are answered 204 (no navigation) and
observed with ``page.expect_request``.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from playwright.async_api import FloatRect, Page, ViewportSize, expect

from testkit.browser import BrowserSession

pytestmark = pytest.mark.browser

STATIC = Path(__file__).resolve().parents[3] / "starter" / "review" / "static"
SET = "S"
FRAMES = 4
CANDIDATES = 3
DURATION_MS = 100
EMOJI = {"wave": "see you later!", "laugh": "haha"}
NULL_FRAME = ("laugh", 2)
"""The one frame without a cut-out: laugh's frame 2 has candidates but no pick."""
VIEWPORTS: dict[str, ViewportSize] = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def image_url(emoji: str, frame: int, candidate: int) -> str:
    return f"/sets/{SET}/img/frame/{emoji}/{frame}/{candidate}/matte.png"


def picked(emoji: str, frame: int) -> int | None:
    return None if (emoji, frame) == NULL_FRAME else frame % CANDIDATES


def frames_of(emoji: str) -> list[str | None]:
    return [
        None if (pick := picked(emoji, frame)) is None else image_url(emoji, frame, pick) for frame in range(FRAMES)
    ]


def colour(emoji: str, frame: int, candidate: int) -> tuple[int, int, int, int]:
    """A distinct colour per cut-out."""
    base = list(EMOJI).index(emoji)
    return (40 + 60 * frame, 40 + 80 * candidate, 60 + 150 * base, 255)


def write_png(path: Path, rgba: tuple[int, int, int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    picture = Image.new("RGBA", (96, 96), (0, 0, 0, 0))
    picture.paste(rgba, (12, 12, 84, 84))
    picture.save(path)


def candidate_html(emoji: str, frame: int, candidate: int) -> str:
    url = image_url(emoji, frame, candidate)
    label = f"take 0, clip frame {frame * 4 + candidate} ({candidate - 1:+d})"
    chosen = " picked" if picked(emoji, frame) == candidate else ""
    ids = f"{emoji}-{frame}-{candidate}"
    return f"""
        <div class="candidate">
          <button type="submit" name="candidate" value="{candidate}" class="tile checker{chosen}"
                  data-candidate="{candidate}" data-image="{url}" data-large="{url}" data-label="{html.escape(label)}"
                  data-testid="candidate-{ids}"><img src="{url}" alt="candidate {candidate}">
            <span class="caption">#{candidate}</span></button>
          <button type="button" class="enlarge" data-testid="enlarge-{ids}"
                  aria-label="enlarge candidate {candidate}">⤢</button>
        </div>"""


def slot_html(emoji: str, frame: int) -> str:
    tiles = "".join(candidate_html(emoji, frame, candidate) for candidate in range(CANDIDATES))
    return f"""
    <div class="slot" id="slot-{emoji}-{frame}" data-emoji="{emoji}" data-frame="{frame}" tabindex="-1"
         data-testid="slot-{emoji}-{frame}">
      <h4>frame {frame}</h4>
      <form method="post" action="/sets/{SET}/emoji/{emoji}/frames/{frame}/pick" class="tiles" data-inplace>{tiles}
      </form>
    </div>"""


def section_html(emoji: str, bubble: str, *, open_slots: bool) -> str:
    frames = frames_of(emoji)
    first = next(src for src in frames if src)
    slots = "".join(slot_html(emoji, frame) for frame in range(FRAMES))
    return f"""
<section class="emoji" id="emoji-{emoji}" data-emoji="{emoji}" data-part="emoji-{emoji}">
  <h2>{emoji}</h2>
  <div class="player" data-emoji="{emoji}" data-duration="{DURATION_MS}" data-frames='{json.dumps(frames)}'
       data-testid="player-{emoji}">
    <div class="preview checker">
      <img class="anim" data-testid="preview-{emoji}" alt="{emoji} preview" src="{first}"></div>
    <div class="preview chat"><div class="bubble">{bubble}</div>
      <img class="anim" data-testid="preview-chat-{emoji}" alt="{emoji} in a chat" src="{first}"></div>
    <div class="player-controls" data-testid="player-controls-{emoji}"></div>
  </div>
  <details class="frames" data-part="slots-{emoji}"{" open" if open_slots else ""} data-testid="frames-{emoji}">
    <summary>frames</summary>{slots}
  </details>
</section>"""


def page_html() -> str:
    sections = "".join(
        section_html(emoji, bubble, open_slots=index == 0) for index, (emoji, bubble) in enumerate(EMOJI.items())
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>player fixture</title>
<link rel="stylesheet" href="/static/review.css">
<link rel="stylesheet" href="/static/compare.css">
</head>
<body>
<main>
<div id="set-body" data-set-id="{SET}">
<p><label>note <input type="text" name="note" data-testid="note"></label></p>
{sections}
<form id="approve-form" method="post" action="/sets/{SET}/approve">
  <button type="submit" class="primary" data-testid="approve-submit">Approve the set</button>
</form>
</div>
</main>
<script src="/static/review.js" defer></script>
</body>
</html>
"""


class Handler(http.server.SimpleHTTPRequestHandler):
    """Files from the folder; every POST answered 204 No Content (the page stays)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    """The fixture page at ``/index.html``, its images, and the real review.js, review.css and compare.css."""
    (tmp_path / "static").mkdir()
    for name in ("review.js", "review.css", "compare.css"):
        shutil.copy(STATIC / name, tmp_path / "static" / name)
    for emoji in EMOJI:
        for frame in range(FRAMES):
            for candidate in range(CANDIDATES):
                write_png(tmp_path / image_url(emoji, frame, candidate).lstrip("/"), colour(emoji, frame, candidate))
    (tmp_path / "index.html").write_text(page_html())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=list(VIEWPORTS))
async def page(request: pytest.FixtureRequest, browser: BrowserSession, site: str) -> Page:
    await browser.page.set_viewport_size(VIEWPORTS[request.param])
    await browser.page.add_init_script(COUNT_INTERVALS)
    await browser.page.goto(f"{site}/index.html")
    await expect(browser.page.get_by_test_id("player-toggle-wave")).to_have_text("Pause")
    return browser.page


COUNT_INTERVALS = """
(() => {
  const live = new Set(), set = window.setInterval, clear = window.clearInterval;
  window.setInterval = function (...args) { const id = set.apply(this, args); live.add(id); return id; };
  window.clearInterval = function (id) { live.delete(id); return clear.call(this, id); };
  window.liveIntervals = () => live.size;
})();
"""


async def frame_of(page: Page, emoji: str) -> str:
    return await page.get_by_test_id(f"preview-{emoji}").get_attribute("data-frame") or ""


async def src_of(page: Page, emoji: str) -> str:
    return await page.get_by_test_id(f"preview-{emoji}").get_attribute("src") or ""


async def wait_for_frame_change(page: Page, emoji: str) -> None:
    was = await frame_of(page, emoji)
    await page.wait_for_function(
        "([emoji, was]) => document.querySelector(`[data-testid=preview-${emoji}]`).dataset.frame !== was",
        arg=[emoji, was],
    )


async def assert_still(page: Page, emoji: str) -> None:
    """The preview keeps its frame across more than 3 frame durations."""
    was = await frame_of(page, emoji)
    await page.wait_for_timeout(4.5 * DURATION_MS)
    assert await frame_of(page, emoji) == was


async def pause(page: Page, emoji: str) -> None:
    await page.get_by_test_id(f"player-toggle-{emoji}").click()
    await expect(page.get_by_test_id(f"player-toggle-{emoji}")).to_have_text("Play")


async def step_to(page: Page, emoji: str, frame: int) -> None:
    """Step the (paused) player forward until it shows ``frame``."""
    for _ in range(FRAMES):
        if await frame_of(page, emoji) == str(frame):
            break
        await page.get_by_test_id(f"player-next-{emoji}").click()
    await expect(page.get_by_test_id(f"player-frame-{emoji}")).to_have_text(f"frame {frame} / {FRAMES}")


async def inside_viewport(page: Page, testid: str) -> FloatRect:
    box = await page.get_by_test_id(testid).bounding_box()
    size = page.viewport_size
    assert box is not None and size is not None
    assert box["x"] >= 0 and box["x"] + box["width"] <= size["width"], (testid, box, size)
    assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"], (testid, box, size)
    return box


async def test_the_player_plays_pauses_steps_and_changes_speed(page: Page, browser: BrowserSession) -> None:
    preview = page.get_by_test_id("preview-wave")
    toggle = page.get_by_test_id("player-toggle-wave")
    counter = page.get_by_test_id("player-frame-wave")
    await wait_for_frame_change(page, "wave")
    await wait_for_frame_change(page, "wave")
    await expect(toggle).to_have_attribute("aria-pressed", "true")
    await browser.shot("playing", page.get_by_test_id("player-wave"))

    await pause(page, "wave")
    await expect(toggle).to_have_attribute("aria-pressed", "false")
    await assert_still(page, "wave")
    shown = int(await frame_of(page, "wave"))
    await expect(counter).to_have_text(f"frame {shown} / {FRAMES}")
    assert await src_of(page, "wave") == frames_of("wave")[shown]
    assert await page.get_by_test_id("preview-chat-wave").get_attribute("src") == frames_of("wave")[shown]

    await page.get_by_test_id("player-next-wave").click()
    after = (shown + 1) % FRAMES
    await expect(preview).to_have_attribute("data-frame", str(after))
    await expect(counter).to_have_text(f"frame {after} / {FRAMES}")
    assert await src_of(page, "wave") == frames_of("wave")[after]
    await page.get_by_test_id("player-prev-wave").click()
    await expect(preview).to_have_attribute("data-frame", str(shown))
    await expect(counter).to_have_text(f"frame {shown} / {FRAMES}")
    await expect(toggle).to_have_text("Play")

    # laugh has no cut-out at frame 2: stepping skips it; stepping pauses a playing player.
    await page.get_by_test_id("player-next-laugh").click()
    await expect(page.get_by_test_id("player-toggle-laugh")).to_have_text("Play")
    await step_to(page, "laugh", 1)
    await page.get_by_test_id("player-next-laugh").click()
    await expect(page.get_by_test_id("preview-laugh")).to_have_attribute("data-frame", "3")
    await page.get_by_test_id("player-prev-laugh").click()
    await expect(page.get_by_test_id("preview-laugh")).to_have_attribute("data-frame", "1")

    player = page.get_by_test_id("player-wave")
    await expect(player).to_have_attribute("data-interval", str(DURATION_MS))
    await page.get_by_test_id("player-speed-wave").select_option("2")
    await expect(player).to_have_attribute("data-interval", str(DURATION_MS // 2))
    await page.get_by_test_id("player-speed-wave").select_option("0.25")
    await expect(player).to_have_attribute("data-interval", str(DURATION_MS * 4))
    await page.get_by_test_id("player-speed-wave").select_option("2")
    await toggle.click()
    await expect(toggle).to_have_text("Pause")
    ticks = await page.evaluate(
        """() => new Promise(done => {
          const img = document.querySelector('[data-testid=preview-wave]');
          let ticks = 0;
          const seen = new MutationObserver(() => ticks++);
          seen.observe(img, { attributes: true, attributeFilter: ['data-frame'] });
          setTimeout(() => { seen.disconnect(); done(ticks); }, 1000);
        })"""
    )
    assert ticks > 1.4 * 1000 / DURATION_MS, f"{ticks} frames in 1 s at 2x of {DURATION_MS} ms"
    assert await page.evaluate("window.liveIntervals()") == 1, "one timer per playing emoji (laugh is paused)"
    await browser.shot("controls", page.get_by_test_id("player-controls-wave"))


async def test_a_hovered_or_focused_candidate_is_swapped_into_the_preview(page: Page, browser: BrowserSession) -> None:
    marker = page.get_by_test_id("player-swap-wave")
    await expect(marker).to_be_hidden()
    await pause(page, "wave")
    candidate = page.get_by_test_id("candidate-wave-2-1")
    await candidate.hover()
    await expect(marker).to_have_text("showing candidate 1 at frame 2")
    await expect(marker).to_be_visible()
    await expect(page.get_by_test_id("player-wave")).to_have_class("player swapping")
    # A paused player jumps to the hovered candidate's frame.
    await expect(page.get_by_test_id("preview-wave")).to_have_attribute("data-frame", "2")
    assert await src_of(page, "wave") == image_url("wave", 2, 1)
    assert await page.get_by_test_id("preview-chat-wave").get_attribute("src") == image_url("wave", 2, 1)
    await expect(page.get_by_test_id("peek")).to_be_visible()
    await expect(page.get_by_test_id("peek-motion")).to_have_attribute("src", image_url("wave", 2, 1))
    await inside_viewport(page, "peek")
    await browser.shot("hovered candidate swapped in", full_page=False)

    await page.mouse.move(1, 1)
    await expect(marker).to_be_hidden()
    await expect(page.get_by_test_id("peek")).to_be_hidden()
    assert await src_of(page, "wave") == frames_of("wave")[2]
    await expect(page.get_by_test_id("player-frame-wave")).to_have_text(f"frame 2 / {FRAMES}")

    # Stepping while hovered: the candidate shows at its frame only.
    await page.get_by_test_id("player-prev-wave").click()
    await page.get_by_test_id("candidate-wave-1-2").hover()
    await expect(marker).to_have_text("showing candidate 2 at frame 1")
    await page.get_by_test_id("player-next-wave").click()  # the mouse leaves the candidate for the button
    await expect(marker).to_be_hidden()

    # Focus swaps too (keyboard), while the player plays: the candidate's image at its frame, the pick elsewhere.
    await page.get_by_test_id("player-toggle-wave").click()
    await page.mouse.move(1, 1)  # nothing under the pointer when the page scrolls to the focused candidate
    await page.get_by_test_id("candidate-wave-1-2").focus()
    await expect(marker).to_have_text("showing candidate 2 at frame 1")
    for frame, url in ((1, image_url("wave", 1, 2)), (3, frames_of("wave")[3])):
        await page.wait_for_function(
            """([frame, url]) => {
              const img = document.querySelector('[data-testid=preview-wave]');
              return img.dataset.frame === frame && img.getAttribute('src') === url;
            }""",
            arg=[str(frame), url],
        )
    await page.get_by_test_id("note").focus()
    await expect(marker).to_be_hidden()

    # A candidate for a frame with no cut-out yet joins the animation while it is swapped in.
    await pause(page, "laugh")
    await page.get_by_test_id("frames-laugh").locator("summary").click()
    await page.get_by_test_id("candidate-laugh-2-0").hover()
    await expect(page.get_by_test_id("preview-laugh")).to_have_attribute("data-frame", "2")
    assert await src_of(page, "laugh") == image_url("laugh", 2, 0)
    await expect(page.get_by_test_id("player-swap-laugh")).to_have_text("showing candidate 0 at frame 2")


async def test_the_enlarged_view_shows_the_large_image_and_picks(page: Page, browser: BrowserSession) -> None:
    dialog = page.get_by_test_id("enlarged")
    marker = page.get_by_test_id("player-swap-wave")
    await page.get_by_test_id("enlarge-wave-3-1").click()
    await expect(dialog).to_be_visible()
    image = page.get_by_test_id("enlarged-image")
    await expect(image).to_have_attribute("src", image_url("wave", 3, 1))
    await page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=await image.element_handle())
    await expect(page.get_by_test_id("enlarged-label")).to_have_text("take 0, clip frame 13 (+0)")
    await expect(page.get_by_test_id("enlarged-pick")).to_be_enabled()
    await expect(page.get_by_test_id("enlarged-motion")).to_be_visible()
    box = await inside_viewport(page, "enlarged")
    shown = await image.bounding_box()
    assert shown is not None
    size = page.viewport_size
    assert size is not None
    if size["width"] >= 1000:
        assert shown["width"] >= 256, shown
    else:
        assert shown["width"] >= 256 and box["width"] <= size["width"], (shown, box)
    await browser.shot("enlarged")

    # The swap holds while the dialog is open, wherever the mouse goes.
    await expect(marker).to_have_text("showing candidate 1 at frame 3")
    await page.mouse.move(2, 2)
    await expect(marker).to_have_text("showing candidate 1 at frame 3")

    # Browse the slot's candidates; the picked one cannot be picked again.
    await page.get_by_test_id("enlarged-prev").click()
    await expect(image).to_have_attribute("src", image_url("wave", 3, 0))
    await expect(page.get_by_test_id("enlarged-pick")).to_be_disabled()  # candidate 0 is frame 3's pick
    await expect(page.get_by_test_id("enlarged-prev")).to_be_disabled()
    await expect(marker).to_have_text("showing candidate 0 at frame 3")
    await page.keyboard.press("ArrowRight")
    await page.keyboard.press("ArrowRight")
    await expect(image).to_have_attribute("src", image_url("wave", 3, 2))
    await expect(page.get_by_test_id("enlarged-next")).to_be_disabled()
    await page.keyboard.press("ArrowLeft")
    await expect(image).to_have_attribute("src", image_url("wave", 3, 1))

    async with page.expect_request(lambda r: r.method == "POST") as posted:
        await page.get_by_test_id("enlarged-pick").click()
    request = await posted.value
    assert request.url.endswith(f"/sets/{SET}/emoji/wave/frames/3/pick") and request.post_data == "candidate=1"
    await expect(dialog).to_be_hidden()

    await page.get_by_test_id("enlarge-wave-0-2").click()
    await expect(dialog).to_be_visible()
    await page.keyboard.press("Escape")
    await expect(dialog).to_be_hidden()
    await page.get_by_test_id("enlarge-wave-0-2").click()
    await page.get_by_test_id("enlarged-close").click()
    await expect(dialog).to_be_hidden()
    await page.mouse.move(1, 1)
    await page.get_by_test_id("note").focus()
    await expect(marker).to_be_hidden()


async def test_keyboard_shortcuts(page: Page, browser: BrowserSession) -> None:
    current = page.locator(".slot.current")
    await page.keyboard.press("j")
    await expect(page.get_by_test_id("slot-wave-0")).to_have_class("slot current")
    await page.keyboard.press("j")
    await expect(current).to_have_attribute("data-testid", "slot-wave-1")
    await page.keyboard.press("k")
    await expect(current).to_have_attribute("data-testid", "slot-wave-0")
    await expect(current).to_have_count(1)
    await expect(page.get_by_test_id("slot-wave-0")).to_be_focused()

    async with page.expect_request(lambda r: r.method == "POST") as posted:
        await page.keyboard.press("2")
    request = await posted.value
    assert request.url.endswith(f"/sets/{SET}/emoji/wave/frames/0/pick") and request.post_data == "candidate=1"

    # On into laugh's closed <details>: it opens.
    await expect(page.get_by_test_id("frames-laugh")).not_to_have_attribute("open", "")
    for _ in range(4):
        await page.keyboard.press("j")
    await expect(current).to_have_attribute("data-testid", "slot-laugh-0")
    await expect(page.get_by_test_id("frames-laugh")).to_have_attribute("open", "")
    await expect(page.get_by_test_id("slot-laugh-0")).to_be_in_viewport()

    # p, "." and "," drive the current slot's player; a paused player follows the current slot.
    await page.keyboard.press("p")
    await expect(page.get_by_test_id("player-toggle-laugh")).to_have_text("Play")
    await expect(page.get_by_test_id("player-toggle-wave")).to_have_text("Pause")
    await page.keyboard.press("j")
    await expect(page.get_by_test_id("preview-laugh")).to_have_attribute("data-frame", "1")
    await page.keyboard.press(".")
    await expect(page.get_by_test_id("preview-laugh")).to_have_attribute("data-frame", "3")
    await page.keyboard.press(",")
    await expect(page.get_by_test_id("preview-laugh")).to_have_attribute("data-frame", "1")

    # e enlarges the current slot's pick.
    await page.keyboard.press("e")
    await expect(page.get_by_test_id("enlarged-image")).to_have_attribute("src", image_url("laugh", 1, 1))
    await page.keyboard.press("j")  # no shortcuts while the dialog is open
    await page.keyboard.press("Escape")
    await expect(page.get_by_test_id("enlarged")).to_be_hidden()
    await expect(current).to_have_attribute("data-testid", "slot-laugh-1")

    # Typing in a text field is typing.
    note = page.get_by_test_id("note")
    await note.focus()
    await page.keyboard.type("jk2p?")
    await expect(note).to_have_value("jk2p?")
    await expect(current).to_have_attribute("data-testid", "slot-laugh-1")
    await expect(page.get_by_test_id("shortcuts-help")).to_be_hidden()
    await page.evaluate("document.activeElement.blur()")

    await page.keyboard.press("?")
    await expect(page.get_by_test_id("shortcuts-help")).to_be_visible()
    await expect(page.get_by_test_id("shortcuts-help")).to_contain_text("Shift + A")
    await inside_viewport(page, "shortcuts-help")
    await browser.shot("shortcuts help")
    await page.keyboard.press("?")
    await expect(page.get_by_test_id("shortcuts-help")).to_be_hidden()
    await page.get_by_test_id("shortcuts-toggle").click()
    await expect(page.get_by_test_id("shortcuts-help")).to_be_visible()
    await page.get_by_test_id("shortcuts-close").click()
    await expect(page.get_by_test_id("shortcuts-help")).to_be_hidden()
    await expect(page.get_by_test_id("shortcuts-toggle")).to_have_attribute("aria-expanded", "false")

    await page.evaluate("document.activeElement.blur()")
    async with page.expect_request(lambda r: r.method == "POST") as posted:
        await page.keyboard.press("Shift+A")
    assert (await posted.value).url.endswith(f"/sets/{SET}/approve")


async def test_the_shortcuts_toggle_stays_clear_of_the_controls_on_a_phone(page: Page, browser: BrowserSession) -> None:
    toggle = page.get_by_test_id("shortcuts-toggle")
    await toggle.scroll_into_view_if_needed()
    await expect(toggle).to_be_visible()
    mine = await toggle.bounding_box()
    assert mine is not None
    others = await page.evaluate(
        """() => [...document.querySelectorAll('button, select, a, input')]
          .filter(el => el.dataset.testid !== 'shortcuts-toggle' && el.offsetParent !== null)
          .map(el => {
            const r = el.getBoundingClientRect();
            return [el.dataset.testid || el.tagName, r.x, r.y, r.width, r.height];
          })"""
    )
    size = page.viewport_size
    assert size is not None
    if size["width"] < 900:
        for name, x, y, width, height in others:
            overlaps = x < mine["x"] + mine["width"] and mine["x"] < x + width
            overlaps = overlaps and y < mine["y"] + mine["height"] and mine["y"] < y + height
            assert not overlaps, f"the shortcuts toggle covers {name}"
    await browser.shot("shortcuts toggle")


REPLACE_SECTION = """async (emoji) => {
  const html = await (await fetch('/index.html')).text();
  const fresh = new DOMParser().parseFromString(html, 'text/html').getElementById(`emoji-${emoji}`);
  const el = document.adoptNode(fresh);
  document.getElementById(`emoji-${emoji}`).replaceWith(el);
  window.popconReview.startPreviews(el);
}"""


NEAR_SCREEN = """() => Array.from(document.querySelectorAll('.player')).filter((el) => {
  const box = el.getBoundingClientRect();
  return box.bottom > -200 && box.top < window.innerHeight + 200;
}).length"""
"""How many players are on or within 200 px of the screen: those that play."""


async def test_a_player_off_screen_plays_nothing_until_it_is_scrolled_to(page: Page) -> None:
    last = list(EMOJI)[-1]
    below = await page.evaluate(
        "(name) => document.querySelector(`[data-testid=player-${name}]`).getBoundingClientRect().top "
        "- window.innerHeight",
        last,
    )
    assert below > 200, "the fixture's last player starts off screen"
    assert await page.evaluate("window.liveIntervals()") == await page.evaluate(NEAR_SCREEN)
    still = await frame_of(page, last)
    await page.wait_for_timeout(DURATION_MS * 4)
    assert await frame_of(page, last) == still, "an off-screen preview does not animate"
    await page.get_by_test_id(f"player-{last}").scroll_into_view_if_needed()
    await wait_for_frame_change(page, last)


async def test_a_replaced_part_keeps_its_player_state_and_one_timer(page: Page, browser: BrowserSession) -> None:
    await page.set_viewport_size({"width": 1280, "height": 2000})  # both players on screen: both play
    await page.wait_for_function("window.liveIntervals() === 2")
    await page.get_by_test_id("player-speed-wave").select_option("2")
    await pause(page, "wave")
    await step_to(page, "wave", 2)
    assert await page.evaluate("window.liveIntervals()") == 1

    await page.evaluate(REPLACE_SECTION, "wave")
    await expect(page.get_by_test_id("player-toggle-wave")).to_have_text("Play")
    await expect(page.get_by_test_id("player-frame-wave")).to_have_text(f"frame 2 / {FRAMES}")
    await expect(page.get_by_test_id("preview-wave")).to_have_attribute("data-frame", "2")
    await expect(page.get_by_test_id("player-speed-wave")).to_have_value("2")
    await expect(page.get_by_test_id("player-wave")).to_have_attribute("data-interval", str(DURATION_MS // 2))
    assert await src_of(page, "wave") == frames_of("wave")[2]
    await assert_still(page, "wave")
    for _ in range(3):
        await page.evaluate("window.popconReview.startPreviews(document)")
    assert await page.evaluate("window.liveIntervals()") == 1

    await page.get_by_test_id("player-toggle-wave").click()
    await wait_for_frame_change(page, "wave")
    for _ in range(2):
        await page.evaluate(REPLACE_SECTION, "wave")
        await page.evaluate(REPLACE_SECTION, "laugh")
    await expect(page.get_by_test_id("player-toggle-wave")).to_have_text("Pause")
    await wait_for_frame_change(page, "wave")
    assert await page.evaluate("window.liveIntervals()") == 2

    # The current slot and a hovered candidate survive their part being replaced.
    await pause(page, "wave")
    await page.keyboard.press("j")
    await page.get_by_test_id("candidate-wave-3-2").hover()
    await expect(page.get_by_test_id("player-swap-wave")).to_have_text("showing candidate 2 at frame 3")
    await page.evaluate(REPLACE_SECTION, "wave")
    await expect(page.get_by_test_id("slot-wave-0")).to_have_class("slot current")
    await expect(page.get_by_test_id("player-swap-wave")).to_have_text("showing candidate 2 at frame 3")
    await expect(page.get_by_test_id("preview-wave")).to_have_attribute("src", image_url("wave", 3, 2))
    await browser.shot("after replacement", page.get_by_test_id("player-wave"))
