"""Session fixtures shared by the face tests: models loaded once, the test photos, a face clip.

The real default models and the photos come from the store (`$FFBATCH_HOME`,
fetched on first use; `make test` fetches them beforehand). Images handed out
here are read-only, so a stage that writes into its input fails loudly instead
of corrupting the next test.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import cv2
import hostk
import numpy as np
import pytest
import standins
from media import make_clip

from facefusion_batch.faces.table import FaceTable
from facefusion_batch.models.assets import asset_path
from facefusion_batch.pipeline.build import Models, load_models
from facefusion_batch.video.pictures.stills import read_image

FACE_CLIP_SIZE = (640, 360)  # (width, height) as displayed
FACE_CLIP_FRAMES = 24


def pytest_configure(config: pytest.Config) -> None:
    """Each xdist worker on cores of its own (its share of this process's affinity mask): the
    renders' thread pools size themselves to it, so two workers never spin on one core.

    A suite started from a shell without job control (`nohup`, `cmd &` in a script) inherits
    SIGINT and SIGQUIT ignored, and ffbatch rightly keeps an ignored signal ignored: the signal
    cases would test the launcher. The suite stands in for an interactive shell, so both go back
    to their defaults here (in this process, and so in every child it starts)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if worker.startswith("gw") and 2 <= count <= len(cores):
        os.sched_setaffinity(0, cores[int(worker[2:]) % count :: count])


def _read_only(image: np.ndarray) -> np.ndarray:
    image = np.ascontiguousarray(image)
    image.setflags(write=False)
    return image


@pytest.fixture(scope="session")
def models() -> Models:
    return load_models("cpu", threads=None, models_dir=None)


@pytest.fixture(scope="session")
def t1_path() -> Path:
    return asset_path("t1.jpg")


@pytest.fixture(scope="session")
def astronaut_path() -> Path:
    return asset_path("astronaut.png")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A module's source photo: the astronaut written as a PNG of its own."""
    path = tmp_path_factory.mktemp("source") / "face.png"
    cv2.imwrite(str(path), cv2.imread(str(asset_path("astronaut.png"))))
    return path


@pytest.fixture(scope="session")
def t1_image(t1_path) -> np.ndarray:
    """t1.jpg (1280x886, six faces), BGR uint8, read-only."""
    return _read_only(read_image(t1_path))


@pytest.fixture(scope="session")
def astronaut_image(astronaut_path) -> np.ndarray:
    """astronaut.png (512x512, one face), BGR uint8, read-only."""
    return _read_only(read_image(astronaut_path))


@pytest.fixture(scope="session")
def astronaut_mesh(models, astronaut_image) -> np.ndarray:
    """The mesh of astronaut.png's face as the default pipeline sees it: detected, then meshed."""
    table = hostk.analyse(models, [astronaut_image])
    return table.mesh[int(np.argmax(table.areas()))]


@pytest.fixture(scope="session")
def t1_small(t1_image) -> np.ndarray:
    """t1 resized to 640 wide (640x443), the picture the face clips pan over."""
    h, w = t1_image.shape[:2]
    size = (640, round(h * 640 / w))
    return _read_only(cv2.resize(t1_image, size, interpolation=cv2.INTER_AREA))


@pytest.fixture(scope="session")
def t1_faces(models, t1_image) -> FaceTable:
    """t1's faces as the default pipeline sees them: detected, then meshed."""
    return hostk.analyse(models, [t1_image])


@pytest.fixture(scope="session")
def clip_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("face_clips")


@pytest.fixture(scope="session")
def face_clip(clip_dir, t1_small) -> Path:
    """24 frames of 640x360 panning down over t1 (up to six faces per frame), 25 fps, AAC audio."""
    return make_clip(
        clip_dir / "faces.mp4",
        image=t1_small,
        size=FACE_CLIP_SIZE,
        frames=FACE_CLIP_FRAMES,
        audio="aac",
    )


@pytest.fixture(scope="module")
def private_home(tmp_path_factory, models: Models) -> Path:
    """A copy of the model store per test module, so a module may break its files."""
    from facefusion_batch import paths

    return standins.copy_store(paths.ffbatch_home(), tmp_path_factory.mktemp("home"))
