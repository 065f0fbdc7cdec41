"""The images and the compose stack, checked without a Docker engine.

What can be checked here: the compose file parses and every path, image, build, variable and profile dependency in
it resolves; the Dockerfiles copy what exists and what their ignore files let through; every ``python -m`` module and
``POPCON_*`` variable exists; and the images' entry points start outside Docker with the same arguments (they fail
on the missing Temporal server, not on an import).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import site
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_activity_worker import check_image
from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.runpod.settings import RunPodSettings
from gpu_activity_worker.weights import CATALOGUE
from testkit.dockerfile import instructions
from testkit.settings_roles import every_setting
from workflows import search_attributes as sa

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))
VARIABLE = re.compile(r"(?<!\$)\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<value>[^}]*))?\}")
PYTHON_MODULE = re.compile(r"python3?(?:\.\d+)?\s+-m\s+(?P<module>[\w.]+)")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return loaded


def env_example() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (DOCKER / ".env.example").read_text().splitlines())
    return {key: value for key, value in (p for p in pairs if len(p) == 2) if not key.startswith("#")}


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(instruction, arguments) pairs, continuation lines joined, comments dropped."""
    return [(instruction.op, instruction.args) for instruction in instructions(path)]


def test_compose_parses_and_every_service_runs_something_that_exists() -> None:
    services = compose()["services"]
    assert {"postgresql", "temporal", "temporal-ui", "s3", "orchestration-worker", "gpu-worker"} <= set(services)
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        build = service.get("build")
        if build:
            context = (DOCKER / build["context"]).resolve()
            assert context == ROOT, f"{name} builds from the repository root"
            assert (context / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DOCKER / source).exists(), f"{name} mounts missing {source}"
        assert service.get("profiles"), f"{name} belongs to a profile, so each machine picks what it runs"


def test_every_variable_has_its_default_in_env_example() -> None:
    defaults = env_example()
    text = (DOCKER / "compose.yaml").read_text()
    used = {m["name"]: m for m in VARIABLE.finditer(text)}
    assert used, "the pattern finds the compose file's variables"
    for name, match in used.items():
        assert name in defaults, f"{name} is used by compose.yaml but not in .env.example"
        if match["op"] in (":-", "-"):
            assert match["value"] == defaults[name], f"{name}: compose default {match['value']!r} != .env.example"


def test_each_profile_alone_has_its_dependencies() -> None:
    """A GPU box runs only the gpu profile: dependencies on other profiles must be optional (required: false)."""
    services = compose()["services"]
    for profile in ("server", "app", "gpu"):
        active = {name for name, service in services.items() if profile in service["profiles"]}
        for name in active:
            for dependency, condition in services[name].get("depends_on", {}).items():
                assert dependency in services, f"{name} depends on unknown {dependency}"
                assert dependency in active or condition.get("required") is False, (profile, name, dependency)


def test_the_gpu_worker_reserves_an_nvidia_gpu_and_runs_the_worker_entry_point() -> None:
    gpu = compose()["services"]["gpu-worker"]
    [device] = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert gpu["command"] == ["worker"]
    assert compose()["services"]["orchestration-worker"]["command"] == ["python", "-m", "activities"]


def _popcon_variables() -> set[str]:
    names: set[str] = set()
    for path in [
        *DOCKER.rglob("*"),
        ROOT / "gpu_activity_worker" / "runpod" / "provision.py",
        ROOT / "starter" / "runpod_cli.py",
    ]:
        if path.is_file():
            names |= set(re.findall(r"\bPOPCON_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    return names


def test_every_popcon_variable_is_a_setting() -> None:
    fields = every_setting()
    names = _popcon_variables()
    assert {"POPCON_TEMPORAL_ADDRESS", "POPCON_S3_SECRET_ACCESS_KEY", "POPCON_MODEL_DIR"} <= names
    unknown = sorted(name for name in names if name.removeprefix("POPCON_").lower() not in fields)
    assert not unknown, f"not settings: {unknown}"


def _python_modules() -> set[str]:
    texts = [(DOCKER / "compose.yaml").read_text(), (DOCKER / "gpu-entrypoint.sh").read_text()]
    for service in compose()["services"].values():
        for key in ("command", "entrypoint"):
            value = service.get(key)
            texts.append(" ".join(value) if isinstance(value, list) else str(value or ""))
    for path in DOCKERFILES:
        texts += [args for op, args in dockerfile_instructions(path) if op in ("CMD", "ENTRYPOINT", "RUN")]
        for op, args in dockerfile_instructions(path):
            if op in ("CMD", "ENTRYPOINT") and args.startswith("["):
                texts.append(" ".join(json.loads(args)))
    return {m["module"] for text in texts for m in PYTHON_MODULE.finditer(text)}


def test_every_python_module_the_images_run_is_importable() -> None:
    modules = _python_modules()
    assert {"activities", "gpu_activity_worker", "gpu_activity_worker.runpod.handler"} <= modules
    for module in modules:
        assert importlib.util.find_spec(module) is not None, module


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_dockerfile_copies_what_exists_and_its_ignore_file_lets_through(dockerfile: Path) -> None:
    allowed = {
        line.removeprefix("!").rstrip("/")
        for line in Path(f"{dockerfile}.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copies = [shlex.split(args) for op, args in dockerfile_instructions(dockerfile) if op == "COPY"]
    assert copies
    for words in copies:
        sources = [word for word in words if not word.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), f"{dockerfile.name} copies missing {source}"
            assert source in allowed, f"{dockerfile.name}: {source} is excluded by its .dockerignore"
    entry = [json.loads(args) for op, args in dockerfile_instructions(dockerfile) if op in ("CMD", "ENTRYPOINT")]
    assert entry, "the image says what it runs"


def _copied(dockerfile: Path) -> set[str]:
    return {
        source
        for op, args in dockerfile_instructions(dockerfile)
        if op == "COPY"
        for source in [word for word in shlex.split(args) if not word.startswith("--")][:-1]
    }


def test_the_gpu_image_copies_only_what_the_gpu_worker_needs() -> None:
    """The contract, the shared core and the GPU worker's package: not the orchestration worker or the CLI."""
    assert _copied(DOCKER / "gpu.Dockerfile") == {
        "pyproject.toml",
        "README.md",
        "workflows",
        "core",
        "gpu_activity_worker",
        "docker/gpu-entrypoint.sh",
    }
    assert {"workflows", "core", "activities", "gpu_activity_worker", "starter"} <= _copied(DOCKER / "app.Dockerfile")


def test_the_gpu_image_starts_through_its_entrypoint_script() -> None:
    instructions = dockerfile_instructions(DOCKER / "gpu.Dockerfile")
    assert ("ENTRYPOINT", '["gpu-entrypoint"]') in instructions and ("CMD", '["handler"]') in instructions
    assert ("COPY", "--chmod=755 docker/gpu-entrypoint.sh /usr/local/bin/gpu-entrypoint") in instructions


def _build_arg(name: str) -> str:
    [value] = [
        args.split("=", 1)[1].strip('"')
        for op, args in dockerfile_instructions(DOCKER / "gpu.Dockerfile")
        if op == "ARG" and args.startswith(f"{name}=")
    ]
    return value


def test_the_served_pipelines_are_valid_and_the_ones_popcon_runpod_smoke_checks() -> None:
    pipelines = _build_arg("PIPELINES").split()
    assert pipelines == RunPodSettings(_env_file=None).runpod_pipelines
    assert env_example()["GPU_PIPELINES"] == _build_arg("PIPELINES")
    build_args = compose()["services"]["gpu-worker"]["build"]["args"]
    assert build_args["PIPELINES"] == "${GPU_PIPELINES:-" + _build_arg("PIPELINES") + "}"
    registry = Pipelines(builtin_steps())
    for name in pipelines:
        registry.parse(name)
    assert "check_image $PIPELINES" in " ".join(args for op, args in dockerfile_instructions(DOCKER / "gpu.Dockerfile"))


def test_the_gpu_image_is_a_plain_python_base_whose_cuda_libraries_come_from_the_wheels() -> None:
    """No CUDA toolkit in the base: onnxruntime's CUDA provider finds the ``nvidia-*`` wheels' libraries through the
    image's LD_LIBRARY_PATH, and each library the build check loads lies in one of its folders (as this environment's
    wheels lay them out)."""
    base = _build_arg("BASE_IMAGE")
    assert base.startswith("python:3.11-slim"), base
    env = dict(
        pair.split("=", 1)
        for op, args in dockerfile_instructions(DOCKER / "gpu.Dockerfile")
        if op == "ENV"
        for pair in shlex.split(args)
    )
    site_packages = f"{env['VIRTUAL_ENV']}/lib/python3.11/site-packages/"
    folders = env["LD_LIBRARY_PATH"].split(":")
    assert all(folder.startswith(site_packages + "nvidia/") for folder in folders), folders
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "compute,utility")
    here = [Path(p) for p in site.getsitepackages() if (Path(p) / "nvidia").is_dir()]
    if not here:
        pytest.skip("this environment has no nvidia-* wheels (the gpu extra) to lay the image's folders out")
    for library in check_image.CUDA_LIBRARIES:
        assert any((here[0] / folder.removeprefix(site_packages) / library).exists() for folder in folders), library


def test_baked_weights_are_in_the_catalogue() -> None:
    [default] = [
        args.split("=", 1)[1].strip('"')
        for op, args in dockerfile_instructions(DOCKER / "gpu.Dockerfile")
        if op == "ARG" and args.startswith("WEIGHTS=")
    ]
    for name in {*default.split(), *env_example()["GPU_WEIGHTS"].split()}:
        assert name in CATALOGUE, name


def test_the_namespace_script_registers_the_workflow_search_attributes() -> None:
    script = (DOCKER / "temporal" / "setup-namespace.sh").read_text()
    registered = dict(re.findall(r"(EmojiSet\w+):(KeywordList|Keyword|Int)", script))
    assert registered == {key.name: key.indexed_value_type.name.title().replace("_", "") for key in sa.ALL}


def test_the_scripts_are_valid_shell() -> None:
    for script in [DOCKER / "gpu-entrypoint.sh", *sorted((DOCKER / "temporal").glob("*.sh"))]:
        subprocess.run(["sh", "-n", str(script)], check=True)


# --- The entry points, outside Docker --------------------------------------------------------------------------


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(command: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run like the image does: the venv's python first on PATH, POPCON_* from the environment."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("POPCON_")}
    clean.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        POPCON_DATA_DIR=str(tmp_path / "data"),
        POPCON_MATTING_DEVICE="cpu",
        **env,
    )
    return subprocess.run(command, cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [["sh", str(DOCKER / "gpu-entrypoint.sh"), "worker"], ["python", "-m", "activities"]],
    ids=["gpu-image-worker", "app-image-cmd"],
)
def test_a_worker_entry_point_gets_as_far_as_connecting_to_temporal(command: list[str], tmp_path: Path) -> None:
    done = _run(command, tmp_path, POPCON_TEMPORAL_ADDRESS=f"127.0.0.1:{_unused_port()}")
    assert done.returncode != 0
    assert "Failed client connect" in done.stderr, done.stderr[-2000:]
    assert "ImportError" not in done.stderr and "ModuleNotFoundError" not in done.stderr


@pytest.mark.slow
def test_the_handler_entry_point_runs_a_job(tmp_path: Path) -> None:
    """RunPod's local test mode: the real worker loop runs one job from --test_input and exits."""
    job = {"input": {"op": "describe", "request": {"pipeline": "classical"}}}
    done = _run(["sh", str(DOCKER / "gpu-entrypoint.sh"), "handler", "--test_input", json.dumps(job)], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "'steps': ['floodfill', 'defringe']" in done.stdout + done.stderr


NOT_IN_THE_GPU_IMAGE = ("activities", "starter", "testkit", "tests", "benchmarks")


def _as_in_the_gpu_image(module: str, *args: str) -> list[str]:
    """``python -m MODULE ARGS`` with the packages the GPU image does not copy made unimportable."""
    code = (
        "import runpy, sys\n"
        f"for name in {NOT_IN_THE_GPU_IMAGE!r}:\n    sys.modules[name] = None\n"
        f"sys.argv = [{module!r}, *{list(args)!r}]\n"
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    )
    return ["python", "-c", code]


@pytest.mark.slow
def test_the_gpu_image_entry_points_run_without_the_packages_it_leaves_out(tmp_path: Path) -> None:
    job = {"input": {"op": "describe", "request": {"pipeline": "classical"}}}
    handler = _run(
        _as_in_the_gpu_image("gpu_activity_worker.runpod.handler", "--test_input", json.dumps(job)), tmp_path
    )
    worker = _run(
        _as_in_the_gpu_image("gpu_activity_worker"), tmp_path, POPCON_TEMPORAL_ADDRESS=f"127.0.0.1:{_unused_port()}"
    )
    fetch = _run(_as_in_the_gpu_image("gpu_activity_worker.fetch_weights", "no-such-weights"), tmp_path)

    assert handler.returncode == 0, handler.stderr[-2000:]
    assert "Failed client connect" in worker.stderr, worker.stderr[-2000:]
    assert fetch.returncode == 1 and "unknown weights 'no-such-weights'" in fetch.stdout, fetch.stdout + fetch.stderr
    for done in (handler, worker, fetch):
        assert "ImportError" not in done.stderr and "ModuleNotFoundError" not in done.stderr


def test_the_gpu_entry_point_runs_any_other_command_as_given(tmp_path: Path) -> None:
    done = _run(["sh", str(DOCKER / "gpu-entrypoint.sh"), "python", "-c", "print('as given')"], tmp_path)
    assert (done.returncode, done.stdout) == (0, "as given\n")
