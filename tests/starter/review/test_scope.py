"""Reviewers scoped to owners: a scoped token sees and acts on its owners' sets only (another owner's set answers as
a set that does not exist: pages, images, downloads, messages), starts sets only for them, and signs every message
with its own reviewer's name."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from starter.cli import app as cli
from starter.review.app import CONTENT_SECURITY_POLICY, create_app
from starter.review.credentials import Reviewer, issue_token, read_token
from starter.review.settings import ReviewSettings
from testkit.stack import Stack, wait_for_phase
from tests.starter.review.conftest import BASE, SpyStore
from tests.starter.review.test_review_app import form, start_set
from workflows.contract import Phase, ReviewPolicy, StagePolicy

SECRET = "review-secret-for-tests-8fK2mQ9xZ4pL7wR3"


@pytest.fixture
async def scoped(stack: Stack, spy_store: SpyStore) -> AsyncIterator[httpx.AsyncClient]:
    settings = ReviewSettings(_env_file=None, review_secret=SecretStr(SECRET))
    app = create_app(stack.sets, spy_store, settings=settings, host="0.0.0.0")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client


def bearer(name: str, *owners: str) -> dict[str, str]:
    token = issue_token(SECRET, Reviewer(name=name, owners=frozenset(owners)), 3600)
    return {"Authorization": f"Bearer {token}"}


async def test_a_reviewer_of_one_owner_gets_404_for_another_owners_set_its_images_and_messages(
    stack: Stack, scoped: httpx.AsyncClient, spy_store: SpyStore
) -> None:
    mine, theirs = f"acme-{uuid.uuid4().hex[:6]}", f"globex-{uuid.uuid4().hex[:6]}"
    ours_id, their_id = f"ours-{uuid.uuid4().hex[:8]}", f"theirs-{uuid.uuid4().hex[:8]}"
    for set_id, owner in ((ours_id, mine), (their_id, theirs)):
        await start_set(stack, set_id, owner=owner, review=ReviewPolicy(start_frames=StagePolicy.AUTO))
    for set_id in (ours_id, their_id):
        await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    ana = bearer("ana", mine)

    listed = await scoped.get("/sets", headers=ana)
    assert ours_id in listed.text and their_id not in listed.text
    assert their_id not in (await scoped.get("/sets", params={"owner": theirs}, headers=ana)).text
    own_page = await scoped.get(f"/sets/{ours_id}", headers=ana)
    assert own_page.status_code == 200 and 'data-testid="signed-as">Signed in as ana:' in own_page.text
    assert 'data-testid="temporal-link"' not in own_page.text, "the operators' Web UI is not offered to a customer"

    reads_before = len(spy_store.reads)
    unknown = await scoped.get(f"/sets/no-such-{uuid.uuid4().hex[:6]}", headers=ana)
    for path in (
        "",
        "/fragment",
        "/state.json",
        "/img/character/0",
        "/img/start/wave/0",
        "/img/frame/wave/0/0/matte",
        "/img/contact-sheet",
        "/download/generic",
        "/refine/wave/0/0",
    ):
        answer = await scoped.get(f"/sets/{their_id}{path}", headers=ana)
        assert answer.status_code == 404, path
        assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
    assert unknown.status_code == 404
    page = await scoped.get(f"/sets/{their_id}", headers=ana)
    assert page.text.replace(their_id, "X") == unknown.text.replace(unknown.url.path.rsplit("/", 1)[1], "X"), (
        "another owner's set looks exactly like one that does not exist"
    )
    for path, data in (
        ("/approve", {"reviewer": "ana"}),
        ("/cancel", {}),
        ("/emoji/wave/frames/0/pick", {"candidate": "0"}),
        ("/emoji/wave/regenerate", {"prompt": "x"}),
    ):
        assert (await scoped.post(f"/sets/{their_id}{path}", data=data, headers=ana)).status_code == 404, path
    assert len(spy_store.reads) == reads_before, "no image of theirs was read"
    assert (await stack.sets.state(their_id)).phase is Phase.AWAITING_REVIEW, "nothing reached their set"

    approved = await scoped.post(f"/sets/{ours_id}/approve", data={"reviewer": "mallory"}, headers=ana)
    assert approved.status_code == 303
    state = await stack.sets.state(ours_id)
    assert state.approved_by == "ana", "the name comes from the credential, not the form"
    await stack.sets.cancel(their_id)


async def test_a_scoped_reviewer_starts_sets_only_for_their_owners(scoped: httpx.AsyncClient) -> None:
    ana = bearer("ana", "acme")

    refused = await scoped.post("/new", data=form(character_prompt="a cat", owner="globex"), headers=ana)

    assert refused.status_code == 303 and refused.headers["location"].startswith("/new?flash=")
    page = await scoped.get(refused.headers["location"], headers=ana)
    assert page.status_code == 200 and "you may start sets only for acme" in page.text


async def test_a_token_signed_with_another_secret_tampered_or_expired_is_refused(scoped: httpx.AsyncClient) -> None:
    good = issue_token(SECRET, Reviewer(name="ana", owners=frozenset({"acme"})), 3600)
    prefix, payload, signature = good.split(".")
    for token in (
        issue_token("another-secret-of-enough-length-Xy7Qp2", Reviewer("ana", frozenset({"acme"})), 3600),
        f"{prefix}.{payload[:-2]}AA.{signature}",  # the owners changed
        issue_token(SECRET, Reviewer("ana", frozenset({"acme"})), -1),
        "prv1.x.y",
        "",
    ):
        answer = await scoped.get("/sets", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 403, token
    assert read_token(SECRET, good) == Reviewer(name="ana", owners=frozenset({"acme"}))


def test_popcon_review_token_prints_a_scoped_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPCON_REVIEW_SECRET", SECRET)
    monkeypatch.chdir("/")  # no .env

    printed = CliRunner().invoke(cli, ["review-token", "--reviewer", "ana", "--owner", "acme", "--owner", "initech"])
    refused = CliRunner().invoke(cli, ["review-token", "--reviewer", "ana"])

    assert printed.exit_code == 0, printed.output
    assert read_token(SECRET, printed.output.strip()) == Reviewer("ana", frozenset({"acme", "initech"}))
    assert refused.exit_code == 1 and "--all-owners" in refused.output
