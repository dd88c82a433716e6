"""Frames kept at the decoder's own precision, next to the 8-bit view the face stages see.

The face stages work on 8-bit BGR. Converting the whole frame to BGR and back costs every
pixel precision (10/12/16-bit → 8), chroma (4:2:2/4:4:4 through RGB) and exactness (the
YUV → BGR → YUV round trip moves levels and clips out-of-range values). Instead the reader
keeps each decoded picture as it came (`NativePicture`: its planes, uint8 or uint16, in the
input's pixel format), and after the swap only what changed is written back into it:

    out_hi = in_hi + M · (swapped8 − orig8) · scale

per painted rectangle, where M is the input's own RGB → YCbCr matrix (identity for RGB
inputs) and `scale` takes 8-bit steps to the input's code values; a chroma sample gets the
mean change of the pixels it covers. The change is zero wherever the swap left a pixel
alone, so every pixel outside the faces leaves bit for bit as decoded, and inside them the
target's gradients keep their high-bit-depth detail under the 8-bit change.

Floating-point pictures (EXR's half and float planes) are shown to the face stages through a
view transform (video/pictures/colour.py: scene-linear → display) and the change goes back through its
inverse at float precision, `compose_float`; samples the swap left alone keep every bit.

Used for the pixel formats `native_reason` accepts (planar YUV and GBR at 8-16 bits, packed
RGB 48/64, planar half/float GBR) on upright inputs with even sides; anything else stays on the
BGR path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

import av
import numpy as np

from facefusion_batch.video.decode.probe import VideoInfo
from facefusion_batch.video.pictures.colour import FLOAT_PIX_FMTS, ViewTransform
from facefusion_batch.video.pictures.planes import COLORSPACE_MATRICES

Rect = tuple[int, int, int, int, int]  # frame, x, y, width, height (kernels/base.py's)

_PLANAR_YUV = re.compile(r"^yuva?4(20|22|44)p(9|10|12|14|16)?(le|be)?$")
_PLANAR_GBR = re.compile(r"^gbra?p(9|10|12|14|16)?(le|be)?$")
_PACKED_RGB = {"rgb24": 3, "rgba": 4, "rgb48le": 3, "rgb48be": 3, "rgba64le": 4, "rgba64be": 4}
# Kr, Kb of each matrix (Kg = 1 - Kr - Kb)
_LUMA_WEIGHTS = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}


@dataclass(frozen=True)
class NativeFormat:
    """How one pixel format's planes are laid out, for the arithmetic below."""

    name: str
    kind: str  # yuv | gbr | rgb (packed) | float (planar GBR, half or float)
    bits: int
    dtype: np.dtype
    planes: int
    components: int  # per pixel in a packed plane (rgb), else 1
    chroma_shift: tuple[int, int]  # (across, down): log2 of the chroma subsampling


@lru_cache(maxsize=64)
def native_format(pix_fmt: str) -> NativeFormat | None:
    """The layout of `pix_fmt`, or None when the native path does not handle it."""
    try:
        fmt = av.VideoFormat(pix_fmt)
    except ValueError:
        return None
    bits = max(c.bits for c in fmt.components)
    if pix_fmt in FLOAT_PIX_FMTS:
        dtype = np.dtype(np.float16 if bits == 16 else np.float32)
        return NativeFormat(pix_fmt, "float", bits, dtype, len(fmt.components), 1, (0, 0))
    if bits > 16:
        return None
    dtype = np.dtype(np.uint8) if bits <= 8 else np.dtype(">u2" if fmt.is_big_endian else "<u2")
    if _PLANAR_YUV.match(pix_fmt):
        shift = ({2: 0, 1: 1}[fmt.chroma_width(2)], {2: 0, 1: 1}[fmt.chroma_height(2)])
        return NativeFormat(pix_fmt, "yuv", bits, dtype, len(fmt.components), 1, shift)
    if _PLANAR_GBR.match(pix_fmt):
        return NativeFormat(pix_fmt, "gbr", bits, dtype, len(fmt.components), 1, (0, 0))
    if pix_fmt in _PACKED_RGB:
        return NativeFormat(pix_fmt, "rgb", bits, dtype, 1, _PACKED_RGB[pix_fmt], (0, 0))
    return None


def _known_format(pix_fmt: str) -> NativeFormat:
    """The layout of `pix_fmt`, which a native picture has (`native_reason` said it is handled)."""
    fmt = native_format(pix_fmt)
    if fmt is None:
        raise ValueError(f"the pixel format {pix_fmt} has no native path")
    return fmt


def native_reason(info: VideoInfo) -> str:
    """'' when `info`'s frames can keep their own precision through a render, else why not."""
    fmt = native_format(info.pix_fmt)
    if fmt is None:
        return f"the input's pixel format {info.pix_fmt} has no native path"
    if info.rotation:
        return f"the input is rotated by {info.rotation} degrees"
    if (info.width % 2 or info.height % 2) and fmt.chroma_shift != (0, 0):
        return f"the input's size {info.width}x{info.height} is odd"
    return ""


@dataclass(frozen=True)
class NativeFrames:
    """A render's frame layout (beside video/pictures/planes.py's PlaneLayout): 8-bit BGR for the face
    stages, each frame's own picture of `pix_fmt` carried beside it and composed after the swap."""

    pix_fmt: str
    bits: int
    first_field: int | None = None  # interlaced: 0 top / 1 bottom shown first, swapped per field


@dataclass
class NativePicture:
    """One decoded picture in its own pixel format: its planes, each [rows, values per row]."""

    pix_fmt: str
    width: int
    height: int
    planes: list[np.ndarray]
    colorspace: int = 2
    color_range: int = 0
    view: ViewTransform | None = None  # a float picture's view for the face stages (video/pictures/colour.py)

    @classmethod
    def from_av(cls, frame: av.VideoFrame, pix_fmt: str, width: int, height: int) -> NativePicture:
        """A copy of `frame`'s planes (converted to `pix_fmt` / the size first if they differ:
        a hardware decoder's nv12, a stream that changes resolution)."""
        if frame.format.name != pix_fmt or (frame.width, frame.height) != (width, height):
            frame = frame.reformat(format=pix_fmt, width=width, height=height)
        fmt = _known_format(pix_fmt)
        planes = []
        for plane in frame.planes[: fmt.planes]:
            rows = np.frombuffer(memoryview(plane), fmt.dtype).reshape(plane.height, -1)
            planes.append(rows[:, : plane.width * fmt.components].copy())
        return cls(pix_fmt, width, height, planes, int(frame.colorspace), int(frame.color_range))

    def copy(self) -> NativePicture:
        return replace(self, planes=[p.copy() for p in self.planes])

    def to_av(self) -> av.VideoFrame:
        """A new VideoFrame holding these planes, tagged with the picture's colour encoding."""
        frame = av.VideoFrame(self.width, self.height, self.pix_fmt)
        for plane, values in zip(frame.planes, self.planes, strict=False):
            stride = plane.line_size // values.dtype.itemsize
            if values.shape[1] == stride:
                plane.update(np.ascontiguousarray(values).tobytes())
                continue
            padded = np.zeros((plane.height, stride), values.dtype)
            padded[:, : values.shape[1]] = values
            plane.update(padded.tobytes())
        frame.colorspace = self.colorspace
        frame.color_range = self.color_range
        return frame


def _aligned(rect: Rect, shift: tuple[int, int], width: int, height: int) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) of `rect` widened to whole chroma samples and clipped to the frame."""
    _, x, y, w, h = rect
    ax, ay = 1 << shift[0], 1 << shift[1]
    x0, y0 = max(0, x - x % ax), max(0, y - y % ay)
    x1, y1 = min(width, -(-(x + w) // ax) * ax), min(height, -(-(y + h) // ay) * ay)
    return x0, y0, x1, y1


def _rgb_to_ycbcr(matrix: str) -> np.ndarray:
    """[3, 3]: (R, G, B) → (Y, Cb, Cr), all in 0–1 units (Cb, Cr centred on 0)."""
    kr, kb = _LUMA_WEIGHTS.get(matrix, _LUMA_WEIGHTS["bt601"])
    kg = 1.0 - kr - kb
    y = np.array([kr, kg, kb])
    cb = (np.array([0.0, 0.0, 1.0]) - y) / (2 * (1 - kb))
    cr = (np.array([1.0, 0.0, 0.0]) - y) / (2 * (1 - kr))
    return np.stack([y, cb, cr]).astype(np.float32)


def _yuv_scales(bits: int, full_range: bool) -> tuple[float, float]:
    """Code values per 0–1 unit for luma and chroma."""
    if full_range:
        top = float((1 << bits) - 1)
        return top, top
    step = float(1 << (bits - 8))
    return 219.0 * step, 224.0 * step


def rgb_box(picture: NativePicture, box: tuple[int, int, int, int]) -> np.ndarray:
    """[h, w, 3] float32 RGB in 0–1 units of `picture` inside `box` (x0, y0, x1, y1), at the
    picture's own precision: `compose`'s arithmetic run backwards (each chroma sample repeated
    over the pixels it covers; values past the code range are kept, not clipped)."""
    fmt = _known_format(picture.pix_fmt)
    x0, y0, x1, y1 = box
    if fmt.kind == "float":
        g, b, r = (plane[y0:y1, x0:x1] for plane in picture.planes[:3])
        return np.stack([r, g, b], axis=-1).astype(np.float32)
    top = np.float32((1 << fmt.bits) - 1)
    if fmt.kind == "rgb":
        n = fmt.components
        region = picture.planes[0][y0:y1, x0 * n : x1 * n].reshape(y1 - y0, x1 - x0, n)
        return region[..., :3].astype(np.float32) / top
    if fmt.kind == "gbr":
        g, b, r = (plane[y0:y1, x0:x1] for plane in picture.planes[:3])
        return np.stack([r, g, b], axis=-1).astype(np.float32) / top
    full = picture.color_range == 2
    luma_scale, chroma_scale = _yuv_scales(fmt.bits, full)
    luma_zero = 0 if full else 16 << (fmt.bits - 8)
    chroma_zero = 1 << (fmt.bits - 1)
    sx, sy = fmt.chroma_shift
    rows, cols = np.arange(y0, y1)[:, None] >> sy, np.arange(x0, x1)[None, :] >> sx
    ycbcr = np.stack(
        [
            (picture.planes[0][y0:y1, x0:x1].astype(np.float32) - luma_zero) / luma_scale,
            (picture.planes[1][rows, cols].astype(np.float32) - chroma_zero) / chroma_scale,
            (picture.planes[2][rows, cols].astype(np.float32) - chroma_zero) / chroma_scale,
        ],
        axis=-1,
    )
    matrix = COLORSPACE_MATRICES.get(picture.colorspace, "bt601")
    return ycbcr @ np.linalg.inv(_rgb_to_ycbcr(matrix)).T.astype(np.float32)


def _add(plane: np.ndarray, x0: int, y0: int, change: np.ndarray, top: int) -> None:
    """plane[y0:, x0:] += change (rounded, clipped to the code range), in place."""
    h, w = change.shape[:2]
    region = plane[y0 : y0 + h, x0 : x0 + w]
    region[...] = np.clip(np.rint(region.astype(np.float32) + change), 0, top).astype(plane.dtype)


def _mean_blocks(values: np.ndarray, shift: tuple[int, int]) -> np.ndarray:
    """[h, w] → [h >> sy, w >> sx]: the mean over each chroma sample's pixels."""
    sx, sy = shift
    if sx:
        values = (values[:, 0::2] + values[:, 1::2]) * np.float32(0.5)
    if sy:
        values = (values[0::2] + values[1::2]) * np.float32(0.5)
    return values


def compose(
    picture: NativePicture, original8: np.ndarray, swapped8: np.ndarray, rects: list[Rect]
) -> NativePicture:
    """`picture`, changed in place, with the change from `original8` to `swapped8` (the 8-bit
    BGR view before and after the swap) added inside `rects`, at the picture's precision (the
    reader hands every frame a picture of its own)."""
    if not rects:
        return picture
    fmt = _known_format(picture.pix_fmt)
    top = (1 << fmt.bits) - 1
    # Read every rectangle's change before writing any: overlapping rectangles then add the same
    # values to the pixels they share instead of adding them twice.
    boxes = {_aligned(r, fmt.chroma_shift, picture.width, picture.height) for r in rects}
    changes = []
    for x0, y0, x1, y1 in sorted(boxes):
        if x1 <= x0 or y1 <= y0:
            continue
        delta = swapped8[y0:y1, x0:x1].astype(np.float32) - original8[y0:y1, x0:x1]
        changes.append((x0, y0, delta[..., ::-1] / np.float32(255)))  # RGB, in 0–1 units
    seen = np.zeros((picture.height, picture.width), bool) if len(changes) > 1 else None
    for x0, y0, rgb in changes:
        if seen is not None:  # boxes are whole chroma samples, so a sample is seen all or not at all
            h, w = rgb.shape[:2]
            rgb = rgb * ~seen[y0 : y0 + h, x0 : x0 + w, None]
            seen[y0 : y0 + h, x0 : x0 + w] = True
        _apply(picture, fmt, top, x0, y0, rgb)
    return picture


def view8(picture: NativePicture) -> np.ndarray:
    """The 8-bit BGR picture the face stages see of a float picture, through its view."""
    view = picture.view or _IDENTITY
    return view.view8(rgb_box(picture, (0, 0, picture.width, picture.height)))


_IDENTITY = ViewTransform("display values as they are", "identity")


def _apply_float(picture: NativePicture, x0: int, y0: int, change: np.ndarray) -> None:
    """video/pictures/colour.py's composition: out = in + inverse(view(in) + d) − inverse(view(in)) where
    the 8-bit change d (RGB, display units) is not zero; every other sample keeps its bits."""
    h, w = change.shape[:2]
    changed = (change != 0).any(axis=-1)
    if not changed.any():
        return
    view = picture.view or _IDENTITY
    rows, cols = np.nonzero(changed)
    before = rgb_box(picture, (x0, y0, x0 + w, y0 + h))[rows, cols]
    shown = view.forward(before)
    target = np.maximum(shown + change[rows, cols], np.minimum(shown, 0))  # no darker than black
    if view.display_max is not None:
        target = np.minimum(target, np.maximum(shown, view.display_max))
    after = before + (view.inverse(target) - view.inverse(shown))
    after = np.where(np.isfinite(after), after, before)
    for plane, channel in zip(picture.planes, (1, 2, 0), strict=False):  # G, B, R
        plane[y0 + rows, x0 + cols] = after[:, channel].astype(plane.dtype)


def _apply(picture: NativePicture, fmt: NativeFormat, top: int, x0: int, y0: int, rgb: np.ndarray) -> None:
    if fmt.kind == "float":
        _apply_float(picture, x0, y0, rgb)
        return
    if fmt.kind == "rgb":
        n = fmt.components
        plane = picture.planes[0]
        h, w = rgb.shape[:2]
        region = plane[y0 : y0 + h, x0 * n : (x0 + w) * n].reshape(h, w, n)
        region[..., :3] = np.clip(np.rint(region[..., :3].astype(np.float32) + rgb * top), 0, top)
        return
    if fmt.kind == "gbr":
        for plane, channel in zip(picture.planes, (1, 2, 0), strict=False):  # G, B, R
            _add(plane, x0, y0, rgb[..., channel] * top, top)
        return
    matrix = COLORSPACE_MATRICES.get(picture.colorspace, "bt601")
    ycbcr = rgb @ _rgb_to_ycbcr(matrix).T
    luma_scale, chroma_scale = _yuv_scales(fmt.bits, picture.color_range == 2)
    _add(picture.planes[0], x0, y0, ycbcr[..., 0] * luma_scale, top)
    sx, sy = fmt.chroma_shift
    for index in (1, 2):
        change = _mean_blocks(ycbcr[..., index], fmt.chroma_shift) * chroma_scale
        _add(picture.planes[index], x0 >> sx, y0 >> sy, change, top)
