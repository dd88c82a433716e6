"""Only the output is ever written, one job per output, inputs read as files, bounds checked
up front, a report for every job (docs/reliability.md). Every test runs the real command line
on inputs it makes and looks at the files, the exit status and the decoded frames."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import onnxruntime
import pytest
import typer.main
from media import audio_packets, decode_all, make_clip
from test_cli import assert_usage_error, ffbatch, ffbatch_here, leftovers

from facefusion_batch import cli, fsutil
from facefusion_batch.config import render_settings
from facefusion_batch.cores import usable_cores
from facefusion_batch.errors import Interrupted
from facefusion_batch.farm.manifest import file_fingerprint, settings_digest
from facefusion_batch.farm.outputs import job_for
from facefusion_batch.fsutil import AtomicFile, claim_output, remove_live_temps
from facefusion_batch.runtime import onnxruntime_backend
from facefusion_batch.video.pictures.stills import MAX_IMAGE_PIXELS, exif_orientation, image_size, read_image


@pytest.fixture(scope="module")
def small_clip(tmp_path_factory) -> Path:
    """5 synthetic frames, 96x64, no audio: the quickest real render."""
    return make_clip(tmp_path_factory.mktemp("small") / "small.mp4", frames=5, size=(96, 64), audio=None)


@pytest.fixture
def work(tmp_path, small_clip, astronaut_path):
    """A directory holding its own copies of the input and the source photo."""
    shutil.copy(small_clip, tmp_path / "in.mp4")
    shutil.copy(astronaut_path, tmp_path / "face.png")
    return tmp_path


def render(work: Path, *extra, out: str = "out.mp4") -> subprocess.CompletedProcess:
    """`render` of the work directory's input in this process (`cli.main`): the job's exit status,
    files and report are what a child's would be, without a child's start-up."""
    return ffbatch_here("render", work / "in.mp4", "-s", work / "face.png", "-o", work / out, "-q", *extra)


def refused(work: Path, *extra, out: str = "out.mp4") -> subprocess.CompletedProcess:
    """`render` for a job refused before any work: in this process (`cli.main`), no child's start-up."""
    return ffbatch_here("render", work / "in.mp4", "-s", work / "face.png", "-o", work / out, "-q", *extra)


def snapshot(*paths: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in paths}


# -- only the output is ever written -------------------------------------------------------------


@pytest.mark.parametrize("target", ["in.mp4", "face.png", "out.mp4", "link-to-face.png", "hard-face.png"])
def test_report_never_replaces_a_file_the_job_reads_or_writes(work, target):
    (work / "out.mp4").write_bytes(b"old output")
    (work / "link-to-face.png").symlink_to(work / "face.png")
    os.link(work / "face.png", work / "hard-face.png")
    before = snapshot(work / "in.mp4", work / "face.png", work / "out.mp4")
    proc = refused(work, "--overwrite", "--report", work / target)
    line = assert_usage_error(proc, "--report", target)
    assert "only its outputs" in line or "one file" in line, line
    assert snapshot(*before) == before
    assert leftovers(work) == []


def test_report_naming_a_directory_is_refused_before_any_work(work):
    (work / "reports").mkdir()
    assert_usage_error(refused(work, "--report", work / "reports"), "--report", "directory")
    assert not (work / "out.mp4").exists() and leftovers(work) == []


def test_preview_never_overwrites_its_source_photo(work):
    before = snapshot(work / "face.png")
    proc = ffbatch_here("preview", work / "in.mp4", "-s", work / "face.png", "-o", work / "face.png", "-q")
    assert_usage_error(proc, "preview -o", "face.png", "--source")
    assert snapshot(work / "face.png") == before


def test_an_output_dir_render_never_writes_over_another_input(work):
    """inputs a.mp4 and a-swapped.mp4: a's output would be the second input; refused up front."""
    shutil.copy(work / "in.mp4", work / "a.mp4")
    shutil.copy(work / "in.mp4", work / "a-swapped.mp4")
    before = snapshot(work / "a.mp4", work / "a-swapped.mp4")
    proc = ffbatch_here(
        "render", work / "a.mp4", work / "a-swapped.mp4", "-s", work / "face.png",
        "--output-dir", work, "--overwrite", "-q",
    )  # fmt: skip
    assert_usage_error(proc, "a-swapped.mp4", "a.mp4", "input")
    assert snapshot(*before) == before
    assert not (work / "a-swapped-swapped.mp4").exists()


@pytest.mark.parametrize(
    "mode", [(), ("--chunk-frames", "2"), ("--frames", "1:3")], ids=["plain", "chunked", "frames"]
)
def test_a_second_job_on_the_same_output_fails_at_once(work, mode):
    (work / "out.mp4").write_bytes(b"the first job's output")
    with claim_output(work / "out.mp4"):  # what a running ffbatch holds for its whole job
        # another process: it returns while the claim is still held: it did not wait for it
        # (else the child's timeout, a hang guard, ends the test)
        proc = ffbatch(
            "render", work / "in.mp4", "-s", work / "face.png", "-o", work / "out.mp4", "-q",
            "--overwrite", *mode, timeout=300,
        )  # fmt: skip
    assert_usage_error(proc, "another ffbatch process", "out.mp4")
    assert (work / "out.mp4").read_bytes() == b"the first job's output"
    # released: the same command now renders
    proc = render(work, "--overwrite", *mode)
    assert proc.returncode == 0, proc.stderr
    assert len(decode_all(work / "out.mp4")[0]) == (2 if mode and mode[0] == "--frames" else 5)
    assert leftovers(work) == []


@pytest.mark.parametrize("name", ["file:in.mp4", "concat:in.mp4", "pipe:0", "subfile,,start,0,end,0,,:x.mp4"])
def test_inputs_and_outputs_are_files_never_ffmpeg_urls(work, name):
    """A file literally named `file:in.mp4` (3 frames) beside `in.mp4` (5 frames): its 3 frames
    come out, under an output name that is a protocol too."""
    make_clip(work / "three.mp4", frames=3, size=(96, 64), audio=None, seed=7).rename(work / name)
    proc = ffbatch_here(
        "render", name, "-s", "face.png", "-o", "pipe:1.mp4", "-q", "--report", "file:r.json", cwd=work
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(decode_all(work / "pipe:1.mp4")[0]) == 3
    assert json.loads((work / "file:r.json").read_text())["frames_out"] == 3


@pytest.fixture(scope="module")
def face_clip_long(tmp_path_factory, t1_small) -> Path:
    """120 frames with faces: a render long enough to be killed halfway."""
    return make_clip(
        tmp_path_factory.mktemp("long") / "long.mp4", image=t1_small, size=(320, 180), frames=120
    )


@pytest.mark.slow
def test_the_partial_file_of_a_killed_job_is_removed_by_the_next_run(
    tmp_path, face_clip_long, astronaut_path
):
    out = tmp_path / "out.mp4"
    argv = [
        sys.executable,
        "-m",
        "facefusion_batch",
        "render",
        face_clip_long,
        "-s",
        astronaut_path,
        "-o",
        out,
    ]
    other = tmp_path / ".other.partial-abcd1234.mp4"  # another output's: not ours to remove
    other.write_bytes(b"x")
    proc = subprocess.Popen(
        argv + ["-q", "--chunk-frames", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 300  # a hang guard
        while not [p for p in tmp_path.glob(".out.partial-*")] and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert proc.poll() is None, "the render ended before it could be killed"
        proc.kill()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    stale = list(tmp_path.glob(".out.partial-*"))
    assert stale, "SIGKILL left no partial file: nothing to test"
    done = subprocess.run(argv + ["-q", "--frames", "0:4"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not any(p.exists() for p in stale)
    assert other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.partial-abcd1234.mp4", "out.mp4"]


# -- bounds -------------------------------------------------------------------------------------


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims `width` x `height` pixels (its body is a tiny, wrong IDAT)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        import zlib

        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"x\x9c\x03\x00") + chunk(b"IEND", b"")
    )


def jpeg_with_size(image: np.ndarray, width: int, height: int) -> bytes:
    """A real JPEG whose frame header (SOF0) is rewritten to claim another size."""
    data = bytearray(cv2.imencode(".jpg", image)[1].tobytes())
    at = data.find(b"\xff\xc0")
    data[at + 5 : at + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def test_a_huge_source_photo_is_refused_from_its_header_before_decoding(work):
    (work / "face.png").write_bytes(png_header_only(20000, 20000))
    assert image_size((work / "face.png").read_bytes()) == (20000, 20000)
    proc = refused(work)  # refused from the header: its size is all the file holds
    assert_usage_error(proc, "face.png", "20000x20000", "megapixels")
    jpeg = work / "big.jpg"
    jpeg.write_bytes(jpeg_with_size(np.zeros((16, 16, 3), np.uint8), 30000, 30000))
    assert image_size(jpeg.read_bytes()) == (30000, 30000)
    assert_usage_error(
        ffbatch_here("render", work / "in.mp4", "-s", jpeg, "-o", work / "o.mp4", "-q"), "30000x30000"
    )
    assert MAX_IMAGE_PIXELS < 20000 * 20000


def with_exif_orientation(jpeg: bytes, orientation: int) -> bytes:
    """`jpeg` with an APP1 EXIF segment holding only the orientation tag."""
    tiff = b"MM\x00*" + struct.pack(">I", 8) + struct.pack(">H", 1)
    tiff += struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(">I", 0)
    body = b"Exif\x00\x00" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body + jpeg[2:]


# orientation → how the stored picture was made from the upright one
STORED = {
    3: lambda im: cv2.rotate(im, cv2.ROTATE_180),
    6: lambda im: cv2.rotate(im, cv2.ROTATE_90_COUNTERCLOCKWISE),
    8: lambda im: cv2.rotate(im, cv2.ROTATE_90_CLOCKWISE),
    2: lambda im: cv2.flip(im, 1),
    5: lambda im: cv2.transpose(im),
}


@pytest.mark.parametrize("orientation", sorted(STORED))
def test_exif_orientation_of_a_source_photo_is_applied(tmp_path, astronaut_image, orientation):
    upright = cv2.resize(astronaut_image, (256, 192))
    stored = cv2.imencode(".jpg", STORED[orientation](upright), [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    path = tmp_path / "photo.jpg"
    path.write_bytes(with_exif_orientation(stored, orientation))
    assert exif_orientation(path.read_bytes()) == orientation
    got = read_image(path)
    assert got.shape == upright.shape
    assert np.abs(got.astype(int) - upright).mean() < 4


def test_a_sideways_phone_photo_still_gives_its_face(work, astronaut_image):
    stored = cv2.imencode(".jpg", cv2.rotate(astronaut_image, cv2.ROTATE_90_COUNTERCLOCKWISE))[1].tobytes()
    (work / "phone.jpg").write_bytes(with_exif_orientation(stored, 6))
    proc = ffbatch_here("render", work / "in.mp4", "-s", work / "phone.jpg", "-o", work / "o.mp4", "-q")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "extra, words",
    [
        (("--threads", "512"), ("--threads", "512")),
        (("--threads", "9"), ("--threads", "per core")),  # within 256, but more than 4 a core here
        (("--workers", "100000"), ("--workers",)),
        (("--batch-size", "1000000"), ("--batch-size",)),
        (("--batch-window-ms", "inf"), ("--batch-window-ms",)),
        (("--batch-window-ms", "nan"), ("--batch-window-ms",)),
        (("--swapper-weight", "nan"), ("--swapper-weight",)),
        (("--lip-shadow", "nan"), ("--lip-shadow",)),
        (("--lip-shadow", "-0.1"), ("--lip-shadow",)),
        (("--smile-lines", "nan"), ("--smile-lines",)),
        (("--shutter", "400"), ("--shutter", "between 0 and 360")),
        (("--shutter", "nan"), ("--shutter",)),
        (("--face-presence", "nan"), ("--face-presence",)),
        (("--face-presence", "-1"), ("--face-presence", "between 0 and 100")),
        (("--mask-blur", "inf"), ("--mask-blur",)),
        (("--score-threshold", "nan"), ("--score-threshold",)),
        (("--streams", "0"), ("--streams",)),
        (("--max-batch", "100000"), ("--max-batch",)),
        (("--ray-workers", "0"), ("--ray-workers",)),
    ],
)
def test_numeric_options_are_range_checked(work, extra, words):
    if extra == ("--threads", "9") and usable_cores() * 4 >= 9:
        pytest.skip("this machine has cores enough for 9 threads")
    assert_usage_error(refused(work, *extra), *words)
    assert not (work / "out.mp4").exists() and leftovers(work) == []


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity masks on this platform")
def test_a_job_pinned_to_one_core_sizes_its_thread_pools_to_it(work):
    """A farm's cpuset or `taskset` gives a job some cores of a big node: the pools and the
    --threads check go by the affinity mask, not by the machine's core count."""
    from facefusion_batch.pipeline.run import default_threads
    from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCpuBackend

    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(saved)})
    try:
        assert usable_cores() == 1 and default_threads(1) == 1
        assert OnnxRuntimeCpuBackend().threads == 1
        assert_usage_error(refused(work, "--threads", "5"), "--threads 5", "1 cores usable")
    finally:
        os.sched_setaffinity(0, saved)
    assert usable_cores() == len(saved)
    assert not (work / "out.mp4").exists() and leftovers(work) == []


@pytest.mark.parametrize(
    "extra",
    [("--sbatch", "--gres=gpu:1\nrm -rf /"), ("--ffbatch", "ffbatch\ntouch /tmp/x")],
    ids=["sbatch", "ffbatch"],
)
def test_a_plan_refuses_control_characters(work, extra):
    proc = ffbatch_here(
        "plan", work / "in.mp4", "-s", work / "face.png", "-o", work / "o.mp4", "--format", "slurm", *extra
    )
    assert_usage_error(proc, "control character")


def test_a_plan_refuses_a_path_with_a_newline(work):
    odd = work / "in\nrm -rf ~.mp4"
    shutil.copy(work / "in.mp4", odd)
    proc = ffbatch_here("plan", odd, "-s", work / "face.png", "-o", work / "o.mp4", "--format", "shell")
    assert_usage_error(proc, "control character")


@pytest.mark.parametrize("how", ["output", "pattern"])
def test_an_output_name_too_long_is_refused_before_any_work(work, how):
    if how == "output":
        proc = refused(work, out="x" * 300 + ".mp4")
    else:
        proc = ffbatch_here(
            "render", work / "in.mp4", "-s", work / "face.png", "--output-dir", work,
            "--output-pattern", "{stem:>400}", "-q",
        )  # fmt: skip
    assert_usage_error(proc, "bytes", "255")
    assert leftovers(work) == [] and sorted(p.name for p in work.iterdir()) == ["face.png", "in.mp4"]


def test_a_legal_254_byte_output_name_renders(work):
    name = "y" * 250 + ".mp4"
    proc = render(work, out=name)
    assert proc.returncode == 0, proc.stderr
    assert len(decode_all(work / name)[0]) == 5 and leftovers(work) == []


@pytest.mark.parametrize("signum, code", [(signal.SIGHUP, 129), (signal.SIGTERM, 143)], ids=["HUP", "TERM"])
def test_a_hang_up_or_terminate_stops_the_render_cleanly(
    tmp_path, face_clip_long, astronaut_path, signum, code
):
    out = tmp_path / "o.mp4"
    argv = [
        sys.executable,
        "-m",
        "facefusion_batch",
        "render",
        face_clip_long,
        "-s",
        astronaut_path,
        "-o",
        out,
    ]
    proc = subprocess.Popen(argv + ["-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a hang guard
        while not leftovers(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert proc.poll() is None
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    assert not out.exists() and leftovers(tmp_path) == []


# -- reports ------------------------------------------------------------------------------------


def test_the_report_says_what_ran(work):
    proc = render(work, "--report", work / "r.json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((work / "r.json").read_text())
    assert report["status"] == "ok" and report["frames_out"] == 5
    assert report["ffbatch"] and "render" in report["command"] and "--report" in report["command"]
    assert report["command"].split()[:2] == ["ffbatch", "render"]  # cli.main's argv, not the runner's
    assert report["settings"]["batch_size"] >= 1 and report["settings"]["device"]["backend"] == "cpu"
    assert isinstance(report["warnings"], list)


def test_a_failed_job_writes_its_report(work):
    (work / "in.mp4").write_bytes(b"not a video at all" * 100)
    proc = render(work, "--report", work / "r.json")
    assert proc.returncode == 2
    report = json.loads((work / "r.json").read_text())
    assert report["status"] == "failed" and "in.mp4" in report["message"]
    assert not (work / "out.mp4").exists()


def test_an_interrupted_job_writes_its_report(tmp_path, face_clip_long, astronaut_path):
    out, report = tmp_path / "o.mp4", tmp_path / "r.json"
    argv = [
        sys.executable,
        "-m",
        "facefusion_batch",
        "render",
        face_clip_long,
        "-s",
        astronaut_path,
        "-o",
        out,
    ]
    proc = subprocess.Popen(argv + ["-q", "--report", report], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300  # a hang guard
        while not leftovers(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143
    data = json.loads(report.read_text())
    assert data["status"] == "interrupted" and "SIGTERM" in data["message"]
    assert not out.exists()


def test_a_full_disk_while_writing_the_report_is_exit_2(work):
    mount = work / "tiny"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        filler = mount / "filler"
        with open(filler, "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 512)
            except OSError:
                pass
        proc = render(work, "--report", mount / "r.json")
        assert_usage_error(proc, "r.json")
        assert [p.name for p in mount.iterdir()] == ["filler"]
    finally:
        subprocess.run(["umount", str(mount)], check=False)


# -- resume and farm integrity --------------------------------------------------------------------


def test_the_input_fingerprint_changes_when_any_byte_changes(tmp_path):
    path = tmp_path / "big.bin"
    data = bytearray(np.random.default_rng(3).bytes(9 << 20))
    path.write_bytes(bytes(data))
    before = file_fingerprint(path)
    data[len(data) // 2] ^= 1  # the middle: neither the first nor the last MiB
    path.write_bytes(bytes(data))
    os.utime(path, ns=(1, 1))  # a new mtime too (the per-run memo is keyed by it)
    assert file_fingerprint(path) != before


@pytest.mark.slow
def test_segments_of_one_file_spelled_two_ways_join(work):
    """One input named /abs/in.mp4 by one farm task and in.mp4 by another: one digest, so
    concat accepts them; a same-size edit of the input makes the segment stale."""
    first = ffbatch(
        "render", work / "in.mp4", "-s", work / "face.png", "-o", work / "a.mkv", "--frames", "0:2"
    )
    second = ffbatch("render", "in.mp4", "-s", "face.png", "-o", "b.mkv", "--frames", "2:5", cwd=work)
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    joined = ffbatch("concat", work / "b.mkv", "a.mkv", "-o", "j.mp4", cwd=work)
    assert joined.returncode == 0, joined.stderr
    (frames, tb), (want, want_tb) = decode_all(work / "j.mp4"), decode_all(work / "in.mp4")
    assert [pts * tb for pts, _ in frames] == [pts * want_tb for pts, _ in want]
    again = ffbatch("render", "in.mp4", "-s", "face.png", "-o", "b.mkv", "--frames", "2:5", cwd=work)
    assert again.returncode == 0 and "up to date" in again.stderr
    data = bytearray((work / "in.mp4").read_bytes())
    data[-200] ^= 0xFF  # inside the last frame's data; same size
    (work / "in.mp4").write_bytes(bytes(data))
    edited = ffbatch("render", "in.mp4", "-s", "face.png", "-o", "b.mkv", "--frames", "2:5", cwd=work)
    assert "up to date" not in edited.stderr


@pytest.mark.slow
def test_concat_joins_matroska_segments_into_mp4_with_the_audio(tmp_path, astronaut_path):
    clip = make_clip(tmp_path / "in.mp4", frames=30, size=(96, 64), audio="aac")
    for name, frames in (("a.mkv", "0:15"), ("b.mkv", "15:30")):
        proc = ffbatch("render", clip, "-s", astronaut_path, "-o", tmp_path / name, "--frames", frames, "-q")
        assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out.mp4"
    proc = ffbatch("concat", tmp_path / "a.mkv", tmp_path / "b.mkv", "-o", out, "--audio-from", clip)
    assert proc.returncode == 0, proc.stderr
    got, tb = decode_all(out)
    want, want_tb = decode_all(clip)
    assert [p * tb for p, _ in got] == [p * want_tb for p, _ in want]
    assert len(audio_packets(out)) == len(audio_packets(clip))
    assert leftovers(tmp_path) == []


def test_the_settings_digest_is_free_of_path_spelling(work, monkeypatch):
    """The input, the sources and the reference photo spelled relative or absolute, or through a
    symbolic link: one digest (the files' contents decide it)."""
    monkeypatch.chdir(work)
    (work / "link").symlink_to(work)
    options = ["--faces", "reference", "--reference-face", "face.png", "--backend", "cpu"]

    def digest(input_path: str, source: str, reference: str) -> str:
        ctx = (
            typer.main.get_command(cli.app)
            .commands["render"]
            .make_context(
                "render",
                [input_path, "-s", source, "-o", "o.mp4", *options[:2], "--reference-face", reference],
            )
        )
        settings, _ = render_settings(ctx.params)
        return settings_digest(job_for(settings, Path(input_path), Path("o.mp4")))

    relative = digest("in.mp4", "face.png", "face.png")
    assert digest(str(work / "in.mp4"), str(work / "face.png"), str(work / "face.png")) == relative
    assert digest("link/in.mp4", "link/face.png", "./face.png") == relative
    shutil.copy(work / "face.png", work / "other.png")
    (work / "other.png").write_bytes((work / "other.png").read_bytes() + b"\0")
    assert digest("in.mp4", "face.png", "other.png") != relative


@pytest.mark.slow
def test_a_piped_stderr_gets_plain_progress_lines(tmp_path, face_clip_long, astronaut_path):
    out = tmp_path / "o.mp4"
    env = {**os.environ, "FFBATCH_PROGRESS_SECONDS": "0.5"}
    proc = subprocess.run(
        [sys.executable, "-m", "facefusion_batch", "render", face_clip_long, "-s", astronaut_path, "-o", out],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ffbatch: progress: ")]
    assert len(lines) >= 2, proc.stderr
    done = [int(line.split()[2].split("/")[0]) for line in lines]
    assert done == sorted(done) and all(line.split()[2].endswith("/120") for line in lines)
    assert "\r" not in proc.stderr  # no bar redrawn into a log


def test_fail_if_no_faces_writes_nothing_and_zero_faces_warns(work):
    proc = render(work, "--fail-if-no-faces", "--report", work / "r.json")  # synthetic frames: no face
    assert_usage_error(proc, "--fail-if-no-faces", "no face was swapped")
    assert not (work / "out.mp4").exists() and leftovers(work) == []
    assert json.loads((work / "r.json").read_text())["status"] == "failed"
    proc = ffbatch_here(
        "render",
        work / "in.mp4",
        "-s",
        work / "face.png",
        "-o",
        work / "out.mp4",
        "--report",
        work / "r.json",
    )
    assert proc.returncode == 0 and "0 faces swapped" in proc.stderr
    assert any("0 faces swapped" in w for w in json.loads((work / "r.json").read_text())["warnings"])
    chunked = render(work, "--fail-if-no-faces", "--chunk-frames", "2", out="chunked.mp4")
    assert_usage_error(chunked, "--fail-if-no-faces")
    assert not (work / "chunked.mp4").exists() and leftovers(work) == []


def test_fail_if_no_faces_passes_when_faces_are_swapped(tmp_path, t1_small, astronaut_path):
    clip = make_clip(tmp_path / "faces.mp4", image=t1_small, size=(640, 360), frames=6)  # faces in each
    out = tmp_path / "o.mp4"
    proc = ffbatch_here("render", clip, "-s", astronaut_path, "-o", out, "-q", "--fail-if-no-faces")
    assert proc.returncode == 0, proc.stderr
    assert len(decode_all(out)[0]) == 6


def long_segment(path: Path, copies: int) -> Path:
    """A video-only .mp4 of `copies` x 25 frames, made by muxing one encoded second again and
    again with shifted timestamps (no B-frames, a keyframe each second): long, and quick to make."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream(
            "libx264", rate=25, options={"x264-params": "bframes=0:keyint=25", "preset": "ultrafast"}
        )
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        packets = []
        for i in range(25):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), i * 9, np.uint8), format="bgr24")
            frame.pts = i
            packets += stream.encode(frame)
        packets += stream.encode(None)
        step = 25 * int(1 / (stream.time_base * 25)) if stream.time_base else 25
        for k in range(copies):
            for p in packets:
                q = av.Packet(bytes(p))
                q.pts, q.dts, q.is_keyframe = p.pts + k * step, p.dts + k * step, p.is_keyframe
                q.time_base, q.stream = p.time_base, stream
                out.mux(q)
    return path


def test_a_temporary_file_a_signal_orphaned_is_removed_when_the_command_ends(tmp_path):
    """A signal that lands between an AtomicFile's creation and the `with` that would remove it
    (seen under load: SIGTERM right as concat opened its output) leaves a registered temporary
    file, which the CLI removes as it exits; committed and aborted ones are not registered."""
    orphan = AtomicFile(tmp_path / "a.mp4")  # as if interrupted before its `with`
    with AtomicFile(tmp_path / "b.mp4") as done:
        done.temp.write_bytes(b"b")
    aborted = AtomicFile(tmp_path / "c.mp4")
    aborted.abort()
    assert orphan.temp.exists() and (tmp_path / "b.mp4").read_bytes() == b"b"
    remove_live_temps()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.mp4"]
    # the name is registered before the file exists: a signal at any point leaves nothing behind
    registered = []
    real_open = os.open

    def interrupted_open(path, *args):
        registered.append(fsutil._live.copy())
        fd = real_open(path, *args)
        os.close(fd)
        raise KeyboardInterrupt  # lands right after the file was made

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fsutil.os, "open", interrupted_open)
        with pytest.raises(KeyboardInterrupt):
            AtomicFile(tmp_path / "d.mp4")
    assert any(p.name.startswith(".d.partial-") for p in registered[0])
    assert any(p.name.startswith(".d.partial-") for p in tmp_path.iterdir())
    remove_live_temps()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.mp4"]


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["TERM", "HUP"])
def test_a_signal_stops_concat_and_removes_its_partial_output(tmp_path, signum, code):
    segment = long_segment(tmp_path / "seg.mp4", 2000)
    out = tmp_path / "out.mp4"
    proc = subprocess.Popen(
        [sys.executable, "-m", "facefusion_batch", "concat", segment, "-o", out],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # a hang guard
        while (
            not list(tmp_path.glob(".out.partial-*")) and proc.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.002)
        assert proc.poll() is None, "concat finished before the signal"
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    assert not out.exists() and leftovers(tmp_path) == []


def test_a_closed_stdout_is_no_internal_error(work):
    """`ffbatch render ... >&-`: the render works, exit 0, and no file ffbatch opens becomes fd 1."""
    argv = [sys.executable, "-m", "facefusion_batch", "render", work / "in.mp4", "-s", work / "face.png"]
    proc = subprocess.run(
        [*argv, "-o", work / "out.mp4", "--report", work / "r.json", "-q"],
        preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(decode_all(work / "out.mp4")[0]) == 5
    assert json.loads((work / "r.json").read_text())["status"] == "ok"
    assert leftovers(work) == []


def drop_last_packets(segment: Path, out: Path, keep: int) -> Path:
    """A copy of `segment` with its tags but only its first `keep` video packets (as a copy that
    broke off, or a muxer cut short, would leave it)."""
    import av

    with av.open(str(segment)) as src:
        options = {"movflags": "+faststart+use_metadata_tags"} if out.suffix == ".mp4" else {}
        with av.open(str(out), "w", container_options=options) as dst:
            dst.metadata.update(src.metadata)
            stream = dst.add_stream_from_template(src.streams.video[0])
            for n, packet in enumerate(p for p in src.demux(src.streams.video[0]) if p.size):
                if n >= keep:
                    break
                packet.stream = stream
                dst.mux(packet)
    return out


@pytest.mark.slow
def test_a_segment_cut_short_is_never_up_to_date_nor_joined(tmp_path, astronaut_path):
    clip = make_clip(tmp_path / "in.mp4", frames=20, size=(96, 64), audio=None)
    seg = {name: tmp_path / f"{name}.mp4" for name in ("a", "b")}
    for name, frames in (("a", "0:10"), ("b", "10:20")):
        proc = ffbatch("render", clip, "-s", astronaut_path, "-o", seg[name], "--frames", frames, "-q")
        assert proc.returncode == 0, proc.stderr
    short = drop_last_packets(seg["b"], tmp_path / "short.mp4", 7)
    assert_usage_error(
        ffbatch("concat", seg["a"], short, "-o", tmp_path / "out.mp4"), "short.mp4", "7 frames", "10:20"
    )
    assert not (tmp_path / "out.mp4").exists()
    short.replace(seg["b"])
    again = ffbatch("render", clip, "-s", astronaut_path, "-o", seg["b"], "--frames", "10:20", "--overwrite")
    assert again.returncode == 0, again.stderr
    assert "up to date" not in again.stderr
    assert len(decode_all(seg["b"])[0]) == 10
    joined = ffbatch("concat", seg["a"], seg["b"], "-o", tmp_path / "out.mp4")
    assert joined.returncode == 0, joined.stderr
    assert len(decode_all(tmp_path / "out.mp4")[0]) == 20


def test_a_batch_output_cut_short_is_not_up_to_date(tmp_path, astronaut_path):
    (tmp_path / "in").mkdir()
    clip = make_clip(tmp_path / "in" / "a.mp4", frames=20, size=(96, 64), audio=None)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    argv = ("render", clip, "-s", astronaut_path, "--output-dir", out_dir, "-q")
    assert ffbatch_here(*argv).returncode == 0
    output = out_dir / "a-swapped.mp4"
    assert "is up to date; skipping" in ffbatch_here(*argv[:-1]).stderr
    drop_last_packets(output, tmp_path / "cut.mp4", 12).replace(output)
    proc = ffbatch_here(*argv[:-1], "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert "is up to date; skipping" not in proc.stderr
    assert len(decode_all(output)[0]) == 20


def test_a_terminate_while_the_models_load_is_exit_143_not_a_model_error(tmp_path, monkeypatch):
    """SIGTERM's exception raised inside onnxruntime's session load must stop the job (143),
    not be wrapped as "model cannot be loaded" (exit 2)."""

    def terminated(*args, **kwargs):
        raise Interrupted("terminated (SIGTERM)", exit_code=143)

    monkeypatch.setattr(onnxruntime, "InferenceSession", terminated)
    with pytest.raises(Interrupted):
        onnxruntime_backend.OrtSession(
            tmp_path / "m.onnx", label="m", threads=1, providers=["CPUExecutionProvider"]
        )
