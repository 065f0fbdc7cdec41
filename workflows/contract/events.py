"""What a set tells its backend: signed events to a webhook, each delivered by a workflow of its own.

The set sends an event when it starts waiting for a person (the character, a start frame, the final review, a custom
prompt) and when it ends (completed, failed, cancelled, expired). Each event starts a ``DeliverSetEvent`` workflow
(abandoned by the set: a receiver that is down never blocks it) whose ``deliver_event`` activity posts it, retried
with back-off; the event's ``id`` is its idempotency key, so a backend recognises a retried delivery.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, StringConstraints, field_validator

from workflows.contract.base import _Model, _Request
from workflows.contract.ledger import LedgerSummary

SecretName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
"""A webhook secret's name in the deployment's ``POPCON_WEBHOOK_SECRETS`` (secrets never travel in payloads)."""
MAX_WEBHOOK_URL = 2000
_HOST = re.compile(r"^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]+)?$")


class EventType(StrEnum):
    """What happened to a set; the value is the ``type`` a backend receives."""

    AWAITING_CHARACTER_REVIEW = "set.awaiting_character_review"
    AWAITING_START_FRAME_REVIEW = "set.awaiting_start_frame_review"
    AWAITING_REVIEW = "set.awaiting_review"
    """The finished frames wait for a person (review policy final=human)."""
    WAITING_FOR_PROMPT = "set.waiting_for_prompt"
    """An action failed for good and waits for a regeneration with a custom prompt."""
    COMPLETED = "set.completed"
    FAILED = "set.failed"
    CANCELLED = "set.cancelled"
    EXPIRED = "set.expired"


class Webhook(_Model):
    """Where a set's events go: an http(s) URL, signed with the deployment's secret of that name."""

    url: str = Field(max_length=MAX_WEBHOOK_URL, description="http:// or https://, no user or password in it.")
    secret: SecretName = Field(default="default", description="The name of a secret in POPCON_WEBHOOK_SECRETS.")

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        problem = url_problem(url)
        if problem:
            raise ValueError(problem)
        return url


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a webhook (the scheme, the host, credentials in it), or None."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number
    except ValueError:
        return f"the webhook URL {url!r} is not a URL"
    if port == 0:
        return f"the webhook URL {url!r} has port 0"
    if parts.scheme not in ("http", "https"):
        return f"the webhook URL must start with http:// or https://, not {parts.scheme or 'nothing'}:"
    if not parts.hostname or not _HOST.match(parts.netloc.rpartition("@")[2]):
        return f"the webhook URL {url!r} has no host"
    if parts.username is not None or parts.password is not None:
        return "the webhook URL may not carry a user or password: the events are signed with the secret"
    return None


class SetEvent(_Model):
    """One event, as the backend receives it (the JSON body of the POST)."""

    id: str = Field(description="'<set id>:<sequence>': the idempotency key, the same on every delivery attempt.")
    type: EventType
    set_id: str
    sequence: int = Field(description="1, 2, ... in the order the set sent them.")
    owner: str = ""
    at: datetime = Field(description="When the set sent it (workflow time).")
    phase: str
    awaiting: list[str] = Field(default_factory=list, description="What the set waits for, as in its state.")
    message: str | None = Field(default=None, description="In plain words, e.g. why it failed or what waits.")
    cost: LedgerSummary | None = Field(default=None, description="The set's ledger so far.")


class DeliverEventInput(_Request):
    """Workflow ``DeliverSetEvent`` and its activity ``deliver_event``: post one event."""

    webhook: Webhook | None = Field(
        default=None, description="The set's own webhook; None: the deployment's (POPCON_WEBHOOK_URL, 'default')."
    )
    event: SetEvent
