"""The ExportSet workflow: a finished set exported again for other platforms, from its stored picks.

``popcon export SET_ID --target telegram`` reads the set's approved picks (``get_state`` answers on a closed set) and
starts this workflow, which runs one ``export_package`` activity per target: nothing is generated or matted again.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import pydantic

    from workflows.contract import EXPORT_WORKFLOW_TYPE, ExportSetInput, ExportSetResult
    from workflows.exports import export_packages


@workflow.defn(name=EXPORT_WORKFLOW_TYPE, failure_exception_types=[pydantic.ValidationError])
class ExportSetWorkflow:
    """Platform packages for a finished set's picks (minutes long: pinned, it finishes on the build it started on).

    An input that does not fit the contract (a hand-written start: a pose that is no action name, an unknown target)
    fails the export at once with pydantic's message, instead of failing its workflow task on every retry.
    """

    @workflow.run
    async def run(self, request: ExportSetInput) -> ExportSetResult:
        """One package per target; a target the set cannot fit carries the reason instead of files."""
        packages = await export_packages(request.set_id, request.targets, request.emojis)
        return ExportSetResult(set_id=request.set_id, packages=packages)
