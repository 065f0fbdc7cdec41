"""Command-line argument types the benchmarks share."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def at_least(low: int) -> Callable[[str], int]:
    """An ``argparse`` type: a whole number of at least ``low`` (a clear error otherwise)."""

    def parse(value: str) -> int:
        number = int(value)
        if number < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {number}")
        return number

    return parse
