"""`ffbatch models calibration-crops`: aligned crops of real faces, for checking and calibrating
FP16 / INT8 variants.

Faces are found by the default detector (on the host kernel set) in photos (the embedded test
photos, and any the user gives) and in frames sampled evenly from videos; each is written aligned
to the ffhq_512 template at 512 px as PNG, with the recogniser's raw embedding of the face
(`embeddings.npy`) and a `manifest.json` (models/calibration.py reads them back for any model's
template and size). `write_identity` turns the embeddings into a swapper's identity input with
the pipeline's own encoder, so calibration swaps real faces onto real faces.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from facefusion_batch.faces.align import align_crops
from facefusion_batch.faces.identity import IdentityEncoder, Recogniser, SourceIdentity, normalise, read_emap
from facefusion_batch.fsutil import write_json_atomically
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.models.calibration import (
    CROP_SIZE,
    CROP_TEMPLATE,
    EMBEDDINGS,
    MANIFEST,
    identity_path,
    load_embeddings,
)
from facefusion_batch.models.facefusion import learned_model
from facefusion_batch.runtime.session import Session
from facefusion_batch.video.decode.probe import probe
from facefusion_batch.video.decode.reader import FrameReader
from facefusion_batch.video.pictures.stills import is_still_image, read_image, write_image_atomically

log = logging.getLogger("ffbatch")

HOST = HostKernels()
PHOTOS = ("t1.jpg", "astronaut.png")  # embedded photos (models/assets.py) every set starts with


def _sampled_batches(video: Path, step: int, batch: int) -> Iterator[list[np.ndarray]]:
    """Every `step`-th frame of `video`, in lists of `batch`."""
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


def _frame_batches(source: Path, per_source: int, batch: int) -> Iterator[list[np.ndarray]]:
    if is_still_image(source):
        yield [read_image(source, "calibration-crops")]
        return
    step = max(1, (probe(source).frame_count or per_source) // per_source)
    yield from _sampled_batches(source, step, batch)


def extract_crops(
    sources: Iterable[Path],
    out_dir: Path,
    detector,
    recogniser: Recogniser,
    *,
    count: int = 500,
    batch: int = 8,
) -> int:
    """Write up to `count` aligned crops of the faces in `sources` (photos: every face; videos:
    frames sampled evenly, the count shared between them) with their embeddings; returns how many."""
    sources = list(sources)
    out_dir.mkdir(parents=True, exist_ok=True)
    videos = [s for s in sources if not is_still_image(s)]
    embeddings: list[np.ndarray] = []
    written = 0
    for source in sources:
        still = is_still_image(source)
        per_source = count if still else -(-(count - written) // max(1, len(videos)))
        taken = 0
        for frames in _frame_batches(source, per_source, batch):
            uploaded = HOST.upload(frames)
            table = detector(HOST, uploaded)  # one detector call per batch of sampled frames
            if len(table) == 0:
                continue
            crops, _ = align_crops(
                HOST, uploaded, table.frame_index, table.landmarks5, CROP_TEMPLATE, CROP_SIZE
            )
            found = recogniser.embed(HOST, uploaded, table)
            keep = min(count - written, per_source - taken, len(crops))
            for crop, embedding in zip(crops[:keep], found[:keep], strict=True):
                write_image_atomically(out_dir / f"crop_{written:05d}.png", crop)
                embeddings.append(embedding)
                written += 1
                taken += 1
            if written >= count or taken >= per_source:
                break
        if not still:
            videos.remove(source)
    np.save(out_dir / EMBEDDINGS, np.asarray(embeddings, np.float32).reshape(-1, 512))
    manifest = {
        "template": CROP_TEMPLATE,
        "size": CROP_SIZE,
        "count": written,
        "sources": [str(s) for s in sources],
        "embeddings": f"{EMBEDDINGS}: raw {recogniser.model.name} embeddings, row i <-> crop i",
    }
    write_json_atomically(out_dir / MANIFEST, manifest)
    log.info("%d aligned crops written to %s", written, out_dir)
    return written


def identity_inputs(
    name: str,
    embeddings: np.ndarray,
    *,
    model_path: Path | None = None,
    converter: Session | None = None,
) -> np.ndarray:
    """Swapper `name`'s identity input for each raw embedding (each face taken as a one-photo
    source), made by the pipeline's `IdentityEncoder` with its default weight and convention."""
    model = learned_model(name)
    emap = None
    if model.family == "inswapper":
        if model_path is None:
            raise ValueError("inswapper's identity input needs its model file (its emap)")
        emap = read_emap(model_path)
    rows = []
    for raw in np.asarray(embeddings, np.float32):
        unit = normalise(raw[None])[0]
        source = SourceIdentity(embedding=unit, raw=raw, unit_mean=unit)
        encoder = IdentityEncoder(model, source, emap=emap, converter=converter)
        rows.append(encoder(1)[0])
    return np.asarray(rows, np.float32)


def write_identity(
    directory: Path, name: str, *, model_path: Path | None = None, converter: Session | None = None
) -> Path:
    """identity/NAME.npy in calibration set `directory`, from its embeddings (`identity_inputs`)."""
    path = identity_path(directory, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    vectors = identity_inputs(name, load_embeddings(directory), model_path=model_path, converter=converter)
    np.save(path, vectors)
    return path
