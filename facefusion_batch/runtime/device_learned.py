"""The learned path (FaceFusion's swappers and enhancers) with the frames resident on the device.

The twin of pipeline.stages.LearnedFacePipeline and swap.enhance.FaceEnhancer:
crops are warped out of the resident frames (border replicated, as the models
were trained), normalised, split into pixel-boost tiles and swapped on the
device; the outputs are pasted back through their masks by one batched warp
for all the faces of a batch (canvases as in runtime/device_paint.py). Only the
five landmarks and the affines (a few numbers a face) live on the host.

Box masks are built on the device. Occlusion and region masks run their own
models through the host stages on crop-sized arrays (the crops go down, the
masks come up: a few hundred kilobytes, not frames), so every mask option
works. A reference selector or a swapper weight other than 0.5 needs ArcFace
embeddings of the targets, which the host recogniser computes from BGR frames.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from facefusion_batch.faces.align import alignment_affines
from facefusion_batch.runtime import device_ops as D
from facefusion_batch.runtime.device_paint import (
    canvas_origins,
    canvas_size,
    faces_per_chunk,
    gather_canvases,
    plan_waves,
)
from facefusion_batch.runtime.streams import DeviceTimer, download
from facefusion_batch.swap.paste import footprint

Rect = tuple[int, int, int, int, int]  # frame, x, y, width, height

_TORCH_DTYPES = {"tensor(float16)": torch.float16, "tensor(double)": torch.float64}


def run_session(session, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Device tensors through `session` in the dtypes its graph declares; outputs as float32."""
    from facefusion_batch.runtime.device_pipeline import _run_device

    declared = {t.name: _TORCH_DTYPES.get(t.dtype, torch.float32) for t in session.inputs}
    out = _run_device(session, {k: v.to(declared.get(k, v.dtype)) for k, v in feeds.items()})
    return {k: v.float() for k, v in out.items()}


def align(frames: torch.Tensor, frame_index: np.ndarray, landmarks5: np.ndarray, template: str, size: int):
    """faces.align.align_faces on resident frames: crops [F, 3, S, S] BGR float holding uint8
    values (as the host's uint8 crops), and the affines [F, 2, 3] (frame → crop)."""
    affines = alignment_affines(landmarks5, template, size)
    m = D.to_device(affines, frames.device, torch.float64)
    crops = D.warp_affine(frames, frame_index, m, (size, size), border="border")
    return torch.clamp(torch.round(crops), 0, 255), affines


def model_input(crops: torch.Tensor, model) -> torch.Tensor:
    """faces.identity.to_model_input: BGR 0–255 [F, 3, S, S] → RGB, /255, (x − mean) / std."""
    mean = D.constant(("mean", model.mean), lambda: model.mean, crops.device)[:, None, None]
    std = D.constant(("std", model.std), lambda: model.std, crops.device)[:, None, None]
    return (crops.flip(1) / 255.0 - mean) / std


def model_output(out: torch.Tensor, model) -> torch.Tensor:
    """swap.learned.from_model_output: NCHW RGB → BGR float 0–255 [F, 3, S, S]."""
    if model.output_denormalise:
        std = D.constant(("std", model.std), lambda: model.std, out.device, out.dtype)[:, None, None]
        mean = D.constant(("mean", model.mean), lambda: model.mean, out.device, out.dtype)[:, None, None]
        out = out * std + mean
    return torch.clamp(out, 0.0, 1.0).flip(1) * 255.0


def split_tiles(x: torch.Tensor, k: int) -> torch.Tensor:
    """swap.learned.split_tiles on NCHW: [F, C, kS, kS] → [F·k², C, S, S], tile (a, b) holding
    pixels (a + k·i, b + k·j)."""
    if k == 1:
        return x
    f, c, side, _ = x.shape
    s = side // k
    return x.reshape(f, c, s, k, s, k).permute(0, 3, 5, 1, 2, 4).reshape(f * k * k, c, s, s)


def join_tiles(x: torch.Tensor, k: int) -> torch.Tensor:
    """The inverse of `split_tiles`."""
    if k == 1:
        return x
    n, c, s, _ = x.shape
    f = n // (k * k)
    return x.reshape(f, k, k, c, s, s).permute(0, 3, 4, 1, 5, 2).reshape(f, c, s * k, s * k)


def paste_crops(
    frames: torch.Tensor,
    frame_index: np.ndarray,
    crops: torch.Tensor,
    alpha: torch.Tensor,
    affines: np.ndarray,
    *,
    max_faces: int | None = None,
) -> list[Rect]:
    """swap.paste.paste_back into the uint8 frames [B, H, W, 3], in place, every face at once:
    crops [F, 3, S, S] (0–255, border replicated) and alpha [F, S, S] (0–1, zero outside) warped
    back through the affines by one grid_sample each, blended over each crop's footprint.
    Returns the rectangles written."""
    size = int(crops.shape[-1])
    height, width = int(frames.shape[1]), int(frames.shape[2])
    rects = [footprint(affines[f], size, (height, width)) for f in range(len(affines))]
    faces = [f for f, r in enumerate(rects) if r is not None]
    if not faces:
        return []
    x0 = np.array([rects[f][0] for f in faces])
    y0 = np.array([rects[f][1] for f in faces])
    w = np.array([rects[f][2] for f in faces]) - x0
    h = np.array([rects[f][3] for f in faces]) - y0
    canvas = canvas_size(h, w, (height, width))
    origins = canvas_origins(y0, x0, canvas, (height, width))
    written: list[Rect] = []
    index = np.asarray(frame_index)[faces]
    max_faces = max_faces or faces_per_chunk(canvas)
    for wave in plan_waves(index, origins, canvas):
        for start in range(0, len(wave), max_faces):
            rows = np.asarray(wave[start : start + max_faces])
            chosen = np.asarray(faces)[rows]
            pasted = _paste_chunk(
                frames, index[rows], crops, alpha, affines[chosen], chosen, origins[rows], canvas
            )
            for i, r in enumerate(rows):
                fi, x, y, rw, rh = int(index[r]), int(x0[r]), int(y0[r]), int(w[r]), int(h[r])
                oy, ox = int(origins[r][0]), int(origins[r][1])
                frames[fi, y : y + rh, x : x + rw] = pasted[i, y - oy : y - oy + rh, x - ox : x - ox + rw]
                written.append((fi, x, y, rw, rh))
    return written


def _paste_chunk(frames, index, crops, alpha, affines, chosen, origins, canvas) -> torch.Tensor:
    """The pasted canvases [n, ch, cw, 3] uint8 of the faces `chosen` (rows of crops/alpha)."""
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
    out = torch.floor(torch.clamp(region + a * (face - region) + 0.5, 0, 255)).to(torch.uint8)
    return out.permute(0, 2, 3, 1)


class DeviceEnhancer:
    """swap.enhance.FaceEnhancer on resident frames (its occlusion mask, when set, through the host
    occluder on crop-sized arrays)."""

    def __init__(self, host) -> None:
        self.host = host
        self._box: dict[Any, torch.Tensor] = {}

    def __call__(self, frames: torch.Tensor, table, timer: DeviceTimer) -> list[Rect]:
        from facefusion_batch.swap.enhance import CODEFORMER_FIDELITY
        from facefusion_batch.swap.masks import box_mask

        host = self.host
        if len(table) == 0 or host.blend <= 0:
            return []
        model, size = host.model, host.model.size
        crops, affines = align(frames, table.frame_index, table.landmarks5, model.template, size)
        feeds = {host.input_name: model_input(crops, model)}
        if host.weight_name:
            feeds[host.weight_name] = D.constant(
                "codeformer_fidelity", lambda: [CODEFORMER_FIDELITY], frames.device, torch.float64
            )
        out = run_session(host.session, feeds)[host.session.outputs[0].name]
        enhanced = model_output(torch.clamp(out, -1.0, 1.0) if model.output_denormalise else out, model)
        alpha = _cached(
            self._box, (size, host.mask_blur), lambda: box_mask(size, host.mask_blur), frames.device
        )
        alpha = alpha.expand(len(table), size, size)
        if host.occluder is not None:
            occlusion = host.occluder(_host_crops(crops))
            alpha = torch.minimum(alpha, D.to_device(occlusion, frames.device, torch.float32))
        return paste_crops(frames, table.frame_index, enhanced, alpha * host.blend, affines)


def _cached(cache: dict, key, make, device) -> torch.Tensor:
    if key not in cache:
        cache[key] = torch.from_numpy(np.array(make(), np.float32)).to(device)
    return cache[key]


def _host_crops(crops: torch.Tensor) -> np.ndarray:
    """Device crops [F, 3, S, S] → the host stages' uint8 BGR [F, S, S, 3]."""
    return download({"c": crops.permute(0, 2, 3, 1).to(torch.uint8)})["c"]


class DeviceLearnedSwap:
    """LearnedFacePipeline's align → swap → mask → paste on resident frames."""

    def __init__(self, host_pipeline) -> None:
        self.host = host_pipeline
        self._box: dict[Any, torch.Tensor] = {}

    def __call__(self, frames: torch.Tensor, table, embeddings, timer) -> list[Rect]:
        host = self.host
        swapper, masker = host.swapper, host.masker
        model, k = swapper.model, swapper.tiles
        with timer.stage("align"):
            crops, affines = align(
                frames, table.frame_index, table.landmarks5, model.template, swapper.crop_size
            )
            settings = masker.settings
            host_masks = None
            if "occlusion" in settings.types or "region" in settings.types:
                host_masks = masker.before(_host_crops(crops))
        with timer.stage("swap"):
            identity = D.to_device(host.identity(len(table), embeddings), frames.device, torch.float32)
            source = identity.repeat_interleave(k * k, dim=0)
            target = split_tiles(model_input(crops, model), k)
            out = run_session(swapper.session, {"target": target, "source": source})
            swapped = join_tiles(model_output(out[swapper.session.outputs[0].name], model), k)
        with timer.stage("mask"):
            size = swapper.crop_size
            if host_masks is None:
                make = (
                    (lambda: _box_only(size, settings))
                    if "box" in settings.types
                    else (lambda: np.ones((size, size), np.float32))
                )
                alpha = _cached(self._box, (size, settings), make, frames.device).expand(
                    len(table), size, size
                )
            else:
                swapped_host = download({"s": swapped.permute(0, 2, 3, 1)})["s"]
                alpha = D.to_device(masker.after(swapped_host, host_masks), frames.device, torch.float32)
        with timer.stage("paste"):
            return paste_crops(frames, table.frame_index, swapped, alpha, affines)


def _box_only(size: int, settings) -> np.ndarray:
    from facefusion_batch.swap.masks import box_mask

    return box_mask(size, settings.blur, settings.padding)
