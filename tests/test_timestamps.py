"""Timestamps as a decoder reads them (an MPEG-TS whose clock wraps, packed B-frames in AVI, an
edit list hiding a lead-in) and frames counted, never estimated (a frame the decoder drops is
exit 2; the truncation warning fires only on files cut short).

Every test renders a clip it makes itself and checks the decoded output against a reference
decode of the input: every frame (by the number drawn into it), its time, every audio packet
and the audio's time against each frame (A/V sync)."""

from __future__ import annotations

import json
import logging
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest
from media import (
    frame_number,
    make_clip,
    make_dropped_frames_avi,
    make_headless_h264,
    make_packed_avi,
    make_spliced_ts,
    make_trimmed_mp4,
    make_wrapped_ts,
)
from test_cli import assert_usage_error, ffbatch, ffbatch_here, leftovers

from facefusion_batch.config import RenderSettings
from facefusion_batch.errors import InputError, Interrupted
from facefusion_batch.farm.jobs import render as render_job
from facefusion_batch.pipeline.run import Renderer
from facefusion_batch.video.decode.reader import FrameReader
from facefusion_batch.video.decode.segments import frame_index
from facefusion_batch.video.decode.stream_end import declared_size
from facefusion_batch.video.decode.timing import ClockMap, ClockScan, display_order, strictly_after


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


def test_a_repeated_or_earlier_pts_goes_one_tick_after_the_frame_before():
    """The one rule the reader and the writer both apply (video/decode/timing.strictly_after)."""
    assert strictly_after(None, 7) == 7  # the first frame keeps its own
    assert strictly_after(6, 7) == 7 and strictly_after(6, 100) == 100  # later: kept
    assert strictly_after(7, 7) == 8  # a repeat: one tick on
    assert strictly_after(9, 3) == 10  # back before the frame before: one tick after it


# -- MPEG-TS whose 33-bit clock wraps mid-clip ------------------------------------------------


@pytest.fixture(scope="module")
def wrapped_ts(tmp_path_factory) -> Path:
    return make_wrapped_ts(tmp_path_factory.mktemp("wrap") / "wrap.ts", frames=30, size=(128, 96))


@pytest.fixture(scope="module")
def late_ts(tmp_path_factory) -> Path:
    """A broadcast clock at 10 h when the clip starts (no wrap)."""
    path = tmp_path_factory.mktemp("late") / "late.ts"
    return make_wrapped_ts(path, frames=30, size=(128, 96), before_wrap_s=2**33 / 90000 - 36000)


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
@pytest.mark.parametrize("clock", ["wrapping", "at 10 h"])
def test_a_wrapping_mpegts_clock_keeps_every_frame_and_the_audio_in_sync(
    tmp_path, wrapped_ts, late_ts, astronaut_path, suffix, clock
):
    clip = wrapped_ts if clock == "wrapping" else late_ts
    video_in, numbers_in = decoded_times(clip)
    audio_in = audio_times(clip)
    assert numbers_in == list(range(30))
    if clock == "wrapping":
        assert min(video_in) < 0 < max(video_in)  # the clock wrapped
    else:
        assert min(video_in) > 35999
    shift = -min(min(video_in), min(audio_in))  # the input's timeline, moved to start at 0
    out = tmp_path / f"out{suffix}"
    proc = ffbatch_here("render", clip, "-s", astronaut_path, "-o", out, "--backend", "cpu")
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


@pytest.mark.slow
def test_a_wrapping_mpegts_renders_the_same_in_chunks(tmp_path, wrapped_ts, astronaut_path):
    whole, chunked = tmp_path / "whole.mp4", tmp_path / "chunked.mp4"
    for out, args in ((whole, ()), (chunked, ("--chunk-frames", "10"))):
        proc = ffbatch("render", wrapped_ts, "-s", astronaut_path, "-o", out, *args, "--backend", "cpu")
        assert proc.returncode == 0, proc.stderr
    assert decoded_times(chunked) == decoded_times(whole)
    assert decoded_times(whole)[1] == list(range(30))
    assert audio_times(chunked) == audio_times(whole)


# -- MPEG-TS recordings spliced together: the clock jumps back and far forward mid-clip --------

SPLICE_PARTS = (10, 10, 10)
FRAME_S = Fraction(1, 25)


@pytest.fixture(scope="module")
def spliced_ts(tmp_path_factory) -> Path:
    """Three recordings cut together: clocks at 10 h, then 1 h (a step back, which FFmpeg's wrap
    guess turns into a step forward of 17.5 h), then 13.9 h (a step back)."""
    path = tmp_path_factory.mktemp("splice") / "spliced.ts"
    return make_spliced_ts(path, frames=SPLICE_PARTS, clocks_s=(36000, 3600, 50000), size=(128, 96))


def parts_of(times: list[Fraction]) -> list[int]:
    """Which recording each input time belongs to: a new part wherever the clock jumps."""
    part, out = 0, []
    for i, t in enumerate(times):
        if i and not 0 < t - times[i - 1] < 1:
            part += 1
        out.append(part)
    return out


def assert_spliced_render(clip: Path, out: Path, tick: Fraction) -> None:
    """Every frame in display order on one continuous timeline, every audio packet, and A/V sync
    within each recording exactly as in the input."""
    video_in, numbers_in = decoded_times(clip)
    audio_in = audio_times(clip)
    video_out, numbers_out = decoded_times(out)
    audio_out = audio_times(out)
    assert numbers_in == numbers_out == list(range(sum(SPLICE_PARTS)))  # every frame, in display order
    steps = [b - a for a, b in zip(video_out, video_out[1:], strict=False)]
    assert all(FRAME_S - tick <= step < 2 * FRAME_S for step in steps), steps  # no jump, no gap of a frame
    assert len(audio_out) == len(audio_in)  # all the audio
    assert all(b > a for a, b in zip(audio_out, audio_out[1:], strict=False))
    video_part = parts_of(video_in)
    assert video_part == [k for k, n in enumerate(SPLICE_PARTS) for _ in range(n)]
    moved = {k: video_out[i] - video_in[i] for i, k in enumerate(video_part)}
    for i, k in enumerate(video_part):  # each recording moved as a whole
        assert abs(video_out[i] - video_in[i] - moved[k]) <= tick
    # each audio packet moved with the recording it belongs to (the one whose frames it is nearest)
    for a_in, a_out in zip(audio_in, audio_out, strict=True):
        k = video_part[min(range(len(video_in)), key=lambda i: abs(video_in[i] - a_in))]
        assert abs(a_out - a_in - moved[k]) <= tick, (a_in, a_out, k)


def _scan(jump_video: int, jump_audio: int, at: int = 15) -> ClockMap:
    """30 frames (3600 ticks) and 56 audio packets (1920 ticks) interleaved; from frame `at` on
    the video's clock is moved by `jump_video` ticks and, from the matching audio packet, the
    audio's by `jump_audio`."""
    scan = ClockScan(0)
    video, audio = SimpleNamespace(index=0, type="video"), SimpleNamespace(index=1, type="audio")
    events = [(i * 3600, video, 3600, jump_video if i >= at else 0) for i in range(30)]
    events += [(j * 1920, audio, 1920, jump_audio if j * 1920 >= at * 3600 else 0) for j in range(56)]
    for pos, (t, stream, duration, jump) in enumerate(sorted(events, key=lambda e: e[0])):
        t += jump
        scan.add(SimpleNamespace(stream=stream, size=99, time_base=Fraction(1, 90000), pts=t, dts=t,
                                 duration=duration, pos=pos * 188))  # fmt: skip
    return scan.result()


def test_only_a_jump_of_the_video_clock_with_the_audio_is_a_discontinuity():
    back = _scan(-90000 * 3600, -90000 * 3600 - 500)  # a splice: both clocks back 1 h
    assert len(back.discontinuities) == 1 and back.discontinuities[0][1] < -3599
    assert back.discontinuities[0][0] == pytest.approx(15 * 0.04, abs=0.03)  # where it sits, moved
    rebase = back.rebaser()
    assert (
        rebase.shift(0, 10**6) == rebase.shift(1, 10**6) != 0 == rebase.shift(0, 0)
    )  # after it: both by one time
    assert not _scan(0, 90000 * 15)  # a gap of 15 s in the audio alone: not moved
    assert not _scan(90000 * 5, 90000 * 5)  # 5 s forward: a gap, not a jump (FFmpeg's 10 s)
    assert _scan(90000 * 11, 90000 * 11)  # 11 s forward: a jump


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_a_clock_that_jumps_mid_clip_keeps_every_frame_and_the_audio_in_sync(
    tmp_path, spliced_ts, astronaut_path, suffix
):
    video_in, _ = decoded_times(spliced_ts)
    assert any(b < a for a, b in zip(video_in, video_in[1:], strict=False))  # the input's clock steps back
    assert any(b - a > 3600 for a, b in zip(video_in, video_in[1:], strict=False))  # ... and far forward
    out, report = tmp_path / f"out{suffix}", tmp_path / "report.json"
    proc = ffbatch_here(
        "render", spliced_ts, "-s", astronaut_path, "-o", out, "--report", report, "--backend", "cpu"
    )
    assert proc.returncode == 0, proc.stderr
    assert "its clock jumps 2 time(s) mid-clip" in proc.stderr
    assert "not increasing" not in proc.stderr and "may be truncated" not in proc.stderr
    assert_spliced_render(spliced_ts, out, Fraction(1, 1000) if suffix == ".mkv" else Fraction(1, 90000))
    summary = json.loads(report.read_text())
    assert summary["clock_discontinuities"] == 2 and summary["frames_out"] == 30


def test_ranges_of_a_clock_that_jumps_seek_by_byte_position_to_the_same_frames(spliced_ts):
    with FrameReader(spliced_ts) as reader:
        whole = [(f.pts, frame_number(f.image)) for f in reader]
    assert [n for _, n in whole] == list(range(30))
    for start, end in ((12, 18), (22, 30), (0, 5)):
        with FrameReader(spliced_ts, frames=(start, end)) as reader:
            assert [(f.pts, frame_number(f.image)) for f in reader] == whole[start:end]
        assert reader.seeked == (start > 0)  # to the keyframe before, by its place in the file


@pytest.mark.slow
def test_a_clock_that_jumps_renders_the_same_on_every_path(tmp_path, spliced_ts, astronaut_path):
    """--frames A:B, --chunk-frames N (interrupted, then resumed) and concat of segments give the
    frames, times and audio of the whole render."""
    render = ("render", spliced_ts, "-s", astronaut_path, "--backend", "cpu")
    whole = tmp_path / "whole.mp4"
    assert ffbatch(*render, "-o", whole).returncode == 0
    times, numbers = decoded_times(whole)
    assert_spliced_render(spliced_ts, whole, Fraction(1, 90000))
    for start, end in ((0, 13), (13, 30)):  # across a splice, one from the start, one to the end
        seg = tmp_path / f"seg{start}.mkv"
        proc = ffbatch(*render, "-o", seg, "--frames", f"{start}:{end}")
        assert proc.returncode == 0, proc.stderr
        seg_times, seg_numbers = decoded_times(seg)
        assert seg_numbers == numbers[start:end]
        assert close(seg_times, times[start:end], Fraction(1, 1000))
    joined = tmp_path / "joined.mp4"
    proc = ffbatch(
        "concat", tmp_path / "seg0.mkv", tmp_path / "seg13.mkv", "-o", joined, "--audio-from", spliced_ts
    )
    assert proc.returncode == 0, proc.stderr
    assert decoded_times(joined)[1] == numbers
    assert close(decoded_times(joined)[0], times, Fraction(1, 1000))
    assert close(audio_times(joined), audio_times(whole), Fraction(1, 1000))
    # chunks, interrupted after the second, then resumed (in this process: an exact stop)
    settings = RenderSettings(
        input=spliced_ts,
        output=tmp_path / "chunked.mp4",
        sources=(astronaut_path,),
        chunk_frames=8,
        quiet=True,
    )
    renderer = Renderer.load(settings)
    seen = []

    def stop_after_two_chunks(n: int) -> None:
        seen.append(n)
        if sum(seen) >= 16:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted, match="resume"):
        render_job(settings, renderer=renderer, on_progress=stop_after_two_chunks)
    resumed = render_job(settings, renderer=renderer)
    assert 1 <= resumed.segments["reused"] < resumed.segments["total"] == 4
    assert resumed.clock_discontinuities == 2
    assert decoded_times(settings.output) == (times, numbers)
    assert audio_times(settings.output) == audio_times(whole)


# -- AVI with packed B-frames (DivX/Xvid), timestamps by chunk only ----------------------------


@pytest.fixture(scope="module")
def packed_avi(tmp_path_factory) -> Path:
    return make_packed_avi(tmp_path_factory.mktemp("avi") / "divx.avi", frames=80)


@pytest.fixture(scope="module")
def packed_render(tmp_path_factory, packed_avi, astronaut_path) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("avi-out") / "whole.mp4"
    proc = ffbatch_here("render", packed_avi, "-s", astronaut_path, "-o", out, "--backend", "cpu")
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


@pytest.mark.slow
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


# -- Xvid AVI whose encoder dropped frames (N-VOPs: packets that give no picture) --------------


def test_frames_an_xvid_encoder_dropped_are_no_damage_on_any_path(tmp_path, astronaut_path):
    """22 chunks, 20 pictures: the two N-VOPs give none (a decoder shows the frame before them
    longer). The frame index counts pictures, not packets, so no path calls the file damaged and
    every path gives the reference decode's frames at their times."""
    avi = make_dropped_frames_avi(tmp_path / "xvid.avi", frames=20, dropped_after=(5, 11))
    with av.open(str(avi)) as container:
        assert sum(1 for p in container.demux(video=0) if p.size) == 22
    times, numbers = decoded_times(avi)  # the reference decode
    assert numbers == list(range(20)) and len(times) == 20
    assert times[6] - times[5] == times[12] - times[11] == Fraction(2, 25)  # each gap: one dropped frame
    assert frame_index(avi).count == 20
    whole, part, chunked = tmp_path / "whole.mp4", tmp_path / "part.mkv", tmp_path / "chunked.mp4"
    runs = [("-o", whole), ("-o", part, "--frames", "4:14"), ("-o", chunked, "--chunk-frames", "8")]
    for args in runs:
        proc = ffbatch_here("render", avi, "-s", astronaut_path, *args, "--backend", "cpu")
        assert proc.returncode == 0, proc.stderr
        assert "dropped" not in proc.stderr and "damaged" not in proc.stderr
    assert decoded_times(whole) == decoded_times(chunked) == (times, numbers)
    part_times, part_numbers = decoded_times(part)
    assert part_numbers == numbers[4:14] and close(part_times, times[4:14], Fraction(1, 1000))
    assert len(audio_times(whole)) == len(audio_times(avi))
    with FrameReader(avi, on_decode_error="skip") as reader:  # nothing to fill in either
        assert [frame_number(f.image) for f in reader] == numbers
    assert reader.frames_replaced == 0
    # an N-VOP as the last chunk: the decoder hands over the picture it repeats when flushed
    last = make_dropped_frames_avi(tmp_path / "last.avi", frames=20, dropped_after=(19,))
    last_times, last_numbers = decoded_times(last)
    assert last_numbers == [*range(20), 19]  # the reference decode
    with FrameReader(last) as reader:  # every frame, and no early end (nor damage)
        assert [(frame_number(f.image), f.pts * f.time_base) for f in reader] == list(
            zip(last_numbers, last_times, strict=True)
        )
    assert frame_index(last).count == 21


# -- an edit list hiding the first frames (and the audio under them) ---------------------------


@pytest.mark.slow
def test_an_edit_list_is_honoured_like_a_decoder_reads_it_on_every_path(tmp_path, astronaut_path):
    trimmed = make_trimmed_mp4(tmp_path / "trimmed.mp4", frames=40, lead=5)
    times, numbers = decoded_times(trimmed)
    assert numbers == list(range(5, 40)) and times[0] == 0  # the reference decode: 35 frames
    whole, part, chunked = tmp_path / "whole.mp4", tmp_path / "part.mkv", tmp_path / "chunked.mp4"
    runs = [
        ("-o", whole),
        ("-o", part, "--frames", "30:35"),
        ("-o", chunked, "--chunk-frames", "10"),
    ]
    for args in runs:
        proc = ffbatch("render", trimmed, "-s", astronaut_path, *args, "--backend", "cpu")
        assert proc.returncode == 0, proc.stderr
        assert "may be truncated" not in proc.stderr
    assert decoded_times(whole) == (times, numbers)
    assert decoded_times(chunked) == (times, numbers)
    part_times, part_numbers = decoded_times(part)
    assert part_numbers == numbers[30:35]
    assert close(part_times, times[30:35], Fraction(1, 1000))
    assert audio_times(chunked) == audio_times(whole) == audio_times(trimmed)  # the audio as it was


# -- count, never estimate ---------------------------------------------------------------------


def test_frames_the_decoder_drops_are_exit_2_unless_skipped(tmp_path, astronaut_path):
    headless = make_headless_h264(tmp_path / "headless.mkv", frames=25, gop=6)
    with av.open(str(headless)) as container:  # the reference decode drops 5 of 25 frames silently
        assert sum(1 for _ in container.decode(video=0)) == 20
    for args in [(), ("--frames", "0:10")]:
        out = tmp_path / ("part.mkv" if args else "out.mp4")
        proc = ffbatch_here("render", headless, "-s", astronaut_path, "-o", out, *args, "--backend", "cpu")
        assert_usage_error(proc, str(headless), "dropped")
        assert not out.exists() and leftovers(tmp_path) == []
    out = tmp_path / "skipped.mp4"
    proc = ffbatch_here(
        "render", headless, "-s", astronaut_path, "-o", out, "--on-decode-error", "skip", "--backend", "cpu"
    )
    assert proc.returncode == 0, proc.stderr
    assert "5 frame(s) could not be decoded" in proc.stderr
    times, numbers = decoded_times(out)
    assert len(times) == 25 and numbers[5:] == list(range(6, 26))  # every frame, the first 5 replaced


def test_a_demuxer_that_gives_up_inside_a_file_is_exit_2(tmp_path):
    data = bytearray(make_clip(tmp_path / "good.mkv", frames=20, size=(128, 96)).read_bytes())
    at = int(len(data) * 0.45)
    data[at : at + 1000] = np.random.default_rng(1).bytes(1000)  # the demuxer stops there
    damaged = tmp_path / "damaged.mkv"
    damaged.write_bytes(bytes(data))
    with av.open(str(damaged)) as container:
        assert 5 < sum(1 for _ in container.decode(video=0)) < 20
    with pytest.raises(InputError, match="is damaged: its video stops at"):
        with FrameReader(damaged) as reader:
            list(reader)


def _last_video_packet(path: Path) -> tuple[int, int]:
    with av.open(str(path)) as container:
        return [(p.pos, p.size) for p in container.demux(video=0) if p.size][-1]


def test_damage_near_the_end_is_exit_2_and_only_a_file_whose_bytes_end_is_a_cut(
    tmp_path, astronaut_path, caplog
):
    """The rule is exact, not "within the last 2 % of the file": a video that stops before the end
    its container declares, in a file holding every byte the container declares, is damaged."""
    good = make_clip(tmp_path / "good.mkv", frames=20, size=(128, 96))
    data = good.read_bytes()
    pos, size = _last_video_packet(good)
    assert len(data) - (pos + size) < len(data) // 50  # the last frame sits in the last 2 % of the file
    damaged, cut = tmp_path / "damaged.mkv", tmp_path / "cut.mkv"
    damaged.write_bytes(data[: pos - 40] + np.random.default_rng(3).bytes(size + 40) + data[pos + size :])
    cut.write_bytes(data[: pos + size // 2])  # the bytes end inside the last frame
    for path in (damaged, cut):
        with av.open(str(path)) as container:  # the reference decode: the last frame is gone
            assert sum(1 for _ in container.decode(video=0)) == 19
    assert declared_size(damaged) == len(data) == declared_size(good) and declared_size(cut) > len(data) // 2
    with pytest.raises(
        InputError, match="is damaged: its video stops at 0.760 s .* bytes the container declares"
    ):
        with FrameReader(damaged) as reader:
            list(reader)
    out = tmp_path / "out.mp4"
    for args in [(), ("--chunk-frames", "8"), ("--frames", "0:8")]:  # every path: exit 2, nothing written
        proc = ffbatch_here("render", damaged, "-s", astronaut_path, "-o", out, *args, "--backend", "cpu")
        assert_usage_error(proc, str(damaged), "is damaged")
        assert not out.exists() and leftovers(tmp_path) == []
    caplog.set_level(logging.WARNING, logger="ffbatch")
    with FrameReader(cut) as reader:  # cut short: the complete frames, and a warning
        assert [frame_number(f.image) for f in reader] == list(range(19))
    assert any("may be truncated" in r.getMessage() for r in caplog.records)
    proc = ffbatch_here("render", cut, "-s", astronaut_path, "-o", out, "--backend", "cpu")
    assert proc.returncode == 0 and "may be truncated" in proc.stderr, proc.stderr
    assert decoded_times(out)[1] == list(range(19))


def test_declared_size_reads_the_containers_own_size_fields(tmp_path):
    clips = [
        make_clip(tmp_path / f"c{suffix}", frames=5, size=(64, 64)) for suffix in (".mkv", ".mp4", ".mov")
    ]
    clips.append(make_packed_avi(tmp_path / "c.avi", frames=10))
    for clip in clips:
        data = clip.read_bytes()
        assert declared_size(clip) == len(data), clip
        cut = tmp_path / f"cut{clip.suffix}"
        cut.write_bytes(data[: len(data) * 8 // 10])
        assert declared_size(cut) > len(data) * 8 // 10, clip
    assert declared_size(make_wrapped_ts(tmp_path / "c.ts", frames=5, size=(64, 64))) is None  # declares none


def _complete_files(directory: Path) -> dict[str, Path]:
    return {
        "mpegts": make_wrapped_ts(directory / "plain.ts", before_wrap_s=-1.4, size=(128, 96)),  # from 1.4 s
        "mpegts wrapping": make_wrapped_ts(directory / "wrap.ts", size=(128, 96)),
        "edit-list mp4": make_trimmed_mp4(directory / "trimmed.mp4"),
        "vfr mkv": make_clip(directory / "vfr.mkv", frames=30, size=(128, 96), vfr=True),
        "packed avi": make_packed_avi(directory / "divx.avi", frames=30),
        "mp4": make_clip(directory / "plain.mp4", frames=20, size=(128, 96)),
    }


def test_complete_files_give_every_frame_and_no_truncation_warning(tmp_path, caplog):
    """... and `--on-decode-error skip` finds nothing to replace in them (packed B-frames too)."""
    caplog.set_level(logging.WARNING, logger="ffbatch")
    for kind, path in _complete_files(tmp_path).items():
        caplog.clear()
        with av.open(str(path)) as container:
            reference = sum(1 for _ in container.decode(video=0))
        with FrameReader(path) as reader:
            frames = list(reader)
        assert len(frames) == reference == reader.frames_promised, kind
        warnings = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
        assert warnings == [], (kind, warnings)
        with FrameReader(path, on_decode_error="skip") as skipping:  # nothing to replace either
            assert [f.pts for f in skipping] == [f.pts for f in frames], kind
        assert skipping.frames_replaced == 0, kind
