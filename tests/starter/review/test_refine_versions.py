"""Refining through the refine page's POST routes on the real stack: an erase adds a matte version, undo takes it
back, and the page lists the versions."""

from __future__ import annotations

import io

import httpx
import numpy as np
from PIL import Image

from testkit.stack import Stack
from tests.starter.review.test_refine_and_server import review_ready
from workflows.contract import ArtifactRef, Candidate, PickSource


def opaque_point(png: bytes) -> dict[str, int | bool]:
    """A foreground click on the cut-out: the opaque pixel nearest the centre of its opaque area."""
    alpha = np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))[..., 3]
    ys, xs = np.nonzero(alpha > 250)
    assert len(xs), "the cut-out has no opaque pixel"
    cy, cx = ys.mean(), xs.mean()
    nearest = int(np.argmin((ys - cy) ** 2 + (xs - cx) ** 2))
    return {"x": int(xs[nearest]), "y": int(ys[nearest]), "foreground": True}


def candidate_of(state_candidates: list[Candidate], index: int) -> Candidate:
    return next(c for c in state_candidates if c.index == index)


async def test_an_erase_through_the_page_adds_a_matte_version_and_undo_brings_the_first_back(
    stack: Stack, http: httpx.AsyncClient, set_id: str
) -> None:
    state = await review_ready(stack, set_id)
    frame = state.actions[0].frames[1]
    other = next(c for c in frame.usable() if c.index != frame.pick)
    original: ArtifactRef | None = other.matte
    assert original is not None and other.versions == []
    base = f"/sets/{set_id}/refine/wave/1/{other.index}"
    first_url = f"/sets/{set_id}/img/frame/wave/1/{other.index}/matte?version=0&v={original.sha256[:16]}"

    page = await http.get(base)
    assert page.status_code == 200
    assert 'data-version="1">version 1<' in page.text
    assert 'data-testid="refine-version-1"' in page.text and 'data-testid="refine-version-2"' not in page.text
    assert first_url.replace("&", "&amp;") in page.text

    erased = await http.post(
        base, json={"points": [opaque_point(stack.store.get(original))], "mode": "erase", "following": False}
    )
    assert erased.status_code == 200, erased.text
    body = erased.json()
    assert body["ok"] and body["versions"] == 2 and len(body["version_urls"]) == 2
    assert body["version_urls"][0] == first_url
    slot = (await stack.sets.state(set_id)).actions[0].frames[1]
    refined = candidate_of(slot.candidates, other.index)
    assert refined.matte is not None and refined.matte != original
    assert [v.matte for v in refined.versions] == [original] and refined.refinements == 1
    assert slot.pick == other.index and slot.picked_by is PickSource.HUMAN, "the refined candidate is picked"
    assert body["matte_url"] == f"/sets/{set_id}/img/frame/wave/1/{other.index}/matte?v={refined.matte.sha256[:16]}"
    now = await http.get(body["matte_url"])
    assert now.status_code == 200 and now.content == stack.store.get(refined.matte)
    assert now.content != stack.store.get(original)
    before = await http.get(f"/sets/{set_id}/img/frame/wave/1/{other.index}/matte", params={"version": "0"})
    assert before.status_code == 200 and before.content == stack.store.get(original)
    assert (await http.get(f"/sets/{set_id}/img/frame/wave/1/{other.index}/matte?version=2")).status_code == 404
    page = await http.get(base)
    assert 'data-version="2">version 2<' in page.text and 'data-testid="refine-version-2"' in page.text

    undone = await http.post(f"{base}/undo", json={})
    assert undone.status_code == 200, undone.text
    body = undone.json()
    assert body["versions"] == 1 and body["version_urls"] == [first_url]
    assert body["matte_url"] == f"/sets/{set_id}/img/frame/wave/1/{other.index}/matte?v={original.sha256[:16]}"
    back = candidate_of((await stack.sets.state(set_id)).actions[0].frames[1].candidates, other.index)
    assert back.matte == original and back.versions == []
    assert 'data-version="1">version 1<' in (await http.get(base)).text

    nothing = await http.post(f"{base}/undo", json={})
    assert nothing.status_code == 409 and "no refinement to undo" in nothing.json()["error"]
    await stack.sets.cancel(set_id)
