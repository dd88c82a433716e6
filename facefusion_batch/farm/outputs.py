"""Where each input's output goes, and whether it is already done (batch mode's tags).

`--output-dir` with `--output-pattern` names one output per input, and the compositing paths
(`--matte-output mattes/{stem}.mkv`) are templates of the same fields; an existing output that
carries the tags of this input and these settings, with its compositing outputs complete, is up
to date and skipped.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from facefusion_batch.config import (
    RenderSettings,
    compositing_outputs,
    compositing_start_number,
    expand_template,
    option_field,
)
from facefusion_batch.errors import InputError
from facefusion_batch.farm.manifest import settings_digest
from facefusion_batch.farm.reuse import code_tags, drop_stale, input_tag, intact, made_here, ours
from facefusion_batch.video.compositing.compositing import sequence_complete
from facefusion_batch.video.decode.segments import (
    TAG_INPUT,
    TAG_SETTINGS,
    frame_index,
    read_tags,
    video_packet_count,
)
from facefusion_batch.video.encode.sequence import is_sequence_pattern

log = logging.getLogger("ffbatch")

DEFAULT_PATTERN = "{stem}-swapped{ext}"


def output_name(input: Path, pattern: str) -> str:
    """The output file name for `input`: `{stem}`, `{ext}` (with its dot) and `{name}` filled in."""
    name = expand_template(pattern, input, "--output-pattern")
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
    compositing = compositing_paths(compositing_outputs(base), input)
    paths: dict[str, Any] = {option_field(o): p for o, p in compositing}  # a compositing field -> its path
    job = replace(base, input=input, output=output, **paths)
    reference = job.swap.reference
    if job.faces == "reference" and reference.image is None and reference.video == base.input:
        job = replace(job, swap=replace(job.swap, reference=replace(reference, video=input)))
    return job


def compositing_paths(templates: list[tuple[str, Path]], input: Path) -> list[tuple[str, Path]]:
    """(option, path) of each compositing output of one input: each path a template of the
    input's name with --output-pattern's fields (`mattes/{stem}.matte.mkv`); a sequence's `%06d`
    is left to its writer."""
    return [(option, Path(expand_template(str(path), input, option))) for option, path in templates]


def compositing_complete(settings: RenderSettings, frames: int) -> bool | None:
    """Whether each compositing output of a finished job is there: every frame of a sequence,
    a video with every frame's packet and the bytes it was written with. None: only videos this
    job made are cut short or changed (each named in a warning), so the job renders again."""
    number = compositing_start_number(settings)
    complete: bool | None = True
    for _, path in compositing_outputs(settings):
        if is_sequence_pattern(path):
            if not sequence_complete(path, number, (0, frames)):
                return False
        elif not (path.is_file() and video_packet_count(path) == frames and intact(path)):
            if not (path.is_file() and ours(read_tags(path), settings)):
                return False
            if (count := video_packet_count(path)) != frames:
                log.warning("%s: cut short (%d of %d frames); rendering it again", path, count, frames)
            complete = None
    return complete


def output_tags(settings: RenderSettings) -> dict[str, str]:
    return {
        TAG_SETTINGS: settings_digest(settings),
        TAG_INPUT: input_tag(settings),
        **code_tags(settings),
    }


def is_done(settings: RenderSettings) -> bool:
    """An existing output rendered from this input with these settings (batch-mode tags), with
    its compositing outputs. One whose compositing outputs are missing or cut short (a run that
    stopped between joins, or --matte-output added since) is exit 2 for this input, unless
    --overwrite renders it all again: never skipped with them half-written."""
    out = Path(settings.output)
    if settings.force or not out.is_file() or not Path(settings.input).is_file():
        return False
    if not all(Path(s).is_file() for s in settings.sources):
        return False
    if not made_here(read_tags(out), settings, out):
        _drop_stale_outputs(settings)  # this job's, by other code: rendered again
        return False
    # tagged but cut short (the tags come first): not done; every frame of the input must be there
    try:
        frames = frame_index(settings.input).count
    except InputError:
        return False
    if video_packet_count(out) != frames or not intact(out):
        _drop_stale_outputs(settings)
        return False
    complete = compositing_complete(settings, frames)
    if complete:
        return True
    if complete is None:
        _drop_stale_outputs(settings)
        return False
    if settings.overwrite:
        return False
    raise InputError(
        f"{out} is up to date but not its compositing outputs "
        f"({', '.join(f'{o} {p}' for o, p in compositing_outputs(settings))}: missing or cut short); "
        "pass --overwrite to render it again"
    )


def _drop_stale_outputs(settings: RenderSettings) -> None:
    """The output and its compositing videos, where this job made them, go before it renders them
    again (farm/reuse.py `drop_stale`)."""
    for path in (
        settings.output,
        *(p for _, p in compositing_outputs(settings) if not is_sequence_pattern(p)),
    ):
        drop_stale(Path(path), settings)
