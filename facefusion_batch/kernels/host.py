"""The host kernel set: frames as numpy arrays, every operation OpenCV/numpy (kernels/host_ops.py).

Frames are copied on first write, so a caller's pictures are never changed. Stateless:
one instance may serve every worker.
"""

from __future__ import annotations

import contextlib
from typing import Any

import cv2
import numpy as np

from facefusion_batch.kernels import host_ops as H
from facefusion_batch.kernels import host_paint
from facefusion_batch.kernels.base import FaceRegion, Frames, PaintSettings
from facefusion_batch.kernels.geometry import footprint, join_tiles_nchw, split_tiles_nchw
from facefusion_batch.runtime.session import run_chunked


class HostKernels:
    name = "host"
    accepts_planes = False

    def scope(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()

    # -- frames ---------------------------------------------------------------------------------

    def upload(self, images: list[np.ndarray], planes: Any = None) -> Frames:
        if planes is not None:
            raise ValueError("the host kernel set takes BGR frames")
        shapes = np.array([im.shape[:2] for im in images], np.int64).reshape(-1, 2)
        height, width = (int(shapes[0, 0]), int(shapes[0, 1])) if len(images) else (0, 0)
        return Frames(pixels=list(images), count=len(images), height=height, width=width, shapes=shapes)

    def download(self, frames: Frames) -> list[np.ndarray]:
        return list(frames.pixels)

    def _writable(self, frames: Frames, index: int) -> np.ndarray:
        """Frame `index`, copied the first time it is written to (the caller's stays untouched)."""
        if index not in frames.owned:
            frames.pixels[index] = frames.pixels[index].copy()
            frames.owned.add(index)
        return frames.pixels[index]

    # -- models ---------------------------------------------------------------------------------

    def run(self, session, feeds: dict[str, np.ndarray], max_items: int | None) -> dict[str, np.ndarray]:
        return run_chunked(session, feeds, max_items)

    def to_host(self, array):
        """An array, or a dict of them, as numpy."""
        if isinstance(array, dict):
            return {k: np.asarray(v) for k, v in array.items()}
        return np.asarray(array)

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return array

    # -- model inputs and outputs -----------------------------------------------------------------

    def letterbox(self, frames: Frames, size: int) -> tuple[np.ndarray, np.ndarray]:
        return H.letterbox(frames.pixels, size)

    def warp_crops(self, frames, frame_index, affines, size: int, border: str) -> np.ndarray:
        return H.warp_crops(frames.pixels, frame_index, affines, size, border)

    def resize_crops(self, crops: np.ndarray, size: int, *, levels: bool = True) -> np.ndarray:
        return H.resize_crops(crops, size)  # a uint8 crop stays uint8, a float one float

    def model_input(self, crops, mean=0.0, std=1.0, *, rgb: bool = True, nhwc: bool = False) -> np.ndarray:
        return H.model_input(crops, mean, std, rgb=rgb, nhwc=nhwc)

    def model_output(self, out, mean, std, *, denormalise: bool, pre_clip: bool = False) -> np.ndarray:
        return H.model_output(out, mean, std, denormalise=denormalise, pre_clip=pre_clip)

    def split_tiles(self, batch: np.ndarray, k: int) -> np.ndarray:
        return split_tiles_nchw(batch, k)

    def join_tiles(self, batch: np.ndarray, k: int) -> np.ndarray:
        return join_tiles_nchw(batch, k)

    def thumbnails(self, frames: Frames, size: tuple[int, int]) -> np.ndarray:
        """[B, h, w] float32 grey thumbnails of `size` (width, height), area-averaged."""
        return np.stack(
            [
                cv2.resize(cv2.cvtColor(f, cv2.COLOR_BGR2GRAY), size, interpolation=cv2.INTER_AREA)
                for f in frames.pixels
            ]
        ).astype(np.float32)

    def repeat_rows(self, array: np.ndarray, times: int) -> np.ndarray:
        return np.repeat(array, times, axis=0)

    def crops_to_uint8(self, crops: np.ndarray) -> np.ndarray:
        return np.clip(crops + 0.5, 0, 255).astype(np.uint8)

    # -- masks ----------------------------------------------------------------------------------

    def constant_masks(self, mask: np.ndarray, count: int) -> np.ndarray:
        return np.broadcast_to(mask, (count, *mask.shape))

    def soften_masks(self, masks: np.ndarray, size: int) -> np.ndarray:
        return H.soften(masks, size)

    def class_masks(self, logits: np.ndarray, classes: np.ndarray) -> np.ndarray:
        return np.isin(logits.argmax(axis=1), classes).astype(np.float32)

    def min_masks(self, masks: list[np.ndarray]) -> np.ndarray:
        return H.combine(masks)

    def scale_masks(self, masks: np.ndarray, factor: float) -> np.ndarray:
        return masks * factor

    # -- painting -------------------------------------------------------------------------------

    def paste(self, frames: Frames, frame_index, crops, alpha, affines) -> None:
        """Each crop [F,S,S,3] (0–255) through its mask [F,S,S] into its frame, in table order."""
        size = crops.shape[1]
        for f in range(len(frame_index)):
            fi = int(frame_index[f])
            rect = footprint(affines[f], size, frames.size_of(fi))
            if rect is None:
                continue
            used = H.paste_one(self._writable(frames, fi), crops[f], alpha[f], affines[f], rect)
            x0, y0, x1, y1 = rect
            frames.painted.append((fi, x0, y0, x1 - x0, y1 - y0))
            _record_matte(frames, fi, x0, y0, used)

    def textures(self, textures: list[np.ndarray]) -> list[np.ndarray]:
        return textures

    def paint_faces(
        self, frames: Frames, regions: list[FaceRegion], textures: list[np.ndarray], settings: PaintSettings
    ) -> None:
        for r in regions:
            used = host_paint.paint_region(
                self._writable(frames, r.frame),
                textures[r.source],
                r.map_x,
                r.map_y,
                r.x0,
                r.y0,
                r.sigma,
                settings.colour,
                settings.colour_strength,
                settings.blend,
                settings.shading_limit,
                r.hold_eyes,
                settings.match_sharpness,
                r.visible,
                settings.match_grain,
                matte=frames.mattes is not None,
                edge=r.edge,
                tint_limit=settings.tint_limit,
                colour_fix=r.colour_fix,
                shade_limit=settings.shade_limit,
                rotation=r.rotation if settings.relight else None,
                strength=r.strength,
                streak=r.streak,
            )
            frames.painted.append((r.frame, r.x0, r.y0, r.width, r.height))
            _record_matte(frames, r.frame, r.x0, r.y0, used)

    def colour_stats(
        self, frames: Frames, regions: list[FaceRegion], textures: list[np.ndarray]
    ) -> np.ndarray:
        stats = [
            host_paint.region_colour_stats(
                frames.pixels[r.frame], textures[r.source], r.map_x, r.map_y, r.x0, r.y0, r.visible
            )
            for r in regions
        ]
        return np.stack(stats) if stats else np.zeros((0, 4, 3), np.float32)


def _record_matte(frames: Frames, index: int, x0: int, y0: int, alpha: np.ndarray | None) -> None:
    """Keep the alpha a paste used (the largest where faces overlap), when mattes are asked for."""
    if frames.mattes is None or alpha is None:
        return
    matte = frames.mattes.get(index)
    if matte is None:
        matte = frames.mattes[index] = np.zeros(frames.size_of(index), np.float32)
    h, w = alpha.shape
    region = matte[y0 : y0 + h, x0 : x0 + w]
    np.maximum(region, alpha[: region.shape[0], : region.shape[1]], out=region)
