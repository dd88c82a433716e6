"""Face enhancers (GFPGAN, GPEN, CodeFormer): every face of a batch restored in one model call.

As in FaceFusion, the enhancer runs after the swap on the pasted frame: each
face is re-cropped with the enhancer's own template and size, restored, pasted
back through a box mask (and the occlusion mask when enabled), and the result
kept at `blend` percent.
"""

from __future__ import annotations

import numpy as np

from facefusion_batch.faces.align import align_crops
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.kernels.host_ops import box_mask
from facefusion_batch.models.facefusion import LearnedModel
from facefusion_batch.runtime.batching import HOST, BatchPolicy
from facefusion_batch.runtime.session import Session
from facefusion_batch.swap.masks import Occluder

CODEFORMER_FIDELITY = 0.5  # FaceFusion's default --face-enhancer-weight
ENHANCER_FAMILIES = ("gfpgan", "gpen", "codeformer", "restoreformer")


class FaceEnhancer:
    """A stage: frames + face table → frames with every listed face enhanced."""

    name = "enhance"

    def __init__(
        self,
        session: Session,
        model: LearnedModel,
        *,
        blend: int = 80,
        mask_blur: float = 0.3,
        occluder: Occluder | None = None,
        policy: BatchPolicy = HOST,
        weight: float = CODEFORMER_FIDELITY,
    ) -> None:
        names = [t.name for t in session.inputs]
        self.input_name = "input" if "input" in names else names[0]
        self.weight_name = "weight" if "weight" in names else None
        self.session = session
        self.model = model
        self.blend = blend / 100.0
        self.weight = float(weight)  # fed to models with a `weight` input (codeformer's fidelity)
        self.mask_blur = mask_blur
        self.occluder = occluder
        self.max_batch = policy.items_per_call(model.size, channels=64)

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if len(table) == 0 or self.blend <= 0:
            return table
        m, size, count = self.model, self.model.size, len(table)
        crops, affines = align_crops(k, frames, table.frame_index, table.landmarks5, m.template, size)
        feeds = {self.input_name: k.model_input(crops, m.mean, m.std)}
        if self.weight_name:
            feeds[self.weight_name] = k.from_host(np.array([self.weight], np.float64))
        out = k.run(self.session, feeds, self.max_batch)[self.session.outputs[0].name]
        # FaceFusion rounds the restored face to whole levels before pasting it
        restored = k.model_output(
            out, m.mean, m.std, denormalise=m.output_denormalise, pre_clip=m.output_denormalise
        )
        enhanced = k.crops_to_uint8(restored)
        masks = [k.constant_masks(box_mask(size, self.mask_blur), count)]
        if self.occluder is not None:
            masks.append(self.occluder(k, crops, count, size))
        # blending the pasted frame with the original at `blend` is the same as scaling the mask
        alpha = k.scale_masks(k.min_masks(masks), self.blend)
        k.paste(frames, table.frame_index, enhanced, alpha, affines)
        return table
