"""Calibration sets of aligned face crops, and model inputs made from them.

`extract_crops` detects faces in videos with the default detector and writes
each one aligned to the ffhq_512 template at 512 px (the widest of the templates,
so every other crop can be cut from it) as PNG, with a `manifest.json`.
`load_for` re-cuts them for a given model's template and size; `feeds_for`
turns them into that model's inputs (identity inputs are seeded random unit
vectors, which is what a normalised embedding or latent is).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import cv2
import numpy as np

from facefusion_batch.faces.align import TEMPLATES, align_faces, template_to_template
from facefusion_batch.models.facefusion import learned_model

log = logging.getLogger("ffbatch")

CROP_TEMPLATE = "ffhq_512"
CROP_SIZE = 512
MANIFEST = "manifest.json"
# templates for models that have none of their own: they see the swapper's crop
MASK_TEMPLATE = "arcface_128"
RAW_EMBEDDING_NORM = 25.0  # typical length of a raw ArcFace embedding (converters take raw ones)


def _sampled_batches(video: Path, step: int, batch: int) -> Iterator[list[np.ndarray]]:
    """Every `step`-th frame of `video`, in lists of `batch`."""
    from facefusion_batch.video.reader import FrameReader

    pending: list[np.ndarray] = []
    with FrameReader(video) as reader:
        for i, frame in enumerate(reader):
            if i % step == 0:
                pending.append(frame.image)
            if len(pending) == batch:
                yield pending
                pending = []
    if pending:
        yield pending


def extract_crops(
    videos: Iterable[Path], out_dir: Path, detector, *, count: int = 500, batch: int = 8
) -> int:
    """Write up to `count` aligned crops from `videos`, frames sampled evenly; returns how many."""
    from facefusion_batch.video.probe import probe

    videos = list(videos)
    out_dir.mkdir(parents=True, exist_ok=True)
    per_video = -(-count // max(1, len(videos)))
    written = 0
    for video in videos:
        step = max(1, (probe(video).frame_count or per_video) // per_video)
        taken = 0
        for frames in _sampled_batches(video, step, batch):
            table = detector(frames)  # one detector call per batch of sampled frames
            crops, _ = align_faces(frames, table.frame_index, table.landmarks5, CROP_TEMPLATE, CROP_SIZE)
            for crop in crops[: min(count - written, per_video - taken)]:
                cv2.imwrite(str(out_dir / f"crop_{written:05d}.png"), crop)
                written += 1
                taken += 1
            if written >= count or taken >= per_video:
                break
    manifest = {
        "template": CROP_TEMPLATE,
        "size": CROP_SIZE,
        "count": written,
        "videos": [str(v) for v in videos],
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    log.info("%d aligned crops written to %s", written, out_dir)
    return written


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
    from facefusion_batch.faces.identity import to_model_input

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
        else:
            feeds[i.name] = to_model_input(crops, model)
    if "tensor(float16)" in {i.type for i in session.get_inputs()}:
        feeds = {k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in feeds.items()}
    return feeds


__all__ = ["TEMPLATES", "extract_crops", "feeds_for", "load_crops", "load_for"]
