"""The torch kernel set: frames resident on the device, every operation a batched tensor op.

Frames cross to the device once (one pinned staging buffer, a non-blocking copy) and back
once. In between, on this instance's CUDA stream (each executor worker owns one instance,
made on its own thread), the stages' crops, model calls, masks and paints stay on the device;
only small arrays (detections, mesh points, embeddings) come back through `to_host`.

With yuv420p planes (`upload(..., planes=layout)`, video/pictures/planes.py) the decoder's planes
cross instead, at half the bytes; the device converts them to BGR, and `download` converts
back only the rectangles that were painted, so every other pixel leaves exactly as it was
decoded.

Imports torch at module level: only `make_kernels` for a GPU device (or a test) imports it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from facefusion_batch.kernels import host_ops
from facefusion_batch.kernels import torch_ops as D
from facefusion_batch.kernels.base import LUMA_BGR, MODEL_MASK_BLUR, FaceRegion, Frames, PaintSettings, Rect
from facefusion_batch.kernels.geometry import (
    canvas_origins,
    canvas_size,
    footprint,
    join_tiles_nchw,
    plan_waves,
    split_tiles_nchw,
)
from facefusion_batch.kernels.torch_paint import colour_stats, gather_canvases, paint_faces, record_matte
from facefusion_batch.runtime.batching import BatchPolicy
from facefusion_batch.runtime.session import run_chunked
from facefusion_batch.runtime.streams import DeviceTimer, download, is_cuda, on_thread_stream

_TORCH_DTYPES = {"tensor(float16)": torch.float16, "tensor(double)": torch.float64}


class TorchKernels:
    """`device`: a torch device ("cuda:0", or "cpu" for the tests); `timer`: the backend's device
    timer (per-operation device time in the report)."""

    name = "torch"
    accepts_planes = True

    def __init__(self, device: Any, timer: DeviceTimer | None = None) -> None:
        self.device = torch.device(device)
        self.timer = timer or DeviceTimer()
        self._constants: dict[Any, torch.Tensor] = {}

    @contextlib.contextmanager
    def scope(self):
        """One batch: this instance's stream current, no autograd (inference tensors)."""
        with torch.inference_mode(), self._stream():
            yield

    # -- frames ---------------------------------------------------------------------------------

    def upload(self, images: list[np.ndarray], planes: Any = None) -> Frames:
        with self._stream():
            staged = self._stage(images)
            pixels = staged
            if planes is not None:
                with self.timer.stage("device:yuv_to_bgr", self.device):
                    y, u, v = D.i420_planes(staged, planes.height, planes.width)
                    pixels = D.yuv420p_to_bgr(y, u, v, matrix=planes.matrix, full_range=planes.full_range)
        height, width = int(pixels.shape[1]), int(pixels.shape[2])
        return Frames(
            pixels=pixels,
            count=len(images),
            height=height,
            width=width,
            staged=staged if planes is not None else None,
            layout=planes,
        )

    def _stage(self, images: list[np.ndarray]) -> torch.Tensor:
        """Same-sized frames (BGR, or packed planes) → one uint8 [B, ...] device tensor: one pinned
        buffer, one copy."""
        if not is_cuda(self.device):
            return torch.from_numpy(np.stack(images))
        pinned = torch.empty((len(images), *images[0].shape), dtype=torch.uint8, pin_memory=True)
        host = pinned.numpy()
        for i, image in enumerate(images):
            host[i] = image
        return pinned.to(self.device, non_blocking=True)

    def download(self, frames: Frames) -> list[np.ndarray]:
        with self._stream():
            out = frames.pixels
            if frames.staged is not None:
                with self.timer.stage("device:bgr_to_yuv", self.device):
                    _write_back_planes(frames.staged, frames.pixels, frames.layout, frames.painted)
                out = frames.staged
            mattes = frames.mattes or {}
            host = download({"frames": out, **{f"matte{i}": m for i, m in mattes.items()}})
        if frames.mattes is not None:  # the host set's form: {frame: [H, W] float32 numpy}
            frames.mattes = {i: host[f"matte{i}"] for i in mattes}
        return [host["frames"][i] for i in range(frames.count)]

    def _stream(self):
        return on_thread_stream(self.device)

    # -- models ---------------------------------------------------------------------------------

    def run(self, session, feeds: dict[str, Any], max_items: int | None) -> dict[str, torch.Tensor]:
        """Device tensors through `session` in the dtypes its graph declares; float32 outputs.
        A session without a device path (onnxruntime) runs on host copies: correct, not resident."""
        declared = {t.name: _TORCH_DTYPES.get(t.dtype, torch.float32) for t in session.inputs}
        feeds = {k: v.to(declared.get(k, v.dtype)) for k, v in feeds.items()}
        with torch.inference_mode(), self._stream():
            run = getattr(session, "run_device", None)
            if run is not None:
                out = run(feeds)
            else:
                host = run_chunked(
                    session, {k: v.detach().cpu().numpy() for k, v in feeds.items()}, max_items
                )
                out = {k: D.to_device(v, self.device) for k, v in host.items()}
            return {k: v.float() for k, v in out.items()}

    def to_host(self, array):
        """A tensor, or a dict of them, as numpy: one wait for the stream however many."""
        with self._stream():
            if isinstance(array, dict):
                return download(array)
            return download({"a": array})["a"]

    def from_host(self, array: np.ndarray) -> torch.Tensor:
        with self._stream():
            return D.to_device(np.ascontiguousarray(array), self.device)

    def _constant(self, key, make) -> torch.Tensor:
        if key not in self._constants:
            with self._stream():
                self._constants[key] = torch.from_numpy(np.array(make(), np.float32)).to(self.device)
        return self._constants[key]

    # -- model inputs and outputs -----------------------------------------------------------------

    def letterbox(self, frames: Frames, size: int) -> tuple[torch.Tensor, np.ndarray]:
        with self._stream(), self.timer.stage("device:letterbox", self.device):
            return D.letterbox(frames.pixels, size)

    def warp_crops(self, frames: Frames, frame_index, affines, size: int, border: str) -> torch.Tensor:
        """uint8-valued BGR crops [F, 3, S, S] (float), as the host set's uint8 crops."""
        with self._stream(), self.timer.stage("device:crop", self.device):
            m = D.to_device(affines, self.device, torch.float64)
            mode = "border" if border == "replicate" else "zeros"
            crops = D.warp_affine(frames.pixels, frame_index, m, (size, size), border=mode)
            return torch.clamp(torch.round(crops), 0, 255)

    def resize_crops(self, crops: torch.Tensor, size: int, *, levels: bool = True) -> torch.Tensor:
        if crops.shape[-1] == size:
            return crops
        with self._stream():
            resized = D.resize_linear(crops, (size, size))  # bilinear both ways, as the host set
            return torch.clamp(torch.round(resized), 0, 255) if levels else resized

    def model_input(self, crops, mean=0.0, std=1.0, *, rgb: bool = True, nhwc: bool = False):
        with self._stream():
            x = crops.flip(1) if rgb else crops
            m = self._constant(("mean", tuple(np.ravel(mean))), lambda: np.broadcast_to(mean, (3,)))
            s = self._constant(("std", tuple(np.ravel(std))), lambda: np.broadcast_to(std, (3,)))
            x = (x / 255.0 - m[:, None, None]) / s[:, None, None]
            return x.permute(0, 2, 3, 1).contiguous() if nhwc else x

    def model_output(self, out, mean, std, *, denormalise: bool, pre_clip: bool = False):
        """NCHW RGB → BGR float 0–255 [F, 3, S, S]."""
        with self._stream():
            if pre_clip:
                out = torch.clamp(out, -1.0, 1.0)
            if denormalise:
                s = self._constant(("std", tuple(np.ravel(std))), lambda: np.broadcast_to(std, (3,)))
                m = self._constant(("mean", tuple(np.ravel(mean))), lambda: np.broadcast_to(mean, (3,)))
                out = out * s[:, None, None] + m[:, None, None]
            return torch.clamp(out, 0.0, 1.0).flip(1) * 255.0

    def split_tiles(self, batch, k: int):
        return split_tiles_nchw(batch, k)

    def join_tiles(self, batch, k: int):
        return join_tiles_nchw(batch, k)

    def thumbnails(self, frames: Frames, size: tuple[int, int]) -> np.ndarray:
        """[B, h, w] float32 grey thumbnails of `size` (width, height), area-averaged on the device."""
        with self._stream():
            grey = frames.pixels.float() @ self._constant("grey", lambda: list(LUMA_BGR))
            return self.to_host(D.resize_area(grey, (size[1], size[0])))

    def repeat_rows(self, array, times: int):
        return array.repeat_interleave(times, dim=0)

    def crops_to_uint8(self, crops):
        return D.to_uint8_levels(crops)

    # -- masks ----------------------------------------------------------------------------------

    def constant_masks(self, mask: np.ndarray, count: int):
        key = ("mask", mask.shape, mask.tobytes())
        return self._constant(key, lambda: mask).expand(count, *mask.shape)

    def soften_masks(self, masks, size: int):
        with self._stream():
            m = torch.clamp(masks.float(), 0, 1)
            if m.shape[-1] != size or m.shape[-2] != size:
                m = D.resize_linear(m, (size, size))
            m = D.gaussian_blur(m, MODEL_MASK_BLUR)
            return (torch.clamp(m, 0.5, 1.0) - 0.5) * 2.0

    def class_masks(self, logits, classes: np.ndarray):
        with self._stream():
            wanted = D.to_device(classes, self.device, torch.int64)
            return torch.isin(logits.argmax(dim=1), wanted).float()

    def min_masks(self, masks: list):
        out = masks[0]
        for m in masks[1:]:
            out = torch.minimum(out, m)
        return torch.clamp(out, 0.0, 1.0)

    def scale_masks(self, masks, factor: float):
        return masks * factor

    # -- painting -------------------------------------------------------------------------------

    def paste(self, frames: Frames, frame_index, crops, alpha, affines) -> None:
        with self._stream(), self.timer.stage("device:paste", self.device):
            frames.painted += paste_crops(
                frames.pixels, frame_index, crops, alpha, affines, mattes=frames.mattes
            )

    def textures(self, textures: list[np.ndarray]) -> list[torch.Tensor]:
        with self._stream():
            out = [
                torch.from_numpy(np.ascontiguousarray(t.transpose(2, 0, 1))).to(self.device) for t in textures
            ]
            if is_cuda(self.device):  # uploaded once; every later operation of this stream reads them
                torch.cuda.current_stream(self.device).synchronize()
        return out

    def paint_faces(
        self, frames: Frames, regions: list[FaceRegion], textures, settings: PaintSettings
    ) -> None:
        with self._stream(), self.timer.stage("device:paint", self.device):
            paint_faces(
                frames.pixels,
                regions,
                textures,
                settings,
                host_blend=_host_blend(settings),
                mattes=frames.mattes,
            )
        frames.painted += [(r.frame, r.x0, r.y0, r.width, r.height) for r in regions]

    def colour_stats(self, frames: Frames, regions: list[FaceRegion], textures) -> np.ndarray:
        with self._stream(), self.timer.stage("device:colour_stats", self.device):
            stats = colour_stats(frames.pixels, regions, textures)
        return np.asarray(self.to_host(stats), np.float32)


def _host_blend(settings: PaintSettings):
    """A blend without a device twin (poisson): that one step round-trips the face region."""

    def blend(target, face, alpha):
        host = download({"t": target.permute(1, 2, 0), "f": face.permute(1, 2, 0), "a": alpha})
        out = host_ops.blend(settings.blend, host["t"].copy(), host["f"].copy(), host["a"].copy())
        return D.to_device(np.ascontiguousarray(out), target.device).permute(2, 0, 1)

    return blend


def _write_back_planes(staged: torch.Tensor, frames: torch.Tensor, layout, rects: list[Rect]) -> None:
    """Convert the painted rectangles of `frames` (widened to even bounds) back into the packed
    yuv420p `staged` frames, in place; the rest of `staged` keeps the decoder's values."""
    height, width = layout.height, layout.width
    quarter = (height // 2) * (width // 2)
    for fi, x, y, w, h in rects:
        x0, y0 = x - x % 2, y - y % 2
        x1, y1 = min(width, x + w + (x + w) % 2), min(height, y + h + (y + h) % 2)
        if x1 <= x0 or y1 <= y0:
            continue
        luma, cb, cr = D.bgr_to_yuv420p(
            frames[fi : fi + 1, y0:y1, x0:x1], matrix=layout.matrix, full_range=layout.full_range
        )
        staged[fi, y0:y1, x0:x1] = luma[0]
        chroma = staged[fi, height:].view(-1)  # U then V, each (H/2, W/2): views, written in place
        u = chroma[:quarter].view(height // 2, width // 2)
        v = chroma[quarter : 2 * quarter].view(height // 2, width // 2)
        u[y0 // 2 : y1 // 2, x0 // 2 : x1 // 2] = cb[0]
        v[y0 // 2 : y1 // 2, x0 // 2 : x1 // 2] = cr[0]


def paste_crops(
    frames: torch.Tensor,
    frame_index: np.ndarray,
    crops: torch.Tensor,
    alpha: torch.Tensor,
    affines: np.ndarray,
    *,
    max_faces: int | None = None,
    mattes: dict[int, torch.Tensor] | None = None,
) -> list[Rect]:
    """The host set's paste into the uint8 frames [B, H, W, 3], in place, every face at once:
    crops [F, 3, S, S] (0–255, border replicated) and alpha [F, S, S] (0–1, zero outside) warped
    back through the affines by one grid_sample each, blended over each crop's footprint.
    Returns the rectangles written; `mattes`: the alpha each used is recorded there."""
    size = int(crops.shape[-1])
    height, width = int(frames.shape[1]), int(frames.shape[2])
    rects = [footprint(affines[f], size, (height, width)) for f in range(len(affines))]
    found = [(f, r) for f, r in enumerate(rects) if r is not None]
    if not found:
        return []
    faces = [f for f, _ in found]
    x0 = np.array([r[0] for _, r in found])
    y0 = np.array([r[1] for _, r in found])
    w = np.array([r[2] for _, r in found]) - x0
    h = np.array([r[3] for _, r in found]) - y0
    canvas = canvas_size(h, w, (height, width))
    origins = canvas_origins(y0, x0, canvas, (height, width))
    written: list[Rect] = []
    index = np.asarray(frame_index)[faces]
    max_faces = max_faces or BatchPolicy.faces_per_paint(canvas)
    for wave in plan_waves(index, origins, canvas):
        for start in range(0, len(wave), max_faces):
            rows = np.asarray(wave[start : start + max_faces])
            chosen = np.asarray(faces)[rows]
            pasted, used = _paste_chunk(
                frames, index[rows], crops, alpha, affines[chosen], chosen, origins[rows], canvas
            )
            for i, r in enumerate(rows):
                fi, x, y, rw, rh = int(index[r]), int(x0[r]), int(y0[r]), int(w[r]), int(h[r])
                oy, ox = int(origins[r][0]), int(origins[r][1])
                window = np.s_[y - oy : y - oy + rh, x - ox : x - ox + rw]
                frames[fi, y : y + rh, x : x + rw] = pasted[i][window]
                record_matte(mattes, fi, x, y, used[i][window], (height, width))
                written.append((fi, x, y, rw, rh))
    return written


def _paste_chunk(frames, index, crops, alpha, affines, chosen, origins, canvas):
    """The pasted canvases [n, ch, cw, 3] uint8 of the faces `chosen` (rows of crops/alpha), and
    the alpha each used [n, ch, cw]."""
    ch, cw = canvas
    size = int(crops.shape[-1])
    device = frames.device
    sel = D.to_device(chosen, device, torch.int64)
    ys, xs = torch.meshgrid(
        torch.arange(ch, device=device, dtype=torch.float64),
        torch.arange(cw, device=device, dtype=torch.float64),
        indexing="ij",
    )
    origin = D.to_device(origins, device, torch.float64)
    px = xs[None] + origin[:, 1, None, None]  # frame pixel x of every canvas pixel
    py = ys[None] + origin[:, 0, None, None]
    m = D.to_device(affines, device, torch.float64)
    sx = m[:, 0, 0, None, None] * px + m[:, 0, 1, None, None] * py + m[:, 0, 2, None, None]
    sy = m[:, 1, 0, None, None] * px + m[:, 1, 1, None, None] * py + m[:, 1, 2, None, None]
    # OpenCV (and so FaceFusion and the host set) samples at 1/32 px; so does this
    sx, sy = torch.round(sx * 32.0) / 32.0, torch.round(sy * 32.0) / 32.0
    grid = D.grid_coords(torch.stack([sx, sy], dim=-1).float(), size, size)  # [F, ch, cw, 2]
    face = F.grid_sample(
        crops.index_select(0, sel).float(), grid, mode="bilinear", padding_mode="border", align_corners=True
    )
    a = F.grid_sample(
        alpha.index_select(0, sel).float()[:, None],
        grid,
        mode="bilinear",
        padding_mode="zeros",
        align_corners=True,
    )
    a = torch.clamp(a, 0.0, 1.0)
    region = gather_canvases(frames, index, origins, canvas)
    # truncated, as the host set and FaceFusion's paste_back do
    out = torch.floor(torch.clamp(region * (1 - a) + face * a, 0, 255)).to(torch.uint8)
    return out.permute(0, 2, 3, 1), a[:, 0]
