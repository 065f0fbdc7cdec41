"""Who may import whom: the packages' roles, checked on every import statement of the production code.

- ``workflows`` (the workflow and its contract): only itself, the standard library, pydantic and temporalio, so the
  workflow sandbox never meets image libraries or worker code.
- ``core`` (what every process shares): nothing of the other packages but the contract and its artifact keys.
- ``activities`` (the orchestration worker) and ``gpu_activity_worker`` (the GPU side, RunPod included): never each
  other, so the GPU image ships neither the generators nor the CLI.
- No production module imports test support (``testkit``, ``tests``) or ``benchmarks``.

Imports inside functions count too: a lazy import is still a dependency. :func:`reachable` follows the same edges
from a process's entry points (tests/test_dependencies_by_role.py checks each role's packages with it).
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterable
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


def module_name(path: Path) -> str:
    """``gpu_activity_worker/runpod/handler.py`` -> ``gpu_activity_worker.runpod.handler`` (a package: its name)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def module_imports() -> dict[str, frozenset[str]]:
    """Every production module by dotted name and the names it imports, lazy imports included: ``import a.b`` gives
    ``a.b``, ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (``c`` may be a module or a name in ``a.b``)."""
    found: dict[str, frozenset[str]] = {}
    for package in PRODUCTION:
        for path in sorted((ROOT / package).rglob("*.py")):
            names: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
            found[module_name(path)] = frozenset(names)
    return found


def _modules_named(name: str) -> set[str]:
    """The production modules that importing ``name`` runs: each existing package on its path, and itself."""
    parts = name.split(".")
    prefixes = (".".join(parts[:end]) for end in range(1, len(parts) + 1))
    return {prefix for prefix in prefixes if prefix in module_imports()}


def reachable(roots: Iterable[str]) -> set[str]:
    """The production modules that running ``roots`` (module names, e.g. ``activities.__main__``) can import."""
    todo = [module for root in roots for module in _modules_named(root)]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += [found for name in module_imports()[module] for found in _modules_named(name)]
    return seen


def third_party_imports(modules: Iterable[str]) -> dict[str, set[str]]:
    """The top-level names of the third-party modules that ``modules`` import, each with the modules importing it."""
    own = set(PRODUCTION) | set(TEST_SUPPORT) | set(sys.stdlib_module_names) | {"__future__"}
    found: dict[str, set[str]] = {}
    for module in modules:
        for name in module_imports()[module]:
            if top(name) not in own:
                found.setdefault(top(name), set()).add(module)
    return found


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


def test_the_gpu_sides_vocabulary_stands_apart_from_its_engines() -> None:
    """The failures and device names every GPU module uses live in ``gpu_activity_worker.vocabulary``, which imports
    nothing of the GPU side; the weights and the device resolution do not reach into the engines package for them."""
    assert {name for name in module_imports()["gpu_activity_worker.vocabulary"] if top(name) in PRODUCTION} <= {
        "workflows.contract",
        "workflows.contract.FailureType",
    }
    for module in ("gpu_activity_worker.device", "gpu_activity_worker.weights"):
        assert not {name for name in module_imports()[module] if name.startswith("gpu_activity_worker.engines")}, module


def test_the_gpu_images_entry_points_reach_only_the_packages_it_copies() -> None:
    roots = [
        "gpu_activity_worker.__main__",
        "gpu_activity_worker.runpod.handler",
        "gpu_activity_worker.runpod.dispatcher",
        "gpu_activity_worker.fetch_weights",
    ]
    assert {top(module) for module in reachable(roots)} == {"workflows", "core", "gpu_activity_worker"}


def test_the_walk_follows_lazy_imports_and_from_imports_of_modules() -> None:
    """``from gpu_activity_worker import weights`` reaches the module; a lazy import inside a function counts."""
    assert "gpu_activity_worker.weights" in reachable(["starter.cli"])
    assert "huggingface_hub" in third_party_imports(reachable(["gpu_activity_worker.fetch_weights"]))
