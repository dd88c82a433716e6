"""A trimmed video as FaceFusion's --trim-frame-start/--trim-frame-end make one: the rendered
frames START..END-1 (a `render --frames START:END` segment) as a clip of their own that starts at
0, with the input's sound of the same span, cut to the sample.

FaceFusion (3.8.1, ffmpeg.restore_audio) cuts the input's audio from START/fps to END/fps and
re-encodes it; here the span is the segment's own first and last frame times (exact for a variable
frame rate too), and the audio is re-encoded to AAC (Opus for WebM), since a cut inside a packet
cannot be copied.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import av.error
import numpy as np

from facefusion_batch.errors import InputError, OutputError
from facefusion_batch.fsutil import AtomicFile, ffmpeg_path
from facefusion_batch.video.encode.formats import container_format_for


def trim_range(frame_total: int, start: int | None, end: int | None) -> tuple[int, int]:
    """FaceFusion's vision.restrict_trim_frame: each bound clamped to 0..frame_total, a missing one
    the video's start or end; START inclusive, END exclusive."""
    first = 0 if start is None else max(0, min(int(start), frame_total))
    last = frame_total if end is None else max(0, min(int(end), frame_total))
    return first, last


def _span(segment) -> tuple[Fraction, Fraction]:
    """The segment's first frame time and its end (last frame's time plus its duration, else the
    median step between frames), in seconds, read from its packets (Matroska records no stream
    duration)."""
    stream = segment.streams.video[0]
    timed = sorted((p.pts, p.duration or 0) for p in segment.demux(stream) if p.size and p.pts is not None)
    segment.seek(0)
    if not timed:
        raise InputError(f"{segment.name} holds no video frames; it cannot be trimmed")
    steps = sorted(b[0] - a[0] for a, b in zip(timed, timed[1:], strict=False))
    last, duration = timed[-1]
    duration = duration or (steps[len(steps) // 2] if steps else 0)
    tb = Fraction(stream.time_base or 1)
    return timed[0][0] * tb, (last + duration) * tb


def write_trimmed(segment: Path, source: Path, output: Path) -> None:
    """`segment`'s video, moved to start at 0, with `source`'s audio tracks of the same span."""
    fmt = container_format_for(output)
    out = AtomicFile(output)
    try:
        options = {"movflags": "+faststart"} if fmt in ("mp4", "mov") else {}
        with (
            av.open(ffmpeg_path(segment)) as seg,
            av.open(ffmpeg_path(source)) as src,
            av.open(ffmpeg_path(out.temp), mode="w", format=fmt, container_options=options) as dst,
        ):
            t0, t1 = _span(seg)
            video_in = seg.streams.video[0]
            video = dst.add_stream_from_template(video_in)
            video.time_base = video_in.time_base
            # the sound first (a few MB an hour), so that the muxer gets both in time order
            queued = [
                p for s in src.streams.audio for p in _cut_audio(src, s, _audio_stream(dst, s, fmt), t0, t1)
            ]
            queued.sort(key=lambda p: (p.pts or 0) * p.time_base)
            shift = round(t0 / Fraction(video_in.time_base or 1))
            for packet in seg.demux(video_in):
                if packet.size == 0 or packet.pts is None:
                    continue
                packet.pts -= shift
                if packet.dts is not None:
                    packet.dts -= shift
                while queued and (queued[0].pts or 0) * queued[0].time_base <= packet.pts * packet.time_base:
                    dst.mux(queued.pop(0))
                packet.stream = video
                dst.mux(packet)
            for packet in queued:
                dst.mux(packet)
        out.commit()
    except (av.error.FFmpegError, OSError, ValueError) as exc:  # ValueError: PyAV's unknown codec
        raise OutputError(f"cannot write {output}: {getattr(exc, 'strerror', None) or exc}") from None
    finally:
        out.abort()


def _audio_stream(dst, stream, fmt: str):
    ctx = stream.codec_context
    out = dst.add_stream(
        "libopus" if fmt == "webm" else "aac", rate=48000 if fmt == "webm" else ctx.sample_rate
    )
    out.layout = ctx.layout.name
    if stream.language:
        out.metadata["language"] = stream.language
    return out


def _cut_audio(src, stream, out, t0: Fraction, t1: Fraction) -> list:
    """The packets of `stream`'s samples from t0 to t1 (seconds), encoded for `out`, from 0."""
    rate = stream.codec_context.sample_rate
    first, last = round(t0 * rate), round(t1 * rate)  # the span in samples of the input's clock
    resampler = av.AudioResampler(format=out.codec_context.format, layout=out.layout, rate=out.rate)
    packets: list = []
    written = 0
    src.seek(0)
    for frame in src.decode(stream):
        if frame.pts is None:
            continue
        at = round(frame.pts * frame.time_base * rate)
        if at >= last:
            break
        lo, hi = max(first, at), min(last, at + frame.samples)
        if hi <= lo:
            continue
        samples = frame.to_ndarray()
        if frame.format.is_planar:
            piece = samples[:, lo - at : hi - at]
        else:
            channels = frame.layout.nb_channels
            piece = samples[:, (lo - at) * channels : (hi - at) * channels]
        cut = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(piece), format=frame.format.name, layout=frame.layout.name
        )
        cut.sample_rate, cut.time_base, cut.pts = rate, Fraction(1, rate), written
        written += hi - lo
        for converted in resampler.resample(cut):
            packets += out.encode(converted)
    for converted in resampler.resample(None):
        packets += out.encode(converted)
    return packets + out.encode(None)
