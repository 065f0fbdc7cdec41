"""One way to reach Temporal for every process: the data converter (pydantic payloads, failures scrubbed of secrets)
and the configured address."""

from __future__ import annotations

import dataclasses

from temporalio.api.failure.v1 import Failure
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter, ToJsonOptions, pydantic_data_converter
from temporalio.converter import DefaultFailureConverter, PayloadConverter
from temporalio.runtime import Runtime

from core.redact import redact
from core.settings import TemporalSettings


class RedactingFailureConverter(DefaultFailureConverter):
    """Converts an exception as the default converter does, then scrubs the message and stack trace of the failure
    and of every cause (:func:`core.redact.redact`) before they leave the process: activity and workflow failures,
    hence histories, the server's database and the Web UI, carry no secret."""

    def to_failure(self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure) -> None:
        """See :meth:`temporalio.converter.FailureConverter.to_failure`."""
        super().to_failure(exception, payload_converter, failure)
        current = failure
        while True:
            current.message = redact(current.message)
            current.stack_trace = redact(current.stack_trace)
            if not current.HasField("cause"):
                return
            current = current.cause


data_converter = dataclasses.replace(pydantic_data_converter, failure_converter_class=RedactingFailureConverter)
"""The data converter of every connection: pydantic payloads, and failures scrubbed of secrets."""


async def connect(settings: TemporalSettings, runtime: Runtime | None = None) -> Client:
    """Connect to the configured Temporal frontend with :data:`data_converter`."""
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=data_converter,
        runtime=runtime,
    )


class _SetFieldsPayloadConverter(PydanticPayloadConverter):
    """Writes only the fields a model was given (``exclude_unset``)."""

    def __init__(self) -> None:
        super().__init__(ToJsonOptions(exclude_unset=True))


set_fields_data_converter = dataclasses.replace(data_converter, payload_converter_class=_SetFieldsPayloadConverter)
"""The data converter of a client's requests: a request carries the fields its sender set and no others.

A set pinned to an older build refuses a request with a field it does not know (``workflows.contract.base._Request``); a
newer client that leaves a new field at its default then still reaches it, and one that sets the field is refused
with its name. The workflow reads a left-out field as its default, which a release never changes (docs/deploy.md).
"""


def sending_set_fields(client: Client) -> Client:
    """The same connection, sending requests with :data:`set_fields_data_converter` (results decode as before)."""
    config = client.config()
    config["data_converter"] = set_fields_data_converter
    return Client(**config)
