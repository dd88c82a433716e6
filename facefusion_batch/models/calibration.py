"""Model inputs made from a calibration set of aligned face crops (INT8 quantisation).

A calibration set (`ffbatch models calibration-crops`, tools/calibration.py) holds faces
aligned to the ffhq_512 template at 512 px (the widest of the templates, so every other crop
can be cut from it) as PNG, with a `manifest.json`, the recogniser's raw embedding of each
(`embeddings.npy`, row i ↔ crop i) and, per swapper prepared with it, the swapper's identity
input made from each of those embeddings by the pipeline's own encoder (`identity/NAME.npy`,
tools/calibration.py). `load_for` re-cuts the crops for a given model's template and size;
`feeds_for` turns them into that model's inputs, each crop swapped with the next crop's face.
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
EMBEDDINGS = "embeddings.npy"  # raw recogniser embeddings [N,512], row i <-> crop i
IDENTITY_DIR = "identity"  # NAME.npy: swapper NAME's identity input from each embedding
# templates for models that have none of their own: they see the swapper's crop
MASK_TEMPLATE = "arcface_128"
RAW_EMBEDDING_NORM = 25.0  # typical length of a raw ArcFace embedding (converters take raw ones)


def _read(path: Path) -> np.ndarray:
    image = cv2.imread(str(path))
    if image is None:
        raise FileNotFoundError(f"cannot read the crop {path}")
    return image


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
            cv2.warpAffine(_read(f), m, (size, size), flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REPLICATE)
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


def load_embeddings(directory: Path, limit: int | None = None) -> np.ndarray:
    """The recogniser's raw embeddings of the set's crops, [N,512] float32 (row i <-> crop i)."""
    path = Path(directory) / EMBEDDINGS
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory} has no face embeddings ({EMBEDDINGS}); make the set again with "
            "ffbatch models calibration-crops -o DIR"
        )
    return np.load(path)[:limit].astype(np.float32)


def identity_path(directory: Path, name: str) -> Path:
    return Path(directory) / IDENTITY_DIR / f"{name.split('@', 1)[0]}.npy"


def needs_identity(name: str) -> bool:
    """Whether model `name` takes an identity vector (a swapper's source embedding or latent)."""
    model = learned_model(name)
    return model.role == "swapper" and model.family not in ("blendswap", "uniface")


def identity_for(name: str, directory: Path | None, count: int) -> np.ndarray | None:
    """Identity inputs of `name` for the first `count` crops: raw embeddings for a converter, the
    swapper's identity input (identity/NAME.npy) for a swapper, None for other models."""
    model = learned_model(name)
    if directory is None or not (model.role == "converter" or needs_identity(name)):
        return None
    if model.role == "converter":
        return load_embeddings(directory, count)
    path = identity_path(directory, name)
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory} holds no identity inputs for {name} ({path.name}); "
            f"ffbatch models prepare {name.split('@', 1)[0]} --calibration-dir {directory} makes them"
        )
    return np.load(path)[:count].astype(np.float32)


def feeds_for(
    name: str,
    session,
    crops: np.ndarray | None,
    rng: np.random.Generator,
    count: int,
    identity: np.ndarray | None = None,
):
    """Inputs for model `name` from crops (BGR uint8 at its template and size), by input name.

    `identity` (row i <-> crop i, `identity_for`) feeds the identity input, each crop given the
    next crop's face as a swap does; without crops (no calibration set) the crops are smooth
    seeded images and the identity seeded unit vectors, and say so nowhere else: the caller does.
    """
    model = learned_model(name)
    _, size = _crop_geometry(name)
    if crops is None:
        crops = synthetic_crops(count, size, rng)
    n = len(crops)
    if identity is not None:
        if len(identity) < n:
            raise ValueError(f"{len(identity)} identity inputs for {n} crops")
        identity = np.roll(identity[:n], 1, axis=0) if model.role == "swapper" else identity[:n]
    elif model.role == "converter" or needs_identity(name):
        identity = _unit(rng, n) * (RAW_EMBEDDING_NORM if model.role == "converter" else 1.0)
    feeds: dict[str, np.ndarray] = {}
    for i in session.get_inputs():
        shape = list(i.shape)
        if model.role == "converter" or (i.name == "source" and len(shape) == 2):
            feeds[i.name] = np.ascontiguousarray(identity, np.float32)
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
            mean, std = np.asarray(model.mean, np.float32), np.asarray(model.std, np.float32)
            x = (crops[..., ::-1].astype(np.float32) / 255.0 - mean) / std
            feeds[i.name] = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    if "tensor(float16)" in {i.type for i in session.get_inputs()}:
        feeds = {k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in feeds.items()}
    return feeds


def output_levels(name: str, output: np.ndarray) -> np.ndarray | None:
    """A model's image output in levels (0–255, float), or None when its output is no image."""
    model = learned_model(name)
    if model.role not in ("swapper", "enhancer", "occluder") or output.ndim != 4:
        return None
    x = output.astype(np.float64)
    if model.output_denormalise:
        x = x * np.asarray(model.std).reshape(1, -1, 1, 1) + np.asarray(model.mean).reshape(1, -1, 1, 1)
    return x * 255.0


__all__ = [
    "EMBEDDINGS",
    "MANIFEST",
    "feeds_for",
    "identity_for",
    "identity_path",
    "load_crops",
    "load_embeddings",
    "load_for",
    "output_levels",
]
