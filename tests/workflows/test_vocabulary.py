"""One vocabulary: activity names and failure types are defined once, in the contract, and used everywhere.

These tests read the production code itself, so a new activity or failure type cannot be added in one place and
forgotten in another: the retry policies, the workers' error mapping and the RunPod wire format all follow it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from temporalio import activity

from activities.assemble import AssemblyActivities
from activities.generation.base import GenerationError
from activities.notify import EventDelivery
from activities.platform_exports import PlatformExportActivities
from activities.production import ProductionActivities
from core.artifacts import ArtifactError
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.runpod.dispatcher import RunPodDispatcher
from gpu_activity_worker.runpod.jobs import job_error, parse_job_error
from gpu_activity_worker.vocabulary import MattingError
from workflows import calls as activity_calls
from workflows.contract import NON_RETRYABLE_FAILURES, ActivityName, FailureType

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("workflows", "core", "activities", "gpu_activity_worker", "starter")


def production_modules() -> list[tuple[Path, ast.Module]]:
    return [
        (path, ast.parse(path.read_text(), str(path)))
        for package in PRODUCTION
        for path in sorted((ROOT / package).rglob("*.py"))
    ]


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """Calls of ``name(...)`` or ``something.name(...)``."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == name)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
        )
    ]


def vocabulary_member(node: ast.expr, enum: type) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == enum.__name__


def test_every_retry_policy_lists_exactly_the_non_retryable_failures() -> None:
    policies = [value for value in vars(activity_calls).values() if type(value).__name__ == "RetryPolicy"]
    assert len(policies) == 4
    for policy in policies:
        assert set(policy.non_retryable_error_types or []) == {failure.value for failure in NON_RETRYABLE_FAILURES}
    declared = [value for value in vars(activity_calls).values() if isinstance(value, activity_calls.Activity)]
    assert all(any(call.retry is policy for policy in policies) for call in declared)


def test_failures_are_raised_only_through_the_vocabulary() -> None:
    """No ``ApplicationError(..., type="...")`` by hand: every typed failure comes from ``FailureType.error``."""
    for path, tree in production_modules():
        if path == ROOT / "workflows" / "contract" / "vocabulary.py":
            continue
        built = calls(tree, "ApplicationError")
        assert not built, f"{path.relative_to(ROOT)}:{built[0].lineno if built else ''} builds an ApplicationError"


def test_every_failure_type_is_raised_somewhere() -> None:
    """A type nobody raises is dead vocabulary, or a place that forgot to use it."""
    used = {
        node.attr
        for _, tree in production_modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and vocabulary_member(node, FailureType)
    }
    missing = {failure.name for failure in FailureType} - used
    assert not missing, f"never raised: {sorted(missing)}"


def test_activities_are_named_and_called_through_the_vocabulary() -> None:
    """Workers name activities from the vocabulary; the workflows schedule one only through its declaration in
    ``workflows/calls.py``, which declares each name once."""
    named = 0
    for path, tree in production_modules():
        where = path.relative_to(ROOT)
        for call in calls(tree, "defn"):
            if not (isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "activity"):
                continue
            for keyword in call.keywords:
                if keyword.arg == "name":
                    assert vocabulary_member(keyword.value, ActivityName), f"{where}:{call.lineno}: name by hand"
                    named += 1
        scheduling = [
            call
            for call in calls(tree, "execute_activity") + calls(tree, "start_activity")
            if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "workflow"
        ]
        if path != ROOT / "workflows" / "calls.py":
            assert not scheduling, f"{where}:{scheduling[0].lineno if scheduling else ''}: an activity not declared"
    assert named >= len(ActivityName), "the scan finds the definitions"
    declared = [value.name for value in vars(activity_calls).values() if isinstance(value, activity_calls.Activity)]
    assert sorted(declared) == sorted(ActivityName), "every activity declared once"


def activity_names(*owners: type) -> set[str]:
    names = set()
    for owner in owners:
        for member in vars(owner).values():
            definition = activity._Definition.from_callable(member) if callable(member) else None
            if definition is not None and definition.name is not None:
                names.add(definition.name)
    return names


def test_the_workers_register_every_activity_of_the_vocabulary() -> None:
    orchestration = activity_names(ProductionActivities, AssemblyActivities, PlatformExportActivities, EventDelivery)
    gpu = activity_names(MattingActivities)
    assert orchestration | gpu == {name.value for name in ActivityName}
    assert activity_names(RunPodDispatcher) == gpu, "the dispatcher serves the GPU queue's whole contract"


@pytest.mark.parametrize("base", [MattingError, GenerationError, ArtifactError])
def test_every_error_class_of_the_workers_carries_a_failure_type(base: type[Exception]) -> None:
    def family(cls: type) -> list[type]:
        children: list[type] = cls.__subclasses__()
        return [cls, *(sub for child in children for sub in family(child))]

    for cls in family(base):
        assert isinstance(cls.failure_type, FailureType), cls.__name__  # type: ignore[attr-defined]


@pytest.mark.parametrize("failure", list(FailureType))
def test_every_failure_type_survives_the_runpod_wire_format(failure: FailureType) -> None:
    assert parse_job_error(job_error(failure, "what happened")["error"]) == (failure, "what happened")


def test_an_untyped_job_error_is_a_retryable_runpod_failure() -> None:
    kind, message = parse_job_error('{"error_type": "ValueError", "error_message": "boom"}')
    assert kind is FailureType.RUNPOD_JOB_FAILED and kind.retryable and "boom" in message


def test_error_carries_the_type_and_retryability() -> None:
    refused = FailureType.GENERATION_REFUSED.error("content policy")
    throttled = FailureType.GENERATION_THROTTLED.error("slow down")
    assert (refused.type, refused.non_retryable) == ("GenerationRefused", True)
    assert (throttled.type, throttled.non_retryable) == ("GenerationThrottled", False)
