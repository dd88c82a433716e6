"""CUDA streams, events and host staging for the GPU backends (one CUDA runtime: torch's).

Every executor worker is a thread; each thread gets its own CUDA stream the
first time it touches the device, so N workers overlap copies and compute on N
streams without passing stream handles around. Waiting is per stream, on
events: nothing here ever calls a device-wide synchronise.

Also the per-stage device timer (CUDA events, resolved without stalling) and
the gate that lets a one-off memory measurement run alone.

Imports torch lazily; on a CPU device everything degrades to plain host code.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

_local = threading.local()


def is_cuda(device: Any) -> bool:
    return str(device).startswith("cuda")


def thread_stream(device: Any):
    """This thread's CUDA stream on `device` (created on first use); None on a CPU device."""
    if not is_cuda(device):
        return None
    import torch

    streams = getattr(_local, "streams", None)
    if streams is None:
        streams = _local.streams = {}
    key = str(torch.device(device))
    stream = streams.get(key)
    if stream is None:
        stream = streams[key] = torch.cuda.Stream(device=torch.device(device))
    return stream


@contextmanager
def on_thread_stream(device: Any) -> Iterator[Any]:
    """Make this thread's stream current for the block (a no-op on the CPU)."""
    stream = thread_stream(device)
    if stream is None:
        yield None
        return
    import torch

    with torch.cuda.stream(stream):
        yield stream


def upload(array: np.ndarray, device: Any):
    """Host array → device tensor through a pinned buffer, without blocking the host.

    The pinned block comes from torch's caching host allocator, which keeps it
    until the copy on this stream has finished.
    """
    import torch

    src = torch.from_numpy(np.ascontiguousarray(array))
    if not is_cuda(device):
        return src
    pinned = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    pinned.copy_(src)
    return pinned.to(device, non_blocking=True)


def download(tensors: dict[str, Any]) -> dict[str, np.ndarray]:
    """Device tensors → numpy arrays: async copies into pinned memory, one event wait."""
    import torch

    first = next(iter(tensors.values()), None)
    if first is None or not is_cuda(first.device):
        return {k: v.detach().numpy() for k, v in tensors.items()}
    out = {}
    for name, t in tensors.items():
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t, non_blocking=True)
        out[name] = host
    done = torch.cuda.Event()
    done.record(torch.cuda.current_stream(first.device))
    done.synchronize()  # waits for this stream only
    return {k: v.numpy() for k, v in out.items()}


class DeviceTimer:
    """Device time per stage, from CUDA events on the stream that ran the stage.

    Event pairs are kept until they have completed; `seconds()` resolves them
    (waiting only on the last events of each stream, at the end of a run).
    On a CPU device it times with the host clock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[str, Any, Any]] = []
        self._seconds: dict[str, float] = defaultdict(float)
        self._calls: dict[str, int] = defaultdict(int)

    @contextmanager
    def stage(self, name: str, device: Any) -> Iterator[None]:
        if not is_cuda(device):
            import time

            t0 = time.perf_counter()
            try:
                yield
            finally:
                self._add(name, time.perf_counter() - t0)
            return
        import torch

        stream = torch.cuda.current_stream(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        try:
            yield
        finally:
            end.record(stream)
            with self._lock:
                self._pending.append((name, start, end))
            self._collect(block=False)

    def _add(self, name: str, seconds: float) -> None:
        with self._lock:
            self._seconds[name] += seconds
            self._calls[name] += 1

    def _collect(self, block: bool) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        keep = []
        for name, start, end in pending:
            if block:
                end.synchronize()
            if end.query():
                self._add(name, start.elapsed_time(end) / 1000.0)
            else:
                keep.append((name, start, end))
        with self._lock:
            self._pending.extend(keep)

    def seconds(self) -> dict[str, float]:
        self._collect(block=True)
        with self._lock:
            return dict(self._seconds)

    def calls(self) -> dict[str, int]:
        with self._lock:
            return dict(self._calls)


class ExclusiveGate:
    """Many runs at once, or one measurement alone (device memory peaks are device-wide)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._exclusive = True
            while self._active:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
