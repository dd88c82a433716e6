"""Chunked renders resume: SIGINT, SIGTERM-free SIGKILL, changed settings, --force, the lock.

Every comparison is with an uninterrupted render of the same clip, lossless
(`--crf 0`), so frames must be identical pixel for pixel.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest
from media import audio_packets, decode_all, make_clip

from facefusion_batch.config import RenderSettings
from facefusion_batch.errors import InputError, Interrupted
from facefusion_batch.farm.jobs import render
from facefusion_batch.farm.manifest import MANIFEST, Manifest, job_lock, work_dir_for
from facefusion_batch.models.assets import asset_path
from facefusion_batch.pipeline.run import Renderer

FRAMES = 48
CHUNK = 6


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("farm resume")


@pytest.fixture(scope="module")
def clip(work) -> Path:
    photo = cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), (640, 443), interpolation=cv2.INTER_AREA)
    return make_clip(work / "in.mp4", image=photo, size=(320, 240), frames=FRAMES)


@pytest.fixture(scope="module")
def settings(clip, source, work) -> RenderSettings:
    from facefusion_batch.video.encode.encoder_policy import EncoderSettings

    return RenderSettings(
        input=clip, output=work / "x.mp4", sources=(source,), encoder=EncoderSettings(crf=0), quiet=True
    )


@pytest.fixture(scope="module")
def renderer(settings) -> Renderer:
    return Renderer.load(settings)


@pytest.fixture(scope="module")
def reference(work, settings, renderer) -> list:
    out = work / "reference.mp4"
    render(replace(settings, output=out, chunk_frames=0), renderer=renderer)
    return decode_all(out)[0]


def assert_same_video(path: Path, reference: list, clip: Path) -> None:
    frames, _ = decode_all(path)
    assert len(frames) == len(reference) == FRAMES
    assert [p for p, _ in frames] == [p for p, _ in reference]
    for (_, a), (_, b) in zip(frames, reference, strict=True):
        assert np.array_equal(a, b)
    assert audio_packets(path) == audio_packets(clip)


def command(clip: Path, source: Path, out: Path, report: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "facefusion_batch",
        "render",
        str(clip),
        "-s",
        str(source),
        "-o",
        str(out),
        "--chunk-frames",
        str(CHUNK),
        "--crf",
        "0",
        "--workers",
        "1",
        "--batch-size",
        "4",
        "--report",
        str(report),
    ]


def recorded(work_dir: Path) -> dict:
    manifest = Manifest.read(work_dir)
    return dict(manifest.segments) if manifest else {}


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_an_interrupted_render_resumes_with_only_the_missing_segments(
    tmp_path, clip, source, reference, signum
):
    out = tmp_path / "out put.mp4"
    report = tmp_path / "report.json"
    work_dir = work_dir_for(out)
    argv = command(clip, source, out, report)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a hang guard
        while len(recorded(work_dir)) < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the render finished before the signal"
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if signum == signal.SIGINT:
        assert proc.returncode == 130, stderr
        assert "run the same command again to resume" in stderr and "Traceback" not in stderr
        assert not list(work_dir.glob(".*partial*")), "Ctrl-C leaves no partial segment"
    else:
        assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    kept = recorded(work_dir)
    total = FRAMES // CHUNK
    assert 1 <= len(kept) < total
    kept_frames = sum(entry["frames"] for entry in kept.values())

    again = subprocess.run(argv, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert f"resuming: {len(kept)} of {total} segments are done" in again.stderr
    summary = json.loads(report.read_text())
    assert summary["segments"] == {"total": total, "reused": len(kept), "rendered": total - len(kept)}
    assert summary["frames_out"] == FRAMES - kept_frames  # only the missing frames were rendered
    assert_same_video(out, reference, clip)
    assert not work_dir.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out put.mp4", "report.json"]


def interrupt_after(frames: int):
    """An on_progress that stops the render (as Ctrl-C does) once `frames` frames are done."""
    seen = 0

    def on_progress(n: int) -> None:
        nonlocal seen
        seen += n
        if seen >= frames:
            raise KeyboardInterrupt

    return on_progress


@pytest.mark.slow
def test_changed_settings_start_over_and_force_too(tmp_path, settings, renderer, reference, clip):
    job = replace(settings, output=tmp_path / "o.mp4", chunk_frames=CHUNK)
    with pytest.raises(Interrupted, match="resume"):
        render(job, renderer=renderer, on_progress=interrupt_after(2 * CHUNK + 1))
    work_dir = work_dir_for(job.output)
    assert len(recorded(work_dir)) >= 2

    saved = Manifest.read(work_dir)

    # another CRF: the saved segments are not this job's
    lossy = replace(job, encoder=replace(job.encoder, crf=30))
    with pytest.raises(Interrupted):
        render(lossy, renderer=renderer, on_progress=interrupt_after(1))
    now = Manifest.read(work_dir)
    assert now.settings_digest != saved.settings_digest
    assert len(now.segments) <= 1  # the old ones were thrown away; at most one new one finished
    assert {e["sha256"] for e in now.segments.values()}.isdisjoint(
        e["sha256"] for e in saved.segments.values()
    )

    first = replace(job)
    with pytest.raises(Interrupted):
        render(first, renderer=renderer, on_progress=interrupt_after(CHUNK + 1))
    assert len(recorded(work_dir)) >= 1
    forced = render(replace(job, force=True), renderer=renderer)
    assert forced.segments == {"total": FRAMES // CHUNK, "reused": 0, "rendered": FRAMES // CHUNK}
    assert forced.frames_out == FRAMES
    assert_same_video(job.output, reference, clip)


@pytest.mark.slow
def test_a_changed_segment_is_rendered_again(tmp_path, settings, renderer, reference, clip):
    job = replace(settings, output=tmp_path / "o.mp4", chunk_frames=CHUNK)
    with pytest.raises(Interrupted):
        render(job, renderer=renderer, on_progress=interrupt_after(2 * CHUNK + 1))
    work_dir = work_dir_for(job.output)
    kept = recorded(work_dir)
    damaged = work_dir / sorted(kept.values(), key=lambda e: e["file"])[0]["file"]
    damaged.write_bytes(damaged.read_bytes()[:-100])
    result = render(job, renderer=renderer)
    assert result.segments["reused"] == len(kept) - 1
    assert_same_video(job.output, reference, clip)


def test_a_second_process_on_the_same_output_is_refused(tmp_path, settings):
    out = tmp_path / "o.mp4"
    with job_lock(work_dir_for(out), out):
        proc = subprocess.run(
            [*command(settings.input, settings.sources[0], out, tmp_path / "r.json")],
            capture_output=True,
            text=True,
        )
    assert proc.returncode == 2, proc.stderr
    assert "another ffbatch process is rendering" in proc.stderr
    assert not out.exists()


def test_the_manifest_records_every_segment_with_its_sha256(tmp_path, settings, renderer):
    job = replace(settings, output=tmp_path / "o.mp4", chunk_frames=20)
    with pytest.raises(Interrupted):
        render(job, renderer=renderer, on_progress=interrupt_after(21))
    data = json.loads((work_dir_for(job.output) / MANIFEST).read_text())
    assert data["frame_count"] == FRAMES and data["chunk_frames"] == 20
    assert data["input"] == str(Path(settings.input).resolve())
    entry = data["segments"]["0:20"]
    segment = work_dir_for(job.output) / entry["file"]
    import hashlib

    assert hashlib.sha256(segment.read_bytes()).hexdigest() == entry["sha256"]
    assert entry["frames"] == 20 and entry["bytes"] == segment.stat().st_size


def test_chunk_options_are_checked(tmp_path, settings, renderer):
    with pytest.raises(InputError, match="--chunk-frames"):
        render(replace(settings, output=tmp_path / "o.mp4", chunk_frames=-1), renderer=renderer)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_chunked_render_adopts_the_segments_a_farm_left(tmp_path, settings, renderer, reference, clip):
    from facefusion_batch.farm.manifest import segment_name

    out = tmp_path / "o.mp4"
    work_dir = work_dir_for(out)
    for start, end in ((0, 20), (40, 48)):  # two of the three chunks, as `plan` would place them
        render(
            replace(settings, output=work_dir / segment_name(start, end), frames=(start, end)),
            renderer=renderer,
        )
    result = render(replace(settings, output=out, chunk_frames=20), renderer=renderer)
    assert result.segments == {"total": 3, "reused": 2, "rendered": 1}
    assert result.frames_out == 20
    assert_same_video(out, reference, clip)
    assert not work_dir.exists()
