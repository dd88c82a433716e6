"""A facility's plates and a farm's rules: a 10-bit DPX plate comes back 10-bit, a 16-bit still
stays 16-bit (or is refused loudly), --fail-on-truncated renders no short shot, a failed or
interrupted job's report says how far it got, several inputs whose container cannot hold the
encoder fail before the first render, and a join with another file's audio is said.

Outputs are decoded: pixel formats, bit depths, pixels against the input, exit codes, reports.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from media import encode_image, make_clip
from test_cli import ffbatch_here

from facefusion_batch.config import RenderSettings
from facefusion_batch.models.assets import asset_path

SIZE = (320, 224)


def ffbatch(*args) -> subprocess.CompletedProcess:
    """The command in this process (`cli.main`, tests/test_cli.py `ffbatch_here`): no case here
    is about the process itself."""
    return ffbatch_here(*args)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("plates")


@pytest.fixture(scope="module")
def faces() -> np.ndarray:
    return cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), SIZE, interpolation=cv2.INTER_AREA)


def write_dpx10(path: Path, bgr: np.ndarray) -> None:
    """A 10-bit DPX frame as FFmpeg's DPX encoder writes it (gbrp10le), every low bit set to 01."""
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.uint16) * 4 + 1
    frame = av.VideoFrame.from_ndarray(rgb * 64, format="rgb48le").reformat(format="gbrp10le")
    path.write_bytes(encode_image(frame, "dpx"))


def decode_one(path: Path) -> av.VideoFrame:
    with av.open(str(path)) as container:
        return next(container.decode(video=0))


def test_a_10_bit_dpx_plate_comes_back_10_bit(work, source, faces):
    plate = work / "dpx"
    plate.mkdir()
    for i in range(3):
        write_dpx10(plate / f"plate.{1001 + i:04d}.dpx", np.roll(faces, 2 * i, axis=1))
    proc = ffbatch("render", plate / "plate.####.dpx", "-s", source, "-o", plate / "out.####.dpx", "-q")
    assert proc.returncode == 0, proc.stderr
    for n in (1001, 1002, 1003):
        got, want = decode_one(plate / f"out.{n}.dpx"), decode_one(plate / f"plate.{n}.dpx")
        assert got.format.name == "gbrp10le"  # was rgb48le: a 16-bit file for a 10-bit plate
        a, b = want.to_ndarray(format="rgb48le"), got.to_ndarray(format="rgb48le")
        same = (a == b).all(axis=2)
        assert 0.8 < same.mean() < 1.0  # the faces changed, the rest of the plate kept every bit
        assert ((b[same] >> 6) & 3 == 1).all()  # the plate's own low bits, not 8-bit values scaled


def test_a_16_bit_still_stays_16_bit_or_is_refused(work, source, faces):
    still = work / "deep.png"
    deep = faces.astype(np.uint16) * 257 + 3  # 16-bit values no 8-bit picture holds
    cv2.imwrite(str(still), deep)
    out = work / "deep out.png"
    proc = ffbatch("render", still, "-s", source, "-o", out, "-q")
    assert proc.returncode == 0, proc.stderr
    got = cv2.imread(str(out), cv2.IMREAD_UNCHANGED)
    assert got.dtype == np.uint16 and got.shape == deep.shape
    same = (got == deep).all(axis=2)
    assert 0.8 < same.mean() < 1.0  # swapped faces; every other pixel keeps its 16 bits
    jpg = work / "deep out.jpg"
    refused = ffbatch("render", still, "-s", source, "-o", jpg, "-q")
    assert refused.returncode == 2 and "16-bit" in refused.stderr and "--allow-reduce" in refused.stderr
    assert not jpg.exists()
    reduced = ffbatch("render", still, "-s", source, "-o", jpg, "--allow-reduce")
    assert reduced.returncode == 0 and "at 8 bits" in reduced.stderr
    assert cv2.imread(str(jpg)).dtype == np.uint8


def test_fail_on_truncated_renders_no_short_shot(work, source):
    clip = make_clip(work / "whole.mkv", frames=24, size=(128, 96), audio=None)
    data = clip.read_bytes()
    cut = work / "cut.mkv"
    cut.write_bytes(data[: int(len(data) * 0.7)])  # delivered short: the last frames are gone
    out = work / "cut out.mp4"
    proc = ffbatch(
        "render", cut, "-s", source, "-o", out, "--fail-on-truncated", "--report", work / "cut.json"
    )
    assert proc.returncode == 2 and "--fail-on-truncated" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    assert json.loads((work / "cut.json").read_text())["status"] == "failed"
    plain = ffbatch("render", cut, "-s", source, "-o", out, "-q")  # without it: a warning, status ok
    assert plain.returncode == 0 and "may be truncated" in plain.stderr
    with av.open(str(out)) as container:
        assert 0 < sum(1 for _ in container.decode(video=0)) < 24
    whole = ffbatch("render", clip, "-s", source, "-o", work / "whole out.mp4", "--fail-on-truncated", "-q")
    assert whole.returncode == 0, whole.stderr


def test_an_interrupted_jobs_report_says_how_far_it_got(work, source):
    from facefusion_batch.farm.jobs import render

    clip = make_clip(work / "long.mp4", frames=48, size=(128, 96), audio=None)
    report = work / "interrupted.json"
    settings = RenderSettings(input=clip, output=work / "never.mp4", sources=(source,), report=report)
    seen: list[int] = []

    def stop_after_first_batch(n: int) -> None:
        seen.append(n)
        raise KeyboardInterrupt

    with pytest.raises(Exception):  # noqa: B017 - interrupted, as a Ctrl-C mid-render is
        render(settings, on_progress=stop_after_first_batch)
    data = json.loads(report.read_text())
    assert data["status"] == "interrupted"
    assert isinstance(data["frames_in"], int) and isinstance(data["frames_out"], int)
    assert 0 < data["frames_in"] < 48 and data["frames_out"] >= seen[0] > 0
    assert not (work / "never.mp4").exists()


def test_several_inputs_whose_container_cannot_hold_the_encoder_fail_up_front(work, source):
    a = make_clip(work / "a.mp4", frames=4, size=(64, 64), audio=None)
    b = make_clip(work / "b.mp4", frames=4, size=(64, 64), audio=None)
    out = work / "avi"
    out.mkdir()
    proc = ffbatch("render", a, b, "-s", source, "--output-dir", out, "--output-pattern", "{stem}.avi")
    assert proc.returncode == 2 and "cannot hold" in proc.stderr and "Traceback" not in proc.stderr
    assert list(out.iterdir()) == []  # refused before the first input rendered


def test_concat_says_when_the_audio_is_another_files(work, source):
    clip = make_clip(work / "short.mp4", frames=10, size=(128, 96))
    other = make_clip(work / "other.mp4", frames=75, size=(128, 96))
    seg = work / "short seg.mp4"
    assert ffbatch("render", clip, "-s", source, "--frames", "0:10", "-o", seg, "-q").returncode == 0
    same = ffbatch("concat", seg, "-o", work / "same.mp4", "--audio-from", clip)
    assert same.returncode == 0 and "not the input" not in same.stderr
    joined = ffbatch("concat", seg, "-o", work / "other audio.mp4", "--audio-from", other)
    assert joined.returncode == 0
    assert "other.mp4 is not the input the segments were rendered from (short.mp4)" in joined.stderr
    assert "(3.00 s) is muxed as it is under 0.40 s of video" in joined.stderr


def write_exr(path: Path, bgr: np.ndarray) -> None:
    """A float EXR frame as FFmpeg's EXR encoder writes it (gbrpf32le from RGB), values code / 255."""
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32) / 255
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="gbrpf32le")
    path.write_bytes(encode_image(frame, "exr"))


def test_single_dpx_and_exr_frames_render_as_stills(work, source, faces):
    dpx, exr = work / "hero.1001.dpx", work / "hero.exr"
    write_dpx10(dpx, faces)
    write_exr(exr, faces)
    out = work / "hero comp.dpx"
    report = work / "hero.json"
    proc = ffbatch("render", dpx, "-s", source, "-o", out, "--report", report)
    assert proc.returncode == 0, proc.stderr
    got, want = decode_one(out), decode_one(dpx)
    assert got.format.name == "gbrp10le"
    same = (got.to_ndarray(format="rgb48le") == want.to_ndarray(format="rgb48le")).all(axis=2)
    assert 0.8 < same.mean() < 1.0
    data = json.loads(report.read_text())
    assert (data["input"], data["output"], data["frames_out"]) == (str(dpx), str(out), 1)
    assert data["faces_swapped"] > 0
    assert [p.name for p in work.iterdir() if p.name.startswith(".hero")] == []  # its folder removed
    exr_out = work / "hero comp.exr"
    proc = ffbatch("render", exr, "-s", source, "-o", exr_out, "--allow-reduce", "-q")
    assert proc.returncode == 0, proc.stderr
    picture = decode_one(exr_out)
    assert picture.format.name.startswith("gbrpf32") and (picture.width, picture.height) == SIZE
    refused = ffbatch("render", dpx, "-s", source, "-o", work / "hero.mp4")
    assert refused.returncode == 2 and "is one frame" in refused.stderr
