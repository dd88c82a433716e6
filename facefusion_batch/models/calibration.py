"""Model inputs made from a calibration set of aligned face crops (INT8 quantisation).

A calibration set (`ffbatch models calibration-crops`, tools/calibration.py) holds faces
aligned to the ffhq_512 template at 512 px (the widest of the templates, so every other crop
can be cut from it) as PNG, with a `manifest.json`. `load_for` re-cuts them for a given
model's template and size; `feeds_for` turns them into that model's inputs (identity inputs
are seeded random unit vectors, which is what a normalised embedding or latent is).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import cv2
import numpy as np

from .facefusion import learned_model
from .templates import template_to_template

log = logging.getLogger("ffbatch")

CROP_TEMPLATE = "ffhq_512"
CROP_SIZE = 512
MANIFEST = "manifest.json"
# templates for models that have none of their own: they see the swapper's crop
MASK_TEMPLATE = "arcface_128"
RAW_EMBEDDING_NORM = 25.0  # typical length of a raw ArcFace embedding (converters take raw ones)


def load_crops(directory: Path, template: str, size: int, limit: int | None = None) -> np.ndarray:
    """The calibration crops re-cut to `template` at `size` px: [N,size,size,3] BGR uint8."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(
            f"{directory} is not a calibration set (no {MANIFEST}); make one with "
            "ffbatch models calibration-crops VIDEO... -o DIR"
        )
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    files = sorted(directory.glob("crop_*.png"))[:limit]
    if not files:
        raise FileNotFoundError(f"{directory} holds no crops")
    m = template_to_template(manifest["template"], int(manifest["size"]), template, size)
    return np.stack(
        [
            cv2.warpAffine(
                cv2.imread(str(f)), m, (size, size), flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REPLICATE
            )
            for f in files
        ]
    )


def _crop_geometry(name: str) -> tuple[str, int]:
    model = learned_model(name)
    return model.template or MASK_TEMPLATE, model.size or 256


def load_for(name: str, directory: Path, limit: int | None) -> np.ndarray:
    template, size = _crop_geometry(name)
    return load_crops(directory, template, size, limit)


def synthetic_crops(count: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth seeded images (low-frequency noise) when no calibration set is given."""
    low = rng.uniform(0, 255, (count, 8, 8, 3)).astype(np.float32)
    return (
        np.stack([cv2.resize(x, (size, size), interpolation=cv2.INTER_CUBIC) for x in low])
        .clip(0, 255)
        .astype(np.uint8)
    )


def _unit(rng: np.random.Generator, count: int) -> np.ndarray:
    v = rng.standard_normal((count, 512)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def feeds_for(name: str, session, crops: np.ndarray | None, rng: np.random.Generator, count: int):
    """Inputs for model `name` from crops (BGR uint8 at its template and size), by input name."""
    model = learned_model(name)
    _, size = _crop_geometry(name)
    if crops is None:
        crops = synthetic_crops(count, size, rng)
    n = len(crops)
    feeds: dict[str, np.ndarray] = {}
    for i in session.get_inputs():
        shape = list(i.shape)
        if model.role == "converter":
            feeds[i.name] = _unit(rng, n) * RAW_EMBEDDING_NORM
        elif i.name == "source" and len(shape) == 2:
            feeds[i.name] = _unit(rng, n)
        elif i.name == "source":  # blendswap / uniface: another face, RGB 0–1
            side = int(shape[-1])
            faces = np.stack(
                [cv2.resize(c, (side, side), interpolation=cv2.INTER_AREA) for c in np.roll(crops, 1, 0)]
            )
            feeds[i.name] = np.ascontiguousarray(faces[..., ::-1].transpose(0, 3, 1, 2), np.float32) / 255.0
        elif len(shape) <= 1:  # codeformer's fidelity weight
            feeds[i.name] = np.array([0.5], np.float64)
        elif model.role == "occluder":
            feeds[i.name] = crops.astype(np.float32) / 255.0
        else:  # the model's own normalisation: RGB, /255, (x - mean) / std, NCHW
            x = (crops[..., ::-1].astype(np.float32) / 255.0 - np.float32(model.mean)) / np.float32(model.std)
            feeds[i.name] = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    if "tensor(float16)" in {i.type for i in session.get_inputs()}:
        feeds = {k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in feeds.items()}
    return feeds


__all__ = ["MANIFEST", "feeds_for", "load_crops", "load_for"]
