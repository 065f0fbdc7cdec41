"""The DeliverSetEvent workflow: one event of a set posted to its webhook, retried with back-off for about a day.

A set starts one per event and abandons it (``ParentClosePolicy.ABANDON``): a receiver that is down delays only this
workflow, never the set, and an event sent as the set ends is still delivered after it closed. Its id,
``<set id>/event-<sequence>``, is started once; the event's ``id`` is the idempotency key of every attempt.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    import pydantic

    from workflows import calls
    from workflows.contract import DELIVER_EVENT_WORKFLOW_TYPE, DeliverEventInput


@workflow.defn(
    name=DELIVER_EVENT_WORKFLOW_TYPE,
    failure_exception_types=[pydantic.ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class DeliverEventWorkflow:
    """Post one event; fails (visibly, in the Web UI) only when the receiver refused it or a day of tries passed.

    Auto-upgrading, not pinned like its set: a delivery that retries for hours moves to the current build rather than
    keep an old build from draining (its one command replays on any build).
    """

    @workflow.run
    async def run(self, request: DeliverEventInput) -> int:
        """The receiver's HTTP status once it took the event."""
        to = urlsplit(request.webhook.url).hostname if request.webhook is not None else "the deployment's webhook"
        return await calls.deliver_event(request, summary=f"post {request.event.type.value} to {to}")
