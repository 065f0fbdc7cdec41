"""Released histories: every run recorded by a release replays on today's code, every payload it holds decodes with
today's models and loses no field, every released payload schema still reads, and the newest corpus covers every
path a set can take. See testkit/histories.py for how a corpus is recorded, and docs/deploy.md for the rules."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from testkit.contract_compat import history_payloads, payload_json, schema_breaks, unknown_fields
from testkit.histories import (
    RETIRED_FROM_REPLAY,
    WORKFLOWS,
    RecordedHistory,
    contract_schema,
    payload_positions,
    recorded_histories,
    released_schema,
    releases,
)

RELEASES = releases()
HISTORIES = [recorded for release in RELEASES for recorded in recorded_histories(release)]


def _id(recorded: RecordedHistory) -> str:
    return f"{recorded.release}/{recorded.path.name.removesuffix('.json.gz')}"


def test_there_is_a_released_corpus() -> None:
    assert RELEASES and "0.1.0" in RELEASES
    assert len(HISTORIES) >= 20


@pytest.mark.parametrize("recorded", HISTORIES, ids=_id)
async def test_a_released_history_replays_on_todays_code(recorded: RecordedHistory) -> None:
    if recorded.release in RETIRED_FROM_REPLAY:
        pytest.skip(f"release {recorded.release} is retired from replay: {RETIRED_FROM_REPLAY[recorded.release]}")
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=pydantic_data_converter)

    result = await replayer.replay_workflow(recorded.history, raise_on_replay_failure=False)

    assert result.replay_failure is None, f"{_id(recorded)} no longer replays: {result.replay_failure}"


@pytest.mark.parametrize("recorded", HISTORIES, ids=_id)
def test_every_payload_of_a_released_history_decodes_and_keeps_its_fields(recorded: RecordedHistory) -> None:
    positions = payload_positions()
    converter = pydantic_data_converter.payload_converter
    seen = []
    for position, payloads in history_payloads(recorded.history):
        assert position in positions, f"{position} (held by {_id(recorded)}) is no longer part of the contract"
        hint = positions[position]
        if hint is None:  # a message that takes nothing (attach): nothing to decode
            assert not payloads, f"{position} of {_id(recorded)} carries payloads"
            continue
        try:
            converter.from_payloads(payloads, [hint])
        except ValidationError:
            assert _refused_its_input(recorded), f"{position} of {_id(recorded)} no longer decodes"
            continue
        for payload in payloads:
            lost = unknown_fields(hint, payload_json(payload))
            assert not lost, f"{position} of {_id(recorded)} holds fields today's models lack: {lost}"
        seen.append(position)
    assert seen or _refused_its_input(recorded), "the walk finds the history's payloads"


def _refused_its_input(recorded: RecordedHistory) -> bool:
    """A set that failed on its own start input (recorded on purpose): today's models refuse that input too."""
    last = recorded.history.events[-1]
    return (
        last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
        and "validation error for EmojiSetInput" in (last.workflow_execution_failed_event_attributes.failure.message)
    )


@pytest.mark.parametrize("release", RELEASES)
def test_every_released_payload_schema_still_reads(release: str) -> None:
    """No payload position disappears; no field is removed or renamed, gains a requirement or changes its default;
    no enum value is removed."""
    released, current = released_schema(release), contract_schema()
    gone = sorted(set(released["positions"]) - set(current["positions"]))
    assert not gone, f"positions of release {release} that today's contract lacks: {gone}"
    breaks = [
        f"{position}: {problem}"
        for position, schema in released["positions"].items()
        for problem in schema_breaks(schema, current["positions"][position], released["$defs"], current["$defs"])
    ]
    assert not breaks, f"today's contract breaks payloads of release {release}:\n" + "\n".join(breaks)


def test_the_newest_corpus_covers_every_path_a_set_can_take() -> None:
    newest = [recorded for recorded in HISTORIES if recorded.release == RELEASES[-1]]
    positions = Counter(position for recorded in newest for position, _ in history_payloads(recorded.history))
    events = Counter(event.event_type for recorded in newest for event in recorded.history.events)
    statuses = Counter(
        payload_json(payloads[0]).get("status")
        for recorded in newest
        for position, payloads in history_payloads(recorded.history)
        if position == "workflow EmojiSet result"
    )

    contract = payload_positions()
    for kind in ("update", "activity"):
        expected = {p for p in contract if p.startswith(f"{kind} ") and p.endswith(" input")}
        missing = sorted(expected - set(positions))
        assert not missing, f"the newest corpus never exercises {missing}"
    assert {"workflow EmojiSet input 0", "workflow ExportSet input 0", "workflow EmojiSet input 1"} <= set(positions)
    assert {"completed", "cancelled", "expired"} <= set(statuses)
    assert events[EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED] >= 2, "a refused input and a refused pipeline"
    assert events[EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW] >= 1
    assert events[EventType.EVENT_TYPE_TIMER_FIRED] >= 3, "deadlines that passed"
    assert events[EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED] >= 1, "a refused generation"
    builds: dict[str, set[str]] = {}
    for recorded in newest:
        for event in recorded.history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                version = event.workflow_task_completed_event_attributes.deployment_version
                builds.setdefault(recorded.scenario, set()).add(version.build_id)
    assert any(len(found) >= 2 for found in builds.values()), "a set that moved to a new build while it waited"
