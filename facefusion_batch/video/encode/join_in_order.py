"""Whole videos played one after another in one file, by stream copy (FaceFusion's job runner joins
the steps that share an output so; here each piece keeps its own timestamps, moved to start where
the piece before it ends).

Every stream of the first piece (video, audio) is carried; each later piece must have the same
streams with the same codec parameters, or the join is refused (exit 2) naming the piece. A piece
starts where the one before it ends (the latest end of any of its streams, as its container records
them), every stream moved by the same time, so the picture and sound of one piece stay together. The
packets of a later piece's audio that end at or before its zero (an encoder's priming, which the
piece's own edit list hides) are left out: nothing of them is heard.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import av.error

from facefusion_batch.errors import InputError, OutputError
from facefusion_batch.fsutil import AtomicFile, ffmpeg_path
from facefusion_batch.video.encode.formats import container_format_for


def _layout(container) -> list[tuple[Any, ...]]:
    """What a stream copy needs to agree on, per carried stream."""
    out: list[tuple[Any, ...]] = []
    for s in container.streams:
        if s.type == "video":
            cc = s.codec_context
            out.append(
                (
                    "video",
                    cc.name,
                    cc.width,
                    cc.height,
                    str(cc.pix_fmt),
                    bytes(cc.extradata or b""),
                    s.time_base,
                )
            )
        elif s.type == "audio":
            cc = s.codec_context
            out.append(("audio", cc.name, cc.sample_rate, cc.channels, s.time_base))
    return out


def _describe(entry: tuple[Any, ...]) -> str:
    return " ".join(str(v) for v in entry[:5] if not isinstance(v, bytes))


def _end(stream) -> Fraction:
    """When a stream of a piece ends, in seconds from the piece's zero: its start and duration as
    the container records them (the last frame's duration included)."""
    start = stream.start_time or 0
    if stream.duration is None:
        raise InputError(f"a stream of {stream.container.name} records no duration; it cannot be joined")
    return (start + stream.duration) * stream.time_base


def join_in_order(pieces: list[Path], output: Path) -> None:
    """`pieces` one after another into `output` (written atomically)."""
    fmt = container_format_for(output)
    layouts = []
    for piece in pieces:
        try:
            with av.open(ffmpeg_path(piece)) as src:
                layouts.append(_layout(src))
        except (av.error.FFmpegError, OSError) as exc:
            raise InputError(f"cannot read {piece}: {exc}") from None
    for piece, layout in zip(pieces[1:], layouts[1:], strict=True):
        if layout != layouts[0]:
            first, this = "; ".join(map(_describe, layouts[0])), "; ".join(map(_describe, layout))
            raise InputError(
                f"{piece} cannot follow {pieces[0]} in {output}: its streams differ ({this} against "
                f"{first}, or the encoder's headers); a join by stream copy needs the same"
            )
    out = AtomicFile(output)
    try:
        options = {"movflags": "+faststart"} if fmt in ("mp4", "mov") else {}
        with av.open(ffmpeg_path(out.temp), mode="w", format=fmt, container_options=options) as dst:
            with av.open(ffmpeg_path(pieces[0])) as template:
                kept = [s for s in template.streams if s.type in ("video", "audio")]
                streams = [dst.add_stream_from_template(s) for s in kept]
                for o, s in zip(streams, kept, strict=True):
                    o.time_base = s.time_base
            offset = Fraction(0)  # where the current piece starts, in seconds
            last_dts: dict[int, int] = {}
            for n, piece in enumerate(pieces):
                with av.open(ffmpeg_path(piece)) as src:
                    carried = [s for s in src.streams if s.type in ("video", "audio")]
                    end = max((offset + _end(s) for s in carried), default=offset)
                    for packet in src.demux(carried):
                        if packet.size == 0 or packet.pts is None:
                            continue
                        if n and packet.pts + (packet.duration or 0) <= 0:
                            continue  # an audio encoder's priming, which the piece's edit list hides
                        shift = round(offset / packet.time_base)
                        packet.pts += shift
                        if packet.dts is not None:
                            packet.dts += shift
                        index = carried.index(packet.stream)
                        # each piece's encoder starts its decode clock a frame or two early: where
                        # that reaches back past the piece before, it moves forward (dts <= pts)
                        if packet.dts is not None and index in last_dts and packet.dts <= last_dts[index]:
                            packet.dts = last_dts[index] + 1
                            if packet.dts > packet.pts:
                                raise InputError(f"{piece} cannot follow the piece before it in {output}")
                        if packet.dts is not None:
                            last_dts[index] = packet.dts
                        packet.stream = streams[index]
                        dst.mux(packet)
                    offset = end
        out.commit()
    except (av.error.FFmpegError, OSError) as exc:
        raise OutputError(f"cannot write {output}: {getattr(exc, 'strerror', None) or exc}") from None
    finally:
        out.abort()
