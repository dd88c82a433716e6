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

from facefusion_batch.errors import InputError, ModelError
from facefusion_batch.faces.align import align_crops, transform_points
from facefusion_batch.faces.identity import Convention, IdentityEncoder, MappedIdentity
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Array, Frames, Kernels
from facefusion_batch.models.facefusion import LearnedModel
from facefusion_batch.runtime.batching import HOST, BatchPolicy
from facefusion_batch.runtime.session import Session
from facefusion_batch.swap.masks import CropMasker, MaskSettings
from facefusion_batch.timing import StageTimer

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
    enhancer_weight: float = 0.5  # codeformer's fidelity input (FaceFusion's --face-enhancer-weight)
    embedding_convention: Convention | None = None  # None: the model publisher's
    masks: MaskSettings = MaskSettings()


class LearnedSwapper:
    """A stage: frames + face table → every listed face swapped by the model, masked and pasted.

    Align every face to the model's template (at the pixel-boost size), split the crops into
    tiles, run all tiles of all faces together (chunked only by a memory bound), join, mask,
    and paste back through the inverse of the alignment."""

    name = "swap"

    def __init__(
        self,
        session: Session,
        model: LearnedModel,
        identity: IdentityEncoder | MappedIdentity,
        masker: CropMasker,
        pixel_boost: int | None = None,
        policy: BatchPolicy = HOST,
    ) -> None:
        names = {t.name for t in session.inputs}
        missing = {"source", "target"} - names
        if missing:
            raise ModelError(
                f"{model.name}: the graph has no input {sorted(missing)} (it has {sorted(names)})"
            )
        crop = pixel_boost or model.size
        if crop % model.size:
            # a usage error found at build time, before any frame is decoded
            raise InputError(
                f"--pixel-boost {crop} is not a multiple of {model.name}'s {model.size} px "
                f"(use {', '.join(str(model.size * t) for t in (1, 2, 3, 4) if model.size * t <= 1024)})"
            )
        self.session = session
        self.model = model
        self.identity = identity
        self.masker = masker
        self.crop_size = crop
        self.tiles = crop // model.size
        self.max_batch = policy.items_per_call(model.size)
        self.timer = StageTimer()  # the pipeline hands it the job's; this stage times its parts

    def swap_crops(self, k: Kernels, crops: Array, identity: Array) -> Array:
        """Aligned crops (uint8-valued BGR) and one identity row per face → swapped crops (BGR
        float 0–255), every tile of every face in one model call (chunked by memory)."""
        m, t = self.model, self.tiles
        target = k.split_tiles(k.model_input(crops, m.mean, m.std), t)
        source = k.repeat_rows(identity, t * t)
        out = k.run(self.session, {"target": target, "source": source}, self.max_batch)
        joined = k.join_tiles(out[self.session.outputs[0].name], t)
        return k.model_output(joined, m.mean, m.std, denormalise=m.output_denormalise)

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        count, size = len(table), self.crop_size
        with self.timer.stage("align"):
            crops, affines = align_crops(
                k, frames, table.frame_index, table.landmarks5, self.model.template, size
            )
            mesh = None
            if self.masker.needs_mesh and table.mesh is not None:
                mesh = transform_points(table.mesh[..., :2], affines)
            masks = self.masker.before(k, crops, count, size, mesh)
        with self.timer.stage("swap"):
            identity = k.from_host(self.identity.for_table(table))
            swapped = self.swap_crops(k, crops, identity)
        with self.timer.stage("mask"):
            alpha = self.masker.after(k, swapped, masks, count, size)
        with self.timer.stage("paste"):
            k.paste(frames, table.frame_index, swapped, alpha, affines)
        return table
