"""RunPod Serverless jobs on the wire: what a matting job carries in and out, and how its failures read.

The job input wraps the Temporal activities' own contract (:class:`MatteFrameInput`, :class:`DescribePipelineInput`),
so the handler validates exactly what the activity would. When the artifact store is not shared with RunPod (a
``file://`` root on the dispatcher's machine), the image travels inline: base64 in the job, the base64 PNG matte in the
output, each under a size limit well below RunPod's 10 MB ``/run`` payload limit.

A failed job's error is ``"<type>: <message>"`` with a :class:`~workflows.contract.FailureType`, so the dispatcher
tells the failures a retry cannot fix from those it can.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from gpu_activity_worker.engines.base import CorruptImageError, UnsupportedImageError
from workflows.contract import DescribePipelineInput, FailureType, MatteFrameInput, MatteFrameOutput

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


class DescribeJob(_JobModel):
    """Build a pipeline on an endpoint worker (loading its weights) and say where it runs."""

    op: Literal["describe"]
    request: DescribePipelineInput


JOB_INPUT: TypeAdapter[MatteJob | DescribeJob] = TypeAdapter(
    Annotated[MatteJob | DescribeJob, Field(discriminator="op")]
)
"""Validates a job's ``input``."""


class MatteJobOutput(_JobModel):
    """A matte job's output: the activity's own result, plus the matte itself when it travels inline."""

    result: MatteFrameOutput
    inline_matte: str | None = Field(default=None, description="The RGBA PNG, base64, if the store is not shared.")


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
