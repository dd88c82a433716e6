"""One BLAS thread while ffbatch's own workers run.

ffbatch runs batches on its own worker threads (pipeline/executor.py), and each worker's numpy
matrix products go to BLAS. OpenBLAS, which numpy's wheels bundle, answers each call with its
own thread pool, one thread per core: two workers calling it at once fight over that pool, far
slower than one BLAS thread each, and now and then a small product never returns (a worker
spinning inside OpenBLAS; measured in docs/reliability.md). The workers are the parallelism
here, so BLAS gets one thread while they run, and its own setting back when the last run ends
(a library caller's other work keeps its pool outside a render).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_runs = 0
_limiter: Any = None


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS (every library threadpoolctl finds: OpenBLAS, MKL, BLIS) at one thread inside this
    block; nested and concurrent blocks share one limit, lifted when the last one ends."""
    global _runs, _limiter
    from threadpoolctl import threadpool_limits

    with _lock:
        if _runs == 0:
            _limiter = threadpool_limits(limits=1, user_api="blas")
        _runs += 1
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0 and _limiter is not None:
                _limiter.restore_original_limits()
                _limiter = None
