"""Probe, reader and writer: round trips, timing, audio, rotation and every failure path."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from media import (
    audio_codecs,
    audio_packets,
    decode_all,
    display_rotation,
    dominant_colour,
    frame_number,
    make_audio_only,
    make_clip,
    synthetic_frame,
)

from facefusion_batch.errors import FfbatchError, InputError, OutputError
from facefusion_batch.video import (
    EncoderSettings,
    FrameReader,
    VideoWriter,
    quality_to_crf,
    validate_encoder,
)
from facefusion_batch.video.decode import probe as probe_module

probe = probe_module.probe
FAST = EncoderSettings(preset="ultrafast")


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("clips")


@pytest.fixture(scope="module")
def aac_mp4(clips) -> Path:
    return make_clip(clips / "aac.mp4", frames=30)


def transcode(src: Path, out: Path, settings: EncoderSettings = FAST, *, audio: bool = True) -> Path:
    """Reader -> writer, frames untouched: what the pipeline does minus the face swap."""
    info = probe(src)
    with (
        FrameReader(src, info=info) as reader,
        VideoWriter(out, info, settings, audio_from=src if audio else None) as writer,
    ):
        for frame in reader:
            writer.write(frame.image, frame.pts, frame.time_base)
    return out


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".partial-" in p.name)


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


# -- round trips --------------------------------------------------------------------------------


def test_roundtrip_mp4_keeps_frames_timing_audio_and_pixels(aac_mp4, tmp_path):
    out = transcode(aac_mp4, tmp_path / "out.mp4", EncoderSettings(preset="ultrafast", crf=18))
    src_frames, src_tb = decode_all(aac_mp4)
    out_frames, out_tb = decode_all(out)

    assert len(out_frames) == len(src_frames) == 30
    assert out_tb == src_tb
    assert [p for p, _ in out_frames] == [p for p, _ in src_frames]
    assert [frame_number(img) for _, img in out_frames] == list(range(30))

    src_info, out_info = probe(aac_mp4), probe(out)
    assert out_info.frame_count == 30 and not out_info.frame_count_estimated
    assert abs(out_info.duration_s - src_info.duration_s) <= 1 / 25
    assert out_info.average_rate == src_info.average_rate == 25
    assert (out_info.width, out_info.height, out_info.rotation) == (320, 240, 0)

    diffs = [mean_abs_diff(a, b) for (_, a), (_, b) in zip(src_frames, out_frames, strict=True)]
    assert np.mean(diffs) < 3.0, diffs

    src_audio, out_audio = audio_packets(aac_mp4), audio_packets(out)
    assert len(src_audio) > 40
    assert out_audio == src_audio  # packet for packet: same pts, same bytes
    assert leftovers(tmp_path) == []


def test_pcm_audio_is_reencoded_for_mp4(clips, tmp_path, caplog):
    src = make_clip(clips / "pcm.mkv", frames=25, audio="pcm_s16le")
    caplog.set_level(logging.INFO, logger="ffbatch")
    out = transcode(src, tmp_path / "out.mp4")
    assert audio_codecs(out) == ["aac"]
    assert any("re-encoding it to AAC" in r.getMessage() for r in caplog.records)
    # 1 s of 48 kHz audio is ~47 AAC packets of 1024 samples (plus priming).
    packets = audio_packets(out)
    assert 44 <= len(packets) <= 52
    pts = [p for p, _ in packets]
    assert pts == sorted(pts)
    assert len(decode_all(out)[0]) == 25


def test_pcm_audio_is_copied_into_mkv(clips, tmp_path):
    src = make_clip(clips / "pcm_copy.mkv", frames=25, audio="pcm_s16le")
    out = transcode(src, tmp_path / "out.mkv")
    assert audio_codecs(out) == ["pcm_s16le"]
    assert audio_packets(out) == audio_packets(src)


def test_video_without_audio(clips, tmp_path):
    src = make_clip(clips / "silent.mp4", frames=10, audio=None)
    out = transcode(src, tmp_path / "out.mov")
    assert audio_codecs(out) == []
    assert len(decode_all(out)[0]) == 10


def test_variable_frame_rate_pts_survive(clips, tmp_path):
    src = make_clip(clips / "vfr.mp4", frames=30, vfr=True)
    out = transcode(src, tmp_path / "out.mp4")
    src_frames, src_tb = decode_all(src)
    out_frames, out_tb = decode_all(out)
    src_pts = [p for p, _ in src_frames]
    assert len(set(np.diff(src_pts))) > 5  # really irregular
    assert out_tb == src_tb
    assert [p for p, _ in out_frames] == src_pts
    assert abs(probe(out).duration_s - probe(src).duration_s) <= 0.08  # within one (longest) frame


def test_colour_tags_survive_and_colours_round_trip(clips, tmp_path):
    src = make_clip(clips / "bt709.mp4", frames=5, audio=None, bt709=True)
    info = probe(src)
    assert (info.color_space, info.color_range, info.color_primaries, info.color_trc) == (1, 1, 1, 1)
    out = transcode(src, tmp_path / "out.mp4")
    out_info = probe(out)
    assert (out_info.color_space, out_info.color_range, out_info.color_primaries, out_info.color_trc) == (
        1,
        1,
        1,
        1,
    )
    src_frames, _ = decode_all(src)
    out_frames, _ = decode_all(out)
    assert np.mean([mean_abs_diff(a, b) for (_, a), (_, b) in zip(src_frames, out_frames, strict=True)]) < 3.0


def test_mkv_to_mp4_keeps_exact_time_base(clips, tmp_path):
    src = make_clip(clips / "ms.mkv", frames=12, audio=None)
    out = transcode(src, tmp_path / "out.mp4")
    assert decode_all(out)[1] == Fraction(1, 1000)
    assert [p for p, _ in decode_all(out)[0]] == [p for p, _ in decode_all(src)[0]]


# -- rotation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_reader_turns_rotated_video_upright(clips, rotation):
    src = make_clip(clips / f"rot{rotation}.mp4", frames=3, rotation=rotation, audio=None)
    info = probe(src)
    assert info.rotation == rotation
    assert (info.width, info.height) == (320, 240)
    swapped = rotation in (90, 270)
    assert (info.coded_width, info.coded_height) == ((240, 320) if swapped else (320, 240))
    with FrameReader(src, info=info) as reader:
        frames = list(reader)
    image = frames[0].image
    assert image.shape == (240, 320, 3) and image.flags.c_contiguous
    assert dominant_colour(image[2:14, 2:14]) == "red"  # top-left
    assert dominant_colour(image[2:14, -14:-2]) == "green"  # top-right
    assert [frame_number(f.image) for f in frames] == [0, 1, 2]


def test_rotated_input_is_encoded_upright_without_rotation_metadata(clips, tmp_path):
    src = make_clip(clips / "rot90_av.mp4", frames=10, rotation=90)
    raw_frames, _ = decode_all(src)
    assert raw_frames[0][1].shape == (320, 240, 3)  # stored sideways
    out = transcode(src, tmp_path / "out.mp4")
    assert display_rotation(out) == 0
    info = probe(out)
    assert (info.width, info.height, info.rotation) == (320, 240, 0)
    frames, _ = decode_all(out)
    image = frames[0][1]
    assert image.shape == (240, 320, 3)
    assert dominant_colour(image[2:14, 2:14]) == "red"
    assert dominant_colour(image[2:14, -14:-2]) == "green"
    upright = np.rot90(raw_frames[0][1], k=-1)  # the stored picture turned 90 degrees clockwise
    assert mean_abs_diff(image, upright) < 3.0
    assert mean_abs_diff(image, np.rot90(upright, k=2)) > 20.0  # and not upside down
    assert [frame_number(img) for _, img in frames] == list(range(10))


# -- odd sizes, 10-bit, pts without values -------------------------------------------------------


def test_odd_size_is_padded_to_even(clips, tmp_path, caplog):
    src = make_clip(clips / "odd.mkv", frames=8, size=(321, 241), audio=None)
    info = probe(src)
    assert (info.width, info.height) == (321, 241)
    caplog.set_level(logging.WARNING, logger="ffbatch")
    # the input is 4:4:4, which keeps odd sides; asking for 4:2:0 pads
    kept = transcode(src, tmp_path / "kept.mp4")
    assert (probe(kept).width, probe(kept).height, probe(kept).pix_fmt) == (321, 241, "yuv444p")
    out = transcode(src, tmp_path / "out.mp4", EncoderSettings(preset="ultrafast", pix_fmt="yuv420p"))
    assert sum("padding 321x241 to 322x242" in r.getMessage() for r in caplog.records) == 1
    out_info = probe(out)
    assert (out_info.width, out_info.height) == (322, 242)
    src_frames, _ = decode_all(src)
    out_frames, _ = decode_all(out)
    assert len(out_frames) == 8
    a, b = src_frames[3][1], out_frames[3][1]
    assert mean_abs_diff(a, b[:241, :321]) < 4.0
    # the padding repeats the last column / row
    assert mean_abs_diff(b[:241, 321], b[:241, 320]) < 6.0
    assert mean_abs_diff(b[241, :321], b[240, :321]) < 6.0


def test_ten_bit_input_decodes_to_8bit_with_one_warning(clips, caplog):
    src = make_clip(clips / "tenbit.mkv", frames=4, audio=None, pix_fmt="yuv420p10le")
    info = probe(src)
    assert info.bit_depth == 10
    caplog.set_level(logging.WARNING, logger="ffbatch")
    with FrameReader(src, info=info) as reader:
        frames = list(reader)
    assert len(frames) == 4
    assert all(f.image.dtype == np.uint8 and f.image.shape == (240, 320, 3) for f in frames)
    assert sum("10-bit" in r.getMessage() for r in caplog.records) == 1


def test_writer_synthesises_pts_when_missing(aac_mp4, tmp_path):
    info = probe(aac_mp4)
    out = tmp_path / "nopts.mp4"
    with VideoWriter(out, info, FAST) as writer:
        for i in range(5):
            writer.write(synthetic_frame(i, (320, 240)), None, info.time_base)
    frames, tb = decode_all(out)
    assert tb == info.time_base
    assert [p for p, _ in frames] == [0, 512, 1024, 1536, 2048]  # one frame at 25 fps in 1/12800


def test_libx265_works(aac_mp4, tmp_path):
    out = transcode(aac_mp4, tmp_path / "out.mkv", EncoderSettings(codec="libx265", preset="ultrafast"))
    info = probe(out)
    assert info.codec == "hevc"
    frames, _ = decode_all(out)
    assert len(frames) == 30
    assert [frame_number(img) for _, img in frames] == list(range(30))


# -- probe errors -------------------------------------------------------------------------------


def test_probe_reports_the_basics(aac_mp4):
    info = probe(aac_mp4)
    assert info.path == aac_mp4
    assert info.codec == "h264" and info.pix_fmt == "yuv420p" and info.bit_depth == 8
    assert info.time_base == Fraction(1, 12800)
    assert info.frame_count == 30 and info.audio_streams == 1
    assert "mp4" in info.format_name


def test_probe_estimates_frame_count_when_the_container_has_none(clips):
    info = probe(make_clip(clips / "estimate.mkv", frames=20, audio=None))
    assert info.frame_count_estimated
    assert abs(info.frame_count - 20) <= 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.mp4", "does not exist"),
        (lambda d: d, "is a directory"),
        (lambda d: _write(d / "empty.mp4", b""), "is empty"),
        (lambda d: _write(d / "noise.mp4", np.random.default_rng(3).bytes(40_000)), "cannot be read"),
        (lambda d: _write(d / "notes.txt", b"hello, not a video\n" * 40), "text file"),
        (lambda d: make_audio_only(d / "song.m4a"), "has no video stream"),
    ],
    ids=["missing", "directory", "zero-bytes", "garbage", "text", "audio-only"],
)
def test_probe_rejects_bad_input(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(InputError, match=message) as excinfo:
        probe(path)
    assert str(path) in str(excinfo.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read files without read permission")
def test_probe_rejects_unreadable_file(aac_mp4, tmp_path):
    path = tmp_path / "secret.mp4"
    path.write_bytes(aac_mp4.read_bytes())
    path.chmod(0)
    with pytest.raises(InputError, match="permission denied"):
        probe(path)


def test_probe_permission_error_message(aac_mp4, monkeypatch):
    """Same check without relying on file modes (which root ignores)."""

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(probe_module, "open", denied, raising=False)
    with pytest.raises(InputError, match="cannot be read: permission denied"):
        probe(aac_mp4)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# -- truncated and corrupt inputs ---------------------------------------------------------------


def test_truncated_mkv_yields_the_complete_frames_then_ends_cleanly(clips, tmp_path, caplog):
    full = make_clip(clips / "long.mkv", frames=60)
    cut = tmp_path / "cut.mkv"
    data = full.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    caplog.set_level(logging.WARNING, logger="ffbatch")
    with FrameReader(cut) as reader:
        frames = list(reader)
    assert 10 < len(frames) < 60
    assert [frame_number(f.image) for f in frames] == list(range(len(frames)))
    assert any("may be truncated" in r.getMessage() for r in caplog.records)


def test_mp4_cut_before_its_index_is_refused_by_probe(clips, tmp_path):
    full = make_clip(clips / "long.mp4", frames=60)
    cut = tmp_path / "cut.mp4"
    data = full.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="cannot be read as a video"):
        probe(cut)


def test_corrupt_mp4_raises_input_error_after_good_frames(clips, tmp_path):
    data = bytearray(make_clip(clips / "long.mp4", frames=60).read_bytes())
    start = int(len(data) * 0.4)
    data[start : start + 20_000] = np.random.default_rng(1).bytes(20_000)
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(bytes(data))
    seen = 0
    with pytest.raises(InputError, match=r"is truncated or corrupt at frame \d+") as excinfo:
        with FrameReader(bad) as reader:
            for _ in reader:
                seen += 1
    assert seen > 0 and str(bad) in str(excinfo.value)


def test_decode_thread_errors_reach_the_consumer(aac_mp4, monkeypatch):
    original = FrameReader._to_image

    def failing(self, av_frame):
        if self.frames_read >= 0 and av_frame.pts and av_frame.pts >= 5 * 512:
            raise av.error.InvalidDataError(errno.EINVAL, "Invalid data found when processing input")
        return original(self, av_frame)

    monkeypatch.setattr(FrameReader, "_to_image", failing)
    seen = []
    with pytest.raises(InputError, match="corrupt at frame 5"):
        with FrameReader(aac_mp4) as reader:
            seen.extend(f.index for f in reader)
    assert seen == [0, 1, 2, 3, 4]


# -- reader lifecycle ---------------------------------------------------------------------------


def test_reader_close_mid_stream_is_prompt(clips):
    src = make_clip(clips / "close.mkv", frames=150, audio=None)
    reader = FrameReader(src, queue_size=2)
    iterator = iter(reader)
    first = [next(iterator) for _ in range(3)]
    assert [f.index for f in first] == [0, 1, 2]
    deadline = time.monotonic() + 300  # a hang guard: the decode thread fills the queue and blocks
    while not reader._queue.full() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader._queue.qsize() == 2
    reader.close()  # joins the blocked decode thread (with a timeout of its own)
    assert not reader._thread.is_alive()
    assert not any(t.name == "ffbatch-decode" and t.is_alive() for t in threading.enumerate())


def test_reader_frames_are_ordered_bgr_with_pts(aac_mp4):
    with FrameReader(aac_mp4) as reader:
        frames = list(reader)
    assert [f.index for f in frames] == list(range(30))
    assert [f.pts for f in frames] == [i * 512 for i in range(30)]
    assert all(f.time_base == Fraction(1, 12800) for f in frames)
    assert dominant_colour(frames[0].image[2:14, 2:14]) == "red"  # BGR order, not RGB
    with pytest.raises(FfbatchError):
        iter(reader)


# -- writer failures ----------------------------------------------------------------------------


def test_writer_missing_directory_is_output_error(aac_mp4, tmp_path):
    out = tmp_path / "nope" / "out.mp4"
    with pytest.raises(OutputError, match="does not exist"):
        VideoWriter(out, probe(aac_mp4), FAST)
    assert not out.parent.exists()


def test_writer_refuses_to_overwrite_its_input(aac_mp4):
    with pytest.raises(InputError, match="is the input video"):
        VideoWriter(aac_mp4, probe(aac_mp4), FAST)


@pytest.mark.parametrize("name", ["out.xyz", "out", "out.webm"])
def test_writer_rejects_unknown_extension(aac_mp4, tmp_path, name):
    with pytest.raises(InputError, match=r"\.mp4"):
        VideoWriter(tmp_path / name, probe(aac_mp4), FAST)
    assert list(tmp_path.iterdir()) == []


def test_abort_leaves_nothing(aac_mp4, tmp_path):
    info = probe(aac_mp4)
    out = tmp_path / "out.mp4"
    writer = VideoWriter(out, info, FAST, audio_from=aac_mp4)
    for i in range(5):
        writer.write(synthetic_frame(i, (320, 240)), i * 512, info.time_base)
    assert len(leftovers(tmp_path)) == 1  # the temporary file, with the real extension
    assert leftovers(tmp_path)[0].startswith(".out.partial-") and leftovers(tmp_path)[0].endswith(".mp4")
    writer.abort()
    assert list(tmp_path.iterdir()) == []
    writer.abort()  # idempotent


def test_exception_inside_with_leaves_nothing(aac_mp4, tmp_path):
    info = probe(aac_mp4)
    out = tmp_path / "out.mp4"
    out_existing = tmp_path / "keep.mp4"
    out_existing.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="boom"):
        with VideoWriter(out, info, FAST, audio_from=aac_mp4) as writer:
            writer.write(synthetic_frame(0, (320, 240)), 0, info.time_base)
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.mp4"]


class _DiskFullContainer:
    """Wraps the writer's output container; the Nth mux fails like a full disk."""

    def __init__(self, container, fail_after: int):
        self._container = container
        self._left = fail_after

    def mux(self, packet):
        self._left -= 1
        if self._left < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._container.mux(packet)

    def close(self):
        return self._container.close()


def test_disk_full_is_output_error_and_removes_the_temp(aac_mp4, tmp_path):
    info = probe(aac_mp4)
    out = tmp_path / "out.mp4"
    with pytest.raises(OutputError, match="No space left on device") as excinfo:
        with VideoWriter(out, info, FAST, audio_from=aac_mp4) as writer:
            writer._container = _DiskFullContainer(writer._container, fail_after=3)
            for i in range(30):
                writer.write(synthetic_frame(i, (320, 240)), i * 512, info.time_base)
    assert str(out) in str(excinfo.value)
    assert list(tmp_path.iterdir()) == []


def test_wrong_frame_shape_is_an_internal_error(aac_mp4, tmp_path):
    info = probe(aac_mp4)
    with pytest.raises(FfbatchError, match="expects"):
        with VideoWriter(tmp_path / "out.mp4", info, FAST) as writer:
            writer.write(np.zeros((10, 10, 3), np.uint8), 0, info.time_base)
    assert list(tmp_path.iterdir()) == []


def test_close_is_idempotent_and_abort_after_close_keeps_the_output(aac_mp4, tmp_path):
    info = probe(aac_mp4)
    out = tmp_path / "out.mkv"
    writer = VideoWriter(out, info, FAST)
    for i in range(3):
        writer.write(synthetic_frame(i, (320, 240)), i * 512, info.time_base)
    writer.close()
    writer.close()
    writer.abort()
    assert [p.name for p in tmp_path.iterdir()] == ["out.mkv"]
    assert len(decode_all(out)[0]) == 3


def test_closing_without_frames_creates_nothing(aac_mp4, tmp_path):
    with pytest.raises(FfbatchError, match="no frames"):
        with VideoWriter(tmp_path / "out.mp4", probe(aac_mp4), FAST):
            pass
    assert list(tmp_path.iterdir()) == []


# -- encoder settings ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "option"),
    [
        (EncoderSettings(codec="libfoo"), "--encoder"),
        (EncoderSettings(codec="mpeg4"), "--encoder"),
        (EncoderSettings(crf=52), "--crf"),
        (EncoderSettings(crf=-1), "--crf"),
        (EncoderSettings(crf=18.5), "--crf"),
        (EncoderSettings(quality=101), "--quality"),
        (EncoderSettings(crf=20, quality=80), "--crf and --quality"),
        (EncoderSettings(preset="warp9"), "--preset"),
        (EncoderSettings(preset="p4"), "--preset"),
        (EncoderSettings(pix_fmt="rgb48le"), "pixel format"),
        (EncoderSettings(threads=-2), "threads"),
    ],
)
def test_bad_encoder_settings_are_input_errors(settings, option, aac_mp4, tmp_path):
    with pytest.raises(InputError, match=option):
        validate_encoder(settings)
    with pytest.raises(InputError, match=option):
        VideoWriter(tmp_path / "out.mp4", probe(aac_mp4), settings)
    assert list(tmp_path.iterdir()) == []


def test_nvenc_without_a_gpu_is_an_input_error():
    settings = EncoderSettings(codec="h264_nvenc")
    try:
        validate_encoder(settings)
    except InputError as exc:
        assert "--encoder h264_nvenc" in str(exc)
    else:
        pytest.skip("an NVENC-capable GPU is present here")


def test_quality_maps_to_crf():
    assert quality_to_crf(100) == 0
    assert quality_to_crf(0) == 51
    assert quality_to_crf(65) == 18
    assert EncoderSettings().effective_crf() == 18
    assert EncoderSettings(quality=100).effective_crf() == 0
    assert EncoderSettings(crf=23).codec_options() == {"preset": "veryfast", "crf": "23"}
    nvenc = EncoderSettings(codec="hevc_nvenc", preset="veryfast", crf=0).codec_options()
    assert nvenc == {"preset": "p2", "rc": "vbr", "cq": "1"}


# -- test media helper --------------------------------------------------------------------------


def test_make_clip_pans_across_an_image(tmp_path):
    rng = np.random.default_rng(0)
    photo = (rng.random((300, 500, 3)) * 255).astype(np.uint8)
    photo = np.ascontiguousarray(np.repeat(np.repeat(photo[::10, ::10], 10, 0), 10, 1))
    src = make_clip(tmp_path / "pan.mp4", frames=6, size=(200, 150), image=photo, audio=None)
    frames, _ = decode_all(src)
    assert len(frames) == 6 and frames[0][1].shape == (150, 200, 3)
    assert mean_abs_diff(frames[0][1], photo[:150, :200]) < 6.0
    assert mean_abs_diff(frames[-1][1], photo[-150:, -200:]) < 6.0
    assert mean_abs_diff(frames[0][1], frames[-1][1]) > 20.0
