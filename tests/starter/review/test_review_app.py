"""The review app against the real stack: start from the form, pages, picks, refusals, images, downloads."""

from __future__ import annotations

import asyncio
import html as html_module
import re
import uuid
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from testkit.stack import Stack, wait_for_phase
from tests.starter.review.conftest import SpyStore, png, raw_get
from workflows.contract import ActionStage, EmojiSetInput, EmojiSetState, Phase, PickSource, ReviewPolicy, StagePolicy

SMALL_FORM: dict[str, Any] = {
    "frames_per_emoji": "4",
    "takes_per_action": "1",
    "neighbours": "1",
    "clip_seconds": "1",
    "clip_fps": "12",
    "image_size": "96",
    "start_frame_candidates": "2",
    "matting_pipeline": "classical",
    "generator": "procedural",
    "review_character": "auto",
    "review_start_frames": "auto",
    "review_final": "human",
    "deadline_hours": "24",
    "style": "flat cartoon sticker",
}
SMALL: dict[str, Any] = {
    "actions": ["wave"],
    "frames_per_emoji": 4,
    "neighbours": 1,
    "clip_seconds": 1.0,
    "clip_fps": 12,
    "image_size": 96,
}


def slot_error(html: str, key: str) -> str:
    """The text of the error slot ``error-<key>`` on a page."""
    found = re.search(rf'data-testid="error-{re.escape(key)}"[^>]*>([^<]*)<', html)
    assert found, f"no error slot {key}"
    return html_module.unescape(found.group(1))


async def refused(http: httpx.AsyncClient, response: httpx.Response) -> str:
    """The page a refused plain post goes back to (post/redirect/get): the refusal next to its control."""
    assert response.status_code == 303 and "?flash=" in response.headers["location"], response.text[:300]
    page = await http.get(response.headers["location"])
    assert page.status_code == 200
    return page.text


def form(**fields: Any) -> dict[str, Any]:
    """Form fields as posted: lists become repeated fields."""
    return {**SMALL_FORM, **fields}


async def start_set(stack: Stack, set_id: str, **fields: Any) -> None:
    request = {"character_prompt": "a round orange cat", **SMALL, **fields}
    await stack.sets.start(EmojiSetInput(**request), set_id=set_id)


async def test_a_set_started_from_the_form_with_an_uploaded_picture_is_reviewed_picked_and_downloaded(
    stack: Stack, http: httpx.AsyncClient, spy_store: SpyStore
) -> None:
    owner = f"ana-{uuid.uuid4().hex[:6]}"
    response = await http.post(
        "/new",
        data=form(actions=["wave"], export_targets=["generic", "line-emoji", "discord"], owner=owner),
        files={"character_file": ("cat.png", png(), "image/png")},
    )
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    set_id = location.removeprefix("/sets/")
    assert location == f"/sets/{set_id}" and set_id.startswith("emoji-set-uploaded-character-")

    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    assert state.character.uploaded and state.input.owner == owner
    page = await http.get(location, params={"open": "wave"})
    assert page.status_code == 200
    html = page.text
    for testid in (
        "set-phase",
        "set-progress",
        "temporal-link",
        "preview-checker-wave",
        "preview-chat-wave",
        "strip-wave",
        "approve-submit",
        "cancel-submit",
        "action-regenerate-prompt-wave",
        "frame-regenerate-prompt-wave-0",
    ):
        assert f'data-testid="{testid}"' in html, testid
    assert f"/namespaces/default/workflows/{set_id}" in html
    wave = state.actions[0]
    for frame in wave.frames:
        for candidate in frame.candidates:
            assert f'data-testid="candidate-wave-{frame.index}-{candidate.index}"' in html

    # The set list shows it, newest first, filtered by owner and by what it waits for.
    listed = await http.get("/sets", params={"owner": owner, "awaiting": "final_review"})
    assert listed.status_code == 200 and f'data-testid="set-row-{set_id}"' in listed.text
    assert f'href="/sets/{set_id}"' in listed.text
    none = await http.get("/sets", params={"owner": owner, "phase": "completed"})
    assert f'data-testid="set-row-{set_id}"' not in none.text

    # Images: by role and indices, cached by content.
    frame = wave.frames[1]
    other = next(c for c in frame.usable() if c.index != frame.pick)
    assert other.matte is not None
    url = f"/sets/{set_id}/img/frame/wave/1/{other.index}/matte"
    image = await http.get(url, params={"v": other.matte.sha256[:16]})
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    assert image.content == stack.store.get(other.matte)
    assert image.headers["etag"] == f'"{other.matte.sha256}"' and "immutable" in image.headers["cache-control"]
    reads = len(spy_store.reads)
    again = await http.get(url, headers={"If-None-Match": image.headers["etag"]})
    assert again.status_code == 304 and len(spy_store.reads) == reads, "a 304 reads nothing"
    unpinned = await http.get(url)
    assert unpinned.status_code == 200 and "immutable" not in unpinned.headers["cache-control"]
    source = await http.get(f"/sets/{set_id}/img/frame/wave/1/{other.index}/source")
    assert source.status_code == 200 and source.content == stack.store.get(other.source)
    start_frame = wave.start_frames[0]
    start = await http.get(f"/sets/{set_id}/img/start/wave/{start_frame.index}")
    assert start.status_code == 200 and start.content == stack.store.get(start_frame.image)
    assert (await http.get(f"/sets/{set_id}/img/character/0")).status_code == 200
    for missing in ("frame/wave/1/99/matte", "frame/wave/9/0/matte", "frame/heart/0/0/matte", "start/wave/7"):
        assert (await http.get(f"/sets/{set_id}/img/{missing}")).status_code == 404, missing

    # Live progress as JSON.
    progress = (await http.get(f"/sets/{set_id}/state.json")).json()
    assert progress["phase"] == "awaiting_review" and progress["awaiting"] == ["final_review"]
    assert progress["frames_done"] == progress["frames_total"] == 4 and len(progress["fingerprint"]) == 16

    # Pick by POST: the page comes back to the slot.
    picked = await http.post(f"/sets/{set_id}/emoji/wave/frames/1/pick", data={"candidate": str(other.index)})
    assert picked.status_code == 303 and picked.headers["location"].startswith(f"/sets/{set_id}?open=wave")
    assert picked.headers["location"].endswith("#slot-wave-1")
    slot = (await stack.sets.state(set_id)).actions[0].frames[1]
    assert slot.pick == other.index and slot.picked_by is PickSource.HUMAN

    # Approve; a pick sent from the stale page afterwards shows the workflow's refusal next to the slot.
    approved = await http.post(f"/sets/{set_id}/approve", data={"reviewer": "ana"})
    assert approved.status_code == 303
    stale = await http.post(
        f"/sets/{set_id}/emoji/wave/frames/1/pick", data={"candidate": str(frame.candidates[0].index)}
    )
    assert re.search(r"being approved|has ended|are closed", slot_error(await refused(http, stale), "slot-wave-1")), (
        stale.text
    )

    result = await stack.sets.result(set_id)
    assert result.status == "completed"
    done = await http.get(location)
    assert done.status_code == 200 and 'data-testid="downloads"' in done.text
    assert 'data-testid="approve-submit"' not in done.text, "a finished set shows no steering controls"
    assert 'data-testid="package-error-line-emoji"' in done.text, "LINE emoji take 8 to 40: the refusal is shown"
    [discord] = [p for p in result.packages if p.target.value == "discord"]
    assert discord.files and discord.archive is None, "Discord takes its files one by one"
    for number, file in enumerate(discord.files):
        assert f'data-testid="download-discord-{number}"' in done.text
        download = await http.get(f"/sets/{set_id}/download/discord/files/{number}")
        assert download.status_code == 200 and download.content == stack.store.get(file.file)
        assert download.headers["content-disposition"].startswith('attachment; filename="discord-')
    assert (await http.get(f"/sets/{set_id}/download/discord/files/{len(discord.files)}")).status_code == 404
    assert (await http.get(f"/sets/{set_id}/download/line-emoji")).status_code == 404, "refused: no archive"
    webp = await http.get(f"/sets/{set_id}/download/emoji/wave/webp")
    assert webp.status_code == 200 and webp.content == stack.store.get(result.emojis[0].webp)
    assert (await http.get(f"/sets/{set_id}/download/slack")).status_code == 404, "not a target of this set"
    assert (await http.get(f"/sets/{set_id}/img/contact-sheet")).status_code == 200

    finished = await http.get("/sets", params={"owner": owner})
    assert f'data-testid="set-row-{set_id}"' in finished.text


async def test_start_frames_are_reviewed_on_the_page(stack: Stack, http: httpx.AsyncClient, set_id: str) -> None:
    await start_set(stack, set_id, actions=["wave", "heart"], review=ReviewPolicy(), start_frame_candidates=2)
    async with asyncio.timeout(60):
        while not all(
            a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in (await stack.sets.state(set_id)).actions
        ):
            await asyncio.sleep(0.1)
    page = (await http.get(f"/sets/{set_id}")).text
    for testid in (
        "start-tile-wave-0",
        "start-tile-wave-1",
        "start-approve-wave",
        "start-approve-all",
        "start-regenerate-prompt-heart",
        "start-regenerate-submit-heart",
    ):
        assert f'data-testid="{testid}"' in page, testid

    picked = await http.post(f"/sets/{set_id}/start-frames/wave/pick", data={"candidate": "1"})
    assert picked.status_code == 303 and picked.headers["location"] == f"/sets/{set_id}#start-wave"
    regenerated = await http.post(f"/sets/{set_id}/start-frames/heart/regenerate", data={"prompt": "hugging a heart"})
    assert regenerated.status_code == 303
    empty = await http.post(f"/sets/{set_id}/start-frames/heart/regenerate", data={"prompt": "  "})
    assert "prompt" in slot_error(await refused(http, empty), "start-heart")
    unknown = await http.post(f"/sets/{set_id}/start-frames/wave/pick", data={"candidate": "9"})
    assert slot_error(await refused(http, unknown), "start-wave")

    approved = await http.post(f"/sets/{set_id}/start-frames/wave/approve", data={"reviewer": "ana"})
    assert approved.status_code == 303
    state = await stack.sets.state(set_id)
    assert state.actions[0].start_frame_pick == 1 and state.actions[0].start_frame_approved_by == "ana"
    again = await http.post(f"/sets/{set_id}/start-frames/wave/pick", data={"candidate": "0"})
    assert "does not await review" in slot_error(await refused(http, again), "start-wave")

    async with asyncio.timeout(60):
        while len((await stack.sets.state(set_id)).actions[1].start_frames) < 4:
            await asyncio.sleep(0.1)
    assert (await http.post(f"/sets/{set_id}/start-frames/approve", data={})).status_code == 303
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    none_left = await http.post(f"/sets/{set_id}/start-frames/approve", data={})
    assert "no start frame awaits review" in slot_error(await refused(http, none_left), "start-all")
    await stack.sets.cancel(set_id)


async def test_the_workflows_refusals_and_bad_input_show_next_to_their_control(
    stack: Stack, http: httpx.AsyncClient, set_id: str
) -> None:
    await start_set(stack, set_id, review=ReviewPolicy(start_frames=StagePolicy.AUTO))
    state: EmojiSetState = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)

    unknown = await http.post(f"/sets/{set_id}/emoji/wave/frames/2/pick", data={"candidate": "99"})
    unknown_page = await refused(http, unknown)
    assert "wave frame 2 has no candidate 99" in slot_error(unknown_page, "slot-wave-2")
    assert slot_error(unknown_page, "approve") == ""
    out_of_range = await http.post(f"/sets/{set_id}/emoji/wave/frames/9/pick", data={"candidate": "0"})
    assert "wave has frames 0-3, not 9" in slot_error(await refused(http, out_of_range), "page")
    not_a_number = await http.post(f"/sets/{set_id}/emoji/wave/frames/2/pick", data={"candidate": "one"})
    assert "whole number" in slot_error(await refused(http, not_a_number), "slot-wave-2")
    no_take = await http.post(f"/sets/{set_id}/emoji/wave/take", data={"take": "3"})
    assert "wave has no take 3" in slot_error(await refused(http, no_take), "take-wave")
    no_motion = await http.post(f"/sets/{set_id}/emoji/wave/regenerate", data={"motion_prompt": ""})
    assert "Motion prompt" in slot_error(await refused(http, no_motion), "action-wave")
    unknown_emoji = await http.post(f"/sets/{set_id}/emoji/dance/regenerate", data={"motion_prompt": "spins"})
    assert "unknown emoji 'dance'" in slot_error(await refused(http, unknown_emoji), "page")

    edit = await http.post(f"/sets/{set_id}/emoji/wave/frames/0/regenerate", data={"prompt": "eyes closed"})
    assert edit.status_code == 303
    async with asyncio.timeout(60):
        while (await stack.sets.state(set_id)).actions[0].frames[0].edits < 1:
            await asyncio.sleep(0.1)
    take = await http.post(f"/sets/{set_id}/emoji/wave/take", data={"take": "0"})
    assert take.status_code == 303

    unconfirmed = await http.post(f"/sets/{set_id}/cancel", data={"reason": "testing"})
    assert "tick" in slot_error(await refused(http, unconfirmed), "cancel")
    assert (await stack.sets.state(set_id)).phase is Phase.AWAITING_REVIEW, "one click cancels nothing"
    cancelled = await http.post(f"/sets/{set_id}/cancel", data={"reason": "testing", "confirm": "yes"})
    assert cancelled.status_code == 303
    await wait_for_phase(stack.sets, set_id, Phase.CANCELLED)
    twice = await http.post(f"/sets/{set_id}/cancel", data={"reason": "again"})
    assert slot_error(await refused(http, twice), "cancel")
    approve = await http.post(f"/sets/{set_id}/approve", data={})
    assert re.search("ended|cancelled", slot_error(await refused(http, approve), "approve"))
    closed = await http.get(f"/sets/{set_id}")
    assert closed.status_code == 200 and "cancelled" in closed.text
    assert state.set_id == set_id


async def test_unknown_sets_and_malformed_ids_are_404(http: httpx.AsyncClient) -> None:
    for path in (
        "/sets/emoji-set-nobody-00000000",
        "/sets/emoji-set-nobody-00000000/state.json",
        "/sets/emoji-set-nobody-00000000/img/start/wave/0",
        "/sets/emoji-set-nobody-00000000/download/generic",
        "/sets/bad%20id",
        "/sets/-leading-dash",
    ):
        assert (await http.get(path)).status_code == 404, path
    posted = await http.post("/sets/emoji-set-nobody-00000000/approve", data={})
    assert posted.status_code == 404
    assert "no emoji set" in posted.text


@pytest.mark.parametrize(
    "path",
    [
        "/sets/{id}/img/start/../../../../etc/passwd",
        "/sets/{id}/img/start/%2e%2e/0",
        "/sets/{id}/img/start/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd/0",
        "/sets/{id}/img/start/..%2f..%2f..%2fetc%2fpasswd/0",
        "/sets/{id}/img/frame/wave/0/0/%2Fetc%2Fpasswd",
        "/sets/{id}/img/frame/wave/0/0/..",
        "/sets/{id}/img/frame/wave/0/0/matte%2f..%2f..%2fsource",
        "/sets/{id}/img/frame/%2e%2e/0/0/matte",
        "/sets/{id}/img/frame/wave/-1/0/matte",
        "/sets/{id}/img/frame/wave/0/0/matte?version=../../x",
        "/sets/{id}/img/start//etc/passwd",
        "/sets/{id}/img//etc/passwd",
        "/sets/{id}/img/start/file:%2F%2F%2Fetc%2Fpasswd/0",
        "/sets/%2e%2e/img/start/wave/0",
        "/sets/..%2f..%2fetc/img/start/wave/0",
        "/sets//etc/passwd/img/start/wave/0",
        "/static/../app.py",
        "/static/%2e%2e/app.py",
        "/static/..%2fapp.py",
        "/static//etc/passwd",
    ],
)
async def test_path_traversal_on_image_routes_is_404_without_touching_files(
    stack: Stack, app: FastAPI, spy_store: SpyStore, path: str, set_id: str
) -> None:
    status, body = await raw_get(app, path.replace("{id}", set_id))
    assert status == 404, (path, body[:200])
    assert spy_store.reads == []
    assert b"root:" not in body and b"create_app" not in body


async def test_an_upload_that_is_not_a_picture_shows_the_refusal_next_to_the_file_field(
    http: httpx.AsyncClient, spy_store: SpyStore
) -> None:
    response = await http.post(
        "/new",
        data=form(actions=["wave"]),
        files={"character_file": ("cat.png", b"%PDF-1.4 not a picture", "image/png")},
    )
    page = await refused(http, response)
    assert "not a picture" in slot_error(page, "character_file")
    assert slot_error(page, "character_prompt") == ""

    truncated = png()[:200]
    response = await http.post(
        "/new", data=form(actions=["wave"]), files={"character_file": ("a.png", truncated, "image/png")}
    )
    assert "truncated" in slot_error(await refused(http, response), "character_file")


async def test_form_validation_errors_are_shown_next_to_their_fields(http: httpx.AsyncClient) -> None:
    nothing = await http.post("/new", data=form(actions=["wave"]))
    assert "a prompt, or upload a picture" in slot_error(await refused(http, nothing), "character_prompt")

    bad = await http.post(
        "/new",
        data=form(
            character_prompt="a cat",
            actions=["wave", "moonwalk"],
            frames_per_emoji="1",
            export_targets=[],
            custom_name=["Bad Name!"],
            custom_pose=["standing"],
            custom_motion=["spins"],
            matting_pipeline="no such/pipeline",
        ),
    )
    html = await refused(http, bad)
    assert "at least 2" in slot_error(html, "frames_per_emoji")
    assert "moonwalk" in slot_error(html, "actions")
    assert "choose at least one platform" in slot_error(html, "export_targets")
    assert "Name: use lower-case letters" in slot_error(html, "custom-0")
    assert "not a valid name" in slot_error(html, "matting_pipeline")
    assert 'value="a cat"' in html and 'data-testid="action-item-moonwalk"' in html, "the form keeps what was typed"

    both = await http.post(
        "/new",
        data=form(character_prompt="a cat", actions=["wave"]),
        files={"character_file": ("a.png", png(), "image/png")},
    )
    both_page = await refused(http, both)
    assert "not both" in slot_error(both_page, "character_prompt")
    assert 'data-testid="upload-not-kept"' in both_page and "a.png can be used" in both_page, "asked for again"
    assert 'name="character_upload"' not in both_page, "a refused form keeps no picture"
    forged = await http.post("/new", data=form(actions=["wave"], character_upload="../../etc/passwd"))
    assert "a prompt, or upload a picture" in slot_error(await refused(http, forged), "character_prompt")

    page = await http.get("/new")
    for testid in ("start-form", "field-character_prompt", "field-character_file", "preset-select", "add-preset",
                   "action-list", "add-custom", "custom-name-0", "field-frames_per_emoji", "field-takes_per_action",
                   "field-matting_pipeline", "target-generic", "start-submit"):  # fmt: skip
        assert f'data-testid="{testid}"' in page.text, testid


async def test_the_set_list_refuses_unknown_filters(http: httpx.AsyncClient) -> None:
    response = await http.get("/sets", params={"phase": "dancing", "awaiting": "coffee"})
    assert response.status_code == 422 and "unknown phase 'dancing'" in slot_error(response.text, "filter-phase")
    assert "unknown wait 'coffee'" in slot_error(response.text, "filter-awaiting")
    assert (await http.get("/")).headers["location"] == "/sets"


async def test_an_emoji_is_dropped_from_the_page(stack: Stack, http: httpx.AsyncClient, set_id: str) -> None:
    await start_set(stack, set_id, actions=["wave", "heart"], review=ReviewPolicy(start_frames=StagePolicy.AUTO))
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    page = (await http.get(f"/sets/{set_id}")).text
    assert 'data-testid="drop-form-wave"' in page and 'data-testid="drop-form-heart"' in page

    dropped = await http.post(f"/sets/{set_id}/emoji/heart/drop", data={"reason": "off-brand", "reviewer": "ana"})

    assert dropped.status_code == 303 and dropped.headers["location"] == f"/sets/{set_id}#start-frames"
    state = await stack.sets.state(set_id)
    assert [a.name for a in state.actions] == ["wave"]
    assert [(d.action, d.dropped_by, d.reason) for d in state.dropped] == [("heart", "ana", "off-brand")]
    page = (await http.get(f"/sets/{set_id}")).text
    assert "heart dropped by ana: off-brand" in page and 'data-testid="drop-form-wave"' not in page
    last = await http.post(f"/sets/{set_id}/emoji/wave/drop", data={})
    assert "wave is the set's last emoji" in slot_error(await refused(http, last), "drop-wave")
    malformed = await http.post(f"/sets/{set_id}/emoji/Not An Emoji/drop", data={})
    assert "action" in slot_error(await refused(http, malformed), "page").lower()
    await stack.sets.cancel(set_id)
