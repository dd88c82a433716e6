"""Inspect a video file before any work is done on it.

`probe` opens the file once, reads the container and video-stream headers and
decodes the first frame (the only reliable place PyAV exposes the display-matrix
rotation). Every way a user can hand us a bad file ends in an `InputError` that
names the file and says what is wrong.
"""

from __future__ import annotations

import dataclasses
import math
import re
import stat
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.error

from facefusion_batch.errors import InputError
from facefusion_batch.fsutil import ffmpeg_path
from facefusion_batch.video.decode.timing import ClockMap, has_clock, scan_clock, timeline_shift


@dataclass(frozen=True)
class VideoInfo:
    """What the pipeline needs to know about an input video.

    `width`/`height` are the dimensions as displayed, i.e. after the rotation is
    applied; `coded_width`/`coded_height` are those of the stored (decoded)
    pictures. `rotation` is the clockwise rotation in degrees (0, 90, 180 or
    270) that turns a decoded picture upright. `frame_count` is the container's
    frame count when it declares one (`frame_count_estimated` is False), else an
    estimate from duration x average rate (`frame_count_estimated` is True), else
    None. `video_stream_index` is the stream the reader decodes (cover art is skipped).
    """

    path: Path
    width: int
    height: int
    coded_width: int
    coded_height: int
    rotation: int
    time_base: Fraction
    average_rate: Fraction | None
    frame_count: int | None
    duration_s: float | None
    codec: str
    pix_fmt: str
    bit_depth: int
    audio_streams: int
    format_name: str
    frame_count_estimated: bool = False
    video_stream_index: int = 0
    # FFmpeg's colour tags of the first frame (AVColorSpace, AVColorRange, AVColorPrimaries,
    # AVColorTransferCharacteristic); 2 / 0 / 2 / 2 mean "unspecified".
    color_space: int = 2
    color_range: int = 0
    color_primaries: int = 2
    color_trc: int = 2
    # What the output carries over: sample aspect ratio (None: square or unknown), AVFieldOrder of
    # the stream (0 unknown, 1 progressive, 2-5 interlaced) and whether the first frame is
    # interlaced, container tags (title, timecode, ...), the video stream's tags (language,
    # timecode) and the other streams (index, type, codec) besides video and audio.
    sample_aspect_ratio: Fraction | None = None
    field_order: int = 0
    interlaced: bool = False
    container_tags: tuple[tuple[str, str], ...] = ()
    video_tags: tuple[tuple[str, str], ...] = ()
    other_streams: tuple[tuple[int, str, str], ...] = ()
    # an image sequence input (shot/frame.%06d.dpx): how FFmpeg opens it (image2, frame rate,
    # first number); None / () for a video file
    open_format: str | None = None
    open_options: tuple[tuple[str, str], ...] = ()
    first_number: int | None = None
    # seconds added to every video and audio timestamp so that none is negative (an MPEG-TS whose
    # clock wrapped starts below 0; see video/decode/timing.py); 0 for almost every input
    start_shift: Fraction = Fraction(0)
    # when the container says the video stream ends, in seconds of its own timeline (a Matroska
    # track's DURATION tag, else the stream's start + duration); None: it does not say.
    # Packets that stop well before it mean the file was cut short.
    declared_end_s: float | None = None
    # an MPEG-TS/PS whose clock jumps mid-clip (spliced recordings): where, and the time each part
    # is moved by so that it follows the one before (video/decode/timing.py); empty for almost every input
    clock: ClockMap = ClockMap()

    @property
    def timecode(self) -> str | None:
        """The start timecode (container tag, video stream tag, or a tmcd track's), if any."""
        for tags in (self.container_tags, self.video_tags):
            for key, value in tags:
                if key.lower() == "timecode":  # Matroska tags are upper case
                    return value
        return None


def rotation_from_display(ccw_degrees: float) -> int:
    """Turn PyAV's `VideoFrame.rotation` into our clockwise 0/90/180/270.

    PyAV reports the display matrix as a counter-clockwise angle in [-180, 180]
    (an iPhone portrait clip reads -90); displaying the picture upright needs
    the opposite, clockwise, turn. Angles that are not multiples of 90 are
    rounded to the nearest quarter turn.
    """
    return int(round(-float(ccw_degrees) / 90.0)) % 4 * 90


def _bit_depth(pix_fmt: str) -> int:
    try:
        fmt = av.VideoFormat(pix_fmt)
    except (ValueError, av.error.FFmpegError):
        return 8
    bits = [c.bits for c in fmt.components if not c.is_alpha]
    return max(bits) if bits else 8


_STREAM_NAME = re.compile(r"^(-|pipe:\d*)$")


def check_not_a_pipe(path: Path, what: str = "input video") -> None:
    """ffbatch reads its input more than once (probe, frame index, the frames, the audio), so it
    needs a file it can seek in: `-` and FFmpeg's `pipe:N` (standard input) or a FIFO are exit 2
    here, never a read that waits on a pipe. A file that is really named `pipe:0` is that file."""
    try:
        mode = path.stat().st_mode
        pipe = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
    except OSError:  # no such file: a name that means standard input to FFmpeg and to shells
        pipe = bool(_STREAM_NAME.match(str(path)))
    if pipe:
        raise InputError(
            f"{what} {path}: ffbatch reads a file it can seek in, not standard input or a pipe; "
            "save the stream to a file first"
        )


def check_readable_file(path: Path, what: str = "input video") -> None:
    """Raise InputError unless `path` is an existing, readable, non-empty file."""
    check_not_a_pipe(path, what)
    if not path.exists():
        if path.is_symlink():
            raise InputError(f"{what} {path} is a broken symbolic link")
        raise InputError(f"{what} {path} does not exist")
    if path.is_dir():
        raise InputError(f"{what} {path} is a directory, not a video file")
    if not path.is_file():
        raise InputError(f"{what} {path} is not a regular file")
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except PermissionError:
        raise InputError(f"{what} {path} cannot be read: permission denied") from None
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    if path.stat().st_size == 0:
        raise InputError(f"{what} {path} is empty (0 bytes)")


def pick_video_stream(container: av.container.InputContainer) -> av.video.stream.VideoStream | None:
    """The first video stream that is real video (not cover art)."""
    candidates = [
        s for s in container.streams.video if not (s.disposition & av.stream.Disposition.attached_pic)
    ]
    return candidates[0] if candidates else None


DEFAULT_SEQUENCE_FPS = Fraction(24)
_NUMBER = re.compile(r"%(0\d+)?d")


def sequence_numbers(pattern: Path) -> list[int]:
    """The frame numbers present for a printf pattern (frame.%06d.dpx), in order."""
    name = pattern.name
    match = _NUMBER.search(name)
    if match is None:
        return []
    width = int(match.group(1)) if match.group(1) else 0
    digits = rf"(\d{{{width}}})" if width else r"(\d+)"
    regex = re.compile(re.escape(name[: match.start()]) + digits + re.escape(name[match.end() :]) + "$")
    parent = pattern.parent if str(pattern.parent) else Path(".")
    if not parent.is_dir():
        return []
    found = (regex.match(p.name) for p in parent.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def open_input(info: VideoInfo, **kwargs) -> av.container.InputContainer:
    """Open the probed input again (a video file, or an image sequence as it was probed)."""
    path = ffmpeg_path(info.path)  # absolute: a file named `file:x` is that file, not a protocol
    if info.open_format is None:
        return av.open(path, mode="r", **kwargs)
    return av.open(path, mode="r", format=info.open_format, options=dict(info.open_options), **kwargs)


def probe(path: str | Path, *, fps: float | Fraction | None = None) -> VideoInfo:
    """Read the headers (and first frame) of `path`; InputError on bad input. A printf pattern
    (shot/frame.%06d.exr) is an image sequence, timed at `fps` (default 24)."""
    path = Path(path)
    if _NUMBER.search(path.name):
        return _probe_sequence(path, fps)
    if fps is not None:
        raise InputError(f"--fps times an image sequence input; {path} is a video with its own timing")
    check_readable_file(path)
    try:
        container = av.open(ffmpeg_path(path), mode="r")
    except av.error.FFmpegError as exc:
        raise InputError(
            f"input video {path} cannot be read as a video: it is damaged, incomplete (an .mp4/.mov "
            f"cut short) or not a media file (FFmpeg: {_ffmpeg_reason(exc)})"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"input video {path} cannot be opened: {exc}") from None
    try:
        info = _probe_open(path, container)
        clocked = has_clock(container)
    finally:
        container.close()
    return _with_clock(info) if clocked else info


def _with_clock(info: VideoInfo) -> VideoInfo:
    """`info` with the clock map of its MPEG-TS/PS file (one demux pass, no decoding). Where the
    clock jumps, the container's duration spans clocks, not the video: the span of the parts put
    end to end replaces it, and no end is declared."""
    with av.open(ffmpeg_path(info.path), mode="r") as container:
        clock = scan_clock(container, info.video_stream_index)
    if not clock:
        return info
    duration = clock.video_span_s
    count, estimated = info.frame_count, info.frame_count_estimated
    if estimated and duration is not None and info.average_rate:
        count = max(1, int(math.floor(duration * float(info.average_rate) + 0.5)))
    return dataclasses.replace(info, clock=clock, duration_s=duration, frame_count=count, declared_end_s=None)


# --fps bounds: Matroska keeps milliseconds, so over 1000 fps two frames share a timestamp (1e9 into
# .mp4 lost a frame); under 0.01 (a frame per 100 s) the rate's 1001 denominator rounds it away.
SEQUENCE_FPS_RANGE = (0.01, 1000.0)


def check_sequence_fps(fps: float | Fraction | None) -> None:
    """Exit 2 for an --fps no output container can time exactly (nan and inf included)."""
    low, high = SEQUENCE_FPS_RANGE
    if fps is not None and not low <= float(fps) <= high:
        raise InputError(
            f"--fps must be from {low:g} to {high:g} frames a second (got {float(fps):g}): outside it "
            "frames would share a timestamp or their times round away"
        )


def sequence_rate(fps: float | Fraction | None) -> Fraction:
    """--fps as a rate: 23.976 / 29.97 / 59.94 mean the NTSC rates 24000/1001 & co., as editors do."""
    if not fps:
        return DEFAULT_SEQUENCE_FPS
    if isinstance(fps, Fraction):
        return fps
    ntsc = round(float(fps) * 1.001)
    if ntsc > 0 and float(fps) != int(fps) and abs(float(fps) - ntsc / 1.001) < 0.0015:
        return Fraction(ntsc * 1000, 1001)
    return Fraction(float(fps)).limit_denominator(1001)


def _probe_sequence(pattern: Path, fps: float | Fraction | None) -> VideoInfo:
    numbers = sequence_numbers(pattern)
    if not numbers:
        raise InputError(f"input {pattern}: no files match this image sequence pattern")
    missing = numbers[-1] - numbers[0] + 1 - len(numbers)
    if missing:
        raise InputError(
            f"input {pattern}: {missing} frame(s) missing between {numbers[0]} and {numbers[-1]}; "
            "a sequence must be complete"
        )
    check_sequence_fps(fps)
    rate = sequence_rate(fps)
    options = (("framerate", f"{rate.numerator}/{rate.denominator}"), ("start_number", str(numbers[0])))
    try:
        container = av.open(str(pattern), mode="r", format="image2", options=dict(options))
    except av.error.FFmpegError as exc:
        raise InputError(
            f"input {pattern} cannot be read as an image sequence: {_ffmpeg_reason(exc)}"
        ) from None
    try:
        info = _probe_open(pattern, container, sequence=True)
    finally:
        container.close()
    return dataclasses.replace(
        info,
        frame_count=len(numbers),
        frame_count_estimated=False,
        duration_s=float(len(numbers) / rate),
        average_rate=rate,
        open_format="image2",
        open_options=options,
        first_number=numbers[0],
    )


def _ffmpeg_reason(exc: Exception) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return str(text).strip() or type(exc).__name__


# Demuxers that turn things which are not videos into a "video stream".
_TEXT_FORMATS = frozenset({"tty"})


def _is_still_image_format(name: str) -> bool:
    return name in ("image2", "image2pipe") or name.endswith("_pipe")


def _probe_open(path: Path, container: av.container.InputContainer, sequence: bool = False) -> VideoInfo:
    format_name = container.format.name
    if format_name in _TEXT_FORMATS:
        raise InputError(f"input video {path} is a text file, not a video")
    if _is_still_image_format(format_name) and not sequence:
        raise InputError(f"input video {path} is a still image ({format_name}), not a video")
    stream = pick_video_stream(container)
    if stream is None:
        if any(s.disposition & av.stream.Disposition.attached_pic for s in container.streams.video):
            raise InputError(f"input video {path} has no video stream (only cover art: a still picture)")
        kinds = sorted({s.type for s in container.streams})
        found = ", ".join(kinds) if kinds else "no streams at all"
        raise InputError(f"input video {path} has no video stream (found: {found})")
    ctx = stream.codec_context
    if ctx is None:
        raise InputError(
            f"input video {path}: the video codec of stream #{stream.index} is not supported by this FFmpeg"
        )

    # the container's colour tags, read before decoding (the decoder overwrites them with the frame's)
    stream_colour = (ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc)
    first = _first_frame(path, container, stream)
    rotation = rotation_from_display(first.rotation)
    coded_w, coded_h = first.width, first.height
    width, height = (coded_h, coded_w) if rotation in (90, 270) else (coded_w, coded_h)
    pix_fmt = first.format.name

    time_base = stream.time_base or Fraction(1, 90000)
    rate = stream.average_rate or stream.guessed_rate or None
    average_rate = Fraction(rate) if rate else None

    duration_s: float | None = None
    if stream.duration and stream.duration > 0:
        duration_s = float(stream.duration * time_base)
    elif container.duration and container.duration > 0:
        duration_s = container.duration / av.time_base

    frame_count: int | None = None
    estimated = False
    if stream.frames and stream.frames > 0:
        frame_count = int(stream.frames)
    elif duration_s is not None and average_rate:
        frame_count = max(1, int(math.floor(duration_s * float(average_rate) + 0.5)))
        estimated = True

    sar = stream.sample_aspect_ratio
    sar = Fraction(sar) if sar and Fraction(sar) != 1 else None
    others = tuple(
        (s.index, _stream_kind(s), _stream_codec(s))
        for s in container.streams
        if s.type != "audio" and s.index != stream.index
    )
    container_tags = dict(container.metadata)
    for s in container.streams:
        if s.type == "data" and "timecode" in s.metadata and "timecode" not in container_tags:
            container_tags["timecode"] = s.metadata["timecode"]  # a QuickTime tmcd track
    return VideoInfo(
        path=path,
        width=width,
        height=height,
        coded_width=coded_w,
        coded_height=coded_h,
        rotation=rotation,
        time_base=Fraction(time_base),
        average_rate=average_rate,
        frame_count=frame_count,
        duration_s=duration_s,
        codec=ctx.name,
        pix_fmt=pix_fmt,
        bit_depth=_bit_depth(pix_fmt),
        audio_streams=len(container.streams.audio),
        format_name=container.format.name,
        frame_count_estimated=estimated,
        video_stream_index=stream.index,
        color_space=_tag(first.colorspace, stream_colour[0], 2),
        color_range=_tag(first.color_range, stream_colour[1], 0),
        color_primaries=_tag(first.color_primaries, stream_colour[2], 2),
        color_trc=_tag(first.color_trc, stream_colour[3], 2),
        sample_aspect_ratio=sar,
        field_order=int(ctx.field_order or 0),
        interlaced=bool(first.interlaced_frame),
        container_tags=tuple(sorted(container_tags.items())),
        video_tags=tuple(sorted(dict(stream.metadata).items())),
        other_streams=others,
        start_shift=timeline_shift(container),
        declared_end_s=_declared_end(stream),
    )


_DURATION_TAG = re.compile(r"^(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$")


def _declared_end(stream) -> float | None:
    """When the container says the video stream ends (seconds), or None when it does not say."""
    match = _DURATION_TAG.match(str(stream.metadata.get("DURATION", "")).strip())
    if match:  # Matroska: the track's end time, written when the file was finished
        hours, minutes, seconds = match.groups()
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    time_base = stream.time_base
    if stream.duration and stream.duration > 0 and time_base:
        return float((int(stream.start_time or 0) + stream.duration) * time_base)
    return None  # the file's duration may be another stream's: no sign of truncation for the video


def _tag(frame_value, stream_value, unspecified: int) -> int:
    """The frame's colour tag, else the container's (ProRes frames often leave primaries and
    transfer unspecified while the .mov says them)."""
    value = int(frame_value or 0)
    if value == unspecified and stream_value is not None and int(stream_value) != unspecified:
        return int(stream_value)
    return value


def _stream_kind(stream) -> str:
    """A stream's type for the report; a video stream other than the one rendered is named as
    what it is: cover art (an attached picture) or a second video."""
    if stream.type != "video":
        return stream.type
    return "cover art" if stream.disposition & av.stream.Disposition.attached_pic else "second video"


def _stream_codec(stream) -> str:
    ctx = getattr(stream, "codec_context", None)
    if ctx is not None and ctx.name:
        return ctx.name
    return stream.metadata.get("handler_name", "data") if stream.type == "data" else stream.type


def _first_frame(path: Path, container: av.container.InputContainer, stream) -> av.VideoFrame:
    """The first picture the decoder gives. Packets it refuses are stepped over: a stream cut
    mid-GOP (VP8/VP9 refuse an inter frame without its keyframe) has its picture further on, and
    the reader then decides (exit 2, or `--on-decode-error skip` fills the frames in)."""
    first_error: av.error.FFmpegError | None = None
    try:
        for packet in container.demux(stream):
            try:
                for frame in packet.decode():
                    return frame
            except av.error.FFmpegError as exc:
                first_error = first_error or exc
    except av.error.FFmpegError as exc:
        first_error = first_error or exc
    if first_error is not None:
        raise InputError(
            f"input video {path} is corrupt: none of its video frames can be decoded "
            f"({_ffmpeg_reason(first_error)})"
        )
    raise InputError(f"input video {path} contains no decodable video frames")
