"""Frames kept as the decoder's yuv420p planes, for pipelines that convert colour on the GPU.

A BGR frame costs the CPU two colour conversions (yuv→BGR after decoding,
BGR→yuv before encoding; about 2.3 ms each for a 1080p frame on 2 cores) and
crosses to the device at 3 bytes a pixel. When the GPU converts, the frames can
stay as the decoder's planes end to end: 1.5 bytes a pixel, no CPU conversion,
and pixels outside the swapped faces pass through bit for bit.

A frame in this layout is one uint8 array [H*3/2, W]: the Y plane, then U and V
(each H/2 x W/2) — PyAV's `to_ndarray()` / `from_ndarray(format="yuv420p")`.
It is used only where it is exact: 8-bit limited-range yuv420p input with even
sides, no rotation, a colour matrix the device ops know, and a yuv420p output.
Anything else stays BGR (and the log says why).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from facefusion_batch.video.decode.probe import VideoInfo

BGR24 = "bgr24"
YUV420P = "yuv420p"
# 8-bit BGR for the face stages, plus the decoder's own planes at full precision (video/pictures/native.py)
NATIVE = "native"
PIXEL_FORMATS = (BGR24, YUV420P, NATIVE)

# AVColorSpace → matrix; 2 (unspecified) is decoded and encoded as BT.601, as FFmpeg does
COLORSPACE_MATRICES = {1: "bt709", 2: "bt601", 5: "bt601", 6: "bt601", 9: "bt2020", 10: "bt2020"}


@dataclass(frozen=True)
class PlaneLayout:
    """How to read one render's planar frames: their size and colour encoding."""

    height: int
    width: int
    matrix: str  # bt601 | bt709 | bt2020
    full_range: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        return (self.height * 3 // 2, self.width)


def plane_layout_for(info: VideoInfo, output_pix_fmt: str) -> tuple[PlaneLayout | None, str]:
    """(the layout, '') when `info`'s frames can stay planar through a render, else (None, why not)."""
    if info.pix_fmt != YUV420P:
        return None, f"the input is {info.pix_fmt}, not 8-bit limited-range yuv420p"
    if output_pix_fmt != YUV420P:
        return None, f"the output is {output_pix_fmt}"
    if info.rotation:
        return None, f"the input is rotated by {info.rotation} degrees"
    if info.interlaced or info.field_order >= 2:
        return None, "the input is interlaced (swapped per field on the host)"
    if info.width % 2 or info.height % 2:
        return None, f"the input's size {info.width}x{info.height} is odd"
    if info.color_range == 2:
        return None, "the input is full range"
    matrix = COLORSPACE_MATRICES.get(info.color_space)
    if matrix is None:
        return None, f"the input's colour matrix (AVColorSpace {info.color_space}) has no device conversion"
    return PlaneLayout(info.height, info.width, matrix), ""


def blank_picture(pixel_format: str, height: int, width: int) -> np.ndarray:
    """A black frame in `pixel_format` (limited-range black in yuv: Y 16, U and V 128)."""
    if pixel_format == YUV420P:
        picture = np.full((height * 3 // 2, width), 128, np.uint8)
        picture[:height] = 16
        return picture
    return np.zeros((height, width, 3), np.uint8)


def picture_shape(pixel_format: str, height: int, width: int) -> tuple[int, ...]:
    return (height * 3 // 2, width) if pixel_format == YUV420P else (height, width, 3)
