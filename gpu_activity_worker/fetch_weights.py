"""``python -m gpu_activity_worker.fetch_weights NAME ...``: download weight sets into ``POPCON_MODEL_DIR``.

What the GPU image runs at build time, where the ``popcon`` CLI is not installed; ``popcon models fetch`` does the
same on a developer's machine. Every download is checked against the catalogue's sha256 (and md5) before it replaces
anything. Exits with code 1 when any weight set could not be fetched. ``--list`` prints the catalogue: each weight set
and how it is verified (``sha256``, or ``UNPINNED`` with the files that are not).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from gpu_activity_worker import weights
from gpu_activity_worker.settings import GpuWorkerSettings


def fetch_each(model_dir: Path, names: Sequence[str], report: Callable[[str, Path | str], None]) -> bool:
    """Fetch every weight set in ``names``; ``report`` gets each one's folder, or why it failed.

    Returns:
        True when every weight set was fetched.
    """
    fetched = True
    for name in names:
        try:
            report(name, weights.fetch(model_dir, name))
        except KeyError as err:
            report(name, str(err.args[0]))
            fetched = False
        except weights.FetchError as err:
            report(name, str(err))
            fetched = False
    return fetched


def catalogue_lines() -> list[str]:
    """One line per weight set: its name, engine and how its files are verified."""
    return [f"{entry.name}\t{entry.engine}\t{weights.pin_status(entry)}" for entry in weights.CATALOGUE.values()]


def main(names: Sequence[str]) -> int:
    if not names:
        print(f"usage: python -m {__spec__.name if __spec__ else __name__} NAME ... | --list", file=sys.stderr)
        return 2
    if list(names) == ["--list"]:
        print("\n".join(catalogue_lines()))
        return 0
    return 0 if fetch_each(GpuWorkerSettings().model_dir, names, lambda name, what: print(f"{name}: {what}")) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
