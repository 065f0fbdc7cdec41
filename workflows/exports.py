"""Platform exports, the same from a set's own approval and from a later export of a finished set.

Each platform target is one ``export_package`` activity, all in parallel. A target the set cannot be fitted to does
not fail the others, nor the set: its package carries the reason (the rule and the closest figure reached).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from workflows.contract import (
        HEARTBEAT_TIMEOUT,
        NON_RETRYABLE_FAILURES,
        ActivityName,
        EmojiFramesRef,
        ExportPackageInput,
        ExportTarget,
        FailureType,
        PackageOutput,
    )

KNOWN_FAILURES = frozenset(failure.value for failure in FailureType)
EXPORT_RETRY = RetryPolicy(
    maximum_attempts=3, non_retryable_error_types=sorted(failure.value for failure in NON_RETRYABLE_FAILURES)
)


async def export_packages(
    set_id: str, targets: Sequence[ExportTarget], emojis: list[EmojiFramesRef]
) -> list[PackageOutput]:
    """One package per platform target (the generic target is the set's own assembly, not a package)."""
    platforms = [target for target in targets if target is not ExportTarget.GENERIC]
    return list(await asyncio.gather(*(_export(set_id, target, emojis) for target in platforms)))


async def _export(set_id: str, target: ExportTarget, emojis: list[EmojiFramesRef]) -> PackageOutput:
    try:
        return await workflow.execute_activity(
            ActivityName.EXPORT_PACKAGE,
            ExportPackageInput(set_id=set_id, target=target, emojis=emojis),
            result_type=PackageOutput,
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=EXPORT_RETRY,
            summary=f"export {target.value} package",
        )
    except ActivityError as err:
        if isinstance(err.cause, CancelledError):
            raise
        return PackageOutput(target=target, error=failure_reason(err))


def failure_reason(err: FailureError) -> str:
    """The message a person can act on: the first failure of the vocabulary in the error's chain (a worker's own
    words, not the library error it was raised from), else the innermost failure."""
    cause: BaseException = err
    while isinstance(cause, FailureError):
        if isinstance(cause, ApplicationError) and cause.type in KNOWN_FAILURES:
            return str(cause) or cause.type
        if cause.cause is None:
            break
        cause = cause.cause
    return str(cause) or type(cause).__name__
