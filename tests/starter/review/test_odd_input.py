"""Odd input at the review app gets a clear answer, never a 500 or a wasted read: numbers that are no ASCII whole
numbers, deeply nested JSON, the id of a workflow that is no emoji set, a tiny PNG declaring a huge picture, and a
body larger than any form."""

from __future__ import annotations

import httpx

from starter.review.app import create_app
from starter.review.settings import ReviewSettings
from testkit.stack import Stack
from tests.activities.test_uploads import small_bomb
from tests.starter.review.conftest import raw_request
from tests.starter.review.test_refine_and_server import review_ready
from tests.starter.review.test_review_app import form, refused, slot_error
from tests.starter.test_client import rgba_png
from workflows import keys
from workflows.contract import ORCHESTRATION_TASK_QUEUE, EmojiFramesRef, ExportSetInput, ExportTarget
from workflows.export_set import ExportSetWorkflow


async def test_odd_numbers_deep_json_an_export_id_and_a_bomb_get_clear_answers_not_500s(
    stack: Stack, http: httpx.AsyncClient, set_id: str
) -> None:
    state = await review_ready(stack, set_id)
    pick = state.actions[0].frames[1].picked()
    assert pick is not None
    base = f"/sets/{set_id}/refine/wave/1/{pick.index}"
    deep = await http.post(base, content=b"[" * 100_000 + b"]" * 100_000, headers={"Content-Type": "application/json"})
    assert deep.status_code == 422 and "16,384" in deep.json()["error"], deep.text
    deep = await http.post(base, content=b'{"points": ' + b"[" * 20 + b"]" * 20 + b"}")
    assert deep.status_code == 422 and "nests deeper than 8" in deep.json()["error"], deep.text
    ok = await http.post(base, json={"points": [{"x": 10, "y": 10, "foreground": True}], "mode": "erase"})
    assert ok.status_code == 200, ok.text
    for bad in ("²", "9" * 5000, "٣"):
        assert (await http.get(f"/sets/{set_id}/refine/wave/{bad}/0")).status_code == 404
        assert (await http.get(f"/sets/{set_id}/img/frame/wave/0/{bad}/matte")).status_code == 404
        assert (await http.get(f"/sets/{set_id}/img/character/{bad}")).status_code == 404
        picked = await http.post(f"/sets/{set_id}/emoji/wave/frames/0/pick", data={"candidate": bad})
        assert "whole number" in slot_error(await refused(http, picked), "slot-wave-0")
        picked = await http.post(f"/sets/{set_id}/emoji/wave/frames/{bad}/pick", data={"candidate": "0"})
        assert picked.status_code in (303, 404), picked.status_code
    await stack.sets.cancel(set_id)

    frame = stack.store.put(keys.candidate_key(set_id, "wave", 0, 0, "matte.png"), rgba_png(), "image/png")
    emoji = EmojiFramesRef(pose="wave", frames=[frame, frame], frame_duration_ms=100)
    await stack.client.execute_workflow(
        ExportSetWorkflow.run,
        ExportSetInput(set_id=set_id, targets=[ExportTarget.SLACK], emojis=[emoji]),
        id=f"{set_id}-export",
        task_queue=ORCHESTRATION_TASK_QUEUE,
    )
    page = await http.get(f"/sets/{set_id}-export")
    assert page.status_code == 404, page.text[:300]

    bomb = await http.post(
        "/new",
        data=form(actions=["wave"], export_targets=["generic"]),
        files={"character_file": ("b.png", small_bomb(), "image/png")},
    )
    assert "declares 6320x6320 px but is only 103 bytes" in slot_error(await refused(http, bomb), "character_file")
    for value in ("²", "9" * 5000, "inf"):
        posted = await http.post(
            "/new",
            data=form(
                character_prompt="a cat", actions=["wave"], export_targets=["generic"], seed=value, deadline_hours=value
            ),
        )
        back = await refused(http, posted)
        assert "whole number" in slot_error(back, "seed") and "such as 2" in slot_error(back, "deadline_hours")


async def test_a_body_declared_larger_than_any_form_is_refused_before_it_is_read(stack: Stack) -> None:
    app = create_app(stack.sets, stack.store, settings=ReviewSettings(_env_file=None), host="127.0.0.1")

    status, body, _ = await raw_request(app, "/new", [(b"host", b"127.0.0.1:8300"), (b"content-length", b"300000000")])

    assert status == 413, body
