"""One render job: decode → batch → swap on worker threads → encode, in order.

Decode and encode have their own threads (in the reader and writer); workers
run the stages; the calling thread restores order and hands every frame to a
sink (one writer, or one writer per segment). Any failure or signal aborts the
open writers, so nothing is left at an output path.

`Renderer` holds what is expensive (sessions, prepared source faces) so that
many inputs, or many segments, share one load. Three kinds of job run on it:

- plain: the whole input into `settings.output`, audio copied (the default);
- a frame range (`settings.frames`): a video-only segment tagged with its range
  (see `video/segments.py`), the unit of farm rendering;
- chunked (`farm/resume.py`): segments in a work directory beside the output,
  recorded in a manifest, then joined with the audio; an interrupted job
  resumes from the segments that are finished.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from facefusion_batch.config import RenderSettings, validate
from facefusion_batch.errors import EXIT_TERMINATED, InputError, Interrupted
from facefusion_batch.pipeline.batcher import Batch, batches
from facefusion_batch.pipeline.build import Models, build_pipeline, load_models
from facefusion_batch.pipeline.executor import run_ordered
from facefusion_batch.pipeline.report import RenderReport, StageTimer, peak_rss_mb, write_json_atomically
from facefusion_batch.pipeline.stages import FaceSwapPipeline
from facefusion_batch.video.planes import BGR24, YUV420P, PlaneLayout, plane_layout_for
from facefusion_batch.video.probe import VideoInfo, probe
from facefusion_batch.video.reader import Frame, FrameReader, hwaccel_problem
from facefusion_batch.video.writer import VideoWriter

log = logging.getLogger("ffbatch")

# Videos longer than this are rendered in chunks of AUTO_CHUNK_FRAMES (resumable);
# --chunk-frames N sets the chunk size for any video, --chunk-frames 0 turns chunks off.
AUTO_CHUNK_ABOVE = 3000
AUTO_CHUNK_FRAMES = 1500


_signalled: list[int] = []  # signals received inside `sigterm_as_interrupt`, newest last


@contextmanager
def sigterm_as_interrupt():
    """SIGTERM (farm schedulers' stop) unwinds like Ctrl-C, with exit status 143.

    Both handlers also leave a note that the frame loop checks after every batch
    (`raise_if_signalled`): Python drops an exception raised while a finalizer or a
    weakref callback runs, and a Ctrl-C that lands there would otherwise be lost.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):
        _signalled.append(signum)
        raise Interrupted("terminated (SIGTERM)", exit_code=EXIT_TERMINATED)

    def on_int(signum, frame):
        _signalled.append(signum)
        raise KeyboardInterrupt

    previous_hook = sys.unraisablehook

    def unraisable(info) -> None:
        # our own signal exception, dropped by Python inside a finalizer: the note covers it
        if not isinstance(info.exc_value, KeyboardInterrupt | Interrupted):
            previous_hook(info)

    _signalled.clear()
    previous = signal.signal(signal.SIGTERM, on_term)
    previous_int = signal.signal(signal.SIGINT, on_int)
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        sys.unraisablehook = previous_hook
        _signalled.clear()


def raise_if_signalled() -> None:
    """Re-raise a signal whose exception Python swallowed (see `sigterm_as_interrupt`)."""
    if not _signalled:
        return
    signum = _signalled[-1]
    if signum == signal.SIGTERM:
        raise Interrupted("terminated (SIGTERM)", exit_code=EXIT_TERMINATED)
    raise KeyboardInterrupt


def default_threads(workers: int) -> int:
    return max(1, (os.cpu_count() or 2) // max(1, workers))


@dataclass
class JobReport(RenderReport):
    """A render report plus what scale-out adds: the frame range and the segments."""

    frames: list[int] | None = None  # [start, end) of a --frames job
    segments: dict[str, int] = field(default_factory=dict)  # total / rendered / reused

    def summary(self) -> dict[str, Any]:
        data = super().summary()
        for key in ("frames", "segments"):
            if not data.get(key):
                data.pop(key, None)
        return data


# Settings that decide which models and source faces are loaded: inputs that agree on these
# share one Renderer.
_RENDERER_KEYS = (
    "sources",
    "backend",
    "threads",
    "workers",
    "models_dir",
    "swap",
    "faces",
    "detector",
    "mesh",
    "source_face_index",
)


class Renderer:
    """Loaded models and prepared sources, shared by every job of a run."""

    def __init__(self, settings: RenderSettings, models: Models, pipeline: FaceSwapPipeline, load_s: float):
        self.settings = settings
        self.models = models
        self.pipeline = pipeline
        self.load_seconds = load_s

    @classmethod
    def load(cls, settings: RenderSettings) -> Renderer:
        started = time.perf_counter()
        threads = settings.threads or default_threads(settings.workers)
        models = load_models(
            settings.backend,
            threads=threads,
            models_dir=settings.models_dir,
            detector=settings.detector,
            mesh=settings.mesh,
        )
        pipeline = build_pipeline(
            models,
            settings.sources,
            settings.swap,
            settings.faces,
            source_face_index=settings.source_face_index,
        )
        return cls(settings, models, pipeline, time.perf_counter() - started)

    def serves(self, settings: RenderSettings) -> bool:
        return all(getattr(settings, k) == getattr(self.settings, k) for k in _RENDERER_KEYS)

    def frame_layout(self, info: VideoInfo, report: RenderReport | None = None) -> PlaneLayout | None:
        """The planar layout a job's frames keep from decoder to encoder, or None for BGR frames.

        Planes only where the pipeline converts colour on the device (`accepts_planes`) and the
        input and output allow it exactly (video/planes.py); said in the log and the report."""
        if not getattr(self.pipeline, "accepts_planes", False):
            return None
        layout, why_not = plane_layout_for(info, self.settings.encoder.pix_fmt)
        if layout is None:
            log.info("frames cross to the device as BGR: %s", why_not)
            return None
        log.info(
            "frames stay yuv420p planes (%s) from decoder to encoder; the device converts", layout.matrix
        )
        if report is not None:
            report.frames_as = f"{YUV420P} ({layout.matrix})"
        return layout

    def new_report(self, settings: RenderSettings) -> JobReport:
        return JobReport(
            input=str(settings.input),
            output=str(settings.output),
            backend=self.models.backend.describe(),
            encoder=f"{settings.encoder.codec} preset={settings.encoder.preset}",
            models=self.models.paths,
        )


Sink = Callable[[Frame, np.ndarray], None]


def run_frames(
    renderer: Renderer,
    frames: Iterable[Frame],
    sink: Sink,
    settings: RenderSettings,
    report: RenderReport,
    timer: StageTimer,
    on_progress: Callable[[int], None] | None = None,
    layout: PlaneLayout | None = None,
) -> None:
    """Swap every frame of `frames` in batches and hand each result to `sink`, in order.

    `layout`: the frames are yuv420p planes of this layout (Renderer.frame_layout), not BGR."""
    pipeline = renderer.pipeline
    pipeline.timer = timer
    kwargs = {} if layout is None else {"planes": layout}

    def process(batch: Batch):
        t0 = time.perf_counter()
        result = pipeline([frame.image for frame in batch.items], **kwargs)
        return result, time.perf_counter() - t0

    max_pixels = batch_pixel_budget(renderer.models.backend, settings.batch_size)
    stream = batches(frames, settings.batch_size, settings.batch_window_ms, max_pixels=max_pixels)
    for batch, (result, latency) in run_ordered(stream, process, workers=settings.workers):
        with timer.stage("write"):
            for frame, image in zip(batch.items, result.frames, strict=True):
                sink(frame, image)
        n = len(batch.items)
        report.frames_in += n
        report.frames_out += n
        report.faces_found += result.faces_found
        report.faces_swapped += result.faces_swapped
        report.frames_with_faces += result.frames_with_faces
        report.frames_replaced += sum(frame.replaced for frame in batch.items)
        report.batches += 1
        report.batch_sizes.append(n)
        report.batch_latency_s.append(latency)
        if on_progress:
            on_progress(n)
        raise_if_signalled()


def pixel_format_of(layout: PlaneLayout | None) -> str:
    return BGR24 if layout is None else YUV420P


def read_ranges(
    settings: RenderSettings,
    info: VideoInfo,
    ranges: list[tuple[int, int]],
    index=None,
    layout: PlaneLayout | None = None,
) -> Iterator[Frame]:
    """The frames of several ranges of one input, one reader per run of adjacent ranges."""
    runs: list[list[int]] = []
    for start, end in sorted(ranges):
        if runs and runs[-1][1] == start:
            runs[-1][1] = end
        else:
            runs.append([start, end])
    for start, end in runs:
        reader = FrameReader(
            settings.input,
            info=info,
            frames=(start, end),
            index=index,
            pixel_format=pixel_format_of(layout),
            hwaccel=settings.hwaccel,
        )
        try:
            yield from reader
        finally:
            reader.close()


def chunk_size_for(settings: RenderSettings, frame_count: int | None) -> int:
    """Frames per chunk for a resumable render; 0 for a plain one."""
    if settings.frames is not None:
        return 0
    if settings.chunk_frames is not None:
        return settings.chunk_frames
    if frame_count is not None and frame_count > AUTO_CHUNK_ABOVE:
        return AUTO_CHUNK_FRAMES
    return 0


def render(
    settings: RenderSettings,
    *,
    on_progress: Callable[[int], None] | None = None,
    on_start: Callable[[int | None], None] | None = None,
    renderer: Renderer | None = None,
    output_tags: dict[str, str] | None = None,
) -> JobReport:
    """Render `settings.input` to `settings.output`. Raises FfbatchError subclasses on failure.

    `renderer`: models already loaded (several inputs in one run); loaded here when None.
    `output_tags`: container tags for the output (batch runs mark finished outputs with them).
    """
    started = time.perf_counter()
    if settings.frames is not None:
        from facefusion_batch.farm.segment import prepare_segment_job

        skipped = prepare_segment_job(settings)
        if skipped is not None:
            return skipped
    validate(settings)
    if settings.hwaccel != "none":
        problem = hwaccel_problem(settings.hwaccel)
        if problem:
            raise InputError(
                f"--hwaccel {settings.hwaccel}: the GPU video decoder cannot be used here ({problem}); "
                "use --hwaccel none"
            )
    if is_still_image(settings.input):
        return render_still(settings, renderer, started)
    info = probe(settings.input)
    timer = StageTimer()
    if renderer is not None and not renderer.serves(settings):
        raise ValueError("this Renderer was loaded for other sources or model settings")
    if renderer is None:
        renderer = Renderer.load(settings)
        timer.add("load", renderer.load_seconds)
    report = renderer.new_report(settings)
    chunk = chunk_size_for(settings, info.frame_count)
    if settings.on_decode_error == "skip" and chunk and settings.chunk_frames is None:
        log.info("--on-decode-error skip: rendering %s whole, not in resumable chunks", settings.input)
        chunk = 0
    if settings.on_decode_error == "skip" and (settings.frames is not None or chunk):
        what = "--frames" if settings.frames is not None else f"a chunked render ({chunk} frames a chunk)"
        raise InputError(
            f"--on-decode-error skip works on whole-file renders only, not with {what}; "
            "render the whole file with --chunk-frames 0"
        )
    with sigterm_as_interrupt():
        if settings.frames is not None:
            from facefusion_batch.farm.segment import render_segment

            render_segment(renderer, settings, info, report, timer, on_progress, on_start)
        elif chunk:
            from facefusion_batch.farm.resume import render_chunked

            render_chunked(renderer, settings, info, chunk, report, timer, on_progress, on_start, output_tags)
        else:
            _render_plain(renderer, settings, info, report, timer, on_progress, on_start, output_tags)
    report.audio = report.audio or ("copied" if info.audio_streams else "none")
    report.stage_seconds = dict(timer.seconds)
    report.wall_seconds = time.perf_counter() - started
    report.peak_rss_mb = peak_rss_mb()
    backend_report = getattr(renderer.models.backend, "report", None)
    if callable(backend_report):
        report.device = backend_report()
    if settings.report:
        write_json_atomically(settings.report, report.summary())
    return report


# the pixels of 8 1080p frames: 4K gets batches of 2, 8K of 1 on the CPU; memory stays bounded
CPU_BATCH_PIXELS = 8 * 1920 * 1080
# a 1080p frame as packed yuv420p planes ([1620, 1920]); BGR 1080p counts 1920 x 1080
DEVICE_FRAME_PIXELS = 1920 * 1620


def batch_pixel_budget(backend, batch_size: int) -> int:
    """Most pixels one batch may hold. GPU backends: the batch asked for (--max-batch) of frames
    up to 1080p, proportionally fewer of larger ones (the memory guard may cut further); the CPU:
    CPU_BATCH_PIXELS, whatever the batch size, to bound host memory."""
    if getattr(backend, "device", None) is not None:
        return max(1, batch_size) * DEVICE_FRAME_PIXELS
    return CPU_BATCH_PIXELS


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def is_still_image(path: Path) -> bool:
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def render_still(settings: RenderSettings, renderer: Renderer | None, started: float) -> JobReport:
    """A photo as the target: one frame through the same pipeline, written as an image."""
    from facefusion_batch.pipeline.build import read_image
    from facefusion_batch.pipeline.preview import write_image_atomically

    if not is_still_image(settings.output):
        raise InputError(
            f"input {settings.input} is a still image: write the result to an image file "
            f"({', '.join(IMAGE_SUFFIXES)}), not {settings.output.suffix or 'a file without extension'}"
        )
    if settings.frames is not None or settings.chunk_frames:
        raise InputError(f"input {settings.input} is a still image: --frames and --chunk-frames need a video")
    image = read_image(settings.input, what="input")
    timer = StageTimer()
    if renderer is None:
        renderer = Renderer.load(settings)
        timer.add("load", renderer.load_seconds)
    report = renderer.new_report(settings)
    with timer.stage("swap_image"):
        result = renderer.pipeline([image])
    write_image_atomically(settings.output, result.frames[0])
    report.frames_in = report.frames_out = 1
    report.faces_found = result.faces_found
    report.faces_swapped = result.faces_swapped
    report.frames_with_faces = result.frames_with_faces
    report.batches = 1
    report.batch_sizes.append(1)
    report.audio = "none"
    report.encoder = "image"
    report.stage_seconds = dict(timer.seconds)
    report.wall_seconds = time.perf_counter() - started
    report.peak_rss_mb = peak_rss_mb()
    if settings.report:
        write_json_atomically(settings.report, report.summary())
    log.info("swapped %d face(s) in the still image %s", result.faces_swapped, settings.input)
    return report


def log_start(settings: RenderSettings, info: VideoInfo, report: RenderReport, frames: int | None) -> None:
    log.info(
        "rendering %s (%dx%d, %s frames) with %s",
        settings.input,
        info.width,
        info.height,
        frames if frames is not None else "?",
        report.backend,
    )


def _render_plain(renderer, settings, info, report, timer, on_progress, on_start, output_tags=None) -> None:
    log_start(settings, info, report, info.frame_count)
    if on_start:
        on_start(info.frame_count)
    layout = renderer.frame_layout(info, report)
    reader = FrameReader(
        settings.input,
        info=info,
        on_decode_error=settings.on_decode_error,
        pixel_format=pixel_format_of(layout),
        hwaccel=settings.hwaccel,
    )
    writer = VideoWriter(
        settings.output,
        info,
        settings.encoder,
        audio_from=settings.input if info.audio_streams else None,
        metadata=output_tags,
        pixel_format=pixel_format_of(layout),
    )
    render_into(renderer, reader, writer, settings, report, timer, on_progress, layout, "output")
    report.audio = writer.audio_summary


def render_into(
    renderer,
    reader: FrameReader,
    writer: VideoWriter,
    settings: RenderSettings,
    report: RenderReport,
    timer: StageTimer,
    on_progress,
    layout: PlaneLayout | None,
    what: str,
    check: Callable[[], None] | None = None,
) -> None:
    """Swap every frame of `reader` into `writer`. The writer is closed (its file renamed into
    place) only when everything, `check()` included, went well; otherwise it is aborted and its
    temporary file removed. `what` names the output in the interrupt message."""
    try:
        run_frames(
            renderer,
            reader,
            lambda frame, image: writer.write(image, frame.pts, frame.time_base),
            settings,
            report,
            timer,
            on_progress,
            layout,
        )
        if check is not None:
            check()
        with timer.stage("finish"):
            writer.close()
    except KeyboardInterrupt:
        writer.abort()
        raise Interrupted(f"interrupted (SIGINT); the partial {what} was removed") from None
    except BaseException:
        writer.abort()
        raise
    finally:
        reader.close()
