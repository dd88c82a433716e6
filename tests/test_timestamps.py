"""Timestamps as a decoder reads them: an MPEG-TS whose clock wraps, packed B-frames in AVI.

Every test renders a clip it makes itself and checks the decoded output against a reference
decode of the input: every frame (by the number drawn into it), its time, every audio packet
and the audio's time against each frame (A/V sync)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import pytest
from media import frame_number, make_packed_avi, make_wrapped_ts
from test_cli import ffbatch

from facefusion_batch.video.timing import display_order


def decoded_times(path: Path) -> tuple[list[Fraction | None], list[int]]:
    """Each decoded frame's time in seconds (None without a pts) and the number drawn into it."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        tb = Fraction(stream.time_base)
        frames = list(container.decode(stream))
    times = [None if f.pts is None else f.pts * tb for f in frames]
    return times, [frame_number(f.to_ndarray(format="bgr24")) for f in frames]


def audio_times(path: Path) -> list[Fraction]:
    """The time in seconds of every audio packet, in file order."""
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        tb = Fraction(stream.time_base)
        return [p.pts * tb for p in container.demux(stream) if p.size]


def close(a: list[Fraction], b: list[Fraction], tolerance: Fraction) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tolerance for x, y in zip(a, b, strict=True))


def test_display_times_put_the_streams_pts_in_increasing_order():
    assert display_order([2, 4, 3, 6, 5, 8, 7, 9]) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert display_order([0, 1, 2, 3]) == [0, 1, 2, 3]  # in order already: nothing changes
    assert display_order([5, None, 6]) == [5, None, 6]


# -- MPEG-TS whose 33-bit clock wraps mid-clip ------------------------------------------------


@pytest.fixture(scope="module")
def wrapped_ts(tmp_path_factory) -> Path:
    return make_wrapped_ts(tmp_path_factory.mktemp("wrap") / "wrap.ts", frames=30, size=(128, 96))


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_a_wrapping_mpegts_clock_keeps_every_frame_and_the_audio_in_sync(
    tmp_path, wrapped_ts, astronaut_path, suffix
):
    video_in, numbers_in = decoded_times(wrapped_ts)
    audio_in = audio_times(wrapped_ts)
    assert numbers_in == list(range(30)) and min(video_in) < 0 < max(video_in)  # the clock wrapped
    shift = -min(min(video_in), min(audio_in))  # the input's timeline, moved to start at 0
    out = tmp_path / f"out{suffix}"
    proc = ffbatch("render", wrapped_ts, "-s", astronaut_path, "-o", out, "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert "may be truncated" not in proc.stderr and "not increasing" not in proc.stderr
    video_out, numbers_out = decoded_times(out)
    audio_out = audio_times(out)
    assert numbers_out == list(range(30))  # every frame, none hidden behind an edit list
    assert None not in video_out and min(video_out) >= 0
    tick = Fraction(1, 1000) if suffix == ".mkv" else Fraction(1, 90000)  # Matroska counts in ms
    assert close(video_out, [t + shift for t in video_in], tick)
    assert len(audio_out) == len(audio_in)  # all the audio
    assert close(audio_out, [t + shift for t in audio_in], tick)
    assert min(audio_out) == 0
    # A/V sync: every frame sits where it sat against the start of the audio
    assert close([t - audio_out[0] for t in video_out], [t - audio_in[0] for t in video_in], tick)


# -- AVI with packed B-frames (DivX/Xvid), timestamps by chunk only ----------------------------


@pytest.fixture(scope="module")
def packed_avi(tmp_path_factory) -> Path:
    return make_packed_avi(tmp_path_factory.mktemp("avi") / "divx.avi", frames=80)


@pytest.fixture(scope="module")
def packed_render(tmp_path_factory, packed_avi, astronaut_path) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("avi-out") / "whole.mp4"
    proc = ffbatch("render", packed_avi, "-s", astronaut_path, "-o", out, "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    return out, proc.stderr


def test_packed_b_frames_in_avi_come_out_at_the_exact_rate_in_display_order(packed_avi, packed_render):
    with av.open(str(packed_avi)) as container:  # the demuxer's guesses are out of order
        raw = [f.pts for f in container.decode(container.streams.video[0])]
    assert raw[:5] == [2, 4, 3, 6, 5]
    out, stderr = packed_render
    assert "not increasing" not in stderr
    times, numbers = decoded_times(out)
    assert numbers == list(range(80))  # the decoder's display order
    step = Fraction(1001, 24000)
    first = min(raw) * step  # where the input's first frame is shown
    assert times == [first + k * step for k in range(80)]  # exact rate, strictly increasing
    # against the copied audio, no frame is late: frame k is shown k frames after the first
    audio_in, audio_out = audio_times(packed_avi), audio_times(out)
    assert len(audio_out) == len(audio_in) and audio_out[0] == audio_in[0] == 0
    assert all(t - audio_out[0] == first + k * step for k, t in enumerate(times))


def test_frame_ranges_and_chunks_of_a_packed_avi_agree_with_the_whole_render(
    tmp_path, packed_avi, packed_render, astronaut_path
):
    whole, _ = packed_render
    times, numbers = decoded_times(whole)
    seg = tmp_path / "seg.mkv"
    proc = ffbatch(
        "render", packed_avi, "-s", astronaut_path, "-o", seg, "--frames", "40:60", "--backend", "cpu"
    )
    assert proc.returncode == 0, proc.stderr
    seg_times, seg_numbers = decoded_times(seg)
    assert seg_numbers == list(range(40, 60))
    assert close(seg_times, times[40:60], Fraction(1, 1000))
    chunked = tmp_path / "chunked.mp4"
    proc = ffbatch(
        "render", packed_avi, "-s", astronaut_path, "-o", chunked, "--chunk-frames", "20", "--backend", "cpu"
    )
    assert proc.returncode == 0, proc.stderr
    assert decoded_times(chunked) == (times, numbers)
    assert audio_times(chunked) == audio_times(whole)
