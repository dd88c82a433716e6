"""Checks on the settings' values, before any work starts; every message names the option the
user typed, so a farm log says what to fix."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from facefusion_batch.cores import usable_cores
from facefusion_batch.errors import InputError, did_you_mean
from facefusion_batch.faces.classify import AGE_LIMIT, GENDERS, RACE_NAMES, FaceFilterSettings
from facefusion_batch.faces.identity import CONVENTIONS
from facefusion_batch.faces.persons import UNMATCHED
from facefusion_batch.faces.select import FACE_ORDER_NAMES
from facefusion_batch.fsutil import check_name_length
from facefusion_batch.kernels.base import BLEND_MODES, COLOUR_MODES
from facefusion_batch.models.facefusion import (
    ENHANCERS,
    MODELS,
    OCCLUDERS,
    PARSERS,
    SWAPPERS,
    resolve_models_dir,
)
from facefusion_batch.settings.output_checks import compositing_outputs, validate_paths
from facefusion_batch.settings.types import (
    FACE_MODES,
    RECOGNISERS,
    SWAPPER_MODES,
    RenderSettings,
    SwapSettings,
)
from facefusion_batch.swap.classical.settings import EYES_MOUTH_CHOICES
from facefusion_batch.swap.masks import MASK_AREAS, MASK_TYPES, REGION_CLASSES
from facefusion_batch.video.compositing.compositing import check_face_only_output
from facefusion_batch.video.compositing.matte import check_matte_output
from facefusion_batch.video.decode.hwaccel import HWACCELS
from facefusion_batch.video.decode.probe import check_sequence_fps
from facefusion_batch.video.decode.reader import DECODE_ERROR_MODES
from facefusion_batch.video.encode.encoder_policy import validate_encoder
from facefusion_batch.video.encode.formats import CONTAINERS, check_fits
from facefusion_batch.video.encode.sequence import (
    check_start_number,
    is_sequence_pattern,
    sequence_codec,
)


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
    cores = usable_cores()
    if settings.threads is not None and settings.threads > THREADS_PER_CORE * cores:
        raise InputError(
            f"--threads {settings.threads} is more than {THREADS_PER_CORE} per core of this machine "
            f"({cores} cores usable by this job); leave it out to use one per core"
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
    swap = settings.swap
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


def validate_swap(swap: SwapSettings, faces: str) -> None:
    classical, learned, reference = swap.classical, swap.learned, swap.reference
    validate_choices("--blend", classical.blend, BLEND_MODES)
    validate_choices("--eyes-mouth", classical.eyes_mouth, EYES_MOUTH_CHOICES)
    validate_choices("--colour", classical.colour, COLOUR_MODES)
    _check_range("--lip-shadow", classical.lip_shadow, 0.0, 1.0)
    _check_range("--smile-lines", classical.smile_lines, 0.0, 1.0)
    _check_range("--shutter", classical.shutter, 0.0, 360.0)
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
        validate_choices("--face-order", swap.face_order, FACE_ORDER_NAMES)
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


def check_compositing_outputs(settings: RenderSettings) -> None:
    """Each compositing output can be written, in this kind of job (plan checks it too): image
    sequences everywhere (each segment writes its own frames); videos in whole and chunked
    renders (joined like the output) and, per segment, in `--frames` (tagged like it)."""
    for option, path in compositing_outputs(settings):
        (check_matte_output if option == "--matte-output" else check_face_only_output)(path)
