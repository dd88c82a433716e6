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
from facefusion_batch.swap.learned import LearnedSettings
from facefusion_batch.swap.masks import MASK_TYPES, REGION_CLASSES
from facefusion_batch.video.reader import DECODE_ERROR_MODES, HWACCELS
from facefusion_batch.video.writer import EncoderSettings, validate_encoder

FACE_MODES = ("many", "one", "reference")
BACKENDS = ("auto", "cpu", "cuda", "tensorrt")
SWAPPER_MODES = ("auto", "classical", "learned")


@dataclass(frozen=True)
class ReferenceSettings:
    """`--faces reference`: the face to follow, from a photo or from a frame of the input."""

    image: Path | None = None
    video: Path | None = None  # the input, when the reference is a frame of it
    frame: int | None = None
    position: int = 0  # which face of the reference picture, largest first
    distance: float = 0.3  # (1 - cos) / 2 below which a face is the reference person


@dataclass(frozen=True)
class SwapSettings:
    """Which swapper runs (auto: the learned model when its file is present), with the
    settings of each, and the reference face for `--faces reference`."""

    swapper: str = "auto"
    classical: ClassicalSettings = field(default_factory=ClassicalSettings)
    learned: LearnedSettings = field(default_factory=LearnedSettings)
    reference: ReferenceSettings = field(default_factory=ReferenceSettings)


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
    swap: ClassicalSettings | SwapSettings = field(default_factory=ClassicalSettings)
    detector: DetectorSettings = field(default_factory=DetectorSettings)
    mesh: MeshSettings = field(default_factory=MeshSettings)
    models_dir: Path | None = None
    report: Path | None = None
    overwrite: bool = False
    quiet: bool = False
    # scale-out (docs/farm.md): an exact frame range rendered to a segment; chunked, resumable
    # renders (None: chunk long videos automatically, 0: never); --force drops saved progress
    frames: tuple[int, int | None] | None = None
    chunk_frames: int | None = None
    force: bool = False
    # what a frame the decoder cannot deliver does: fail the job, or skip (replaced, pts kept)
    on_decode_error: str = "fail"
    source_face_index: int = 0  # which face of each --source photo, largest first
    hwaccel: str = "none"  # none | cuda: decode on the GPU's video decoder (NVDEC)


def _check_range(option: str, value: float, low: float, high: float) -> None:
    if not (low <= value <= high):
        raise InputError(f"{option} must be between {low:g} and {high:g} (got {value:g})")


def validate_choices(option: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InputError(f"{option} must be one of {', '.join(choices)} (got {value!r})")
    return value


def validate(settings: RenderSettings) -> RenderSettings:
    """Check everything that can be checked before any work starts."""
    validate_options(settings)
    validate_paths(settings)
    return settings


def validate_options(settings: RenderSettings) -> RenderSettings:
    """The checks that do not depend on the input and output (shared by many inputs)."""
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
    validate_choices("--on-decode-error", settings.on_decode_error, DECODE_ERROR_MODES)
    validate_choices("--hwaccel", settings.hwaccel, HWACCELS)
    if settings.source_face_index < 0:
        raise InputError(f"--source-face-index must not be negative (got {settings.source_face_index})")
    validate_swap(settings.swap, settings.faces)
    _check_range("--score-threshold", settings.detector.score_threshold, 0.0, 1.0)
    validate_encoder(settings.encoder)
    if settings.chunk_frames is not None and settings.chunk_frames < 0:
        raise InputError(f"--chunk-frames must be 0 (no chunks) or more (got {settings.chunk_frames})")
    if settings.frames is not None:
        start, end = settings.frames
        if start < 0 or (end is not None and end <= start):
            raise InputError(f"--frames {start}:{end}: need 0 <= START < END")
    if not settings.sources:
        raise InputError("--source is required (a photo with the face to put in)")
    for source in settings.sources:
        if not source.is_file():
            raise InputError(f"--source {source}: no such file")
    return settings


def validate_paths(settings: RenderSettings) -> RenderSettings:
    """The input exists; the output can be written and is not the input."""
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


def swap_settings(swap: ClassicalSettings | SwapSettings) -> SwapSettings:
    """Plain classical settings mean the classical swap (as before the learned models)."""
    return swap if isinstance(swap, SwapSettings) else SwapSettings(swapper="classical", classical=swap)


def validate_swap(swap: ClassicalSettings | SwapSettings, faces: str) -> None:
    from facefusion_batch.models.facefusion import ENHANCERS, OCCLUDERS, PARSERS, SWAPPERS

    swap = swap_settings(swap)
    classical, learned, reference = swap.classical, swap.learned, swap.reference
    validate_choices("--blend", classical.blend, BLEND_MODES)
    validate_choices("--eyes-mouth", classical.eyes_mouth, EYES_MOUTH_CHOICES)
    validate_choices("--colour", classical.colour, COLOUR_MODES)
    validate_choices("--swapper", swap.swapper, SWAPPER_MODES)
    for option, value, known in (
        ("--swapper-model", learned.swapper_model, SWAPPERS),
        ("--enhancer-model", learned.enhancer_model, ENHANCERS),
        ("--occluder-model", learned.masks.occluder_model, OCCLUDERS),
        ("--parser-model", learned.masks.parser_model, PARSERS),
    ):
        if value is not None and value.split("@", 1)[0] not in known:
            raise InputError(f"{option} must be one of {', '.join(known)} (got {value!r})")
    if learned.swapper_model and swap.swapper == "classical":
        raise InputError("--swapper-model names a learned model, but --swapper is classical")
    _check_range("--swapper-weight", learned.weight, 0.0, 1.0)
    _check_range("--enhancer-blend", learned.enhancer_blend, 0, 100)
    _check_range("--mask-blur", learned.masks.blur, 0.0, 1.0)
    if learned.pixel_boost is not None and learned.pixel_boost not in (128, 256, 384, 512, 768, 1024):
        raise InputError(f"--pixel-boost must be 128, 256, 384, 512, 768 or 1024 (got {learned.pixel_boost})")
    for t in learned.masks.types:
        validate_choices("--mask", t, MASK_TYPES)
    for r in learned.masks.regions:
        validate_choices("--mask-regions", r, tuple(REGION_CLASSES))
    if any(not 0 <= p <= 100 for p in learned.masks.padding):
        raise InputError(f"--mask-padding values are percent, 0-100 (got {learned.masks.padding})")
    if faces == "reference":
        if (reference.image is None) == (reference.frame is None):
            raise InputError("--faces reference needs one of --reference-face IMAGE, --reference-frame N")
        if reference.image is not None and not reference.image.is_file():
            raise InputError(f"--reference-face {reference.image}: no such file")
        if reference.frame is not None and reference.frame < 0:
            raise InputError(f"--reference-frame must not be negative (got {reference.frame})")
        _check_range("--reference-distance", reference.distance, 0.0, 1.0)
        if reference.position < 0:
            raise InputError(f"--reference-face-position must not be negative (got {reference.position})")
