"""Exact frame ranges, segments and their join: `render --frames`, `ffbatch concat`.

The face clip is a pan over `t1.jpg` (six real faces), so the swap really runs.
Lossless renders (`--crf 0`) are compared pixel for pixel; a default (lossy)
render within codec noise, since separately encoded segments are not
bit-identical to one encode.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from media import _timestamps, audio_packets, decode_all, frame_number, make_clip, synthetic_frame
from test_cli import ffbatch_here

from facefusion_batch.config import RenderSettings
from facefusion_batch.errors import InputError
from facefusion_batch.farm.concat import inspect_segment, join_segments
from facefusion_batch.farm.jobs import render
from facefusion_batch.models.assets import asset_path
from facefusion_batch.pipeline.run import Renderer
from facefusion_batch.video.decode.reader import FrameReader
from facefusion_batch.video.decode.segments import (
    TAG_FRAMES,
    frame_index,
    parse_range,
    read_tags,
    split_frames,
)

FRAMES = 18  # three segments and a lossy split, each of several frames
SIZE = (320, 240)


def ffbatch(*args, check: bool = True) -> subprocess.CompletedProcess:
    """The command in this process (`cli.main`, tests/test_cli.py `ffbatch_here`): no case here
    is about the process itself."""
    proc = ffbatch_here(*args)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("farm segments")  # a space in every path


@pytest.fixture(scope="module")
def face_clip(work) -> Path:
    photo = cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), (640, 443), interpolation=cv2.INTER_AREA)
    return make_clip(work / "in clip.mp4", image=photo, size=SIZE, frames=FRAMES)


@pytest.fixture(scope="module")
def full_lossless(work, face_clip, source) -> Path:
    out = work / "full lossless.mp4"
    ffbatch("render", face_clip, "-s", source, "-o", out, "--crf", "0", "-q")
    return out


# -- frame ranges --------------------------------------------------------------------------------


def test_parse_range():
    assert parse_range("0:100") == (0, 100)
    assert parse_range("250:") == (250, None)
    assert parse_range(":10") == (0, 10)
    for bad in ("5", "10:5", "3:3", "-1:4", "a:b"):
        with pytest.raises(InputError):
            parse_range(bad)
    assert split_frames(10, 4) == [(0, 4), (4, 8), (8, 10)]


def _clip(path: Path, codec: str, options: dict, *, vfr: bool = False, frames: int = 60) -> Path:
    """Synthetic numbered frames with B-frames and short GOPs: seeking has work to do."""
    pts, tb = _timestamps(frames, 25, vfr, 0)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=25, options=options)
        stream.width, stream.height, stream.pix_fmt = 160, 128, "yuv420p"
        stream.codec_context.time_base = tb
        stream.time_base = tb
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, (160, 128)), format="bgr24")
            frame.pts, frame.time_base = pts[i], tb
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


@pytest.mark.parametrize(
    "name, codec, options, vfr",
    [
        ("bframes.mp4", "libx264", {"preset": "veryfast", "g": "12", "bf": "3"}, False),
        ("vfr.mkv", "libx264", {"preset": "veryfast", "g": "10"}, True),
        ("open-gop.mp4", "libx265", {"x265-params": "log-level=error:keyint=15:open-gop=1:bframes=4"}, False),
        ("mpeg4.avi", "mpeg4", {"g": "10", "bf": "2"}, False),
        ("stream.ts", "libx264", {"preset": "veryfast", "g": "12"}, False),
    ],
)
def test_a_range_holds_exactly_the_frames_of_a_full_decode(tmp_path, name, codec, options, vfr):
    clip = _clip(tmp_path / name, codec, options, vfr=vfr)
    index = frame_index(clip)
    with FrameReader(clip) as reader:
        full = [(f.index, f.pts, frame_number(f.image)) for f in reader]
    assert index.count == len(full) == 60
    assert [n for _, _, n in full] == list(range(60))  # the decoder's order is the frame number
    seeked = 0
    for start, end in [(0, 7), (5, 17), (12, 13), (13, 40), (24, 36), (37, 60), (59, 60)]:
        with FrameReader(clip, frames=(start, end), index=index) as reader:
            got = [(f.index, f.pts, frame_number(f.image)) for f in reader]
            seeked += reader.seeked
        assert got == full[start:end], (start, end)
    if name != "stream.ts":  # MPEG-TS seeks by byte position and may fall back to counting
        assert seeked >= 5  # the fast path really ran


def test_a_range_outside_the_video_is_refused(tmp_path):
    clip = make_clip(tmp_path / "short.mp4", frames=10)
    with pytest.raises(InputError, match="has 10 frames"):
        FrameReader(clip, frames=(5, 11))


# -- segments + concat = one render --------------------------------------------------------------


def test_segments_joined_equal_one_full_render(work, face_clip, source, full_lossless):
    segs = work / "segs"
    ranges = ["0:5", "5:12", "12:"]
    paths = []
    for i, frames in enumerate(ranges):
        path = segs / f"part {i}.mp4"  # the directory is created by render --frames
        proc = ffbatch("render", face_clip, "-s", source, "--frames", frames, "-o", path, "--crf", "0")
        assert proc.stdout.strip() == str(path)
        paths.append(path)
    first, *_ = decode_all(paths[1])[0]
    src_frames, src_tb = decode_all(face_clip)
    assert first[0] == src_frames[5][0]  # the segment keeps the input's pts
    assert inspect_segment(paths[1]).starts_with_keyframe
    assert read_tags(paths[2])[TAG_FRAMES] == "12:18"

    joined = work / "joined.mp4"
    proc = ffbatch("concat", paths[2], paths[0], paths[1], "-o", joined, "--audio-from", face_clip)
    assert proc.stdout.strip() == str(joined)

    full, full_tb = decode_all(full_lossless)
    got, got_tb = decode_all(joined)
    assert len(got) == len(full) == FRAMES
    assert got_tb == full_tb == src_tb
    assert [p for p, _ in got] == [p for p, _ in full] == [p for p, _ in src_frames]
    for (_, a), (_, b) in zip(got, full, strict=True):
        assert np.array_equal(a, b)  # lossless: the swap is the same frame for frame
    assert audio_packets(joined) == audio_packets(face_clip)
    assert not any(".partial" in p.name for p in work.rglob("*"))


def test_lossy_segments_match_within_codec_noise(work, face_clip, source):
    settings = RenderSettings(input=face_clip, output=work / "full lossy.mp4", sources=(source,), quiet=True)
    renderer = Renderer.load(settings)  # the Python API this time: one model load for three renders
    render(settings, renderer=renderer)
    a, b = work / "lossy" / "a.mp4", work / "lossy" / "b.mp4"
    render(replace(settings, output=a, frames=(0, 9)), renderer=renderer)
    render(replace(settings, output=b, frames=(9, None)), renderer=renderer)
    joined = work / "lossy joined.mp4"
    ffbatch("concat", a, b, "-o", joined, "--audio-from", face_clip, "-q")
    ref, _ = decode_all(settings.output)
    got, _ = decode_all(joined)
    assert [p for p, _ in got] == [p for p, _ in ref]
    diffs = [mean_abs_diff(x, y) for (_, x), (_, y) in zip(got, ref, strict=True)]
    assert max(diffs) < 4.0 and np.mean(diffs) < 2.5, diffs
    assert audio_packets(joined) == audio_packets(face_clip)


def test_a_finished_segment_is_not_rendered_again(work, face_clip, source):
    seg = work / "idem" / "s.mp4"
    ffbatch("render", face_clip, "-s", source, "--frames", "0:4", "-o", seg, "-q")
    before = seg.stat().st_mtime_ns
    again = ffbatch("render", face_clip, "-s", source, "--frames", "0:4", "-o", seg)
    assert "up to date" in again.stderr and again.stdout.strip() == str(seg)
    assert seg.stat().st_mtime_ns == before
    # other settings: the segment is not theirs, so it needs --overwrite like any output
    other = ffbatch(
        "render", face_clip, "-s", source, "--frames", "0:4", "-o", seg, "--crf", "30", check=False
    )
    assert other.returncode == 2 and "--overwrite" in other.stderr


# -- concat refuses what it cannot join ----------------------------------------------------------


@pytest.fixture(scope="module")
def plain_segments(work) -> dict[str, Path]:
    """Untagged segments of a synthetic clip (as another tool would make them)."""
    base = work / "plain"
    base.mkdir()

    def encode(name: str, frames: range, size=(160, 128), step: int = 1) -> Path:
        path = base / name
        with av.open(str(path), "w", container_options={"video_track_timescale": "25"}) as out:
            stream = out.add_stream("libx264", rate=25, options={"preset": "veryfast", "crf": "20"})
            stream.width, stream.height, stream.pix_fmt = *size, "yuv420p"
            stream.codec_context.time_base = stream.time_base = Fraction(1, 25)
            for i in frames:
                frame = av.VideoFrame.from_ndarray(synthetic_frame(i, size), format="bgr24")
                frame.pts, frame.time_base = i * step, Fraction(1, 25)
                out.mux(stream.encode(frame))
            out.mux(stream.encode(None))
        return path

    return {
        "a": encode("a.mp4", range(0, 20)),
        "b": encode("b.mp4", range(20, 40)),
        "late": encode("late.mp4", range(25, 40)),
        "early": encode("early.mp4", range(15, 40)),
        "big": encode("big.mp4", range(20, 40), size=(192, 128)),
    }


def test_untagged_segments_join_and_keep_their_pts(work, plain_segments):
    out = work / "plain joined.mp4"
    ffbatch("concat", plain_segments["b"], plain_segments["a"], "-o", out)
    frames, _ = decode_all(out)
    assert [p for p, _ in frames] == list(range(40))
    assert [frame_number(img) for _, img in frames] == list(range(40))


@pytest.mark.parametrize(
    "pair, words",
    [
        (("a", "late"), ("gap", "a.mp4", "late.mp4")),
        (("a", "early"), ("overlap", "a.mp4", "early.mp4")),
        (("a", "big"), ("codec parameters", "a.mp4", "big.mp4")),
    ],
    ids=["gap", "overlap", "codec"],
)
def test_concat_refuses_gaps_overlaps_and_other_codec_parameters(work, plain_segments, pair, words):
    out = work / f"refused-{'-'.join(pair)}.mp4"
    proc = ffbatch("concat", *(plain_segments[k] for k in pair), "-o", out, check=False)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("ffbatch: error:") and "Traceback" not in proc.stderr
    for word in words:
        assert word in line, line
    assert not out.exists()


def test_concat_finds_missing_frames_by_their_tags(work, face_clip, source):
    settings = RenderSettings(input=face_clip, output=work / "x.mp4", sources=(source,), quiet=True)
    renderer = Renderer.load(settings)  # the Python API: three segments, one model load
    tagged = work / "tagged"
    a, c, over = tagged / "a.mp4", tagged / "c.mp4", tagged / "over.mp4"
    for path, frames in ((a, (0, 6)), (c, (8, 12)), (over, (4, 8))):
        report = render(replace(settings, output=path, frames=frames), renderer=renderer)
        assert report.frames == list(frames) and report.frames_out == frames[1] - frames[0]
    with pytest.raises(InputError, match="frames 6:8 are missing"):
        join_segments([a, c], tagged / "out.mp4")
    with pytest.raises(InputError, match="overlap by 2 frames"):
        join_segments([a, over], tagged / "out.mp4")
    other = tagged / "other.mp4"
    one = replace(settings, output=other, frames=(6, 8), faces="one")
    render(one, renderer=Renderer.load(one))
    with pytest.raises(InputError, match="different settings"):
        join_segments([a, other], tagged / "out.mp4")
    assert not (tagged / "out.mp4").exists()


def test_concat_refuses_a_segment_that_starts_between_keyframes(work, plain_segments):
    cut = work / "plain" / "cut.mp4"
    options = {"video_track_timescale": "25"}
    with av.open(str(plain_segments["b"])) as src, av.open(str(cut), "w", container_options=options) as out:
        stream = out.add_stream_from_template(src.streams.video[0])
        packets = [p for p in src.demux(src.streams.video[0]) if p.size]
        for packet in packets[3:]:  # drop the keyframe and what follows it in decode order
            packet.stream = stream
            out.mux(packet)
    proc = ffbatch("concat", plain_segments["a"], cut, "-o", work / "cut-out.mp4", check=False)
    assert proc.returncode == 2 and "does not start with a keyframe" in proc.stderr


def test_the_settings_digest_covers_the_backend_and_precision_not_streams_or_gpu(face_clip, tmp_path):
    """A resume or a farm join never mixes segments made on another backend or at another
    precision; streams, batch sizes, the GPU index and the decoder change no pixel."""
    from dataclasses import replace

    from facefusion_batch.farm.manifest import settings_digest
    from facefusion_batch.runtime.device import DeviceSettings

    source = tmp_path / "face.png"
    source.write_bytes(b"source bytes")
    base = RenderSettings(input=face_clip, output=tmp_path / "x.mp4", sources=(source,))
    digest = settings_digest(base)
    gpu = replace(base, device=DeviceSettings(backend="cuda", precision="auto"))
    assert settings_digest(gpu) != digest
    assert settings_digest(replace(gpu, device=replace(gpu.device, precision="fp32"))) != settings_digest(gpu)
    same = replace(gpu.device, streams=4, gpu=1, max_batch=32, hwaccel="cuda")
    assert settings_digest(replace(gpu, device=same, batch_size=16, workers=4)) == settings_digest(gpu)
    # --backend auto enters the digest as the backend it chose, not as the word "auto"
    assert settings_digest(replace(base, device=replace(base.device, auto=True))) == digest


def test_the_settings_digest_covers_the_cuda_backends_runtime(tmp_path):
    """--gpu-runtime onnxruntime sums in another order than torch: a resume or a join never mixes
    their segments. On the other backends, where it runs nothing, it is not in the digest."""
    from dataclasses import replace

    from facefusion_batch.farm.manifest import settings_digest
    from facefusion_batch.runtime.device import DeviceSettings

    clip, source = tmp_path / "in.mp4", tmp_path / "face.png"
    clip.write_bytes(b"input bytes")
    source.write_bytes(b"source bytes")
    base = RenderSettings(input=clip, output=tmp_path / "x.mp4", sources=(source,))
    cuda = replace(base, device=DeviceSettings(backend="cuda", precision="fp32"))
    ort = replace(cuda, device=replace(cuda.device, gpu_runtime="onnxruntime"))
    assert settings_digest(ort) != settings_digest(cuda)
    assert settings_digest(ort, code=False) != settings_digest(cuda, code=False)
    cpu = replace(base, device=replace(base.device, gpu_runtime="onnxruntime"))
    assert settings_digest(cpu) == settings_digest(base)
