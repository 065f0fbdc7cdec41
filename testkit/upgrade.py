"""Build B of a rolling upgrade: the EmojiSet workflow with one more activity before assembly.

A change a released history cannot replay (its assembly commands come one later), the kind of change a new pinned build
ships: sets that started on build A must finish there, sets that continue as new while they wait for a person may move
here, new sets start here.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    import pydantic

    from workflows.contract import (
        HEARTBEAT_TIMEOUT,
        WORKFLOW_TYPE,
        ActivityName,
        CheckExportsInput,
        EmojiSetInput,
        EmojiSetResult,
        EmojiSetState,
    )
    from workflows.emoji_set import EmojiSetWorkflow


@workflow.defn(name=WORKFLOW_TYPE, failure_exception_types=[pydantic.ValidationError])
class EmojiSetWorkflowB(EmojiSetWorkflow):
    """The EmojiSet workflow of build B: the export targets are checked once more before the set is assembled."""

    @workflow.run
    async def run(self, input: EmojiSetInput, resume: EmojiSetState | None = None) -> EmojiSetResult:
        return await super().run(input, resume)

    async def _assemble(self) -> EmojiSetResult:
        state = self._state
        await workflow.execute_activity(
            ActivityName.CHECK_EXPORTS,
            CheckExportsInput(targets=state.input.export_targets, emojis=len(state.actions)),
            result_type=list[str],
            start_to_close_timeout=timedelta(minutes=1),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=3),
            summary="check export targets again (build B)",
        )
        return await super()._assemble()
