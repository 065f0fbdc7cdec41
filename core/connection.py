"""One way to reach Temporal for every process: the pydantic data converter and the configured address."""

from __future__ import annotations

import dataclasses

from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter, ToJsonOptions, pydantic_data_converter
from temporalio.runtime import Runtime

from core.settings import TemporalSettings


async def connect(settings: TemporalSettings, runtime: Runtime | None = None) -> Client:
    """Connect to the configured Temporal frontend with the pydantic data converter."""
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
    )


class _SetFieldsPayloadConverter(PydanticPayloadConverter):
    """Writes only the fields a model was given (``exclude_unset``)."""

    def __init__(self) -> None:
        super().__init__(ToJsonOptions(exclude_unset=True))


set_fields_data_converter = dataclasses.replace(
    pydantic_data_converter, payload_converter_class=_SetFieldsPayloadConverter
)
"""The data converter of a client's requests: a request carries the fields its sender set and no others.

A set pinned to an older build refuses a request with a field it does not know (``workflows.contract._Request``); a
newer client that leaves a new field at its default then still reaches it, and one that sets the field is refused
with its name. The workflow reads a left-out field as its default, which a release never changes (docs/deploy.md).
"""


def sending_set_fields(client: Client) -> Client:
    """The same connection, sending requests with :data:`set_fields_data_converter` (results decode as before)."""
    config = client.config()
    config["data_converter"] = set_fields_data_converter
    return Client(**config)
