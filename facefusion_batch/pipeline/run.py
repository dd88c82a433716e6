"""One render job: decode → batch → swap on worker threads → encode, in order.

Decode and encode have their own threads (in the reader and writer); workers
run the stages; the calling thread restores order and hands every frame to a
sink (one writer, or one writer per segment). Any failure or signal aborts the
open writers, so nothing is left at an output path.

`Renderer` holds what is expensive (sessions, prepared source faces) so that
many inputs, or many segments, share one load. Three kinds of job run on it:

- plain: the whole input into `settings.output`, audio copied (the default);
- a frame range (`settings.frames`): a video-only segment tagged with its range
  (see `video/decode/segments.py`), the unit of farm rendering;
- chunked (`farm/resume.py`): segments in a work directory beside the output,
  recorded in a manifest, then joined with the audio; an interrupted job
  resumes from the segments that are finished.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from facefusion_batch.config import RenderSettings
from facefusion_batch.cores import usable_cores
from facefusion_batch.errors import InputError, Interrupted, raise_if_signalled, signal_handlers
from facefusion_batch.kernels.base import Kernels
from facefusion_batch.kernels.factory import make_kernels
from facefusion_batch.pipeline.batcher import Batch, batches
from facefusion_batch.pipeline.build import Models, build_pipeline, load_models
from facefusion_batch.pipeline.executor import run_ordered
from facefusion_batch.pipeline.report import RenderReport
from facefusion_batch.pipeline.stages import BatchResult, FacePipeline
from facefusion_batch.timing import StageTimer
from facefusion_batch.video.compositing.compositing import CompositingWriters
from facefusion_batch.video.decode.probe import VideoInfo
from facefusion_batch.video.decode.reader import Frame, FrameReader
from facefusion_batch.video.encode.encoder_policy import native_layout, output_pix_fmt
from facefusion_batch.video.encode.sequence import SequenceWriter, is_sequence_pattern, sequence_codec
from facefusion_batch.video.encode.writer import VideoWriter
from facefusion_batch.video.pictures.colour import ViewTransform, view_transform
from facefusion_batch.video.pictures.fields import FIRST_FIELD, split_fields, weave_fields
from facefusion_batch.video.pictures.native import NativeFrames, compose
from facefusion_batch.video.pictures.planes import BGR24, NATIVE, YUV420P, PlaneLayout, plane_layout_for

log = logging.getLogger("ffbatch")


@contextmanager
def sigterm_as_interrupt():
    """A job's guarded block: the run's one signal handler set (errors.signal_handlers; the CLI
    installed it before the models loaded, a job run as a library gets it here), and a signal
    noted before the block whose exception never unwound (the models loading) stops the job
    here, before its first frame."""
    with signal_handlers():
        raise_if_signalled()
        yield


def default_threads(workers: int) -> int:
    return max(1, usable_cores() // max(1, workers))


@dataclass
class JobReport(RenderReport):
    """A render report plus what scale-out adds: the frame range and the segments."""

    frames: list[int] | None = None  # [start, end) of a --frames job
    # the same frames as [first, last], inclusive, in the input's own numbers (an image sequence's
    # file numbers, a video's frames from 0): what --frame-range and a farm's frame tokens name
    frame_range: list[int] | None = None
    segments: dict[str, int] = field(default_factory=dict)  # total / rendered / reused
    dropped: list[str] = field(default_factory=list)  # streams of the input the output could not keep
    reduced: list[str] = field(default_factory=list)  # precision the user agreed to lose (--allow-reduce)
    encoder_parameters: dict[str, Any] = field(default_factory=dict)  # video/encode/writer.encoder_parameters
    streams: list[dict[str, Any]] = field(default_factory=list)  # input stream -> what became of it
    compositing: list[dict[str, Any]] = field(default_factory=list)  # --matte-output, --face-only-output

    def summary(self) -> dict[str, Any]:
        data = super().summary()
        for key in ("frames", "segments", "compositing"):
            if not data.get(key):
                data.pop(key, None)
        return data


# Settings that decide which models and source faces are loaded: inputs that agree on these
# share one Renderer.
_RENDERER_KEYS = (
    "sources",
    "device",
    "threads",
    "workers",
    "models_dir",
    "swap",
    "faces",
    "detector",
    "mesh",
    "source_face_index",
    "tracking",
)


class Renderer:
    """Loaded models and prepared sources, shared by every job of a run; each worker gets its
    own kernel set (`kernels()`, made on the worker's thread)."""

    def __init__(self, settings: RenderSettings, models: Models, pipeline: FacePipeline, load_s: float):
        self.settings = settings
        self.models = models
        self.pipeline = pipeline
        self.load_seconds = load_s
        self._own_kernels: Kernels | None = None
        # the kernel set, chosen once from the device (benchmarks may put the host set on a GPU)
        self.kernel_set: Callable[[], Kernels] = lambda: make_kernels(self.models.backend)

    def kernels(self) -> Kernels:
        """A new kernel set for this renderer's device (call it on the thread that uses it)."""
        return self.kernel_set()

    @property
    def accepts_planes(self) -> bool:
        """Whether frames may stay the decoder's yuv420p planes (the kernel set converts)."""
        return self._kernels_here().accepts_planes

    def _kernels_here(self) -> Kernels:
        if self._own_kernels is None:
            self._own_kernels = self.kernels()
        return self._own_kernels

    def swap(self, images: list[np.ndarray]) -> BatchResult:
        """One batch through the pipeline on the calling thread (previews, stills)."""
        return self.pipeline(self._kernels_here(), images)

    @classmethod
    def load(cls, settings: RenderSettings) -> Renderer:
        started = time.perf_counter()
        threads = settings.threads or default_threads(settings.workers)
        models = load_models(
            settings.device,
            threads=threads,
            models_dir=settings.models_dir,
            detector=settings.detector,
            mesh=settings.mesh,
            policy=settings.batch_policy,
        )
        pipeline = build_pipeline(
            models,
            settings.sources,
            settings.swap,
            settings.faces,
            source_face_index=settings.source_face_index,
            tracking=settings.tracking,
        )
        return cls(settings, models, pipeline, time.perf_counter() - started)

    def serves(self, settings: RenderSettings) -> bool:
        return all(getattr(settings, k) == getattr(self.settings, k) for k in _RENDERER_KEYS)

    def frame_layout(
        self,
        info: VideoInfo,
        report: RenderReport | None = None,
        *,
        bgr_view: bool = False,
        settings: RenderSettings | None = None,
    ) -> PlaneLayout | NativeFrames | None:
        """The layout a job's frames keep from decoder to encoder: yuv420p planes (PlaneLayout),
        BGR with each frame's own picture beside it (NativeFrames), or None for BGR frames.

        Planes only where the pipeline converts colour on the device (`accepts_planes`) and the
        input and output allow it exactly (video/pictures/planes.py), and the job needs no 8-bit BGR view
        of its swapped frames (`bgr_view`: the compositing outputs are made from it); otherwise
        the native pictures where the input's pixel format allows (video/pictures/native.py); said in the
        log and the report. `settings`: the job's (its output and colour space), when not the
        renderer's."""
        settings = settings or self.settings
        pix_fmt = self._output_pix_fmt(info, settings)
        view = input_view(settings, info)
        if not self.accepts_planes:
            return self._native_layout(info, pix_fmt, report, view)
        if bgr_view:
            log.info("frames cross to the device as BGR: the compositing outputs are made from the BGR view")
            return self._native_layout(info, pix_fmt, report, view)
        layout, why_not = plane_layout_for(info, pix_fmt)
        if layout is None:
            log.info("frames cross to the device as BGR: %s", why_not)
            return self._native_layout(info, pix_fmt, report, view)
        log.info(
            "frames stay yuv420p planes (%s) from decoder to encoder; the device converts", layout.matrix
        )
        if report is not None:
            report.frames_as = f"{YUV420P} ({layout.matrix})"
        return layout

    @staticmethod
    def _output_pix_fmt(info: VideoInfo, settings: RenderSettings) -> str:
        if is_sequence_pattern(settings.output):
            return sequence_codec(settings.output, settings.encoder.pix_fmt, info.bit_depth)[1]
        return output_pix_fmt(settings.encoder, info)

    @staticmethod
    def _native_layout(
        info: VideoInfo, pix_fmt: str, report: RenderReport | None, view: ViewTransform | None
    ) -> NativeFrames | None:
        if view is not None:
            log.info("the floating-point input is shown to the face stages through %s", view.name)
        why_not = native_layout(info, pix_fmt)
        if why_not:
            log.info("frames are processed as 8-bit BGR end to end: %s", why_not)
            return None
        log.info("frames keep their own %s pictures; only the painted rectangles are converted", info.pix_fmt)
        first = FIRST_FIELD.get(info.field_order)
        fields = "" if first is None else f", swapped per field ({'top' if first == 0 else 'bottom'} first)"
        shown = f"{view.name} " if view is not None else ""
        if report is not None:
            report.frames_as = f"{NATIVE} {info.pix_fmt} (8-bit BGR {shown}view for the face stages{fields})"
        return NativeFrames(info.pix_fmt, info.bit_depth, first)

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
    layout: PlaneLayout | NativeFrames | None = None,
    compositing: CompositingWriters | None = None,
    on_painted: Callable[[Frame, list[tuple[int, int, int, int]]], None] | None = None,
    total: int | None = None,
) -> None:
    """Swap every frame of `frames` in batches and hand each result to `sink`, in order
    (and, with `compositing`, each frame's paste alpha as a uint8 [H, W] matte and, when asked
    for, its face layer to those writers, before the frame goes to `sink`).

    `layout`: the frames are yuv420p planes of this layout (Renderer.frame_layout), not BGR; or
    NativeFrames: BGR, and each result is the frame's own picture with the swap composed in.
    `on_painted`: after `sink`, each written frame's painted rectangles (x, y, w, h)."""
    native = isinstance(layout, NativeFrames)
    planes = None if native else layout
    first_field = layout.first_field if isinstance(layout, NativeFrames) else None
    pipeline = renderer.pipeline
    pipeline.timer = timer
    pipeline.start_job()

    def make_worker(_: int):
        kernels = renderer.kernels()  # on the worker's own thread: its own stream on a GPU

        def process(batch: Batch):
            t0 = time.perf_counter()
            images = [frame.image for frame in batch.items]
            pictures = images if first_field is None else split_fields(images, first_field)
            result = pipeline(kernels, pictures, planes, seq=batch.seq, matte=compositing is not None)
            if first_field is not None:
                result = woven(result, images, pictures, first_field)
            if compositing is not None:  # from the 8-bit view, before the native compose
                result.mattes = matte_pictures(result.mattes or {}, images)
                with timer.stage("compositing"):
                    result.compositing = {
                        i: compositing.prepare(frame.image, result.frames[i], result.mattes[i], frame.native)
                        for i, frame in enumerate(batch.items)
                        if not frame.warmup
                    }
            if native:
                with timer.stage("compose"):
                    compose_native(batch.items, result)
            return result, time.perf_counter() - t0

        return process

    policy = settings.batch_policy
    size = policy.shared_frames(total, settings.workers)  # `total`: about the frames coming, if known
    stream = batches(frames, size, settings.batch_window_ms, frames_for=policy.frames_for)
    try:
        _consume(stream, make_worker, sink, settings, report, timer, on_progress, compositing, on_painted)
    except BaseException:
        pipeline.abort()
        raise
    report.tracking = pipeline.tracking()


def compose_native(frames: list[Frame], result: BatchResult) -> None:
    """Replace each result by its frame's native picture with the change the swap made composed
    in (video/pictures/native.py); frames without a native picture (a replaced frame before the first
    good one) stay BGR, which the writer converts."""
    rects: dict[int, list] = {}
    for rect in result.painted:
        rects.setdefault(rect[0], []).append(rect)
    for i, frame in enumerate(frames):
        if frame.native is not None and not frame.warmup:
            result.frames[i] = compose(frame.native, frame.image, result.frames[i], rects.get(i, []))


def woven(result: BatchResult, images: list[np.ndarray], fields: list[np.ndarray], first: int) -> BatchResult:
    """A batch swapped as fields (video/pictures/fields.py) back as frames: the fields' changes woven in,
    per-frame counts summed over each frame's two fields (face counts stay per field), the faces
    not swapped and the swap's decisions too: every per-frame count lines up with the batch's
    frames."""
    frames, painted, mattes = weave_fields(
        images, fields, result.frames, result.painted, first, result.mattes
    )

    def per_frame(per_field: np.ndarray) -> np.ndarray:
        return per_field.reshape(-1, 2).sum(axis=1)

    found, swapped_fields = result.found_per_frame, result.swapped_per_frame
    assert found is not None and swapped_fields is not None  # a swapped batch counts its faces per frame
    swapped = per_frame(swapped_fields)
    return replace(
        result,
        frames=frames,
        painted=painted,
        mattes=mattes,
        found_per_frame=per_frame(found),
        swapped_per_frame=swapped,
        dropped_per_frame={reason: per_frame(n) for reason, n in result.dropped_per_frame.items()},
        decisions_per_frame={kind: per_frame(n) for kind, n in result.decisions_per_frame.items()},
        frames_with_faces=int(np.count_nonzero(swapped)),
    )


def matte_pictures(mattes: dict[int, np.ndarray], images: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Every frame's matte as uint8 0–255: 0 exactly where nothing was pasted (a weight too small
    to round to 1 still counts: it may have moved a pixel by a level)."""
    out = {}
    for i, image in enumerate(images):
        alpha = mattes.get(i)
        height, width = image.shape[:2]
        if alpha is None:
            out[i] = np.zeros((height, width), np.uint8)
        else:
            out[i] = np.clip(np.ceil(alpha * 255 - 1e-3), 0, 255).astype(np.uint8)
    return out


def _consume(
    stream, make_worker, sink, settings, report, timer, on_progress, compositing=None, on_painted=None
) -> None:
    for batch, (result, latency) in run_ordered(stream, workers=settings.workers, make_worker=make_worker):
        written = np.array([not frame.warmup for frame in batch.items])
        with timer.stage("write"):
            for i, (frame, image) in enumerate(zip(batch.items, result.frames, strict=True)):
                if not frame.warmup:  # warm-up frames only feed the face tracks
                    if compositing is not None:  # first: a chunk the frame ends is then complete
                        compositing.write(frame.index, frame.pts, frame.time_base, result.compositing[i])
                    sink(frame, image)
                    if on_painted is not None:
                        on_painted(frame, [(x, y, w, h) for f, x, y, w, h in result.painted if f == i])
        n = int(written.sum())
        report.frames_in += n
        report.frames_out += n
        report.faces_found += int(result.found_per_frame[written].sum())
        report.faces_swapped += int(result.swapped_per_frame[written].sum())
        report.frames_with_faces += int(np.count_nonzero(result.swapped_per_frame[written]))
        count_not_swapped(report, result, written)
        report.frames_replaced += sum(frame.replaced for frame in batch.items if not frame.warmup)
        report.frames_concealed += sum(frame.concealed for frame in batch.items if not frame.warmup)
        report.batches += 1
        report.batch_sizes.append(len(batch.items))
        report.batch_latency_s.append(latency)
        log.debug(
            "batch %d: %d frames, %d faces found, %d swapped, %.3f s",
            batch.seq,
            len(batch.items),
            int(result.found_per_frame.sum()),
            int(result.swapped_per_frame.sum()),
            latency,
        )
        if on_progress and n:
            on_progress(n)
        raise_if_signalled()


def count_not_swapped(report: RenderReport, result: BatchResult, written: np.ndarray | None = None) -> None:
    """Add a batch's dropped faces, by reason, and the swap's decisions to the report (only
    frames that are `written`)."""
    for reason, per_frame in result.dropped_per_frame.items():
        n = int(per_frame[written].sum() if written is not None else per_frame.sum())
        if n:
            report.faces_not_swapped[reason] = report.faces_not_swapped.get(reason, 0) + n
    for decision, per_frame in result.decisions_per_frame.items():
        n = int(per_frame[written].sum() if written is not None else per_frame.sum())
        if n:
            report.swap_decisions[decision] = report.swap_decisions.get(decision, 0) + n


def input_view(settings: RenderSettings, info: VideoInfo) -> ViewTransform | None:
    """How the input's floating-point (EXR) pictures are shown to the face stages (video/pictures/colour.py);
    None for integer pictures. InputError for a colour space or OCIO config that cannot be used."""
    return view_transform(info.pix_fmt, settings.input_colorspace, settings.ocio_config)


def pixel_format_of(layout: PlaneLayout | NativeFrames | None) -> str:
    if isinstance(layout, NativeFrames):
        return NATIVE
    return BGR24 if layout is None else YUV420P


def read_ranges(
    settings: RenderSettings,
    info: VideoInfo,
    ranges: list[tuple[int, int]],
    index=None,
    layout: PlaneLayout | NativeFrames | None = None,
    warmup: int = 0,
) -> Generator[Frame, None, None]:
    """The frames of several ranges of one input, one reader per run of adjacent ranges; each run
    starts up to `warmup` frames early with frames marked `warmup` (analysed for the face tracks,
    never written), so a segment renders what a whole render gives for its frames."""
    runs: list[list[int]] = []
    for start, end in sorted(ranges):
        if runs and runs[-1][1] == start:
            runs[-1][1] = end
        else:
            runs.append([start, end])
    for start, end in runs:
        early = min(start, warmup)
        reader = FrameReader(
            settings.input,
            info=info,
            frames=(start - early, end),
            index=index,
            pixel_format=pixel_format_of(layout),
            hwaccel=settings.device.hwaccel,
            view=input_view(settings, info),
        )
        try:
            for i, frame in enumerate(reader):
                yield replace(frame, warmup=True) if i < early else frame
        finally:
            reader.close()


def check_faces_swapped(settings: RenderSettings, swapped: int, found: int, what: str) -> None:
    """`--fail-if-no-faces`: a job that swapped no face fails (exit 2) before its output is kept."""
    if settings.fail_if_no_faces and swapped == 0:
        raise InputError(
            f"--fail-if-no-faces: no face was swapped in {settings.input} ({found} faces found); "
            f"the {what} was not written"
        )


def log_start(settings: RenderSettings, info: VideoInfo, report: RenderReport, frames: int | None) -> None:
    log.info(
        "rendering %s (%dx%d, %s frames) with %s",
        settings.input,
        info.width,
        info.height,
        frames if frames is not None else "?",
        report.backend,
    )


def render_into(
    renderer,
    reader: FrameReader | Generator[Frame, None, None],
    writer: VideoWriter | SequenceWriter,
    settings: RenderSettings,
    report: RenderReport,
    timer: StageTimer,
    on_progress,
    layout: PlaneLayout | NativeFrames | None,
    what: str,
    check: Callable[[], None] | None = None,
    compositing: CompositingWriters | None = None,
    total: int | None = None,
) -> None:
    """Swap every frame of `reader` into `writer` (and into the `compositing` writers their matte
    and face layer). The writers are closed (their files renamed into place) only when everything,
    `check()` included, went well; otherwise they are aborted and their temporary files removed.
    `what` names the output in the interrupt message."""
    faces_before = report.faces_swapped
    # the compositing outputs close first: a job stopped in between leaves no finished main output
    # (the mark a rerun of a segment goes by) without its frames
    writers = [*(compositing.writers if compositing is not None else ()), writer]
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
            compositing,
            total=total,
        )
        if check is not None:
            check()
        check_faces_swapped(settings, report.faces_swapped - faces_before, report.faces_found, what)
        with timer.stage("finish"):
            for each in writers:
                each.close()
    except KeyboardInterrupt:
        for each in writers:
            each.abort()
        raise Interrupted(f"interrupted (SIGINT); the partial {what} was removed") from None
    except BaseException:
        for each in writers:
            each.abort()
        raise
    finally:
        reader.close()
