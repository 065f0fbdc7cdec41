"""Who may import whom: the packages' roles, checked on every import statement of the production code.

- ``workflows`` (the workflow and its contract): only itself, the standard library, pydantic and temporalio, so the
  workflow sandbox never meets image libraries or worker code.
- ``core`` (what every process shares): nothing of the other packages but the contract and its artifact keys.
- ``activities`` (the orchestration worker) and ``gpu_activity_worker`` (the GPU side, RunPod included): never each
  other, so the GPU image ships neither the generators nor the CLI.
- No production module imports test support (``testkit``, ``tests``) or ``benchmarks``.

Imports inside functions count too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ("workflows", "core", "activities", "gpu_activity_worker", "starter")
TEST_SUPPORT = ("testkit", "tests", "benchmarks")


def imports_of(package: str) -> dict[str, set[str]]:
    """Every module of ``package`` (by path) and the absolute names it imports."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.relative_to(ROOT)}: use absolute imports"
                names.add(node.module or "")
        found[str(path.relative_to(ROOT))] = names
    return found


def top(name: str) -> str:
    return name.split(".", 1)[0]


@pytest.mark.parametrize("package", PRODUCTION)
def test_no_production_module_imports_test_support(package: str) -> None:
    for module, names in imports_of(package).items():
        assert not {top(name) for name in names} & set(TEST_SUPPORT), module


def test_the_workflow_package_imports_only_itself_the_standard_library_pydantic_and_temporalio() -> None:
    allowed = {"workflows", "pydantic", "temporalio", "__future__"} | set(sys.stdlib_module_names)
    for module, names in imports_of("workflows").items():
        assert {top(name) for name in names} <= allowed, f"{module}: {sorted({top(n) for n in names} - allowed)}"


def test_the_shared_core_imports_no_role_but_the_contract() -> None:
    for module, names in imports_of("core").items():
        roles = {name for name in names if top(name) in PRODUCTION and top(name) != "core"}
        assert roles <= {"workflows.contract", "workflows.keys"}, f"{module}: {sorted(roles)}"


@pytest.mark.parametrize(
    ("package", "forbidden"), [("gpu_activity_worker", "activities"), ("activities", "gpu_activity_worker")]
)
def test_the_two_workers_do_not_import_each_other(package: str, forbidden: str) -> None:
    for module, names in imports_of(package).items():
        assert forbidden not in {top(name) for name in names}, module
        assert "starter" not in {top(name) for name in names}, f"{module} imports the CLI / client"


def test_the_checks_see_the_imports() -> None:
    """The scan itself works: known edges are found."""
    assert "workflows.contract" in imports_of("core")["core/artifacts.py"]
    assert "core.artifacts" in imports_of("gpu_activity_worker")["gpu_activity_worker/matting.py"]
