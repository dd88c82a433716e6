"""Issue 38's stream cases: inputs as real files come (cut mid-GOP, repeated timestamps, cover art,
a second video, a pipe for a name), an .avi output's timing, an unreachable Ray address. Each
test checks the output's decoded frames, timestamps, exit status and stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from media import frame_number, make_clip, synthetic_frame
from test_cli import ffbatch_here

SIZE = (128, 96)


ROOT = Path(__file__).resolve().parents[1]


def run(*args, cwd: Path | None = None, stdin=None, timeout: float = 300) -> subprocess.CompletedProcess:
    path = os.environ.get("PYTHONPATH")  # this checkout's package, whatever the working directory
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    return subprocess.run(
        [sys.executable, "-m", "facefusion_batch", *map(str, args)],
        capture_output=stdin is None,
        stdout=None if stdin is None else subprocess.PIPE,
        stderr=None if stdin is None else subprocess.PIPE,
        stdin=stdin,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def times_and_numbers(path: Path) -> tuple[list[Fraction], list[int]]:
    """Each decoded frame's time in seconds and the number `synthetic_frame` drew into it."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        tb = Fraction(stream.time_base)
    return [f.pts * tb for f in frames], [frame_number(f.to_ndarray(format="bgr24")) for f in frames]


def write_tone(out, stream, seconds: float) -> None:
    """A 440 Hz tone in `stream` (AAC or MP2: planar or packed float/s16), `seconds` long."""
    ctx = stream.codec_context
    rate, chunk = ctx.sample_rate, ctx.frame_size or 1024
    fmt = ctx.format
    base = fmt.name.rstrip("p")
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 440.0 * t)
    for start in range(0, len(t), chunk):
        piece = np.stack([tone[start : start + chunk]] * 2) * (32767 if base == "s16" else 1)
        data = (piece if fmt.is_planar else piece.T.reshape(1, -1)).astype(
            np.int16 if base == "s16" else np.float32
        )
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data), format=fmt.name, layout="stereo")
        frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
        out.mux(stream.encode(frame))
    out.mux(stream.encode(None))


# -- .avi outputs keep the input's times -----------------------------------------------------------


def ntsc_clip(path: Path, frames: int = 8) -> Path:
    """An .mp4 at 30000/1001 fps (time base 1/30000, a frame every 1001) with AAC audio."""
    with av.open(str(path), mode="w") as out:
        video = out.add_stream("libx264", rate=Fraction(30000, 1001), options={"preset": "ultrafast"})
        video.width, video.height, video.pix_fmt = *SIZE, "yuv420p"
        video.codec_context.time_base = video.time_base = Fraction(1, 30000)
        audio = out.add_stream("aac", rate=48000, layout="stereo")
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, SIZE), format="bgr24")
            frame.pts, frame.time_base = i * 1001, Fraction(1, 30000)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        write_tone(out, audio, frames * 1001 / 30000)
    return path


@pytest.mark.parametrize("rate", ["25", "30000/1001"])
def test_ffv1_in_avi_keeps_every_frames_time(rate, astronaut_path, tmp_path):
    """FFV1 into .avi: frames 1... came 21.7 ms late (the muxer moved the video after the AAC's
    1024-sample lead-in; .mkv was right); at 30000/1001 the muxer's 1/600 s tick is not exact."""
    if rate == "25":
        clip = make_clip(tmp_path / "in.mp4", frames=6, size=SIZE)
    else:
        clip = ntsc_clip(tmp_path / "in.mp4")
    out = tmp_path / "out.avi"
    proc = ffbatch_here(
        "render", clip, "-s", astronaut_path, "-o", out, "--encoder", "ffv1", "-q", "--backend", "cpu"
    )
    assert proc.returncode == 0, proc.stderr
    want, numbers = times_and_numbers(clip)
    got, got_numbers = times_and_numbers(out)
    assert got == want and got_numbers == numbers  # exact: each frame at its own time
    with av.open(str(out)) as container:
        assert container.streams.audio  # the sound still there


# -- a pipe for a name -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["pipe:0", "-", "fifo"])
@pytest.mark.parametrize("command", ["render", "plan"])
def test_standard_input_or_a_pipe_as_the_input_is_exit_2_never_a_wait(
    name, command, astronaut_path, tmp_path
):
    """With the clip's bytes waiting on stdin (or a FIFO nobody writes to), a read would wait for
    ever: it is exit 2 at once, naming the input (the hang guard is the timeout)."""
    clip = make_clip(tmp_path / "in.mp4", frames=2, size=SIZE, audio=None)
    if name == "fifo":
        os.mkfifo(tmp_path / "fifo")
    read, write = os.pipe()
    os.write(write, clip.read_bytes()[:4096])  # stdin holds data and stays open
    try:
        proc = run(
            command,
            name,
            "-s",
            astronaut_path,
            "-o",
            tmp_path / "out.mp4",
            cwd=tmp_path,
            stdin=read,
            timeout=60,
        )
    finally:
        os.close(read)
        os.close(write)
    assert proc.returncode == 2, proc.stderr
    assert f"{name}: ffbatch reads a file it can seek in, not standard input or a pipe" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out.mp4").exists()


# -- an unreachable Ray address ------------------------------------------------------------------------


def test_an_unreachable_ray_address_is_exit_2_in_seconds(astronaut_path, tmp_path):
    """Ray waited about 190 s on a head that is not there; nothing takes a connection on port 1.
    The child's timeout (120 s) is the hang guard, no assertion on time: the old wait runs into it
    and fails; the refusal comes in about 2 s."""
    clip = make_clip(tmp_path / "in.mp4", frames=2, size=SIZE, audio=None)
    proc = run(
        "render", clip, "-s", astronaut_path, "-o", tmp_path / "out.mp4", "--ray", "127.0.0.1:1", timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert "--ray 127.0.0.1:1: no Ray cluster answers at 127.0.0.1:1" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.mp4").exists()


# -- repeated timestamps, chunked ------------------------------------------------------------------------

REPEATED = [0, 40, 80, 120, 120, 160, 200, 240, 320, 320, 360, 400]  # ms; frames 3-4 and 8-9 share one


def repeated_timestamps_clip(path: Path) -> Path:
    """A Matroska H.264 clip whose frames 4 and 9 repeat the time of the frame before."""
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=25, options={"bf": "0", "preset": "ultrafast", "g": "5"})
        stream.width, stream.height, stream.pix_fmt = *SIZE, "yuv420p"
        stream.codec_context.time_base = Fraction(1, 1000)
        packets = []
        for i in range(len(REPEATED)):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, SIZE), format="bgr24")
            frame.pts, frame.time_base = i * 40, Fraction(1, 1000)
            packets += stream.encode(frame)
        packets += stream.encode(None)
        for packet, ms in zip(packets, REPEATED, strict=True):
            packet.pts = packet.dts = ms
            packet.time_base = Fraction(1, 1000)
            out.mux(packet)
    return path


@pytest.mark.slow
def test_repeated_timestamps_render_the_same_in_chunks(astronaut_path, tmp_path):
    """Chunks starting on a repeated time were 'segments overlap' (exit 2): each frame is now out
    once, one tick after the frame it repeats, the same on every path."""
    clip = repeated_timestamps_clip(tmp_path / "in.mkv")
    want = [Fraction(t, 1000) for t in (0, 40, 80, 120, 121, 160, 200, 240, 320, 321, 360, 400)]
    whole = ""
    for name, extra in [
        ("whole", ()),
        ("chunks3", ("--chunk-frames", "3")),
        ("chunks4", ("--chunk-frames", "4")),
    ]:
        out = tmp_path / f"{name}.mkv"
        proc = run("render", clip, "-s", astronaut_path, "-o", out, "-q", "--backend", "cpu", *extra)
        assert proc.returncode == 0, proc.stderr
        assert times_and_numbers(out) == (want, list(range(len(REPEATED)))), name
        whole = whole or proc.stderr
    assert "2 frame(s) repeat the timestamp of the frame before" in whole
    part = tmp_path / "part.mkv"
    proc = run("render", clip, "-s", astronaut_path, "-o", part, "-q", "--backend", "cpu", "--frames", "4:9")
    assert proc.returncode == 0, proc.stderr
    assert times_and_numbers(part) == (want[4:9], [4, 5, 6, 7, 8])


# -- --on-decode-error skip on a stream cut mid-GOP ---------------------------------------------------------


def cut_mid_gop(path: Path, codec: str, options: dict[str, str], lost: int = 3) -> Path:
    """A clip of 30 frames (keyframe every 10) with its first `lost` packets gone, audio whole."""
    whole = path.with_name("whole" + path.suffix)
    with av.open(str(whole), mode="w") as out:
        video = out.add_stream(codec, rate=25, options=options)
        video.width, video.height, video.pix_fmt = *SIZE, "yuv420p"
        audio = out.add_stream("libopus" if path.suffix == ".mkv" else "aac", rate=48000, layout="stereo")
        for i in range(30):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, SIZE), format="bgr24")
            frame.pts, frame.time_base = i, Fraction(1, 25)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        write_tone(out, audio, 30 / 25)
    with av.open(str(whole)) as src, av.open(str(path), mode="w") as dst:
        streams = {s.index: dst.add_stream_from_template(s) for s in src.streams}
        seen = 0
        for packet in src.demux():
            if not packet.size:
                continue
            if packet.stream.type == "video":
                seen += 1
                if seen <= lost:
                    continue
            packet.stream = streams[packet.stream.index]
            dst.mux(packet)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "codec, suffix, options",
    [
        (
            "libvpx-vp9",
            ".mkv",
            {"g": "10", "deadline": "realtime", "cpu-used": "8"},
        ),  # the decoder refuses them
        ("mpeg4", ".mp4", {"g": "10", "bf": "2", "qscale": "4"}),  # it gives a surplus picture
        ("libx264", ".mp4", {"g": "10", "bf": "2", "preset": "veryfast"}),  # it drops them silently
    ],
    ids=["vp9", "mpeg4", "h264"],
)
def test_skip_renders_a_stream_cut_mid_gop_with_every_time_kept(
    codec, suffix, options, astronaut_path, tmp_path
):
    """VP9 cut mid-GOP was exit 2 ('its first video frame cannot be decoded') even with skip; MPEG-4
    part 2 with B-frames gave one picture too many, a time twice. Now: one frame per packet at its own
    time, the frames before the first keyframe replaced, and stderr says how many."""
    clip = cut_mid_gop(tmp_path / f"in{suffix}", codec, options)
    with av.open(str(clip)) as container:
        demuxed = [p for p in container.demux(video=0) if p.size]
        packets = sorted(p.pts for p in demuxed)
        key = min(p.pts for p in demuxed if p.is_keyframe)
        tb = Fraction(container.streams.video[0].time_base)
    out = tmp_path / "out.mkv"
    args = ("render", clip, "-s", astronaut_path, "-o", out, "--backend", "cpu", "-q")
    proc = run(*args, "--on-decode-error", "skip")
    assert proc.returncode == 0, proc.stderr
    assert "could not be decoded" in proc.stderr and "replaced by the last good frame" in proc.stderr
    times, numbers = times_and_numbers(out)
    assert times == [p * tb for p in packets]  # every packet's frame once, at its own time
    after = [(t, n) for t, n in zip(times, numbers, strict=True) if t >= key * tb]
    assert len(after) >= 15 and all(
        n == t * 25 for t, n in after
    )  # from the keyframe on, the frames themselves
    with av.open(str(out)) as container:
        assert container.streams.audio  # the sound kept
    if codec == "libvpx-vp9":  # without skip: exit 2 naming the damage, nothing written
        proc = run(*args, "--overwrite")
        assert proc.returncode == 2 and "corrupt at frame 0" in proc.stderr, proc.stderr


# -- cover art and a second video stream ----------------------------------------------------------------


def with_extra_video(path: Path, *, video: bool = True, cover: bool = True, second: bool = False) -> Path:
    """An .mp4/.m4a with AAC audio, an H.264 video (`video`), an MJPEG cover (`cover`, an attached
    picture) and a second, smaller H.264 video (`second`)."""
    with av.open(str(path), mode="w", format="mp4") as out:
        main = out.add_stream("libx264", rate=25, options={"preset": "ultrafast"}) if video else None
        if main is not None:
            main.width, main.height, main.pix_fmt = *SIZE, "yuv420p"
        audio = out.add_stream("aac", rate=48000, layout="stereo")
        if cover:
            art = out.add_stream("mjpeg", rate=1)
            art.width, art.height, art.pix_fmt = 64, 64, "yuvj420p"
            art.disposition = av.stream.Disposition.attached_pic
            import cv2

            packet = av.Packet(
                cv2.imencode(".jpg", np.full((64, 64, 3), (0, 128, 255), np.uint8))[1].tobytes()
            )
            packet.stream, packet.pts, packet.dts, packet.is_keyframe = art, 0, 0, True
            out.mux(packet)
        extra = out.add_stream("libx264", rate=25, options={"preset": "ultrafast"}) if second else None
        if extra is not None:
            extra.width, extra.height, extra.pix_fmt = 64, 48, "yuv420p"
        for i in range(6):
            for stream, size in ((main, SIZE), (extra, (64, 48))):
                if stream is not None:
                    frame = av.VideoFrame.from_ndarray(synthetic_frame(i, size), format="bgr24")
                    frame.pts, frame.time_base = i, Fraction(1, 25)
                    out.mux(stream.encode(frame))
        for stream in (main, extra):
            if stream is not None:
                out.mux(stream.encode(None))
        write_tone(out, audio, 6 / 25)
    return path


def test_an_audio_file_with_cover_art_is_refused_as_having_only_cover_art(astronaut_path, tmp_path):
    song = with_extra_video(tmp_path / "song.m4a", video=False)
    proc = ffbatch_here("render", song, "-s", astronaut_path, "-o", tmp_path / "out.mp4")
    assert proc.returncode == 2 and "has no video stream (only cover art" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.parametrize("what", ["cover art", "second video"])
def test_cover_art_or_a_second_video_is_rendered_past_and_left_out_with_a_word(
    what, astronaut_path, tmp_path
):
    """The cover art, or a second video, was left out without a word (the report listed neither)."""
    clip = with_extra_video(tmp_path / "in.mp4", cover=what == "cover art", second=what == "second video")
    out, report = tmp_path / "out.mkv", tmp_path / "report.json"
    proc = ffbatch_here(
        "render", clip, "-s", astronaut_path, "-o", out, "--backend", "cpu", "--report", report
    )
    assert proc.returncode == 0, proc.stderr
    assert f"left out of the output: stream #2 ({what}, " in proc.stderr, proc.stderr
    assert times_and_numbers(out) == times_and_numbers(clip)  # the main video, every frame
    streams = __import__("json").loads(report.read_text())["streams"]
    assert [(s["input"], s["kind"], s["action"]) for s in streams] == [
        (0, "video", "re-encoded to libx264"),
        (1, "audio", "copied"),
        (2, what, "dropped"),
    ]
