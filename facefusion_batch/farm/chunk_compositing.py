"""The compositing outputs of a chunked render (`--matte-output`, `--face-only-output`).

Each chunk's share waits in the work directory beside the chunk's segment, under
`compositing/matte/` and `compositing/face-only/`: a sequence's frames at their own numbers,
a video's frames as a video-only segment of the chunk, tagged like the main segments (range,
settings digest). A chunk is done only when its segment and all of these are. After the main
join the sequences' frames move to their names and the videos' segments are joined (stream
copy) into their outputs, so no compositing file appears before the job is complete.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from facefusion_batch.config import (
    RenderSettings,
    compositing_outputs,
    compositing_start_number,
    option_field,
)
from facefusion_batch.errors import FfbatchError
from facefusion_batch.farm.concat import join_segments
from facefusion_batch.farm.manifest import remove_stale_partials, segment_name
from facefusion_batch.farm.segment import is_up_to_date
from facefusion_batch.video.compositing.compositing import (
    LAYER_ENCODER,
    MATTE_ENCODER,
    CompositingWriters,
    layer_info,
    open_face_layer_writer,
    open_matte_writer,
    publish_sequence,
    sequence_complete,
)
from facefusion_batch.video.decode.probe import VideoInfo
from facefusion_batch.video.encode.formats import segment_suffix
from facefusion_batch.video.encode.sequence import is_sequence_pattern
from facefusion_batch.video.encode.writer import VideoWriter
from facefusion_batch.video.encode.written import record_written


def staged(work: Path, option: str, path: Path) -> Path:
    """Where a chunked render keeps a compositing output's share of each chunk until the join:
    the sequence pattern, or the folder of a video's segments."""
    folder = work / "compositing" / option.removeprefix("--").removesuffix("-output")
    return folder / path.name if is_sequence_pattern(path) else folder


def _suffix(option: str) -> str:
    return segment_suffix((MATTE_ENCODER if option == "--matte-output" else LAYER_ENCODER).codec)


def chunk_segment(work: Path, option: str, path: Path, start: int, end: int) -> Path:
    """The segment of frames [start, end) of a video compositing output."""
    return staged(work, option, path) / segment_name(start, end, _suffix(option))


class ChunkVideos:
    """A video compositing output of a chunked render, written as one video-only segment per
    chunk (`open_segment(start, end)`), each closed (renamed into place) at its chunk's last frame."""

    def __init__(
        self,
        ranges: list[tuple[int, int]],
        open_segment: Callable[[int, int], VideoWriter],
        start_number: int,
        info: VideoInfo,
    ) -> None:
        self.ranges = sorted(ranges)
        self.open_segment = open_segment
        self.start_number = start_number
        self.info = info  # what the segments take (CompositingWriters reads the layer's bits)
        self._next = 0
        self._writer: VideoWriter | None = None

    def write(self, picture, pts: int | None, time_base: Fraction, number: int) -> None:
        index = number - self.start_number
        start, end = self.ranges[self._next]
        if self._writer is None:
            if index != start:
                raise FfbatchError(f"compositing segment {start}:{end} starts at frame {start}, not {index}")
            self._writer = self.open_segment(start, end)
        self._writer.write(picture, pts, time_base)
        if index == end - 1:
            writer, self._writer = self._writer, None
            writer.close()
            self._next += 1

    def commit(self) -> None:
        """Each segment is closed at its last frame already."""

    def close(self) -> None:
        if self._writer is not None or self._next != len(self.ranges):
            raise FfbatchError("the input ended before every compositing segment was complete")

    def abort(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.abort()


def prepare_staged(settings: RenderSettings, work: Path) -> None:
    """The staging folders of the compositing outputs, without what a killed run left half written
    (its video segments' and sequence frames' temporary files). The job holds its output's lock."""
    for option, path in compositing_outputs(settings):
        where = staged(work, option, path)
        folder = where.parent if is_sequence_pattern(path) else where
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(folder)  # a killed run's video segment
        for stale in folder.glob(".*.partial"):  # and its sequence frames
            stale.unlink(missing_ok=True)


def segment_settings(settings: RenderSettings, work: Path, start: int, end: int) -> RenderSettings:
    """`settings` for a job that renders only frames [start, end) as a segment (`render --gpus`'s
    process, a Ray actor): its compositing outputs go where a chunk's share waits, a sequence's
    frames at their own numbers, a video as that range's segment."""
    moved: dict[str, Any] = {}  # a compositing option's field -> its path
    for option, path in compositing_outputs(settings):
        share = staged(work, option, path) if is_sequence_pattern(path) else None
        moved[option_field(option)] = share or chunk_segment(work, option, path, start, end)
    return replace(settings, **moved)


def open_staged_compositing(
    settings: RenderSettings,
    work: Path,
    info: VideoInfo,
    ranges: list[tuple[int, int]],
    tags_for: Callable[[int, int], dict[str, str]],
) -> CompositingWriters | None:
    """The compositing writers of the chunks `ranges`, writing into the work directory."""
    number = compositing_start_number(settings)
    prepare_staged(settings, work)
    writers: dict[str, Any] = {}  # a sequence's writer or a video's chunks
    try:
        for option, path in compositing_outputs(settings):
            where = staged(work, option, path)
            opener = open_matte_writer if option == "--matte-output" else open_face_layer_writer
            if is_sequence_pattern(path):
                writers[option] = opener(where, info, number)
                continue

            def open_segment(start: int, end: int, option=option, path=path, opener=opener) -> VideoWriter:
                segment = chunk_segment(work, option, path, start, end)
                return opener(segment, info, number, tags_for(start, end))

            shown = layer_info(info, 16) if option == "--face-only-output" else info
            writers[option] = ChunkVideos(ranges, open_segment, number, shown)
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    if not writers:
        return None
    return CompositingWriters(writers.get("--matte-output"), writers.get("--face-only-output"), number)


def staged_complete(settings: RenderSettings, work: Path, digest: str, start: int, end: int) -> bool:
    """Whether the work directory holds every compositing output's share of chunk [start, end):
    all its sequence frames, and a finished segment of this range and settings for a video."""
    number = compositing_start_number(settings)
    for option, path in compositing_outputs(settings):
        if is_sequence_pattern(path):
            if not sequence_complete(staged(work, option, path), number, (start, end)):
                return False
        else:
            segment = chunk_segment(work, option, path, start, end)
            if not (segment.is_file() and is_up_to_date(segment, settings, start, end)):
                return False
    return True


def publish_staged(settings: RenderSettings, work: Path, ranges: list[tuple[int, int]], count: int) -> None:
    """After the main join: the sequences' frames to their names, the videos' segments joined."""
    number = compositing_start_number(settings)
    for option, path in compositing_outputs(settings):
        if is_sequence_pattern(path):
            publish_sequence(staged(work, option, path), path, number, count)
        else:
            segments = [chunk_segment(work, option, path, a, b) for a, b in sorted(ranges)]
            join_segments(segments, path, overwrite=True)  # validated up front (--overwrite or new)
            record_written(path)  # its segments' tags are its own: reused later while its bytes match
