"""The images' packages before and after dependencies by role, resolved by pip without Docker.

For each image (``docker/gpu.Dockerfile``, ``docker/app.Dockerfile``) the project spec its ``pip install`` names is
resolved by pip's own resolver (``pip install --dry-run --ignore-installed --report``, with ``--only-deps`` where the
image installs the dependency set alone), once as the working tree's Dockerfile and pyproject.toml install it and once
as they did at ``--before`` (default: the last commit with one dependency list for every role). The project itself is
left out of both lists: the GPU image installed it before, with the ``popcon`` script it then deleted; now its code
runs from /app. Printed: the package counts, what left and what came, each with its installed size in this
environment (from its RECORD; "-" where this environment lacks it) and its wheel's size where pip found the wheel in
a local index.

``--installed`` also builds each side's environment as the image builds it (no Docker engine needed): a throwaway
virtual environment of this Python, then the Dockerfile's own install step run as written, and prints its package
count and unpacked size (the apparent size of every file in the environment). That is the image's size less its base
and baked weights: what ``POPCON_RUNPOD_IMAGE_SIZE_GB`` adds them to. The GPU image takes about 5 minutes per side.

    python -m benchmarks.image_packages [--before REV] [--image gpu app] [--installed] [--out DIR]

Needs pip 26.2 or newer (``--only-deps``) and the package index the images install from; about 20 s per resolution.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name

from testkit.dockerfile import instructions

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "968f907402076a6e09e21dec2cb2ab74738e687d"
"""The last commit whose pyproject.toml had one dependency list for every role (the GPU image: ``.[gpu,s3,runpod]``,
then ``rm popcon``)."""
INSTALL = re.compile(r"pip install (?P<options>(?:--[\w-]+ )*)[\"']?\.\[(?P<extras>[\w,-]+)\][\"']?")
PROJECT = "popcon-emoji-pipeline"
MB = 1e6


def pip_install_spec(dockerfile: Path) -> tuple[tuple[str, ...], bool]:
    """The extras a Dockerfile's ``pip install ".[...]"`` names, and whether it installs them ``--only-deps``."""
    [match] = [m for step in instructions(dockerfile) if step.op == "RUN" for m in INSTALL.finditer(step.args)]
    return tuple(sorted(match["extras"].split(","))), "--only-deps" in match["options"]


def install_step(dockerfile: Path) -> str:
    """The command of the Dockerfile's ``RUN`` step that installs the project's dependencies, as written."""
    [step] = [step.args for step in instructions(dockerfile) if step.op == "RUN" and INSTALL.search(step.args)]
    return step


@dataclass(frozen=True)
class Environment:
    """An image's Python environment, installed: its distributions and the bytes its files hold."""

    command: str
    packages: int
    size_bytes: int


def install(project: Path, dockerfile: Path, venv: Path) -> Environment:
    """Run the Dockerfile's install step in ``project`` (its pyproject.toml) into a new virtual environment ``venv``.

    Raises:
        subprocess.CalledProcessError: The install failed.
    """
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    command = install_step(dockerfile)
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "SAM2_BUILD_CUDA": "0",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_QUIET": "1",
    }
    subprocess.run(["sh", "-c", command], cwd=project, env=env, check=True)
    packages = len(list(venv.glob("lib/python*/site-packages/*.dist-info")))
    size = sum(path.lstat().st_size for path in venv.rglob("*") if path.is_file() and not path.is_symlink())
    return Environment(command, packages, size)


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    url: str

    def installed_bytes(self) -> int | None:
        """What this environment's copy of the distribution occupies (any version), from its RECORD."""
        try:
            files = importlib.metadata.distribution(self.name).files or []
        except importlib.metadata.PackageNotFoundError:
            return None
        return sum(file.size or 0 for file in files)

    def wheel_bytes(self) -> int | None:
        """The wheel's size where pip found it on this machine (a ``file://`` index); ``None`` for a remote one."""
        path = Path(unquote(urlparse(self.url).path))
        return path.stat().st_size if self.url.startswith("file://") and path.is_file() else None


@dataclass(frozen=True)
class Resolution:
    command: str
    packages: dict[str, Package]


def resolve(project: Path, extras: tuple[str, ...], only_deps: bool, report: Path) -> Resolution:
    """What ``pip install [--only-deps] "PROJECT[EXTRAS]"`` installs into an empty environment, the project left out."""
    options = ["--only-deps"] if only_deps else []
    spec = f".[{','.join(extras)}]"
    dry_run = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), *options]
    subprocess.run(
        [sys.executable, "-m", "pip", *dry_run, f"{project}[{','.join(extras)}]"],
        check=True,
        env={**os.environ, "SAM2_BUILD_CUDA": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    packages: dict[str, Package] = {
        canonicalize_name(item["metadata"]["name"]): Package(
            canonicalize_name(item["metadata"]["name"]), item["metadata"]["version"], item["download_info"]["url"]
        )
        for item in json.loads(report.read_text())["install"]
    }
    packages.pop(PROJECT, None)
    return Resolution(" ".join(["pip install", *options, f'"{spec}"']), packages)


def _project_at(rev: str | None, folder: Path, dockerfile: str) -> Path:
    """pyproject.toml, README.md and the Dockerfile as of ``rev`` (``None``: the working tree) in ``folder``."""
    folder.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", f"docker/{dockerfile}"):
        text = (ROOT / name).read_text() if rev is None else _git_show(rev, name)
        (folder / Path(name).name).write_text(text)
    return folder


def _git_show(rev: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def _size(value: int | None) -> str:
    return "-" if value is None else f"{value / MB:.1f}"


def _rows(packages: list[Package]) -> list[str]:
    rows = [f"| {p.name} | {p.version} | {_size(p.installed_bytes())} | {_size(p.wheel_bytes())} |" for p in packages]
    installed = [p.installed_bytes() for p in packages]
    total = sum(size or 0 for size in installed)
    unknown = " (some unknown)" if None in installed else ""
    rows.append(f"| **{len(packages)} package{'' if len(packages) == 1 else 's'}** | | {total / MB:.1f}{unknown} | |")
    return rows


def _installed_lines(environments: dict[str, Environment], before: str) -> list[str]:
    lines = ["Installed as the image installs it (a throwaway virtual environment, the Dockerfile's install step):", ""]
    lines += ["| side | command | packages | unpacked MB |", "|---|---|---|---|"]
    for label, environment in environments.items():
        name = f"before ({before[:7]})" if label == "before" else "after (working tree)"
        lines.append(
            f"| {name} | `{environment.command}` | {environment.packages} | {environment.size_bytes / MB:.0f} |"
        )
    return [*lines, ""]


def compare(image: str, before: str, work: Path, *, installed: bool = False) -> str:
    dockerfile = f"{image}.Dockerfile"
    side: dict[str, Resolution] = {}
    environments: dict[str, Environment] = {}
    for label, rev in (("before", before), ("after", None)):
        project = _project_at(rev, work / image / label, dockerfile)
        extras, only_deps = pip_install_spec(project / dockerfile)
        side[label] = resolve(project, extras, only_deps, work / image / f"{label}.json")
        if installed:
            environments[label] = install(project, project / dockerfile, work / image / f"{label}-venv")
    old, new = side["before"].packages, side["after"].packages
    left = [old[name] for name in sorted(set(old) - set(new))]
    came = [new[name] for name in sorted(set(new) - set(old))]
    header = "| package | version | installed MB (here) | wheel MB |\n|---|---|---|---|"
    return "\n".join(
        [
            f"## The {image} image (docker/{dockerfile})",
            "",
            f"- before ({before[:7]}): `{side['before'].command}`: {len(old)} packages, and the project itself",
            f"- after (working tree): `{side['after'].command}`: {len(new)} packages",
            "",
            f"Left the image ({len(left)}):",
            "",
            header,
            *_rows(left),
            "",
            f"Came into the image ({len(came)}):",
            "",
            *([header, *_rows(came)] if came else ["none"]),
            "",
            *(_installed_lines(environments, before) if installed else []),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--before", default=BEFORE, help="the commit to compare with (default: %(default).7s)")
    parser.add_argument("--image", nargs="+", choices=("gpu", "app"), default=["gpu", "app"])
    parser.add_argument("--installed", action="store_true", help="also install each side and measure its size")
    parser.add_argument("--out", type=Path, help="also write report.md and pip's reports here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="image-packages-") as folder:
        work = Path(folder)
        report = "\n".join(compare(image, args.before, work, installed=args.installed) for image in args.image)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "report.md").write_text(report)
            for path in work.glob("*/*.json"):
                (args.out / f"{path.parent.name}-{path.name}").write_bytes(path.read_bytes())
    print(report)


if __name__ == "__main__":
    main()
