"""Learned face swappers (FaceFusion's model files), every face of a batch in one model call.

The stage aligns each target face to the model's template, splits the crop into
pixel-boost tiles when the crop is larger than the model's input, and runs all
tiles of all faces together (chunked only by a memory bound). Output crops are
BGR float32 0–255, ready for masking and paste-back.

Pixel boost: a crop of k·S pixels is split into k² sub-images of S pixels by
taking every k-th pixel at each of the k² phase offsets; each is swapped and the
results are interleaved back, so a 128-px model paints a 256- or 512-px face.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from facefusion_batch.faces.align import align_faces
from facefusion_batch.faces.identity import to_model_input
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.models.facefusion import LearnedModel
from facefusion_batch.runtime.session import Session
from facefusion_batch.swap.infer import batch_limit, run_chunked
from facefusion_batch.swap.masks import MaskSettings

# When no --swapper-model is named, `auto` takes the first of these that is present
# (FaceFusion's default first, then the model most users already have).
AUTO_ORDER = ("hyperswap_1a_256", "inswapper_128", "hyperswap_1b_256", "hyperswap_1c_256", "simswap_256")


@dataclass(frozen=True)
class LearnedSettings:
    swapper_model: str | None = None  # None: `auto` picks from AUTO_ORDER, `learned` takes the first
    weight: float = 0.5  # FaceFusion's swapper weight: 0.5 = the source identity alone
    pixel_boost: int | None = None  # crop size; a multiple of the model's size (None: the model's)
    enhancer_model: str | None = None
    enhancer_blend: int = 80  # percent of the enhanced face kept
    masks: MaskSettings = MaskSettings()


def split_tiles(crops: np.ndarray, k: int) -> np.ndarray:
    """[F, k·S, k·S, C] → [F·k², S, S, C]; tile (a, b) holds pixels (a + k·i, b + k·j)."""
    if k == 1:
        return crops
    f, side, _, c = crops.shape
    s = side // k
    return crops.reshape(f, s, k, s, k, c).transpose(0, 2, 4, 1, 3, 5).reshape(f * k * k, s, s, c)


def join_tiles(tiles: np.ndarray, k: int) -> np.ndarray:
    """The inverse of `split_tiles`."""
    if k == 1:
        return tiles
    n, s, _, c = tiles.shape
    f = n // (k * k)
    return tiles.reshape(f, k, k, s, s, c).transpose(0, 3, 1, 4, 2, 5).reshape(f, s * k, s * k, c)


def from_model_output(out: np.ndarray, model: LearnedModel) -> np.ndarray:
    """Model output NCHW RGB → BGR float32 0–255 NHWC."""
    x = out.transpose(0, 2, 3, 1)
    if model.output_denormalise:
        x = x * np.asarray(model.std, np.float32) + np.asarray(model.mean, np.float32)
    return np.clip(x, 0.0, 1.0)[..., ::-1] * 255.0


class LearnedSwapper:
    """A stage: frames + face table + identity inputs → swapped crops and their affines."""

    def __init__(self, session: Session, model: LearnedModel, pixel_boost: int | None = None) -> None:
        names = {t.name for t in session.inputs}
        missing = {"source", "target"} - names
        if missing:
            raise ValueError(
                f"{model.name}: the graph has no input {sorted(missing)} (it has {sorted(names)})"
            )
        crop = pixel_boost or model.size
        if crop % model.size:
            raise ValueError(f"--pixel-boost {crop} is not a multiple of {model.name}'s {model.size} px")
        self.session = session
        self.model = model
        self.crop_size = crop
        self.tiles = crop // model.size
        self.max_batch = batch_limit(model.size)

    def crop(self, images: list[np.ndarray], table: FaceTable) -> tuple[np.ndarray, np.ndarray]:
        return align_faces(images, table.frame_index, table.landmarks5, self.model.template, self.crop_size)

    def swap_crops(self, crops: np.ndarray, identity: np.ndarray) -> np.ndarray:
        """crops [F,C,C,3] BGR uint8, identity [F,...] → swapped crops [F,C,C,3] BGR float32 0–255."""
        if len(crops) == 0:
            return crops.astype(np.float32)
        k2 = self.tiles * self.tiles
        target = to_model_input(split_tiles(crops, self.tiles), self.model)
        source = np.repeat(identity.astype(np.float32), k2, axis=0)
        out = run_chunked(self.session, {"target": target, "source": source}, self.max_batch)[0]
        return join_tiles(from_model_output(out, self.model), self.tiles)
