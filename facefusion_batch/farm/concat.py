"""Join segments into one video by stream copy (no re-encode), with the input's audio.

Segments are joined in pts order. They must agree on every codec parameter
(codec, size, pixel format, time base and the encoder's headers) and each must
start with a keyframe; otherwise a stream copy would make a file players choke
on, so the join is refused with a message naming the segments.

Continuity: segments tagged by `render --frames` say which frames they hold,
so a missing or doubled range is found exactly (variable frame rate too).
Untagged segments are checked by their timestamps: an overlap is any segment
starting at or before the previous one's last pts; a gap is a jump of more than
1.5 frame durations.

The output is written to a temporary file beside it and renamed when complete.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.error

from facefusion_batch.errors import FfbatchError, InputError, Interrupted, OutputError
from facefusion_batch.farm.reuse import TAG_RENDERED_BY, TAG_SETTINGS_ALONE
from facefusion_batch.fsutil import AtomicFile, check_name_length, claim_output, ffmpeg_path
from facefusion_batch.video.decode.probe import check_readable_file, pick_video_stream
from facefusion_batch.video.decode.segments import TAG_FRAME_COUNT, TAG_FRAMES, TAG_INPUT, TAG_SETTINGS
from facefusion_batch.video.encode.audio import AudioMuxer
from facefusion_batch.video.encode.writer import carried_tags, container_format_for, iso_timescales
from facefusion_batch.video.encode.written import forget_written, record_written

log = logging.getLogger("ffbatch")


@dataclass
class SegmentInfo:
    path: Path
    codec: str
    width: int
    height: int
    pix_fmt: str
    time_base: Fraction
    extradata: bytes
    stream_index: int
    packets: int
    first_pts: int
    last_pts: int  # the largest pts
    frame_step: Fraction | None  # median pts gap, in time_base units
    starts_with_keyframe: bool
    frames: tuple[int, int] | None  # from the ffbatch_frames tag
    frame_count: int | None
    settings: str | None
    input: str | None
    settings_alone: str | None = None  # farm/reuse.py's tags: the digest without the code terms
    rendered_by: str | None = None  # the ffbatch version and render revision that rendered it
    decode_pts: tuple[int, ...] = ()  # every packet's pts, in decode (file) order
    dts_missing: bool = False  # Matroska stores no dts: the first packets of a B-frame stream lack one

    def describe_codec(self) -> str:
        return f"{self.codec} {self.width}x{self.height} {self.pix_fmt}, time base {self.time_base}"

    def seconds(self, pts: int) -> float:
        return float(pts * self.time_base)


@dataclass
class JoinReport:
    output: Path
    segments: int
    packets: int
    audio_packets: int
    seconds: float
    bytes: int


def _tag_range(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    start, _, end = text.partition(":")
    try:
        return int(start), int(end)
    except ValueError:
        return None


def inspect_segment(path: Path) -> SegmentInfo:
    path = Path(path)
    check_readable_file(path, "segment")
    try:
        container = av.open(ffmpeg_path(path))
    except av.error.FFmpegError as exc:
        raise InputError(f"segment {path} cannot be read as a video: {exc}") from None
    try:
        stream = pick_video_stream(container)
        if stream is None:
            raise InputError(f"segment {path} has no video stream")
        par = stream.codec_context
        pts: list[int] = []
        first_key = None
        dts_missing = pts_missing = False
        for packet in container.demux(stream):
            if not packet.size:
                continue
            if first_key is None:
                first_key = bool(packet.is_keyframe)
            if packet.pts is not None:
                pts.append(packet.pts)
            dts_missing |= packet.dts is None
            pts_missing |= packet.pts is None
        tags = {k.lower(): v for k, v in container.metadata.items()}
        if not pts:
            raise InputError(f"segment {path} holds no video frames")
        ordered = sorted(pts)
        gaps = sorted(b - a for a, b in zip(ordered, ordered[1:], strict=False))
        count = tags.get(TAG_FRAME_COUNT)
        if stream.time_base is None:
            raise InputError(f"segment {path} has a video stream without a time base")
        return SegmentInfo(
            path=path,
            codec=par.name,
            width=par.width,
            height=par.height,
            pix_fmt=par.pix_fmt or "",
            time_base=Fraction(stream.time_base),
            extradata=bytes(par.extradata or b""),
            stream_index=stream.index,
            packets=len(pts),
            first_pts=ordered[0],
            last_pts=ordered[-1],
            frame_step=Fraction(gaps[len(gaps) // 2]) if gaps else None,
            starts_with_keyframe=bool(first_key),
            frames=_tag_range(tags.get(TAG_FRAMES)),
            frame_count=int(count) if count and count.isdigit() else None,
            settings=tags.get(TAG_SETTINGS),
            input=tags.get(TAG_INPUT),
            settings_alone=tags.get(TAG_SETTINGS_ALONE),
            rendered_by=tags.get(TAG_RENDERED_BY),
            decode_pts=() if pts_missing else tuple(pts),
            dts_missing=dts_missing,
        )
    except av.error.FFmpegError as exc:
        raise InputError(f"segment {path} is damaged: {exc}") from None
    finally:
        container.close()


def check_segments(segments: list[SegmentInfo], across_versions: bool = False) -> list[SegmentInfo]:
    """The segments in pts order; InputError saying what is wrong if they cannot be joined.
    `across_versions`: segments other ffbatch versions rendered with the same settings may be
    joined (--reuse-across-versions, which said so when it reused them)."""
    if not segments:
        raise InputError("concat needs at least one segment")
    seen: dict[Path, Path] = {}
    for seg in segments:
        key = seg.path.resolve()
        if key in seen:
            raise InputError(f"segment {seg.path} is given twice")
        seen[key] = seg.path
    first = segments[0]
    for seg in segments[1:]:
        if seg.describe_codec() != first.describe_codec():
            raise InputError(
                f"segments {first.path} and {seg.path} differ in codec parameters "
                f"({first.describe_codec()} vs {seg.describe_codec()}); they cannot be joined without "
                "re-encoding"
            )
        if seg.extradata != first.extradata:
            raise InputError(
                f"segments {first.path} and {seg.path} differ in codec parameters (the encoder headers "
                "differ: rendered with other encoder settings?); they cannot be joined without re-encoding"
            )
    for seg in segments:
        if seg.frames is not None and seg.packets != seg.frames[1] - seg.frames[0]:
            a, b = seg.frames
            raise InputError(
                f"segment {seg.path} holds {seg.packets} frames but its tag says frames {a}:{b} "
                f"({b - a}); it was cut short or damaged: render it again"
            )
        if not seg.starts_with_keyframe:
            raise InputError(f"segment {seg.path} does not start with a keyframe, so it cannot be joined")
    tagged = all(s.frames is not None for s in segments)
    if tagged:
        alone = across_versions and all(s.settings_alone for s in segments)
        for name, what in (("settings_alone" if alone else "settings", "settings"), ("input", "input")):
            values = {getattr(s, name) for s in segments}
            if len(values) > 1:
                one = segments[0]
                other = next(s for s in segments if getattr(s, name) != getattr(one, name))
                if name == "settings" and one.settings_alone and one.settings_alone == other.settings_alone:
                    raise InputError(
                        f"segments {one.path} and {other.path} were rendered by different versions of "
                        f"ffbatch ({one.rendered_by} vs {other.rendered_by}); "
                        "render them again with one version"
                    )
                raise InputError(
                    f"segments {one.path} and {other.path} were rendered from different {what} "
                    f"({getattr(one, name)} vs {getattr(other, name)}); "
                    "render them again with one command line"
                )
    ordered = sorted(segments, key=lambda s: (s.first_pts, s.last_pts))
    for prev, seg in zip(ordered, ordered[1:], strict=False):
        if tagged and prev.frames is not None and seg.frames is not None:
            (a0, a1), (b0, b1) = prev.frames, seg.frames
            if b0 < a1:
                raise InputError(
                    f"segments {prev.path} (frames {a0}:{a1}) and {seg.path} (frames {b0}:{b1}) overlap "
                    f"by {a1 - b0} frames"
                )
            if b0 > a1:
                raise InputError(
                    f"frames {a1}:{b0} are missing: there is a gap between {prev.path} (frames {a0}:{a1}) "
                    f"and {seg.path} (frames {b0}:{b1})"
                )
        if seg.first_pts <= prev.last_pts:
            raise InputError(
                f"segments {prev.path} and {seg.path} overlap: {seg.path} starts at "
                f"{seg.seconds(seg.first_pts):.3f} s (pts {seg.first_pts}), before {prev.path} ends at "
                f"{prev.seconds(prev.last_pts):.3f} s (pts {prev.last_pts})"
            )
        steps = [s for s in (prev.frame_step, seg.frame_step) if s]
        if not tagged and steps:
            step = min(steps)
            jump = seg.first_pts - prev.last_pts
            if jump > step * Fraction(3, 2):
                missing = round(jump / step) - 1
                gap_s = float((jump - step) * seg.time_base)
                raise InputError(
                    f"there is a gap of {gap_s:.3f} s (about {missing} frames) "
                    f"between {prev.path} (ends at {prev.seconds(prev.last_pts):.3f} s) and {seg.path} "
                    f"(starts at {seg.seconds(seg.first_pts):.3f} s)"
                )
    head, tail = ordered[0].frames, ordered[-1].frames
    if tagged and head is not None and tail is not None and ordered[0].frame_count is not None:
        start, end, total = head[0], tail[1], ordered[0].frame_count
        if start != 0 or end != total:
            log.warning("the joined segments hold frames %d:%d of an input with %d frames", start, end, total)
    return ordered


def join_segments(
    paths: list[Path],
    output: Path,
    *,
    audio_from: Path | None = None,
    overwrite: bool = False,
    metadata: dict[str, str] | None = None,
    tags_from: Path | None = None,
    audio_codec: str = "copy",
    audio_bitrate: str | None = None,
    across_versions: bool = False,
) -> JoinReport:
    """Check, then stream-copy `paths` into `output` (atomically), audio copied from `audio_from`
    (or re-encoded: `audio_codec` pcm / aac). `tags_from` (default `audio_from`): the original
    input, whose container tags (title, timecode, ...) and video language the output keeps."""
    tags_from = tags_from if tags_from is not None else audio_from
    started = time.perf_counter()
    output = Path(output)
    fmt = container_format_for(output)
    infos = check_segments([inspect_segment(Path(p)) for p in paths], across_versions)
    if audio_from is not None:
        check_readable_file(Path(audio_from), "--audio-from file")
        warn_other_audio(infos, Path(audio_from))
    for seg in infos:
        if _same_file(seg.path, output):
            raise InputError(f"output {output} is one of the segments; choose another output path")
    if audio_from is not None and _same_file(Path(audio_from), output):
        raise InputError(f"output {output} is the --audio-from file; choose another output path")
    if output.exists() and not overwrite:
        raise InputError(f"output {output} already exists; pass --overwrite to replace it")
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"cannot write {output}: the directory {parent} does not exist")
    out = AtomicFile(output)
    try:
        tags = {
            **_input_tags(tags_from, fmt),
            **_input_tags(infos[0].path, fmt, only="timecode"),
            **(metadata or {}),
        }
        audio = (audio_codec, audio_bitrate)
        packets, audio_packets = _copy(infos, out.temp, fmt, audio_from, tags, audio)
        out.commit()
        if TAG_SETTINGS in tags:  # a tagged output may be reused later, if its bytes still match
            with contextlib.suppress(OSError):
                record_written(output)
    except KeyboardInterrupt:
        raise Interrupted("interrupted (SIGINT) while joining; the partial output was removed") from None
    except (av.error.FFmpegError, OSError) as exc:
        raise OutputError(f"cannot write {output}: {getattr(exc, 'strerror', None) or exc}") from None
    finally:
        out.abort()
    elapsed = time.perf_counter() - started
    log.info("joined %d segments (%d packets) into %s in %.2f s", len(infos), packets, output, elapsed)
    return JoinReport(output, len(infos), packets, audio_packets, elapsed, output.stat().st_size)


def warn_other_audio(infos: list[SegmentInfo], audio_from: Path) -> None:
    """A warning when --audio-from is not the input the segments were rendered from (their tags
    name it): its audio is muxed as it is, however long, so a wrong file is heard, not refused."""
    rendered_from = {seg.input for seg in infos if seg.input}
    if not rendered_from or audio_from.name in rendered_from:
        return
    video_s = (
        sum((seg.last_pts - seg.first_pts + (seg.frame_step or 0)) for seg in infos) * infos[0].time_base
    )
    try:
        with av.open(ffmpeg_path(audio_from)) as container:
            audio_s = (container.duration or 0) / av.time_base
    except (av.error.FFmpegError, OSError):
        audio_s = 0.0
    log.warning(
        "--audio-from %s is not the input the segments were rendered from (%s); its audio (%.2f s) is "
        "muxed as it is under %.2f s of video",
        audio_from,
        ", ".join(sorted(rendered_from)),
        audio_s,
        float(video_s),
    )


def _input_tags(path: Path | None, fmt: str, only: str | None = None) -> dict[str, str]:
    """The container tags of the original input that the joined output keeps (as a render does);
    `only`: that one tag (the first segment's timecode: the timecode of the join's first frame)."""
    if path is None:
        return {}
    try:
        with av.open(str(path)) as src:
            tags = dict(src.metadata)
            for stream in src.streams:
                if stream.type == "data" and "timecode" in stream.metadata:
                    tags.setdefault("timecode", stream.metadata["timecode"])  # a tmcd track
    except (av.error.FFmpegError, OSError):
        return {}
    if only is not None:
        tags = {k: v for k, v in tags.items() if k.lower() == only}
    return carried_tags(tuple(tags.items()), fmt)


def _copy(
    infos: list[SegmentInfo],
    tmp: Path,
    fmt: str,
    audio_from: Path | None,
    metadata: dict[str, str],
    audio_choice: tuple[str, str | None] = ("copy", None),
) -> tuple[int, int]:
    first = infos[0]
    tb = first.time_base
    options: dict[str, str] = {}
    if fmt == "matroska":
        options["avoid_negative_ts"] = "disabled"  # every pts as it was (as the writer does)
    if fmt in ("mp4", "mov"):
        custom = bool(set(metadata) - set(carried_tags(tuple(metadata.items()), fmt)))  # our own tags
        options["movflags"] = "+faststart+use_metadata_tags" if custom else "+faststart"
        if "timecode" in metadata:
            options["write_tmcd"] = "1"  # a timecode track (the stream's rate comes with its parameters)
        options.update(iso_timescales(tb))
    out = av.open(ffmpeg_path(tmp), mode="w", format=fmt, container_options=options)
    audio: AudioMuxer | None = None
    packets = 0
    try:
        out.metadata.update(metadata)
        with av.open(ffmpeg_path(first.path)) as template:
            video = out.add_stream_from_template(template.streams[first.stream_index])
            rate = template.streams[first.stream_index].average_rate
            if "timecode" in metadata and rate:
                # the tmcd track counts frames at this rate (H.264 headers may give a tick rate)
                video.codec_context.framerate = rate  # type: ignore[attr-defined]  # PyAV's stubs: a video stream's context
            tag = template.streams[first.stream_index].codec_context.codec_tag
            if fmt in ("mov", "mp4") and "mov" in template.format.name and tag.strip("\x00"):
                # the segment's sample entry (ProRes 4444 `ap4h`, HEVC `hvc1`): the muxer would
                # otherwise pick its default for the codec (ProRes HQ's `apch`)
                video.codec_context.codec_tag = tag
        video.time_base = tb
        if "timecode" in metadata:
            video.metadata["timecode"] = metadata["timecode"]
        if audio_from is not None:
            audio = AudioMuxer(audio_from, out, codec=audio_choice[0], bitrate=audio_choice[1])
            if not audio.tracks:
                log.warning("--audio-from %s has no audio stream; the output has none", audio_from)
        last_dts: int | None = None
        for seg in infos:
            dts = decode_timestamps(seg) if seg.dts_missing else None
            with av.open(ffmpeg_path(seg.path)) as src:
                for n, packet in enumerate(p for p in src.demux(src.streams[seg.stream_index]) if p.size):
                    if dts is not None:
                        packet.dts = dts[n]
                    # Separately encoded segments each start their decode clock a few frames early;
                    # where that reaches back past the previous segment, move it forward (dts <= pts).
                    if packet.dts is not None and last_dts is not None and packet.dts <= last_dts:
                        if packet.pts is not None and last_dts + 1 > packet.pts:
                            raise FfbatchError(
                                f"segment {seg.path} cannot follow the one before it: its first frames "
                                "would decode after they are shown"
                            )
                        packet.dts = last_dts + 1
                    if packet.dts is not None:
                        last_dts = packet.dts
                    packet.stream = video
                    out.mux(packet)
                    packets += 1
                    if audio is not None and packet.dts is not None:
                        audio.mux_until(float(packet.dts * tb))
        if audio is not None:
            audio.finish()
        audio_packets = audio.packets_copied + audio.packets_encoded if audio is not None else 0
    except BaseException:
        if audio is not None:
            audio.close()
        with contextlib.suppress(Exception):
            out.close()
        raise
    if audio is not None:
        audio.close()
    out.close()
    return packets, audio_packets


def decode_timestamps(seg: SegmentInfo) -> list[int] | None:
    """A dts for every packet of a segment whose container stores none (Matroska): packet i
    decodes at the i-th smallest pts, shifted back by the reorder depth so that no packet decodes
    after it is shown; the first ones step back by the frame duration. None if a pts is missing."""
    order = list(seg.decode_pts)
    if not order:
        return None
    ranked = sorted(order)
    rank = {pts: i for i, pts in enumerate(ranked)}
    depth = max(0, max(i - rank[pts] for i, pts in enumerate(order)))
    step = int(seg.frame_step) if seg.frame_step else 1
    return [ranked[i - depth] if i >= depth else ranked[0] - (depth - i) * step for i in range(len(order))]


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def concat_command(
    segments: list[Path], output: Path, *, audio_from: Path | None, overwrite: bool, clean: bool
) -> JoinReport:
    """`ffbatch concat`: join, then (with --clean) delete the segments and an emptied work dir."""
    check_name_length(Path(output), "output")
    parent = Path(output).parent if str(Path(output).parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"cannot write {output}: the directory {parent} does not exist")
    with claim_output(Path(output)):
        report = join_segments(segments, output, audio_from=audio_from, overwrite=overwrite)
    if clean:
        parents = set()
        for seg in segments:
            with contextlib.suppress(FileNotFoundError):
                Path(seg).unlink()
            forget_written(Path(seg))
            parents.add(Path(seg).parent)
        for parent in parents:
            remove_emptied_work_dir(parent)
    return report


def remove_emptied_work_dir(folder: Path) -> None:
    """A work directory (`.NAME.ffbatch/`) whose segments are gone, with the folders inside it
    that held them (a compositing video's pieces): each removed only when nothing else is in it,
    so the last of a job's joins removes the work directory. A folder in no work dir is kept."""
    chain = [folder, *folder.parents]
    work = next((i for i, p in enumerate(chain) if p.name.endswith(".ffbatch")), None)
    if work is None:
        return
    for leftover in (chain[work] / ".lock", chain[work] / "manifest.json"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    for inner in chain[: work + 1]:
        try:
            inner.rmdir()  # only when nothing else is left in it
        except OSError:
            return
