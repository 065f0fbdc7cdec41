"""The contract is a package of modules by kind behind one facade: ``workflows.contract`` exports every name its
modules define, each once and as the very object, so an import of the contract never needs to know the modules."""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest
from pydantic import BaseModel

import workflows.contract as contract

MODULES = [
    importlib.import_module(f"{contract.__name__}.{info.name}") for info in pkgutil.iter_modules(contract.__path__)
]


def defined(module: ModuleType) -> list[str]:
    """The public names that the module's own top-level statements define (not the names it imports)."""
    names: list[str] = []
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


def test_the_contract_is_split_by_kind() -> None:
    assert {module.__name__.rsplit(".", 1)[1] for module in MODULES} == {
        "vocabulary",
        "base",
        "set_input",
        "messages",
        "state",
        "activities",
        "export_set",
        "ledger",
        "events",
    }


def test_the_facade_exports_exactly_the_public_names_of_its_modules() -> None:
    names = [name for module in MODULES for name in defined(module)]

    assert len(names) == len(set(names)), f"defined in two modules: {sorted({n for n in names if names.count(n) > 1})}"
    assert len(contract.__all__) == len(set(contract.__all__))
    assert set(contract.__all__) == set(names)


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__.rsplit(".", 1)[1])
def test_each_exported_name_is_the_very_object_of_its_module(module: ModuleType) -> None:
    for name in defined(module):
        assert getattr(contract, name) is getattr(module, name), f"{name} is another object in workflows.contract"


def test_every_model_and_enum_stays_importable_from_the_contract() -> None:
    """What the single module held before the split (63 models, 13 enums) is imported from the facade as before."""
    classes = [
        value
        for module in MODULES
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, BaseModel | enum.Enum)
        and value.__module__ == module.__name__
        and not value.__name__.startswith("_")
    ]

    assert sum(issubclass(cls, BaseModel) for cls in classes) >= 63
    assert sum(issubclass(cls, enum.Enum) for cls in classes) >= 13
    assert all(cls.__name__ in contract.__all__ and getattr(contract, cls.__name__) is cls for cls in classes)


def test_every_model_derives_from_the_contracts_bases() -> None:
    """A result ignores fields it does not know, a request refuses them: only the bases in ``base`` say which."""
    from workflows.contract.base import _Model

    exported = [getattr(contract, name) for name in contract.__all__]
    models = [value for value in exported if isinstance(value, type) and issubclass(value, BaseModel)]
    assert models and all(issubclass(model, _Model) for model in models)
