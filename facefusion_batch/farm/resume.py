"""Chunked, resumable render of one input: segments in a work directory, then one join.

The input's frames are cut into chunks (`--chunk-frames`, or automatically for
long videos); each chunk is encoded into its own segment in `.{name}.ffbatch/`
beside the output, renamed into place when complete and recorded in the
manifest (`farm/manifest.py`). One continuous decode → batch → swap stream
feeds them all (batches run across chunk boundaries), so chunking costs a
keyframe per chunk and the final stream copy, nothing more.

The compositing outputs (`--matte-output`, `--face-only-output`) are written per chunk into the
work directory too (farm/chunk_compositing.py): a chunk counts as done only when its segment and
its share of them are; after the join they move to (sequences) or are joined into (videos)
their own names.

When every segment exists they are joined with the input's audio into the
output (atomically) and the work directory is removed. Interrupted (Ctrl-C,
SIGTERM, SIGKILL, a crash), the finished segments stay: the same command
renders only the missing ones. Segments that `render --frames` wrote into the
work directory (a farm run) with the same settings are adopted the same way.
"""

from __future__ import annotations

import logging
from pathlib import Path

from facefusion_batch.config import RenderSettings, compositing_outputs
from facefusion_batch.errors import FfbatchError, Interrupted
from facefusion_batch.farm.chunk_compositing import open_staged_compositing, publish_staged, staged_complete
from facefusion_batch.farm.concat import join_segments
from facefusion_batch.farm.manifest import (
    Manifest,
    job_lock,
    open_manifest,
    remove_stale_partials,
    remove_work_dir,
    segment_name,
    settings_digest,
    work_dir_for,
)
from facefusion_batch.farm.reuse import RENDERED_BY, across_versions
from facefusion_batch.farm.segment import is_up_to_date, segment_tags
from facefusion_batch.pipeline.run import (
    JobReport,
    check_faces_swapped,
    log_start,
    pixel_format_of,
    read_ranges,
    run_frames,
)
from facefusion_batch.video.decode.probe import VideoInfo
from facefusion_batch.video.decode.reader import Frame
from facefusion_batch.video.decode.segments import FrameIndex, frame_index, split_frames
from facefusion_batch.video.decode.stream_end import judge_end
from facefusion_batch.video.encode.formats import segment_suffix
from facefusion_batch.video.encode.writer import VideoWriter
from facefusion_batch.video.pictures.planes import BGR24

log = logging.getLogger("ffbatch")


class SegmentSink:
    """Routes frames (in order) to one atomic writer per range; calls `on_done` per finished one."""

    def __init__(
        self,
        work: Path,
        ranges,
        info: VideoInfo,
        settings: RenderSettings,
        tags_for,
        on_done,
        pixel_format=BGR24,
    ):
        self.work = work
        self.pixel_format = pixel_format
        self.ranges = sorted(ranges)
        self.info = info
        self.settings = settings
        self.tags_for = tags_for
        self.on_done = on_done
        self._next = 0
        self._writer: VideoWriter | None = None
        self._range: tuple[int, int] | None = None
        self._written = 0

    def __call__(self, frame: Frame, image) -> None:
        if self._writer is None:
            start, end = self.ranges[self._next]
            if frame.index != start:
                raise FfbatchError(f"segment {start}:{end} should start at frame {start}, got {frame.index}")
            self._range = (start, end)
            path = self.work / segment_name(start, end, segment_suffix(self.settings.encoder.codec))
            try:
                self._writer = VideoWriter(
                    path,
                    self.info,
                    self.settings.encoder,
                    metadata=self.tags_for(start, end),
                    pixel_format=self.pixel_format,
                )
            except BaseException:
                # an interrupt between the writer's temporary file and its return: the file is ours
                for partial in self.work.glob(f".{path.stem}.partial-*"):
                    partial.unlink(missing_ok=True)
                raise
            self._written = 0
        self._writer.write(image, frame.pts, frame.time_base)
        self._written += 1
        assert self._range is not None  # set with the segment's writer
        start, end = self._range
        if frame.index == end - 1:
            if self._written != end - start:
                raise FfbatchError(f"segment {start}:{end} got {self._written} frames")
            writer, self._writer = self._writer, None
            writer.close()
            self._next += 1
            self.on_done(start, end, writer.output)

    def check_finished(self) -> None:
        if self._writer is not None or self._next != len(self.ranges):
            raise FfbatchError("the input ended before every segment was complete")

    def abort(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.abort()


def plan_segments(
    settings: RenderSettings, index: FrameIndex, chunk: int, manifest: Manifest, digest: str
) -> tuple[dict[tuple[int, int], Path], list[tuple[int, int]]]:
    """Which chunks are done (verified, or adopted from a farm run) and which are missing."""
    done: dict[tuple[int, int], Path] = {}
    missing: list[tuple[int, int]] = []
    for start, end in split_frames(index.count, chunk):
        path = manifest.verified(start, end)
        if path is None:
            candidate = manifest.work_dir / segment_name(start, end, segment_suffix(settings.encoder.codec))
            if candidate.is_file() and is_up_to_date(candidate, settings, start, end):
                manifest.record(start, end, candidate)
                path = candidate
        if path is not None and not staged_complete(settings, manifest.work_dir, digest, start, end):
            log.info("segment %d:%d is done but not its compositing outputs; rendering it again", start, end)
            path = None
        if path is None:
            missing.append((start, end))
        else:
            done[(start, end)] = path
    return done, missing


def render_chunked(
    renderer,
    settings: RenderSettings,
    info: VideoInfo,
    chunk: int,
    report: JobReport,
    timer,
    on_progress,
    on_start,
    output_tags: dict[str, str] | None = None,
) -> None:
    output = Path(settings.output)
    index = frame_index(settings.input, info.video_stream_index)
    if index.end is not None:  # a demuxer that gave up at damage: exit 2 before any work dir
        judge_end(info, index.end, index.count, fail=True, warn=False)
    digest = settings_digest(settings)
    work = work_dir_for(output)
    with job_lock(work, output):
        remove_stale_partials(work)
        manifest = open_job_manifest(settings, output, work, digest, chunk, index.count)
        done, missing = plan_segments(settings, index, chunk, manifest, digest)
        total = len(done) + len(missing)
        report.segments = {"total": total, "reused": len(done), "rendered": len(missing)}
        todo = sum(b - a for a, b in missing)
        log_start(settings, info, report, index.count)
        if done:
            log.info("resuming: %d of %d segments are done, %d frames left to render", len(done), total, todo)
        else:
            log.info("%d segments of %d frames in %s", total, chunk, work)
        if on_start:
            on_start(todo)

        compositing = None

        def finished(start: int, end: int, path: Path) -> None:
            if compositing is not None:
                compositing.commit()  # the chunk's frames, written before its last frame's segment
            manifest.record(start, end, path)
            done[(start, end)] = path
            log.debug("segment %d:%d done", start, end)

        def tags_for(start: int, end: int) -> dict[str, str]:
            return segment_tags(settings, start, end, index.count, digest)

        if missing:
            layout = renderer.frame_layout(
                info, report, bgr_view=bool(compositing_outputs(settings)), settings=settings
            )
            sink = SegmentSink(
                work,
                missing,
                info,
                settings,
                tags_for,
                finished,
                pixel_format_of(layout),
            )
            try:
                compositing = open_staged_compositing(settings, work, info, missing, tags_for)
                frames = read_ranges(settings, info, missing, index, layout, warmup=settings.tracking.memory)
                coming = sum(end - start for start, end in missing)
                run_frames(
                    renderer,
                    frames,
                    sink,
                    settings,
                    report,
                    timer,
                    on_progress,
                    layout,
                    compositing,
                    total=coming,
                )
                sink.check_finished()
            except KeyboardInterrupt:
                _abort(sink, compositing)
                raise Interrupted(f"interrupted (SIGINT); {_resume_hint(done, total, work)}") from None
            except Interrupted as exc:
                _abort(sink, compositing)
                raise Interrupted(
                    f"{exc}; {_resume_hint(done, total, work)}", exit_code=exc.exit_code
                ) from None
            except BaseException:
                _abort(sink, compositing)
                raise
        if not report.segments["reused"]:  # faces of reused segments were counted by their own run
            try:
                check_faces_swapped(settings, report.faces_swapped, report.faces_found, "output")
            except FfbatchError:
                remove_work_dir(work)  # a rerun renders (and refuses) again, never joins them
                raise
        with timer.stage("join"):
            join_segments(
                [done[r] for r in sorted(done)],
                output,
                audio_from=Path(settings.input) if info.audio_streams and settings.encoder.audio else None,
                overwrite=True,  # validated up front: --overwrite, or no output when the job began
                metadata=output_tags,
                tags_from=Path(settings.input),
                across_versions=settings.reuse_across_versions,
                audio_codec=settings.encoder.audio_codec,
                audio_bitrate=settings.encoder.audio_bitrate,
            )
            publish_staged(settings, work, list(done), index.count)
        remove_work_dir(work)


def _abort(sink: SegmentSink, compositing) -> None:
    sink.abort()
    if compositing is not None:
        compositing.abort()


def _resume_hint(done: dict, total: int, work: Path) -> str:
    return f"{len(done)} of {total} segments are saved in {work}; run the same command again to resume"


def open_job_manifest(
    settings: RenderSettings, output: Path, work: Path, digest: str, chunk: int, frame_count: int
) -> Manifest:
    """The job's manifest: the one on disk when it matches these settings (else a fresh one)."""
    return open_manifest(
        Manifest(
            work_dir=work,
            input=str(Path(settings.input).resolve()),
            output=str(output.resolve()),
            settings_digest=digest,
            chunk_frames=chunk,
            frame_count=frame_count,
            settings_alone=settings_digest(settings, code=False),
            rendered_by=RENDERED_BY,
        ),
        settings.force,
        lambda what, rendered_by: across_versions(what, rendered_by or "another ffbatch", settings),
    )
