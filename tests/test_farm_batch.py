"""Many inputs in one run, and `ffbatch plan` (json, shell, slurm, opencue) run for real."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from media import audio_packets, decode_all, make_clip
from test_cli import ffbatch_here

from facefusion_batch.models.assets import asset_path

PYTHON_FFBATCH = f"{shlex.quote(sys.executable)} -m facefusion_batch"


def ffbatch(*args, check: bool = True) -> subprocess.CompletedProcess:
    """The command in this process (`cli.main`, tests/test_cli.py `ffbatch_here`); the plans'
    own command lines run as children where a case runs them."""
    proc = ffbatch_here(*args)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("farm batch")


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), (640, 443), interpolation=cv2.INTER_AREA)


@pytest.fixture(scope="module")
def inputs(work, photo) -> dict[str, Path]:
    folder = work / "in puts"
    folder.mkdir()
    broken = folder / "b broken.mp4"
    broken.write_text("this is not a video\n")
    return {
        "a": make_clip(folder / "a.mp4", image=photo, size=(320, 240), frames=12),
        "b": broken,
        "c": make_clip(folder / "c one.mp4", image=photo, size=(256, 192), frames=10, seed=3),
    }


def test_many_inputs_one_broken(work, inputs, source):
    out_dir = work / "out dir"
    out_dir.mkdir()
    report = work / "batch.json"
    args = ("render", inputs["a"], inputs["b"], inputs["c"], "-s", source, "--output-dir", out_dir)
    proc = ffbatch_here(*args, "--report", report)  # in this process: the models loaded once
    assert proc.returncode == 2, proc.stderr
    good = [out_dir / "a-swapped.mp4", out_dir / "c one-swapped.mp4"]
    assert proc.stdout.splitlines() == [str(p) for p in good]
    assert "b broken.mp4" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(p.name for p in good)
    for path, inp, frames in ((good[0], inputs["a"], 12), (good[1], inputs["c"], 10)):
        got, _ = decode_all(path)
        assert len(got) == frames and got[0][1].shape[:2] == decode_all(inp)[0][0][1].shape[:2]
        assert audio_packets(path) == audio_packets(inp)
    data = json.loads(report.read_text())
    assert (data["inputs"], data["ok"], data["failed"], data["status"]) == (3, 2, 1, "failed")
    status = {Path(job["input"]).name: job["status"] for job in data["jobs"]}
    assert status == {"a.mp4": "ok", "b broken.mp4": "failed", "c one.mp4": "ok"}
    failed = next(job for job in data["jobs"] if job["status"] == "failed")
    assert "b broken.mp4" in failed["message"]
    assert all(job["faces_swapped"] > 0 for job in data["jobs"] if job["status"] == "ok")
    assert proc.stderr.count("backend auto") <= 1  # the models were loaded once

    # the same command again: finished outputs are up to date, only the broken one fails again
    mtimes = [p.stat().st_mtime_ns for p in good]
    again = ffbatch(*args, "--report", report, check=False)
    assert again.returncode == 2
    assert again.stderr.count("is up to date") == 2
    assert [p.stat().st_mtime_ns for p in good] == mtimes
    data = json.loads(report.read_text())
    assert (data["skipped"], data["failed"]) == (2, 1)

    # other settings: an existing output is not theirs; --overwrite renders it again
    other = ffbatch("render", inputs["a"], "-s", source, "--output-dir", out_dir, "--crf", "30", check=False)
    assert other.returncode == 2 and "--overwrite" in other.stderr


def test_output_options_are_checked(work, inputs, source):
    two = ffbatch_here("render", inputs["a"], inputs["c"], "-s", source, "-o", work / "x.mp4")
    assert two.returncode == 2 and "--output-dir" in two.stderr
    clash = ffbatch_here(
        "render", inputs["a"], inputs["a"], "-s", source, "--output-dir", work, "--output-pattern", "x.mp4",
    )  # fmt: skip
    assert clash.returncode == 2 and "both be written" in clash.stderr
    assert not (work / "x.mp4").exists()


# -- plan --------------------------------------------------------------------------------------------


def plan(*args) -> str:
    return ffbatch("plan", *args, "--ffbatch", PYTHON_FFBATCH).stdout


def test_plan_json_describes_every_chunk(work, inputs, source):
    out_dir = work / "planned json"
    text = plan(inputs["a"], inputs["c"], "-s", source, "--crf", "20", "--chunk-frames", "5",
                "--output-dir", out_dir, "--format", "json")  # fmt: skip
    data = json.loads(text)
    assert data["tasks"] == {"chunks": 5, "joins": 2}
    a, c = data["jobs"]
    assert a["frame_count"] == 12 and [ch["frames"] for ch in a["chunks"]] == [[0, 5], [5, 10], [10, 12]]
    assert c["frame_count"] == 10 and [ch["task"] for ch in c["chunks"]] == [3, 4]
    assert c["join"]["task"] == 6 and c["output"] == str(out_dir / "c one-swapped.mp4")
    chunk = a["chunks"][1]["argv"]
    assert chunk[:2] == [sys.executable, "-m"] and "render" in chunk
    assert chunk[chunk.index("--frames") + 1] == "5:10" and chunk[chunk.index("--crf") + 1] == "20"
    assert chunk[chunk.index("--source") + 1] == str(source)
    assert shlex.split(a["chunks"][1]["command"]) == chunk
    assert a["join"]["argv"][a["join"]["argv"].index("--audio-from") + 1] == str(inputs["a"])


@pytest.mark.slow
def test_plan_shell_lines_run_and_make_the_video(work, inputs, source):
    out = work / "planned out.mp4"
    text = plan(
        inputs["a"], "-s", source, "--chunk-frames", "7", "-o", out, "--format", "shell", "--crf", "0"
    )
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 3 and " concat " in lines[-1]
    for line in reversed(lines[:-1]):  # any order
        subprocess.run(shlex.split(line), check=True, capture_output=True)
    subprocess.run(shlex.split(lines[-1]), check=True, capture_output=True)
    single = work / "single.mp4"
    ffbatch("render", inputs["a"], "-s", source, "-o", single, "--crf", "0", "-q")
    got, ref = decode_all(out)[0], decode_all(single)[0]
    assert [p for p, _ in got] == [p for p, _ in ref] and len(got) == 12
    assert all(np.array_equal(x, y) for (_, x), (_, y) in zip(got, ref, strict=True))
    assert audio_packets(out) == audio_packets(inputs["a"])
    assert not (work / ".planned out.mp4.ffbatch").exists()  # concat --clean removed the segments


def test_plan_slurm_and_opencue_dispatch_each_task(work, inputs, source):
    args = (inputs["a"], inputs["c"], "-s", source, "--chunk-frames", "5", "--output-dir", work / "o")
    tasks = [
        *(ch["argv"] for job in json.loads(plan(*args, "--format", "json"))["jobs"] for ch in job["chunks"]),
        *(job["join"]["argv"] for job in json.loads(plan(*args, "--format", "json"))["jobs"]),
    ]
    echo = f"{shlex.quote(sys.executable)} -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"
    slurm = work / "plan.sbatch"
    slurm.write_text(
        ffbatch("plan", *args, "--format", "slurm", "--ffbatch", echo, "--sbatch=--gres=gpu:1").stdout
    )
    text = slurm.read_text()
    assert "#SBATCH --array=0-4" in text and "#SBATCH --gres=gpu:1" in text and "--array=5-6" in text
    cue = work / "plan_cue.py"
    cue.write_text(ffbatch("plan", *args, "--format", "opencue", "--ffbatch", echo).stdout)
    for number, argv in enumerate(tasks):
        env = {**os.environ, "SLURM_ARRAY_TASK_ID": str(number)}
        out = subprocess.run(["bash", str(slurm)], env=env, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == argv[3:]  # what the task ran, word for word
        out = subprocess.run(
            [sys.executable, str(cue), "--task", str(number)], capture_output=True, text=True
        )
        assert json.loads(out.stdout) == argv[3:]
    bad = subprocess.run(
        ["bash", str(slurm)], env={**os.environ, "SLURM_ARRAY_TASK_ID": "7"}, capture_output=True
    )
    assert bad.returncode == 2
    listed = subprocess.run([sys.executable, str(cue), "--list"], capture_output=True, text=True, check=True)
    assert len(listed.stdout.splitlines()) == 7


def test_plan_refuses_what_it_cannot_plan(work, inputs, source):
    for extra, words in (
        (("--frames", "0:5"), "--chunk-frames"),
        (("--crf", "eighteen"), "--crf"),
        (("--crf", "99"), "--crf"),
        (("--format", "pbs"), "--format"),
    ):
        proc = ffbatch_here("plan", inputs["a"], "-s", source, "-o", work / "p.mp4", *extra)
        assert proc.returncode == 2, (extra, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr
    proc = ffbatch_here("plan", inputs["b"], "-s", source, "-o", work / "p.mp4")
    assert proc.returncode == 2 and "b broken.mp4" in proc.stderr
