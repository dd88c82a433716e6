"""What the FFmpeg build inside PyAV can do with an NVIDIA GPU: NVENC encoders, NVDEC decoding.

Each probe answers '' when the thing works here, else why not; nothing here raises.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal, cast, get_args

import av
from av.video.codeccontext import VideoCodecContext

Hwaccel = Literal["none", "cuda"]
HWACCELS: tuple[Hwaccel, ...] = get_args(Hwaccel)
NVENC = ("h264_nvenc", "hevc_nvenc", "av1_nvenc")
NVDEC = ("h264_cuvid", "hevc_cuvid", "av1_cuvid")


def codecs_present(names: tuple[str, ...], mode: Literal["r", "w"]) -> list[str]:
    """The codecs of `names` this FFmpeg build has (mode "r": decoders, "w": encoders)."""
    usable = []
    for name in names:
        try:
            av.codec.Codec(name, mode)
            usable.append(name)
        except Exception:
            continue
    return usable


def nvenc_opens(name: str = "h264_nvenc") -> str:
    """'' when an NVENC encoder opens here (GPU and driver support it), else why not."""
    try:
        ctx = cast(VideoCodecContext, av.codec.CodecContext.create(name, "w"))
        ctx.width, ctx.height, ctx.pix_fmt = 256, 256, "yuv420p"
        ctx.time_base = Fraction(1, 25)
        ctx.open()
        return ""
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def nvdec_opens() -> str:
    """'' when FFmpeg can create a CUDA hardware decoding device here, else why not."""
    try:
        from av.codec.hwaccel import HWAccel, hwdevices_available

        if "cuda" not in hwdevices_available():
            return "this FFmpeg build has no CUDA hwaccel"
        av.codec.CodecContext.create(
            "h264", "r", hwaccel=HWAccel(device_type="cuda", allow_software_fallback=False)
        )
        return ""
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def hwaccel_problem(hwaccel: str) -> str:
    """'' when frames can be decoded with `hwaccel` here, else why not (NVDEC needs an NVIDIA
    GPU and driver; PyAV's FFmpeg has the CUDA hwaccel built in)."""
    return "" if hwaccel == "none" else nvdec_opens()
