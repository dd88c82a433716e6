"""One render job: decode → batch → swap on worker threads → encode, in order.

Decode and encode have their own threads (in the reader and writer); workers
run the stages; the calling thread restores order and feeds the writer. Any
failure or signal aborts the writer, so nothing is left at the output path.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

from facefusion_batch.config import RenderSettings, validate
from facefusion_batch.errors import EXIT_TERMINATED, Interrupted
from facefusion_batch.pipeline.batcher import Batch, batches
from facefusion_batch.pipeline.build import build_pipeline, load_models
from facefusion_batch.pipeline.executor import run_ordered
from facefusion_batch.pipeline.report import RenderReport, StageTimer, peak_rss_mb, write_json_atomically
from facefusion_batch.video.probe import probe
from facefusion_batch.video.reader import FrameReader
from facefusion_batch.video.writer import VideoWriter

log = logging.getLogger("ffbatch")


@contextmanager
def sigterm_as_interrupt():
    """SIGTERM (farm schedulers' stop) unwinds like Ctrl-C, with exit status 143."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted("terminated (SIGTERM)", exit_code=EXIT_TERMINATED)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def default_threads(workers: int) -> int:
    return max(1, (os.cpu_count() or 2) // max(1, workers))


def render(
    settings: RenderSettings,
    *,
    on_progress: Callable[[int], None] | None = None,
    on_start: Callable[[int | None], None] | None = None,
) -> RenderReport:
    """Render `settings.input` to `settings.output`. Raises FfbatchError subclasses on failure."""
    validate(settings)
    started = time.perf_counter()
    info = probe(settings.input)
    threads = settings.threads or default_threads(settings.workers)
    timer = StageTimer()
    with timer.stage("load"):
        models = load_models(
            settings.backend,
            threads=threads,
            models_dir=settings.models_dir,
            detector=settings.detector,
            mesh=settings.mesh,
        )
        pipeline = build_pipeline(models, settings.sources, settings.swap, settings.faces, timer)
    report = RenderReport(
        input=str(settings.input),
        output=str(settings.output),
        backend=models.backend.describe(),
        encoder=f"{settings.encoder.codec} preset={settings.encoder.preset}",
        models=models.paths,
    )
    log.info(
        "rendering %s (%dx%d, %s frames) with %s",
        settings.input,
        info.width,
        info.height,
        info.frame_count if info.frame_count is not None else "?",
        report.backend,
    )
    if on_start:
        on_start(info.frame_count)

    def process(batch: Batch):
        t0 = time.perf_counter()
        result = pipeline([frame.image for frame in batch.items])
        return result, time.perf_counter() - t0

    with sigterm_as_interrupt():
        reader = FrameReader(settings.input, info=info)
        writer = VideoWriter(
            settings.output, info, settings.encoder, audio_from=settings.input if info.audio_streams else None
        )
        try:
            stream = batches(reader, settings.batch_size, settings.batch_window_ms)
            for batch, (result, latency) in run_ordered(stream, process, workers=settings.workers):
                with timer.stage("write"):
                    for frame, image in zip(batch.items, result.frames, strict=True):
                        writer.write(image, frame.pts, frame.time_base)
                n = len(batch.items)
                report.frames_in += n
                report.frames_out += n
                report.faces_found += result.faces_found
                report.faces_swapped += result.faces_swapped
                report.frames_with_faces += result.frames_with_faces
                report.batches += 1
                report.batch_sizes.append(n)
                report.batch_latency_s.append(latency)
                if on_progress:
                    on_progress(n)
            with timer.stage("finish"):
                writer.close()
        except KeyboardInterrupt:
            writer.abort()
            raise Interrupted("interrupted (SIGINT); the partial output was removed") from None
        except BaseException:
            writer.abort()
            raise
        finally:
            reader.close()

    report.audio = "copied" if info.audio_streams else "none"
    report.stage_seconds = dict(timer.seconds)
    report.wall_seconds = time.perf_counter() - started
    report.peak_rss_mb = peak_rss_mb()
    if settings.report:
        write_json_atomically(settings.report, report.summary())
    return report
