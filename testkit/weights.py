"""Weight catalogue support for engine tests: the small models they build are not the published weights."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from gpu_activity_worker.weights import CATALOGUE, HubSnapshot


@contextmanager
def unpinned(engine: str) -> Iterator[None]:
    """The catalogue with ``engine``'s digests dropped, so ``require`` loads a test's stand-in weights unverified
    (tests/gpu_activity_worker/test_weights.py checks the verification itself)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, entry in list(CATALOGUE.items()):
            if entry.engine != engine:
                continue
            source = entry.source
            bare = (
                replace(source, sha256={})
                if isinstance(source, HubSnapshot)
                else replace(source, sha256=None, md5=None)
            )
            patch.setitem(CATALOGUE, name, replace(entry, source=bare))
        yield
