"""The executor: per-worker state, round-robin dispatch, order restored when batches finish
out of order, errors re-raised in order, bounded memory."""

from __future__ import annotations

import random
import threading
import time

import pytest

from facefusion_batch.pipeline.batcher import Batch
from facefusion_batch.pipeline.executor import run_ordered


def _batches(n):
    return (Batch(i, [i]) for i in range(n))


def test_order_restored_when_batches_finish_out_of_order():
    rng = random.Random(0)
    delays = [rng.uniform(0, 0.02) for _ in range(40)]
    finished = []
    lock = threading.Lock()
    second_done = threading.Event()

    def process(batch):
        if batch.seq == 0:  # the first batch finishes after the second, whatever the machine's load
            assert second_done.wait(timeout=300)  # a hang guard
        time.sleep(delays[batch.seq])
        with lock:
            finished.append(batch.seq)
        if batch.seq == 1:
            second_done.set()
        return batch.seq * 10

    out = list(run_ordered(_batches(40), process, workers=4))
    assert [b.seq for b, _ in out] == list(range(40))
    assert [r for _, r in out] == [i * 10 for i in range(40)]
    assert finished.index(1) < finished.index(0)  # they really did complete out of order


def test_each_worker_builds_its_own_state_on_its_thread_and_gets_batches_round_robin():
    made = {}
    closed = []

    class StreamWorker:
        def __init__(self, index):
            self.index = index
            self.thread = threading.get_ident()
            self.seen = []

        def __call__(self, batch):
            assert threading.get_ident() == self.thread  # state used on the thread that made it
            self.seen.append(batch.seq)
            return self.index

        def close(self):
            closed.append(self.index)

    def make_worker(i):
        made[i] = StreamWorker(i)
        return made[i]

    out = list(run_ordered(_batches(12), workers=3, make_worker=make_worker))
    assert sorted(made) == [0, 1, 2]
    assert [r for _, r in out] == [i % 3 for i in range(12)]  # batch k on worker k mod 3
    assert made[1].seen == [1, 4, 7, 10]
    assert sorted(closed) == [0, 1, 2]


def test_worker_error_is_raised_in_order():
    def process(batch):
        if batch.seq == 3:
            raise ValueError("bad batch 3")
        return batch.seq

    got = []
    with pytest.raises(ValueError, match="bad batch 3"):
        for batch, _ in run_ordered(_batches(10), process, workers=2):
            got.append(batch.seq)
    assert got == [0, 1, 2]


def test_worker_setup_error_is_reported():
    def make_worker(i):
        if i == 1:
            raise RuntimeError("no stream for worker 1")
        return lambda b: b.seq

    with pytest.raises(RuntimeError, match="worker 1"):
        list(run_ordered(_batches(4), workers=2, make_worker=make_worker))


def test_in_flight_is_bounded():
    live = 0
    peak = 0
    lock = threading.Lock()

    def source():
        nonlocal live, peak
        for i in range(30):
            with lock:
                live += 1
                peak = max(peak, live)
            yield Batch(i, [i])

    def process(batch):
        time.sleep(0.002)
        return batch.seq

    for _ in run_ordered(source(), process, workers=2, max_in_flight=3):
        with lock:
            live -= 1
    assert peak <= 3


def test_stopping_early_joins_the_workers():
    before = threading.active_count()
    gen = run_ordered(_batches(100), lambda b: time.sleep(0.001) or b.seq, workers=3)
    assert next(gen)[1] == 0
    gen.close()
    assert threading.active_count() <= before


def test_missing_sequence_number_is_an_error():
    batches = [Batch(0, [0]), Batch(2, [2])]
    with pytest.raises(RuntimeError, match="batch 1 never arrived"):
        list(run_ordered(iter(batches), lambda b: b, workers=2))
