"""The ExportSet workflow's input and result: a finished set's approved emoji exported again, for other targets."""

from __future__ import annotations

from pydantic import Field

from workflows.contract.activities import EmojiFramesRef, PackageOutput
from workflows.contract.base import _Model, _Request
from workflows.contract.vocabulary import ExportTarget


class ExportSetInput(_Request):
    """Workflow ``ExportSet``: platform packages for a finished set's approved emoji, without redoing anything else."""

    set_id: str = Field(description="The finished set whose picks are exported.")
    targets: list[ExportTarget] = Field(min_length=1)
    emojis: list[EmojiFramesRef] = Field(min_length=1)


class ExportSetResult(_Model):
    set_id: str
    packages: list[PackageOutput]
