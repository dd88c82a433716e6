"""Painting every face of a batch into resident frames at once.

Painting one face is a few thousand small tensor operations (texture sampling,
two LAB conversions, two masked blurs, a five-level pyramid blend). Run face by
face, a GPU spends its time waiting for Python to launch them: 96 faces (16
frames of 6) would be ~200,000 launches a batch. Here every face of a batch is
painted by the same operations on a stack of equal-sized canvases, so the
number of launches depends on the batch, not on the number of faces.

Each face's canvas is a window of its frame, as large as the largest face
region of the batch (rounded up to 32 pixels), placed over the face's region
and kept inside the frame. Outside its own warp map a canvas holds the
frame's pixels and zero alpha, so the blend leaves them as they were. Face by
face the host set differs only in what it reads past a region's border (the
frame's pixels here, a mirror of the region there) and in where the colour
blur's downscaling grid falls; tests/test_kernels_pipeline.py bounds the
difference on real faces.

Faces whose canvases overlap in one frame are painted in successive waves,
so a face painted later sees the earlier one, as the host's sequential loop
does. Canvases go through in chunks of at most PAINT_CHUNK_PIXELS canvas pixels (a
few GiB of float intermediates at most), to bound device memory.
"""

from __future__ import annotations

import numpy as np
import torch

from facefusion_batch.kernels import formulas
from facefusion_batch.kernels import torch_ops as D
from facefusion_batch.kernels.base import FaceRegion
from facefusion_batch.kernels.formulas import pyramid_levels
from facefusion_batch.kernels.geometry import canvas_origins, canvas_size, plan_waves
from facefusion_batch.runtime.batching import BatchPolicy


def gather_canvases(frames: torch.Tensor, index: np.ndarray, origins: np.ndarray, canvas: tuple[int, int]):
    """[F, 3, ch, cw] float windows of the uint8 frames [B, H, W, 3]: one gather."""
    ch, cw = canvas
    device = frames.device
    fi = D.to_device(index, device, torch.int64)[:, None, None]
    rows = D.to_device(origins[:, 0], device, torch.int64)[:, None] + torch.arange(ch, device=device)
    cols = D.to_device(origins[:, 1], device, torch.int64)[:, None] + torch.arange(cw, device=device)
    windows = frames[fi, rows[:, :, None], cols[:, None, :]]  # [F, ch, cw, 3]
    return windows.permute(0, 3, 1, 2).float()


def record_matte(
    mattes: dict[int, torch.Tensor] | None, index: int, x0: int, y0: int, alpha: torch.Tensor, size
) -> None:
    """Keep the alpha [h, w] a paste used at (x0, y0) of frame `index` (of `size` (H, W)), the
    largest where faces overlap, when mattes are asked for (`Frames.mattes`: device tensors here,
    brought to the host with the frames)."""
    if mattes is None:
        return
    matte = mattes.get(index)
    if matte is None:
        matte = mattes[index] = torch.zeros(size, dtype=torch.float32, device=alpha.device)
    h, w = alpha.shape
    region = matte[y0 : y0 + h, x0 : x0 + w]
    region.copy_(torch.maximum(region, alpha[: region.shape[0], : region.shape[1]]))


def _maps(regions: list[FaceRegion], origins: np.ndarray, canvas: tuple[int, int]) -> np.ndarray:
    """[F, 2, ch, cw] source coordinates, NaN outside each face's own warp map."""
    ch, cw = canvas
    maps = np.full((len(regions), 2, ch, cw), np.nan, np.float32)
    for f, r in enumerate(regions):
        dy, dx = r.y0 - origins[f, 0], r.x0 - origins[f, 1]
        h, w = min(r.height, ch - dy), min(r.width, cw - dx)
        maps[f, 0, dy : dy + h, dx : dx + w] = r.map_x[:h, :w]
        maps[f, 1, dy : dy + h, dx : dx + w] = r.map_y[:h, :w]
    return maps


def _visibility(regions: list[FaceRegion], origins: np.ndarray, canvas: tuple[int, int]) -> np.ndarray | None:
    """[F, ch, cw] each face's visibility on its canvas (1 where none is given), or None."""
    if all(r.visible is None for r in regions):
        return None
    ch, cw = canvas
    out = np.ones((len(regions), ch, cw), np.float32)
    for f, r in enumerate(regions):
        if r.visible is not None:
            dy, dx = r.y0 - origins[f, 0], r.x0 - origins[f, 1]
            h, w = min(r.height, ch - dy), min(r.width, cw - dx)
            out[f, dy : dy + h, dx : dx + w] = r.visible[:h, :w]
    return out


def _sample_textures(textures: list[torch.Tensor], sources: np.ndarray, maps: torch.Tensor) -> torch.Tensor:
    """[F, C, ch, cw]: each face's texture sampled at its map; one call per source picture."""
    f, _, ch, cw = maps.shape
    channels = textures[0].shape[0]
    out = torch.empty((f, channels, ch, cw), dtype=torch.float32, device=maps.device)
    for source in np.unique(sources):
        rows = np.flatnonzero(sources == source)
        sel = D.to_device(rows, maps.device)
        m = maps.index_select(0, sel)  # [n, 2, ch, cw]
        # the faces' canvases stacked into one tall picture: one grid_sample for all of them
        tall_x = m[:, 0].reshape(1, len(rows) * ch, cw)
        tall_y = m[:, 1].reshape(1, len(rows) * ch, cw)
        texture = textures[int(source)][None].float()
        sampled = D.remap(texture, tall_x, tall_y)  # [1, C, n*ch, cw]
        out.index_copy_(0, sel, sampled[0].reshape(channels, len(rows), ch, cw).transpose(0, 1))
    return out


def _per_face(pairs: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """[F, 2] per-face values (each eye's) as two [F, 1, 1] device tensors."""
    both = D.to_device(pairs, device)[:, :, None, None]
    return both[:, 0], both[:, 1]


def _fixes(regions: list[FaceRegion], device) -> torch.Tensor | None:
    """[F, 2, 3] each face's colour fix (none: factor 1, shift 0), or None where none has one."""
    if all(r.colour_fix is None for r in regions):
        return None
    none = np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], np.float32)
    return D.to_device(np.stack([none if r.colour_fix is None else r.colour_fix for r in regions]), device)


STATS_CHUNK = 64  # regions per colour statistics call (bounds the sampled textures' memory)


def colour_stats(
    frames: torch.Tensor, regions: list[FaceRegion], textures: list[torch.Tensor], step: int = 2
) -> torch.Tensor:
    """host_paint.region_colour_stats for every region: [R, 4, 3] (NaN rows: too little skin), on
    every `step`-th pixel of each region from its own top-left, as the host takes them."""
    if not regions:
        return torch.zeros((0, 4, 3), dtype=torch.float32, device=frames.device)
    parts = [
        _colour_stats(frames, regions[i : i + STATS_CHUNK], textures, step)
        for i in range(0, len(regions), STATS_CHUNK)
    ]
    return torch.cat(parts, dim=0)


def _colour_stats(frames, regions, textures, step: int) -> torch.Tensor:
    device = frames.device
    height, width = int(frames.shape[1]), int(frames.shape[2])
    hh = max(-(-r.height // step) for r in regions)
    ww = max(-(-r.width // step) for r in regions)
    maps = np.full((len(regions), 2, hh, ww), np.nan, np.float32)
    visible = np.ones((len(regions), hh, ww), np.float32)
    for f, r in enumerate(regions):
        mx, my = r.map_x[::step, ::step], r.map_y[::step, ::step]
        maps[f, 0, : mx.shape[0], : mx.shape[1]] = mx
        maps[f, 1, : my.shape[0], : my.shape[1]] = my
        if r.visible is not None:
            v = r.visible[::step, ::step]
            visible[f, : v.shape[0], : v.shape[1]] = v
    maps_t = D.to_device(maps, device)
    covered = ~torch.isnan(maps_t[:, 0])
    maps_t = torch.where(covered[:, None], maps_t, torch.full_like(maps_t, -1e4))
    warped = _sample_textures(textures, np.array([r.source for r in regions]), maps_t)
    ys = np.array([r.y0 for r in regions])[:, None] + step * np.arange(hh)
    xs = np.array([r.x0 for r in regions])[:, None] + step * np.arange(ww)
    fi = D.to_device(np.array([r.frame for r in regions]), device, torch.int64)[:, None, None]
    rows = D.to_device(np.minimum(ys, height - 1), device, torch.int64)[:, :, None]
    cols = D.to_device(np.minimum(xs, width - 1), device, torch.int64)[:, None, :]
    target = frames[fi, rows, cols].permute(0, 3, 1, 2).float()  # [R, 3, hh, ww]
    skin = covered & (warped[:, 4] > 0.5) & (D.to_device(visible, device) > 0.5)
    src = D.to_lab8(warped[:, :3])
    dst = D.to_uint8_levels(D.bgr_to_lab8(target))
    parts = [*D.mask_stats(src, skin), *D.mask_stats(dst, skin)]  # each [R, 3, 1, 1]
    out = torch.stack([p[..., 0, 0] for p in parts], dim=1)  # [R, 4, 3]
    enough = skin.float().sum(dim=(-2, -1)) >= 16
    return torch.where(enough[:, None, None], out, torch.full_like(out, float("nan")))


def paint_faces(
    frames: torch.Tensor,
    regions: list[FaceRegion],
    textures: list[torch.Tensor],
    settings,
    *,
    max_faces: int | None = None,
    host_blend=None,
    mattes: dict[int, torch.Tensor] | None = None,
) -> None:
    """Paint `regions` into the uint8 frames [B, H, W, 3] in place (ClassicalSettings: colour,
    colour_strength, blend). `host_blend(target, face, alpha)` for blends without a device twin
    (poisson), per face. `mattes`: record each face's blend weight there (`record_matte`), as the
    host set's paint_region returns it."""
    if not regions:
        return
    frame_hw = (int(frames.shape[1]), int(frames.shape[2]))
    canvas = canvas_size([r.height for r in regions], [r.width for r in regions], frame_hw)
    origins = canvas_origins([r.y0 for r in regions], [r.x0 for r in regions], canvas, frame_hw)
    max_faces = max_faces or BatchPolicy.faces_per_paint(canvas)
    for wave in plan_waves([r.frame for r in regions], origins, canvas):
        for start in range(0, len(wave), max_faces):
            chunk = wave[start : start + max_faces]
            _paint_chunk(
                frames,
                [regions[i] for i in chunk],
                origins[chunk],
                canvas,
                textures,
                settings,
                host_blend,
                mattes,
            )


def _paint_chunk(frames, regions, origins, canvas, textures, settings, host_blend, mattes) -> None:
    device = frames.device
    index = np.array([r.frame for r in regions])
    target = gather_canvases(frames, index, origins, canvas)
    maps = D.to_device(_maps(regions, origins, canvas), device)
    covered = ~torch.isnan(maps[:, 0])
    maps = torch.where(covered[:, None], maps, torch.full_like(maps, -1e4))
    warped = _sample_textures(textures, np.array([r.source for r in regions]), maps)
    holds = np.array([r.hold_eyes for r in regions], np.float32)
    visibility = _visibility(regions, origins, canvas)
    visible = None if visibility is None else D.to_device(visibility, device)
    face, alpha, skin, tinted = formulas.face_layers(
        D.PRIMITIVES,
        warped,
        target,
        covered,
        D.inset_ramp(covered, [r.edge for r in regions]),
        _per_face(holds, device) if warped.shape[1] >= 7 and holds.max() > 0 else None,
        visible,
    )
    face = D.streak_blur_each(face, [r.streak for r in regions])  # the plate's motion blur first
    have = goal = None
    if settings.match_sharpness:
        face, have, goal = D.match_sharpness(face, target, skin)
    relit = settings.colour == "local" and getattr(settings, "relight", False) and warped.shape[1] >= 10
    if relit and all(r.rotation is not None for r in regions):  # the target's light first
        rotation = D.to_device(np.stack([r.rotation for r in regions]).astype(np.float32), device)
        sigmas = [r.sigma for r in regions]
        face = formulas.relight(D.PRIMITIVES, face, target, skin, warped[:, 7:10], rotation, sigmas)
    if settings.colour != "none":
        sigmas = [r.sigma for r in regions]
        face = D.transfer_colour(
            face,
            target,
            skin,
            settings.colour_strength,
            settings.colour,
            sigmas,
            settings.shading_limit,
            settings.tint_limit,
            _fixes(regions, device),
            settings.shade_limit,
            tinted,
        )
        face = torch.where(covered[:, None], face, target)
    if settings.match_grain:
        face = D.match_grain(face, target, skin, have, goal)
    used = alpha
    if settings.blend == "multiband":
        # as many pyramid levels as the host gives each face's own region
        levels = np.array([pyramid_levels(r.height, r.width) for r in regions])
        result = torch.empty_like(target)
        used = torch.empty_like(alpha) if mattes is not None else alpha
        for n in np.unique(levels):
            sel = D.to_device(np.flatnonzero(levels == n), device)
            part = D.multiband(target[sel], face[sel], alpha[sel], levels=int(n))
            result.index_copy_(0, sel, part)
            if mattes is not None:
                used.index_copy_(0, sel, D.multiband_weights(alpha[sel], levels=int(n)))
    elif settings.blend == "feather":
        result = D.feather(target, face, alpha)
    else:
        result = torch.stack([host_blend(target[f], face[f], alpha[f]) for f in range(len(regions))])
    if visible is not None:  # an occluder stays in front exactly: no pyramid level bleeds into it
        result = D.feather(target, result, visible)
        used = used * visible
    weaker = np.array([r.strength for r in regions], np.float32)
    if weaker.min() < 1:  # a face in profile: part of the swap (FaceRegion.strength)
        strength = D.to_device(weaker, device)[:, None, None]
        result = target + strength[:, None] * (result - target)
        used = used * strength
    result = D.to_uint8_levels(result).to(torch.uint8).permute(0, 2, 3, 1)  # [F, ch, cw, 3]
    frame_hw = (int(frames.shape[1]), int(frames.shape[2]))
    for f, r in enumerate(regions):
        dy, dx = r.y0 - origins[f, 0], r.x0 - origins[f, 1]
        h, w = min(r.height, canvas[0] - dy), min(r.width, canvas[1] - dx)
        frames[r.frame, r.y0 : r.y0 + h, r.x0 : r.x0 + w] = result[f, dy : dy + h, dx : dx + w]
        record_matte(mattes, r.frame, r.x0, r.y0, used[f, dy : dy + h, dx : dx + w], frame_hw)
