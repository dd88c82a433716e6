"""The option table: every option of `render`, `preview` and `plan`, declared once.

Each `Option` says its parameter, the value type the command line parses, its help and panel,
and the settings field it fills (`field`, a dotted path into `RenderSettings`): its default is
read from that field, so defaults live in the settings types only. `render_settings` builds the
frozen settings from the table; the command line (cli.py) gets each command's parameters from
it. To add an option to render: add an `Option` to `RENDER` (and a field with its default to
the settings type it belongs in), in the panel and place it shows in render's help.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from facefusion_batch.errors import InputError
from facefusion_batch.faces.classify import FaceFilterSettings
from facefusion_batch.faces.detect import DetectorSettings
from facefusion_batch.faces.facefusion_detectors import facefusion_detector_settings
from facefusion_batch.faces.facefusion_landmarks import (
    FaceFusionLandmarkerSettings,
    facefusion_landmarker_settings,
)
from facefusion_batch.faces.track import TrackSettings, presence_thresholds
from facefusion_batch.settings.checks import validate_choices, validate_options
from facefusion_batch.settings.device import DeviceRequest, resolve_device
from facefusion_batch.settings.types import (
    PlanSettings,
    ReferenceSettings,
    RenderSettings,
    SwapSettings,
)
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.learned import LearnedSettings
from facefusion_batch.swap.masks import MaskSettings
from facefusion_batch.video.encode.encoder_policy import EncoderSettings

# the panels render, preview and plan list their options in, in this order
PANEL_IO = "Input and output"
PANEL_SWAP = "Swap"
PANEL_FACES = "Faces"
PANEL_QUALITY = "Encoding and quality"
PANEL_FARM = "Farm: ranges, chunks, resume"
PANEL_GPU = "Device and GPU"
PANEL_FACEFUSION = "FaceFusion names"
PANELS = (PANEL_IO, PANEL_SWAP, PANEL_FACES, PANEL_QUALITY, PANEL_FARM, PANEL_GPU, PANEL_FACEFUSION)

# the settings type at each dotted path an option's `field` names (device_request: the device as
# asked for, resolved into RenderSettings.device by settings/device.py)
SETTINGS_TYPES: dict[str, type] = {
    "": RenderSettings,
    "swap": SwapSettings,
    "swap.classical": ClassicalSettings,
    "swap.learned": LearnedSettings,
    "swap.learned.masks": MaskSettings,
    "swap.reference": ReferenceSettings,
    "swap.face_filter": FaceFilterSettings,
    "encoder": EncoderSettings,
    "detector": DetectorSettings,
    "detector.facefusion_landmarker": FaceFusionLandmarkerSettings,
    "tracking": TrackSettings,
    "device_request": DeviceRequest,
    "plan": PlanSettings,  # plan's own options (not part of a render's settings)
}


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


FROM_FIELD: Any = _Marker("FROM_FIELD")  # the default is the settings field's
REQUIRED: Any = _Marker("REQUIRED")  # no default: the command line must give it


def field_default(path: str) -> Any:
    """The default of the settings field at `path` ("swap.learned.weight" → 0.5)."""
    prefix, _, name = path.rpartition(".")
    for f in fields(SETTINGS_TYPES[prefix]):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            raise KeyError(f"{path} has no default")
    raise KeyError(path)


@functools.cache
def field_choices(path: str) -> tuple[str, ...] | None:
    """The words of the settings field at `path` when its type is a `Literal` (or one or None):
    "swap.classical.blend" → ("multiband", "feather", "poisson"); else None."""
    prefix, _, name = path.rpartition(".")
    kind = get_type_hints(SETTINGS_TYPES[prefix])[name]
    if get_origin(kind) in (Union, UnionType):  # FaceOrder | None
        kind = next((k for k in get_args(kind) if k is not type(None)), None)
    if get_origin(kind) is not Literal:
        return None
    return get_args(kind)


@dataclass(frozen=True)
class Option:
    """One option of the command line (or its positional argument)."""

    name: str  # the parameter: batch_size is --batch-size unless `flags` say otherwise
    kind: Any  # the value type the command line parses: int, str | None, list[Path] | None
    flags: tuple[str, ...] = ()
    help: str | None = None
    panel: str | None = None
    field: str | None = None  # the settings field it fills (None: the command's own option)
    parse: Callable[[Any], Any] | None = None  # the command line's value → the field's (None: as is)
    to_text: Callable[[Any], Any] | None = None  # the field's default as the command line spells it
    # the words it takes, with did-you-mean when mistyped (None: its settings field's `Literal`'s)
    choices: tuple[str, ...] | None = None
    derived: bool = False  # worked out with other options (the device, the tracker), not set as is
    argument: bool = False  # positional
    metavar: str | None = None
    show_default: bool = True
    default: Any = FROM_FIELD  # only for an option outside the settings, or None: "the settings' own"

    @property
    def flag(self) -> str:
        """The name a message gives it: --batch-size."""
        return self.flags[0].split("/")[0] if self.flags else "--" + self.name.replace("_", "-")

    @property
    def words(self) -> tuple[str, ...] | None:
        """The words it takes: its `choices`, else those of its settings field's `Literal` type."""
        if self.choices is not None or self.field is None:
            return self.choices
        return field_choices(self.field)

    @property
    def cli_default(self) -> Any:
        if self.default is not FROM_FIELD:
            return self.default
        if self.field is None:
            raise TypeError(f"option {self.name}: no field to read a default from; give `default`")
        value = field_default(self.field)
        return self.to_text(value) if self.to_text else value


def _listed(value: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (value or "").split(",") if v.strip())


def _listed_or_default(value: str | None) -> tuple[str, ...] | None:
    return _listed(value) or None  # None: the field keeps its default (all of them)


def _joined(values: tuple[str, ...]) -> str:
    return ",".join(values)


def _tuple(values: list[Any] | None) -> tuple[Any, ...]:
    return tuple(values or ())


def _padding_text(padding: tuple[int, ...]) -> str:
    return str(padding[0]) if len(set(padding)) == 1 else ",".join(map(str, padding))


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


def parse_mapping(pairs: list[str] | None) -> tuple[tuple[Path, Path], ...]:
    """--map REF=SRC (repeatable) → (reference photo, source photo) pairs, in the given order."""
    mapping = []
    for pair in pairs or ():
        ref, sep, src = pair.partition("=")
        if not sep or not ref.strip() or not src.strip():
            raise InputError(f"--map takes REFERENCE=SOURCE, two photos (got {pair!r})")
        mapping.append((Path(ref.strip()), Path(src.strip())))
    return tuple(mapping)


# render's options, in the order its help lists them within each panel
RENDER: tuple[Option, ...] = (
    Option(
        "inputs",
        list[Path],
        argument=True,
        help="Input video(s), or an image sequence (shot/frame.%04d.dpx).",
        metavar="INPUT",
        show_default=False,
        default=REQUIRED,
    ),
    Option(
        "source",
        list[Path] | None,
        flags=("--source", "-s"),
        help=(
            "Photo of the face to put in; repeat for several photos of the same person (each target face "
            "uses the closest head pose). Required unless --map is given."
        ),
        panel=PANEL_IO,
        show_default=False,
        field="sources",
        parse=_tuple,
        default=None,
    ),
    Option(
        "output",
        Path | None,
        flags=("--output", "-o"),
        help="Output video; container from its extension. Written to a temporary name, renamed when done.",
        panel=PANEL_IO,
        default=None,
    ),
    Option(
        "output_dir",
        Path | None,
        help="Several inputs: write one output per input into this directory.",
        panel=PANEL_IO,
        default=None,
    ),
    Option(
        "output_pattern",
        str,
        help="File names in --output-dir: {stem}, {ext} (with its dot), {name}.",
        panel=PANEL_IO,
        default="{stem}-swapped{ext}",
    ),
    Option(
        "frames",
        str | None,
        help=(
            "Render only frames START:END (0-based, END exclusive) into a video-only segment for `ffbatch"
            " concat`."
        ),
        panel=PANEL_FARM,
        default=None,
    ),
    Option(
        "frame_range",
        str | None,
        help=(
            "Render only frames FIRST-LAST, inclusive, in the input's own numbers (an image sequence's "
            "file numbers; a video's frames from 0) as a farm substitutes them: 1001-1100, Deadline's "
            "<STARTFRAME>-<ENDFRAME>, an OpenJD chunk's range expression. A video output is a segment for"
            " `ffbatch concat`; a sequence output gets the frames at their final names."
        ),
        panel=PANEL_FARM,
        default=None,
    ),
    Option(
        "chunk_frames",
        int | None,
        help=(
            "Render in resumable chunks of N frames (default: chunks of 1500 frames for videos over 3000 "
            "frames; 0: never)."
        ),
        panel=PANEL_FARM,
        field="chunk_frames",
    ),
    Option(
        "force",
        bool,
        help="Drop saved progress and finished outputs; render everything again.",
        panel=PANEL_FARM,
        field="force",
    ),
    Option(
        "reuse_across_versions",
        bool,
        help=(
            "Reuse saved segments and finished outputs that another ffbatch version or render revision "
            "made with the same settings (said in a warning); by default they are rendered again."
        ),
        panel=PANEL_FARM,
        field="reuse_across_versions",
    ),
    Option(
        "ray",
        str | None,
        help="Render segments on Ray: auto (a running cluster, else a local one) or ADDRESS.",
        panel=PANEL_FARM,
        default=None,
    ),
    Option(
        "ray_workers",
        int | None,
        help="Ray actors (default: one per GPU; without GPUs, cores / 2).",
        panel=PANEL_FARM,
        default=None,
    ),
    Option(
        "faces",
        str,
        help=(
            "many: every face; one: the largest face of each frame; reference: the faces of the person in"
            " --reference-face / --reference-frame."
        ),
        panel=PANEL_FACES,
        field="faces",
    ),
    Option(
        "batch_size",
        int,
        help=(
            "Frames per batch (every model call takes the batch). On the CPU 8 is as fast as larger "
            "batches and keeps memory lower."
        ),
        panel=PANEL_GPU,
        field="batch_size",
        derived=True,
    ),
    Option(
        "batch_window_ms",
        float,
        help="Close a batch this long after its first frame even if not full.",
        panel=PANEL_GPU,
        field="batch_window_ms",
    ),
    Option(
        "workers",
        int,
        help="Batches processed at once.",
        panel=PANEL_GPU,
        field="workers",
        derived=True,
    ),
    Option(
        "threads",
        int | None,
        help="onnxruntime threads per model (default: the cores this job may use / workers).",
        panel=PANEL_GPU,
        field="threads",
    ),
    Option(
        "backend",
        str,
        help="auto | cpu | cuda | tensorrt.",
        panel=PANEL_GPU,
        field="device_request.backend",
        derived=True,
    ),
    Option(
        "gpu_runtime",
        str,
        help=(
            "What runs the models on --backend cuda: torch (default; ffbatch's ONNX interpreter) | "
            "onnxruntime (its CUDA provider with I/O binding; needs onnxruntime-gpu). docs/gpu.md."
        ),
        panel=PANEL_GPU,
        field="device_request.gpu_runtime",
        derived=True,
    ),
    Option(
        "streams",
        int | None,
        help="GPU: CUDA streams, one batch worker each (default from the GPU); CPU: as --workers.",
        panel=PANEL_GPU,
        field="device_request.streams",
        derived=True,
    ),
    Option(
        "gpus",
        str | None,
        help="GPUs to render on at once, one process each, e.g. 0,1 (default: GPU 0).",
        panel=PANEL_GPU,
        field="device_request.gpus",
        derived=True,
    ),
    Option(
        "max_batch",
        int | None,
        help="GPU: most frames per model call (TensorRT profile max, default 16); may use fewer.",
        panel=PANEL_GPU,
        field="device_request.max_batch",
        derived=True,
    ),
    Option(
        "precision",
        str,
        help=(
            "GPU: auto (fp16 where the model allows) | fp32 | fp16 | int8 (tensorrt); CPU: fp32, or int8 "
            "for learned models whose INT8 variant (ffbatch models prepare --int8) holds on real faces."
        ),
        panel=PANEL_GPU,
        field="device_request.precision",
        derived=True,
    ),
    Option(
        "encoder",
        str,
        help=(
            "libx264 | libx264rgb | libx265 | libsvtav1 | prores_ks | dnxhd | ffv1 | h264_nvenc | "
            "hevc_nvenc (docs/formats.md gives the containers each fits)."
        ),
        panel=PANEL_QUALITY,
        field="encoder.codec",
    ),
    Option(
        "crf",
        int | None,
        help="Constant rate factor 0–51, AV1 0–63 (default 18; 0: lossless x264).",
        panel=PANEL_QUALITY,
        field="encoder.crf",
    ),
    Option(
        "quality",
        int | None,
        help="0–100 (100 best); instead of --crf.",
        panel=PANEL_QUALITY,
        field="encoder.quality",
    ),
    Option(
        "preset",
        str,
        help="Encoder preset (x264 names; NVENC p1–p7; AV1 0–13).",
        panel=PANEL_QUALITY,
        field="encoder.preset",
    ),
    Option(
        "profile",
        str | None,
        help=(
            "prores_ks: proxy | lt | 422 | hq | 4444 | 4444xq (default hq); dnxhd: lb | sq | hq | hqx | "
            "444 (default hq); x264/x265: the encoder's own (high, main10...)."
        ),
        panel=PANEL_QUALITY,
        field="encoder.profile",
    ),
    Option(
        "pix_fmt",
        str | None,
        help=(
            "Output pixel format, e.g. yuv422p10le (default: the input's where the encoder takes it, else"
            " the profile's); also accepts a reduction of bit depth or chroma."
        ),
        panel=PANEL_QUALITY,
        field="encoder.pix_fmt",
    ),
    Option(
        "bitrate",
        str | None,
        help="Target bitrate, e.g. 20M (instead of --crf).",
        panel=PANEL_QUALITY,
        field="encoder.bitrate",
    ),
    Option(
        "maxrate",
        str | None,
        help="Peak bitrate, e.g. 30M (with --bufsize).",
        panel=PANEL_QUALITY,
        field="encoder.maxrate",
    ),
    Option(
        "bufsize",
        str | None,
        help="Rate-control buffer, e.g. 60M.",
        panel=PANEL_QUALITY,
        field="encoder.bufsize",
    ),
    Option(
        "gop",
        int | None,
        help="Keyframe interval in frames (1: all intra).",
        panel=PANEL_QUALITY,
        field="encoder.gop",
    ),
    Option(
        "encoder_opt",
        list[str] | None,
        help=(
            "KEY=VALUE passed to the encoder as ffmpeg's -KEY VALUE (repeatable), e.g. "
            "x264-params=keyint=24 or vendor=apl0; an option the encoder lacks is exit 2."
        ),
        panel=PANEL_QUALITY,
        field="encoder.options",
        parse=encoder_options,
        default=None,
    ),
    Option(
        "allow_reduce",
        bool,
        help=(
            "Accept an output with less than the input: 10/12-bit or HDR processed at 8 bits, 4:2:2/4:4:4"
            " chroma subsampled. Without it such a render is refused (exit 2)."
        ),
        panel=PANEL_QUALITY,
        field="encoder.allow_reduce",
    ),
    Option(
        "audio_codec",
        str,
        help=(
            "copy: every track as it is where the container holds it (else re-encoded, with a warning); "
            "pcm: every track to PCM (not in .mp4); aac: every track to AAC."
        ),
        panel=PANEL_IO,
        field="encoder.audio_codec",
    ),
    Option(
        "audio_bitrate",
        str | None,
        help="--audio-codec aac: bitrate, e.g. 256k.",
        panel=PANEL_IO,
        field="encoder.audio_bitrate",
    ),
    Option(
        "audio",
        bool,
        flags=("--audio/--no-audio",),
        help="Carry the input's audio tracks.",
        panel=PANEL_IO,
        field="encoder.audio",
    ),
    Option(
        "fps",
        float | None,
        help="Image sequence input (shot/frame.%04d.dpx): its frame rate (default 24).",
        panel=PANEL_IO,
        field="input_fps",
    ),
    Option(
        "input_colorspace",
        str,
        help=(
            "How an EXR plate's values are shown to the face stages: auto (scene-linear for EXR), "
            "linear (built-in linear to sRGB view), srgb (values are display values), or a colour space "
            "of the OCIO config. Pixels outside the faces keep every bit whichever is chosen."
        ),
        panel=PANEL_IO,
        field="input_colorspace",
    ),
    Option(
        "ocio_config",
        str | None,
        help=(
            "OCIO config (a .ocio file or a built-in such as ocio://default; default: the OCIO "
            "environment variable): EXR plates are shown through its default display and view."
        ),
        panel=PANEL_IO,
        field="ocio_config",
    ),
    Option(
        "start_number",
        int | None,
        help=(
            "Image sequence output (-o shot/frame.%06d.exr, .dpx .tif .png): the first frame's number "
            "(default: the input sequence's first, or 1001 for a video)."
        ),
        panel=PANEL_IO,
        field="encoder.start_number",
    ),
    Option(
        "blend",
        str,
        help="multiband | feather | poisson.",
        panel=PANEL_SWAP,
        field="swap.classical.blend",
    ),
    Option(
        "eyes_mouth",
        str,
        help=(
            "eyes: the source's eyes, following the target's eyelids (a face whose eyes the source cannot "
            "give, shut, lowered or looking away, keeps its own), and the target's inner mouth (default); "
            "target: keep the target's "
            "eyes and mouth; source: paint the source's both."
        ),
        panel=PANEL_SWAP,
        field="swap.classical.eyes_mouth",
    ),
    Option(
        "colour",
        str,
        flags=("--colour",),
        help="local | global | none: how the face is recoloured to the target's skin and light.",
        panel=PANEL_SWAP,
        field="swap.classical.colour",
    ),
    Option(
        "glasses",
        bool,
        flags=("--glasses/--no-glasses",),
        help=(
            "Classical swap: the dark rims of glasses round the target's eyes, found on the picture, "
            "stay in front of the swap, and a source photo's are painted out of its face (default); "
            "--no-glasses paints over the target's and keeps the source's."
        ),
        panel=PANEL_SWAP,
        field="swap.classical.glasses",
    ),
    Option(
        "lip_shadow",
        float,
        help=(
            "Classical swap, 0–1: how far the shadow under a top-lit source's lower lip is lifted toward "
            "its chin's skin. 1 removes the grey goatee it can leave on pale faces, at some cost in "
            "likeness; 0 keeps the photo as it is."
        ),
        panel=PANEL_SWAP,
        field="swap.classical.lip_shadow",
    ),
    Option(
        "smile_lines",
        float,
        help=(
            "Classical swap, 0–1: how far the source photo's smile lines (nose wing to mouth corner) are "
            "lifted toward the cheek's skin round them: they are its expression, not its face, and a "
            "turned face squeezed them into a dark line; 0 keeps the photo as it is."
        ),
        panel=PANEL_SWAP,
        field="swap.classical.smile_lines",
    ),
    Option(
        "shutter",
        float,
        help=(
            "Classical swap: the camera's shutter angle in degrees (180: open for half of each frame). A "
            "moving face's swap is smeared along its motion as far as the shutter was open, as the plate's "
            "own motion blur. 0 (default): not smeared, right for footage shot at a fast shutter."
        ),
        panel=PANEL_SWAP,
        field="swap.classical.shutter",
    ),
    Option(
        "swapper",
        str,
        help=(
            "auto: the learned swapper when its model files are present, else classical; classical; "
            "learned (fetched if missing); none: no swap, --enhancer-model alone."
        ),
        panel=PANEL_SWAP,
        field="swap.swapper",
    ),
    Option(
        "swapper_model",
        str | None,
        help=(
            "Learned swapper, FaceFusion's name: inswapper_128, hyperswap_1a_256, simswap_256, "
            "ghost_1_256, blendswap_256, uniface_256, ... (a prepared variant: NAME@fp16)."
        ),
        panel=PANEL_SWAP,
        field="swap.learned.swapper_model",
    ),
    Option(
        "swapper_weight",
        float,
        help="0–1; 0.5 the source identity alone, lower keeps more of the target's.",
        panel=PANEL_SWAP,
        field="swap.learned.weight",
    ),
    Option(
        "pixel_boost",
        int | None,
        help="Learned swapper crop size, a multiple of its input (128-px models: 256, 512).",
        panel=PANEL_SWAP,
        field="swap.learned.pixel_boost",
    ),
    Option(
        "enhancer_model",
        str | None,
        help="Face enhancer after the swap: gfpgan_1.4, gpen_bfr_512, codeformer...",
        panel=PANEL_SWAP,
        field="swap.learned.enhancer_model",
    ),
    Option(
        "enhancer_blend",
        int,
        help="Percent of the enhanced face kept, 0–100.",
        panel=PANEL_SWAP,
        field="swap.learned.enhancer_blend",
    ),
    Option(
        "enhancer_weight",
        float,
        help="0–1: codeformer's fidelity input (FaceFusion's default 0.5); others ignore it.",
        panel=PANEL_SWAP,
        field="swap.learned.enhancer_weight",
    ),
    Option(
        "embedding_convention",
        str | None,
        help=(
            "insightface | facefusion: how the source identity is fed. Default: the model publisher's "
            "(insightface for inswapper: latent renormalised; facefusion for the rest). facefusion "
            "reproduces FaceFusion 3.x's latent, --swapper-weight and several --source."
        ),
        panel=PANEL_SWAP,
        field="swap.learned.embedding_convention",
    ),
    Option(
        "face_detector_model",
        str | None,
        help=(
            "FaceFusion's face detector: yolo_face | retinaface | scrfd | yunet | many, at FaceFusion's "
            "sizes, scores and angles, run when its file is here (else ffbatch's YuNet, with a warning). "
            "Default: ffbatch's YuNet. docs/facefusion.md."
        ),
        panel=PANEL_FACES,
        default=None,
    ),
    Option(
        "face_detector_size",
        str | None,
        help="With --face-detector-model: its size, WxH (default FaceFusion's largest).",
        panel=PANEL_FACES,
        default=None,
    ),
    Option(
        "detector_angles",
        str | None,
        help=(
            "With --face-detector-model: the frame turned by these angles too, e.g. 0,90 (default 0); "
            "FaceFusion's --face-detector-angles 0 90."
        ),
        panel=PANEL_FACES,
        default=None,
    ),
    Option(
        "detector_margin",
        str | None,
        help=(
            "With --face-detector-model: black added at the frame's top,right,bottom,left before "
            "detection, percent (100: half the frame), e.g. 10,0,10,0; FaceFusion's "
            "--face-detector-margin 10 0 10 0."
        ),
        panel=PANEL_FACES,
        default=None,
    ),
    Option(
        "face_landmarker_model",
        str,
        help=(
            "With --face-detector-model: FaceFusion's 68-point landmarker that refines the five points, "
            "2dfan4 | peppa_wutz | many, run when its file and fan_68_5's are here."
        ),
        field="detector.facefusion_landmarker.model",
        panel=PANEL_FACES,
        derived=True,
    ),
    Option(
        "face_landmarker_score",
        float,
        help="With --face-detector-model: the landmarker's points kept above this score (0: none).",
        field="detector.facefusion_landmarker.score",
        panel=PANEL_FACES,
        derived=True,
    ),
    Option(
        "mask",
        str,
        help=(
            "Swap masks, comma-separated: box, occlusion (xseg; the classical swap too), area (the face "
            "mesh's areas, --mask-areas), region (parser; learned only), skin (classical only: what is "
            "not skin in front of the face stays, no model needed; hands are skin)."
        ),
        panel=PANEL_SWAP,
        field="swap.learned.masks.types",
        parse=_listed,
        to_text=_joined,
    ),
    Option(
        "mask_blur",
        float,
        help="Box mask blur, 0–1.",
        panel=PANEL_SWAP,
        field="swap.learned.masks.blur",
    ),
    Option(
        "mask_padding",
        str,
        help="Box mask padding, percent: T,R,B,L or one value.",
        panel=PANEL_SWAP,
        field="swap.learned.masks.padding",
        parse=_mask_padding,
        to_text=_padding_text,
    ),
    Option(
        "mask_regions",
        str | None,
        help="Region mask classes, comma-separated (default: all face regions).",
        panel=PANEL_SWAP,
        field="swap.learned.masks.regions",
        parse=_listed_or_default,
        default=None,
    ),
    Option(
        "mask_areas",
        str | None,
        help="--mask area: upper-face, lower-face, mouth, comma-separated (default: all three).",
        panel=PANEL_SWAP,
        field="swap.learned.masks.areas",
        parse=_listed_or_default,
        default=None,
    ),
    Option(
        "occluder_model",
        str,
        help="xseg_1 | xseg_2 | xseg_3.",
        panel=PANEL_SWAP,
        field="swap.learned.masks.occluder_model",
    ),
    Option(
        "parser_model",
        str,
        help="bisenet_resnet_34 | bisenet_resnet_18.",
        panel=PANEL_SWAP,
        field="swap.learned.masks.parser_model",
    ),
    Option(
        "reference_face",
        Path | None,
        help="--faces reference: a photo of the person whose faces are swapped.",
        panel=PANEL_FACES,
        field="swap.reference.image",
    ),
    Option(
        "reference_frame",
        int | None,
        help="--faces reference: take the person from this frame of the input.",
        panel=PANEL_FACES,
        field="swap.reference.frame",
    ),
    Option(
        "reference_face_position",
        int,
        help="Which face of the reference picture, 0 = the largest.",
        panel=PANEL_FACES,
        field="swap.reference.position",
    ),
    Option(
        "reference_distance",
        float,
        help="Faces within this distance (1 − cos)/2 of the reference are swapped.",
        panel=PANEL_FACES,
        field="swap.reference.distance",
    ),
    Option(
        "score_threshold",
        float,
        help="Face detector score threshold.",
        panel=PANEL_FACES,
        field="detector.score_threshold",
    ),
    Option(
        "face_order",
        str | None,
        help=(
            "Order of each frame's faces (FaceFusion's): left-right, right-left, top-bottom, bottom-top, "
            "small-large, large-small, best-worst, worst-best. --faces one takes the first."
        ),
        panel=PANEL_FACES,
        field="swap.face_order",
    ),
    Option(
        "face_index",
        list[int] | None,
        help=(
            "Swap only the face at this position of each frame in --face-order (0 = first; default order "
            "large-small); repeat for several."
        ),
        panel=PANEL_FACES,
        field="swap.face_indices",
        parse=_tuple,
        default=None,
    ),
    Option(
        "person_map",
        list[str] | None,
        flags=("--map",),
        help=(
            "REF=SRC: faces of the person in photo REF get the face in photo SRC; repeat for each person."
            " One choice per face track; faces near no REF are left alone (--map-unmatched)."
        ),
        panel=PANEL_FACES,
        show_default=False,
        field="swap.mapping",
        parse=parse_mapping,
        default=None,
    ),
    Option(
        "map_unmatched",
        str,
        help=(
            "--map, a face near no reference: skip (left alone), nearest (the nearest reference's source "
            "anyway), source (swapped with --source)."
        ),
        panel=PANEL_FACES,
        field="swap.map_unmatched",
    ),
    Option(
        "recogniser",
        str,
        help=(
            "Who a face is, for --faces reference and --map: arcface (arcface_w600k_r50), dlib (pip "
            "install 'ffbatch[dlib]'), auto (arcface if its file is here, else dlib). It only chooses "
            "faces; it never feeds the swap."
        ),
        panel=PANEL_FACES,
        field="swap.recogniser",
    ),
    Option(
        "face_selector_gender",
        str | None,
        help=(
            "Only faces of this gender: female, male, auto (the --source face's). Needs FaceFusion's "
            "fairface model."
        ),
        panel=PANEL_FACES,
        show_default=False,
        field="swap.face_filter.gender",
    ),
    Option(
        "face_selector_race",
        str | None,
        help=(
            "Only faces of this race (FaceFusion's classes): white, black, latino, asian, indian, arabic,"
            " auto. Needs fairface."
        ),
        panel=PANEL_FACES,
        show_default=False,
        field="swap.face_filter.race",
    ),
    Option(
        "face_selector_age_start",
        int | None,
        help="Only faces this old or older (0-100). Needs fairface.",
        panel=PANEL_FACES,
        show_default=False,
        field="swap.face_filter.age_start",
    ),
    Option(
        "face_selector_age_end",
        int | None,
        help="Only faces younger than this (0-100). Needs fairface.",
        panel=PANEL_FACES,
        show_default=False,
        field="swap.face_filter.age_end",
    ),
    Option(
        "smoothing",
        float,
        help=(
            "Landmark smoothing along each face's track (One Euro filter): 0 off, 1 default, more smooths"
            " more (at the cost of lag on fast motion)."
        ),
        panel=PANEL_FACES,
        field="tracking.smoothing",
    ),
    Option(
        "face_presence",
        float,
        help=(
            "How sure the face mesh must be that it sees a face before its track is swapped: its presence"
            " logit, averaged over the track's last frames (0-100). Faces the mesh follows score 16-44; a"
            " face the frame cuts so that its eyes are outside scores 0-6 and is left as it is. Lower "
            "swaps weaker faces (blurred, turned, cut), higher leaves more alone."
        ),
        panel=PANEL_FACES,
        field="tracking.on",
        derived=True,
    ),
    Option(
        "on_decode_error",
        str,
        help=(
            "fail: a frame that cannot be decoded fails the job (exit 2); skip: it is replaced by the "
            "last good frame (black before the first) at its own timestamp, counted in the report (whole-"
            "file renders only)."
        ),
        panel=PANEL_IO,
        field="on_decode_error",
    ),
    Option(
        "hwaccel",
        str,
        help=(
            "none | cuda: decode on the GPU's video decoder (NVDEC; the pictures are the same, the CPU is"
            " left to the encoder). Exit 2 where there is none."
        ),
        panel=PANEL_GPU,
        field="device_request.hwaccel",
        derived=True,
    ),
    Option(
        "source_face_index",
        int,
        help="Which face of each --source photo to use, faces ordered largest first (0: the largest).",
        panel=PANEL_SWAP,
        field="source_face_index",
    ),
    Option(
        "models_dir",
        Path | None,
        help="Look here for model files first.",
        panel=PANEL_SWAP,
        field="models_dir",
    ),
    Option(
        "report",
        Path | None,
        help="Write a JSON report here (also for a failed or interrupted job).",
        panel=PANEL_IO,
        field="report",
    ),
    Option(
        "matte_output",
        Path | None,
        help=(
            "Also write the alpha each frame's faces were pasted with (0 elsewhere), frame for frame: "
            "FFV1 grey .mkv/.avi (with --frames: a segment for `concat`) or a grey PNG/TIFF sequence "
            "(matte.%06d.png, numbered by input frame from the output's start number). A template of each"
            " input's name with --output-pattern's fields: 'mattes/{stem}.matte.mkv' (several inputs need"
            " one)."
        ),
        panel=PANEL_IO,
        field="matte_output",
    ),
    Option(
        "face_only_output",
        Path | None,
        help=(
            "Also write the swapped faces alone with STRAIGHT (not premultiplied) alpha, the matte's: "
            "over the input it gives the output. ProRes 4444 with alpha in .mov, or an RGBA sequence "
            "face.%06d.exr (half) / .png / .tiff, numbered as --matte-output, a template as it is."
        ),
        panel=PANEL_IO,
        field="face_only_output",
    ),
    Option(
        "fail_if_no_faces",
        bool,
        help="Exit 2, writing nothing, when not one face was swapped.",
        panel=PANEL_FACES,
        field="fail_if_no_faces",
    ),
    Option(
        "fail_on_truncated",
        bool,
        help=(
            "Exit 2 before rendering when the input's video stops before the end its container declares "
            "(a truncated or damaged file; without it: a warning, and the frames that are there)."
        ),
        panel=PANEL_IO,
        field="fail_on_truncated",
    ),
    Option(
        "overwrite",
        bool,
        help="Replace an existing output file.",
        panel=PANEL_IO,
        field="overwrite",
        derived=True,
    ),
    Option(
        "quiet",
        bool,
        flags=("--quiet", "-q"),
        help="No progress bar, warnings only.",
        field="quiet",
    ),
    Option(
        "verbose",
        bool,
        flags=("--verbose", "-v"),
        help="More detail on stderr: settings, decoder, encoder, stream map, batch timings.",
        default=False,
    ),
    Option(
        "facefusion_job",
        Path | None,
        help=(
            "Run a FaceFusion 3 job file's steps, each as a render (no INPUT: each step names its target "
            "and output); other options apply to every step."
        ),
        panel=PANEL_FACEFUSION,
        show_default=False,
        default=None,
    ),
)

RENDER_OPTIONS = {option.name: option for option in RENDER}


def _render(*names: str) -> tuple[Option, ...]:
    return tuple(RENDER_OPTIONS[name] for name in names)


# preview: render's swap, detector and device options (same names, defaults and checks) and its own
PREVIEW: tuple[Option, ...] = (
    Option("input", Path, argument=True, help="Input video.", default=REQUIRED),
    Option(
        "output",
        Path,
        flags=("--output", "-o"),
        help="Contact sheet image (.png).",
        panel=PANEL_IO,
        default=REQUIRED,
    ),
    *_render("source"),
    Option("frames", int, help="How many frames to sample.", panel=PANEL_IO, default=4),
    *_render("input_colorspace", "ocio_config"),
    Option("overwrite", bool, help="Replace the sheet if it exists.", panel=PANEL_IO, field="overwrite"),
    *_render(
        "faces",
        "blend",
        "eyes_mouth",
        "colour",
        "glasses",
        "lip_shadow",
        "smile_lines",
        "shutter",
        "swapper",
        "swapper_model",
        "swapper_weight",
        "pixel_boost",
        "enhancer_model",
        "enhancer_blend",
        "enhancer_weight",
        "embedding_convention",
        "face_detector_model",
        "face_detector_size",
        "detector_angles",
        "detector_margin",
        "face_landmarker_model",
        "face_landmarker_score",
        "mask",
        "mask_blur",
        "mask_padding",
        "mask_regions",
        "mask_areas",
        "occluder_model",
        "parser_model",
        "reference_face",
        "reference_frame",
        "reference_face_position",
        "reference_distance",
        "score_threshold",
        "face_order",
        "face_index",
        "person_map",
        "map_unmatched",
        "recogniser",
        "face_selector_gender",
        "face_selector_race",
        "face_selector_age_start",
        "face_selector_age_end",
        "smoothing",
        "face_presence",
        "source_face_index",
        "backend",
        "gpu_runtime",
        "models_dir",
    ),
    Option(
        "crops",
        bool,
        flags=("--crops",),
        help="Also show every swapped face at 1:1 (before | after) under its row: seams, lids "
        "and colour as a render writes them, not scaled to the sheet.",
        panel=PANEL_IO,
        default=False,
    ),
    Option("quiet", bool, flags=("--quiet", "-q"), field="quiet"),
)

# plan: its own options; the render options for every chunk pass through to render's parser
PLAN: tuple[Option, ...] = (
    Option(
        "inputs",
        list[str],
        argument=True,
        help="Input video(s), and the `render` options for every chunk (--source ... --crf ...).",
        metavar="INPUT",
        show_default=False,
        default=REQUIRED,
    ),
    Option(
        "chunk_frames",
        int,
        help="Frames per chunk (one farm task each).",
        panel=PANEL_FARM,
        field="plan.chunk_frames",
    ),
    Option(
        "format",
        str,
        flags=("--format",),
        help="json | shell | slurm | opencue | openjd (Open Job Description).",
        panel=PANEL_FARM,
        field="plan.format",
    ),
    Option(
        "output",
        Path | None,
        flags=("--output", "-o"),
        help="The joined video (one input).",
        panel=PANEL_IO,
        default=None,
    ),
    Option(
        "output_dir",
        Path | None,
        help="Several inputs: one joined video per input in here.",
        panel=PANEL_IO,
        default=None,
    ),
    *_render("output_pattern"),
    Option(
        "ffbatch",
        str,
        flags=("--ffbatch",),
        help="How the farm's hosts run ffbatch, e.g. '/opt/venv/bin/ffbatch'.",
        panel=PANEL_FARM,
        field="plan.ffbatch",
    ),
    Option(
        "sbatch",
        list[str] | None,
        help="slurm: an extra #SBATCH line, e.g. --sbatch=--gres=gpu:1.",
        panel=PANEL_FARM,
        default=None,
    ),
    Option("overwrite", bool, help="The joins replace existing outputs.", panel=PANEL_IO, default=False),
)


def _assemble(prefix: str, values: Mapping[str, Any]) -> Any:
    """The settings type at `prefix`, its fields from `values` (dotted paths); a field no value
    reaches keeps its default, a nested type is assembled from the values under it."""
    kwargs: dict[str, Any] = {}
    for f in fields(SETTINGS_TYPES[prefix]):
        path = f"{prefix}.{f.name}" if prefix else f.name
        if path in values:
            kwargs[f.name] = values[path]
        elif path in SETTINGS_TYPES and any(key.startswith(path + ".") for key in values):
            kwargs[f.name] = _assemble(path, values)
    return SETTINGS_TYPES[prefix](**kwargs)


def _check_between(option: str, value: float | None, low: float, high: float, what: str = "") -> None:
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise InputError(f"{option} must be between {low:g}{what} and {high:g} (got {value:g})")


def render_settings(
    params: Mapping[str, Any], *, given: Collection[str] | None = None, resolve: bool = True
) -> tuple[RenderSettings, tuple[int, ...] | None]:
    """render's parsed options (by parameter name, as the command line parses them; an option
    left out has its default) → validated settings, and the GPUs of a several-GPU render (None:
    this process). `given`: the options the user set (None: all of them). `resolve=False` (plan,
    on a submit host) resolves no device. Paths are checked by `validate_paths` when a job runs."""
    given = set(params) if given is None else set(given)
    values: dict[str, Any] = {}  # each field's value, by its dotted path
    for option in RENDER:
        if option.field is None:
            continue
        value = params[option.name] if option.name in params else option.cli_default
        if option.words is not None and value is not None:
            validate_choices(option.flag, value, option.words)
        value = option.parse(value) if option.parse else value
        if value is not None or option.parse is None:
            values[option.field] = value
    inputs = params.get("inputs") or [params.get("input") or Path(".")]
    values.update(input=Path(inputs[0]), output=Path(params.get("output") or "."))
    values["swap.reference.video"] = Path(inputs[0])  # a --reference-frame is a frame of the input
    values["overwrite"] = values["overwrite"] or values["force"]
    values["detector.facefusion"] = facefusion_detector_settings(
        params.get("face_detector_model"),
        params.get("face_detector_size"),
        params.get("detector_angles"),
        values["detector.score_threshold"] if "score_threshold" in given else None,
        margin=params.get("detector_margin"),
    )
    values["detector.facefusion_landmarker"] = facefusion_landmarker_settings(
        values["detector.facefusion_landmarker.model"], values["detector.facefusion_landmarker.score"]
    )
    _check_between("--smoothing", values["tracking.smoothing"], 0, 10, " (off)")
    _check_between("--face-presence", values["tracking.on"], 0, 100)
    values.update({f"tracking.{k}": v for k, v in presence_thresholds(values["tracking.on"]).items()})
    for flag, key, high in (("--streams", "streams", 64), ("--max-batch", "max_batch", 4096)):
        count = values[f"device_request.{key}"]
        if count is not None and not 1 <= count <= high:
            raise InputError(f"{flag} must be between 1 and {high} (got {count})")
    request: DeviceRequest = _assemble("device_request", values)
    plan = resolve_device(
        **asdict(request),
        workers=values["workers"],
        batch_size=values["batch_size"] if "batch_size" in given else None,
        resolve=resolve,
    )
    if "workers" in given and plan.device.on_gpu and "streams" not in given:  # --workers: its streams
        workers = values["workers"]
        plan = replace(plan, device=replace(plan.device, streams=workers), workers=workers)
    values.update(device=plan.device, workers=plan.workers, batch_size=plan.batch_size)
    try:
        settings: RenderSettings = _assemble("", values)
    except ValueError as exc:  # a settings type's own check
        raise InputError(str(exc)) from None
    return validate_options(settings), plan.gpus
