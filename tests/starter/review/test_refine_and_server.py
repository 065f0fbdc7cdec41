"""The refine page and its points, and the app behind a real uvicorn server on a free port."""

from __future__ import annotations

import httpx
from pydantic import SecretStr

from starter.review.app import create_app
from starter.review.settings import ReviewSettings
from testkit.stack import Stack, wait_for_phase
from testkit.web import served
from tests.starter.review import test_review_app
from tests.starter.review.test_review_app import slot_error, start_set
from workflows.contract import EmojiSetState, Phase, ReviewPolicy, StagePolicy

TOKEN = "another-s3cret-for-tests-Hd83kQpZ2vN7"


async def review_ready(stack: Stack, set_id: str) -> EmojiSetState:
    await start_set(stack, set_id, review=ReviewPolicy(start_frames=StagePolicy.AUTO))
    return await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)


async def test_the_refine_page_shows_matte_and_source_and_refuses_points_outside_the_frame(
    stack: Stack, http: httpx.AsyncClient, set_id: str
) -> None:
    state = await review_ready(stack, set_id)
    frame = state.actions[0].frames[1]
    pick = frame.picked()
    assert pick is not None and pick.matte is not None
    base = f"/sets/{set_id}/refine/wave/1/{pick.index}"

    page = await http.get(base)
    assert page.status_code == 200
    for testid in (
        "refine-canvas-matte",
        "refine-canvas-source",
        "refine-erase",
        "refine-restore",
        "refine-undo",
        "refine-reset",
        "refine-apply",
        "refine-following",
        "refine-prev",
        "refine-next",
        "error-refine",
        "refine-back",
    ):
        assert f'data-testid="{testid}"' in page.text, testid
    assert 'data-width="96" data-height="96"' in page.text
    assert f'data-prev="/sets/{set_id}/refine/wave/0/' in page.text
    assert f'data-next="/sets/{set_id}/refine/wave/2/' in page.text
    assert f"/sets/{set_id}/img/frame/wave/1/{pick.index}/source?v={pick.source.sha256[:16]}" in page.text
    first = await http.get(f"/sets/{set_id}/refine/wave/0/{state.actions[0].frames[0].pick}")
    assert 'data-prev=""' in first.text

    for missing in ("wave/1/99", "wave/9/0", "heart/0/0", "..%2f/0/0", "wave/x/0"):
        assert (await http.get(f"/sets/{set_id}/refine/{missing}")).status_code == 404, missing

    for points, message in (
        ([{"x": 96, "y": 10, "foreground": True}], "outside the frame (96 x 96 pixels)"),
        ([{"x": 5, "y": -1, "foreground": False}], "outside the frame"),
        ([{"x": 5.5, "y": 3, "foreground": True}], "whole pixel numbers"),
        ([{"x": "5", "y": 3}], "whole pixel numbers"),
        ([], "at least one point"),
        (["5,3"], "not an object"),
    ):
        refused = await http.post(base, json={"points": points, "mode": "erase", "following": False})
        assert refused.status_code == 422, (points, refused.text)
        assert message in refused.json()["error"], refused.json()
    not_json = await http.post(base, content=b"x=1", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert not_json.status_code == 422
    unknown = await http.post(f"/sets/{set_id}/refine/wave/1/99", json={"points": [{"x": 1, "y": 1}]})
    assert unknown.status_code == 404
    await stack.sets.cancel(set_id)


async def test_a_real_server_serves_the_pages_and_asks_for_the_token(stack: Stack, set_id: str) -> None:
    state = await review_ready(stack, set_id)
    open_app = create_app(stack.sets, stack.store, settings=ReviewSettings(_env_file=None), host="127.0.0.1")
    async with served(open_app) as url, httpx.AsyncClient(base_url=url) as http:
        page = await http.get(f"/sets/{set_id}")
        assert page.status_code == 200 and f'data-set-id="{set_id}"' in page.text
        picked = await http.post(
            f"/sets/{set_id}/emoji/wave/frames/0/pick",
            data={"candidate": "77"},
            headers={"Origin": url},
        )
        assert "no candidate 77" in slot_error(await test_review_app.refused(http, picked), "slot-wave-0")
        assert (await http.get("/static/set.js")).status_code == 200

    guarded = create_app(
        stack.sets,
        stack.store,
        settings=ReviewSettings(_env_file=None, review_token=SecretStr(TOKEN)),
        host="0.0.0.0",
    )
    async with served(guarded) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get(f"/sets/{set_id}")).status_code == 401
        assert (await http.get(f"/sets/{set_id}", params={"token": "wrong"})).status_code == 403
        first = await http.get(f"/sets/{set_id}", params={"token": TOKEN}, follow_redirects=True)
        assert first.status_code == 200 and str(first.url) == f"{url}/sets/{set_id}"
        matte = state.actions[0].frames[0].picked()
        assert matte is not None
        image = await http.get(f"/sets/{set_id}/img/frame/wave/0/{matte.index}/matte")
        assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    await stack.sets.cancel(set_id)
