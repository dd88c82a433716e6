"""Wall time per stage, summed across worker threads (the job report's `stage_seconds`)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager


class StageTimer:
    """Accumulates wall seconds per stage across worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self.seconds[name] += elapsed
                self.calls[name] += 1

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds[name] += seconds
            self.calls[name] += 1
