"""The contract's two bases, and the one model that every kind holds.

:class:`_Model` is read as a result and ignores fields it does not know; :class:`_Request` is a request and refuses
them (the rules: docs/deploy.md, "Changing the contract"). :class:`ArtifactRef` references stored bytes: inputs,
messages, the state and activities carry it, and images never travel in the contract themselves.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints


class _Model(BaseModel):
    """Base of every contract model: a reader ignores fields it does not know.

    Builds of different age read each other's payloads: a set pinned to an older build reads the results of a newer
    GPU worker, an older client reads the state of a set on a newer build, a build reads the state an older one
    carried across continue-as-new. A field they do not know was added after them (fields are only ever added, with a
    default: docs/deploy.md), so they go on without it; refusing it would fail the set (a result that does not decode
    fails the workflow task) or the client.
    """

    model_config = ConfigDict(extra="ignore")


class _Request(_Model):
    """A request a person, a backend or the workflow writes for one reader: a message, an activity's input, an
    export. Unknown fields are refused, so a typo in hand-written JSON is an error, and a request whose new field an
    older reader cannot honour is refused with the field's name instead of being half done. The typed client sends only
    the fields it sets (``starter.client``), so a newer client's default-valued fields never reach an older set."""

    model_config = ConfigDict(extra="forbid")


class ArtifactRef(_Model):
    """A stored blob (claim check). Workers fetch the bytes by ``uri`` and verify them against ``sha256``."""

    model_config = ConfigDict(frozen=True)

    uri: str
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    size_bytes: int = Field(ge=0)
    media_type: str
    width: int | None = None
    height: int | None = None
