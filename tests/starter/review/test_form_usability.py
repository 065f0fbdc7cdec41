"""The start form's and the set page's refusals in plain words after their control's label, and a refused form sent
back the post/redirect/get way (no server: the form is refused, or the set not started, before Temporal is asked)."""

from __future__ import annotations

import html
import io
import re
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import cast

import httpx
import pytest
from pydantic import BaseModel, ValidationError
from starlette.datastructures import FormData, Headers, UploadFile
from temporalio.client import Client

from core.artifacts import FileArtifactStore
from starter.client import EmojiSetClient, EmojiSetError
from starter.review.app import create_app
from starter.review.fields import BadInput, number, problem
from starter.review.forms import parse_start_form
from starter.review.settings import ReviewSettings
from tests.starter.review.conftest import BASE, png
from tests.starter.review.test_forms import FIELDS, posted
from tests.starter.review.test_review_app import slot_error
from workflows.contract import (
    MAX_UPLOAD_BYTES,
    CancelInput,
    DeadlinePolicy,
    DropActionInput,
    EmojiSetInput,
    RefineFrameInput,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
    StagePolicy,
)

CODE_WORDS = ("String should", "List should", "Input should", "character_prompt", "character_image", "^[a-z", "_")
"""What the validator's and the code's own wording has, and a plain message never."""
ACTION_NAME = "use lower-case letters, digits and hyphens, starting with a letter or digit, at most 40 characters"


class Refusing(EmojiSetClient):
    """A client whose server will not start a set."""

    async def start(self, request: EmojiSetInput, *, set_id: str | None = None) -> str:
        raise EmojiSetError("the Temporal server is not answering")


@pytest.fixture
def client(tmp_path: Path) -> EmojiSetClient:
    return Refusing(cast(Client, None), store=FileArtifactStore(tmp_path / "store"))


@pytest.fixture
async def http(client: EmojiSetClient, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    store = FileArtifactStore(tmp_path / "store")
    app = create_app(client, store, settings=ReviewSettings(_env_file=None), host="127.0.0.1")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as answer:
        yield answer


def refusal(build: Callable[[], BaseModel]) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        build()
    return raised.value


def plain(message: str) -> str:
    """``message``, checked to be in plain words."""
    assert not [word for word in CODE_WORDS if word in message], message
    return message


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: RegenerateStartFrameInput(action="wave", prompt="x" * 900),
            "Pose prompt: at most 500 characters (this one has 900)",
        ),
        (lambda: RegenerateFrameInput(emoji="wave", frame=0, prompt="  "), "Frame prompt: write what to change"),
        (
            lambda: RegenerateActionInput(emoji="wave", motion_prompt="m" * 501),
            "Motion prompt: at most 500 characters (this one has 501)",
        ),
        (lambda: RegenerateActionInput(emoji="wave", motion_prompt=""), "Motion prompt: write the movement"),
        (lambda: DropActionInput(action="wave", reason="r" * 600), "Reason: at most 500 characters (this one has 600)"),
        (lambda: DropActionInput(action="Not An Emoji"), f"Action: {ACTION_NAME}"),
        (lambda: CancelInput(reason="r" * 501), "Reason: at most 500 characters (this one has 501)"),
    ],
    ids=["pose-too-long", "frame-empty", "motion-too-long", "motion-empty", "drop-reason", "drop-name", "cancel"],
)
def test_the_set_pages_refusals_name_their_control_in_plain_words(build: Callable[[], BaseModel], message: str) -> None:
    assert plain(problem(refusal(build))) == message


def test_a_field_that_is_no_number_and_a_whole_message_refusal_are_labelled() -> None:
    with pytest.raises(BadInput) as raised:
        number("one", "candidate")

    assert problem(raised.value) == "Candidate: must be a whole number of at most 9 digits (0-9), got 'one'"
    background = [{"x": 1, "y": 1, "foreground": False}]
    only_background = refusal(
        lambda: RefineFrameInput(emoji="wave", frame=0, candidate=0, points=background, mode="erase")
    )
    assert problem(only_background, control="Points") == (  # about no field: the control's label
        "Points: at least one point must be on the region (foreground); background points only bound it"
    )
    assert problem(BadInput("send at least one point"), control="Points") == "Points: send at least one point"
    assert problem(BadInput("send at least one point")) == "send at least one point"


async def test_the_forms_errors_are_plain_words_and_the_summary_puts_each_after_its_label(
    client: EmojiSetClient,
) -> None:
    fields = {
        **FIELDS,
        "character_prompt": "c" * 900,
        "export_targets": "",
        "custom_name": "Bad Name!",
        "custom_pose": "p" * 900,
        "custom_motion": "",
        "clip_fps": "0",
        "image_size": "99999",
        "generator": "Dash Scope",
        "actions": "moonwalk",
    }

    request, view = await parse_start_form(posted(fields), client)

    assert request is None
    assert view.errors == {
        "character_prompt": "at most 800 characters (this one has 900)",
        "actions": "no preset called moonwalk: choose one from the list, or add a custom action",
        "custom-0": f"Name: {ACTION_NAME}; Pose prompt: at most 800 characters (this one has 900); "
        "Motion prompt: write the movement",
        "clip_fps": "at least 8 (not 0)",
        "generator": "use lower-case letters, digits, hyphens and underscores",
        "image_size": "at most 1,024 (not 99,999)",
        "export_targets": "choose at least one platform",
    }
    summary = dict(view.summary())
    assert summary["field-image_size"] == "Frame size (px): at most 1,024 (not 99,999)"
    assert summary["field-export_targets"] == "Export targets: choose at least one platform"
    assert summary["field-custom-0"].startswith(f"Custom action 1: Name: {ACTION_NAME}")
    assert summary["field-character_prompt"] == "Character prompt: at most 800 characters (this one has 900)"
    for message in view.errors.values():
        plain(message)
    assert view.advanced_open, "an error in the folded part opens it"


async def test_the_folded_part_stays_shut_without_an_error_in_it(client: EmojiSetClient) -> None:
    _, view = await parse_start_form(posted({**FIELDS, "export_targets": ""}), client)

    assert view.errors.keys() == {"character_prompt", "export_targets"} and not view.advanced_open


async def test_a_picture_over_the_limit_is_said_in_megabytes(client: EmojiSetClient) -> None:
    big = UploadFile(io.BytesIO(b"\0" * (MAX_UPLOAD_BYTES + 1)), filename="big.png", size=MAX_UPLOAD_BYTES + 1)

    request, view = await parse_start_form(FormData([*FIELDS.items(), ("character_file", big)]), client)

    assert request is None and view.errors == {"character_file": "the picture is 20.0 MB; the limit is 20 MB"}


async def test_an_uploaded_picture_is_not_reviewed_and_the_deadlines_choice_is_sent(tmp_path: Path) -> None:
    client = EmojiSetClient(cast(Client, None), store=FileArtifactStore(tmp_path / "store"))
    fields = {**FIELDS, "review_character": "human", "review_on_deadline": "expire", "deadline_hours": "2"}
    upload = UploadFile(io.BytesIO(png()), filename="cat.png", headers=Headers({"content-type": "image/png"}))

    request, view = await parse_start_form(FormData([*fields.items(), ("character_file", upload)]), client)

    assert request is not None, view.errors
    assert request.review.character is StagePolicy.AUTO, "an uploaded picture is the character as it is"
    assert (request.review.on_deadline, request.review.deadline) == (DeadlinePolicy.EXPIRE, timedelta(hours=2))
    prompted, _ = await parse_start_form(posted({**fields, "character_prompt": "a cat"}), client)
    assert prompted is not None and prompted.review.character is StagePolicy.HUMAN


async def test_a_refused_form_is_redirected_to_its_page_which_shows_its_errors_and_values(
    http: httpx.AsyncClient,
) -> None:
    fields = {**FIELDS, "character_prompt": "a round cat", "image_size": "99999", "export_targets": []}

    post = await http.post("/new", data=fields)

    assert post.status_code == 303 and re.fullmatch(r"/new\?flash=[\w-]+", post.headers["location"])
    for _ in range(2):  # a reload shows the same page, and posts nothing
        page = await http.get(post.headers["location"])
        assert page.status_code == 200
        assert 'data-testid="error-summary"' in page.text
        assert '<a href="#field-image_size">Frame size (px): at most 1,024 (not 99,999)</a>' in page.text
        assert '<a href="#field-export_targets">Export targets: choose at least one platform</a>' in page.text
        assert 'id="field-image_size"' in page.text and 'id="field-export_targets"' in page.text
        assert re.search(r'<details data-testid="advanced"\s+open>', page.text)
        assert 'value="a round cat"' in page.text and 'value="99999"' in page.text
        assert slot_error(page.text, "image_size") == "at most 1,024 (not 99,999)"
    blank = await http.get("/new?flash=no-such-token")
    assert blank.status_code == 200 and 'data-testid="error-summary"' not in blank.text
    assert re.search(r'<details data-testid="advanced"\s+>', blank.text), "shut without an error in it"


async def test_a_set_the_server_would_not_start_goes_back_to_the_form_with_the_reason(
    http: httpx.AsyncClient,
) -> None:
    post = await http.post("/new", data={**FIELDS, "character_prompt": "a round cat"})

    assert post.status_code == 303 and post.headers["location"].startswith("/new?flash=")
    page = (await http.get(post.headers["location"])).text
    summary = page[page.index('data-testid="error-summary"') : page.index("</ul>")]
    assert "the set could not be started: the Temporal server is not answering" in html.unescape(summary)
    assert 'value="a round cat"' in page


async def test_the_deadline_and_what_it_does_are_on_the_form(http: httpx.AsyncClient) -> None:
    page = (await http.get("/new")).text

    assert re.search(r'<option value="auto_approve"\s+selected>go on with the automatic picks</option>', page)
    assert re.search(r'<option value="expire"\s+>end the set \(expired\)</option>', page)
    assert 'data-testid="deadline-note"' in page and 'data-testid="character-review-note"' in page
