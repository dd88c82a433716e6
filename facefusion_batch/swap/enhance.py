"""Face enhancers (GFPGAN, GPEN, CodeFormer): every face of a batch restored in one model call.

As in FaceFusion, the enhancer runs after the swap on the pasted frame: each
face is re-cropped with the enhancer's own template and size, restored, pasted
back through a box mask (and the occlusion mask when enabled), and the result
kept at `blend` percent.
"""

from __future__ import annotations

import numpy as np

from facefusion_batch.faces.align import align_faces
from facefusion_batch.faces.identity import to_model_input
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.models.facefusion import LearnedModel
from facefusion_batch.runtime.session import Session
from facefusion_batch.swap.infer import batch_limit, run_chunked
from facefusion_batch.swap.learned import from_model_output
from facefusion_batch.swap.masks import Occluder, box_mask, combine
from facefusion_batch.swap.paste import paste_back

CODEFORMER_FIDELITY = 0.5  # FaceFusion's default --face-enhancer-weight


class FaceEnhancer:
    """A stage: frames + face table → frames with every listed face enhanced."""

    def __init__(
        self,
        session: Session,
        model: LearnedModel,
        *,
        blend: int = 80,
        mask_blur: float = 0.3,
        occluder: Occluder | None = None,
    ) -> None:
        names = [t.name for t in session.inputs]
        self.input_name = "input" if "input" in names else names[0]
        self.weight_name = "weight" if "weight" in names else None
        self.session = session
        self.model = model
        self.blend = blend / 100.0
        self.mask_blur = mask_blur
        self.occluder = occluder
        self.max_batch = batch_limit(model.size, channels=64)

    def __call__(self, frames: list[np.ndarray], table: FaceTable) -> list[np.ndarray]:
        if len(table) == 0 or self.blend <= 0:
            return frames
        size = self.model.size
        crops, affines = align_faces(frames, table.frame_index, table.landmarks5, self.model.template, size)
        feeds = {self.input_name: to_model_input(crops, self.model)}
        if self.weight_name:
            feeds[self.weight_name] = np.array([CODEFORMER_FIDELITY], np.float64)
        out = run_chunked(self.session, feeds, self.max_batch)[0]
        enhanced = from_model_output(
            np.clip(out, -1.0, 1.0) if self.model.output_denormalise else out, self.model
        )
        masks = [np.broadcast_to(box_mask(size, self.mask_blur), crops.shape[:3])]
        if self.occluder is not None:
            masks.append(self.occluder(crops))
        # blending the pasted frame with the original at `blend` is the same as scaling the mask
        alpha = combine(masks) * self.blend
        return paste_back(frames, table.frame_index, enhanced, alpha, affines)
