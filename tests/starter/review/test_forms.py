"""The start form on its own (no server): a refused form keeps nothing, an accepted one stores its picture, and its
numbers are parsed strictly."""

from __future__ import annotations

import hashlib
import io
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest
from starlette.datastructures import FormData, Headers, UploadFile
from temporalio.client import Client

from core.artifacts import FileArtifactStore
from starter.client import EmojiSetClient
from starter.review.forms import parse_start_form
from tests.starter.review.conftest import png
from workflows import keys

FIELDS = {"actions": "wave", "export_targets": "generic", "frames_per_emoji": "4", "deadline_hours": "24"}


def posted(fields: dict[str, str], picture: bytes | None = None) -> FormData:
    """The form as Starlette parses a post of ``fields`` (and ``picture`` as the file field, ``cat.png``)."""
    items: list[tuple[str, str | UploadFile]] = list(fields.items())
    if picture is not None:
        upload = UploadFile(io.BytesIO(picture), filename="cat.png", headers=Headers({"content-type": "image/png"}))
        items.append(("character_file", upload))
    return FormData(items)


@pytest.fixture
def store(tmp_path: Path) -> FileArtifactStore:
    return FileArtifactStore(tmp_path / "store")


@pytest.fixture
def client(store: FileArtifactStore) -> EmojiSetClient:
    return EmojiSetClient(cast(Client, None), store=store)


def stored_files(store: FileArtifactStore) -> list[Path]:
    return [path for path in store.root.rglob("*") if path.is_file()] if store.root.exists() else []


async def test_an_accepted_form_stores_its_picture(client: EmojiSetClient, store: FileArtifactStore) -> None:
    picture = png()

    request, view = await parse_start_form(posted(FIELDS, picture), client)

    assert request is not None and view.errors == {}
    assert request.character_image is not None and request.character_prompt is None
    assert store.get(request.character_image) == picture
    assert request.character_image.media_type == "image/png" and request.character_image.width == 300
    assert stored_files(store) == [store.root / keys.upload_key(hashlib.sha256(picture).hexdigest())]


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"frames_per_emoji": "1"}, "frames_per_emoji"),
        ({"character_prompt": "a cat"}, "character_prompt"),
        ({"actions": "moonwalk"}, "actions"),
        ({"deadline_hours": "inf"}, "deadline_hours"),
        ({"seed": "²"}, "seed"),
    ],
    ids=["out-of-range", "prompt-too", "unknown-action", "bad-deadline", "bad-number"],
)
async def test_a_refused_form_leaves_nothing_behind(
    client: EmojiSetClient, store: FileArtifactStore, fields: dict[str, str], key: str
) -> None:
    request, view = await parse_start_form(posted({**FIELDS, **fields}, png()), client)

    assert request is None and key in view.errors
    assert stored_files(store) == [], "the picture is not stored for a set that does not start"
    assert view.upload_name == "cat.png", "the form names the picture to choose again"


async def test_a_refused_picture_is_said_next_to_the_file_field(
    client: EmojiSetClient, store: FileArtifactStore
) -> None:
    request, view = await parse_start_form(posted(FIELDS, png()[:200]), client)

    assert request is None and "truncated" in view.errors["character_file"]
    assert "character_prompt" not in view.errors and view.upload_name is None
    assert stored_files(store) == []


async def test_a_stored_picture_named_by_its_sha_is_not_taken(client: EmojiSetClient) -> None:
    """A form cannot start a set from a picture it did not send, whoever stored it."""
    stored = client.upload(png())

    request, view = await parse_start_form(posted({**FIELDS, "character_upload": stored.sha256}), client)

    assert request is None and view.errors["character_prompt"] == "give the character: a prompt, or upload a picture"


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        ("frames_per_emoji", "²", "must be a whole number of at most 9 digits (0-9), got '²'"),
        ("seed", "9" * 5000, "must be a whole number of at most 9 digits (0-9), got '9999"),
        ("image_size", "٣٠٠", "must be a whole number"),
        ("takes_per_action", "1.0", "must be a whole number"),
        ("clip_seconds", "1e1", "must be a number such as 2 or 1.5"),
        ("deadline_hours", "1e308", "must be a number such as 2 or 1.5"),
        ("deadline_hours", "nan", "must be a number such as 2 or 1.5"),
    ],
)
async def test_numbers_are_ascii_digits(client: EmojiSetClient, field: str, text: str, message: str) -> None:
    request, view = await parse_start_form(posted({**FIELDS, "character_prompt": "a cat", field: text}), client)

    assert request is None and view.errors[field].startswith(message)
    assert view.values.get(field, view.deadline_hours) == text, "the form shows what was typed"


async def test_decimals_and_whole_numbers_are_read(client: EmojiSetClient) -> None:
    fields = {**FIELDS, "character_prompt": "a cat", "clip_seconds": "1.5", "deadline_hours": ".5", "seed": "042"}

    request, view = await parse_start_form(posted(fields), client)

    assert request is not None, view.errors
    assert (request.clip_seconds, request.review.deadline, request.seed) == (1.5, timedelta(minutes=30), 42)
