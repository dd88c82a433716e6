"""Faults of the user's setup are exit 2 with a plain message, never an internal error (exit 1),
and a run leaves nothing of a library's in the user's TMPDIR (issue 38)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from media import make_clip
from test_cli import ffbatch_here


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("faults") / "in.mp4", frames=3, size=(128, 96))


def run(*args, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "facefusion_batch", *map(str, args)],
        capture_output=True,
        text=True,
        errors="replace",  # a file name that is not UTF-8 comes back in messages as its bytes
        timeout=300,
        env={**os.environ, **env},
    )


def test_ffbatch_home_that_is_a_file_is_exit_2(clip, astronaut_path, tmp_path):
    home = tmp_path / "home"
    home.write_text("not a folder")
    proc = ffbatch_here("render", clip, "-s", astronaut_path, "-o", tmp_path / "o.mp4", home=home)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"FFBATCH_HOME {home} is a file" in proc.stderr
    assert not (tmp_path / "o.mp4").exists()


def test_a_work_directory_name_held_by_a_file_is_exit_2(clip, astronaut_path, tmp_path):
    (tmp_path / ".o.mp4.ffbatch").write_text("someone's file")
    proc = ffbatch_here("render", clip, "-s", astronaut_path, "-o", tmp_path / "o.mp4", "--chunk-frames", "2")
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


@pytest.mark.parametrize("where", ["a reader that went away", "a full disk"])
def test_standard_output_that_cannot_be_written_is_exit_2(where, clip, astronaut_path, tmp_path):
    """`ffbatch render ... | true` was exit 1 without a word, `> /dev/full` an internal error."""
    args = [sys.executable, "-m", "facefusion_batch", "render", clip, "-s", astronaut_path]
    args += ["-o", tmp_path / "o.mp4", "-q"]
    with open(tmp_path / "err.txt", "w") as err:
        if where == "a full disk":
            with open("/dev/full", "w") as full:
                code = subprocess.run(list(map(str, args)), stdout=full, stderr=err, timeout=300).returncode
        else:
            proc = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=err)
            assert proc.stdout is not None
            proc.stdout.close()  # the reader is gone before the output's name is printed
            code = proc.wait(timeout=300)
    stderr = (tmp_path / "err.txt").read_text()
    assert code == 2 and "cannot write to standard output" in stderr and "internal error" not in stderr, (
        stderr
    )
    assert "Exception ignored" not in stderr and (tmp_path / "o.mp4").is_file()


def test_a_render_with_stderr_closed_is_not_an_internal_error(clip, astronaut_path, tmp_path):
    """`2>&-`: Python starts with sys.stderr None; the progress and the log must not trip on it."""
    args = [
        sys.executable,
        "-m",
        "facefusion_batch",
        "render",
        clip,
        "-s",
        astronaut_path,
        "-o",
        tmp_path / "o.mp4",
    ]
    proc = subprocess.run(
        list(map(str, args)),
        stdout=subprocess.PIPE,
        text=True,
        timeout=300,
        pass_fds=(),
        preexec_fn=lambda: os.close(2),
    )
    assert proc.returncode == 0 and "internal error" not in proc.stdout, proc.stdout
    assert (tmp_path / "o.mp4").is_file()


def test_preview_refuses_a_video_name_and_an_existing_sheet_without_overwrite(clip, astronaut_path, tmp_path):
    video = ffbatch_here("preview", clip, "-s", astronaut_path, "-o", tmp_path / "sheet.mp4")
    assert video.returncode == 2 and "name it .png or .jpg" in video.stderr, video.stderr
    sheet = tmp_path / "sheet.png"
    sheet.write_bytes(b"someone's picture")
    again = ffbatch_here("preview", clip, "-s", astronaut_path, "-o", sheet, "--frames", "1")
    assert again.returncode == 2 and "--overwrite" in again.stderr, again.stderr
    assert sheet.read_bytes() == b"someone's picture"
    replaced = ffbatch_here(
        "preview", clip, "-s", astronaut_path, "-o", sheet, "--frames", "1", "--overwrite"
    )
    assert replaced.returncode == 0, replaced.stderr
    assert sheet.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pixel_boost_with_the_classical_swap_is_refused(clip, astronaut_path, tmp_path):
    """An option that does nothing with the chosen swapper is refused, not silently ignored."""
    out = tmp_path / "o.mp4"
    proc = ffbatch_here(
        "render", clip, "-s", astronaut_path, "-o", out, "--swapper", "classical", "--pixel-boost", "256"
    )
    assert proc.returncode == 2 and "--pixel-boost" in proc.stderr and "classical" in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("kind", ["fifo", "device", "deep"])
def test_a_job_file_that_is_no_file_or_nests_too_deep_is_exit_2(kind, tmp_path):
    """A FIFO as --facefusion-job hung; /dev/zero read until 6 GB; deep nesting was exit 1."""
    if kind == "fifo":
        job = tmp_path / "job.json"
        os.mkfifo(job)
    elif kind == "device":
        job = Path("/dev/zero")
    else:
        job = tmp_path / "job.json"
        job.write_text("[" * 100_000 + "]" * 100_000)
    proc = ffbatch_here("render", "--facefusion-job", job, "-o", tmp_path / "o.mp4")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--facefusion-job {job}" in proc.stderr


@pytest.mark.parametrize(
    "extra", [(), ("--frames", "0:2"), ("--chunk-frames", "2")], ids=["whole", "range", "chunks"]
)
def test_file_names_that_are_not_utf8_render(extra, clip, astronaut_path, tmp_path):
    """café in Latin-1 (b"caf\\xe9"): its temporary name and the tags that name the input were
    exit 1 (UnicodeEncodeError: surrogates not allowed)."""
    name = os.fsdecode(b"caf\xe9")
    src = tmp_path / f"{name}.mp4"
    src.write_bytes(clip.read_bytes())
    out = tmp_path / f"{name}-out.mp4"
    proc = ffbatch_here("render", src, "-s", astronaut_path, "-o", out, "-q", *extra)
    assert proc.returncode == 0, proc.stderr
    assert out.is_file()
