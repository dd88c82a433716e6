"""Where each input's output goes, and whether it is already done (batch mode's tags).

`--output-dir` with `--output-pattern` names one output per input; an existing output that
carries the tags of this input and these settings is up to date and skipped.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from facefusion_batch.config import RenderSettings
from facefusion_batch.errors import InputError
from facefusion_batch.farm.manifest import settings_digest
from facefusion_batch.video.segments import (
    TAG_INPUT,
    TAG_SETTINGS,
    frame_index,
    read_tags,
    video_packet_count,
)

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
    return {TAG_SETTINGS: settings_digest(settings), TAG_INPUT: Path(settings.input).name}


def is_done(settings: RenderSettings) -> bool:
    """An existing output rendered from this input with these settings (batch-mode tags)."""
    out = Path(settings.output)
    if settings.force or not out.is_file() or not Path(settings.input).is_file():
        return False
    if not all(Path(s).is_file() for s in settings.sources):
        return False
    tags = read_tags(out)
    if not tags.get(TAG_SETTINGS) or tags.get(TAG_SETTINGS) != output_tags(settings)[TAG_SETTINGS]:
        return False
    # tagged but cut short (the tags come first): not done; every frame of the input must be there
    try:
        frames = frame_index(settings.input).count
    except InputError:
        return False
    return video_packet_count(out) == frames
