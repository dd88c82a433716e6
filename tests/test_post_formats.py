"""Post-production outputs: the encoder/container table, encoder control, what is carried over
(colour, SAR, tags, timecode, every audio track) and what is refused (interlaced, reductions, HDR).

Every clip is made here with PyAV; the checks decode the results and look at pixels, pixel
formats, stream lists, tags and audio packets.
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from media import AUDIO_RATE, _write_tone, audio_packets, encode_image, make_clip, synthetic_frame
from test_cli import ffbatch_here

from facefusion_batch.config import encoder_options
from facefusion_batch.errors import InputError
from facefusion_batch.farm.manifest import segment_name
from facefusion_batch.tools.doctor import report_lines
from facefusion_batch.video.decode.probe import probe
from facefusion_batch.video.decode.reader import FrameReader
from facefusion_batch.video.encode.encoder_policy import EncoderSettings, check_output, validate_encoder
from facefusion_batch.video.encode.formats import (
    ENCODER_TABLE,
    available_encoders,
    check_fits,
    segment_suffix,
)
from facefusion_batch.video.encode.sequence import SequenceWriter
from facefusion_batch.video.encode.writer import VideoWriter

SIZE = (256, 144)  # DNxHR needs 256x120 or more
FRAMES = 6
FACES_FRAMES = 8  # the faces clip's length

_FORMATS = {".mov": "mov", ".mkv": "matroska", ".mp4": "mp4", ".mxf": "mxf", ".avi": "avi"}


def make_master(
    path: Path,
    *,
    codec: str = "prores_ks",
    pix_fmt: str = "yuv422p10le",
    size: tuple[int, int] = SIZE,
    frames: int = FRAMES,
    options: dict[str, str] | None = None,
    sar: Fraction | None = None,
    field_order: int | None = None,
    colour: tuple[int, int, int, int] | None = (1, 1, 1, 1),  # space, range, primaries, transfer
    tags: dict[str, str] | None = None,
    video_language: str | None = None,
    audio: tuple[tuple[str, str], ...] = (),  # (codec, language) per track
) -> Path:
    """A clip as a facility hands it over: the codec/pixel format asked for, colour tags, SAR,
    field order, container tags (title, timecode) and PCM tracks with languages."""
    out = av.open(str(path), mode="w", format=_FORMATS[path.suffix])
    try:
        out.metadata.update(tags or {})
        opts = dict(options or {})
        if codec == "libx264":
            opts.setdefault("preset", "ultrafast")
            opts.setdefault("crf", "10")
        stream = out.add_stream(codec, rate=25, options=opts)
        stream.width, stream.height = size
        stream.pix_fmt = pix_fmt
        ctx = stream.codec_context
        if colour is not None:
            ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc = colour
        if sar is not None:
            ctx.sample_aspect_ratio = sar
        if field_order is not None:
            ctx.field_order = field_order
        if video_language:
            stream.metadata["language"] = video_language
        tracks = []
        for audio_codec, language in audio:
            track = out.add_stream(audio_codec, rate=AUDIO_RATE, layout="stereo")
            track.metadata["language"] = language
            tracks.append(track)
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, size), format="bgr24")
            space = colour[0] if colour and colour[0] in (1, 5, 6, 9) else None
            if space:
                frame = frame.reformat(format=pix_fmt, dst_colorspace=space, dst_color_range=colour[1])
            else:
                frame = frame.reformat(format=pix_fmt)
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
        for track in tracks:
            _write_tone(out, track, frames / 25)
    finally:
        out.close()
    return path


def transcode(src: Path, out: Path, settings: EncoderSettings, fps: Fraction | None = None) -> VideoWriter:
    """Reader -> writer with the checks a render makes first; frames untouched."""
    info = probe(src, fps=fps)
    check_output(settings, info, out)
    audio = src if info.audio_streams else None
    with FrameReader(src, info=info) as reader, VideoWriter(out, info, settings, audio_from=audio) as writer:
        for frame in reader:
            writer.write(frame.image, frame.pts, frame.time_base)
    return writer


def video_stream(path: Path):
    container = av.open(str(path))
    return container, container.streams.video[0]


def decoded_bgr(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("post")


@pytest.fixture(scope="module")
def h264_clip(clips) -> Path:
    """8-bit 4:2:0 BT.709 H.264, the everyday input."""
    return make_master(clips / "h264.mkv", codec="libx264", pix_fmt="yuv420p")


@pytest.fixture(scope="module")
def faces_clip(clips, t1_small) -> Path:
    """8 frames panning over t1 (up to six faces a frame), 640x360, AAC audio: conftest's face clip
    cut to what the end-to-end cases here need (a swap in every frame, a join of three chunks)."""
    return make_clip(clips / "faces.mp4", image=t1_small, size=(640, 360), frames=FACES_FRAMES, audio="aac")


@pytest.fixture(scope="module")
def prores_master(clips) -> Path:
    """10-bit ProRes 4:2:2 HQ, anamorphic, with title, timecode, a French picture and two PCM tracks."""
    return make_master(
        clips / "master.mov",
        options={"profile": "hq"},
        sar=Fraction(4, 3),
        tags={"title": "Shot 042", "timecode": "01:00:10:00"},
        video_language="fra",
        audio=(("pcm_s24le", "eng"), ("pcm_s24le", "fra")),
    )


# -- the table ----------------------------------------------------------------------------------

FITS = [
    ("prores_ks", ".mov", "prores", "yuv422p10le"),
    ("prores_ks", ".mkv", "prores", "yuv422p10le"),
    ("prores_ks", ".mxf", "prores", "yuv422p10le"),
    ("dnxhd", ".mov", "dnxhd", "yuv422p"),
    ("dnxhd", ".mxf", "dnxhd", "yuv422p"),
    ("ffv1", ".mkv", "ffv1", "yuv420p"),
    ("ffv1", ".avi", "ffv1", "yuv420p"),
    ("libx264rgb", ".mov", "h264", "gbrp"),
    ("libx265", ".mp4", "hevc", "yuv420p"),
    ("libsvtav1", ".mkv", "av1", "yuv420p"),
    ("libsvtav1", ".mp4", "av1", "yuv420p"),
]


@pytest.mark.parametrize(("codec", "suffix", "decoded_codec", "pix_fmt"), FITS)
def test_every_encoder_writes_into_the_containers_it_fits(
    h264_clip, tmp_path, codec, suffix, decoded_codec, pix_fmt
):
    if codec not in available_encoders():
        pytest.skip(f"this FFmpeg build has no {codec}")
    out = tmp_path / f"out{suffix}"
    writer = transcode(
        h264_clip, out, EncoderSettings(codec=codec, preset="ultrafast" if codec != "libsvtav1" else "13")
    )
    container, stream = video_stream(out)
    with container:
        assert stream.codec_context.codec.id == av.codec.Codec(decoded_codec, "r").id
        frames = list(container.decode(stream))
    assert len(frames) == FRAMES
    assert frames[0].format.name == pix_fmt
    source = decoded_bgr(h264_clip)
    error = np.abs(frames[2].to_ndarray(format="bgr24").astype(int) - source[2].astype(int)).mean()
    if suffix == ".avi":  # AVI has no colour tags: the BT.709 clip decodes as BT.601, and the log says so
        assert writer.dropped == ["colour tags (AVI cannot store them; players assume BT.601)"]
        return
    assert error < 3.0, error
    assert writer.dropped == []


@pytest.mark.parametrize(
    ("codec", "suffix"),
    [("prores_ks", ".mp4"), ("dnxhd", ".mkv"), ("ffv1", ".mov"), ("libx264", ".webm"), ("libx265", ".avi")],
)
def test_impossible_pairs_are_refused_before_anything_is_written(h264_clip, tmp_path, codec, suffix):
    out = tmp_path / f"out{suffix}"
    with pytest.raises(InputError, match=f"cannot hold .* {codec}"):
        check_fits(codec, out)
    with pytest.raises(InputError, match="cannot hold"):
        VideoWriter(out, probe(h264_clip), EncoderSettings(codec=codec))
    assert list(tmp_path.iterdir()) == []


def test_segments_use_a_container_the_codec_fits():
    assert segment_suffix("libx264") == ".mp4"
    assert segment_suffix("prores_ks") == ".mov"
    assert segment_suffix("ffv1") == ".mkv"
    assert segment_name(0, 10, segment_suffix("dnxhd")) == "00000000-00000010.mov"
    for codec in available_encoders():
        check_fits(codec, Path("x" + segment_suffix(codec)))


def test_doctor_lists_only_encoders_render_accepts():
    line = next(line for line in report_lines() if line.startswith("encoders"))
    listed = line.split(None, 1)[1].replace("(software)", "").replace(",", " ").split()
    assert "prores_ks" in listed and "ffv1" in listed
    for codec in listed:
        validate_encoder(EncoderSettings(codec=codec, preset="13" if codec == "libsvtav1" else "veryfast"))


@pytest.mark.parametrize(
    ("profile", "pix_fmt", "name"),
    [
        ("proxy", "yuv422p10le", "Proxy"),
        ("422", "yuv422p10le", "Standard"),
        ("4444", "yuv444p", "4444"),
        ("4444xq", "yuv444p", "XQ"),
    ],
)
def test_prores_profiles(h264_clip, tmp_path, profile, pix_fmt, name):
    out = tmp_path / "out.mov"
    transcode(h264_clip, out, EncoderSettings(codec="prores_ks", profile=profile))
    container, stream = video_stream(out)
    with container:
        assert name in (stream.codec_context.profile or "")
        # the ProRes decoder hands 4:4:4 out at 12 bits, 4:2:2 at 10
        assert next(container.decode(stream)).format.name.startswith(pix_fmt)


@pytest.mark.parametrize(
    ("profile", "pix_fmt"), [("lb", "yuv422p"), ("hqx", "yuv422p10le"), ("444", "yuv444p10le")]
)
def test_dnxhr_profiles(h264_clip, tmp_path, profile, pix_fmt):
    out = tmp_path / "out.mxf"
    transcode(h264_clip, out, EncoderSettings(codec="dnxhd", profile=profile))
    container, stream = video_stream(out)
    with container:
        assert stream.codec_context.profile.lower().replace(" ", "").startswith("dnxhr")
        assert next(container.decode(stream)).format.name == pix_fmt


def test_hevc_is_tagged_hvc1_for_quicktime(h264_clip, tmp_path):
    for suffix in (".mp4", ".mov"):
        out = tmp_path / f"out{suffix}"
        transcode(h264_clip, out, EncoderSettings(codec="libx265", preset="ultrafast"))
        container, stream = video_stream(out)
        with container:
            assert stream.codec_context.codec_tag == "hvc1"


def test_lossless_rgb_h264_keeps_the_frames_exactly(tmp_path):
    """libx264rgb at CRF 0 stores the BGR frames it is given bit for bit."""
    src = make_master(tmp_path / "rgb.mkv", codec="ffv1", pix_fmt="bgr0", colour=None)
    out = tmp_path / "out.mkv"
    transcode(src, out, EncoderSettings(codec="libx264rgb", crf=0, preset="ultrafast"))
    for a, b in zip(decoded_bgr(src), decoded_bgr(out), strict=True):
        assert np.array_equal(a, b)


def test_ffv1_is_lossless_against_the_frames_it_gets(tmp_path):
    src = make_master(tmp_path / "rgb.mkv", codec="ffv1", pix_fmt="bgr0", colour=None)
    out = tmp_path / "out.mkv"
    transcode(src, out, EncoderSettings(codec="ffv1", pix_fmt="bgr0"))
    for a, b in zip(decoded_bgr(src), decoded_bgr(out), strict=True):
        assert np.array_equal(a, b)


# -- encoder control ------------------------------------------------------------------------------


def keyframes(path: Path) -> list[bool]:
    with av.open(str(path)) as container:
        return [p.is_keyframe for p in container.demux(video=0) if p.size]


def test_gop_and_encoder_opt_reach_the_encoder(h264_clip, tmp_path):
    intra = tmp_path / "intra.mp4"
    transcode(h264_clip, intra, EncoderSettings(preset="ultrafast", gop=1))
    assert all(keyframes(intra))
    default = tmp_path / "default.mp4"
    transcode(h264_clip, default, EncoderSettings(preset="ultrafast"))
    assert keyframes(default).count(True) == 1
    opt = tmp_path / "opt.mp4"
    settings = EncoderSettings(
        preset="ultrafast", options=encoder_options(["x264-params=keyint=2:min-keyint=1"])
    )
    transcode(h264_clip, opt, settings)
    assert keyframes(opt)[::2] == [True] * (FRAMES // 2)


def test_bitrate_controls_the_size(h264_clip, tmp_path):
    small, large = tmp_path / "small.mp4", tmp_path / "large.mp4"
    transcode(
        h264_clip, small, EncoderSettings(preset="ultrafast", bitrate="50k", maxrate="50k", bufsize="100k")
    )
    transcode(h264_clip, large, EncoderSettings(preset="ultrafast", bitrate="5M"))
    assert small.stat().st_size * 3 < large.stat().st_size


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (EncoderSettings(options=(("no-such-option", "1"),)), "no option no-such-option"),
        (EncoderSettings(codec="prores_ks", crf=10), "do not apply"),
        (EncoderSettings(codec="prores_ks", profile="ultra"), "--profile 'ultra'"),
        (EncoderSettings(codec="dnxhd", profile="hqx", pix_fmt="yuv422p"), "pixel format"),
        (EncoderSettings(bitrate="fast"), "--bitrate"),
        (EncoderSettings(gop=0), "--gop"),
        (EncoderSettings(audio_codec="mp3"), "--audio-codec"),
        (EncoderSettings(audio_bitrate="256k"), "--audio-codec aac only"),
        (EncoderSettings(codec="libsvtav1", crf=64), "--crf must be"),
    ],
)
def test_bad_encoder_control_is_refused(settings, words):
    with pytest.raises(InputError, match=words):
        validate_encoder(settings)


def test_encoder_opt_needs_key_value():
    assert encoder_options(["a=1", "b=x=y", "a=2"]) == (("a", "2"), ("b", "x=y"))
    with pytest.raises(InputError, match="KEY=VALUE"):
        encoder_options(["novalue"])


# -- carried over --------------------------------------------------------------------------------


def test_prores_master_keeps_sar_colour_tags_timecode_and_both_pcm_tracks(prores_master, tmp_path):
    out = tmp_path / "out.mov"
    writer = transcode(prores_master, out, EncoderSettings(codec="prores_ks", allow_reduce=True))
    info = probe(out)
    assert info.pix_fmt == "yuv422p10le"
    assert info.sample_aspect_ratio == Fraction(4, 3)
    assert (info.color_space, info.color_range, info.color_primaries, info.color_trc) == (1, 1, 1, 1)
    assert info.timecode == "01:00:10:00"
    assert dict(info.container_tags)["title"] == "Shot 042"
    assert dict(info.video_tags)["language"] == "fra"
    with av.open(str(out)) as container:
        kinds = [s.type for s in container.streams]
        assert kinds.count("audio") == 2 and "data" in kinds  # the data stream: the tmcd track
        assert [s.codec_context.name for s in container.streams.audio] == ["pcm_s24le", "pcm_s24le"]
        assert [s.language for s in container.streams.audio] == ["eng", "fra"]
    for track in (0, 1):
        assert audio_packets(out, track) == audio_packets(prores_master, track)
    assert writer.audio_summary == "copied" and writer.dropped == []


def test_prores_frame_headers_carry_the_inputs_colour_tags(prores_master, tmp_path):
    """A ProRes frame carries its own colour description (primaries, transfer, matrix: bytes
    22-24 of the frame header), which players and NLEs read: BT.709 in, BT.709 in every frame."""
    out = tmp_path / "out.mov"
    transcode(prores_master, out, EncoderSettings(codec="prores_ks", allow_reduce=True))
    with av.open(str(out)) as container:
        headers = [bytes(p) for p in container.demux(video=0) if p.size]
    assert len(headers) == FRAMES
    for data in headers:
        assert data[4:8] == b"icpf" and list(data[22:25]) == [1, 1, 1]
    info = probe(out)
    assert (info.color_primaries, info.color_trc, info.color_space) == (1, 1, 1)


def test_mkv_keeps_timecode_and_title_as_tags(prores_master, tmp_path):
    out = tmp_path / "out.mkv"
    writer = transcode(prores_master, out, EncoderSettings(codec="ffv1", allow_reduce=True))
    info = probe(out)
    assert info.timecode == "01:00:10:00" and dict(info.container_tags)["title"] == "Shot 042"
    assert info.pix_fmt == "yuv422p10le"
    # PyAV 18 cannot set Matroska's display size: the SAR is lost there, and said so
    assert info.sample_aspect_ratio is None
    assert any(d.startswith("sample aspect ratio 4:3") for d in writer.dropped)


def test_pcm_into_mp4_warns_and_names_a_container_that_keeps_it(prores_master, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ffbatch")
    out = tmp_path / "out.mp4"
    transcode(prores_master, out, EncoderSettings(preset="ultrafast", allow_reduce=True))
    with av.open(str(out)) as container:
        assert [s.codec_context.name for s in container.streams.audio] == ["aac", "aac"]
        assert [s.language for s in container.streams.audio] == ["eng", "fra"]
    lossy = [r.getMessage() for r in caplog.records if "lossless audio made lossy" in r.getMessage()]
    assert len(lossy) == 2 and all(".mov or .mkv" in m for m in lossy)


def test_audio_codec_choices(prores_master, tmp_path):
    sizes = {}
    for rate in ("64k", "320k"):
        aac = tmp_path / f"aac{rate}.mov"
        settings = EncoderSettings(
            codec="prores_ks", allow_reduce=True, audio_codec="aac", audio_bitrate=rate
        )
        writer = transcode(prores_master, aac, settings)
        with av.open(str(aac)) as container:
            assert [s.codec_context.name for s in container.streams.audio] == ["aac", "aac"]
        assert writer.audio_summary == "re-encoded to AAC"
        sizes[rate] = sum(len(p) for _, p in audio_packets(aac, 0))
    assert sizes["320k"] > 2.5 * sizes["64k"]
    silent = tmp_path / "silent.mov"
    writer = transcode(
        prores_master, silent, EncoderSettings(codec="prores_ks", allow_reduce=True, audio=False)
    )
    with av.open(str(silent)) as container:
        assert not container.streams.audio
    assert writer.audio_summary == "left out (--no-audio)"
    pcm = tmp_path / "pcm.mkv"
    aac_in = make_master(tmp_path / "aac.mkv", codec="libx264", pix_fmt="yuv420p", audio=(("aac", "deu"),))
    transcode(aac_in, pcm, EncoderSettings(preset="ultrafast", audio_codec="pcm"))
    with av.open(str(pcm)) as container:
        assert [(s.codec_context.name, s.language) for s in container.streams.audio] == [("pcm_s24le", "deu")]
    with pytest.raises(InputError, match=r"\.mov or \.mkv"):
        check_output(EncoderSettings(audio_codec="pcm"), probe(aac_in), tmp_path / "x.mp4")


def test_mxf_gets_pcm_audio(tmp_path):
    src = make_master(tmp_path / "aac.mkv", codec="libx264", pix_fmt="yuv422p", audio=(("aac", "eng"),))
    out = tmp_path / "out.mxf"
    transcode(src, out, EncoderSettings(codec="dnxhd", profile="sq"))
    with av.open(str(out)) as container:
        assert [s.codec_context.name for s in container.streams.audio] == ["pcm_s24le"]


def test_streams_that_cannot_be_kept_are_listed(h264_clip, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="ffbatch")
    info = replace(probe(h264_clip), other_streams=((3, "data", "bin_data"),))
    writer = VideoWriter(tmp_path / "out.mp4", info, EncoderSettings(preset="ultrafast"))
    writer.abort()
    assert writer.dropped == ["stream #3 (data, bin_data): not carried into mp4"]
    assert any("left out of the output" in r.getMessage() for r in caplog.records)


# -- refused without the user's word ---------------------------------------------------------------


def test_interlaced_input_is_refused_with_the_reason(tmp_path):
    src = make_master(tmp_path / "tff.mkv", codec="libx264", pix_fmt="yuv420p", field_order=2)
    assert probe(src).field_order == 2
    # swapped per field into a video (tests/test_post_depth.py); an image sequence cannot hold fields
    assert check_output(EncoderSettings(), probe(src), tmp_path / "out.mp4") == []
    with pytest.raises(InputError, match=r"interlaced \(top field first\).*sequence.*Deinterlace"):
        check_output(EncoderSettings(), probe(src), tmp_path / "out.%04d.png")


def test_ten_bit_needs_the_users_word(prores_master, tmp_path):
    info = probe(prores_master)
    out = tmp_path / "out.mov"
    # 10-bit into 10-bit keeps its bits (video/pictures/native.py); into 8 bits it needs the user's word
    assert check_output(EncoderSettings(codec="prores_ks"), info, out) == []
    with pytest.raises(InputError, match=r"10-bit .*--allow-reduce"):
        check_output(EncoderSettings(codec="dnxhd"), info, out)
    assert check_output(EncoderSettings(codec="dnxhd", allow_reduce=True), info, out)[0].startswith(
        "the input is 10-bit"
    )
    # an explicit --pix-fmt is the user's word too: 4:2:2 10-bit to 4:2:0 8-bit, both said in the log
    said = check_output(EncoderSettings(pix_fmt="yuv420p"), info, tmp_path / "out.mp4")
    assert len(said) == 2 and "subsampled to yuv420p" in said[1]


def test_chroma_is_kept_by_default_and_reduced_only_when_asked(tmp_path):
    src = make_master(tmp_path / "422.mkv", codec="libx264", pix_fmt="yuv422p")
    out = tmp_path / "out.mp4"
    transcode(src, out, EncoderSettings(preset="ultrafast"))
    assert probe(out).pix_fmt == "yuv422p"
    with pytest.raises(InputError, match="subsampled"):
        check_output(EncoderSettings(codec="libsvtav1", preset="13"), probe(src), tmp_path / "av1.mkv")


def test_hdr_is_never_8_bit(tmp_path):
    pq = make_master(tmp_path / "pq.mkv", codec="libx265", pix_fmt="yuv420p10le", colour=(9, 1, 9, 16))
    info = probe(pq)
    assert info.color_trc == 16
    # kept at 10 bits, HDR needs no --allow-reduce (tests/test_post_depth.py)
    assert (
        check_output(EncoderSettings(codec="libx265", pix_fmt="yuv420p10le"), info, tmp_path / "o.mp4") == []
    )
    with pytest.raises(InputError, match="8 bits; choose a 10-bit"):
        check_output(
            EncoderSettings(codec="libx265", pix_fmt="yuv420p", allow_reduce=True), info, tmp_path / "o.mp4"
        )
    out = tmp_path / "o.mkv"
    transcode(pq, out, EncoderSettings(codec="libx265", preset="ultrafast", allow_reduce=True))
    kept = probe(out)
    assert (kept.pix_fmt, kept.color_trc, kept.color_primaries, kept.color_space) == ("yuv420p10le", 16, 9, 9)


def test_full_range_stays_full_range(tmp_path):
    src = make_master(tmp_path / "full.mkv", codec="libx264", pix_fmt="yuv420p", colour=(1, 2, 1, 1))
    out = tmp_path / "out.mkv"
    transcode(src, out, EncoderSettings(preset="ultrafast"))
    assert probe(out).color_range == 2
    error = np.abs(decoded_bgr(out)[3].astype(int) - decoded_bgr(src)[3].astype(int)).mean()
    assert error < 3.0


def test_every_table_entry_names_containers_ffmpeg_can_open():
    for name, spec in ENCODER_TABLE.items():
        assert spec.extensions, name
        if spec.profiles:
            assert spec.default_profile in spec.profiles


# -- the command line ----------------------------------------------------------------------------


def error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    return next(line for line in proc.stderr.splitlines() if line.startswith("ffbatch: error:"))


def test_render_and_plan_refuse_an_impossible_pair_up_front(h264_clip, tmp_path):
    source = tmp_path / "face.png"
    source.write_bytes(b"not read before the options are checked")
    out = tmp_path / "out.mp4"
    rendered = error_line(
        ffbatch_here("render", h264_clip, "-s", source, "-o", out, "--encoder", "prores_ks")
    )
    planned = error_line(
        ffbatch_here(
            "plan", h264_clip, "-s", source, "--encoder", "prores_ks", "--chunk-frames", "3", "-o", out
        )
    )
    assert "cannot hold prores" in rendered and ".mov or .mxf or .mkv" in rendered
    assert planned == rendered
    assert list(tmp_path.iterdir()) == [source]


def test_plan_puts_prores_chunks_in_mov_segments(h264_clip, tmp_path):
    source = tmp_path / "face.png"
    source.write_bytes(b"x")
    proc = ffbatch_here(
        "plan", h264_clip, "-s", source, "--encoder", "prores_ks", "--profile", "4444",
        "--chunk-frames", "3", "-o", tmp_path / "out.mov", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    chunks = json.loads(proc.stdout)["jobs"][0]["chunks"]
    assert len(chunks) == 2
    for chunk in chunks:
        assert chunk["segment"].endswith(".mov")
        assert "--profile" in chunk["argv"] and "4444" in chunk["argv"]


def test_render_refuses_ten_bit_before_loading_models(prores_master, tmp_path):
    source = tmp_path / "face.png"
    source.write_bytes(b"x")
    line = error_line(
        ffbatch_here("render", prores_master, "-s", source, "-o", tmp_path / "o.mov", "--encoder", "dnxhd")
    )
    assert "10-bit" in line and "--allow-reduce" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["face.png"]


def test_render_to_prores_4444_end_to_end(faces_clip, astronaut_path, tmp_path):
    out, report = tmp_path / "out.mov", tmp_path / "report.json"
    proc = ffbatch_here(
        "render", faces_clip, "-s", astronaut_path, "-o", out, "--encoder", "prores_ks", "--profile", "4444",
        "--report", report, "--backend", "cpu", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["dropped"] == [] and data["reduced"] == [] and data["audio"] == "copied"
    assert data["encoder"].startswith("prores_ks profile=4444 pix_fmt=yuv444p10le")
    assert data["faces_swapped"] > 0
    container, stream = video_stream(out)
    with container:
        assert "4444" in stream.codec_context.profile
        frames = list(container.decode(stream))
        assert [s.codec_context.name for s in container.streams.audio] == ["aac"]
    assert len(frames) == FACES_FRAMES and frames[0].format.name.startswith("yuv444p")


def test_chunked_prores_render_joins_mov_segments_and_keeps_tags(faces_clip, astronaut_path, tmp_path):
    """A chunked render (as on a farm) of a tagged input: segments in .mov, joined with the title and
    timecode of the input (a tmcd track in .mov), the audio as asked (--no-audio here)."""
    tagged = tmp_path / "tagged.mov"
    with av.open(str(faces_clip)) as src, av.open(str(tagged), "w") as dst:
        dst.metadata.update({"title": "Reel 7", "timecode": "10:00:00:00"})
        video = dst.add_stream_from_template(src.streams.video[0])
        for packet in src.demux(src.streams.video[0]):
            if packet.size:
                packet.stream = video
                dst.mux(packet)
    for suffix in (".mkv", ".mov"):
        out = tmp_path / f"out{suffix}"
        proc = ffbatch_here(
            "render", tagged, "-s", astronaut_path, "-o", out, "--encoder", "prores_ks", "--profile", "proxy",
            "--chunk-frames", "3", "--no-audio", "--backend", "cpu", "-q",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        info = probe(out)
        assert info.codec == "prores" and info.audio_streams == 0
        assert len(decoded_bgr(out)) == FACES_FRAMES and dict(info.container_tags)["title"] == "Reel 7"
        assert info.timecode == "10:00:00:00"
        if suffix == ".mov":  # a timecode track, as in a render in one piece
            with av.open(str(out)) as container:
                tracks = [s.metadata.get("timecode") for s in container.streams if s.type == "data"]
            assert tracks == ["10:00:00:00"]


# -- image sequences out -----------------------------------------------------------------------------


def read_image_file(path: Path) -> av.VideoFrame:
    with av.open(str(path)) as container:
        return next(container.decode(video=0))


@pytest.mark.parametrize(
    ("suffix", "pix_fmt", "read_as"),
    [
        (".png", None, "rgb24"),
        (".tiff", "rgb48le", "rgb48le"),
        (".dpx", None, "rgb24"),
        (".exr", None, "gbrpf32le"),
    ],
)
def test_sequence_writer_numbers_frames_and_keeps_pixels(h264_clip, tmp_path, suffix, pix_fmt, read_as):
    info = probe(h264_clip)
    pattern = tmp_path / f"shot.%06d{suffix}"
    with (
        FrameReader(h264_clip, info=info) as reader,
        SequenceWriter(pattern, info, pix_fmt=pix_fmt) as writer,
    ):
        images = []
        for frame in reader:
            writer.write(frame.image, frame.pts, frame.time_base)
            images.append(frame.image)
        assert not list(tmp_path.glob("shot.*"))  # nothing visible before close
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"shot.{n:06d}{suffix}" for n in range(1001, 1001 + FRAMES)]
    for number, image in zip(range(1001, 1001 + FRAMES), images, strict=True):
        picture = read_image_file(tmp_path / f"shot.{number:06d}{suffix}")
        assert picture.format.name.startswith(read_as[:5])
        if suffix == ".exr":
            rgb = picture.to_ndarray()  # H x W x (R, G, B), floats: code / 255 exactly
            assert np.array_equal(rgb[..., ::-1] * np.float32(255), image.astype(np.float32))
        else:
            assert np.array_equal(picture.to_ndarray(format="bgr24"), image)


def test_sequence_abort_leaves_nothing(h264_clip, tmp_path):
    info = probe(h264_clip)
    with pytest.raises(RuntimeError):
        with (
            FrameReader(h264_clip, info=info) as reader,
            SequenceWriter(tmp_path / "f.%04d.png", info) as writer,
        ):
            for frame in reader:
                writer.write(frame.image, frame.pts, frame.time_base)
                raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "extra", "words"),
    [
        ("f.%06d.jpg", (), "image sequences are written as"),
        ("f.%06d.%04d.png", (), "exactly one frame number"),
        ("f.%06d.exr", ("--pix-fmt", "rgb24"), "cannot be written as .exr"),
        ("f.%06d.png", ("--chunk-frames", "3"), "leave out --chunk-frames"),
        ("f.%06d.png", ("--start-number", "-1"), "--start-number"),
    ],
)
def test_bad_sequence_outputs_are_refused_up_front(h264_clip, tmp_path, name, extra, words):
    source = tmp_path / "face.png"
    source.write_bytes(b"x")
    line = error_line(ffbatch_here("render", h264_clip, "-s", source, "-o", tmp_path / name, *extra))
    assert words in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["face.png"]


def test_render_to_an_exr_sequence_from_1001(faces_clip, astronaut_path, tmp_path):
    shot = tmp_path / "shot"
    shot.mkdir()
    report = tmp_path / "r.json"
    proc = ffbatch_here(
        "render", faces_clip, "-s", astronaut_path, "-o", shot / "frame.%06d.exr", "--backend", "cpu",
        "--report", report, "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in shot.iterdir())
    assert names == [f"frame.{n:06d}.exr" for n in range(1001, 1001 + FACES_FRAMES)]
    data = json.loads(report.read_text())
    assert data["dropped"] == ["1 audio stream(s): an image sequence holds no audio"]
    assert data["encoder"] == "exr gbrpf32le, an image sequence from 1001"
    # the swapped frames, not the input: the sequence matches a video render's pixels closely
    picture = read_image_file(shot / "frame.001005.exr")
    assert picture.format.name == "gbrpf32le" and (picture.width, picture.height) == (640, 360)
    again = error_line(
        ffbatch_here("render", faces_clip, "-s", astronaut_path, "-o", shot / "frame.%06d.exr")
    )
    assert "frame.001001.exr already exists" in again
    numbered = ffbatch_here(
        "render", faces_clip, "-s", astronaut_path, "-o", shot / "f.%04d.png", "--start-number", "1",
        "--backend", "cpu", "-q",
    )  # fmt: skip
    assert numbered.returncode == 0, numbered.stderr
    assert (
        (shot / "f.0001.png").is_file()
        and (shot / "f.0008.png").is_file()
        and not (shot / "f.0009.png").exists()
    )


# -- image sequences in ------------------------------------------------------------------------------


def write_sequence(pattern: Path, images, *, first: int, pix_fmt: str = "rgb24") -> Path:
    codec = {".png": "png", ".dpx": "dpx", ".tiff": "tiff", ".exr": "exr"}[pattern.suffix]
    for number, image in enumerate(images, first):
        frame = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format=pix_fmt)
        (pattern.parent / (pattern.name % number)).write_bytes(encode_image(frame, codec))
    return pattern


def test_a_dpx_sequence_reads_as_frames_at_fps(tmp_path):
    images = [synthetic_frame(i, SIZE) for i in range(5)]
    pattern = write_sequence(tmp_path / "plate.%07d.dpx", images, first=86400)
    info = probe(pattern, fps=Fraction(24000, 1001))
    assert (info.frame_count, info.first_number, info.average_rate) == (5, 86400, Fraction(24000, 1001))
    with FrameReader(pattern, info=info) as reader:
        frames = list(reader)
    assert [np.array_equal(f.image, image) for f, image in zip(frames, images, strict=True)] == [True] * 5
    out = tmp_path / "out.mov"
    transcode(pattern, out, EncoderSettings(codec="prores_ks", profile="4444"), fps=Fraction(24000, 1001))
    made = probe(out)
    assert made.frame_count == 5 and made.average_rate == Fraction(24000, 1001)
    assert np.abs(decoded_bgr(out)[2].astype(int) - images[2]).mean() < 1.5


def test_sequence_inputs_that_are_incomplete_or_deeper_are_refused(tmp_path):
    images = [synthetic_frame(i, SIZE) for i in range(4)]
    gap = write_sequence(tmp_path / "gap.%04d.png", images, first=1)
    (tmp_path / "gap.0002.png").unlink()
    with pytest.raises(InputError, match=r"1 frame\(s\) missing between 1 and 4"):
        probe(gap)
    deep = write_sequence(tmp_path / "deep.%04d.png", images, first=1, pix_fmt="rgb48be")
    info = probe(deep)
    assert info.bit_depth == 16
    with pytest.raises(InputError, match="16-bit.*--allow-reduce"):
        check_output(EncoderSettings(codec="prores_ks", profile="4444"), info, tmp_path / "o.mov")
    with pytest.raises(InputError, match="no files match"):
        probe(tmp_path / "none.%04d.png")
    with pytest.raises(InputError, match="--fps times an image sequence"):
        probe(write_sequence(tmp_path / "one.%d.png", images[:1], first=0).parent / "one.0.png", fps=25)


def test_render_a_png_sequence_into_a_sequence_keeps_its_numbers(face_clip, astronaut_path, tmp_path):
    plate = tmp_path / "plate"
    plate.mkdir()
    images = [image for _, image in zip(range(8), (f.image for f in FrameReader(face_clip)), strict=False)]
    write_sequence(plate / "p.%04d.png", images, first=101)
    out_dir = tmp_path / "comp"
    out_dir.mkdir()
    proc = ffbatch_here(
        "render", plate / "p.%04d.png", "-s", astronaut_path, "-o", out_dir / "c.%04d.png",
        "--fps", "24", "--backend", "cpu", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == [f"c.{n:04d}.png" for n in range(101, 109)]
    changed = [
        np.abs(
            read_image_file(out_dir / f"c.{n:04d}.png").to_ndarray(format="bgr24").astype(int) - image
        ).max()
        for n, image in zip(range(101, 109), images, strict=True)
    ]
    assert max(changed) > 40  # faces were swapped, so pixels changed
    video = tmp_path / "c.mov"
    proc = ffbatch_here(
        "render", plate / "p.%04d.png", "-s", astronaut_path, "-o", video, "--encoder", "prores_ks",
        "--fps", "23.976", "--backend", "cpu", "-q",
    )  # fmt: skip
    # RGB frames into ProRes 422 would subsample the chroma: refused until the user says so
    assert "would be subsampled to yuv422p10le" in error_line(proc)
    proc = ffbatch_here(
        "render", plate / "p.%04d.png", "-s", astronaut_path, "-o", video, "--encoder", "prores_ks",
        "--profile", "4444", "--fps", "23.976", "--backend", "cpu", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert probe(video).frame_count == 8 and probe(video).average_rate == Fraction(24000, 1001)


def with_subtitles(path: Path) -> Path:
    """An H.264 .mkv with a Spanish SubRip track (a cue at 0 s)."""
    header = (
        b"[Script Info]\nScriptType: v4.00+\n\n[V4+ Styles]\nFormat: Name, Fontname, Fontsize\n"
        b"Style: Default,Arial,20\n\n[Events]\nFormat: Layer, Start, End, Style, Text\n"
    )
    out = av.open(str(path), "w")
    try:
        video = out.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        video.width, video.height, video.pix_fmt = *SIZE, "yuv420p"
        subs = out.add_stream("subrip")
        subs.metadata["language"] = "spa"
        subs.codec_context.subtitle_header = header  # what the SubRip encoder opens with
        subs.codec_context.extradata = header
        for i in range(FRAMES):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, SIZE), format="bgr24")
            frame.pts = i
            out.mux(video.encode(frame))
            if i == 0:
                cue = av.Packet(b"0,0,Default,,0,0,0,,Hola")
                cue.pts = cue.dts = 0
                cue.duration = 100
                cue.time_base = Fraction(1, 1000)
                cue.stream = subs
                out.mux(cue)
        out.mux(video.encode(None))
    finally:
        out.close()
    return path


def test_subtitles_are_kept_where_the_container_holds_them(tmp_path, caplog):
    src = with_subtitles(tmp_path / "subs.mkv")
    info = probe(src)
    assert [kind for _, kind, _ in info.other_streams] == ["subtitle"]
    out = tmp_path / "out.mkv"
    with (
        FrameReader(src, info=info) as reader,
        VideoWriter(out, info, EncoderSettings(preset="ultrafast"), audio_from=src) as writer,
    ):
        for frame in reader:
            writer.write(frame.image, frame.pts, frame.time_base)
    assert writer.dropped == []
    with av.open(str(out)) as container:
        subs = container.streams.subtitles
        assert [(s.codec_context.name, s.language) for s in subs] == [("srt", "spa")]
        assert [bytes(p) for p in container.demux(subs[0]) if p.size] == [b"0,0,Default,,0,0,0,,Hola"]
    caplog.set_level(logging.WARNING, logger="ffbatch")
    mp4 = tmp_path / "out.mp4"
    writer = VideoWriter(mp4, info, EncoderSettings(preset="ultrafast"), audio_from=src)
    writer.abort()
    assert writer.dropped == ["subtitle stream #1 (srt): a mp4 file cannot hold it"]
    assert any("left out of the output" in r.getMessage() for r in caplog.records)


def test_av1_in_webm_gets_opus_audio(tmp_path):
    src = make_master(tmp_path / "aac.mkv", codec="libx264", pix_fmt="yuv420p", audio=(("aac", "eng"),))
    out = tmp_path / "out.webm"
    transcode(src, out, EncoderSettings(codec="libsvtav1", preset="13"))
    with av.open(str(out)) as container:
        assert [s.codec_context.name for s in container.streams.audio] == ["opus"]
        assert container.streams.audio[0].language == "eng"
        assert len(list(container.decode(video=0))) == FRAMES
