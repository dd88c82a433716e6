"""Run batches on worker threads and hand results back in sequence order.

onnxruntime and OpenCV release the GIL, so threads overlap decode, inference
and encode. At most `max_in_flight` batches exist at once: memory stays flat
however long the video is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from facefusion_batch.pipeline.batcher import Batch

R = TypeVar("R")


def run_ordered(
    batches: Iterable[Batch],
    process: Callable[[Batch], R],
    *,
    workers: int,
    max_in_flight: int | None = None,
) -> Iterator[tuple[Batch, R]]:
    """Apply `process` to every batch on `workers` threads; yield results in batch order.

    Results that finish early wait in a small reorder buffer; submission stops
    while `max_in_flight` batches are unfinished or unconsumed.
    """
    workers = max(1, workers)
    limit = max_in_flight or 2 * workers
    slots = threading.Semaphore(limit)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ffbatch-worker")
    pending: dict[int, tuple[Batch, Future]] = {}
    next_seq = 0
    try:
        it = iter(batches)
        exhausted = False
        while True:
            while not exhausted and slots.acquire(blocking=not pending):
                try:
                    batch = next(it)
                except StopIteration:
                    slots.release()
                    exhausted = True
                    break
                pending[batch.seq] = (batch, pool.submit(process, batch))
            if next_seq in pending:
                batch, future = pending.pop(next_seq)
                result = future.result()  # re-raises a worker's error here, in order
                slots.release()
                next_seq += 1
                yield batch, result
            elif exhausted and not pending:
                return
            else:  # the source skipped a sequence number
                raise RuntimeError(f"batch {next_seq} never arrived")
    finally:
        for _, future in pending.values():
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
