"""core.connection's data converter, which every connection uses: a failure leaves the process without any secret, in
itself and in every cause."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.api.failure.v1 import Failure
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from core.connection import RedactingFailureConverter, connect, data_converter, sending_set_fields
from core.redact import REDACTED, register_secret
from core.settings import TemporalSettings

SECRET = f"provider-key-{uuid.uuid4().hex}"
"""Registered below; no pattern of core.redact would recognise it."""
register_secret(SECRET)


def refuse() -> None:
    """Fails as a provider refusal that quotes the key; the ``Bearer`` one is in this source line, so the stack
    trace shows it too."""
    raise ApplicationError(f"refused: {SECRET} (Authorization: Bearer in-source-0xyz)", non_retryable=True)


def failure_of(error: BaseException) -> Failure:
    failure = Failure()
    data_converter.failure_converter.to_failure(error, data_converter.payload_converter, failure)
    return failure


def test_a_failure_and_its_causes_leave_without_secrets() -> None:
    try:
        try:
            refuse()
        except ApplicationError as cause:
            raise ApplicationError(f"gave up after Bearer xyz was refused with {SECRET}") from cause
    except ApplicationError as error:
        failure = failure_of(error)

    encoded = failure.SerializeToString()
    for secret in (SECRET, "Bearer xyz", "in-source-0xyz"):
        assert secret.encode() not in encoded, secret
    assert failure.message == f"gave up after Bearer {REDACTED} was refused with {REDACTED}"
    assert failure.cause.message == f"refused: {REDACTED} (Authorization: {REDACTED})"
    assert "refuse()" in failure.cause.stack_trace and REDACTED in failure.cause.stack_trace


def test_a_failure_received_with_secrets_is_scrubbed_when_sent_on() -> None:
    """An activity failure from a worker that did not redact (an older build) is re-sent as it came, causes included."""
    received = Failure(message="activity error", cause=Failure(message=f"refused: {SECRET}", stack_trace=SECRET))
    error = data_converter.failure_converter.from_failure(received, data_converter.payload_converter)

    failure = failure_of(error)

    assert SECRET.encode() not in failure.SerializeToString()
    assert failure.cause.message == f"refused: {REDACTED}"


def test_an_exception_that_is_not_a_temporal_failure_is_scrubbed_too() -> None:
    failure = failure_of(RuntimeError(f"connection to https://api.example/v1?api_key={SECRET} failed"))

    assert failure.message == f"connection to https://api.example/v1?api_key={REDACTED} failed"


@activity.defn(name="redaction_test_refuse")
async def refuse_activity() -> None:
    refuse()


@workflow.defn(name="RedactionTestWorkflow", sandboxed=False)
class RefusedWorkflow:
    @workflow.run
    async def run(self) -> None:
        try:
            await workflow.execute_activity(
                "redaction_test_refuse",
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        except Exception as err:
            raise ApplicationError(f"the set failed: {SECRET}", non_retryable=True) from err


async def test_a_failed_workflow_leaves_no_secret_in_its_history(dev_server: WorkflowEnvironment) -> None:
    address = dev_server.client.service_client.config.target_host
    client = await connect(TemporalSettings(_env_file=None, temporal_address=address))
    assert isinstance(sending_set_fields(client).data_converter.failure_converter, RedactingFailureConverter)
    queue = f"redaction-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[RefusedWorkflow],
        activities=[refuse_activity],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    async with worker:
        handle = await client.start_workflow(RefusedWorkflow.run, id=queue, task_queue=queue)
        with pytest.raises(WorkflowFailureError):
            await handle.result()

    history = (await handle.fetch_history()).to_json()
    assert "the set failed: [redacted]" in history and "refused: [redacted]" in history
    for secret in (SECRET, "in-source-0xyz"):
        assert secret not in history, secret
