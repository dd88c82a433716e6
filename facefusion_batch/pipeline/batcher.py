"""Group frames into batches: close a batch at `max_batch` frames, when `window_ms`
has passed since its first frame, or when the resolution changes (bucketing).

Like a dynamic batcher in an inference server: a fast decoder fills batches to
the maximum; a slow one still gets its frames processed within the window.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

_END = object()


@dataclass
class Batch:
    seq: int  # batch sequence number; the writer restores this order
    items: list[Any]


def _shape_of(item: Any) -> tuple[int, ...]:
    image = getattr(item, "image", item)
    return tuple(getattr(image, "shape", ()))


class _Pump:
    """Moves items from a blocking iterator into a bounded queue on a thread."""

    def __init__(self, source: Iterable[Any], depth: int) -> None:
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(iter(source),), daemon=True, name="ffbatch-batcher-feed"
        )
        self.thread.start()

    def _run(self, it: Iterator[Any]) -> None:
        try:
            for item in it:
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self.stop.is_set():
                    return
        except BaseException as exc:  # handed to the consumer, never lost on this thread
            self.error = exc
        finally:
            while not self.stop.is_set():
                try:
                    self.queue.put(_END, timeout=0.1)
                    break
                except queue.Full:
                    continue


def batches(
    source: Iterable[Any],
    max_batch: int,
    window_ms: float,
    *,
    frames_for: Callable[[tuple[int, ...]], int] | None = None,
    shape_of: Callable[[Any], tuple[int, ...]] = _shape_of,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Batch]:
    """Yield Batch objects in order. Errors of the source are re-raised here.

    `frames_for(shape)` (the batch policy's) says how many frames of a resolution a batch may
    hold, so memory stays bounded for very large frames; at most `max_batch`.
    """
    if max_batch < 1:
        raise ValueError("max_batch must be >= 1")
    limit = max_batch
    pump = _Pump(source, depth=max(2 * max_batch, 4))
    seq = 0
    pending: list[Any] = []
    opened = 0.0
    carry: Any = None
    try:
        while True:
            if carry is not None:
                item, carry = carry, None
            else:
                timeout = None
                if pending:
                    timeout = max(0.0, opened + window_ms / 1000.0 - clock())
                try:
                    item = pump.queue.get(timeout=timeout) if timeout != 0.0 else pump.queue.get_nowait()
                except queue.Empty:
                    yield Batch(seq, pending)
                    seq, pending = seq + 1, []
                    continue
            if item is _END:
                if pump.error is not None:
                    raise pump.error
                if pending:
                    yield Batch(seq, pending)
                return
            if pending and shape_of(item) != shape_of(pending[0]):
                yield Batch(seq, pending)
                seq, pending = seq + 1, []
                carry = item
                continue
            if not pending:
                opened = clock()
                limit = min(max_batch, frames_for(shape_of(item))) if frames_for else max_batch
            pending.append(item)
            if len(pending) >= limit:
                yield Batch(seq, pending)
                seq, pending = seq + 1, []
    finally:
        pump.stop.set()
