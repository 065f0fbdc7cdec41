"""RunPod Serverless jobs on the wire: what a matting job carries in and out, and how its failures read.

The job input wraps the Temporal activities' own contract (:class:`MatteSlotInput`, :class:`MatteFrameInput`,
:class:`DescribePipelineInput`), so the handler validates exactly what the activity would. The dispatcher sends
:class:`MatteSlotJob`: some or all candidates of one frame slot, with one result per candidate back, each
candidate's failure its own. :class:`MatteJob` (one candidate) is what ``popcon runpod smoke`` sends. When the
artifact store is not shared with RunPod (a ``file://`` root on the dispatcher's machine), the images travel inline:
base64 in the job, the base64 PNG mattes in the output, each under a size limit well below RunPod's 10 MB ``/run``
payload limit (the dispatcher then puts one candidate in each job).

A failed job's error is ``"<type>: <message>"`` with a :class:`~workflows.contract.FailureType`, so the dispatcher
tells the failures a retry cannot fix from those it can.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from gpu_activity_worker.vocabulary import CorruptImageError, UnsupportedImageError
from workflows.contract import (
    DescribePipelineInput,
    FailureType,
    MatteCandidateResult,
    MatteFrameInput,
    MatteFrameOutput,
    MatteSlotInput,
)

INLINE_SCHEME = "inline:"
"""URI scheme of a matte that travels back in the job output; the dispatcher stores it under its own store's key."""

_ERROR = re.compile(r"(?P<kind>[A-Za-z_][A-Za-z0-9_]*): (?P<message>.*)", re.DOTALL)


class _JobModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MatteJob(_JobModel):
    """Cut one candidate of a ``matte_slot`` activity out, plus the source image when it travels inline."""

    op: Literal["matte"]
    request: MatteFrameInput
    inline_source: str | None = Field(default=None, description="The source image, base64, if the store is not shared.")


class MatteSlotJob(_JobModel):
    """Cut candidates of one frame slot out in one job (all of them, or the share the dispatcher gave this job), plus
    their sources when they travel inline."""

    op: Literal["matte_slot"]
    request: MatteSlotInput
    inline_sources: list[str] | None = Field(
        default=None, description="The sources, base64, in the order of the candidates, if the store is not shared."
    )

    @model_validator(mode="after")
    def _one_source_each(self) -> MatteSlotJob:
        if self.inline_sources is not None and len(self.inline_sources) != len(self.request.candidates):
            raise ValueError(f"{len(self.inline_sources)} inline sources for {len(self.request.candidates)} candidates")
        return self


class DescribeJob(_JobModel):
    """Build a pipeline on an endpoint worker (loading its weights) and say where it runs."""

    op: Literal["describe"]
    request: DescribePipelineInput


JOB_INPUT: TypeAdapter[MatteSlotJob | MatteJob | DescribeJob] = TypeAdapter(
    Annotated[MatteSlotJob | MatteJob | DescribeJob, Field(discriminator="op")]
)
"""Validates a job's ``input``."""


class MatteJobOutput(_JobModel):
    """A matte job's output: the activity's own result, plus the matte itself when it travels inline."""

    result: MatteFrameOutput
    inline_matte: str | None = Field(default=None, description="The RGBA PNG, base64, if the store is not shared.")


class MatteSlotJobOutput(_JobModel):
    """A slot job's output: the ``matte_slot`` activity's own result for its candidates (a cut-out, or the candidate's
    own failure that no retry fixes), plus the cut-outs themselves when they travel inline."""

    results: list[MatteCandidateResult] = Field(description="In the order of the job's candidates.")
    inline_mattes: list[str | None] | None = Field(
        default=None, description="Each candidate's RGBA PNG, base64 (None if it failed), if the store is not shared."
    )

    @model_validator(mode="after")
    def _one_matte_each(self) -> MatteSlotJobOutput:
        if self.inline_mattes is not None and len(self.inline_mattes) != len(self.results):
            raise ValueError(f"{len(self.inline_mattes)} inline mattes for {len(self.results)} results")
        return self


class InlineTooLargeError(UnsupportedImageError):
    """An image too large to travel inside a job: the endpoint needs a shared (s3://) artifact store for it."""


def encode_inline(data: bytes, limit: int, what: str) -> str:
    """``data`` as base64 for a job's input or output.

    Raises:
        InlineTooLargeError: The encoded image is over ``limit`` bytes.
    """
    text = base64.b64encode(data).decode("ascii")
    if len(text) > limit:
        raise InlineTooLargeError(
            f"{what} is {len(text)} bytes in base64, over the {limit}-byte inline limit "
            "(POPCON_RUNPOD_INLINE_MAX_BYTES); give the dispatcher and the endpoint a shared s3:// artifact store"
        )
    return text


def decode_inline(text: str, limit: int, what: str) -> bytes:
    """The bytes of a base64 image from a job.

    Raises:
        InlineTooLargeError: ``text`` is over ``limit`` bytes.
        CorruptImageError: ``text`` is not base64.
    """
    if len(text) > limit:
        raise InlineTooLargeError(f"{what} is {len(text)} bytes in base64, over the {limit}-byte inline limit")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as err:
        raise CorruptImageError(f"{what} is not valid base64 ({err})") from err


def job_error(kind: FailureType, message: str) -> dict[str, str]:
    """A handler's failure result: RunPod marks the job FAILED and keeps the string as its ``error``."""
    return {"error": f"{kind.value}: {message}"}


def parse_job_error(error: object) -> tuple[FailureType, str]:
    """(type, message) of a FAILED job's error; ``RunPodJobFailed`` when it is not one of our typed errors (e.g. the
    SDK's JSON report of an exception that escaped the handler)."""
    text = str(error)
    match = _ERROR.fullmatch(text)
    if match is None or match["kind"] not in FailureType.__members__.values():
        return FailureType.RUNPOD_JOB_FAILED, text
    return FailureType(match["kind"]), match["message"]
