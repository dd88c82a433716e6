"""The memory guard: batch sizes from free device memory, and no frame lost to an OOM.

A model's memory cost is `fixed + per_item × batch`. It is measured once per
model, input shape, precision and GPU (two small runs, peak allocation of
each) and cached on disk. The batch limit is what fits in a share of the free
memory divided among the streams (`BatchPolicy.device_items`, runtime/batching.py).
If a call still runs out of memory (another process grew, fragmentation), the
same items are split in halves and retried, down to one item; the limit drops
for the calls that follow, and the report says so.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from facefusion_batch import fsutil

log = logging.getLogger("ffbatch")

R = TypeVar("R")

_OOM_MARKERS = ("out of memory", "outofmemory", "cudaerrormemoryallocation", "cuda_error_out_of_memory")


class DeviceOutOfMemory(RuntimeError):
    """An allocation on the device failed (raised by fakes in tests, or wrapping a backend's error)."""


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's OutOfMemoryError, TensorRT's allocation failures, onnxruntime's BFC arena errors."""
    if isinstance(exc, DeviceOutOfMemory | MemoryError):
        return True
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower().replace(" ", "")
    return any(marker.replace(" ", "") in text for marker in _OOM_MARKERS)


@dataclass(frozen=True)
class MemoryCost:
    per_item_bytes: int
    fixed_bytes: int

    def to_json(self) -> dict[str, int]:
        return {"per_item_bytes": self.per_item_bytes, "fixed_bytes": self.fixed_bytes}


def cost_from_peaks(peak_1: int, peak_n: int, n: int) -> MemoryCost:
    """Linear model through the peak allocations of a batch of 1 and a batch of n."""
    if n < 2:
        raise ValueError("need a second batch size of at least 2")
    per_item = max(0, (peak_n - peak_1) // (n - 1))
    # never plan with less than a run of one actually took
    per_item = max(per_item, 1)
    return MemoryCost(per_item_bytes=int(per_item), fixed_bytes=int(max(0, peak_1 - per_item)))


def measure_cost(
    run: Callable[[int], Any], peak_bytes: Callable[[], int], reset_peak: Callable[[], None], n: int = 4
) -> MemoryCost:
    """Run a batch of 1 and one of `n`, reading the peak allocation after each."""
    reset_peak()
    run(1)
    peak_1 = peak_bytes()
    reset_peak()
    run(n)
    peak_n = peak_bytes()
    return cost_from_peaks(peak_1, peak_n, n)


class CostCache:
    """Measured costs on disk (JSON), keyed by model sha, input shape, precision and GPU."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _load(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> MemoryCost | None:
        entry = self._load().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            return MemoryCost(int(entry["per_item_bytes"]), int(entry["fixed_bytes"]))
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, key: str, cost: MemoryCost) -> None:
        with self._lock:
            data = self._load()
            data[key] = cost.to_json()
            fsutil.write_json_atomically(self.path, data, sort_keys=True, indent=1)


class MemoryGuard:
    """Runs `call(start, stop)` over items in chunks of at most `limit`, halving on OOM.

    One guard may be shared by several stream workers: a limit lowered by one
    applies to all. `on_oom` runs after each failure (e.g. release cached blocks).
    """

    def __init__(
        self,
        limit: int | None = None,
        *,
        label: str = "",
        is_oom: Callable[[BaseException], bool] = is_out_of_memory,
        on_oom: Callable[[], None] | None = None,
    ) -> None:
        self.limit = limit
        self.label = label
        self._is_oom = is_oom
        self._on_oom = on_oom
        self._lock = threading.Lock()
        self.oom_events = 0
        self.sizes: Counter[int] = Counter()
        self.first_limit = limit

    def set_limit(self, limit: int | None) -> None:
        with self._lock:
            self.limit = None if limit is None else max(1, int(limit))
            if self.first_limit is None:
                self.first_limit = self.limit

    def _lower(self, size: int) -> None:
        with self._lock:
            new = max(1, size // 2)
            if self.limit is None or new < self.limit:
                self.limit = new

    def run(self, n: int, call: Callable[[int, int], R], merge: Callable[[list[R]], R]) -> R:
        """Process items [0, n); results of the chunks are merged in order."""
        if n <= 0:
            return call(0, 0)
        limit = self.limit or n
        parts: list[R] = []
        start = 0
        while start < n:
            stop = min(n, start + limit)
            parts.extend(self._attempt(start, stop, call))
            start = stop
            limit = self.limit or limit  # another worker may have lowered it
        return parts[0] if len(parts) == 1 else merge(parts)

    def _attempt(self, start: int, stop: int, call: Callable[[int, int], R]) -> list[R]:
        try:
            result = call(start, stop)
        except BaseException as exc:
            if not self._is_oom(exc):
                raise
            size = stop - start
            self.oom_events += 1
            if self._on_oom is not None:
                self._on_oom()
            if size <= 1:
                raise DeviceOutOfMemory(
                    f"{self.label or 'model'}: out of device memory even for a batch of 1 ({exc}); "
                    "free GPU memory (other processes?) or use fewer --streams"
                ) from exc
            self._lower(size)
            log.warning(
                "%s: out of device memory at batch %d; retrying the same items as two batches of %d and %d",
                self.label or "model",
                size,
                size // 2,
                size - size // 2,
            )
            mid = start + size // 2
            return self._attempt(start, mid, call) + self._attempt(mid, stop, call)
        with self._lock:
            self.sizes[stop - start] += 1
        return [result]

    def summary(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "initial_limit": self.first_limit,
            "final_limit": self.limit,
            "oom_retries": self.oom_events,
            "batch_sizes": {str(k): v for k, v in sorted(self.sizes.items())},
        }


def batch_of(feeds: dict[str, Any]) -> int:
    """Items in a call: the longest leading axis (an input of another length goes whole to every chunk)."""
    return max(int(v.shape[0]) for v in feeds.values())


def split_feeds(feeds: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    """Rows [start, stop) of every input whose axis 0 is the item axis; the others whole
    (a conditioning input such as codeformer's fidelity weight has a leading 1)."""
    n = batch_of(feeds)
    return {k: v[start:stop] if v.shape[0] == n else v for k, v in feeds.items()}


def merge_outputs(parts: Sequence[dict[str, Any]], axes: dict[str, int], cat: Callable) -> dict[str, Any]:
    """Join chunk outputs along each output's batch axis (`axes[name]`), with `cat(list, axis)`."""
    return {name: cat([p[name] for p in parts], axes.get(name, 0)) for name in parts[0]}
