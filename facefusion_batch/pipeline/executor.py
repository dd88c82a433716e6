"""Run batches on dedicated workers and hand results back in sequence order.

Each worker is a thread that owns its state for the whole job: on a GPU its
CUDA stream, execution contexts and staging buffers (made by `make_worker(i)`
on the worker's own thread, so thread-local streams stay with it); on a CPU
nothing but the shared `process`. Batches go to the workers round-robin;
results that finish early wait in a small reorder buffer until their turn.

onnxruntime, OpenCV and torch release the GIL, so threads overlap decode,
inference and encode. At most `max_in_flight` batches exist at once: memory
stays flat however long the video is.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import TypeVar

from facefusion_batch.pipeline.batcher import Batch
from facefusion_batch.runtime.blas import one_blas_thread

R = TypeVar("R")

_STOP = object()


class _Worker:
    def __init__(self, index: int, make: Callable[[int], Callable[[Batch], R]]) -> None:
        self.index = index
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._make = make
        self.thread = threading.Thread(target=self._run, name=f"ffbatch-worker-{index}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        process = None
        setup_error: BaseException | None = None
        try:
            process = self._make(self.index)
        except BaseException as exc:  # reported on every batch this worker receives
            setup_error = exc
        try:
            while True:
                item = self.inbox.get()
                if item is _STOP:
                    return
                batch, future = item
                if not future.set_running_or_notify_cancel():
                    continue
                if setup_error is not None or process is None:
                    future.set_exception(setup_error or RuntimeError("the worker has no process"))
                    continue
                try:
                    future.set_result(process(batch))
                except BaseException as exc:  # re-raised in order by the consumer
                    future.set_exception(exc)
        finally:
            close = getattr(process, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    pass


def run_ordered(
    batches: Iterable[Batch],
    process: Callable[[Batch], R] | None = None,
    *,
    workers: int,
    max_in_flight: int | None = None,
    make_worker: Callable[[int], Callable[[Batch], R]] | None = None,
) -> Iterator[tuple[Batch, R]]:
    """Apply `process` to every batch on `workers` threads; yield results in batch order.

    `make_worker(i)`, if given, builds worker i's own callable on that worker's
    thread (GPU: its stream and buffers) instead of sharing `process`; if it
    returns an object with `close()`, that is called when the worker ends.
    Batch k goes to worker k mod `workers`. Submission stops while
    `max_in_flight` batches are unfinished or unconsumed. A worker's error is
    re-raised here when its batch's turn comes.
    """
    if make_worker is None:
        if process is None:
            raise TypeError("run_ordered needs process or make_worker")
        shared = process

        def make_worker(_: int) -> Callable[[Batch], R]:
            return shared

    workers = max(1, workers)
    limit = max(1, max_in_flight or 2 * workers)
    slots = threading.Semaphore(limit)
    with one_blas_thread():  # the workers are the parallelism: BLAS's own pool would fight them
        yield from _run(batches, make_worker, workers, slots)


def _run(
    batches: Iterable[Batch],
    make_worker: Callable[[int], Callable[[Batch], R]],
    workers: int,
    slots: threading.Semaphore,
) -> Iterator[tuple[Batch, R]]:
    pool = [_Worker(i, make_worker) for i in range(workers)]
    pending: dict[int, tuple[Batch, Future]] = {}
    next_seq = 0
    dispatched = 0
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
                future: Future = Future()
                pending[batch.seq] = (batch, future)
                pool[dispatched % workers].inbox.put((batch, future))
                dispatched += 1
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
        for worker in pool:
            worker.inbox.put(_STOP)
        for worker in pool:
            worker.thread.join()
