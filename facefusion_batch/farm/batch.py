"""`ffbatch render` with several inputs, a frame range, chunks or Ray: the command's logic.

Several inputs (`--output-dir`): models are loaded and the source faces prepared
once; the inputs are rendered in turn through the same pipeline (the batcher
never mixes resolutions within a batch). An input that fails is reported and
the others go on; the exit status is 2 if any failed. An output that already
exists and was rendered from the same input with the same settings is skipped
as up to date, so the same command after a crash or Ctrl-C renders only what
is missing. `--report` then holds a summary and one entry per input.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from facefusion_batch.config import RenderSettings
from facefusion_batch.errors import EXIT_OK, EXIT_USAGE, FfbatchError, InputError, Interrupted
from facefusion_batch.video.segments import TAG_INPUT, TAG_SETTINGS, parse_range, read_tags

log = logging.getLogger("ffbatch")

DEFAULT_PATTERN = "{stem}-swapped{ext}"


def output_name(input: Path, pattern: str) -> str:
    """The output file name for `input`: `{stem}`, `{ext}` (with its dot) and `{name}` filled in."""
    try:
        name = pattern.format(stem=input.stem, ext=input.suffix, name=input.name)
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(
            f"--output-pattern {pattern!r}: use {{stem}}, {{ext}} and {{name}} only ({exc})"
        ) from None
    if not name or "/" in name or name in (".", ".."):
        raise InputError(f"--output-pattern {pattern!r} gives {name!r} for {input}, not a file name")
    return name


def outputs_for(inputs: list[Path], output_dir: Path, pattern: str) -> list[Path]:
    outputs = [output_dir / output_name(p, pattern) for p in inputs]
    seen: dict[Path, Path] = {}
    for inp, out in zip(inputs, outputs, strict=True):
        if out in seen:
            raise InputError(
                f"inputs {seen[out]} and {inp} would both be written to {out}; change --output-pattern"
            )
        seen[out] = inp
    return outputs


def job_for(base: RenderSettings, input: Path, output: Path) -> RenderSettings:
    """The settings for one input of a run. With `--faces reference` and no reference photo,
    each input takes its reference face from its own frames."""
    job = replace(base, input=input, output=output)
    reference = getattr(job.swap, "reference", None)
    if (
        job.faces == "reference"
        and reference is not None
        and getattr(reference, "image", None) is None
        and getattr(reference, "video", None) == base.input
    ):
        job = replace(job, swap=replace(job.swap, reference=replace(reference, video=input)))
    return job


def output_tags(settings: RenderSettings) -> dict[str, str]:
    from facefusion_batch.farm.manifest import settings_digest

    return {TAG_SETTINGS: settings_digest(settings), TAG_INPUT: Path(settings.input).name}


def is_done(settings: RenderSettings) -> bool:
    """An existing output rendered from this input with these settings (batch-mode tags)."""
    out = Path(settings.output)
    if settings.force or not out.is_file() or not Path(settings.input).is_file():
        return False
    if not all(Path(s).is_file() for s in settings.sources):
        return False
    tags = read_tags(out)
    return bool(tags.get(TAG_SETTINGS)) and tags.get(TAG_SETTINGS) == output_tags(settings)[TAG_SETTINGS]


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
    outputs = [output] if output is not None else outputs_for(inputs, output_dir, output_pattern)
    jobs = [job_for(base, i, o) for i, o in zip(inputs, outputs, strict=True)]
    if ray is not None:
        from facefusion_batch.farm.ray_runner import render_with_ray

        return render_with_ray(
            jobs, address=ray, workers=ray_workers, report_path=base.report, batch=output is None
        )
    if output is not None:
        return _render_one(jobs[0])
    return render_batch(jobs, report_path=base.report)


def _render_one(settings: RenderSettings) -> int:
    """The single-input command: its output, its report and its messages as they always were."""
    from facefusion_batch.pipeline.render import render
    from facefusion_batch.progress import Progress

    with Progress(enabled=not settings.quiet) as progress:
        result = render(settings, on_progress=progress.update, on_start=progress.start)
    if result.status != "skipped":
        log_done(result)
    typer.echo(str(settings.output))
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
    from facefusion_batch.config import validate_options
    from facefusion_batch.farm.manifest import write_json_atomic
    from facefusion_batch.pipeline.render import JobReport, Renderer, render
    from facefusion_batch.progress import Progress

    started = time.perf_counter()
    validate_options(jobs[0])  # a bad option fails the run once, not every input
    renderer: Renderer | None = None
    entries: list[dict[str, Any]] = []
    counts = {"ok": 0, "skipped": 0, "failed": 0}
    for i, job in enumerate(jobs, 1):
        job = replace(job, report=None)
        log.info("input %d of %d: %s -> %s", i, len(jobs), job.input, job.output)
        if is_done(job):
            log.info("%s is up to date; skipping it (--force renders it again)", job.output)
            entry = JobReport(input=str(job.input), output=str(job.output), backend="", status="skipped")
            entry.message = "up to date"
            entries.append(entry.summary())
            counts["skipped"] += 1
            typer.echo(str(job.output))
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
        typer.echo(str(job.output))
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
        write_json_atomic(Path(report_path), summary)
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


def _failed(entries: list, counts: dict, job: RenderSettings, message: str) -> None:
    log.error("%s: %s", job.input, message)
    entries.append(
        {"input": str(job.input), "output": str(job.output), "status": "failed", "message": message}
    )
    counts["failed"] += 1
