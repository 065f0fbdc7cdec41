"""A file artifact store whose writes wait while the test holds them: where a set is, and for how long, is the test's.

Writes run on worker threads (every activity stores through ``asyncio.to_thread`` or a GPU slot's thread), so a held
write blocks one activity while it keeps heartbeating, and nothing else.
"""

from __future__ import annotations

import fnmatch
import threading
from collections import Counter
from pathlib import Path

from core.artifacts import FileArtifactStore
from workflows.contract import ArtifactRef

HOLD_TIMEOUT_S = 120.0
"""A write held longer than this fails (the test forgot to release it)."""


class HeldStore(FileArtifactStore):
    """:class:`FileArtifactStore` whose writes to keys matching a held pattern wait for :meth:`release`."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._gates: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.waiting: Counter[str] = Counter()
        """Writes waiting now, by the pattern that holds them."""

    def hold(self, pattern: str) -> None:
        """Hold every write whose key matches ``pattern`` (``fnmatch``, e.g. ``sets/a-set/*/clip.mp4``)."""
        with self._lock:
            self._gates[pattern] = threading.Event()

    def release(self, pattern: str) -> None:
        with self._lock:
            self._gates.pop(pattern).set()

    def put(
        self, key: str, data: bytes, media_type: str, *, width: int | None = None, height: int | None = None
    ) -> ArtifactRef:
        with self._lock:
            held = [(pattern, gate) for pattern, gate in self._gates.items() if fnmatch.fnmatchcase(key, pattern)]
        for pattern, gate in held:
            with self._lock:
                self.waiting[pattern] += 1
            try:
                if not gate.wait(HOLD_TIMEOUT_S):
                    raise TimeoutError(f"{key} was held for {HOLD_TIMEOUT_S:g} s and never released")
            finally:
                with self._lock:
                    self.waiting[pattern] -= 1
        return super().put(key, data, media_type, width=width, height=height)
