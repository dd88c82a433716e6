"""The memory guard: batch sizes from a memory figure, OOM halving without losing a frame."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from facefusion_batch.runtime.memory import (
    CostCache,
    DeviceOutOfMemory,
    MemoryCost,
    MemoryGuard,
    cost_from_peaks,
    is_out_of_memory,
    measure_cost,
    merge_outputs,
    split_feeds,
)

GiB = 2**30
MiB = 2**20


def test_batch_size_from_free_memory():
    from facefusion_batch.runtime.batching import BatchPolicy

    gpu = BatchPolicy(on_gpu=True)
    # 10 GiB free, 80% usable, 1 GiB fixed: (8 - 1) GiB / 100 MiB = 71.68 -> 71
    assert gpu.device_items(10 * GiB, 100 * MiB, fixed_bytes=GiB, fraction=0.8) == 71
    # shared by 4 streams: 2 GiB each, minus 1 GiB fixed -> 10 items of 100 MiB
    assert gpu.device_items(10 * GiB, 100 * MiB, fixed_bytes=GiB, fraction=0.8, streams=4) == 10
    # the cap (--max-batch, an engine's profile) wins when memory allows more
    capped = BatchPolicy(on_gpu=True, max_batch=16)
    assert capped.device_items(10 * GiB, 100 * MiB) == 16 and capped.profile_max() == 16
    # never below one: a batch of one fails loudly rather than being skipped
    assert gpu.device_items(100 * MiB, 500 * MiB, fixed_bytes=GiB) == 1
    assert BatchPolicy(on_gpu=True, max_batch=8).device_items(GiB, 0) == 8
    # on a GPU model calls are sized by the guard, on the CPU by an activation budget
    assert gpu.items_per_call(256) is None and BatchPolicy().items_per_call(256, channels=64) == 32


def test_cost_model_from_two_peaks():
    cost = cost_from_peaks(peak_1=300 * MiB, peak_n=600 * MiB, n=4)
    assert cost == MemoryCost(per_item_bytes=100 * MiB, fixed_bytes=200 * MiB)
    with pytest.raises(ValueError):
        cost_from_peaks(1, 2, 1)


def test_measure_cost_runs_two_batches():
    peaks = {"value": 0}
    runs = []

    def run(batch):
        runs.append(batch)
        peaks["value"] = 50 * MiB + batch * 10 * MiB

    cost = measure_cost(run, peak_bytes=lambda: peaks["value"], reset_peak=lambda: peaks.update(value=0))
    assert runs == [1, 4]
    assert cost.per_item_bytes == 10 * MiB and cost.fixed_bytes == 50 * MiB


def test_cost_cache_round_trip(tmp_path):
    cache = CostCache(tmp_path / "costs.json")
    assert cache.get("k") is None
    cache.put("k", MemoryCost(123, 456))
    cache.put("other", MemoryCost(1, 2))
    assert CostCache(tmp_path / "costs.json").get("k") == MemoryCost(123, 456)
    (tmp_path / "costs.json").write_text("not json")
    assert cache.get("k") is None  # a damaged cache is re-measured, not fatal


def test_oom_classification():
    class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError's name
        pass

    assert is_out_of_memory(OutOfMemoryError("x"))
    assert is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("[TensorRT] cudaErrorMemoryAllocation"))
    assert is_out_of_memory(DeviceOutOfMemory("fake"))
    assert not is_out_of_memory(ValueError("shape mismatch"))


def _oom_above(limit, calls):
    """A model over items [start, stop) that runs out of memory for more than `limit` items."""

    def call(start, stop):
        calls.append((start, stop))
        if stop - start > limit:
            raise DeviceOutOfMemory(f"batch {stop - start} does not fit")
        return list(range(start, stop))

    return call


def _concat(parts):
    return [x for p in parts for x in p]


def test_oom_halves_and_retries_the_same_items():
    calls = []
    released = []
    guard = MemoryGuard(None, label="mesh", on_oom=lambda: released.append(1))
    out = guard.run(13, _oom_above(3, calls), _concat)
    assert out == list(range(13))  # every item, in order, exactly once
    assert calls[0] == (0, 13)
    assert guard.oom_events >= 2 and len(released) == guard.oom_events
    assert guard.limit <= 3
    assert sum(n * c for n, c in guard.sizes.items()) == 13  # sizes achieved cover every item once
    # later calls start at the lowered limit: no OOM again
    calls.clear()
    assert guard.run(10, _oom_above(3, calls), _concat) == list(range(10))
    assert all(b - a <= 3 for a, b in calls)
    summary = guard.summary()
    assert summary["oom_retries"] == guard.oom_events and summary["final_limit"] == guard.limit


def test_limit_chunks_without_oom():
    calls = []
    guard = MemoryGuard(4)
    assert guard.run(10, _oom_above(100, calls), _concat) == list(range(10))
    assert calls == [(0, 4), (4, 8), (8, 10)]
    assert dict(guard.sizes) == {4: 2, 2: 1}


def test_oom_at_one_item_is_an_error():
    guard = MemoryGuard(None, label="yunet")
    with pytest.raises(DeviceOutOfMemory, match="even for a batch of 1"):
        guard.run(4, _oom_above(0, []), _concat)


def test_other_errors_are_not_retried():
    calls = []

    def call(start, stop):
        calls.append((start, stop))
        raise ValueError("bad input")

    with pytest.raises(ValueError):
        MemoryGuard(None).run(8, call, _concat)
    assert calls == [(0, 8)]


def test_guard_shared_by_threads_loses_nothing():
    guard = MemoryGuard(None)
    results = {}

    def worker(i):
        results[i] = guard.run(20, _oom_above(5, []), _concat)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == list(range(20)) for r in results.values())
    assert guard.limit <= 5


def test_split_and_merge_along_batch_axes():
    feeds = {"x": np.arange(10).reshape(5, 2)}
    parts = [split_feeds(feeds, 0, 2), split_feeds(feeds, 2, 5)]
    assert parts[1]["x"].shape == (3, 2)
    outs = [{"a": p["x"] * 2, "folded": p["x"].reshape(1, -1)} for p in parts]
    merged = merge_outputs(outs, {"a": 0, "folded": 1}, lambda xs, axis: np.concatenate(xs, axis))
    np.testing.assert_array_equal(merged["a"], feeds["x"] * 2)
    np.testing.assert_array_equal(merged["folded"], feeds["x"].reshape(1, -1))


def test_split_keeps_inputs_that_are_not_per_item_whole():
    feeds = {"crops": np.zeros((6, 3)), "weight": np.ones((1,))}  # codeformer-style fidelity weight
    part = split_feeds(feeds, 4, 6)
    assert part["crops"].shape == (2, 3) and part["weight"].shape == (1,)
