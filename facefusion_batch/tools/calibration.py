"""`ffbatch models calibration-crops`: aligned face crops from videos, for INT8 calibration.

Faces are found by the default detector (on the host kernel set) and each is written aligned
to the ffhq_512 template at 512 px as PNG, with a `manifest.json` (models/calibration.py reads
them back for any model's template and size).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from facefusion_batch.faces.align import align_crops
from facefusion_batch.fsutil import write_json_atomically
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.models.calibration import CROP_SIZE, CROP_TEMPLATE, MANIFEST
from facefusion_batch.video.probe import probe
from facefusion_batch.video.reader import FrameReader
from facefusion_batch.video.stills import write_image_atomically

log = logging.getLogger("ffbatch")

HOST = HostKernels()


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


def extract_crops(
    videos: Iterable[Path], out_dir: Path, detector, *, count: int = 500, batch: int = 8
) -> int:
    """Write up to `count` aligned crops from `videos`, frames sampled evenly; returns how many."""
    videos = list(videos)
    out_dir.mkdir(parents=True, exist_ok=True)
    per_video = -(-count // max(1, len(videos)))
    written = 0
    for video in videos:
        step = max(1, (probe(video).frame_count or per_video) // per_video)
        taken = 0
        for frames in _sampled_batches(video, step, batch):
            batch = HOST.upload(frames)
            table = detector(HOST, batch)  # one detector call per batch of sampled frames
            crops, _ = align_crops(HOST, batch, table.frame_index, table.landmarks5, CROP_TEMPLATE, CROP_SIZE)
            for crop in crops[: min(count - written, per_video - taken)]:
                write_image_atomically(out_dir / f"crop_{written:05d}.png", crop)
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
    write_json_atomically(out_dir / MANIFEST, manifest)
    log.info("%d aligned crops written to %s", written, out_dir)
    return written
