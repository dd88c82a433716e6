"""The `ffbatch` command line: exit codes, messages, files left behind. Renders and signals run
as real subprocesses; usage errors run in this process through `cli.main(argv)` (`ffbatch_here`),
which prints and exits as the command does, without a child's start-up.

Codec noise: the default encode (x264 CRF 18, veryfast) of the face clip moves
pixels far from any face by 2.6-2.9 grey levels on average (decode to BGR and
re-encode; a decode+encode-only pass does the same), while the swapped faces
move by 7.5-8.6 on average per frame. The checks below sit between the two.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path
from unittest import mock

import cv2
import hostk
import numpy as np
import pytest
import typer
from media import audio_packets, decode_all, display_rotation, make_clip
from typer.testing import CliRunner

from facefusion_batch import RENDER_REVISION, __version__, cli, errors
from facefusion_batch.runtime.backends import nvidia_gpu_count
from facefusion_batch.video.decode.reader import FrameReader

FACE_CLIP_SIZE = (640, 360)  # what conftest's face_clip is made with
FACE_CLIP_FRAMES = 24
FAR = 0.75  # box sizes from a face's centre beyond which the swap changes nothing (see test_swap)
HAS_GPU = nvidia_gpu_count() > 0


def ffbatch(
    *args, timeout: float = 300, cwd: Path | None = None, home: Path | None = None
) -> subprocess.CompletedProcess:
    """The CLI in a child process (`home`: a private model store as FFBATCH_HOME)."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    env.pop("FFBATCH_DEBUG", None)
    if home is not None:
        env["FFBATCH_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "facefusion_batch", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def ffbatch_here(
    *args, cwd: Path | None = None, home: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The CLI in this process (`cli.main(argv)`): its exit status, stdout and stderr, as a child
    process would give them (`cwd`, `home`: as for `ffbatch`; `env`: variables set for the call).
    `sys.argv` stays the test runner's: a report's `command` comes from the argv cli.main is
    given (farm/jobs.running_command), as a library caller's would. FFBATCH_DEBUG is unset, as
    `ffbatch` does. The `ffbatch` logger is put back as it was after the call."""
    env = {"COLUMNS": "200"} | ({} if home is None else {"FFBATCH_HOME": str(home)}) | (env or {})
    argv = [str(a) for a in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    logger = logging.getLogger("ffbatch")
    saved = logger.handlers[:], logger.level, logger.propagate
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            with contextlib.chdir(cwd or Path.cwd()), mock.patch.dict(os.environ, env):
                os.environ.pop("FFBATCH_DEBUG", None)  # put back by patch.dict
                with pytest.raises(SystemExit) as ended:
                    cli.main(argv)
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]
    code = ended.value.code
    return subprocess.CompletedProcess(
        args, code if isinstance(code, int) else 1, stdout.getvalue(), stderr.getvalue()
    )


def leftovers(directory: Path) -> list[str]:
    """Temporary files a render or preview may have left (they all start with a dot)."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") or ".partial" in p.name)


def assert_usage_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, nothing on stdout, one `ffbatch: error:` line naming the problem, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ffbatch: error:")]
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


def frame_diffs(before: np.ndarray, after: np.ndarray, boxes: np.ndarray) -> tuple[float, list[float]]:
    """Mean abs diff far from every face, and inside each face box."""
    diff = np.abs(before.astype(np.int16) - after.astype(np.int16)).mean(axis=-1)
    h, w = diff.shape
    yy, xx = np.mgrid[0:h, 0:w]
    far = np.ones((h, w), bool)
    inside = []
    for box in boxes:
        cx, cy = (box[:2] + box[2:]) / 2
        far &= np.hypot(xx - cx, yy - cy) > FAR * max(box[2] - box[0], box[3] - box[1])
        x1, y1 = max(int(box[0]), 0), max(int(box[1]), 0)
        inside.append(float(diff[y1 : int(box[3]), x1 : int(box[2])].mean()))
    return float(diff[far].mean()), inside


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- a real render ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, face_clip, astronaut_path):
    out_dir = tmp_path_factory.mktemp("render")
    out, report = out_dir / "swapped.mp4", out_dir / "report.json"
    proc = ffbatch("render", face_clip, "--source", astronaut_path, "-o", out, "--report", report)
    return proc, out, report


@pytest.mark.slow
def test_render_exits_0_and_prints_only_the_output_path(rendered):
    proc, out, report = rendered
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{out}\n"
    assert "Traceback" not in proc.stderr and "error" not in proc.stderr
    assert out.is_file() and report.is_file()
    assert leftovers(out.parent) == []


@pytest.mark.slow
def test_render_keeps_every_frame_its_timestamp_and_the_audio(rendered, face_clip):
    _, out, _ = rendered
    src, src_tb = decode_all(face_clip)
    dst, dst_tb = decode_all(out)
    assert len(dst) == len(src) == FACE_CLIP_FRAMES
    assert [Fraction(p) * dst_tb for p, _ in dst] == [Fraction(p) * src_tb for p, _ in src]
    assert all(image.shape == (FACE_CLIP_SIZE[1], FACE_CLIP_SIZE[0], 3) for _, image in dst)
    assert audio_packets(out) == audio_packets(face_clip)  # copied packet for packet
    assert len(audio_packets(out)) > 10


@pytest.mark.slow
def test_render_changes_the_faces_and_only_the_faces(rendered, face_clip, models):
    _, out, _ = rendered
    src = [image for _, image in decode_all(face_clip)[0]]
    dst = [image for _, image in decode_all(out)[0]]
    faces = hostk.detect(models, src)
    far_diffs, face_means, face_diffs = [], [], []
    for i, (before, after) in enumerate(zip(src, dst, strict=True)):
        boxes = faces.box[faces.frame_index == i]
        assert len(boxes) >= 4, f"frame {i}: the clip shows most of t1's faces"
        far, inside = frame_diffs(before, after, boxes)
        far_diffs.append(far)
        face_means.append(np.mean(inside))
        face_diffs += inside
        assert far < 3.5, f"frame {i}: {far:.2f} far from the faces"
        assert np.mean(inside) > 2 * far, f"frame {i}: faces {inside}, far {far:.2f}"
    assert np.mean(far_diffs) < 3.0, far_diffs  # codec noise only
    assert np.mean(face_means) > 5.0, face_means
    # nearly every face, one by one, moves clearly more than the codec noise
    assert np.mean(np.array(face_diffs) > np.mean(far_diffs) + 2.0) > 0.9


@pytest.mark.slow
def test_render_report(rendered):
    _, _, report = rendered
    data = json.loads(report.read_text())
    assert data["frames_in"] == data["frames_out"] == FACE_CLIP_FRAMES
    assert 0 < data["faces_swapped"] <= data["faces_found"]
    assert data["faces_swapped"] >= 4 * FACE_CLIP_FRAMES
    assert data["frames_with_faces"] == FACE_CLIP_FRAMES
    assert data["fps"] > 0 and data["peak_rss_mb"] > 50
    assert {"detect", "mesh", "swap"} <= set(data["stage_seconds"])
    assert all(seconds >= 0 for seconds in data["stage_seconds"].values())
    assert data["audio"] == "copied" and data["status"] == "ok"


@pytest.mark.slow
def test_outputs_get_the_usual_permissions(rendered, previewed):
    _, out, report = rendered
    _, sheet = previewed
    expected = 0o666 & ~current_umask()
    for path in (out, report, sheet):
        assert oct(stat.S_IMODE(path.stat().st_mode)) == oct(expected), path.name


@pytest.fixture(scope="module")
def vfr_clip(tmp_path_factory, t1_small) -> Path:
    """12 frames 20-80 ms apart, with AAC audio (whose 1024-sample priming starts at -21 ms)."""
    directory = tmp_path_factory.mktemp("vfr")
    return make_clip(directory / "vfr.mp4", image=t1_small, size=FACE_CLIP_SIZE, frames=12, vfr=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "suffix",
    [
        ".mp4",
        ".mkv",
    ],
)
def test_variable_frame_rate_keeps_its_exact_timestamps(tmp_path, vfr_clip, astronaut_path, suffix):
    clip = vfr_clip
    out = tmp_path / f"out{suffix}"
    proc = ffbatch("render", clip, "-s", astronaut_path, "-o", out, "-q")
    assert proc.returncode == 0, proc.stderr
    src, src_tb = decode_all(clip)
    dst, dst_tb = decode_all(out)
    src_times = [Fraction(p) * src_tb for p, _ in src]
    assert len(set(np.diff([float(t) for t in src_times]).round(3))) > 3, "the input is really VFR"
    assert [Fraction(p) * dst_tb for p, _ in dst] == src_times


@pytest.mark.slow
def test_rotated_input_comes_out_upright_with_faces_swapped(tmp_path, t1_small, astronaut_path, models):
    clip = make_clip(tmp_path / "phone.mp4", image=t1_small, size=FACE_CLIP_SIZE, frames=8, rotation=90)
    assert display_rotation(clip) != 0
    assert decode_all(clip)[0][0][1].shape == (640, 360, 3)  # stored sideways
    out = tmp_path / "out.mp4"
    report = tmp_path / "r.json"
    proc = ffbatch("render", clip, "-s", astronaut_path, "-o", out, "-q", "--report", report)
    assert proc.returncode == 0, proc.stderr
    dst = [image for _, image in decode_all(out)[0]]
    assert len(dst) == 8
    assert dst[0].shape == (360, 640, 3)  # the displayed size, stored upright
    assert display_rotation(out) == 0
    with FrameReader(clip) as reader:
        upright = [frame.image for frame in reader]
    faces = hostk.detect(models, upright)
    assert len(faces) >= 4 * 8, "the upright input shows its faces (else the test proves nothing)"
    for i, (before, after) in enumerate(zip(upright, dst, strict=True)):
        far, inside = frame_diffs(before, after, faces.box[faces.frame_index == i])
        assert far < 3.5 and np.mean(inside) > 2 * far, (i, far, inside)
    assert json.loads(report.read_text())["faces_swapped"] >= 4 * 8


@pytest.mark.slow
def test_faces_one_swaps_one_face_per_frame(tmp_path, face_clip, astronaut_path, models):
    out, report = tmp_path / "one.mp4", tmp_path / "one.json"
    proc = ffbatch("render", face_clip, "-s", astronaut_path, "-o", out, "--faces", "one", "--report", report)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["faces_found"] > data["frames_in"]  # several faces were there
    assert data["faces_swapped"] == data["frames_with_faces"] == FACE_CLIP_FRAMES
    # in the pictures: only the largest face of a frame moved beyond codec noise
    src = decode_all(face_clip)[0]
    dst = decode_all(out)[0]
    for i in (0, FACE_CLIP_FRAMES // 2, FACE_CLIP_FRAMES - 1):
        before, after = src[i][1], dst[i][1]
        faces = hostk.detect(models, [before])
        far, inside = frame_diffs(before, after, faces.box)
        largest = int(np.argmax(faces.areas()))
        moved = [k for k, d in enumerate(inside) if d > far + 2.0]
        assert moved == [largest], (i, far, inside)


# -- bad input: exit 2, one clear line, nothing left behind ---------------------------------------------


@pytest.fixture
def job(tmp_path, face_clip, astronaut_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    return {"input": face_clip, "source": astronaut_path, "dir": out_dir, "out": out_dir / "o.mp4"}


def render_args(job, **changes):
    values = {**job, **changes}
    extra = values.pop("extra", ())
    return ("render", values["input"], "--source", values["source"], "-o", values["out"], *extra)


def assert_nothing_written(job, out: Path | None = None):
    out = out or job["out"]
    assert not out.exists()
    assert leftovers(out.parent if out.parent.exists() else job["dir"]) == []


def test_missing_input(job, tmp_path):
    missing = tmp_path / "nope.mp4"
    assert_usage_error(ffbatch_here(*render_args(job, input=missing)), str(missing), "no such file")
    assert_nothing_written(job)


def test_text_file_as_input(job, tmp_path):
    text = tmp_path / "notes.mp4"
    text.write_text("this is not a video\n" * 20)
    assert_usage_error(ffbatch_here(*render_args(job, input=text)), str(text))
    assert_nothing_written(job)


def test_zero_byte_input(job, tmp_path):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    assert_usage_error(ffbatch_here(*render_args(job, input=empty)), str(empty), "empty")
    assert_nothing_written(job)


def test_source_without_a_face(job, tmp_path):
    yy, xx = np.mgrid[0:256, 0:256]
    plain = tmp_path / "gradient.png"
    cv2.imwrite(str(plain), np.dstack([xx, yy, (xx + yy) // 2]).astype(np.uint8))
    assert_usage_error(ffbatch_here(*render_args(job, source=plain)), "no face", str(plain))
    assert_nothing_written(job)


def test_missing_source_file(job, tmp_path):
    missing = tmp_path / "face.jpg"
    assert_usage_error(ffbatch_here(*render_args(job, source=missing)), "--source", str(missing))
    assert_nothing_written(job)


def test_missing_output_directory(job):
    out = job["dir"] / "not-there" / "o.mp4"
    assert_usage_error(ffbatch_here(*render_args(job, out=out)), str(out.parent), "does not exist")
    assert not out.parent.exists()
    assert leftovers(job["dir"]) == []


def test_existing_output_needs_overwrite(job):
    job["out"].write_bytes(b"keep me")
    assert_usage_error(ffbatch_here(*render_args(job)), str(job["out"]), "--overwrite")
    assert job["out"].read_bytes() == b"keep me"
    assert leftovers(job["dir"]) == []


def test_output_is_the_input(job, tmp_path):
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(job["input"].read_bytes())
    before = clip.read_bytes()
    assert_usage_error(ffbatch_here(*render_args(job, input=clip, out=clip, extra=("--overwrite",))), "input")
    assert clip.read_bytes() == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "extra, words",
    [
        (("--batch-size", "0"), ("--batch-size",)),
        (("--crf", "99"), ("--crf", "99")),
        (("--encoder", "nope"), ("--encoder", "nope")),
        (("--faces", "three"), ("--faces", "three")),
        (("--blend", "smudge"), ("blend",)),
    ],
    ids=["batch-size-0", "crf-99", "encoder-nope", "faces-three", "blend-smudge"],
)
def test_bad_options(job, extra, words):
    assert_usage_error(ffbatch_here(*render_args(job, extra=extra)), *words)
    assert_nothing_written(job)


PLAN_AND_RENDER_REFUSE = [
    ("--swapper-model", "bogus_model"),
    ("--mask-padding", "1,2,3"),
    ("--pixel-boost", "300"),
    ("--swapper", "classical", "--swapper-model", "inswapper_128"),
    ("--mask", "box,sparkle"),
    ("--swapper-weight", "1.5"),
    ("--lip-shadow", "1.5"),
    ("--smile-lines", "2"),
    ("--shutter", "-90"),
    ("--face-presence", "101"),
    ("--enhancer-blend", "101"),
    ("--faces", "reference"),
    ("--precision", "fp8"),
    ("--hwaccel", "vaapi"),
    ("--batch-window-ms", "nan"),
    ("--backend", "gpu"),
]


@pytest.mark.parametrize("extra", PLAN_AND_RENDER_REFUSE, ids=lambda e: "-".join(e).strip("-"))
def test_plan_refuses_what_render_refuses_with_the_same_message(job, extra):
    """plan validates through render's option schema: a farm task never fails on an option render
    refuses (the learned-swap options included)."""
    rendered = assert_usage_error(ffbatch_here(*render_args(job, extra=extra)))
    planned = assert_usage_error(
        ffbatch_here(
            "plan", job["input"], "--source", job["source"], *extra, "--chunk-frames", "10", "-o", job["out"]
        )
    )
    assert planned.removeprefix("ffbatch: error: ") == rendered.removeprefix("ffbatch: error: "), (
        planned,
        rendered,
    )
    assert_nothing_written(job)


def test_options_that_do_not_parse_are_usage_errors(job):
    proc = ffbatch_here(*render_args(job, extra=("--crf", "eighteen")))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--crf" in proc.stderr and "Traceback" not in proc.stderr
    assert_nothing_written(job)


def test_options_that_do_not_parse_use_the_ffbatch_error_line(job):
    assert_usage_error(ffbatch_here(*render_args(job, extra=("--crf", "eighteen"))), "--crf")


def test_backend_cuda_without_a_gpu_is_a_usage_error(job):
    line = assert_usage_error(ffbatch_here(*render_args(job, extra=("--backend", "cuda"))), "--backend cuda")
    if not HAS_GPU:
        assert "no NVIDIA GPU" in line
    assert_nothing_written(job)


# -- signals -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory, t1_small) -> Path:
    """150 frames: a CPU render takes ~20 s, far longer than the time to the signal."""
    return make_clip(
        tmp_path_factory.mktemp("long") / "long.mp4", image=t1_small, size=FACE_CLIP_SIZE, frames=150
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, code, words, wait",
    [
        (signal.SIGINT, 130, "interrupted", 1.5),  # frames are flowing: models loaded, batches in the workers
        (signal.SIGTERM, 143, "terminated", 1.5),
        (signal.SIGINT, 130, "interrupted", 0.0),  # while the models load (typer's own Ctrl-C path)
        (signal.SIGTERM, 143, "terminated", 0.0),
    ],
    ids=["SIGINT", "SIGTERM", "SIGINT-loading", "SIGTERM-loading"],
)
def test_a_signal_stops_the_render_and_removes_the_partial_output(
    tmp_path, long_clip, astronaut_path, signum, code, words, wait
):
    out = tmp_path / "o.mp4"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "facefusion_batch", "render", long_clip, "-s", astronaut_path, "-o", out],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 300  # a hang guard: model loading on a loaded machine is slow
        while not leftovers(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers(tmp_path), "the hidden temporary output never appeared"
        time.sleep(wait)
        assert proc.poll() is None, "the render finished before the signal"
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=300)  # a hang guard; a stopped render exits at once
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stderr  # not 0: it stopped, not finished the 150 frames
    assert stdout == ""
    assert words in stderr and "Traceback" not in stderr, stderr
    assert not out.exists()
    assert leftovers(tmp_path) == []


# -- preview -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def previewed(tmp_path_factory, face_clip, astronaut_path):
    sheet = tmp_path_factory.mktemp("preview") / "sheet.png"
    return ffbatch("preview", face_clip, "-s", astronaut_path, "-o", sheet, "--frames", "3", "-q"), sheet


@pytest.mark.slow
def test_preview_writes_a_contact_sheet(previewed):
    proc, sheet = previewed
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{sheet}\n"
    image = cv2.imread(str(sheet))
    assert image is not None
    width, height = FACE_CLIP_SIZE  # columns are 640 wide already: rows keep the clip's height
    gap = 4
    assert image.shape == (3 * height + 2 * gap, 2 * width + gap, 3)
    # the two columns differ (after has swapped faces) and the gap is white
    assert np.all(image[:, width : width + gap] == 255)
    left, right = image[:height, :width].astype(int), image[:height, width + gap :].astype(int)
    assert np.abs(left - right).mean() > 0.5
    assert leftovers(sheet.parent) == []


def test_preview_rejects_a_bad_frame_count(tmp_path, face_clip, astronaut_path):
    sheet = tmp_path / "sheet.png"
    proc = ffbatch_here("preview", face_clip, "-s", astronaut_path, "-o", sheet, "--frames", "0")
    assert_usage_error(proc, "--frames")
    assert not sheet.exists()


# -- help, version, models, doctor -------------------------------------------------------------------


def test_help_and_version():
    top = ffbatch_here("--help")
    assert top.returncode == 0
    for command in ("render", "preview", "models", "doctor"):
        assert command in top.stdout
    render = ffbatch_here("render", "--help")
    assert render.returncode == 0
    for option in ("--source", "--output", "--faces", "--batch-size", "--blend", "--eyes-mouth", "--colour"):
        assert option in render.stdout, option
    for option in ("--crf", "--encoder", "--backend", "--overwrite", "--report", "--workers"):
        assert option in render.stdout, option
    version = ffbatch_here("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"ffbatch {__version__} (render revision {RENDER_REVISION})"


def test_render_help_states_every_default():
    # (square brackets in help texts are Rich markup and vanish: defaults must not use them)
    lines = ffbatch_here("render", "--help").stdout.splitlines()

    def block(option: str) -> str:
        """The option's help: its line and the wrapped lines below it (plain help wraps)."""
        start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(option))
        end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("-")), len(lines))
        return " ".join(line.strip() for line in lines[start:end])

    threads = block("--threads")
    crf = block("--crf")
    assert "the cores this job may use / workers" in threads, threads
    assert "18" in crf, crf


def test_models_list_verify_and_doctor():
    listed = ffbatch_here("models", "list")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[2] for line in listed.stdout.splitlines() if line.strip()}
    assert rows["yunet_2023mar"] == "ok" and rows["face_mesh_468"] == "ok"
    verified = ffbatch_here("models", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "FAILED" not in verified.stdout
    for name in ("yunet_2023mar_batch", "face_mesh_468", "face_mesh_topology"):
        assert f"{name}: ok" in verified.stdout
    doctor = ffbatch_here("doctor")
    assert doctor.returncode == 0, doctor.stderr
    assert "onnxruntime" in doctor.stdout and "libx264" in doctor.stdout
    if not HAS_GPU:
        assert "no NVIDIA GPU" in doctor.stdout


def test_unknown_command_and_missing_arguments_are_usage_errors(tmp_path):
    proc = ffbatch_here("frobnicate")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = ffbatch_here("render", tmp_path / "in.mp4")  # no --source, no --output
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--source" in proc.stderr or "--output" in proc.stderr


def test_given_options_are_only_those_on_the_command_line():
    """Defaults are not "given" (batch size left to the policy, --streams to the GPU count)."""
    app = typer.Typer()
    seen: list[set[str]] = []

    @app.command()
    def command(ctx: typer.Context, a: int = 1, b: int = 2) -> None:
        seen.append(cli.given_options(ctx))

    assert CliRunner().invoke(app, ["--a", "3"]).exit_code == 0
    assert seen == [{"a"}]


def test_a_terminate_that_a_c_extension_turns_into_another_error_still_exits_143(monkeypatch, capsys):
    """A SIGTERM landing while a C extension initialises comes out as ImportError; it is the
    signal (143), not an internal error (1)."""

    def command(args, standalone_mode, prog_name):
        try:
            errors._on_signal(signal.SIGTERM, None)
        except Exception:
            raise ImportError("initialization failed") from None  # the extension drops the cause

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    monkeypatch.setattr(cli, "app", command)
    monkeypatch.setattr(errors, "_received", [])
    with pytest.raises(SystemExit) as stopped:
        cli.main(["render"])
    # main() installs its own handlers and puts the caller's back as it ends
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert stopped.value.code == 143
    assert "terminated (SIGTERM)" in capsys.readouterr().err
    monkeypatch.setattr(errors, "_received", [])

    def broken(args, standalone_mode, prog_name):
        raise ImportError("initialization failed")

    monkeypatch.setattr(cli, "app", broken)
    with pytest.raises(SystemExit) as failed:
        cli.main(["render"])
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert failed.value.code == 1  # no signal: a real internal error stays one
