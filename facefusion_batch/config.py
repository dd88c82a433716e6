"""Render settings: one frozen dataclass, validated at the edge (CLI or config file).

Every message names the option the user typed, so a farm log says what to fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from facefusion_batch.errors import InputError
from facefusion_batch.faces.detect import DetectorSettings
from facefusion_batch.faces.mesh import MeshSettings
from facefusion_batch.swap.blend import BLEND_MODES
from facefusion_batch.swap.classical import EYES_MOUTH_CHOICES, ClassicalSettings
from facefusion_batch.swap.colour import COLOUR_MODES
from facefusion_batch.video.writer import EncoderSettings, validate_encoder

FACE_MODES = ("many", "one")
BACKENDS = ("auto", "cpu", "cuda", "tensorrt")


@dataclass(frozen=True)
class RenderSettings:
    input: Path
    output: Path
    sources: tuple[Path, ...]
    faces: str = "many"
    batch_size: int = 8
    batch_window_ms: float = 200.0
    workers: int = 2
    threads: int | None = None  # onnxruntime intra-op threads per session
    backend: str = "auto"
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    swap: ClassicalSettings = field(default_factory=ClassicalSettings)
    detector: DetectorSettings = field(default_factory=DetectorSettings)
    mesh: MeshSettings = field(default_factory=MeshSettings)
    models_dir: Path | None = None
    report: Path | None = None
    overwrite: bool = False
    quiet: bool = False


def _check_range(option: str, value: float, low: float, high: float) -> None:
    if not (low <= value <= high):
        raise InputError(f"{option} must be between {low:g} and {high:g} (got {value:g})")


def validate_choices(option: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InputError(f"{option} must be one of {', '.join(choices)} (got {value!r})")
    return value


def validate(settings: RenderSettings) -> RenderSettings:
    """Check everything that can be checked before any work starts."""
    if settings.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1 (got {settings.batch_size})")
    if settings.batch_window_ms < 0:
        raise InputError(f"--batch-window-ms must not be negative (got {settings.batch_window_ms:g})")
    if settings.workers < 1:
        raise InputError(f"--workers must be at least 1 (got {settings.workers})")
    if settings.threads is not None and settings.threads < 1:
        raise InputError(f"--threads must be at least 1 (got {settings.threads})")
    validate_choices("--faces", settings.faces, FACE_MODES)
    validate_choices("--backend", settings.backend, BACKENDS)
    validate_choices("--blend", settings.swap.blend, BLEND_MODES)
    validate_choices("--eyes-mouth", settings.swap.eyes_mouth, EYES_MOUTH_CHOICES)
    validate_choices("--colour", settings.swap.colour, COLOUR_MODES)
    _check_range("--score-threshold", settings.detector.score_threshold, 0.0, 1.0)
    validate_encoder(settings.encoder)
    if not settings.sources:
        raise InputError("--source is required (a photo with the face to put in)")
    for source in settings.sources:
        if not source.is_file():
            raise InputError(f"--source {source}: no such file")
    if not settings.input.exists():
        raise InputError(f"input {settings.input}: no such file")
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
