"""Faults of the user's setup are exit 2 with a plain message, never an internal error (exit 1),
and a run leaves nothing of a library's in the user's TMPDIR (issue 38)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from media import make_clip


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("faults") / "in.mp4", frames=3, size=(128, 96))


def run(*args, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "facefusion_batch", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_ffbatch_home_that_is_a_file_is_exit_2(clip, astronaut_path, tmp_path):
    home = tmp_path / "home"
    home.write_text("not a folder")
    proc = run("render", clip, "-s", astronaut_path, "-o", tmp_path / "o.mp4", FFBATCH_HOME=str(home))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"FFBATCH_HOME {home} is a file" in proc.stderr
    assert not (tmp_path / "o.mp4").exists()


def test_a_work_directory_name_held_by_a_file_is_exit_2(clip, astronaut_path, tmp_path):
    (tmp_path / ".o.mp4.ffbatch").write_text("someone's file")
    proc = run("render", clip, "-s", astronaut_path, "-o", tmp_path / "o.mp4", "--chunk-frames", "2")
    assert proc.returncode == 2 and "internal error" not in proc.stderr, proc.stderr
    assert "work directory" in proc.stderr and "a file has its name" in proc.stderr
    assert (tmp_path / ".o.mp4.ffbatch").read_text() == "someone's file"


def test_a_render_leaves_nothing_in_tmpdir(clip, astronaut_path, tmp_path):
    """onnxruntime's telemetry writes `.ses` (51 bytes) into $TMPDIR as it is imported."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = run("render", clip, "-s", astronaut_path, "-o", tmp_path / "o.mp4", "-q", TMPDIR=str(tmp))
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp)) == []
