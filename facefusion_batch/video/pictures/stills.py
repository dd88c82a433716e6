"""Still images in and out: source and reference photos, a photo as the target, preview sheets."""

from __future__ import annotations

import struct
from pathlib import Path

import cv2
import numpy as np

from facefusion_batch.errors import InputError, OutputError
from facefusion_batch.fsutil import write_bytes_atomically

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def is_still_image(path: Path) -> bool:
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


# A photo larger than this is refused from its header, before decoding: a 1.6 MB PNG can claim
# 20000x20000 pixels (1.6 GB once decoded, more while alpha is flattened).
MAX_IMAGE_PIXELS = 100_000_000


def read_image(path: Path, what: str = "--source") -> np.ndarray:
    """Any still image as 8-bit BGR, upright (EXIF orientation applied): grayscale and alpha are
    flattened, 16-bit scaled. Its size is read from the header first and a huge one refused."""
    if not path.is_file():
        raise InputError(f"{what} {path}: no such file")
    data = np.fromfile(str(path), dtype=np.uint8)
    head = data.tobytes()
    size = image_size(head)
    if size is not None and size[0] * size[1] > MAX_IMAGE_PIXELS:
        raise InputError(
            f"{what} {path} is {size[0]}x{size[1]} pixels, more than the {MAX_IMAGE_PIXELS // 1_000_000} "
            "megapixels ffbatch reads; scale it down"
        )
    image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if image is None:
        raise InputError(f"{what} {path}: not an image OpenCV can read")
    image = apply_orientation(image, exif_orientation(head))
    if image.dtype != np.uint8:
        image = (image / 257).astype(np.uint8) if image.dtype == np.uint16 else image.astype(np.uint8)
    if image.ndim == 2:
        image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    elif image.shape[2] == 4:
        alpha = image[..., 3:4].astype(np.float32) / 255.0
        image = (image[..., :3] * alpha + 255 * (1 - alpha)).astype(np.uint8)
    return np.ascontiguousarray(image)


# the still formats that hold 16 bits per channel (cv2 writes uint16 to them as it is)
DEEP_IMAGE_SUFFIXES = (".png", ".tif", ".tiff")


def read_deep_image(path: Path) -> np.ndarray | None:
    """A 16-bit still's own pixels, upright, BGR (grey made BGR) or BGRA; None for an 8-bit one."""
    data = np.fromfile(str(path), dtype=np.uint8)
    image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if image is None or image.dtype != np.uint16:
        return None
    image = apply_orientation(image, exif_orientation(data.tobytes()))
    return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR) if image.ndim == 2 else np.ascontiguousarray(image)


def keep_depth(deep: np.ndarray, seen: np.ndarray, result: np.ndarray) -> np.ndarray:
    """The swap's 8-bit `result` of the 8-bit picture it `seen` put back into the 16-bit still
    `deep`: every pixel the swap left alone keeps its 16 bits (and alpha); the faces it changed
    are 8-bit precision scaled to 16."""
    changed = np.any(result != seen, axis=2)
    out = deep.copy()
    colour = out[..., :3]
    colour[changed] = result[changed].astype(np.uint16) * 257
    return out


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


_SUFFIX_FORMATS = {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png", ".bmp": "bmp", ".webp": "webp"}
_SUFFIX_FORMATS |= {".tif": "tiff", ".tiff": "tiff"}


def still_stream_map(source: Path, output: Path) -> list[dict[str, object]]:
    """The report's stream map of a still-image render: the one picture, what it was (from its
    header, whatever its name says) and what it became; its EXIF block is not carried."""
    with open(source, "rb") as fh:
        head = fh.read(1 << 20)
    size = image_size(head)
    entry: dict[str, object] = {"input": 0, "kind": "image", "codec": image_format(head)}
    if size is not None:
        entry["size"] = f"{size[0]}x{size[1]}"
    turned = exif_orientation(head)
    action = f"re-encoded to {_SUFFIX_FORMATS.get(output.suffix.lower(), output.suffix.lower().lstrip('.'))}"
    entry |= {"output": 0, "action": action + (f" (EXIF orientation {turned} applied)" if turned > 1 else "")}
    streams = [entry]
    if _has_exif(head):
        streams.append({"input": 0, "kind": "metadata", "codec": "exif", "action": "dropped",
                        "reason": "the output image holds the pixels only"})  # fmt: skip
    return streams


def image_format(data: bytes) -> str:
    """png, jpeg, bmp, webp or tiff from the first bytes of an image; "unknown" otherwise."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:2] == b"\xff\xd8":
        return "jpeg"
    if data[:2] == b"BM":
        return "bmp"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    return "unknown"


# --- headers: size and EXIF orientation without decoding ------------------------------------


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, JPEG, BMP, WebP or TIFF header; None when not recognised."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            return struct.unpack(">II", data[16:24])
        if data[:2] == b"\xff\xd8":
            return _jpeg_size(data)
        if data[:2] == b"BM" and len(data) >= 26:
            width, height = struct.unpack("<ii", data[18:26])
            return abs(width), abs(height)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data[:4] in (b"II*\x00", b"MM\x00*"):
            tags = _tiff_tags(data, (0x0100, 0x0101))
            if 0x0100 in tags and 0x0101 in tags:
                return tags[0x0100], tags[0x0101]
    except (struct.error, IndexError, ValueError):
        return None
    return None


def _jpeg_segments(data: bytes):
    """(marker, payload) of each JPEG header segment up to the start of scan."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD9)):
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        yield marker, data[i + 4 : i + 2 + length]
        if marker == 0xDA:
            return
        i += 2 + length


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    for marker, payload in _jpeg_segments(data):
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", payload[1:5])
            return width, height
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    kind, body = data[12:16], data[20:]
    if kind == b"VP8X":
        return 1 + int.from_bytes(body[4:7], "little"), 1 + int.from_bytes(body[7:10], "little")
    if kind == b"VP8L":
        bits = int.from_bytes(body[1:5], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if kind == b"VP8 ":
        width, height = struct.unpack("<HH", body[6:10])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _tiff_tags(tiff: bytes, wanted: tuple[int, ...]) -> dict[int, int]:
    """Integer values of `wanted` tags in a TIFF structure's first directory (EXIF is one)."""
    order = "<" if tiff[:2] == b"II" else ">"
    (offset,) = struct.unpack(order + "I", tiff[4:8])
    (count,) = struct.unpack(order + "H", tiff[offset : offset + 2])
    found: dict[int, int] = {}
    for n in range(min(count, 1024)):
        entry = tiff[offset + 2 + 12 * n : offset + 14 + 12 * n]
        tag, kind = struct.unpack(order + "HH", entry[:4])
        if tag in wanted and kind in (3, 4):  # SHORT, LONG
            fmt = "H" if kind == 3 else "I"
            found[tag] = struct.unpack(order + fmt, entry[8 : 8 + struct.calcsize(fmt)])[0]
    return found


def exif_orientation(data: bytes) -> int:
    """The EXIF orientation (1-8) of a JPEG, PNG (eXIf), WebP or TIFF; 1 when absent or unreadable."""
    try:
        tiff = _exif_block(data)
        if not tiff:
            return 1
        value = _tiff_tags(tiff, (0x0112,)).get(0x0112, 1)
        return value if 1 <= value <= 8 else 1
    except (struct.error, IndexError, ValueError):
        return 1


def _has_exif(data: bytes) -> bool:
    try:
        return bool(_exif_block(data)) and data[:4] not in (b"II*\x00", b"MM\x00*")  # TIFF: its own tags
    except (struct.error, IndexError, ValueError):
        return False


def _exif_block(data: bytes) -> bytes | None:
    """The EXIF block (TIFF-structured) of a JPEG (APP1), PNG (eXIf), WebP (EXIF) or a TIFF itself."""
    if data[:2] == b"\xff\xd8":
        for marker, payload in _jpeg_segments(data):
            if marker == 0xE1 and payload[:6] == b"Exif\x00\x00":
                return payload[6:]
        return None
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return _chunk(data, 8, b"eXIf", ">", b"IDAT")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        tiff = _chunk(data, 12, b"EXIF", "<", None)
        return tiff[6:] if tiff is not None and tiff[:6] == b"Exif\x00\x00" else tiff
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return data
    return None


def _chunk(data: bytes, start: int, name: bytes, order: str, stop: bytes | None) -> bytes | None:
    """The body of the first chunk `name` of a PNG (big-endian sizes, name after size) or RIFF
    (little-endian) file."""
    i = start
    while i + 8 <= len(data):
        if order == ">":
            (size,) = struct.unpack(">I", data[i : i + 4])
            kind, body, step = data[i + 4 : i + 8], data[i + 8 : i + 8 + size], 12 + size
        else:
            kind = data[i : i + 4]
            (size,) = struct.unpack("<I", data[i + 4 : i + 8])
            body, step = data[i + 8 : i + 8 + size], 8 + size + (size & 1)
        if kind == name:
            return body
        if kind == stop:
            return None
        i += step
    return None


def apply_orientation(image: np.ndarray, orientation: int) -> np.ndarray:
    """Turn a decoded picture upright by its EXIF orientation (a phone photo taken sideways)."""
    if orientation == 2:
        return cv2.flip(image, 1)
    if orientation == 3:
        return cv2.rotate(image, cv2.ROTATE_180)
    if orientation == 4:
        return cv2.flip(image, 0)
    if orientation == 5:
        return cv2.transpose(image)
    if orientation == 6:
        return cv2.rotate(image, cv2.ROTATE_90_CLOCKWISE)
    if orientation == 7:
        return cv2.flip(cv2.transpose(image), -1)
    if orientation == 8:
        return cv2.rotate(image, cv2.ROTATE_90_COUNTERCLOCKWISE)
    return image
