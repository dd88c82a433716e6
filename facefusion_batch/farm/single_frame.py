"""One DPX or EXR frame as a still: `ffbatch render plate.1001.dpx -s face.jpg -o comp.1001.dpx`.

A facility's single frames are DPX and EXR, which the photo path (OpenCV, 8-bit) cannot read.
The frame is rendered as a one-frame image sequence instead, through the sequence path every
plate takes (its own precision, `video/pictures/native.py`; DPX 10-bit stays 10-bit): a hidden folder
beside the output holds a link to the input named as a sequence, the one frame is written there
and renamed to the output, and the folder is removed whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from facefusion_batch.config import RenderSettings
from facefusion_batch.errors import InputError, OutputError
from facefusion_batch.fsutil import write_json_atomically
from facefusion_batch.video.encode.sequence import SEQUENCE_CODECS, is_sequence_pattern

if TYPE_CHECKING:
    from facefusion_batch.pipeline.run import JobReport

SINGLE_FRAME_SUFFIXES = (".dpx", ".exr")


def is_single_frame(path: Path) -> bool:
    """A DPX or EXR file that is one frame, not a sequence pattern."""
    return Path(path).suffix.lower() in SINGLE_FRAME_SUFFIXES and not is_sequence_pattern(path)


def render_single_frame(
    settings: RenderSettings, render: Callable[..., JobReport], **kwargs: Any
) -> JobReport:
    """`render` (farm/jobs.render) of the one frame as a sequence; its report names the user's
    input and output."""
    output = Path(settings.output)
    suffix = output.suffix.lower()
    if is_sequence_pattern(output) or suffix not in SEQUENCE_CODECS:
        raise InputError(
            f"input {settings.input} is one frame: write one image ({', '.join(SEQUENCE_CODECS)}), "
            f"not {output.name}"
        )
    if settings.frames is not None or settings.chunk_frames:
        raise InputError(f"input {settings.input} is one frame: --frames and --chunk-frames need a video")
    if not Path(settings.input).is_file():
        raise InputError(f"input {settings.input}: no such file")
    if output.exists() and not settings.overwrite:
        raise InputError(f"output {output} already exists; pass --overwrite to replace it")
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"output directory {parent} does not exist")
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".ffbatch", dir=parent))
    try:
        os.symlink(os.path.abspath(settings.input), work / f"in.000000{Path(settings.input).suffix}")
        inner = replace(
            settings,
            input=work / f"in.%06d{Path(settings.input).suffix}",
            output=work / f"out.%06d{output.suffix}",
            encoder=replace(settings.encoder, start_number=0),
            overwrite=True,
        )
        report = render(inner, **kwargs)
        os.replace(work / f"out.000000{output.suffix}", output)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(work)
    report.input, report.output = str(settings.input), str(output)
    if settings.report is not None:  # written by the render, naming the folder's link and frame
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(Path(settings.report).read_text())
            write_json_atomically(
                Path(settings.report), {**data, "input": report.input, "output": report.output}
            )
    return report
