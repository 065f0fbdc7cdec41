"""Settings by role: every ``POPCON_*`` variable belongs to one role, and each role reads only its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import ArtifactSettings, PopconSettings, TemporalSettings
from testkit.settings_roles import SETTINGS_ROLES


def own_fields(role: type[PopconSettings]) -> set[str]:
    inherited = set().union(*(set(base.model_fields) for base in role.__mro__[1:] if hasattr(base, "model_fields")))
    return set(role.model_fields) - inherited


def test_no_variable_is_claimed_by_two_roles() -> None:
    """``data_dir`` is the one variable two roles read: the default artifact store lives in the stack's folder."""
    seen: dict[str, str] = {}
    for role in SETTINGS_ROLES:
        for name in own_fields(role):
            if name == "data_dir":
                continue
            assert name not in seen, f"POPCON_{name.upper()} is read by {seen[name]} and {role.__name__}"
            seen[name] = role.__name__


def test_each_role_ignores_the_other_roles_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("POPCON_RUNPOD_WORKERS", "not a number")
    monkeypatch.setenv("POPCON_GPU_CONCURRENCY", "also not a number")
    monkeypatch.setenv("POPCON_ARTIFACT_ROOT", "s3://bucket/prefix")

    artifacts = ArtifactSettings(_env_file=None)

    assert artifacts.artifact_root_uri() == "s3://bucket/prefix" and artifacts.is_shared()
    assert TemporalSettings(_env_file=None).temporal_address == "localhost:7233"


def test_the_default_artifact_store_lives_in_the_data_folder(tmp_path: Path) -> None:
    artifacts = ArtifactSettings(_env_file=None, data_dir=tmp_path)
    assert artifacts.artifact_root_uri() == (tmp_path / "artifacts").as_uri()
    assert not artifacts.is_shared()
