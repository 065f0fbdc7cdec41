"""A Dockerfile's own commands, rehearsed without a Docker engine: a command that does nothing is caught here.

:class:`Rehearsal` walks a Dockerfile's instructions in a throwaway root folder: ``ARG`` and ``ENV`` set variables
(absolute paths re-rooted under the folder), ``WORKDIR`` and ``COPY`` lay out the files the image would hold,
``RUN`` runs each command as written with ``sh -c``, and :meth:`Rehearsal.run` runs the image's ``ENTRYPOINT`` and
``CMD`` with a container's arguments. The host stands in for the base image (its Python 3.11), system administration
commands (``apt-get``, ``useradd``) are recorded instead of run, and a virtual environment the Dockerfile creates sees
the project's installed dependencies (a ``.pth`` file; an ``LD_LIBRARY_PATH`` the image sets also reaches the CUDA
libraries of their ``nvidia-*`` wheels), so ``pip install`` builds and installs the project itself
without fetching gigabytes of wheels again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from core.settings import PROJECT_DIR

SYSTEM_COMMANDS = ("apt-get", "useradd", "groupadd", "chown")
"""Commands a base image's root runs that would change this machine: recorded by a stand-in, not run."""
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass(frozen=True)
class Instruction:
    op: str
    args: str

    def words(self) -> list[str]:
        """An exec-form (JSON) or shell-form argument list."""
        if self.args.startswith("["):
            words: list[str] = json.loads(self.args)
            return words
        return shlex.split(self.args)


def instructions(dockerfile: Path) -> list[Instruction]:
    """The Dockerfile's instructions in order, continuation lines joined, comments dropped."""
    lines = [line for line in dockerfile.read_text().splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        Instruction(line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in text.splitlines()
        if line.strip()
    ]


@dataclass
class Rehearsal:
    """One Dockerfile built in ``root``: its variables, its working folder, and what every step printed."""

    dockerfile: Path
    root: Path
    build_args: dict[str, str] = field(default_factory=dict)
    site_hook: str = ""
    """Python run at the start of every Python process of the image (a ``sitecustomize``), e.g. to add a test's weight
    set to the catalogue the image's fetch command reads."""
    env: dict[str, str] = field(default_factory=dict)
    workdir: Path | None = None
    log: list[tuple[Instruction, subprocess.CompletedProcess[str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        stand_ins = self.root / ".rehearsal" / "bin"
        stand_ins.mkdir(parents=True, exist_ok=True)
        for command in SYSTEM_COMMANDS:
            script = stand_ins / command
            script.write_text(f'#!/bin/sh\necho "{command} $*" >> "{self.root}/.rehearsal/system-commands"\n')
            script.chmod(0o755)
        hooks = self.root / ".rehearsal" / "site"
        hooks.mkdir()
        (hooks / "sitecustomize.py").write_text(self.site_hook)
        self.env = {
            "PATH": os.pathsep.join(
                [str(self.root / "usr/local/bin"), str(stand_ins), str(Path(sys.executable).parent)]
            )
            + os.pathsep
            + os.environ["PATH"],
            "HOME": os.environ["HOME"],
            "PYTHONPATH": str(hooks),
        }
        self.workdir = self.root

    def reroot(self, value: str) -> str:
        """``value`` with every absolute path (at its start, or after ``:`` or ``=``) moved under the root."""
        return re.sub(r"(^|[:=])/(?!/)", lambda m: f"{m.group(1)}{self.root}/", value)

    def expand(self, value: str) -> str:
        variables = {**self.build_args, **self.env}
        return VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), value)

    def build(self) -> None:
        """Every instruction up to ``ENTRYPOINT`` / ``CMD``; a ``RUN`` that fails raises with its output."""
        for instruction in instructions(self.dockerfile):
            getattr(self, f"_{instruction.op.lower()}", self._ignored)(instruction)

    def run(
        self, *arguments: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """What ``docker run IMAGE ARGUMENTS`` runs: the entrypoint with the arguments, or with ``CMD`` when none."""
        found = {i.op: i.words() for i in instructions(self.dockerfile) if i.op in ("ENTRYPOINT", "CMD")}
        command = [*found.get("ENTRYPOINT", []), *(arguments or found.get("CMD", []))]
        return subprocess.run(
            command,
            cwd=self.workdir,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def system_commands(self) -> list[str]:
        recorded = self.root / ".rehearsal" / "system-commands"
        return recorded.read_text().splitlines() if recorded.exists() else []

    def _ignored(self, instruction: Instruction) -> None:
        """FROM (the host stands in), USER, EXPOSE, LABEL, CMD, ENTRYPOINT: nothing to do while building."""

    def _arg(self, instruction: Instruction) -> None:
        name, _, default = instruction.args.partition("=")
        self.build_args.setdefault(name, default.strip('"'))

    def _env(self, instruction: Instruction) -> None:
        hooks = self.env["PYTHONPATH"].split(os.pathsep)[-1]
        for pair in shlex.split(instruction.args):
            name, _, value = pair.partition("=")
            self.env[name] = self.expand(self.reroot(value))
        if hooks not in self.env["PYTHONPATH"].split(os.pathsep):  # an image's own PYTHONPATH keeps the hook after it
            self.env["PYTHONPATH"] += os.pathsep + hooks
        if "LD_LIBRARY_PATH" in self.env:  # after the image's own folders: the shared packages' CUDA libraries
            host = [str(lib) for folder in site.getsitepackages() for lib in sorted(Path(folder).glob("nvidia/*/lib"))]
            own = self.env["LD_LIBRARY_PATH"].split(os.pathsep)
            self.env["LD_LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys([*own, *host]))

    def _workdir(self, instruction: Instruction) -> None:
        self.workdir = Path(self.expand(self.reroot(instruction.args)))
        self.workdir.mkdir(parents=True, exist_ok=True)

    def _copy(self, instruction: Instruction) -> None:
        words = shlex.split(instruction.args)
        mode = next((int(w.split("=", 1)[1], 8) for w in words if w.startswith("--chmod=")), None)
        *sources, destination = [w for w in words if not w.startswith("--")]
        assert self.workdir is not None
        target = Path(self.reroot(destination)) if destination.startswith("/") else self.workdir / destination
        for source in sources:
            origin = PROJECT_DIR / source
            into = target / origin.name if destination.endswith("/") or len(sources) > 1 else target
            if origin.is_dir():
                shutil.copytree(origin, into, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
            else:
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, into)
                if mode is not None:
                    into.chmod(mode)

    def shell(
        self, instruction: Instruction, build_args: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a ``RUN`` instruction's command as the build would (with other build arguments if given)."""
        return subprocess.run(
            ["sh", "-c", instruction.args],
            cwd=self.workdir,
            env={**(self.build_args if build_args is None else build_args), **self.env},
            capture_output=True,
            text=True,
            timeout=600,
        )

    def _run(self, instruction: Instruction) -> None:
        done = self.shell(instruction)
        self.log.append((instruction, done))
        if done.returncode != 0:
            raise AssertionError(
                f"RUN {instruction.args} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        self._share_installed_packages()

    def _share_installed_packages(self) -> None:
        """Let the virtual environment the image creates (``VIRTUAL_ENV``) see the packages this one has installed."""
        packages = Path(self.env.get("VIRTUAL_ENV", "/nonexistent")) / "lib/python3.11/site-packages"
        if packages.is_dir() and not (packages / "rehearsal-host-packages.pth").exists():
            (packages / "rehearsal-host-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
