import json
import threading
import time

import cv2
import numpy as np
import pytest
from media import make_clip
from test_cli import ffbatch

from facefusion_batch.pipeline.batcher import Batch, batches
from facefusion_batch.pipeline.executor import run_ordered
from facefusion_batch.runtime.batching import BatchPolicy


def test_batches_fill_to_max_and_keep_order():
    items = [np.zeros((4, 4, 3), np.uint8) + i for i in range(10)]
    out = list(batches(items, max_batch=4, window_ms=10_000))
    assert [len(b.items) for b in out] == [4, 4, 2]
    assert [b.seq for b in out] == [0, 1, 2]
    flat = [int(x[0, 0, 0]) for b in out for x in b.items]
    assert flat == list(range(10))


def test_batches_bucket_by_resolution():
    items = [np.zeros((4, 4, 3)), np.zeros((4, 4, 3)), np.zeros((8, 4, 3)), np.zeros((4, 4, 3))]
    out = list(batches(items, max_batch=8, window_ms=10_000))
    assert [len(b.items) for b in out] == [2, 1, 1]
    for b in out:
        assert len({x.shape for x in b.items}) == 1


def test_window_closes_a_partial_batch():
    def slow():
        for i in range(3):
            yield np.zeros((2, 2)) + i
            time.sleep(0.15)

    out = list(batches(slow(), max_batch=100, window_ms=50))
    assert len(out) == 3  # each frame waited longer than the window for a partner
    assert sum(len(b.items) for b in out) == 3


def test_source_error_reaches_consumer():
    def broken():
        yield np.zeros((2, 2))
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(batches(broken(), max_batch=4, window_ms=1000))


def test_invalid_batch_size():
    with pytest.raises(ValueError):
        list(batches([1], max_batch=0, window_ms=1))


def test_results_in_order_when_batches_finish_out_of_order():
    done_order = []
    lock = threading.Lock()
    second_done = threading.Event()

    def process(batch: Batch):
        if batch.seq == 0:  # the first batch finishes after the second, whatever the machine's load
            assert second_done.wait(timeout=300)  # a hang guard
        with lock:
            done_order.append(batch.seq)
        if batch.seq == 1:
            second_done.set()
        return batch.seq * 10

    src = [Batch(i, [i]) for i in range(8)]
    out = list(run_ordered(src, process, workers=4))
    assert [r for _, r in out] == [i * 10 for i in range(8)]
    assert done_order.index(1) < done_order.index(0)  # really out of order underneath


def test_worker_error_propagates_and_stops():
    def process(batch: Batch):
        if batch.seq == 2:
            raise RuntimeError("boom")
        return batch.seq

    got = []
    with pytest.raises(RuntimeError, match="boom"):
        for _, r in run_ordered((Batch(i, [i]) for i in range(100)), process, workers=2):
            got.append(r)
    assert got == [0, 1]


def test_in_flight_is_bounded():
    live = []
    peak = [0]
    lock = threading.Lock()

    def process(batch):
        with lock:
            live.append(batch.seq)
            peak[0] = max(peak[0], len(live))
        time.sleep(0.01)
        with lock:
            live.remove(batch.seq)
        return batch.seq

    consumed = 0
    for _ in run_ordered((Batch(i, [i]) for i in range(30)), process, workers=2, max_in_flight=3):
        consumed += 1
    assert consumed == 30 and peak[0] <= 3


def test_batch_size_adapts_to_very_large_frames():
    from facefusion_batch.runtime.batching import BatchPolicy

    cpu = BatchPolicy(frames=8)
    assert cpu.frames_for((1080, 1920, 3)) == 8
    assert cpu.frames_for((2160, 3840, 3)) == 2  # 4K
    assert cpu.frames_for((4320, 7680, 3)) == 1  # 8K
    assert cpu.frames_for((8640, 15360, 3)) == 1  # never zero
    assert BatchPolicy(frames=32).frames_for((720, 1280, 3)) == 18  # the CPU's pixel budget
    small = [np.zeros((4, 4, 3), np.uint8)] * 6
    big = [np.zeros((40, 40, 3), np.uint8)] * 6

    def two_big(shape):
        return max(1, 2 * 40 * 40 // (shape[0] * shape[1]))

    out = list(batches(small + big, max_batch=4, window_ms=10_000, frames_for=two_big))
    assert [len(b.items) for b in out] == [4, 2, 2, 2, 2]


def test_a_short_clip_is_shared_evenly_between_the_workers():
    policy = BatchPolicy(frames=8)
    assert policy.shared_frames(10, 2) == 5  # 5 and 5, not 8 and 2
    assert policy.shared_frames(11, 2) == 6
    assert policy.shared_frames(16, 2) == 8
    assert policy.shared_frames(17, 2) == 8  # more than a batch a worker: full batches
    assert policy.shared_frames(300, 2) == 8
    assert policy.shared_frames(3, 4) == 1
    assert policy.shared_frames(10, 1) == 8
    assert policy.shared_frames(None, 2) == 8  # not known (an estimated count)


@pytest.mark.slow  # two renders of 60 faces: 8-24 s on 2 cores
def test_a_ten_frame_render_runs_two_batches_of_five_with_the_same_pixels(tmp_path, astronaut_path, t1_small):
    """Two workers get 5 frames each of a 10-frame clip (with 8 and 2 one worker waited on the
    other); the frames are the same bits as one worker's batches of 8 and 2."""
    clip = make_clip(tmp_path / "in.mp4", image=t1_small[:442], size=(640, 442), frames=10, audio=None)
    reports = {}
    for name, workers in (("even", "2"), ("one", "1")):
        out = tmp_path / name / "f.%04d.png"
        out.parent.mkdir()
        report = tmp_path / f"{name}.json"
        proc = ffbatch(
            "render", clip, "-s", astronaut_path, "-o", out, "-q", "--report", report,
            "--workers", workers, "--batch-size", "8",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        reports[name] = json.loads(report.read_text())
    assert reports["even"]["batches"] == 2 and reports["even"]["batch_size_max"] == 5
    assert reports["one"]["batches"] == 2 and reports["one"]["batch_size_max"] == 8
    assert reports["even"]["faces_swapped"] == reports["one"]["faces_swapped"] > 10
    frames = sorted((tmp_path / "even").iterdir())
    assert len(frames) == 10
    for path in frames:
        assert np.array_equal(cv2.imread(str(path)), cv2.imread(str(tmp_path / "one" / path.name))), path.name


def test_workers_run_with_one_blas_thread_and_the_setting_comes_back():
    """numpy's BLAS (OpenBLAS in its wheels) has a thread pool of its own, one thread per core:
    inside a run every worker sees one BLAS thread (two workers' products fought over that pool,
    and one never returned), and afterwards, an error's way out too, the caller's setting is back."""
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    np.ones((64, 64)) @ np.ones((64, 64))  # numpy's BLAS is loaded
    before = blas_threads()
    assert before  # threadpoolctl finds numpy's BLAS here

    def process(batch: Batch):
        product = np.ones((4, 512), np.float32) @ np.ones((512, 512), np.float32)
        if batch.seq == 5:
            raise RuntimeError("boom")
        return blas_threads(), float(product[0, 0])

    seen = [r for _, r in run_ordered((Batch(i, [i]) for i in range(4)), process, workers=2)]
    assert all(threads == [1] * len(before) and value == 512.0 for threads, value in seen)
    assert blas_threads() == before
    with pytest.raises(RuntimeError, match="boom"):
        list(run_ordered((Batch(i, [i]) for i in range(8)), process, workers=2))
    assert blas_threads() == before
