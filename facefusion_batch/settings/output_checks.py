"""Output and path checks, made on the host that renders (a farm host; plan on a submit host
checks the options only): the input exists, the outputs can be written and are none of the
files the job reads, the compositing outputs' names."""

from __future__ import annotations

import os
import string
from pathlib import Path

from facefusion_batch.errors import InputError
from facefusion_batch.fsutil import check_name_length, same_file
from facefusion_batch.settings.types import RenderSettings
from facefusion_batch.video.decode.probe import sequence_numbers
from facefusion_batch.video.encode.sequence import (
    default_start_number,
    frame_path,
    is_sequence_pattern,
)


def files_read(settings: RenderSettings) -> list[tuple[str, Path]]:
    """Every file a job reads, named as the user gave it: the input, the source photos, the
    reference photo."""
    reads = [("input", Path(settings.input))]
    reads += [("--source", Path(s)) for s in settings.sources]
    for ref, src in settings.swap.mapping:
        reads += [("--map", Path(ref)), ("--map", Path(src))]
    image = settings.swap.reference.image
    if settings.faces == "reference" and image is not None:
        reads.append(("--reference-face", Path(image)))
    return reads


def expand_template(pattern: str, input: Path, what: str) -> str:
    """`pattern` for `input`: `{stem}`, `{ext}` (with its dot) and `{name}` filled in (`{{` and
    `}}` are braces); --output-pattern's names and the compositing paths of many inputs."""
    try:
        return pattern.format(stem=input.stem, ext=input.suffix, name=input.name)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise InputError(f"{what} {pattern!r}: use {{stem}}, {{ext}} and {{name}} only ({exc})") from None


def template_fields(pattern: str, what: str) -> set[str]:
    """The fields `pattern` names (empty: every input gets the same text)."""
    try:
        return {name for _, name, _, _ in string.Formatter().parse(pattern) if name is not None}
    except ValueError as exc:
        raise InputError(f"{what} {pattern!r}: use {{stem}}, {{ext}} and {{name}} only ({exc})") from None


def template_literal(text: str) -> str:
    """`text` as a template that expands to itself (a path already expanded, passed on)."""
    return text.replace("{", "{{").replace("}", "}}")


def check_writes(writes: list[tuple[str, Path]], reads: list[tuple[str, Path]]) -> None:
    """Only the outputs are ever written: no file a run writes is a file it reads (compared by
    inode, so a hard link, a symbolic link or another spelling is caught), no two writes are one
    file, and none is a directory or a name too long to create. Checked before any work."""
    for i, (what, path) in enumerate(writes):
        check_name_length(path, what)
        if path.is_dir():
            raise InputError(f"{what} {path} is a directory; give a file name such as {path / 'out'}")
        for read_what, read in reads:
            if same_file(path, read):
                raise InputError(
                    f"{what} {path} is the {read_what} file {read}; "
                    "ffbatch writes only its outputs: choose another path"
                )
        for other_what, other in writes[:i]:
            if same_file(path, other):
                raise InputError(f"{what} {path} and {other_what} {other} are one file; choose two paths")


def option_field(option: str) -> str:
    """The RenderSettings field of a render option: --matte-output → matte_output."""
    return option.removeprefix("--").replace("-", "_")


def compositing_outputs(settings: RenderSettings) -> list[tuple[str, Path]]:
    """(option, path) of each compositing output asked for: --matte-output, --face-only-output."""
    named = (("--matte-output", settings.matte_output), ("--face-only-output", settings.face_only_output))
    return [(option, Path(path)) for option, path in named if path is not None]


def compositing_start_number(settings: RenderSettings) -> int:
    """The number of input frame 0 in the compositing sequences: the main output's rule
    (--start-number, else the input sequence's first number, else 1001)."""
    start = settings.encoder.start_number
    return default_start_number(settings.input) if start is None else start


def check_matte_run(settings: RenderSettings, inputs: int) -> None:
    """The compositing outputs are one set of files per input: exit 2 where several inputs would
    share one path (no template field). (One input split over Ray or several GPUs stages them per
    segment, as a chunked render does: farm/chunk_compositing.py.)"""
    for option, path in compositing_outputs(settings):
        if inputs > 1 and not template_fields(str(path), option):
            example = path.parent / f"{{stem}}.{path.name}"
            raise InputError(
                f"{option} {path} would be written by each of the {inputs} inputs: name each input's "
                f"with {{stem}}, {{ext}} or {{name}} (as --output-pattern), e.g. {example}"
            )


def check_parent_dir(what: str, path: Path) -> None:
    """The directory `path` goes in exists and is writable (ffbatch makes none of its own)."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise InputError(f"{what} {path}: the directory {parent} does not exist or is not writable")


def validate_paths(settings: RenderSettings) -> RenderSettings:
    """The input exists; the output can be written and is none of the files the job reads."""
    if is_sequence_pattern(settings.input):
        if not sequence_numbers(settings.input):
            raise InputError(f"input {settings.input}: no files match this image sequence pattern")
    elif not settings.input.exists():
        raise InputError(f"input {settings.input}: no such file")
    writes = [("output", Path(settings.output))]
    if settings.report is not None:
        writes.append(("--report", Path(settings.report)))
    for option, path in compositing_outputs(settings):
        writes.append((option, path))
        if not is_sequence_pattern(path) and path.exists() and not settings.overwrite:
            raise InputError(f"{option} {path} already exists; pass --overwrite to replace it")
        if is_sequence_pattern(path) and not settings.overwrite:  # its first frame of this job
            first = frame_path(
                path, compositing_start_number(settings) + (settings.frames[0] if settings.frames else 0)
            )
            if first.exists():
                raise InputError(f"{option} {first} already exists; pass --overwrite to replace the sequence")
        check_parent_dir(option, path)
    check_writes(writes, files_read(settings))
    out = settings.output
    if out.exists() and out.is_dir():
        raise InputError(f"output {out} is a directory; give a file name such as {out / 'out.mp4'}")
    try:
        same = out.exists() and os.path.samefile(out, settings.input)
    except OSError:
        same = False
    if same or out.resolve() == settings.input.resolve():
        raise InputError(f"output {out} is the input file; choose another output path")
    if out.exists() and not settings.overwrite:
        raise InputError(f"output {out} already exists; pass --overwrite to replace it")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"output directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"output directory {parent} is not writable")
    return settings
