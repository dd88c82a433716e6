"""`render --frames START:END`: one exact frame range of one input into a video-only segment.

The segment starts with a keyframe (every encode does), keeps the input's pts
and time base, and carries tags (`video/decode/segments.py`) that say which frames of
which input, rendered with which settings. That makes the command idempotent,
as a farm needs: run again with the same settings when the segment exists, it
says so and exits 0 without rendering (`--force` renders it again).
"""

from __future__ import annotations

import logging
from pathlib import Path

from facefusion_batch.config import RenderSettings, compositing_outputs, compositing_start_number
from facefusion_batch.errors import FfbatchError, InputError, OutputError
from facefusion_batch.farm.manifest import settings_digest
from facefusion_batch.farm.reuse import code_tags, drop_stale, input_tag, intact, made_here
from facefusion_batch.pipeline.run import JobReport, log_start, pixel_format_of, read_ranges, render_into
from facefusion_batch.video.compositing.compositing import open_compositing_writers, sequence_complete
from facefusion_batch.video.decode.probe import sequence_numbers
from facefusion_batch.video.decode.segments import (
    TAG_FRAME_COUNT,
    TAG_FRAMES,
    TAG_INPUT,
    TAG_SETTINGS,
    format_range,
    frame_index,
    read_tags,
    video_packet_count,
)
from facefusion_batch.video.encode.sequence import SequenceWriter, is_sequence_pattern
from facefusion_batch.video.encode.writer import VideoWriter, from_frame

log = logging.getLogger("ffbatch")


def segment_tags(settings: RenderSettings, start: int, end: int, frame_count: int, digest: str) -> dict:
    return {
        TAG_FRAMES: format_range(start, end),
        TAG_FRAME_COUNT: str(frame_count),
        TAG_SETTINGS: digest,
        TAG_INPUT: input_tag(settings),
        **code_tags(settings),
    }


def is_up_to_date(path: Path, settings: RenderSettings, start: int, end: int | None) -> bool:
    """Whether `path` is a finished segment of exactly this range made with these settings by
    this code (farm/reuse.py), holding the bytes it was written with."""
    tags = read_tags(path)
    if not made_here(tags, settings, path):
        return False
    got_start, _, got_end = tags.get(TAG_FRAMES, "").partition(":")
    wanted_end = tags.get(TAG_FRAME_COUNT) if end is None else str(end)
    if not (got_start == str(start) and got_end == wanted_end and got_end.isdigit()):
        return False
    # the tags are written first: a segment cut short (a full disk, a copy that broke off) still
    # carries them, but not every frame's packet; bytes changed in place keep the count
    return video_packet_count(path) == int(got_end) - start and intact(path)


def prepare_segment_job(settings: RenderSettings) -> JobReport | None:
    """Before validation: make the segment's directory, and skip a segment that is done."""
    out = Path(settings.output)
    # the segment's directory, and a video compositing piece's (a plan's chunk writes it into the
    # job's work directory, as a chunked render does)
    videos = [Path(p) for _, p in compositing_outputs(settings) if not is_sequence_pattern(p)]
    for path in (out, *videos):
        parent = path.parent if str(path.parent) else Path(".")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(
                f"cannot create the directory {parent} for {path}: {exc.strerror or exc}"
            ) from None
    if settings.force or not out.is_file() or not Path(settings.input).is_file():
        return None
    if not all(Path(s).is_file() for s in settings.sources):
        return None
    if settings.frames is None:
        return None  # not a segment: nothing to look for
    start, end = settings.frames
    if not is_up_to_date(out, settings, start, end):
        drop_stale(out, settings)
        return None
    if end is None:  # to the end: the tags hold the frame count (is_up_to_date checked it)
        end = int(read_tags(out)[TAG_FRAME_COUNT])
    if not compositing_complete(settings, (start, end)):
        raise InputError(
            f"{out} is up to date but not its compositing outputs (frames {start}:{end} of a sequence, or "
            "a video segment, are missing or from other settings); pass --force to render them again"
        )
    log.info(
        "%s is up to date (frames %s:%s of %s); nothing to render", out, start, end or "", settings.input
    )
    report = JobReport(input=str(settings.input), output=str(out), backend="", status="skipped")
    report.message = "up to date"
    return report


def compositing_complete(settings: RenderSettings, frames: tuple[int, int]) -> bool:
    """Whether every compositing output of a segment is there: a sequence's frames [start, end),
    a video as a finished segment of this range and these settings."""
    number = compositing_start_number(settings)
    for _, path in compositing_outputs(settings):
        if is_sequence_pattern(path):
            if not sequence_complete(path, number, frames):
                return False
        elif not (path.is_file() and is_up_to_date(path, settings, *frames)):
            return False
    return True


def render_segment(renderer, settings, info, report: JobReport, timer, on_progress, on_start) -> None:
    index = frame_index(settings.input, info.video_stream_index)
    start, end = index.resolve(*settings.frames)
    tags = segment_tags(settings, start, end, index.count, settings_digest(settings))
    log_start(settings, info, report, end - start)
    sequence = is_sequence_pattern(settings.output)
    what = "their final names in the sequence" if sequence else "a video-only segment"
    log.info("frames %d:%d of %d, to %s", start, end, index.count, what)
    if on_start:
        on_start(end - start)
    write_segment(
        renderer, settings, info, index, (start, end), Path(settings.output), tags, report, timer, on_progress
    )
    report.frames = [start, end]
    numbers = sequence_numbers(settings.input) if is_sequence_pattern(settings.input) else []
    report.frame_range = (
        [numbers[start], numbers[end - 1]] if len(numbers) >= end > start else [start, end - 1]
    )
    report.audio = (
        "none (an image sequence)"
        if sequence
        else "none (a segment; `ffbatch concat --audio-from` adds the audio)"
    )


def write_segment(
    renderer,
    settings: RenderSettings,
    info,
    index,
    frames: tuple[int, int],
    path: Path,
    tags: dict[str, str],
    report,
    timer,
    on_progress=None,
) -> None:
    """Render frames [start, end) of `settings.input` into `path` (atomically, video only)."""
    start, end = frames
    layout = renderer.frame_layout(
        info, report, bgr_view=bool(compositing_outputs(settings)), settings=settings
    )
    pixels = pixel_format_of(layout)
    reader = read_ranges(settings, info, [(start, end)], index, layout, warmup=settings.tracking.memory)
    writer: SequenceWriter | VideoWriter
    if is_sequence_pattern(path):  # each frame at its final name: a farm task's frames need no join
        writer = SequenceWriter(
            path,
            info,
            pix_fmt=settings.encoder.pix_fmt,
            start_number=compositing_start_number(settings) + start,  # frame 0's number, as a matte's
            pixel_format=pixels,
        )
    else:
        # the timecode of the segment's first frame: a join takes its first segment's
        writer = VideoWriter(
            path, from_frame(info, start), settings.encoder, metadata=tags, pixel_format=pixels
        )
    try:  # a sequence gets the range's frames; a video is a segment of its own, tagged the same
        compositing = open_compositing_writers(
            settings.matte_output, settings.face_only_output, info, compositing_start_number(settings), tags
        )
    except BaseException:
        writer.abort()
        raise
    frames_before = report.frames_out

    def check() -> None:  # the reader raises first; a guard
        if report.frames_out - frames_before != end - start:
            raise FfbatchError(f"{settings.input}: got {report.frames_out} frames for --frames {start}:{end}")

    render_into(
        renderer,
        reader,
        writer,
        settings,
        report,
        timer,
        on_progress,
        layout,
        "segment",
        check,
        compositing,
        total=end - start,
    )
