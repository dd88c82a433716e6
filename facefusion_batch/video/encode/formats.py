"""What ffbatch can encode, and into which container: one table, checked before any decoding.

Each encoder has a family (the codec a container must hold), the containers where it
fits (by output extension), its profiles (`--profile` word -> the encoder's own value,
and the pixel format that profile needs), the pixel format it writes when none is given
and how its quality is set. `render`, `plan` and `doctor` all read this table, so an
encoder `doctor` lists is one `render` accepts, and an impossible codec/container pair
is refused up front (exit 2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import av
import av.error

from facefusion_batch.errors import InputError, did_you_mean

# Output extension -> FFmpeg muxer.
CONTAINERS = {
    ".mp4": "mp4",
    ".m4v": "mp4",
    ".mov": "mov",
    ".mkv": "matroska",
    ".mxf": "mxf",
    ".avi": "avi",
    ".webm": "webm",
}

X26X_PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
    "placebo",
)
NVENC_PRESETS = ("p1", "p2", "p3", "p4", "p5", "p6", "p7")
X26X_TO_NVENC = {
    "ultrafast": "p1",
    "superfast": "p1",
    "veryfast": "p2",
    "faster": "p3",
    "fast": "p3",
    "medium": "p4",
    "slow": "p5",
    "slower": "p6",
    "veryslow": "p7",
    "placebo": "p7",
}
# SVT-AV1 presets are 0 (slowest) .. 13 (fastest); the x264 names map onto them.
SVTAV1_PRESETS = tuple(str(p) for p in range(14))
X26X_TO_SVTAV1 = {
    "ultrafast": "13",
    "superfast": "12",
    "veryfast": "10",
    "faster": "9",
    "fast": "8",
    "medium": "6",
    "slow": "5",
    "slower": "4",
    "veryslow": "2",
    "placebo": "0",
}


@dataclass(frozen=True)
class Profile:
    value: str  # the encoder's own "profile" option value
    pix_fmt: str | None = None  # the pixel format the profile needs (None: any the encoder takes)
    pix_fmts: tuple[str, ...] = ()  # the other pixel formats this profile accepts


@dataclass(frozen=True)
class EncoderSpec:
    """One encoder: where it fits and how it is driven."""

    name: str
    family: str  # h264 | hevc | av1 | prores | dnxhr | ffv1
    extensions: tuple[str, ...]
    default_pix_fmt: str
    quality: str  # crf (0..max_crf) | cq (NVENC) | none (profile or lossless)
    max_crf: int = 51
    presets: tuple[str, ...] = X26X_PRESETS
    profiles: dict[str, Profile] = field(default_factory=dict)
    default_profile: str | None = None
    lossless: bool = False  # always lossless (FFV1)
    gpu: bool = False

    def fits(self, extension: str) -> bool:
        return extension.lower() in self.extensions


_ISO = (".mp4", ".m4v", ".mov", ".mkv")
_NVENC = NVENC_PRESETS + X26X_PRESETS
_PRORES_422 = ("yuv422p10le",)
_PRORES_444 = ("yuv444p10le", "yuva444p10le")

ENCODER_TABLE: dict[str, EncoderSpec] = {
    spec.name: spec
    for spec in (
        EncoderSpec("libx264", "h264", _ISO, "yuv420p", "crf"),
        EncoderSpec("libx264rgb", "h264", (".mov", ".mkv", ".mp4"), "bgr24", "crf"),
        EncoderSpec("libx265", "hevc", _ISO, "yuv420p", "crf"),
        EncoderSpec("h264_nvenc", "h264", _ISO, "yuv420p", "cq", presets=_NVENC, gpu=True),
        EncoderSpec("hevc_nvenc", "hevc", _ISO, "yuv420p", "cq", presets=_NVENC, gpu=True),
        EncoderSpec(
            "libsvtav1",
            "av1",
            (".mp4", ".mkv", ".webm"),
            "yuv420p",
            "crf",
            max_crf=63,
            presets=SVTAV1_PRESETS + X26X_PRESETS,
        ),
        EncoderSpec(
            "prores_ks",
            "prores",
            (".mov", ".mxf", ".mkv"),
            "yuv422p10le",
            "none",
            presets=(),
            profiles={
                "proxy": Profile("proxy", "yuv422p10le", _PRORES_422),
                "lt": Profile("lt", "yuv422p10le", _PRORES_422),
                "422": Profile("standard", "yuv422p10le", _PRORES_422),
                "hq": Profile("hq", "yuv422p10le", _PRORES_422),
                "4444": Profile("4444", "yuv444p10le", _PRORES_444),
                "4444xq": Profile("4444xq", "yuv444p10le", _PRORES_444),
            },
            default_profile="hq",
        ),
        EncoderSpec(
            "dnxhd",
            "dnxhr",
            (".mov", ".mxf"),
            "yuv422p",
            "none",
            presets=(),
            profiles={
                "lb": Profile("dnxhr_lb", "yuv422p"),
                "sq": Profile("dnxhr_sq", "yuv422p"),
                "hq": Profile("dnxhr_hq", "yuv422p"),
                "hqx": Profile("dnxhr_hqx", "yuv422p10le"),
                "444": Profile("dnxhr_444", "yuv444p10le", ("yuv444p10le", "gbrp10le")),
            },
            default_profile="hq",
        ),
        EncoderSpec("ffv1", "ffv1", (".mkv", ".avi", ".mxf"), "yuv444p", "none", presets=(), lossless=True),
    )
}
ENCODERS = tuple(ENCODER_TABLE)


@functools.cache
def encoder_in_build(name: str) -> bool:
    """Whether this FFmpeg build (PyAV's wheel) has the encoder at all."""
    try:
        av.codec.Codec(name, "w")
    except (av.codec.codec.UnknownCodecError, ValueError, av.error.FFmpegError):
        return False
    return True


def available_encoders(*, gpu: bool | None = None) -> tuple[str, ...]:
    """The table's encoders this build has (gpu=False: software only; True: NVENC only)."""
    return tuple(
        name
        for name, spec in ENCODER_TABLE.items()
        if encoder_in_build(name) and (gpu is None or spec.gpu == gpu)
    )


def encoder_spec(name: str) -> EncoderSpec:
    """The table entry for `--encoder NAME`; InputError naming the choices otherwise."""
    spec = ENCODER_TABLE.get(name)
    if spec is None or not encoder_in_build(name):
        choices = ", ".join(available_encoders())
        hint = did_you_mean(name, available_encoders())
        raise InputError(f"--encoder {name!r} is not supported{hint}; choose one of: {choices}")
    return spec


def container_format_for(output: Path) -> str:
    """The FFmpeg muxer for the output's extension; InputError for an unsupported one."""
    suffix = output.suffix.lower()
    if suffix in CONTAINERS:
        return CONTAINERS[suffix]
    known = ", ".join(sorted(CONTAINERS))
    shown = f"extension {suffix!r}" if suffix else "no extension"
    raise InputError(f"output {output} has {shown}; the output must end in one of: {known}")


def containers_for(codec: str) -> tuple[str, ...]:
    return ENCODER_TABLE[codec].extensions


def check_fits(codec: str, output: Path) -> None:
    """InputError (exit 2) unless `output`'s container can hold what `codec` writes."""
    container_format_for(output)
    spec = encoder_spec(codec)
    suffix = output.suffix.lower()
    if not spec.fits(suffix):
        holders = [n for n, s in ENCODER_TABLE.items() if s.fits(suffix) and encoder_in_build(n)]
        raise InputError(
            f"output {output}: a {suffix} file cannot hold {spec.family} from --encoder {codec}; "
            f"write {' or '.join(spec.extensions)} instead, or use an encoder that fits {suffix}: "
            f"{', '.join(holders)}"
        )


def segment_suffix(codec: str) -> str:
    """The container of a chunk's video-only segment: .mp4 keeps the time base exactly;
    codecs .mp4 cannot hold go to .mov (same exact time base), FFV1 to .mkv."""
    spec = ENCODER_TABLE.get(codec)
    if spec is None or spec.fits(".mp4"):
        return ".mp4"
    return ".mov" if spec.fits(".mov") else ".mkv"
