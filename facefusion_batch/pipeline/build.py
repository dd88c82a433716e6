"""Build the default pipeline from settings: resolve models, load sessions, prepare sources."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from facefusion_batch.errors import InputError, NoFaceError
from facefusion_batch.faces.detect import DetectorSettings, YuNetDetector
from facefusion_batch.faces.mesh import FaceMesh, MeshSettings
from facefusion_batch.models import store
from facefusion_batch.models.topology import load_topology
from facefusion_batch.pipeline.report import StageTimer
from facefusion_batch.pipeline.stages import FaceSwapPipeline, select_faces
from facefusion_batch.runtime.backends import select_backend
from facefusion_batch.runtime.session import Backend
from facefusion_batch.swap.classical import ClassicalSettings, ClassicalSwapper, SourceFace, prepare_source
from facefusion_batch.swap.regions import FaceRegions

log = logging.getLogger("ffbatch")

DETECTOR_MODEL = "yunet_2023mar_batch"
MESH_MODEL = "face_mesh_468"
TOPOLOGY = "face_mesh_topology"


@dataclass
class Models:
    backend: Backend
    detector: YuNetDetector
    mesh: FaceMesh
    triangles: np.ndarray
    regions: FaceRegions
    paths: dict[str, str]


def load_models(
    backend_name: str,
    *,
    threads: int | None,
    models_dir: Path | None,
    detector: DetectorSettings = DetectorSettings(),
    mesh: MeshSettings = MeshSettings(),
) -> Models:
    backend = select_backend(backend_name, threads=threads)
    paths = {
        name: store.model_path(name, models_dir=models_dir) for name in (DETECTOR_MODEL, MESH_MODEL, TOPOLOGY)
    }
    topology = load_topology(paths[TOPOLOGY])
    return Models(
        backend=backend,
        detector=YuNetDetector(backend.load(paths[DETECTOR_MODEL], label=DETECTOR_MODEL), detector),
        mesh=FaceMesh(backend.load(paths[MESH_MODEL], label=MESH_MODEL), mesh),
        triangles=topology.triangles,
        regions=FaceRegions.from_topology(topology),
        paths={k: str(v) for k, v in paths.items()},
    )


def read_image(path: Path, what: str = "--source") -> np.ndarray:
    """Any still image as 8-bit BGR: grayscale and alpha are flattened, 16-bit scaled."""
    if not path.is_file():
        raise InputError(f"{what} {path}: no such file")
    data = np.fromfile(str(path), dtype=np.uint8)
    image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if image is None:
        raise InputError(f"{what} {path}: not an image OpenCV can read")
    if image.dtype != np.uint8:
        image = (image / 257).astype(np.uint8) if image.dtype == np.uint16 else image.astype(np.uint8)
    if image.ndim == 2:
        image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    elif image.shape[2] == 4:
        alpha = image[..., 3:4].astype(np.float32) / 255.0
        image = (image[..., :3] * alpha + 255 * (1 - alpha)).astype(np.uint8)
    return np.ascontiguousarray(image)


def prepare_sources(
    models: Models, source_paths: tuple[Path, ...], settings: ClassicalSettings
) -> list[SourceFace]:
    """Detect and mesh every source image in one batch; keep the largest face of each."""
    images = [read_image(p) for p in source_paths]
    # the detector letterboxes each image, so photos of different sizes share one batch
    table = models.detector(images)
    table = models.mesh(images, select_faces(table, "one", len(images)))
    found = set(table.frame_index.tolist())
    missing = [str(p) for i, p in enumerate(source_paths) if i not in found]
    if missing:
        raise NoFaceError(f"no face found in source image {', '.join(missing)}")
    sources = []
    for i in range(len(images)):
        row = int(np.flatnonzero(table.frame_index == i)[0])
        sources.append(prepare_source(images[i], table.mesh[row], models.regions, settings))
    return sources


def build_pipeline(
    models: Models,
    source_paths: tuple[Path, ...],
    swap: ClassicalSettings,
    faces_mode: str,
    timer: StageTimer | None = None,
) -> FaceSwapPipeline:
    sources = prepare_sources(models, source_paths, swap)
    swapper = ClassicalSwapper(sources, models.triangles, models.regions, swap)
    return FaceSwapPipeline(models.detector, models.mesh, swapper, faces_mode, timer)
