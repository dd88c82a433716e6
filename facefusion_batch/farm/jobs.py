"""`ffbatch render` with one or several inputs, a frame range, chunks or Ray: the command's logic.

Several inputs (`--output-dir`): models are loaded and the source faces prepared
once; the inputs are rendered in turn through the same pipeline (the batcher
never mixes resolutions within a batch). An input that fails is reported and
the others go on; the exit status is 2 if any failed. An output that already
exists and was rendered from the same input with the same settings is skipped
as up to date, so the same command after a crash or Ctrl-C renders only what
is missing. `--report` then holds a summary and one entry per input.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from facefusion_batch import RENDER_REVISION, __version__
from facefusion_batch.config import (
    RenderSettings,
    check_parent_dir,
    check_writes,
    compositing_outputs,
    compositing_start_number,
    files_read,
    settings_record,
    validate,
    validate_options,
)
from facefusion_batch.errors import (
    EXIT_OK,
    EXIT_USAGE,
    FfbatchError,
    InputError,
    Interrupted,
    signal_behind,
)
from facefusion_batch.farm.outputs import is_done, job_for, output_tags, outputs_for
from facefusion_batch.farm.ray_runner import render_with_ray
from facefusion_batch.farm.resume import render_chunked
from facefusion_batch.farm.segment import prepare_segment_job, render_segment
from facefusion_batch.farm.single_frame import is_single_frame, render_single_frame
from facefusion_batch.fsutil import claim_output, write_json_atomically
from facefusion_batch.pipeline.report import WarningLog, peak_rss_mb
from facefusion_batch.pipeline.run import (
    JobReport,
    Renderer,
    check_faces_swapped,
    count_not_swapped,
    input_view,
    log_start,
    pixel_format_of,
    render_into,
    sigterm_as_interrupt,
)
from facefusion_batch.progress import Progress
from facefusion_batch.settings.types import PlanSettings
from facefusion_batch.stdout import say
from facefusion_batch.timing import StageTimer
from facefusion_batch.video.compositing.compositing import describe_output, open_compositing_writers
from facefusion_batch.video.decode.hwaccel import hwaccel_problem
from facefusion_batch.video.decode.probe import check_not_a_pipe, probe
from facefusion_batch.video.decode.reader import FrameReader
from facefusion_batch.video.decode.segments import check_complete, format_range, frames_of_range, parse_range
from facefusion_batch.video.encode.encoder_policy import check_output, encoder_parameters
from facefusion_batch.video.encode.formats import CONTAINERS, check_fits
from facefusion_batch.video.encode.sequence import (
    SequenceWriter,
    check_sequence_output,
    default_start_number,
    is_sequence_pattern,
    printf_pattern,
)
from facefusion_batch.video.encode.writer import VideoWriter
from facefusion_batch.video.pictures.stills import (
    DEEP_IMAGE_SUFFIXES,
    IMAGE_SUFFIXES,
    is_still_image,
    keep_depth,
    read_deep_image,
    read_image,
    still_stream_map,
    write_image_atomically,
)

log = logging.getLogger("ffbatch")

# Videos longer than this are rendered in chunks of AUTO_CHUNK_FRAMES (resumable);
# --chunk-frames N sets the chunk size for any video, --chunk-frames 0 turns chunks off.
AUTO_CHUNK_ABOVE = 3000
AUTO_CHUNK_FRAMES = PlanSettings().chunk_frames


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
    if is_single_frame(settings.input):  # one DPX/EXR frame: a one-frame sequence
        kwargs = {"on_progress": on_progress, "on_start": on_start, "renderer": renderer}
        return render_single_frame(settings, render, **kwargs)
    if settings.frames is not None:
        skipped = prepare_segment_job(settings)
        if skipped is not None:
            if settings.report:  # a skip has its report too: the last run's would tell another story
                _write_report_quietly(settings, skipped.summary(), WarningLog())
            return skipped
    try:
        validate(settings)
    except FfbatchError as exc:
        if settings.report and _report_is_safe(settings):
            _write_report_quietly(settings, {"status": "failed", "message": str(exc)}, WarningLog())
        raise
    with claim_output(settings.output), WarningLog() as warnings:
        partial: list[JobReport] = []  # the job's report as far as it got: a failed one says how far
        try:
            report = _render_claimed(settings, on_progress, on_start, renderer, output_tags, started, partial)
        except (Exception, KeyboardInterrupt) as exc:
            if settings.report:
                done = (
                    {"frames_in": partial[0].frames_in, "frames_out": partial[0].frames_out}
                    if partial
                    else {}
                )
                _write_report_quietly(settings, {**done, **failure_record(exc)}, warnings)
            raise
        if settings.report:
            write_report(settings, report.summary(), warnings)
    return report


def failure_record(exc: BaseException) -> dict[str, str]:
    """status and message of a job that did not finish, as its report says them (a signal that
    came out as another exception, inside a C extension's import, is still an interrupt)."""
    if isinstance(exc, Interrupted | KeyboardInterrupt):
        return {"status": "interrupted", "message": str(exc) or "interrupted (SIGINT)"}
    stopped = signal_behind(exc)
    if stopped is not None:
        return {"status": "interrupted", "message": str(stopped)}
    if isinstance(exc, FfbatchError):
        return {"status": "failed", "message": str(exc)}
    return {"status": "failed", "message": f"internal error: {type(exc).__name__}: {exc}"}


def _report_is_safe(settings: RenderSettings) -> bool:
    """Whether --report may be written although the job was refused (it is none of its files)."""
    if settings.report is None:
        return False
    try:
        check_writes(
            [("--report", Path(settings.report))], [*files_read(settings), ("output", Path(settings.output))]
        )
        return Path(settings.report).parent.is_dir() or not str(Path(settings.report).parent)
    except FfbatchError:
        return False


_GIVEN: list[list[str]] = []  # the arguments of the cli.main calls running, innermost last


@contextlib.contextmanager
def running_command(argv: list[str]) -> Iterator[None]:
    """While it is open, `command_line()` is `argv` (what cli.main was given: a caller in-process
    passes its own, whatever this process's sys.argv says)."""
    _GIVEN.append(list(argv))
    try:
        yield
    finally:
        _GIVEN.pop()


def command_line() -> str:
    """The command line as a shell would repeat it."""
    return shlex.join(["ffbatch", *(_GIVEN[-1] if _GIVEN else sys.argv[1:])])


def _write_report_quietly(settings: RenderSettings, data: dict[str, Any], warnings: WarningLog) -> None:
    """The report of a failed job: written if it can be; the job's own error is the one shown."""
    try:
        write_report(settings, data, warnings)
    except (FfbatchError, OSError) as exc:
        log.warning("could not write the report %s: %s", settings.report, exc)


def write_report(settings: RenderSettings, data: dict[str, Any], warnings: WarningLog) -> None:
    """`--report`: what the job did, with what made it (version, command line, settings, warnings)."""
    if settings.report is None:
        return
    record = {
        "input": str(settings.input),
        "output": str(settings.output),
        **data,
        "ffbatch": __version__,
        "render_revision": RENDER_REVISION,
        "command": command_line(),
        "settings": settings_record(settings),
        "warnings": warnings.messages,
    }
    write_json_atomically(settings.report, record)


def _render_claimed(
    settings, on_progress, on_start, renderer, output_tags, started, partial=None
) -> JobReport:
    if settings.device.hwaccel != "none":
        problem = hwaccel_problem(settings.device.hwaccel)
        if problem:
            raise InputError(
                f"--hwaccel {settings.device.hwaccel}: the GPU video decoder cannot be used here "
                f"({problem}); use --hwaccel none"
            )
    if is_still_image(settings.input) and not is_sequence_pattern(settings.input):
        return render_still(settings, renderer, started)
    info = probe(settings.input, fps=settings.input_fps)
    if settings.fail_on_truncated and not is_sequence_pattern(settings.input):
        check_complete(info)
    start_number = settings.encoder.start_number
    if start_number is None:
        start_number = default_start_number(settings.input)
    if is_sequence_pattern(settings.output):
        begin, end = settings.frames or (0, None)
        total = info.frame_count or 1  # unknown: the first frame at least
        count = (total if end is None else min(int(end), total)) - begin
        check_sequence_output(  # a range's own frames
            settings.output, settings.encoder.pix_fmt, start_number + begin, settings.overwrite, count
        )
        settings = replace(settings, encoder=replace(settings.encoder, start_number=start_number))
    reduced = check_output(settings.encoder, info, settings.output)  # exit 2 before any decoding
    for what in reduced:
        log.warning("%s: %s", settings.output, what)
    if log.isEnabledFor(logging.DEBUG):
        log_resolved(settings, info)
    timer = StageTimer()
    if renderer is not None and not renderer.serves(settings):
        raise ValueError("this Renderer was loaded for other sources or model settings")
    if renderer is None:
        with sigterm_as_interrupt():  # loading is guarded too: a signal there ends the job, no output
            renderer = Renderer.load(settings)
        timer.add("load", renderer.load_seconds)
    report = renderer.new_report(settings)
    if partial is not None:
        partial.append(report)
    report.reduced = reduced
    report.clock_discontinuities = len(info.clock.discontinuities)
    if info.clock:
        log.warning(
            "%s: its clock jumps %d time(s) mid-clip (%s; spliced recordings?); each part is moved to "
            "follow the one before, video and audio by the same time",
            settings.input,
            len(info.clock.discontinuities),
            info.clock.describe(),
        )
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
            render_segment(renderer, settings, info, report, timer, on_progress, on_start)
        elif chunk:
            render_chunked(renderer, settings, info, chunk, report, timer, on_progress, on_start, output_tags)
        else:
            _render_plain(renderer, settings, info, report, timer, on_progress, on_start, output_tags)
    report.audio = report.audio or ("copied" if info.audio_streams else "none")
    number = compositing_start_number(settings)
    report.compositing = [describe_output(o, p, info, number) for o, p in compositing_outputs(settings)]
    if not is_sequence_pattern(settings.output):
        report.encoder_parameters = encoder_parameters(settings.encoder, info)
    if not report.streams:  # chunked and --frames jobs: their writers see video only
        report.streams = [
            {"input": info.video_stream_index, "kind": "video", "codec": info.codec, "output": 0,
             "action": f"re-encoded to {settings.encoder.codec}"},
        ] + ([{"input": None, "kind": "audio", "count": info.audio_streams, "action": report.audio}]
             if info.audio_streams else []) + [
            {"input": index, "kind": kind, "codec": codec, "action": "dropped",
             "reason": "segments hold one video"}
            for index, kind, codec in info.other_streams if kind in ("cover art", "second video")
        ]  # fmt: skip
    if report.faces_swapped == 0 and report.frames_out and not report.segments.get("reused"):
        log.warning(
            "0 faces swapped in %s (%d faces found in %d frames): the output is the input re-encoded",
            settings.input,
            report.faces_found,
            report.frames_out,
        )
    report.stage_seconds = dict(timer.seconds)
    report.wall_seconds = time.perf_counter() - started
    report.peak_rss_mb = peak_rss_mb()
    for entry in report.streams:
        log.debug("stream map: %s", json.dumps(entry))
    log.debug("stage seconds: %s", json.dumps({k: round(v, 3) for k, v in sorted(timer.seconds.items())}))
    log.debug("faces not swapped, by reason: %s", json.dumps(report.faces_not_swapped))
    backend_report = getattr(renderer.models.backend, "report", None)
    if callable(backend_report):
        report.device = backend_report()
    return report


def log_resolved(settings: RenderSettings, info) -> None:
    """`-v`: the settings as resolved, the input as probed, the decoder and the encoder chosen."""
    log.debug("settings: %s", json.dumps(settings_record(settings), sort_keys=True))
    log.debug(
        "input: %s %dx%d %s, %s frames%s, time base %s, %d audio stream(s), other streams %s",
        info.format_name,
        info.width,
        info.height,
        info.pix_fmt,
        info.frame_count,
        " (estimated)" if info.frame_count_estimated else "",
        info.time_base,
        info.audio_streams,
        list(info.other_streams),
    )
    hw = settings.device.hwaccel
    log.debug("decoder: %s (%s)", info.codec, "software" if hw == "none" else f"--hwaccel {hw}")
    if not is_sequence_pattern(settings.output):
        log.debug("encoder: %s", json.dumps(encoder_parameters(settings.encoder, info), sort_keys=True))


def chunk_size_for(settings: RenderSettings, frame_count: int | None) -> int:
    """Frames per chunk for a resumable render; 0 for a plain one."""
    if (
        settings.frames is not None
        or is_sequence_pattern(settings.output)
        or is_sequence_pattern(settings.input)
    ):
        return 0  # an image sequence is written whole (its frames are files already)
    if settings.chunk_frames is not None:
        return settings.chunk_frames
    if frame_count is not None and frame_count > AUTO_CHUNK_ABOVE:
        return AUTO_CHUNK_FRAMES
    return 0


def render_still(settings: RenderSettings, renderer: Renderer | None, started: float) -> JobReport:
    """A photo as the target: one frame through the same pipeline, written as an image."""
    if is_sequence_pattern(settings.output):
        raise InputError(f"input {settings.input} is a still image: write one image, not {settings.output}")
    if not is_still_image(settings.output):
        raise InputError(
            f"input {settings.input} is a still image: write the result to an image file "
            f"({', '.join(IMAGE_SUFFIXES)}), not {settings.output.suffix or 'a file without extension'}"
        )
    if settings.frames is not None or settings.chunk_frames:
        raise InputError(f"input {settings.input} is a still image: --frames and --chunk-frames need a video")
    for option, _ in compositing_outputs(settings):
        raise InputError(f"input {settings.input} is a still image: {option} is written for videos only")
    image = read_image(settings.input, what="input")
    deep = read_deep_image(settings.input)  # a 16-bit still stays 16-bit, or is refused
    if deep is not None and settings.output.suffix.lower() not in DEEP_IMAGE_SUFFIXES:
        if not settings.encoder.allow_reduce:
            raise InputError(
                f"input {settings.input} is a 16-bit image: write a .png or .tif to keep its 16 bits, "
                f"or pass --allow-reduce to write {settings.output.suffix} at 8 bits"
            )
        log.warning("%s: the 16-bit input is written at 8 bits (--allow-reduce)", settings.output)
        deep = None
    timer = StageTimer()
    if renderer is None:
        with sigterm_as_interrupt():  # loading is guarded too: a signal there ends the job, no output
            renderer = Renderer.load(settings)
        timer.add("load", renderer.load_seconds)
    report = renderer.new_report(settings)
    with timer.stage("swap_image"):
        result = renderer.swap([image])
    check_faces_swapped(settings, result.faces_swapped, result.faces_found, "output")
    out = result.frames[0] if deep is None else keep_depth(deep, image, result.frames[0])
    write_image_atomically(settings.output, out)
    report.frames_in = report.frames_out = 1
    report.faces_found = result.faces_found
    report.faces_swapped = result.faces_swapped
    report.frames_with_faces = result.frames_with_faces
    count_not_swapped(report, result)
    report.batches = 1
    report.batch_sizes.append(1)
    report.audio = "none"
    report.encoder = "image"
    report.streams = still_stream_map(settings.input, settings.output)
    report.stage_seconds = dict(timer.seconds)
    report.wall_seconds = time.perf_counter() - started
    report.peak_rss_mb = peak_rss_mb()
    if result.faces_swapped:
        log.info("swapped %d face(s) in the still image %s", result.faces_swapped, settings.input)
    else:
        log.warning(
            "0 faces swapped in the still image %s (%d faces found)", settings.input, result.faces_found
        )
    return report


def _render_plain(renderer, settings, info, report, timer, on_progress, on_start, output_tags=None) -> None:
    log_start(settings, info, report, info.frame_count)
    if on_start:
        on_start(info.frame_count)
    layout = renderer.frame_layout(
        info, report, bgr_view=bool(compositing_outputs(settings)), settings=settings
    )
    reader = FrameReader(
        settings.input,
        info=info,
        on_decode_error=settings.on_decode_error,
        pixel_format=pixel_format_of(layout),
        hwaccel=settings.device.hwaccel,
        view=input_view(settings, info),
    )
    writer: SequenceWriter | VideoWriter
    if is_sequence_pattern(settings.output):
        writer = SequenceWriter(
            settings.output,
            info,
            pix_fmt=settings.encoder.pix_fmt,
            start_number=settings.encoder.start_number,
            pixel_format=pixel_format_of(layout),
        )
    else:
        writer = VideoWriter(
            settings.output,
            info,
            settings.encoder,
            audio_from=settings.input if info.audio_streams or info.other_streams else None,
            metadata=output_tags,
            pixel_format=pixel_format_of(layout),
        )
    try:
        number = compositing_start_number(settings)
        # tagged like the output (a batch run's): a rerun checks them before it skips the input
        compositing = open_compositing_writers(
            settings.matte_output, settings.face_only_output, info, number, output_tags
        )
    except BaseException:
        writer.abort()
        raise
    known = None if info.frame_count_estimated else info.frame_count  # an estimate could be far off
    render_into(
        renderer,
        reader,
        writer,
        settings,
        report,
        timer,
        on_progress,
        layout,
        "output",
        None,
        compositing,
        total=known,
    )
    report.audio = writer.audio_summary
    report.dropped = list(writer.dropped)
    report.streams = list(getattr(writer, "streams", []))
    if isinstance(writer, SequenceWriter):
        report.encoder = f"{writer.codec} {writer.pix_fmt}, an image sequence from {writer.start_number}"
    else:
        enc = settings.encoder
        profile = enc.profile or enc.spec.default_profile
        shown = f" profile={profile}" if profile else ""
        report.encoder = f"{enc.codec}{shown} pix_fmt={writer.pix_fmt} preset={enc.preset}"


def run_render_command(
    base: RenderSettings,
    inputs: list[Path],
    *,
    output: Path | None,
    output_dir: Path | None,
    output_pattern: str,
    frames: str | None,
    ray: str | None,
    ray_workers: int | None,
    verbose: bool = False,
) -> int:
    """Everything `ffbatch render` does after parsing; returns the exit status."""
    if not inputs:
        raise InputError("give at least one input video")
    if ray_workers is not None and not 1 <= ray_workers <= 1024:
        raise InputError(f"--ray-workers must be between 1 and 1024 (got {ray_workers})")
    if output is not None and output_dir is not None:
        raise InputError("give either -o/--output (one input) or --output-dir (any number), not both")
    if output is None and output_dir is None:
        raise InputError("missing option -o/--output: where to write the video (or --output-dir DIR)")
    if output is not None and len(inputs) > 1:
        raise InputError(
            f"{len(inputs)} inputs but one -o/--output; use --output-dir DIR (and --output-pattern) instead"
        )
    if frames is not None:
        if len(inputs) > 1 or output is None:
            raise InputError("--frames renders one range of one input: give one input and -o SEGMENT")
        if ray is not None:
            raise InputError("--frames and --ray do not go together (--ray makes its own segments)")
        base = replace(base, frames=parse_range(frames))
    if output_dir is not None and not output_dir.is_dir():
        raise InputError(f"--output-dir {output_dir} is not a directory")
    if output is not None:
        outputs = [output]
    else:
        assert output_dir is not None  # one of them was given (checked above)
        outputs = outputs_for(inputs, output_dir, output_pattern)
    for out in outputs:  # every input's, before the first render: not half-way through the run
        if not is_sequence_pattern(out) and Path(out).suffix.lower() in CONTAINERS:
            check_fits(base.encoder.codec, Path(out))
    jobs = [job_for(base, i, o) for i, o in zip(inputs, outputs, strict=True)]
    # before any work: no output (nor the report) is a file any job of the run reads
    writes = [
        ("output", Path(o)) if len(inputs) == 1 else (f"the output of {i},", Path(o))
        for i, o in zip(inputs, outputs, strict=True)
    ]
    writes += [  # each input's compositing paths, expanded: two inputs' colliding is exit 2 here
        (option, path) if len(inputs) == 1 else (f"the {option} of {job.input},", path)
        for job in jobs
        for option, path in compositing_outputs(job)
    ]
    if base.report is not None:
        writes.append(("--report", Path(base.report)))
    check_writes(writes, [read for job in jobs for read in files_read(job)])
    if output is None:  # batch mode: a template's directory (`layers/{stem}/`) of every input first
        for job in jobs:
            for option, path in compositing_outputs(job):
                check_parent_dir(option, path)
    if ray is not None:
        return render_with_ray(
            jobs, address=ray, workers=ray_workers, report_path=base.report, batch=output is None
        )
    if output is not None:
        return _render_one(jobs[0])
    return render_batch(jobs, report_path=base.report)


def _render_one(settings: RenderSettings) -> int:
    """The single-input command: its output, its report and its messages as they always were."""
    with Progress(enabled=not settings.quiet) as progress:
        result = render(settings, on_progress=progress.update, on_start=progress.start)
    if result.status != "skipped":
        log_done(result)
    say(str(settings.output))
    return EXIT_OK


def log_done(result) -> None:
    summary = result.summary()
    log.info(
        "done: %d frames in %.1f s (%.1f fps), %d faces swapped, audio %s",
        result.frames_out,
        result.wall_seconds,
        summary["fps"],
        result.faces_swapped,
        result.audio,
    )


def render_batch(jobs: list[RenderSettings], *, report_path: Path | None) -> int:
    started = time.perf_counter()
    validate_options(jobs[0])  # a bad option fails the run once, not every input
    entries: list[dict[str, Any]] = []
    counts = {"ok": 0, "skipped": 0, "failed": 0}
    try:
        renderer = _render_jobs(jobs, entries, counts)
    except (Exception, KeyboardInterrupt) as exc:
        if report_path:
            summary = {"inputs": len(jobs), **counts, **failure_record(exc), "jobs": entries}
            with contextlib.suppress(FfbatchError, OSError):
                write_json_atomically(Path(report_path), _with_provenance(summary, jobs[0]), sort_keys=True)
        raise
    wall = time.perf_counter() - started
    summary = {
        "inputs": len(jobs),
        **counts,
        "status": "failed" if counts["failed"] else "ok",
        "wall_seconds": round(wall, 3),
        "model_load_seconds": round(renderer.load_seconds, 3) if renderer else 0.0,
        "jobs": entries,
    }
    if report_path:
        write_json_atomically(Path(report_path), _with_provenance(summary, jobs[0]), sort_keys=True)
    log.info(
        "%d inputs: %d rendered, %d up to date, %d failed, in %.1f s",
        len(jobs),
        counts["ok"],
        counts["skipped"],
        counts["failed"],
        wall,
    )
    for entry in entries:
        if entry["status"] == "failed":
            log.error("failed: %s: %s", entry["input"], entry["message"])
    return EXIT_USAGE if counts["failed"] else EXIT_OK


def _with_provenance(summary: dict[str, Any], job: RenderSettings) -> dict[str, Any]:
    return {
        **summary,
        "ffbatch": __version__,
        "render_revision": RENDER_REVISION,
        "command": command_line(),
        "settings": settings_record(replace(job, input=Path(""), output=Path(""))),
    }


def _render_jobs(jobs: list[RenderSettings], entries: list, counts: dict) -> Renderer | None:
    renderer: Renderer | None = None
    for i, job in enumerate(jobs, 1):
        job = replace(job, report=None)
        log.info("input %d of %d: %s -> %s", i, len(jobs), job.input, job.output)
        try:
            done = is_done(job)
        except FfbatchError as exc:  # up to date but not its compositing outputs
            _failed(entries, counts, job, str(exc))
            continue
        if done:
            log.info("%s is up to date; skipping it (--force renders it again)", job.output)
            entry = JobReport(input=str(job.input), output=str(job.output), backend="", status="skipped")
            entry.message = "up to date"
            entries.append(entry.summary())
            counts["skipped"] += 1
            say(str(job.output))
            continue
        if renderer is None or not renderer.serves(job):
            # once per run; again only when an input needs its own (a per-input reference face).
            # A source without a face fails every input, so it is not caught here.
            renderer = Renderer.load(job)
        try:
            with Progress(enabled=not job.quiet) as progress:
                result = render(
                    job,
                    renderer=renderer,
                    on_progress=progress.update,
                    on_start=progress.start,
                    output_tags=output_tags(job),
                )
        except (Interrupted, KeyboardInterrupt):
            raise
        except FfbatchError as exc:
            _failed(entries, counts, job, str(exc))
            continue
        except Exception as exc:  # one input's bug must not cost the other inputs their renders
            _failed(entries, counts, job, f"internal error: {type(exc).__name__}: {exc}")
            continue
        log_done(result)
        entries.append(result.summary())
        counts["ok"] += 1
        say(str(job.output))
    return renderer


def _failed(entries: list, counts: dict, job: RenderSettings, message: str) -> None:
    log.error("%s: %s", job.input, message)
    entries.append(
        {"input": str(job.input), "output": str(job.output), "status": "failed", "message": message}
    )
    counts["failed"] += 1


def farm_paths_and_range(
    inputs: list[Path], output: Path | None, frames: str | None, frame_range: str | None
) -> tuple[list[Path], Path | None, str | None]:
    """The inputs and output with `####`/`@` padding spelt as printf patterns, and `--frame-range`
    (inclusive, in the input's own numbers) as the equivalent `--frames` range."""
    inputs = [Path(printf_pattern(p)) for p in inputs]
    for path in inputs:
        check_not_a_pipe(path, "input")  # before anything waits on it
    output = Path(printf_pattern(output)) if output else output
    if frame_range is not None:
        if frames is not None:
            raise InputError("give --frames (0-based, END exclusive) or --frame-range, not both")
        if len(inputs) != 1:
            raise InputError("--frame-range renders one range of one input: give one input and -o")
        frames = format_range(*frames_of_range(frame_range, inputs[0]))
    return inputs, output, frames
