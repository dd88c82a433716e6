"""Image sequences out: `-o shot/frame.%06d.exr` (or .dpx .tif .tiff .png), one file per frame.

VFX pipelines number frames from 1001 for a video input (`--start-number`). Each frame is
encoded by FFmpeg's image encoder for the extension (PNG and TIFF 8- or 16-bit RGB, DPX,
OpenEXR half/float RGB) into a hidden temporary name beside its final one; `close()` renames
them all into place, `abort()` removes them, so a failed render leaves no partial sequence.
An EXR plate's own values go back out as they came (half stays half; video/pictures/colour.py says how
the face stages see them); a video's frames become EXR as display-referred RGB scaled to 0..1.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from fractions import Fraction
from pathlib import Path
from typing import cast, overload

import av
import av.error
import numpy as np
from av.video.codeccontext import VideoCodecContext

from facefusion_batch.errors import FfbatchError, InputError, OutputError
from facefusion_batch.video.decode.probe import VideoInfo, sequence_numbers
from facefusion_batch.video.pictures.colour import FLOAT_PIX_FMTS, HALF_PIX_FMTS
from facefusion_batch.video.pictures.native import NativePicture, rgb_box
from facefusion_batch.video.pictures.planes import BGR24, NATIVE, YUV420P, picture_shape

log = logging.getLogger("ffbatch")

# extension -> (FFmpeg image encoder, default pixel format)
SEQUENCE_CODECS = {
    ".png": ("png", "rgb24"),
    ".tif": ("tiff", "rgb24"),
    ".tiff": ("tiff", "rgb24"),
    ".dpx": ("dpx", "rgb24"),
    ".exr": ("exr", "gbrpf32le"),
}
# the default for an input deeper than 8 bits (written at its precision, video/pictures/native.py); DPX
# keeps a 10- or 12-bit input's own depth (gbrp10le/gbrp12le, what 10-bit DPX plates hold)
SEQUENCE_DEEP = {".png": "rgb48be", ".tif": "rgb48le", ".tiff": "rgb48le", ".dpx": "rgb48le"}
DEFAULT_START_NUMBER = 1001
_PATTERN = re.compile(r"%(0\d+)?d")


_PADDING = re.compile(r"#+|@+")


@overload
def printf_pattern(path: Path) -> Path: ...
@overload
def printf_pattern(path: str) -> str: ...
def printf_pattern(path: Path | str) -> Path | str:
    """A sequence written with `####` (Nuke, Deadline: one digit per #) or `@@@@` (RV: one digit
    per @) padding as FFmpeg's printf pattern (`%04d`); any other path as it is. Only a name with
    one such run and no printf number of its own is read as a sequence."""
    text = str(path)
    name = Path(text).name
    runs = _PADDING.findall(name)
    if len(runs) != 1 or _PATTERN.search(name) or "%" in name:
        return path
    converted = name.replace(runs[0], f"%0{len(runs[0])}d", 1)
    result = str(Path(text).with_name(converted))
    return Path(result) if isinstance(path, Path) else result


def is_sequence_pattern(path: Path | str) -> bool:
    """A file name with a printf frame number (frame.%06d.exr)."""
    return bool(_PATTERN.search(Path(path).name))


def default_start_number(input: Path) -> int:
    """An image sequence input keeps its own numbers; a video's frames start at 1001, as in VFX."""
    numbers = sequence_numbers(input) if is_sequence_pattern(input) else []
    return numbers[0] if numbers else DEFAULT_START_NUMBER


def frame_path(pattern: Path, number: int) -> Path:
    return pattern.parent / (pattern.name % number)


def sequence_codec(pattern: Path, pix_fmt: str | None, bits: int = 8) -> tuple[str, str]:
    """(encoder, pixel format) for the pattern's extension (16-bit RGB by default for an input of
    more than 8 `bits`); InputError when it cannot be written."""
    name = pattern.name
    if len(_PATTERN.findall(name)) != 1 or name.count("%") != 1:
        raise InputError(f"output {pattern}: an image sequence needs exactly one frame number such as %06d")
    suffix = pattern.suffix.lower()
    if suffix not in SEQUENCE_CODECS:
        raise InputError(
            f"output {pattern}: image sequences are written as {', '.join(SEQUENCE_CODECS)}, not {suffix!r}"
        )
    codec, default = SEQUENCE_CODECS[suffix]
    try:
        formats = [f.name for f in av.Codec(codec, "w").video_formats or ()]
    except (av.codec.codec.UnknownCodecError, ValueError, av.error.FFmpegError):
        raise InputError(f"output {pattern}: this FFmpeg build cannot write {suffix} images") from None
    deep = f"gbrp{bits}le" if suffix == ".dpx" and bits in (10, 12) else SEQUENCE_DEEP.get(suffix, default)
    chosen = pix_fmt or (deep if bits > 8 else default)  # a 10-bit DPX plate comes back 10-bit
    if chosen not in formats:
        raise InputError(
            f"--pix-fmt {chosen!r} cannot be written as {suffix} images; choose one of: {', '.join(formats)}"
        )
    return codec, chosen


def first_existing_frame(pattern: Path, first: int, count: int) -> Path | None:
    """The lowest-numbered file among frames first .. first + count - 1 that exists already."""
    parent = pattern.parent if str(pattern.parent) else Path(".")
    try:
        names = set(os.listdir(parent))
    except OSError:
        return None
    for number in range(first, first + count):
        path = frame_path(pattern, number)
        if path.name in names:
            return path
    return None


def check_sequence_output(
    pattern: Path, pix_fmt: str | None, start_number: int, overwrite: bool, count: int = 1
) -> None:
    """Exit 2 up front unless the sequence can be written where asked: without --overwrite, none of
    the `count` frames this job writes may exist (a later one, f.1010.png, was silently replaced)."""
    sequence_codec(pattern, pix_fmt)
    check_start_number(start_number)
    parent = pattern.parent if str(pattern.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"output directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"output directory {parent} is not writable")
    existing = None if overwrite else first_existing_frame(pattern, start_number, max(1, count))
    if existing is not None:
        raise InputError(f"output {existing} already exists; pass --overwrite to replace the sequence")


def check_start_number(start_number: int | None) -> None:
    if start_number is not None and start_number < 0:
        raise InputError(f"--start-number must not be negative (got {start_number})")


class SequenceWriter:
    """VideoWriter's interface (write / close / abort, a context manager) for image sequences."""

    def __init__(
        self,
        pattern: str | Path,
        info: VideoInfo,
        *,
        pix_fmt: str | None = None,
        start_number: int = DEFAULT_START_NUMBER,
        pixel_format: str = BGR24,
        exr_format: str | None = None,
    ) -> None:
        """`exr_format`: half | float for .exr (None: half for a half-float input, else float).
        Frames are numbered from `start_number` in the order written, or by the `number` each
        `write` is given."""
        self.output = Path(pattern)
        half = self.output.suffix.lower() == ".exr" and info.pix_fmt in HALF_PIX_FMTS
        self.exr_format = exr_format or ("half" if half else None)
        self.info = info
        self.codec, self.pix_fmt = sequence_codec(self.output, pix_fmt, info.bit_depth)
        self.start_number = start_number
        self.pixel_format = pixel_format
        self.frames_written = 0
        self.audio_summary = "none (an image sequence)"
        self.dropped: list[str] = []
        if info.audio_streams:
            self.dropped.append(f"{info.audio_streams} audio stream(s): an image sequence holds no audio")
        for index, kind, codec in info.other_streams:
            self.dropped.append(f"stream #{index} ({kind}, {codec}): an image sequence holds only pictures")
        for item in self.dropped:
            log.warning("%s: left out of the output: %s", self.output, item)
        self._temps: list[tuple[Path, Path]] = []
        self._numbers: list[int] = []  # every number written, committed or not
        self._state = "open"

    def write(
        self, image: np.ndarray, pts: int | None, time_base: Fraction, number: int | None = None
    ) -> None:
        """Encode one frame into its (temporary) file, numbered `number` (None: the next one in
        the order written, from `start_number`)."""
        if self._state != "open":
            raise FfbatchError(f"SequenceWriter for {self.output} is already {self._state}")
        self.write_encoded(self.encode(image), number)

    def encode(self, image: np.ndarray | NativePicture) -> bytes:
        """One frame's file contents. Any thread may call it (each call has its own encoder), so
        render workers encode while the writing thread only files them (`write_encoded`)."""
        expected = picture_shape(self.pixel_format, self.info.height, self.info.width)
        if isinstance(image, NativePicture) and self.pixel_format == NATIVE:
            pass  # the input's own picture (VideoWriter's check_native)
        elif not isinstance(image, np.ndarray) or image.shape != expected or image.dtype != np.uint8:
            raise FfbatchError(f"SequenceWriter for {self.output} expects {expected} uint8 frames")
        return self._encode(image)

    def write_encoded(self, data: bytes, number: int | None = None) -> None:
        """File one frame `encode` made under its temporary name, numbered as `write` does."""
        if self._state != "open":
            raise FfbatchError(f"SequenceWriter for {self.output} is already {self._state}")
        if number is None:
            number = self.start_number + self.frames_written
        final = frame_path(self.output, number)
        temp = final.parent / f".{final.name}.partial"
        try:
            temp.write_bytes(data)
        except OSError as exc:
            self.abort()
            raise OutputError(f"cannot write {final}: {exc.strerror or exc}") from None
        self._temps.append((temp, final))
        self._numbers.append(number)
        self.frames_written += 1

    def _encode(self, image: np.ndarray | NativePicture) -> bytes:
        deep = False
        if isinstance(image, NativePicture) and image.pix_fmt in FLOAT_PIX_FMTS:
            frame = self._float_frame(image)
        elif isinstance(image, NativePicture):
            frame = image.to_av()
            deep = max(c.bits for c in frame.format.components) > 8
        elif self.pixel_format == YUV420P:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format=YUV420P)
            if self.info.color_space in (1, 5, 6, 9):
                frame.colorspace = self.info.color_space
            frame.color_range = 2 if self.info.color_range == 2 else 1
        else:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24")
        if frame.format.name in FLOAT_PIX_FMTS:
            pass  # a float plate's own values (half → float32 → half is exact)
        elif self.pix_fmt in ("gbrpf32le", "gbrapf32le"):
            # exactly code / 255 (swscale's float path puts white at 0.996)
            alpha = self.pix_fmt == "gbrapf32le"
            packed = ("rgba64le" if alpha else "rgb48le") if deep else ("rgba" if alpha else "rgb24")
            rgb = frame.to_ndarray(format=packed).astype(np.float32)
            rgb /= np.float32(65535 if deep else 255)
            frame = av.VideoFrame.from_ndarray(rgb, format=self.pix_fmt)
        else:
            frame = frame.reformat(format=self.pix_fmt)
        ctx = cast(VideoCodecContext, av.CodecContext.create(self.codec, "w"))
        ctx.width, ctx.height, ctx.pix_fmt = frame.width, frame.height, self.pix_fmt
        ctx.time_base = Fraction(1, 25)
        if self.codec == "exr":
            ctx.options = {"compression": "zip1", **({"format": self.exr_format} if self.exr_format else {})}
        packets = ctx.encode(frame) + ctx.encode(None)
        return b"".join(bytes(p) for p in packets)

    def _float_frame(self, picture: NativePicture) -> av.VideoFrame:
        """A float picture's values as the EXR encoder takes them (float32 planes, alpha kept)."""
        if not self.pix_fmt.startswith("gbr") or not self.pix_fmt.endswith("f32le"):
            raise FfbatchError(f"SequenceWriter for {self.output}: a float picture into {self.pix_fmt}")
        values = rgb_box(picture, (0, 0, picture.width, picture.height))
        if self.pix_fmt == "gbrapf32le":
            alpha = picture.planes[3] if len(picture.planes) > 3 else np.ones(values.shape[:2], np.float32)
            values = np.concatenate([values, alpha[..., None].astype(np.float32)], axis=-1)
        return av.VideoFrame.from_ndarray(np.ascontiguousarray(values), format=self.pix_fmt)

    def commit(self) -> None:
        """Rename the frames written so far into place and go on (a chunk of a resumable render
        is kept once complete); the writer stays open."""
        if self._state != "open":
            raise FfbatchError(f"SequenceWriter for {self.output} is already {self._state}")
        temps, self._temps = self._temps, []
        for temp, final in temps:
            os.replace(temp, final)

    def close(self) -> None:
        """Rename every frame into place (nothing was visible before)."""
        if self._state == "closed":
            return
        if self._state == "aborted":
            raise FfbatchError(f"SequenceWriter for {self.output} was aborted")
        if not self.frames_written:
            self.abort()
            raise FfbatchError(f"no frames were written, so {self.output} was not created")
        self.commit()
        self._state = "closed"
        log.info("wrote %s, frames %d-%d", self.output, min(self._numbers), max(self._numbers))

    def abort(self) -> None:
        if self._state == "closed":
            return
        self._state = "aborted"
        for temp, _ in self._temps:
            with contextlib.suppress(OSError):
                temp.unlink()

    def __enter__(self) -> SequenceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()
