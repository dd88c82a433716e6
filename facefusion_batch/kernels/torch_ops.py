"""The torch kernel set's operations: batched image operations on device tensors.

Each function mirrors one host operation (kernels/host_ops.py) closely enough to be tested
against it on the CPU (tests/test_kernels_torch_ops.py states each tolerance):

- `yuv420p_to_bgr`, `nv12_to_bgr`: the decoder's planes → BGR, BT.601/709/2020,
  limited or full range (cv2.cvtColor's I420/NV12 for BT.601 limited);
  `bgr_to_yuv420p` the way back, for the encoder.
- `resize_area`, `resize_linear`: cv2.resize INTER_AREA / INTER_LINEAR, as two
  small matrix products per image (exact fractional-coverage weights).
- `letterbox`: host_ops.letterbox for a batch of same-sized frames.
- `warp_affine`, `remap`: cv2.warpAffine / cv2.remap (bilinear, constant-zero
  border) through grid_sample.
- `gaussian_blur`, `pyr_down`, `pyr_up`: cv2.GaussianBlur, cv2.pyrDown,
  cv2.pyrUp, with OpenCV's kernels and borders; `streak_blur_each`: cv2.filter2D with each
  face's own base.streak_kernel (the shutter's smear).
- `bgr_to_lab8`, `lab8_to_bgr`: OpenCV's 8-bit LAB (sRGB gamma, D65).
- `masked_blur`, `transfer_colour`, `feather`, `multiband`, `match_sharpness`, `match_grain`,
  `inset_ramp`: the classical paint on device tensors, its formulas kernels/formulas.py's run on
  this set's primitives (`PRIMITIVES`: channel-first images, statistics [..., C, 1, 1]).

Images are float tensors [..., C, H, W] unless said otherwise; uint8 frames
are [B, H, W, 3] as the decoder gives them. Imports torch at module level:
only GPU-backend code imports this module.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

from facefusion_batch.kernels import formulas
from facefusion_batch.kernels.base import (
    GRAIN_CLIP,
    LUMA_BGR,
    SH_FIT_STEP,
    SH_RIDGE,
    SHADE_LIMIT,
    SHARPNESS_SIGMAS,
    TINT_LIMIT,
    grain_gain,
    sharpness_weights,
    streak_kernel,
)
from facefusion_batch.kernels.geometry import letterbox_canvas

Tensor = torch.Tensor


# --- host data on the device without waiting ----------------------------------------------------------
#
# torch's ordinary host-to-device copy (non_blocking=False) synchronises the current stream after
# the copy: in the hot path that would make the host wait for all the work queued before it.
# Constants (resize matrices, kernels, colour matrices) go up once per device and stay; per-call
# data (maps, affines, indices) goes up with non_blocking=True on the stream that uses it (the
# driver stages pageable memory at once, so the source array may go away).

_CONSTANTS: dict[tuple, Tensor] = {}
_MAX_CONSTANTS = 4096


def constant(key, make, device, dtype: torch.dtype = torch.float32) -> Tensor:
    """`make()` (a host array) on `device`, uploaded once per key, device and dtype. The one upload
    is a blocking copy, so any stream may use the tensor at once."""
    k = (key, str(device), dtype)
    t = _CONSTANTS.get(k)
    if t is None:
        if len(_CONSTANTS) >= _MAX_CONSTANTS:
            _CONSTANTS.clear()
        t = _CONSTANTS[k] = torch.as_tensor(np.asarray(make()), dtype=dtype).to(device)
    return t


def to_device(array, device, dtype: torch.dtype | None = None) -> Tensor:
    """A per-call host array on `device`, copied without waiting for the stream (used on the
    current stream only)."""
    t = torch.as_tensor(np.asarray(array), dtype=dtype)
    return t.to(device, non_blocking=True)


# (Kr, Kb) of each colour matrix
YUV_MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}


# --- colour conversion from the decoder's planes -----------------------------------------------------


def yuv_to_bgr_coefficients(matrix: str, full_range: bool) -> tuple[float, float, float, float, float, float]:
    """(y_offset, y_scale, cr_to_r, cb_to_g, cr_to_g, cb_to_b) for 8-bit YCbCr → R'G'B'."""
    kr, kb = YUV_MATRICES[matrix]
    kg = 1.0 - kr - kb
    if full_range:
        y_off, y_scale, c_scale = 0.0, 1.0, 1.0
    else:
        y_off, y_scale, c_scale = 16.0, 255.0 / 219.0, 255.0 / 224.0
    return (
        y_off,
        y_scale,
        c_scale * 2 * (1 - kr),
        -c_scale * 2 * (1 - kb) * kb / kg,
        -c_scale * 2 * (1 - kr) * kr / kg,
        c_scale * 2 * (1 - kb),
    )


def _upsample_chroma(c: Tensor, height: int, width: int, mode: str) -> Tensor:
    """[B,h,w] chroma → [B,H,W]: nearest (each 2×2 block shares one sample, as cv2) or bilinear."""
    if mode == "nearest":
        up = c.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)
        return up[..., :height, :width]
    return F.interpolate(c[:, None], size=(height, width), mode="bilinear", align_corners=False)[:, 0]


def ycbcr_to_bgr(y: Tensor, cb: Tensor, cr: Tensor, matrix: str, full_range: bool) -> Tensor:
    """Full-resolution float planes [B,H,W] (0–255) → BGR uint8 [B,H,W,3]."""
    y_off, y_scale, r_cr, g_cb, g_cr, b_cb = yuv_to_bgr_coefficients(matrix, full_range)
    yy = (y - y_off) * y_scale
    cb = cb - 128.0
    cr = cr - 128.0
    r = yy + r_cr * cr
    g = yy + g_cb * cb + g_cr * cr
    b = yy + b_cb * cb
    bgr = torch.stack([b, g, r], dim=-1)
    return torch.clamp(torch.round(bgr), 0, 255).to(torch.uint8)


def yuv420p_to_bgr(
    y: Tensor,
    u: Tensor,
    v: Tensor,
    *,
    matrix: str = "bt601",
    full_range: bool = False,
    chroma: str = "nearest",
) -> Tensor:
    """Planar 4:2:0 (y [B,H,W], u/v [B,⌈H/2⌉,⌈W/2⌉], uint8) → BGR uint8 [B,H,W,3]."""
    height, width = y.shape[-2:]
    cb = _upsample_chroma(u.float(), height, width, chroma)
    cr = _upsample_chroma(v.float(), height, width, chroma)
    return ycbcr_to_bgr(y.float(), cb, cr, matrix, full_range)


def nv12_to_bgr(
    y: Tensor, uv: Tensor, *, matrix: str = "bt601", full_range: bool = False, chroma: str = "nearest"
) -> Tensor:
    """NV12 (y [B,H,W], interleaved uv [B,⌈H/2⌉,⌈W/2⌉,2], uint8) → BGR uint8 [B,H,W,3]."""
    return yuv420p_to_bgr(y, uv[..., 0], uv[..., 1], matrix=matrix, full_range=full_range, chroma=chroma)


def i420_planes(buffer: Tensor, height: int, width: int) -> tuple[Tensor, Tensor, Tensor]:
    """Split packed I420 frames [B, H*3/2, W] (cv2's layout) into y, u, v planes."""
    y = buffer[:, :height]
    rest = buffer[:, height:].reshape(buffer.shape[0], -1)
    quarter = (height // 2) * (width // 2)
    u = rest[:, :quarter].reshape(-1, height // 2, width // 2)
    v = rest[:, quarter : 2 * quarter].reshape(-1, height // 2, width // 2)
    return y, u, v


def bgr_to_yuv420p(
    bgr: Tensor, *, matrix: str = "bt601", full_range: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """BGR uint8 [B,H,W,3] (H, W even) → y [B,H,W], u/v [B,H/2,W/2] uint8, each chroma sample the
    mean of its 2×2 block: what FFmpeg's swscale (the CPU writer's conversion) gives, within 1 level."""
    kr, kb = YUV_MATRICES[matrix]
    kg = 1.0 - kr - kb
    x = bgr.float()
    b, g, r = x[..., 0], x[..., 1], x[..., 2]
    luma = kr * r + kg * g + kb * b
    cb = (b - luma) / (2 * (1 - kb))
    cr = (r - luma) / (2 * (1 - kr))
    if full_range:
        y, c_scale = luma, 1.0
    else:
        y, c_scale = 16.0 + luma * (219.0 / 255.0), 224.0 / 255.0
    batch, height, width = y.shape
    chroma = torch.stack([cb, cr], dim=1).reshape(batch, 2, height // 2, 2, width // 2, 2).mean(dim=(3, 5))
    chroma = 128.0 + c_scale * chroma

    def to_u8(t: Tensor) -> Tensor:
        return torch.clamp(torch.round(t), 0, 255).to(torch.uint8)

    return to_u8(y), to_u8(chroma[:, 0]), to_u8(chroma[:, 1])


# --- resizing as matrix products -----------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _area_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] weights of INTER_AREA when shrinking: the fractional overlap of each
    source pixel with the destination pixel's footprint, normalised."""
    scale = n_in / n_out
    m = np.zeros((n_out, n_in), np.float64)
    for j in range(n_out):
        lo, hi = j * scale, (j + 1) * scale
        i0, i1 = int(math.floor(lo)), min(n_in, int(math.ceil(hi)))
        for i in range(i0, i1):
            m[j, i] = max(0.0, min(hi, i + 1) - max(lo, i))
        m[j] /= m[j].sum()
    return m


@functools.lru_cache(maxsize=64)
def _linear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] weights of INTER_LINEAR: half-pixel centres, edges clamped."""
    scale = n_in / n_out
    m = np.zeros((n_out, n_in), np.float64)
    for j in range(n_out):
        x = (j + 0.5) * scale - 0.5
        i0 = int(math.floor(x))
        t = x - i0
        if i0 < 0:
            i0, t = 0, 0.0
        if i0 >= n_in - 1:
            i0, t = n_in - 1, 0.0
        m[j, i0] += 1 - t
        if t > 0:
            m[j, i0 + 1] += t
    return m


@functools.lru_cache(maxsize=64)
def _area_enlarge_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] weights of INTER_AREA when enlarging: each output takes its source pixel,
    blending with the next one only where a source pixel boundary crosses it (OpenCV's rule)."""
    scale, inv = n_in / n_out, n_out / n_in
    m = np.zeros((n_out, n_in), np.float64)
    for j in range(n_out):
        i = int(math.floor(j * scale))
        t = (j + 1) - (i + 1) * inv
        t = 0.0 if t <= 0 else t - math.floor(t)
        if i >= n_in - 1:
            i, t = n_in - 1, 0.0
        m[j, i] += 1 - t
        if t > 0:
            m[j, i + 1] += t
    return m


def _resize_matrix(n_in: int, n_out: int, area: bool) -> np.ndarray:
    if not area:
        return _linear_matrix(n_in, n_out)
    return _area_matrix(n_in, n_out) if n_out <= n_in else _area_enlarge_matrix(n_in, n_out)


def _resize(x: Tensor, size: tuple[int, int], area: bool) -> Tensor:
    height, width = size
    n_rows, n_cols = x.shape[-2], x.shape[-1]
    rows = constant(
        ("resize", n_rows, height, area), lambda: _resize_matrix(n_rows, height, area), x.device, x.dtype
    )
    cols = constant(
        ("resize", n_cols, width, area), lambda: _resize_matrix(n_cols, width, area), x.device, x.dtype
    )
    return torch.matmul(torch.matmul(rows, x), cols.t())


def resize_area(x: Tensor, size: tuple[int, int]) -> Tensor:
    """cv2.resize(..., INTER_AREA) on float [..., H, W] to (height, width)."""
    return _resize(x, size, area=True)


def resize_linear(x: Tensor, size: tuple[int, int]) -> Tensor:
    """cv2.resize(..., INTER_LINEAR) on float [..., H, W] to (height, width)."""
    return _resize(x, size, area=False)


def letterbox(frames: Tensor, size: int) -> tuple[Tensor, np.ndarray]:
    """Same-sized uint8 BGR frames [B,H,W,3] → YuNet's batch [B,3,h,w] float32 (0–255) and scales.

    Matches host_ops.letterbox: fit into size×size keeping aspect (INTER_AREA
    when shrinking, linear when enlarging), zero padding right and bottom, canvas
    a multiple of 32.
    """
    b, h, w = frames.shape[:3]
    canvas_h, canvas_w = letterbox_canvas([(h, w)], size)
    scale = min(size / w, size / h)
    nw, nh = min(canvas_w, max(1, round(w * scale))), min(canvas_h, max(1, round(h * scale)))
    planar = frames.permute(0, 3, 1, 2).float()
    resized = _resize(planar, (nh, nw), area=scale < 1)
    # the host path stores the resized picture as uint8 before the model sees it
    resized = torch.clamp(torch.round(resized), 0, 255)
    out = torch.zeros((b, 3, canvas_h, canvas_w), dtype=torch.float32, device=frames.device)
    out[:, :, :nh, :nw] = resized
    return out, np.full((b,), scale, np.float32)


# --- warps -------------------------------------------------------------------------------------------------


def invert_affines(m: Tensor) -> Tensor:
    """[F,2,3] → [F,2,3] inverse affines, in closed form (torch.linalg.inv would wait for the
    device to check for singular matrices)."""
    a, b, c, d = m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1]
    det = a * d - b * c
    inv = torch.stack([torch.stack([d, -b], -1), torch.stack([-c, a], -1)], -2) / det[:, None, None]
    t = -torch.einsum("fij,fj->fi", inv, m[:, :, 2])
    return torch.cat([inv, t[:, :, None]], dim=2)


def _pixel_grid(height: int, width: int, device, dtype) -> Tensor:
    ys, xs = torch.meshgrid(
        torch.arange(height, device=device, dtype=dtype),
        torch.arange(width, device=device, dtype=dtype),
        indexing="ij",
    )
    return torch.stack([xs, ys, torch.ones_like(xs)], dim=-1)  # [h,w,3]


def grid_coords(coords: Tensor, height: int, width: int) -> Tensor:
    """Pixel coordinates (x, y) → grid_sample's [-1, 1] with align_corners=True."""
    scale = constant(
        ("normalise", height, width),
        lambda: [2.0 / max(width - 1, 1), 2.0 / max(height - 1, 1)],
        coords.device,
        coords.dtype,
    )
    return coords * scale - 1.0


def remap(image: Tensor, map_x: Tensor, map_y: Tensor) -> Tensor:
    """cv2.remap(image, map_x, map_y, INTER_LINEAR, BORDER_CONSTANT 0).

    image [N,C,H,W] (or [C,H,W]); maps [N,h,w] (or [h,w]) in source pixels.
    """
    squeeze = image.dim() == 3
    if squeeze:
        image, map_x, map_y = image[None], map_x[None], map_y[None]
    height, width = image.shape[-2:]
    grid = grid_coords(torch.stack([map_x, map_y], dim=-1), height, width)
    out = F.grid_sample(
        image, grid.to(image.dtype), mode="bilinear", padding_mode="zeros", align_corners=True
    )
    return out[0] if squeeze else out


def warp_affine(
    images: Tensor,
    frame_index: Tensor | np.ndarray,
    affines: Tensor,
    out_size: tuple[int, int],
    border: str = "zeros",
) -> Tensor:
    """cv2.warpAffine for many crops: affines [F,2,3] map frame pixels → crop pixels (as cv2's M).

    images [B,C,H,W] float, or [B,H,W,C] uint8 frames (converted per frame, so a
    batch of frames is never held in float at once). Returns [F,C,h,w] float32;
    outside the frame zero (BORDER_CONSTANT), or with border="border" the edge
    pixel (BORDER_REPLICATE). out_size is (width, height), as cv2 takes it.
    """
    width, height = out_size
    faces = affines.shape[0]
    channels_last = images.dtype == torch.uint8
    c = images.shape[-1] if channels_last else images.shape[1]
    out = torch.empty((faces, c, height, width), dtype=torch.float32, device=images.device)
    if faces == 0:
        return out
    inverse = invert_affines(affines.to(torch.float64)).to(torch.float32)
    base = _pixel_grid(height, width, images.device, torch.float32)
    src = torch.einsum("hwk,fik->fhwi", base, inverse)  # [F,h,w,2] frame pixels
    fi = torch.as_tensor(np.asarray(frame_index), dtype=torch.int64).tolist()
    by_frame: dict[int, list[int]] = {}
    for row, f in enumerate(fi):
        by_frame.setdefault(int(f), []).append(row)
    for f, rows in by_frame.items():
        frame = images[f]
        frame = frame.permute(2, 0, 1).float() if channels_last else frame.float()
        fh, fw = frame.shape[-2:]
        # every face of this frame in one call: their grids stacked vertically
        grid = grid_coords(src[rows].reshape(1, len(rows) * height, width, 2), fh, fw)
        sampled = F.grid_sample(frame[None], grid, mode="bilinear", padding_mode=border, align_corners=True)
        out[rows] = sampled[0].reshape(c, len(rows), height, width).permute(1, 0, 2, 3)
    return out


# --- filters -----------------------------------------------------------------------------------------------


def gaussian_ksize(sigma: float, uint8: bool = False) -> int:
    """OpenCV's kernel size for ksize=0: round(sigma·(3 for 8-bit, 4 otherwise)·2 + 1) | 1."""
    return int(round(sigma * (3 if uint8 else 4) * 2 + 1)) | 1


@functools.lru_cache(maxsize=64)
def gaussian_kernel(ksize: int, sigma: float) -> np.ndarray:
    """cv2.getGaussianKernel(ksize, sigma) (float64)."""
    x = np.arange(ksize, dtype=np.float64) - (ksize - 1) / 2
    k = np.exp(-(x * x) / (2 * sigma * sigma))
    return k / k.sum()


@functools.lru_cache(maxsize=256)
def _reflect101(n: int, pad: int) -> np.ndarray:
    """Indices of a length-n axis padded by `pad` each side with BORDER_REFLECT_101."""
    idx = np.arange(-pad, n + pad)
    if n == 1:
        return np.zeros_like(idx)
    period = 2 * (n - 1)
    idx = np.abs(idx) % period
    return np.where(idx >= n, period - idx, idx)


def _pad101(x: Tensor, pad_y: int, pad_x: int) -> Tensor:
    h, w = x.shape[-2:]
    if pad_y:
        x = x.index_select(
            -2, constant(("reflect101", h, pad_y), lambda: _reflect101(h, pad_y), x.device, torch.int64)
        )
    if pad_x:
        x = x.index_select(
            -1, constant(("reflect101", w, pad_x), lambda: _reflect101(w, pad_x), x.device, torch.int64)
        )
    return x


def _separable(x: Tensor, ky: np.ndarray, kx: np.ndarray) -> Tensor:
    """Correlate [..., H, W] with ky ⊗ kx, border reflect-101 (OpenCV's default)."""
    shape = x.shape
    x4 = x.reshape(-1, 1, shape[-2], shape[-1])
    x4 = _pad101(x4, len(ky) // 2, len(kx) // 2)
    wy = constant(("kernel", ky.tobytes()), lambda: ky, x.device, x.dtype).reshape(1, 1, -1, 1)
    wx = constant(("kernel", kx.tobytes()), lambda: kx, x.device, x.dtype).reshape(1, 1, 1, -1)
    y = F.conv2d(F.conv2d(x4, wy), wx)
    return y.reshape(shape)


def gaussian_blur(x: Tensor, sigma: float, ksize: int | None = None) -> Tensor:
    """cv2.GaussianBlur(x, (0, 0), sigma) on float [..., H, W]."""
    ksize = ksize or gaussian_ksize(sigma)
    k = gaussian_kernel(ksize, float(sigma))
    return _separable(x, k, k)


_PYR = np.array([1, 4, 6, 4, 1], np.float64) / 16.0


def pyr_down(x: Tensor) -> Tensor:
    """cv2.pyrDown on float [..., H, W]: 5-tap Gaussian, reflect-101, every other pixel."""
    blurred = _separable(x, _PYR, _PYR)
    return blurred[..., ::2, ::2]


def _pyr_up_axis(x: Tensor, n_out: int, dim: int) -> Tensor:
    """One axis of cv2.pyrUp: even outputs (s[i-1] + 6 s[i] + s[i+1]) / 8, odd (s[i] + s[i+1]) / 2.

    OpenCV reflects at the start (s[-1] = s[1]) and repeats the last sample at the end.
    """
    n = x.shape[dim]
    if n == 1:
        return x.repeat_interleave(n_out, dim=dim)
    prev = torch.cat([x.narrow(dim, 1, 1), x.narrow(dim, 0, n - 1)], dim=dim)
    nxt = torch.cat([x.narrow(dim, 1, n - 1), x.narrow(dim, n - 1, 1)], dim=dim)
    even = (prev + 6 * x + nxt) / 8
    odd = (x + nxt) / 2
    inter = torch.stack([even, odd], dim=dim + 1 if dim >= 0 else dim)
    shape = list(x.shape)
    shape[dim] = 2 * n
    return inter.reshape(shape).narrow(dim, 0, n_out)


def pyr_up(x: Tensor, size: tuple[int, ...]) -> Tensor:
    """cv2.pyrUp(x, dstsize=(w, h)) on float [..., H, W]; size is (height, width)."""
    height, width = size
    return _pyr_up_axis(_pyr_up_axis(x, height, x.dim() - 2), width, x.dim() - 1)


# --- LAB (OpenCV's 8-bit convention) ---------------------------------------------------------------

_XYZ_FROM_RGB = np.array(
    [[0.412453, 0.357580, 0.180423], [0.212671, 0.715160, 0.072169], [0.019334, 0.119193, 0.950227]]
)
_WHITE = np.array([0.950456, 1.0, 1.088754])


def _srgb_to_linear(c: Tensor) -> Tensor:
    return torch.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _linear_to_srgb(c: Tensor) -> Tensor:
    c = torch.clamp(c, 0.0, 1.0)
    return torch.where(c <= 0.0031308, c * 12.92, 1.055 * c ** (1 / 2.4) - 0.055)


def bgr_to_lab8(bgr: Tensor) -> Tensor:
    """float BGR 0–255 [..., 3, H, W] → LAB in OpenCV's 8-bit scale (L·255/100, a+128, b+128), float."""
    b, g, r = bgr[..., 0, :, :], bgr[..., 1, :, :], bgr[..., 2, :, :]
    rgb = torch.stack([r, g, b], dim=-1) / 255.0
    lin = _srgb_to_linear(rgb)
    m = constant("xyz_from_rgb", lambda: _XYZ_FROM_RGB / _WHITE[:, None], bgr.device, bgr.dtype)
    xyz = lin @ m.t()
    eps = 0.008856
    f = torch.where(xyz > eps, torch.clamp(xyz, min=eps) ** (1 / 3), 7.787 * xyz + 16 / 116)
    y = xyz[..., 1]
    lum = torch.where(y > eps, 116 * f[..., 1] - 16, 903.3 * y)
    a = 500 * (f[..., 0] - f[..., 1])
    bb = 200 * (f[..., 1] - f[..., 2])
    return torch.stack([lum * 255 / 100, a + 128, bb + 128], dim=-3)


def lab8_to_bgr(lab: Tensor) -> Tensor:
    """Inverse of `bgr_to_lab8`: float BGR 0–255 [..., 3, H, W] (not rounded)."""
    lum = lab[..., 0, :, :] * 100 / 255
    a = lab[..., 1, :, :] - 128
    bb = lab[..., 2, :, :] - 128
    fy = (lum + 16) / 116
    fx = fy + a / 500
    fz = fy - bb / 200

    def finv(f: Tensor) -> Tensor:
        return torch.where(f > 0.206893, f**3, (f - 16 / 116) / 7.787)

    y = torch.where(lum > 903.3 * 0.008856, fy**3, lum / 903.3)
    white = constant("white", lambda: _WHITE, lab.device, lab.dtype)
    xyz = torch.stack([finv(fx) * white[0], y, finv(fz) * white[2]], dim=-1)
    inv = constant("rgb_from_xyz", lambda: np.linalg.inv(_XYZ_FROM_RGB), lab.device, lab.dtype)
    rgb = _linear_to_srgb(xyz @ inv.t()) * 255
    return torch.stack([rgb[..., 2], rgb[..., 1], rgb[..., 0]], dim=-3)


def to_uint8_levels(x: Tensor) -> Tensor:
    """What `np.clip(x + 0.5, 0, 255).astype(np.uint8)` keeps, as float."""
    return torch.floor(torch.clamp(x + 0.5, 0, 255))


# --- colour transfer and blending ---------------------------------------------------------------------------


def gaussian_blur_each(x: Tensor, sigmas) -> Tensor:
    """`gaussian_blur` of each image of [N, C, H, W] with its own sigma, in one grouped convolution
    per axis (each kernel zero-padded to the widest: the same sums as its own width)."""
    n, c, h, w = x.shape
    sizes = [gaussian_ksize(float(s)) for s in sigmas]
    width = max(sizes)
    kernels = np.zeros((n, width), np.float64)
    for i, (s, k) in enumerate(zip(sigmas, sizes, strict=True)):
        off = (width - k) // 2
        kernels[i, off : off + k] = gaussian_kernel(k, float(s))
    weights = to_device(np.repeat(kernels, c, axis=0), x.device, x.dtype)
    x4 = _pad101(x.reshape(1, n * c, h, w), width // 2, width // 2)
    y = F.conv2d(x4, weights.reshape(n * c, 1, width, 1), groups=n * c)
    y = F.conv2d(y, weights.reshape(n * c, 1, 1, width), groups=n * c)
    return y.reshape(n, c, h, w)


def streak_blur_each(x: Tensor, streaks: list[tuple[float, float]]) -> Tensor:
    """Each image of [N, C, H, W] correlated with its own base.streak_kernel (cv2.filter2D,
    border reflect-101), in one grouped convolution (each kernel zero-padded to the widest); an
    image whose streak is (0, 0) is returned as it is."""
    rows = [i for i, s in enumerate(streaks) if s != (0.0, 0.0)]
    if not rows:
        return x
    n, c, h, w = x.shape
    kernels = [streak_kernel(streaks[i]) for i in rows]
    width = max(k.shape[0] for k in kernels)
    padded = np.zeros((len(rows), width, width), np.float32)
    for j, k in enumerate(kernels):
        off = (width - k.shape[0]) // 2
        padded[j, off : off + k.shape[0], off : off + k.shape[0]] = k
    weights = to_device(np.repeat(padded, c, axis=0), x.device, x.dtype)
    weights = weights.reshape(len(rows) * c, 1, width, width)
    index = torch.as_tensor(rows, device=x.device)
    chosen = _pad101(x[index].reshape(1, len(rows) * c, h, w), width // 2, width // 2)
    blurred = F.conv2d(chosen, weights, groups=len(rows) * c).reshape(len(rows), c, h, w)
    out = x.clone()
    out[index] = blurred
    return out


def _blur_downscaled(both: Tensor, sigma, step: int) -> Tensor:
    """host_ops.masked_blur's blur: downscale by `step` (INTER_AREA), blur, scale back
    (INTER_LINEAR). `sigma` a float, or one per image of [N, C, H, W]."""
    h, w = both.shape[-2:]
    if step > 1:
        both = resize_area(both, (max(1, h // step), max(1, w // step)))
    if np.ndim(sigma) == 0:
        both = gaussian_blur(both, float(sigma) / step)
    else:
        both = gaussian_blur_each(both, np.asarray(sigma, np.float64) / step)
    if step > 1:
        both = resize_linear(both, (h, w))
    return both


def masked_blur(image: Tensor, mask: Tensor, sigma) -> Tensor:
    """host_ops.masked_blur: image [..., C, H, W], mask [..., H, W] bool/float → blurred
    [..., C, H, W]. `sigma`: one for all, or one per image (images with the same downscaling step
    are blurred together)."""
    m = mask.to(image.dtype).unsqueeze(-3)
    both = torch.cat([image * m, m], dim=-3)
    if np.ndim(sigma) == 0:
        out = _blur_downscaled(both, float(sigma), max(1, int(float(sigma) // 3)))
    else:
        flat = both.reshape(-1, *both.shape[-3:])
        sigmas = np.asarray(sigma, np.float64).reshape(-1)
        steps = np.maximum(1, (sigmas // 3).astype(np.int64))
        out = torch.empty_like(flat)
        for step in np.unique(steps):
            rows = np.flatnonzero(steps == step)
            sel = to_device(rows, flat.device)
            out.index_copy_(0, sel, _blur_downscaled(flat.index_select(0, sel), sigmas[rows], int(step)))
        out = out.reshape(both.shape)
    return out[..., :-1, :, :] / torch.clamp(out[..., -1:, :, :], min=1e-4)


def transfer_colour(
    swapped: Tensor,
    target: Tensor,
    skin: Tensor,
    strength: float = 1.0,
    mode: str = "local",
    sigma: float | list[float] | np.ndarray = 8.0,
    limit: tuple[float, float, float] = (60.0, 30.0, 30.0),
    tint_limit: float = TINT_LIMIT,
    fix: Tensor | None = None,
    shade_limit: float = SHADE_LIMIT,
    tinted: Tensor | None = None,
) -> Tensor:
    """formulas.transfer_colour on device: BGR float [..., 3, H, W], skin bool [..., H, W] →
    recoloured [..., 3, H, W], each image on its own statistics; `sigma` one, or one per image;
    `fix` [..., 2, 3]: each image's spread factor and mean shift."""
    each = np.asarray(sigma, np.float64)
    sigmas = float(each) if each.ndim == 0 else each
    return formulas.transfer_colour(
        PRIMITIVES, swapped, target, skin, strength, mode, sigmas, limit, tint_limit, fix, shade_limit, tinted
    )


def to_lab8(bgr: Tensor) -> Tensor:
    """host_ops.to_lab8: BGR float 0–255 [..., 3, H, W] → OpenCV's 8-bit LAB, whole levels, float."""
    return to_uint8_levels(bgr_to_lab8(to_uint8_levels(bgr)))


def mask_stats(image: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """host_ops.lab_stats of each image [..., C, H, W] over its mask [..., H, W] (bool): mean and
    spread (+1e-3), [..., C, 1, 1]; the pixel counts stay on the device (no host round trip)."""
    sel = mask.to(image.dtype).unsqueeze(-3)
    n = torch.clamp(sel.sum(dim=(-3, -2, -1), keepdim=True), min=1.0)
    mean = (image * sel).sum(dim=(-2, -1), keepdim=True) / n
    var = (((image - mean) * sel) ** 2).sum(dim=(-2, -1), keepdim=True) / n
    return mean, torch.sqrt(var) + 1e-3


def fit_basis(basis: Tensor, values: Tensor, mask: Tensor) -> Tensor:
    """host_ops.fit_basis per image: `values` [..., C, H, W] fitted on `basis` [..., K, H, W] over
    `mask` [..., H, W] (float64 normal equations, the ridge SH_RIDGE of their mean diagonal, on
    every SH_FIT_STEP-th pixel each way); an image with fewer of those than K keeps its values."""
    k, step = basis.shape[-3], SH_FIT_STEP
    sel = mask[..., ::step, ::step].to(torch.float64).flatten(-2).unsqueeze(-2)  # [..., 1, P]
    b = basis[..., ::step, ::step].to(torch.float64).flatten(-2)  # [..., K, P]
    n = torch.clamp(sel.sum(dim=-1, keepdim=True), min=1.0)  # [..., 1, 1]
    gram = (b * sel) @ b.transpose(-1, -2) / n
    chosen = values[..., ::step, ::step].to(torch.float64).flatten(-2).transpose(-1, -2)
    rhs = (b * sel) @ chosen / n  # [..., K, C]
    diag = torch.diagonal(gram, dim1=-2, dim2=-1).mean(dim=-1)[..., None, None]
    eye = torch.eye(k, dtype=torch.float64, device=basis.device)
    coefs = torch.linalg.solve(gram + SH_RIDGE * diag * eye + 1e-12 * eye, rhs).to(basis.dtype)
    fitted = torch.einsum("...kc,...khw->...chw", coefs, basis)
    enough = (n >= k)[..., None]  # [..., 1, 1, 1]
    return torch.where(enough, fitted, values)


def grey(bgr: Tensor) -> Tensor:
    """[..., 3, H, W] BGR → [..., H, W] grey (LUMA_BGR)."""
    w = constant("sharpness-grey", lambda: np.array(LUMA_BGR, np.float32), bgr.device, bgr.dtype)
    return (bgr * w[:, None, None]).sum(dim=-3)


def mask_mean(plane: Tensor, mask: Tensor) -> Tensor:
    """[...] the mean of each plane [..., H, W] over its mask (bool), 0 where the mask is empty."""
    m = mask.to(plane.dtype)
    return (plane * m).sum(dim=(-2, -1)) / m.sum(dim=(-2, -1)).clamp(min=1.0)


def _detail(bgr: Tensor, mask: Tensor) -> Tensor:
    """[N] formulas.fine_detail of [N, 3, H, W] images on their masks [N, H, W]."""
    return formulas.fine_detail(PRIMITIVES, bgr, mask)


def match_sharpness(face: Tensor, target: Tensor, skin: Tensor) -> tuple[Tensor, np.ndarray, np.ndarray]:
    """kernels.host_ops.match_sharpness for [N,3,H,W] faces (one wait, for the choice), with the
    result's and the target's fine detail [N] on the host for grain matching (the result's is
    infinite where there is too little skin to tell: no grain there)."""
    blurs = [face] + [gaussian_blur(face, s) for s in SHARPNESS_SIGMAS]
    detail = torch.stack([_detail(b, skin) for b in blurs], dim=1)
    both = torch.cat([detail, _detail(target, skin)[:, None]], dim=1).cpu().numpy().astype(np.float64)
    weights = sharpness_weights(both[:, :-1], both[:, -1])
    small = skin.sum(dim=(1, 2)).cpu().numpy() < 64
    weights[small] = np.eye(len(blurs))[0]
    have = np.where(small, np.inf, (weights * both[:, :-1]).sum(axis=1))
    w = to_device(weights.astype(np.float32), face.device)
    mixed = formulas.mix([w[:, i, None, None, None] for i in range(len(blurs))], blurs)
    return mixed, have, both[:, -1]


def match_grain(
    face: Tensor,
    target: Tensor,
    skin: Tensor,
    have: np.ndarray | None = None,
    goal: np.ndarray | None = None,
) -> Tensor:
    """kernels.host_ops.match_grain for [N,3,H,W] faces: the gain is base.grain_gain on the host
    (no wait where sharpness matching measured the details), and a chunk whose faces need no
    grain, as on clean footage, costs nothing more."""
    if have is None or goal is None:  # one wait for both details and the skin counts
        measured = torch.stack([_detail(face, skin), _detail(target, skin), skin.sum(dim=(1, 2)).float()])
        have, goal, count = measured.cpu().numpy().astype(np.float64)
        have = np.where(count < 64, np.inf, have)
    gain = grain_gain(have, goal)
    if not gain.any():
        return face
    limit = to_device((GRAIN_CLIP * goal).astype(np.float32), face.device)[:, None, None, None]
    gains = to_device(gain.astype(np.float32), face.device)[:, None, None, None]
    return formulas.add_grain(PRIMITIVES, face, target, skin, gains, limit)


def inset_ramp(covered: Tensor, widths: list[int]) -> Tensor:
    """formulas.inset_ramp on device for [F, H, W] masks, face f over widths[f] px: 3x3 erosions
    as min pools (max_pool2d pads with -inf, so outside counts as covered)."""
    counts = [max(1, int(w)) for w in widths]
    width = to_device(np.array(counts, np.float32), covered.device)[:, None, None]
    return formulas.inset_ramp(PRIMITIVES, covered, width, max(counts))


def _erode(x: Tensor) -> Tensor:
    """3x3 erosion of [..., H, W] levels, outside counting as 1 (max_pool2d pads with -inf)."""
    shape = x.shape
    x4 = x.reshape(-1, 1, shape[-2], shape[-1])
    return (-F.max_pool2d(-x4, 3, stride=1, padding=1)).reshape(shape)


def feather(target: Tensor, face: Tensor, alpha: Tensor) -> Tensor:
    """formulas.feather: [..., C, H, W] images, alpha [..., H, W] in 0–1."""
    return formulas.feather(PRIMITIVES, target, face, alpha)


def multiband(target: Tensor, face: Tensor, alpha: Tensor, levels: int | None = None) -> Tensor:
    """formulas.multiband of [..., C, H, W] images under alpha [..., H, W]."""
    return formulas.multiband(PRIMITIVES, target, face, alpha, levels)


def multiband_weights(alpha: Tensor, levels: int | None = None) -> Tensor:
    """formulas.multiband_weights of alpha [..., H, W], for a matte."""
    return formulas.multiband_weights(PRIMITIVES, alpha, levels)


# the torch set's primitives for the shared formulas (kernels/formulas.py): channel-first images,
# statistics [..., C, 1, 1]
PRIMITIVES = formulas.Primitives(
    xp=torch,
    to_lab8=to_lab8,
    from_lab8=lambda lab: lab8_to_bgr(to_uint8_levels(lab)),
    mask_stats=mask_stats,
    masked_blur=masked_blur,
    has_pixels=lambda mask, n: mask.to(torch.float32).sum(dim=(-2, -1))[..., None, None, None] >= n,
    channels=lambda x, start, stop: x[..., start:stop, :, :],
    join_channels=lambda parts: torch.cat(parts, dim=-3),
    per_pixel=lambda plane: plane.unsqueeze(-3),
    per_channel=lambda vector: vector[..., None, None],
    constant=lambda values, like: constant(
        ("per_channel", tuple(values)), lambda: values, like.device, like.dtype
    )[:, None, None],
    pyr_down=pyr_down,
    pyr_up=pyr_up,
    size=lambda x: (int(x.shape[-2]), int(x.shape[-1])),
    blur=gaussian_blur,
    grey=grey,
    mask_mean=mask_mean,
    plane=lambda x, i: x[..., i, :, :],
    levels=lambda mask: mask.to(torch.float32),
    erode=_erode,
    fit_basis=fit_basis,
)
