"""``python -m benchmarks.image_packages --installed``: an image's environment built and measured without Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import image_packages

pytestmark = pytest.mark.slow


def test_the_dockerfiles_own_install_step_builds_a_new_venv_that_is_counted_and_measured(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=70"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "demo"\nversion = "0.1"\n[project.optional-dependencies]\nx = ["six"]\n'
        "[tool.setuptools]\npy-modules = []\n"
    )
    dockerfile = project / "demo.Dockerfile"
    install = 'pip install "pip==26.3" && pip install --only-deps ".[x]"'
    dockerfile.write_text(f"FROM python:3.11-slim\nRUN python -m venv /opt/demo\nRUN {install}\n")

    environment = image_packages.install(project, dockerfile, tmp_path / "venv")

    assert environment.command == install
    installed = {path.name.split("-")[0] for path in (tmp_path / "venv").glob("lib/python*/site-packages/*.dist-info")}
    assert {"pip", "six"} <= installed and "demo" not in installed, "the venv's own, the extra's, not the project"
    assert environment.packages == len(installed)
    assert environment.size_bytes > 1_000_000, "pip's files alone hold megabytes"
