"""Render settings: one frozen dataclass, validated at the edge (CLI, plan, config file).

`render_settings` is the option schema: it turns render's options, by the names the
command line gives them, into settings, and is the one place that does so (`plan`
validates through it too, so a farm task never fails on an option `render` refuses).
The device is resolved here as well (`--backend auto` becomes the backend chosen), so the
settings say what ran and their digest covers it.

Every message names the option the user typed, so a farm log says what to fix.
"""

from __future__ import annotations

import json
import logging
import math
import os
import string
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from facefusion_batch.errors import InputError, did_you_mean
from facefusion_batch.faces.classify import AGE_LIMIT, GENDERS, RACE_NAMES, FaceFilterSettings
from facefusion_batch.faces.detect import DetectorSettings
from facefusion_batch.faces.facefusion_detectors import facefusion_detector_settings
from facefusion_batch.faces.facefusion_landmarks import facefusion_landmarker_settings
from facefusion_batch.faces.identity import CONVENTIONS
from facefusion_batch.faces.mesh import MeshSettings
from facefusion_batch.faces.persons import UNMATCHED
from facefusion_batch.faces.select import FACE_ORDERS
from facefusion_batch.faces.track import TrackSettings, presence_thresholds
from facefusion_batch.fsutil import check_name_length, same_file
from facefusion_batch.kernels.base import BLEND_MODES, COLOUR_MODES
from facefusion_batch.models.facefusion import (
    ENHANCERS,
    MODELS,
    OCCLUDERS,
    PARSERS,
    SWAPPERS,
    resolve_models_dir,
)
from facefusion_batch.runtime.backends import choose_backend
from facefusion_batch.runtime.batching import CPU_BATCH, BatchPolicy
from facefusion_batch.runtime.device import GPU_RUNTIMES, DeviceSettings, default_streams, parse_gpu_list
from facefusion_batch.runtime.nvml import list_gpus
from facefusion_batch.swap.classical import EYES_MOUTH_CHOICES, ClassicalSettings
from facefusion_batch.swap.learned import LearnedSettings
from facefusion_batch.swap.masks import MASK_AREAS, MASK_TYPES, REGION_CLASSES, MaskSettings
from facefusion_batch.video.compositing import check_face_only_output
from facefusion_batch.video.formats import CONTAINERS, check_fits
from facefusion_batch.video.hwaccel import HWACCELS
from facefusion_batch.video.matte import check_matte_output
from facefusion_batch.video.probe import check_sequence_fps, sequence_numbers
from facefusion_batch.video.reader import DECODE_ERROR_MODES
from facefusion_batch.video.sequence import (
    check_start_number,
    default_start_number,
    frame_path,
    is_sequence_pattern,
    sequence_codec,
)
from facefusion_batch.video.writer import EncoderSettings, validate_encoder

log = logging.getLogger("ffbatch")

FACE_MODES = ("many", "one", "reference")
BACKENDS = ("auto", "cpu", "cuda", "tensorrt")
DEFAULT_LIP_SHADOW = ClassicalSettings().lip_shadow  # --lip-shadow: the classical swap's own default
DEFAULT_FACE_PRESENCE = TrackSettings().on  # --face-presence: the tracker's own default
SWAPPER_MODES = ("auto", "classical", "learned", "none")  # none: enhance only
RECOGNISERS = ("auto", "arcface", "dlib")


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
    face_order: str | None = None  # FaceFusion's orders, per frame (None: as detected; one: largest)
    face_indices: tuple[int, ...] = ()  # positions kept in that order, per frame (empty: all)
    # --map REF=SRC: each person (a reference photo) swapped with their own source photo
    mapping: tuple[tuple[Path, Path], ...] = ()
    map_unmatched: str = "skip"  # a face near no reference: skip | nearest | source (--source)
    recogniser: str = "auto"  # who a face is, for reference and --map: arcface | dlib | auto
    face_filter: FaceFilterSettings = field(default_factory=FaceFilterSettings)  # gender, race, age


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
    device: DeviceSettings = field(default_factory=DeviceSettings)
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    swap: ClassicalSettings | SwapSettings = field(default_factory=ClassicalSettings)
    detector: DetectorSettings = field(default_factory=DetectorSettings)
    mesh: MeshSettings = field(default_factory=MeshSettings)
    tracking: TrackSettings = field(default_factory=TrackSettings)
    models_dir: Path | None = None
    report: Path | None = None
    matte_output: Path | None = None  # the paste alpha of every frame, as its own video or sequence
    face_only_output: Path | None = None  # the swapped faces alone, straight alpha (video/compositing.py)
    overwrite: bool = False
    quiet: bool = False
    # scale-out (docs/farm.md): an exact frame range rendered to a segment; chunked, resumable
    # renders (None: chunk long videos automatically, 0: never); --force drops saved progress
    frames: tuple[int, int | None] | None = None
    chunk_frames: int | None = None
    force: bool = False
    reuse_across_versions: bool = False  # reuse work another ffbatch version rendered (farm/reuse.py)
    # what a frame the decoder cannot deliver does: fail the job, or skip (replaced, pts kept)
    on_decode_error: str = "fail"
    source_face_index: int = 0  # which face of each --source photo, largest first
    fail_if_no_faces: bool = False  # exit 2, writing nothing, when not one face was swapped
    fail_on_truncated: bool = False  # exit 2 before rendering when the input's video stops early
    input_fps: float | None = None  # an image sequence input's frame rate (--fps; default 24)

    @property
    def batch_policy(self) -> BatchPolicy:
        """The one answer to "how many" for this job (frames per batch, items per model call)."""
        return BatchPolicy(frames=self.batch_size, on_gpu=self.device.on_gpu, max_batch=self.device.max_batch)


def _check_range(option: str, value: float, low: float, high: float) -> None:
    if not (low <= value <= high):
        raise InputError(f"{option} must be between {low:g} and {high:g} (got {value:g})")


def validate_choices(option: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InputError(
            f"{option} must be one of {', '.join(choices)} (got {value!r}){did_you_mean(value, choices)}"
        )
    return value


# Upper bounds: beyond them a job only thrashes (threads on a few cores) or runs out of memory.
MAX_BATCH_SIZE = 1024
MAX_WINDOW_MS = 60_000
MAX_WORKERS = 64
MAX_THREADS = 256
THREADS_PER_CORE = 4  # --threads beyond this many per core of the render host is refused


def validate(settings: RenderSettings) -> RenderSettings:
    """Check everything that can be checked before any work starts (on the host that renders:
    plan, on a submit host, checks the options only)."""
    validate_options(settings)
    cores = os.cpu_count() or 1
    if settings.threads is not None and settings.threads > THREADS_PER_CORE * cores:
        raise InputError(
            f"--threads {settings.threads} is more than {THREADS_PER_CORE} per core of this machine "
            f"({cores} cores); leave it out to use one per core"
        )
    validate_paths(settings)
    return settings


def validate_options(settings: RenderSettings) -> RenderSettings:
    """The checks that do not depend on the input and output (shared by many inputs)."""
    settings = replace(settings, models_dir=resolve_models_dir(settings.models_dir))
    if not 1 <= settings.batch_size <= MAX_BATCH_SIZE:
        raise InputError(f"--batch-size must be between 1 and {MAX_BATCH_SIZE} (got {settings.batch_size})")
    if not math.isfinite(settings.batch_window_ms) or not 0 <= settings.batch_window_ms <= MAX_WINDOW_MS:
        raise InputError(
            f"--batch-window-ms must be a finite number from 0 to {MAX_WINDOW_MS} "
            f"(got {settings.batch_window_ms:g})"
        )
    if not 1 <= settings.workers <= MAX_WORKERS:
        raise InputError(f"--workers must be between 1 and {MAX_WORKERS} (got {settings.workers})")
    if settings.threads is not None and not 1 <= settings.threads <= MAX_THREADS:
        raise InputError(f"--threads must be between 1 and {MAX_THREADS} (got {settings.threads})")
    validate_choices("--faces", settings.faces, FACE_MODES)
    settings.device.validated()
    validate_choices("--on-decode-error", settings.on_decode_error, DECODE_ERROR_MODES)
    validate_choices("--hwaccel", settings.device.hwaccel, HWACCELS)
    if settings.source_face_index < 0:
        raise InputError(f"--source-face-index must not be negative (got {settings.source_face_index})")
    validate_swap(settings.swap, settings.faces)
    check_compositing_outputs(settings)
    _check_range("--score-threshold", settings.detector.score_threshold, 0.0, 1.0)
    if is_sequence_pattern(settings.input) and settings.chunk_frames:
        raise InputError(
            "an image sequence input is rendered whole or by --frame-range (`ffbatch plan` cuts it into "
            "farm tasks): leave out --chunk-frames"
        )
    check_sequence_fps(settings.input_fps)
    if is_sequence_pattern(settings.output):
        if settings.chunk_frames:
            raise InputError(
                "an image sequence output is written frame by frame (each --frame-range task its own "
                "frames): leave out --chunk-frames"
            )
        sequence_codec(settings.output, settings.encoder.pix_fmt)  # the encoder is the extension's
        check_start_number(settings.encoder.start_number)
    else:
        validate_encoder(settings.encoder)
    check_name_length(settings.output, "output")  # before any stat of it, which would raise
    if settings.output.suffix.lower() in CONTAINERS and not settings.output.is_dir():
        check_fits(settings.encoder.codec, settings.output)  # plan and render: exit 2 before decoding
    if settings.chunk_frames is not None and settings.chunk_frames < 0:
        raise InputError(f"--chunk-frames must be 0 (no chunks) or more (got {settings.chunk_frames})")
    if settings.frames is not None:
        start, end = settings.frames
        if start < 0 or (end is not None and end <= start):
            raise InputError(f"--frames {start}:{end}: need 0 <= START < END")
    swap = swap_settings(settings.swap)
    if not settings.sources and not swap.mapping and swap.swapper != "none":  # none: enhance only
        raise InputError("--source is required (a photo with the face to put in), or --map REF=SRC")
    if "auto" in (swap.face_filter.gender, swap.face_filter.race) and not settings.sources:
        raise InputError(
            "--face-selector-gender/--face-selector-race auto take the --source face's; give --source"
        )
    if swap.mapping and (swap.map_unmatched == "source") != bool(settings.sources):
        raise InputError(
            "with --map, --source is the face for people near no reference: give both "
            "--source and --map-unmatched source, or neither"
        )
    for source in settings.sources:
        if not source.is_file():
            raise InputError(f"--source {source}: no such file")
    return settings


def settings_record(settings: RenderSettings) -> dict[str, Any]:
    """The resolved settings as plain JSON values (paths and enums as text), for reports."""
    return json.loads(json.dumps(asdict(settings), default=str))


def files_read(settings: RenderSettings) -> list[tuple[str, Path]]:
    """Every file a job reads, named as the user gave it: the input, the source photos, the
    reference photo."""
    reads = [("input", Path(settings.input))]
    reads += [("--source", Path(s)) for s in settings.sources]
    for ref, src in getattr(settings.swap, "mapping", ()):
        reads += [("--map", Path(ref)), ("--map", Path(src))]
    reference = getattr(settings.swap, "reference", None)
    image = getattr(reference, "image", None)
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


def check_compositing_outputs(settings: RenderSettings) -> None:
    """Each compositing output can be written, in this kind of job (plan checks it too): image
    sequences everywhere (each segment writes its own frames); videos in whole and chunked
    renders (joined like the output) and, per segment, in `--frames` (tagged like it)."""
    for option, path in compositing_outputs(settings):
        (check_matte_output if option == "--matte-output" else check_face_only_output)(path)


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


def swap_settings(swap: ClassicalSettings | SwapSettings) -> SwapSettings:
    """Plain classical settings mean the classical swap (as before the learned models)."""
    return swap if isinstance(swap, SwapSettings) else SwapSettings(swapper="classical", classical=swap)


def validate_swap(swap: ClassicalSettings | SwapSettings, faces: str) -> None:
    swap = swap_settings(swap)
    classical, learned, reference = swap.classical, swap.learned, swap.reference
    validate_choices("--blend", classical.blend, BLEND_MODES)
    validate_choices("--eyes-mouth", classical.eyes_mouth, EYES_MOUTH_CHOICES)
    validate_choices("--colour", classical.colour, COLOUR_MODES)
    _check_range("--lip-shadow", classical.lip_shadow, 0.0, 1.0)
    validate_choices("--swapper", swap.swapper, SWAPPER_MODES)
    for option, value, known in (
        ("--swapper-model", learned.swapper_model, SWAPPERS),
        ("--enhancer-model", learned.enhancer_model, ENHANCERS),
        ("--occluder-model", learned.masks.occluder_model, OCCLUDERS),
        ("--parser-model", learned.masks.parser_model, PARSERS),
    ):
        if value is not None and value.split("@", 1)[0] not in known:
            hint = did_you_mean(value.split("@", 1)[0], known)
            raise InputError(f"{option} must be one of {', '.join(known)} (got {value!r}){hint}")
    if swap.face_order is not None:
        validate_choices("--face-order", swap.face_order, tuple(FACE_ORDERS))
    if any(i < 0 for i in swap.face_indices):
        raise InputError(f"--face-index must not be negative (got {list(swap.face_indices)})")
    if swap.face_indices and faces == "one":
        raise InputError("--face-index chooses faces itself; use it with --faces many or reference, not one")
    validate_choices("--recogniser", swap.recogniser, RECOGNISERS)
    validate_face_filter(swap.face_filter)
    validate_mapping(swap, faces)
    if learned.swapper_model and swap.swapper in ("classical", "none"):
        raise InputError(f"--swapper-model names a learned model, but --swapper is {swap.swapper}")
    if swap.swapper == "none" and not learned.enhancer_model:
        raise InputError("--swapper none renders the enhancer alone: give --enhancer-model")
    if learned.pixel_boost is not None and swap.swapper in ("classical", "none"):
        raise InputError(
            f"--pixel-boost sizes a learned swapper's input, but --swapper is {swap.swapper}: it would "
            "change nothing; leave it out or choose a learned swapper"
        )
    _check_range("--swapper-weight", learned.weight, 0.0, 1.0)
    _check_range("--enhancer-blend", learned.enhancer_blend, 0, 100)
    _check_range("--enhancer-weight", learned.enhancer_weight, 0.0, 1.0)
    if learned.embedding_convention is not None:
        validate_choices("--embedding-convention", learned.embedding_convention, CONVENTIONS)
    _check_range("--mask-blur", learned.masks.blur, 0.0, 1.0)
    if learned.pixel_boost is not None and learned.pixel_boost not in (128, 256, 384, 512, 768, 1024):
        raise InputError(f"--pixel-boost must be 128, 256, 384, 512, 768 or 1024 (got {learned.pixel_boost})")
    if learned.pixel_boost is not None and learned.swapper_model:
        size = MODELS[learned.swapper_model.split("@", 1)[0]].size
        if learned.pixel_boost % size:
            raise InputError(
                f"--pixel-boost {learned.pixel_boost} is not a multiple of {learned.swapper_model}'s "
                f"{size} px input"
            )
    if not learned.masks.types:
        raise InputError(f"--mask needs at least one of {', '.join(MASK_TYPES)}")
    for t in learned.masks.types:
        validate_choices("--mask", t, MASK_TYPES)
    for r in learned.masks.regions:
        validate_choices("--mask-regions", r, tuple(REGION_CLASSES))
    if not learned.masks.areas:
        raise InputError(f"--mask-areas needs at least one of {', '.join(MASK_AREAS)}")
    for a in learned.masks.areas:
        validate_choices("--mask-areas", a, MASK_AREAS)
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


def validate_face_filter(f: FaceFilterSettings) -> None:
    """FaceFusion's selector filters: its choices and its 0–100 age range."""
    if f.gender is not None:
        validate_choices("--face-selector-gender", f.gender, ("auto", *GENDERS))
    if f.race is not None:
        validate_choices("--face-selector-race", f.race, ("auto", *RACE_NAMES))
    for option, age in (("--face-selector-age-start", f.age_start), ("--face-selector-age-end", f.age_end)):
        if age is not None and not 0 <= age <= AGE_LIMIT:
            raise InputError(f"{option} must be between 0 and {AGE_LIMIT} (got {age})")
    if f.age_start is not None and f.age_end is not None and f.age_end <= f.age_start:
        raise InputError(
            f"--face-selector-age-end ({f.age_end}) must be more than --face-selector-age-start "
            f"({f.age_start})"
        )


def validate_mapping(swap: SwapSettings, faces: str) -> None:
    """--map: readable photo pairs, with --faces many (the map itself chooses the faces)."""
    validate_choices("--map-unmatched", swap.map_unmatched, UNMATCHED)
    if not swap.mapping:
        if swap.map_unmatched != "skip":
            raise InputError("--map-unmatched applies to --map; give --map REF=SRC as well")
        return
    if faces != "many":
        raise InputError(f"--map chooses the faces itself: use it with --faces many, not {faces}")
    for ref, src in swap.mapping:
        for path in (ref, src):
            if not Path(path).is_file():
                raise InputError(f"--map {ref}={src}: no such file {path}")


def parse_mapping(pairs: list[str] | None) -> tuple[tuple[Path, Path], ...]:
    """--map REF=SRC (repeatable) → (reference photo, source photo) pairs, in the given order."""
    mapping = []
    for pair in pairs or ():
        ref, sep, src = pair.partition("=")
        if not sep or not ref.strip() or not src.strip():
            raise InputError(f"--map takes REFERENCE=SOURCE, two photos (got {pair!r})")
        mapping.append((Path(ref.strip()), Path(src.strip())))
    return tuple(mapping)


# --- the option schema: render's options → settings -----------------------------------------

# render's options that say what the command does with its jobs, not how a job renders
COMMAND_OPTIONS = frozenset(
    {
        "inputs",
        "output",
        "output_dir",
        "output_pattern",
        "frames",
        "frame_range",
        "ray",
        "ray_workers",
        "gpus",
        "verbose",
        "facefusion_job",
    }
)


@dataclass(frozen=True)
class DevicePlan:
    """The device as resolved, with what it implies: batch workers and frames per batch, and the
    GPUs of a several-GPU render (one process each; None: this process only)."""

    device: DeviceSettings
    workers: int
    batch_size: int
    gpus: tuple[int, ...] | None = None


def resolve_device(
    *,
    backend: str = "auto",
    precision: str = "auto",
    streams: int | None = None,
    max_batch: int | None = None,
    gpus: str | None = None,
    hwaccel: str = "none",
    workers: int = 2,
    batch_size: int | None = None,
    resolve: bool = True,
    gpu_runtime: str = "torch",
) -> DevicePlan:
    """`--backend auto` → the backend chosen (said once in the log, with why); on a GPU the
    streams (default from the GPU's memory) become the batch workers and the frame batch
    defaults to --max-batch (else GPU_BATCH). `batch_size`/`streams` None: not given.
    `resolve=False` (plan, on a submit host without the farm's GPUs) validates the same
    options without looking at this machine's devices."""
    validate_choices("--backend", backend, BACKENDS)
    validate_choices("--hwaccel", hwaccel, HWACCELS)
    validate_choices("--gpu-runtime", gpu_runtime, GPU_RUNTIMES)
    chosen = backend
    if backend == "auto":
        chosen = "cpu"
        if resolve:
            chosen, why = choose_backend()
            log.info("backend auto: %s (%s)", chosen, why)
    gpu_ids: tuple[int, ...] | None = None
    if gpus is not None:
        if backend == "cpu":
            raise InputError("--gpus needs --backend cuda, tensorrt or auto (not cpu)")
        gpu_ids = parse_gpu_list(gpus)
        if resolve:
            _check_gpus(gpu_ids)
    index = gpu_ids[0] if gpu_ids and len(gpu_ids) == 1 else 0
    fan_out = gpu_ids if gpu_ids and len(gpu_ids) > 1 else None
    auto = backend == "auto"
    if chosen == "cpu":
        # int8 on the CPU: learned models whose INT8 variant holds its bound (models/prepare.py)
        cpu_precision = "int8" if precision == "int8" else "fp32"
        device = DeviceSettings(backend="cpu", precision=cpu_precision, hwaccel=hwaccel, auto=auto)
        if precision not in ("auto", "fp32", "int8"):
            DeviceSettings(precision=precision).validated()  # an unknown word is still refused
        # --streams on the CPU means what --workers does: batches processed at once
        return DevicePlan(device.validated(), streams or workers, _or(batch_size, CPU_BATCH), fan_out)
    if streams is None and resolve:
        present = {g.index: g for g in list_gpus()}
        if index in present:
            streams = default_streams(present[index].total_bytes)
    device = DeviceSettings(
        backend=chosen,
        precision=precision,
        streams=streams or workers,
        max_batch=max_batch,
        gpu=index,
        hwaccel=hwaccel,
        auto=auto,
        gpu_runtime=gpu_runtime,
    ).validated()
    return DevicePlan(
        device, device.streams, _or(batch_size, BatchPolicy.default_frames(True, max_batch)), fan_out
    )


def _or(value, default):
    return default if value is None else value


def _check_gpus(gpus: tuple[int, ...]) -> None:
    """Every listed GPU exists (exit 2 with what does, otherwise)."""
    present = {g.index for g in list_gpus()}
    if not present:
        raise InputError("--gpus: no NVIDIA GPU found on this machine; use --backend cpu without --gpus")
    missing = [g for g in gpus if g not in present]
    if missing:
        raise InputError(
            f"--gpus: no GPU {', '.join(map(str, missing))} here (GPUs present: {sorted(present)})"
        )


def _listed(value: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (value or "").split(",") if v.strip())


def _mask_padding(raw: str) -> tuple[int, int, int, int]:
    try:
        padding = tuple(int(p) for p in _listed(raw))
    except ValueError:
        raise InputError(
            f"--mask-padding takes 1 or 4 whole percentages: TOP,RIGHT,BOTTOM,LEFT (got {raw!r})"
        ) from None
    if len(padding) == 1:
        padding = padding * 4
    if len(padding) != 4:
        raise InputError("--mask-padding takes 1 or 4 percentages: TOP,RIGHT,BOTTOM,LEFT")
    return padding


def encoder_options(pairs: list[str] | None) -> tuple[tuple[str, str], ...]:
    """--encoder-opt KEY=VALUE (repeatable) -> ordered (key, value) pairs; a later KEY wins."""
    options: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--encoder-opt takes KEY=VALUE, e.g. x264-params=keyint=24 (got {pair!r})")
        options[key.strip().lstrip("-")] = value
    return tuple(options.items())


def render_settings(
    params: Mapping[str, Any], *, given: Collection[str] | None = None, resolve: bool = True
) -> tuple[RenderSettings, tuple[int, ...] | None]:
    """render's parsed options (keyed by parameter name, as the command line parses them) →
    validated settings, and the GPUs of a several-GPU render (None: this process).

    `given`: the options the user set (the rest are defaults); None means all of them. Every
    option must find its place here: a key nobody consumes is a programming error (TypeError),
    so render, preview and plan cannot drift apart. Paths are checked by `validate_paths`
    when a job runs, not here."""
    kw = {k: v for k, v in params.items() if k not in COMMAND_OPTIONS}
    given = set(params) if given is None else set(given)
    inputs = kw.pop("inputs", None) or [kw.pop("input", None) or Path(".")]
    kw.pop("input", None)
    try:
        classical = ClassicalSettings(
            blend=kw.pop("blend"),
            eyes_mouth=kw.pop("eyes_mouth"),
            colour=kw.pop("colour"),
            lip_shadow=kw.pop("lip_shadow", DEFAULT_LIP_SHADOW),
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    swap: ClassicalSettings | SwapSettings = classical
    if "swapper" in kw:
        swap = SwapSettings(
            swapper=kw.pop("swapper"),
            classical=classical,
            learned=LearnedSettings(
                swapper_model=kw.pop("swapper_model"),
                weight=kw.pop("swapper_weight"),
                pixel_boost=kw.pop("pixel_boost"),
                enhancer_model=kw.pop("enhancer_model"),
                enhancer_blend=kw.pop("enhancer_blend"),
                enhancer_weight=kw.pop("enhancer_weight"),
                embedding_convention=kw.pop("embedding_convention"),
                masks=MaskSettings(
                    types=_listed(kw.pop("mask")),
                    blur=kw.pop("mask_blur"),
                    padding=_mask_padding(kw.pop("mask_padding")),
                    regions=_listed(kw.pop("mask_regions")) or MaskSettings().regions,
                    areas=_listed(kw.pop("mask_areas", None)) or MaskSettings().areas,
                    occluder_model=kw.pop("occluder_model"),
                    parser_model=kw.pop("parser_model"),
                ),
            ),
            face_order=kw.pop("face_order", None),
            face_indices=tuple(kw.pop("face_index", None) or ()),
            mapping=parse_mapping(kw.pop("person_map", None)),
            map_unmatched=kw.pop("map_unmatched", "skip"),
            recogniser=kw.pop("recogniser", "auto"),
            face_filter=FaceFilterSettings(
                gender=kw.pop("face_selector_gender", None),
                race=kw.pop("face_selector_race", None),
                age_start=kw.pop("face_selector_age_start", None),
                age_end=kw.pop("face_selector_age_end", None),
            ),
            reference=ReferenceSettings(
                image=kw.pop("reference_face"),
                video=Path(inputs[0]),
                frame=kw.pop("reference_frame"),
                position=kw.pop("reference_face_position"),
                distance=kw.pop("reference_distance"),
            ),
        )
    defaults = EncoderSettings()
    encoder = EncoderSettings(
        codec=kw.pop("encoder", defaults.codec),
        crf=kw.pop("crf", defaults.crf),
        quality=kw.pop("quality", defaults.quality),
        preset=kw.pop("preset", defaults.preset),
        profile=kw.pop("profile", defaults.profile),
        pix_fmt=kw.pop("pix_fmt", defaults.pix_fmt),
        bitrate=kw.pop("bitrate", defaults.bitrate),
        maxrate=kw.pop("maxrate", defaults.maxrate),
        bufsize=kw.pop("bufsize", defaults.bufsize),
        gop=kw.pop("gop", defaults.gop),
        options=encoder_options(kw.pop("encoder_opt", None)),
        allow_reduce=kw.pop("allow_reduce", defaults.allow_reduce),
        audio_codec=kw.pop("audio_codec", defaults.audio_codec),
        audio_bitrate=kw.pop("audio_bitrate", defaults.audio_bitrate),
        audio=kw.pop("audio", defaults.audio),
        start_number=kw.pop("start_number", None),
    )
    kw["input_fps"] = kw.pop("fps", None)
    score_threshold = kw.pop("score_threshold")
    detector = DetectorSettings(
        score_threshold=score_threshold,
        facefusion=facefusion_detector_settings(
            kw.pop("face_detector_model", None),
            kw.pop("face_detector_size", None),
            kw.pop("detector_angles", None),
            score_threshold if "score_threshold" in given else None,
        ),
        facefusion_landmarker=facefusion_landmarker_settings(
            kw.pop("face_landmarker_model", "2dfan4"), kw.pop("face_landmarker_score", 0.5)
        ),
    )
    smoothing = kw.pop("smoothing", TrackSettings().smoothing)
    if not math.isfinite(smoothing) or not 0 <= smoothing <= 10:
        raise InputError(f"--smoothing must be between 0 (off) and 10 (got {smoothing:g})")
    presence = kw.pop("face_presence", DEFAULT_FACE_PRESENCE)
    if not math.isfinite(presence) or not 0 <= presence <= 100:
        raise InputError(f"--face-presence must be between 0 and 100 (got {presence:g})")
    kw["tracking"] = TrackSettings(smoothing=smoothing, **presence_thresholds(presence))
    batch_size = kw.pop("batch_size", CPU_BATCH)
    for option, key, high in (("--streams", "streams", 64), ("--max-batch", "max_batch", 4096)):
        value = kw.get(key)
        if value is not None and not 1 <= value <= high:
            raise InputError(f"{option} must be between 1 and {high} (got {value})")
    plan = resolve_device(
        backend=kw.pop("backend", "auto"),
        precision=kw.pop("precision", "auto"),
        streams=kw.pop("streams", None),
        max_batch=kw.pop("max_batch", None),
        gpus=params.get("gpus"),
        hwaccel=kw.pop("hwaccel", "none"),
        gpu_runtime=kw.pop("gpu_runtime", "torch"),
        workers=kw.get("workers", 2),
        batch_size=batch_size if "batch_size" in given else None,
        resolve=resolve,
    )
    if "workers" in given and plan.device.on_gpu and "streams" not in given:
        plan = replace(plan, device=replace(plan.device, streams=kw["workers"]), workers=kw["workers"])
    kw["workers"] = plan.workers
    force = kw.get("force", False)
    kw["overwrite"] = kw.get("overwrite", False) or force
    kw["sources"] = tuple(kw.pop("source", None) or kw.pop("sources", None) or ())
    kw["output"] = Path(params.get("output") or ".")
    settings = RenderSettings(
        input=Path(inputs[0]),
        swap=swap,
        encoder=encoder,
        detector=detector,
        device=plan.device,
        batch_size=plan.batch_size,
        **kw,
    )
    return validate_options(settings), plan.gpus
