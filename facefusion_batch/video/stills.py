"""Still images in and out: source and reference photos, a photo as the target, preview sheets."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from facefusion_batch.errors import InputError, OutputError
from facefusion_batch.fsutil import write_bytes_atomically

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def is_still_image(path: Path) -> bool:
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


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


def write_image_atomically(path: Path, image: np.ndarray) -> None:
    """`image` (BGR) encoded by the extension of `path`, written atomically."""
    ext = path.suffix.lower() or ".png"
    ok, data = cv2.imencode(ext, image)
    if not ok:
        raise InputError(f"output {path}: cannot write an image with extension {ext!r} (use .png or .jpg)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"output directory {parent} does not exist")
    write_bytes_atomically(path, data.tobytes(), make_parent=False)
