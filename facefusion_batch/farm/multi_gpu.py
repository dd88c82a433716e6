"""`render --gpus 0,1,…`: one worker process per GPU, each rendering a range of frames.

The input's frames are cut into one contiguous range per GPU; each range is
rendered by its own process (`render --frames START:END` to a segment, the
scale-out unit, see farm/segment.py) that sees only its GPU
(CUDA_VISIBLE_DEVICES), so every process has one CUDA context, its own
streams and engines. The segments are then joined by stream copy with the
input's audio (farm/concat.py): no frame re-encoded twice, none lost or
doubled (the segments' frame tags are checked). Segments live in the output's
work directory; a failed run leaves the finished ones, and a rerun reuses them.

The compositing outputs (`--matte-output`, `--face-only-output`) are staged there as a chunked
render stages them (farm/chunk_compositing.py): each process writes its range's sequence frames
and video segment into the work directory, and after the output's join they move to their
names (sequences) or are joined into them (videos); nothing appears before.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

from facefusion_batch.config import RenderSettings, validate
from facefusion_batch.errors import FfbatchError, InputError
from facefusion_batch.farm.chunk_compositing import prepare_staged, publish_staged, segment_settings
from facefusion_batch.farm.concat import join_segments
from facefusion_batch.farm.jobs import render
from facefusion_batch.farm.manifest import remove_work_dir, segment_name, work_dir_for
from facefusion_batch.farm.task_reports import summed_counts
from facefusion_batch.fsutil import claim_output, write_json_atomically
from facefusion_batch.stdout import say
from facefusion_batch.video.decode.probe import probe
from facefusion_batch.video.decode.segments import frame_index
from facefusion_batch.video.encode.formats import segment_suffix

log = logging.getLogger("ffbatch")


def split_ranges(frame_count: int, parts: int) -> list[tuple[int, int]]:
    """[0, frame_count) as `parts` contiguous ranges differing by at most one frame (none empty)."""
    parts = max(1, min(parts, frame_count))
    base, extra = divmod(frame_count, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


def _pin_to_gpu(gpu: int, quiet: bool) -> None:
    """Process initialiser: this worker sees one GPU, as CUDA device 0."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    import sys

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"ffbatch[gpu {gpu}]: %(message)s"))
    root = logging.getLogger("ffbatch")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if quiet else logging.INFO)
    root.propagate = False


def _render_range(settings: RenderSettings) -> dict[str, Any]:
    return render(settings).summary()


def render_on_gpus(settings: RenderSettings, gpus: tuple[int, ...]) -> dict[str, Any]:
    """Render `settings` over `gpus` (one process each) and join; returns a merged report."""
    if settings.frames is not None:
        raise InputError("--gpus renders the whole input; it does not combine with --frames")
    started = time.perf_counter()
    validate(settings)
    info = probe(settings.input)
    count = frame_index(settings.input, info.video_stream_index).count
    if count == 0:
        raise InputError(f"input {settings.input} has no video frames")
    ranges = split_ranges(count, len(gpus))
    work = work_dir_for(settings.output)
    work.mkdir(parents=True, exist_ok=True)
    prepare_staged(settings, work)
    jobs = []
    span: dict[int, tuple[int, int]] = {}  # GPU -> its frames
    suffix = segment_suffix(settings.encoder.codec)
    for gpu, (start, end) in zip(gpus, ranges, strict=False):
        job = replace(
            settings,
            frames=(start, end),
            output=work / f"gpu{gpu}-{segment_name(start, end, suffix)}",
            report=work / f"gpu{gpu}-report.json",
            chunk_frames=None,
            quiet=True,
            overwrite=True,  # all it writes is in the job's work directory (a stale segment, frames)
            device=replace(settings.device, gpu=0),  # the process sees only its GPU
        )
        jobs.append((gpu, segment_settings(job, work, start, end)))
        span[gpu] = (start, end)
    log.info(
        "rendering %s on %d GPUs: %s",
        settings.input,
        len(jobs),
        ", ".join(f"GPU {g} frames {span[g][0]}:{span[g][1]}" for g, _ in jobs),
    )
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no CUDA state inherited
    pools = [
        ProcessPoolExecutor(
            max_workers=1, mp_context=context, initializer=_pin_to_gpu, initargs=(g, settings.quiet)
        )
        for g, _ in jobs
    ]
    futures: dict[Future, int] = {}
    try:
        for pool, (gpu, job) in zip(pools, jobs, strict=True):
            futures[pool.submit(_render_range, job)] = gpu
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in done if f.exception() is not None]
        if failed:
            gpu = futures[failed[0]]
            exc = failed[0].exception()
            for f in futures:
                f.cancel()
            if isinstance(exc, FfbatchError):
                raise type(exc)(
                    f"GPU {gpu}: {exc} (finished segments are kept in {work} for a rerun)"
                ) from exc
            raise FfbatchError(f"GPU {gpu}: {type(exc).__name__}: {exc}") from exc
        reports = {futures[f]: f.result() for f in futures}
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
    # a segment that a failed run finished is up to date: its process skips it, its frames count
    frames_out = sum(
        span[gpu][1] - span[gpu][0] if reports[gpu].get("status") == "skipped" else reports[gpu]["frames_out"]
        for gpu, _ in jobs
    )
    if frames_out != count:
        raise FfbatchError(f"--gpus: {frames_out} frames rendered for an input of {count}")
    segments = [job.output for _, job in jobs]
    join = join_segments(
        segments,
        settings.output,
        audio_from=settings.input if info.audio_streams else None,
        overwrite=settings.overwrite,
    )
    publish_staged(settings, work, ranges, count)
    remove_work_dir(work)
    wall = time.perf_counter() - started
    merged = {
        "input": str(settings.input),
        "output": str(settings.output),
        "gpus": list(gpus),
        "frames_in": sum(r.get("frames_in", 0) for r in reports.values()),
        "frames_out": frames_out,
        "faces_found": sum(r.get("faces_found", 0) for r in reports.values()),
        "faces_swapped": sum(r.get("faces_swapped", 0) for r in reports.values()),
        **summed_counts(list(reports.values())),
        "wall_seconds": round(wall, 3),
        "fps": round(sum(r.get("frames_out", 0) for r in reports.values()) / wall, 3) if wall > 0 else 0.0,
        "join_seconds": round(join.seconds, 3),
        "audio": "copied" if info.audio_streams else "none",
        "per_gpu": {str(g): r for g, r in sorted(reports.items())},
        "segments_reused": sum(r.get("status") == "skipped" for r in reports.values()),
        "status": "ok",
    }
    if settings.report:
        write_json_atomically(Path(settings.report), merged)
    return merged


def render_on_several_gpus(
    settings: RenderSettings,
    gpus: tuple[int, ...],
    *,
    inputs: list[Path],
    output: Path | None,
    frames: str | None,
    ray: str | None,
) -> None:
    """`render --gpus A,B,…`: one input, one output, rendered over the GPUs and joined."""
    if len(inputs) != 1 or output is None:
        raise InputError("--gpus renders one input to one -o/--output")
    if frames is not None or ray is not None:
        raise InputError("--gpus does not combine with --frames or --ray (each makes its own segments)")
    validate(settings)
    with claim_output(settings.output):  # one job per output, as every render
        result = render_on_gpus(settings, gpus)
    log.info(
        "done: %d frames on %d GPUs in %.1f s (%.1f fps), %d faces swapped, audio %s",
        result["frames_out"],
        len(gpus),
        result["wall_seconds"],
        result["fps"],
        result["faces_swapped"],
        result["audio"],
    )
    say(str(output))
