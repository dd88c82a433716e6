"""The render settings' types: one frozen dataclass per concern, with their choices as `Literal`
types. Defaults live here (the option table reads them); checks are in `checks`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from facefusion_batch.faces.classify import FaceFilterSettings
from facefusion_batch.faces.detect import DetectorSettings
from facefusion_batch.faces.mesh import MeshSettings
from facefusion_batch.faces.persons import Unmatched
from facefusion_batch.faces.select import FaceOrder
from facefusion_batch.faces.track import TrackSettings
from facefusion_batch.runtime.batching import BatchPolicy
from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.learned import LearnedSettings
from facefusion_batch.video.decode.reader import DecodeErrorMode
from facefusion_batch.video.encode.encoder_policy import EncoderSettings

# the choices of the settings' own words; the command line's choices and did-you-mean read them
FaceMode = Literal["many", "one", "reference"]
BackendChoice = Literal["auto", "cpu", "cuda", "tensorrt"]  # auto: resolved by settings.device
SwapperMode = Literal["auto", "classical", "learned", "none"]  # none: enhance only
Recogniser = Literal["auto", "arcface", "dlib"]
FACE_MODES: tuple[FaceMode, ...] = get_args(FaceMode)
BACKENDS: tuple[BackendChoice, ...] = get_args(BackendChoice)
SWAPPER_MODES: tuple[SwapperMode, ...] = get_args(SwapperMode)
RECOGNISERS: tuple[Recogniser, ...] = get_args(Recogniser)
PlanFormat = Literal["json", "shell", "slurm", "opencue", "openjd"]  # openjd: Open Job Description
PLAN_FORMATS: tuple[PlanFormat, ...] = get_args(PlanFormat)


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

    swapper: SwapperMode = "auto"
    classical: ClassicalSettings = field(default_factory=ClassicalSettings)
    learned: LearnedSettings = field(default_factory=LearnedSettings)
    reference: ReferenceSettings = field(default_factory=ReferenceSettings)
    face_order: FaceOrder | None = None  # FaceFusion's orders, per frame (None: as detected; one: largest)
    face_indices: tuple[int, ...] = ()  # positions kept in that order, per frame (empty: all)
    # --map REF=SRC: each person (a reference photo) swapped with their own source photo
    mapping: tuple[tuple[Path, Path], ...] = ()
    map_unmatched: Unmatched = "skip"  # a face near no reference: skip | nearest | source (--source)
    recogniser: Recogniser = "auto"  # who a face is, for reference and --map: arcface | dlib | auto
    face_filter: FaceFilterSettings = field(default_factory=FaceFilterSettings)  # gender, race, age


@dataclass(frozen=True)
class PlanSettings:
    """`ffbatch plan`: how a render is cut into farm tasks, and how the tasks are written."""

    chunk_frames: int = 1500  # frames per chunk, one farm task each
    format: PlanFormat = "shell"
    ffbatch: str = "ffbatch"  # how the farm's hosts run ffbatch


@dataclass(frozen=True)
class RenderSettings:
    input: Path
    output: Path
    sources: tuple[Path, ...]
    faces: FaceMode = "many"
    batch_size: int = 8
    batch_window_ms: float = 200.0
    workers: int = 2
    threads: int | None = None  # onnxruntime intra-op threads per session
    device: DeviceSettings = field(default_factory=DeviceSettings)
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    # RenderSettings(...) without swap: the classical swap, as the library has always rendered
    # (no model to fetch); the command line's --swapper default is SwapSettings.swapper (auto)
    swap: SwapSettings = field(default_factory=lambda: SwapSettings(swapper="classical"))
    detector: DetectorSettings = field(default_factory=DetectorSettings)
    mesh: MeshSettings = field(default_factory=MeshSettings)
    tracking: TrackSettings = field(default_factory=TrackSettings)
    models_dir: Path | None = None
    report: Path | None = None
    matte_output: Path | None = None  # the paste alpha of every frame, as its own video or sequence
    face_only_output: Path | None = None  # the swapped faces alone, straight alpha (video/compositing/)
    overwrite: bool = False
    quiet: bool = False
    # scale-out (docs/farm.md): an exact frame range rendered to a segment; chunked, resumable
    # renders (None: chunk long videos automatically, 0: never); --force drops saved progress
    frames: tuple[int, int | None] | None = None
    chunk_frames: int | None = None
    force: bool = False
    reuse_across_versions: bool = False  # reuse work another ffbatch version rendered (farm/reuse.py)
    # what a frame the decoder cannot deliver does: fail the job, or skip (replaced, pts kept)
    on_decode_error: DecodeErrorMode = "fail"
    source_face_index: int = 0  # which face of each --source photo, largest first
    fail_if_no_faces: bool = False  # exit 2, writing nothing, when not one face was swapped
    fail_on_truncated: bool = False  # exit 2 before rendering when the input's video stops early
    input_fps: float | None = None  # an image sequence input's frame rate (--fps; default 24)
    # how a floating-point (EXR) plate is shown to the face stages (video/pictures/colour.py): auto (scene-
    # linear), linear, srgb, or an OCIO colour space; the OCIO config (None: $OCIO, else built-in)
    input_colorspace: str = "auto"
    ocio_config: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.swap, SwapSettings):  # a library caller's ClassicalSettings
            raise TypeError(
                f"RenderSettings.swap takes a SwapSettings (got {type(self.swap).__name__}): "
                "SwapSettings(swapper='classical', classical=ClassicalSettings(...))"
            )

    @property
    def batch_policy(self) -> BatchPolicy:
        """The one answer to "how many" for this job (frames per batch, items per model call)."""
        return BatchPolicy(frames=self.batch_size, on_gpu=self.device.on_gpu, max_batch=self.device.max_batch)


def settings_record(settings: RenderSettings) -> dict[str, Any]:
    """The resolved settings as plain JSON values (paths and enums as text), for reports."""
    return json.loads(json.dumps(asdict(settings), default=str))
