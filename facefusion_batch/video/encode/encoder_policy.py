"""The encoder policy: how the output is encoded, decided before any frame is processed.

`EncoderSettings` (codec, quality, rates, pixel format, audio), checked by `validate_encoder`
(the options alone) and `check_output` (against one input: interlacing, HDR, bits and chroma
lost, the encoder opened on the input's size); `output_pix_fmt` picks the pixel format written,
`stream_options` the FFmpeg options, `encoder_parameters` what the report says. The writer that
applies them is video/encode/writer.py.

Quality: `crf` 0-51 (x264/x265 CRF; NVENC constant-quality `cq`, where 0 means
"automatic" and is raised to 1). `quality` 0-100 (100 best) is the alternative,
mapped linearly: crf = round(51 * (100 - quality) / 100), so quality 100 -> crf
0, 65 -> 18, 0 -> 51. Neither given -> crf 18. NVENC takes its own presets
p1..p7 or the x264 names, mapped ultrafast/superfast -> p1, veryfast -> p2,
faster/fast -> p3, medium -> p4, slow -> p5, slower -> p6, veryslow/placebo ->
p7.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import cast

import av
import av.error
import numpy as np
from av.video.codeccontext import VideoCodecContext

from facefusion_batch.errors import InputError
from facefusion_batch.video.decode.probe import VideoInfo
from facefusion_batch.video.encode.formats import (
    ENCODER_TABLE,
    X26X_TO_NVENC,
    X26X_TO_SVTAV1,
    EncoderSpec,
    check_fits,
    encoder_spec,
)
from facefusion_batch.video.encode.sequence import is_sequence_pattern, sequence_codec
from facefusion_batch.video.pictures.colour import is_float_format
from facefusion_batch.video.pictures.fields import field_reason
from facefusion_batch.video.pictures.native import native_reason

PIPELINE_BITS = 8  # what the face pipeline carries per channel today

DEFAULT_CRF = 18
AUDIO_CODECS = ("copy", "pcm", "aac")

_HDR_TRANSFERS = {16: "PQ (SMPTE ST 2084)", 18: "HLG (ARIB STD-B67)"}
_FIELD_ORDERS = {
    2: "top field first",
    3: "bottom field first",
    4: "top coded first, bottom shown first",
    5: "bottom coded first, top shown first",
}
_RATE = re.compile(r"^\d+(\.\d+)?[kKmM]?$")


@dataclass(frozen=True)
class EncoderSettings:
    """How the output is encoded; `pix_fmt` None: the input's own pixel format where the encoder
    takes it, else the profile's or the encoder's (see `output_pix_fmt`)."""

    codec: str = "libx264"
    crf: int | None = None
    quality: int | None = None
    preset: str = "veryfast"
    pix_fmt: str | None = None
    threads: int = 0
    profile: str | None = None
    bitrate: str | None = None
    maxrate: str | None = None
    bufsize: str | None = None
    gop: int | None = None
    options: tuple[tuple[str, str], ...] = ()  # --encoder-opt key=value, passed to the encoder
    allow_reduce: bool = False  # the user accepts fewer bits / less chroma / 8-bit HDR than the input
    audio_codec: str = "copy"
    audio_bitrate: str | None = None
    audio: bool = True
    start_number: int | None = None  # an image sequence output's first number (None: default_start_number)

    @property
    def is_nvenc(self) -> bool:
        return self.codec.endswith("_nvenc")

    @property
    def spec(self) -> EncoderSpec:
        return encoder_spec(self.codec)

    def effective_crf(self) -> int:
        """The CRF (or NVENC cq) used: `crf`, else mapped from `quality`, else 18."""
        if self.crf is not None:
            return int(self.crf)
        if self.quality is not None:
            spec = ENCODER_TABLE.get(self.codec, ENCODER_TABLE["libx264"])
            return quality_to_crf(self.quality, spec.max_crf)
        return DEFAULT_CRF

    def codec_options(self) -> dict[str, str]:
        """The FFmpeg encoder options these settings translate to."""
        spec = ENCODER_TABLE.get(self.codec) or ENCODER_TABLE["libx264"]
        options: dict[str, str] = {}
        # with --bitrate alone the rate controls; a CRF/cq is set only when asked for
        quality = self.bitrate is None or self.crf is not None or self.quality is not None
        if spec.quality == "cq":
            options["preset"] = X26X_TO_NVENC.get(self.preset, self.preset)
            options["rc"] = "vbr"
            if quality:
                options["cq"] = str(max(1, self.effective_crf()))
        elif spec.quality == "crf":
            av1 = spec.family == "av1"
            options["preset"] = X26X_TO_SVTAV1.get(self.preset, self.preset) if av1 else self.preset
            if quality:
                options["crf"] = str(self.effective_crf())
        if self.codec == "libx265":
            options["x265-params"] = "log-level=error"
        profile = self.profile or spec.default_profile
        if profile is not None:
            options["profile"] = spec.profiles[profile].value if spec.profiles else profile
        if spec.family == "ffv1":
            options["level"] = "3"  # version 3: slices and CRCs, the archive profile
        for key, value in (("b", self.bitrate), ("maxrate", self.maxrate), ("bufsize", self.bufsize)):
            if value is not None:
                options[key] = value
        if self.gop is not None:
            options["g"] = str(self.gop)
        options.update(dict(self.options))
        return options


# x264's interlaced coding, by which field is shown first (AVFieldOrder: TT, BB, TB, BT)
_X264_FIELDS = {2: "tff=1", 3: "bff=1", 4: "bff=1", 5: "tff=1"}


def stream_options(settings: EncoderSettings, info: VideoInfo) -> dict[str, str]:
    """The encoder options for this input: the settings' own, and for an interlaced input into
    libx264 interlaced coding in the input's field order (its frames then decode flagged
    interlaced, top or bottom first, as the input's do), unless the user's x264-params say."""
    options = settings.codec_options()
    fields = _X264_FIELDS.get(info.field_order)
    if settings.codec == "libx264" and fields is not None:
        given = options.get("x264-params", "")
        if not any(key in given for key in ("tff", "bff", "interlaced", "fake-interlaced")):
            options["x264-params"] = f"{given}:{fields}" if given else fields
    return options


def encoder_parameters(settings: EncoderSettings, info: VideoInfo) -> dict[str, object]:
    """What the video encoder is given for this input, for the report: codec, pixel format, the
    FFmpeg options, the quality (crf/cq, None when a bitrate alone controls) and the rates."""
    options = stream_options(settings, info)
    quality = options.get("crf", options.get("cq"))
    return {
        "codec": settings.codec,
        "pix_fmt": output_pix_fmt(settings, info),
        "crf": int(quality) if quality is not None else None,
        "bitrate": settings.bitrate,
        "maxrate": settings.maxrate,
        "bufsize": settings.bufsize,
        "preset": options.get("preset"),
        "profile": options.get("profile"),
        "gop": settings.gop,
        "threads": settings.threads,
        "options": options,
    }


def quality_to_crf(quality: int, max_crf: int = 51) -> int:
    """Map quality 0-100 (100 best) linearly onto CRF max-0 (51 for x264/x265)."""
    return int(round(max_crf * (100 - quality) / 100))


def _is_int(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def profile_pix_fmts(settings: EncoderSettings) -> tuple[str, ...]:
    """The pixel formats the encoder (and its profile) can write here."""
    spec = settings.spec
    formats = tuple(f.name for f in av.Codec(settings.codec, "w").video_formats or ())
    profile = spec.profiles.get(settings.profile or spec.default_profile or "")
    if profile is not None and profile.pix_fmt is not None:
        return tuple(f for f in (profile.pix_fmts or (profile.pix_fmt,)) if f in formats)
    return formats


def validate_encoder(settings: EncoderSettings) -> None:
    """Raise InputError, naming the option, unless `settings` can encode here."""
    spec = settings.spec
    codec = settings.codec
    if settings.crf is not None and settings.quality is not None:
        raise InputError("--crf and --quality are alternatives; give only one of them")
    if spec.quality == "none" and (settings.crf is not None or settings.quality is not None):
        what = "is lossless" if spec.lossless else "sets its quality by --profile"
        raise InputError(f"--crf/--quality do not apply to --encoder {codec}: it {what}")
    if settings.crf is not None and (not _is_int(settings.crf) or not 0 <= settings.crf <= spec.max_crf):
        raise InputError(f"--crf must be a whole number from 0 to {spec.max_crf}, not {settings.crf!r}")
    if settings.quality is not None and (not _is_int(settings.quality) or not 0 <= settings.quality <= 100):
        raise InputError(f"--quality must be a whole number from 0 to 100, not {settings.quality!r}")
    if spec.presets and settings.preset not in spec.presets:
        raise InputError(
            f"--preset {settings.preset!r} is not valid for {codec}; choose one of: {', '.join(spec.presets)}"
        )
    if spec.profiles and settings.profile is not None and settings.profile not in spec.profiles:
        raise InputError(
            f"--profile {settings.profile!r} is not a {codec} profile; "
            f"choose one of: {', '.join(spec.profiles)}"
        )
    rates = {"--bitrate": settings.bitrate, "--maxrate": settings.maxrate, "--bufsize": settings.bufsize}
    for option, value in rates.items():
        if value is not None and not _RATE.match(str(value)):
            raise InputError(f"{option} takes bits per second such as 8000k or 20M, not {value!r}")
    if spec.quality == "none" and settings.bitrate is not None:
        raise InputError(f"--bitrate does not apply to --encoder {codec} (its rate follows --profile)")
    if settings.gop is not None and (not _is_int(settings.gop) or settings.gop < 1):
        raise InputError(f"--gop must be a whole number of frames, 1 or more (got {settings.gop!r})")
    if not _is_int(settings.threads) or settings.threads < 0:
        raise InputError(f"encoder threads must be 0 (automatic) or more, not {settings.threads!r}")
    if settings.audio_codec not in AUDIO_CODECS:
        raise InputError(
            f"--audio-codec must be one of {', '.join(AUDIO_CODECS)} (got {settings.audio_codec!r})"
        )
    if settings.audio_bitrate is not None:
        if not _RATE.match(str(settings.audio_bitrate)):
            raise InputError(
                f"--audio-bitrate takes bits per second such as 256k, not {settings.audio_bitrate!r}"
            )
        if settings.audio_codec != "aac":
            raise InputError("--audio-bitrate applies to --audio-codec aac only")
    formats = profile_pix_fmts(settings)
    pix_fmt = settings.pix_fmt or (formats[0] if spec.profiles else spec.default_pix_fmt)
    if pix_fmt not in formats:
        profile = settings.profile or spec.default_profile
        which = f"--encoder {codec}" + (f" --profile {profile}" if profile and spec.profiles else "")
        raise InputError(
            f"pixel format {pix_fmt!r} is not supported by {which}; choose one of: {', '.join(formats)}"
        )
    reason = _open_failure(codec, pix_fmt, tuple(sorted(settings.codec_options().items())))
    if reason is not None:
        hint = " (NVENC needs an NVIDIA GPU with its driver)" if settings.is_nvenc else ""
        raise InputError(f"--encoder {codec} cannot be used here{hint}: {reason}")


@functools.lru_cache(maxsize=64)
def _open_failure(
    codec: str, pix_fmt: str, options: tuple[tuple[str, str], ...], width: int = 256, height: int = 256
) -> str | None:
    """Try to open the encoder on a small picture; the reason it fails, or None.

    An option the encoder does not know (a misspelt --encoder-opt) is refused too: FFmpeg
    would otherwise ignore it silently."""
    unknown = _unknown_options(codec, dict(options))
    if unknown:
        return f"it has no option {', '.join(unknown)} (see `ffmpeg -h encoder={codec}`)"
    try:
        ctx = cast(VideoCodecContext, av.CodecContext.create(codec, "w"))
        ctx.width = width
        ctx.height = height
        ctx.pix_fmt = pix_fmt
        ctx.time_base = Fraction(1, 25)
        ctx.framerate = Fraction(25)
        ctx.options = dict(options)
        ctx.open()
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        return getattr(exc, "strerror", None) or str(exc)
    return None


def _unknown_options(codec: str, options: dict[str, str]) -> list[str]:
    supported = av.CodecContext.create(codec, "w").supported_options
    known = {o.name for o in supported.private} | {o.name for o in supported.generic}
    return sorted(k for k in options if k not in known)


def _chroma(pix_fmt: str) -> tuple[int, int]:
    """Chroma samples per 2x2 pixels, across and down (RGB counts as 4:4:4)."""
    fmt = av.VideoFormat(pix_fmt)
    if len([c for c in fmt.components if not c.is_alpha]) < 3:
        return (2, 2)
    return (fmt.chroma_width(2), fmt.chroma_height(2))


def _depth(pix_fmt: str) -> int:
    return max(c.bits for c in av.VideoFormat(pix_fmt).components if not c.is_alpha)


def _same_chroma_8bit(pix_fmt: str) -> str | None:
    try:
        chroma = _chroma(pix_fmt)
    except ValueError:
        return None
    return {(2, 2): "yuv444p", (1, 2): "yuv422p", (1, 1): "yuv420p"}.get(chroma)


def output_pix_fmt(settings: EncoderSettings, info: VideoInfo) -> str:
    """The pixel format written: --pix-fmt, else the input's own where the encoder (and its
    profile) takes it, else the same chroma at 8 bits, else the profile's or encoder's default."""
    if settings.pix_fmt is not None:
        return settings.pix_fmt
    spec = settings.spec
    formats = profile_pix_fmts(settings)
    fallback = formats[0] if spec.profiles else spec.default_pix_fmt
    if spec.profiles:
        return fallback  # ProRes / DNxHR: the profile decides
    if info.pix_fmt in formats and (info.bit_depth > PIPELINE_BITS or not native_layout(info, info.pix_fmt)):
        return info.pix_fmt  # the input's own pictures go out as they came (video/pictures/native.py)
    deep = _deep_match(info.pix_fmt, formats)
    if deep is not None:
        return deep  # all the input's bits, in its own family (a 16-bit PNG's rgb48be → rgb48le)
    candidate = _same_chroma_8bit(info.pix_fmt)
    # keep the family: an RGB encoder (libx264rgb) is not fed YUV, nor the other way round
    if candidate in formats and candidate.startswith("yuv") == fallback.startswith("yuv"):
        return candidate
    return fallback


def _is_rgb(pix_fmt: str) -> bool:
    return not pix_fmt.startswith(("yuv", "nv", "gray", "ya"))


def _deep_match(pix_fmt: str, formats: tuple[str, ...]) -> str | None:
    """For an input deeper than 8 bits: the encoder's format of the same family and chroma with
    the fewest bits that still hold the input's (a big-endian 16-bit PNG's rgb48be → rgb48le)."""
    try:
        depth, chroma, alpha = _depth(pix_fmt), _chroma(pix_fmt), _has_alpha(pix_fmt)
    except ValueError:
        return None
    if depth <= PIPELINE_BITS:
        return None
    fits = []
    for name in formats:
        try:
            if (_is_rgb(name), _chroma(name), _has_alpha(name)) != (_is_rgb(pix_fmt), chroma, alpha):
                continue
            if _depth(name) >= depth and av.VideoFormat(name).name.endswith("le"):
                fits.append((_depth(name), name))
        except ValueError:
            continue
    return min(fits)[1] if fits else None


def _has_alpha(pix_fmt: str) -> bool:
    return any(c.is_alpha for c in av.VideoFormat(pix_fmt).components)


def reduction_problems(info: VideoInfo, pix_fmt: str) -> list[str]:
    """What writing `info`'s frames as `pix_fmt` loses: bits the output cannot hold (frames on the
    native path keep the input's precision, video/pictures/native.py; others go through 8 bits) or chroma."""
    problems = []
    native = not native_layout(info, pix_fmt)
    if native and _depth(pix_fmt) < info.bit_depth:
        problems.append(
            f"the input is {info.bit_depth}-bit ({info.pix_fmt}) and the {pix_fmt} output holds "
            f"{_depth(pix_fmt)} bits"
        )
    elif not native and info.bit_depth > PIPELINE_BITS:
        problems.append(
            f"the input is {info.bit_depth}-bit ({info.pix_fmt}) and ffbatch processes frames at "
            f"{PIPELINE_BITS} bits, so the output holds {PIPELINE_BITS}-bit precision"
        )
    try:
        chroma_in, chroma_out = _chroma(info.pix_fmt), _chroma(pix_fmt)
    except ValueError:
        chroma_in = chroma_out = (2, 2)
    if chroma_out[0] < chroma_in[0] or chroma_out[1] < chroma_in[1]:
        problems.append(f"the input's chroma ({info.pix_fmt}) would be subsampled to {pix_fmt}")
    return problems


def check_output(settings: EncoderSettings, info: VideoInfo, output: Path) -> list[str]:
    """Exit 2 (InputError), before any frame is processed, when the output cannot be what the user
    expects from this input; otherwise the losses the user agreed to, for the log and the report."""
    sequence = is_sequence_pattern(output)
    if not sequence:
        check_fits(settings.codec, output)
    if sequence:
        pix_fmt = sequence_codec(output, settings.pix_fmt, info.bit_depth)[1]
    else:
        pix_fmt = output_pix_fmt(settings, info)
    if info.interlaced or info.field_order >= 2:
        order = _FIELD_ORDERS.get(info.field_order, "interlaced")
        why_not = native_layout(info, pix_fmt) or field_reason(info.field_order, info.interlaced, info.height)
        if sequence:
            why_not = "an image sequence holds progressive frames"
        if why_not:
            raise InputError(
                f"input {info.path} is interlaced ({order}) and cannot be swapped per field here "
                f"({why_not}); swapping whole frames would mix the two fields. Deinterlace it first "
                "(e.g. ffmpeg -vf bwdif) and render that"
            )
    width, height = even_dims(info.width, info.height, pix_fmt)
    reason = (
        None
        if sequence
        else _open_failure(
            settings.codec, pix_fmt, tuple(sorted(settings.codec_options().items())), width, height
        )
    )
    if reason is not None:
        need = " (DNxHR needs at least 256x120)" if settings.spec.family == "dnxhr" else ""
        raise InputError(
            f"--encoder {settings.codec} cannot encode {info.path}'s {width}x{height} {pix_fmt} "
            f"pictures{need}: {reason}"
        )
    warnings = []
    problems = reduction_problems(info, pix_fmt)
    if problems:
        if not (settings.allow_reduce or settings.pix_fmt is not None):
            raise InputError(
                f"{output}: {'; '.join(problems)}. "
                "Pass --allow-reduce (or an explicit --pix-fmt) to accept it"
            )
        warnings.extend(problems)
    hdr = _HDR_TRANSFERS.get(info.color_trc)
    native = not native_layout(info, pix_fmt)
    if hdr is not None:
        if not settings.allow_reduce and not native:
            raise InputError(
                f"input {info.path} is HDR ({hdr}); ffbatch processes 8 bits per channel, which bands HDR "
                f"gradients. Pass --allow-reduce to render it anyway (the output keeps its {hdr} tags)"
            )
        if _depth(pix_fmt) < 10:
            raise InputError(
                f"input {info.path} is HDR ({hdr}): a {_depth(pix_fmt)}-bit {pix_fmt} output would carry HDR "
                "in 8 bits; choose a 10-bit --pix-fmt such as yuv420p10le, or a ProRes profile"
            )
        if not native:
            warnings.append(f"the HDR ({hdr}) input is processed at {PIPELINE_BITS} bits (--allow-reduce)")
    wants_audio = settings.audio and info.audio_streams
    if wants_audio and settings.audio_codec == "pcm" and output.suffix.lower() in (".mp4", ".m4v"):
        raise InputError(
            f"--audio-codec pcm: {output.suffix} cannot hold PCM audio that players read; write .mov or .mkv"
        )
    return warnings


def even_dims(width: int, height: int, pix_fmt: str) -> tuple[int, int]:
    fmt = av.VideoFormat(pix_fmt)
    sub_w = fmt.chroma_width(2) < 2
    sub_h = fmt.chroma_height(2) < 2
    return width + (width % 2 if sub_w else 0), height + (height % 2 if sub_h else 0)


def native_layout(info: VideoInfo, pix_fmt: str) -> str:
    """'' when frames of `info` can travel at their own precision into a `pix_fmt` output
    (video/pictures/native.py), else why not."""
    reason = native_reason(info)
    if reason:
        return reason
    if is_float_format(info.pix_fmt) and not is_float_format(pix_fmt):
        return f"a floating-point plate goes into the {pix_fmt} output through its 8-bit display view"
    if even_dims(info.width, info.height, pix_fmt) != (info.width, info.height):
        return f"the {pix_fmt} output pads the input's odd size"
    return ""
