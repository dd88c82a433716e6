"""Compositing outputs: `--face-only-output` (the swapped face layer with alpha) and the writers
of both it and `--matte-output`, frame for frame beside the main output.

The face layer has *straight* (unassociated) alpha, in every format: its alpha is the matte
(the paste alpha, a = matte / 255) and its colour F is the face alone, not multiplied by a, so
that over the input (the plate) it gives the output back:

    out = a·F + (1 − a)·plate,   F = plate + (out − plate) / a   where a > 0

Where a = 1, F is the output's pixel; where nothing was pasted the layer is transparent black.
(EXR readers that assume premultiplied colour need a Premult before the merge.) Written as
ProRes 4444 with alpha (prores_ks, yuva444p10le) in .mov, or as an RGBA image sequence: EXR
half (float for inputs deeper than 10 bits), PNG / TIFF 8-bit RGBA (16-bit for inputs deeper
than 8 bits).

For an input deeper than 8 bits the plate is read from the frame's own picture at its precision
and only the swap's change (out − plate, from the 8-bit view the face stages saw) is 8-bit, as
in the main output (video/pictures/native.py), so the layer keeps the input's gradients inside the faces.

Sequences are numbered by the input frame: `start_number + frame index`, so a segment
(`--frames A:B`) or a chunk writes exactly its own frames and any split gives the files a whole
render gives.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from facefusion_batch.errors import InputError, OutputError
from facefusion_batch.video.compositing.matte import (
    MATTE_PIX_FMT,
    check_matte_output,
    matte_info,
    matte_picture,
)
from facefusion_batch.video.decode.probe import VideoInfo
from facefusion_batch.video.encode.encoder_policy import EncoderSettings, validate_encoder
from facefusion_batch.video.encode.sequence import (
    SequenceWriter,
    frame_path,
    is_sequence_pattern,
    sequence_codec,
)

# the face layer as it leaves the pipeline: straight RGBA, 8-bit for 8-bit images (exactly the
from facefusion_batch.video.encode.writer import VideoWriter
from facefusion_batch.video.pictures.native import NativePicture, native_format, rgb_box
from facefusion_batch.video.pictures.planes import NATIVE

# the face layer as it leaves the pipeline: straight RGBA, 8-bit for 8-bit images (exactly the
# output's codes: swscale would round 16 → 8 bits up), else 16-bit
LAYER_PIX_FMTS = {8: "rgba", 16: "rgba64le"}
LAYER_VIDEO_SUFFIXES = (".mov",)
LAYER_ENCODER = EncoderSettings(codec="prores_ks", profile="4444", pix_fmt="yuva444p10le", audio=False)
MATTE_ENCODER = EncoderSettings(codec="ffv1", pix_fmt=MATTE_PIX_FMT, audio=False)
# extension -> (8-bit pixel format, deep one) of the layer's images
LAYER_IMAGE_FORMATS = {
    ".exr": ("gbrapf32le", "gbrapf32le"),
    ".png": ("rgba", "rgba64be"),
    ".tif": ("rgba", "rgba64le"),
    ".tiff": ("rgba", "rgba64le"),
}

Writer = VideoWriter | SequenceWriter


def check_face_only_output(path: Path) -> None:
    """Exit 2 up front unless `path` names a face layer ffbatch can write with its alpha."""
    suffix = path.suffix.lower()
    if is_sequence_pattern(path):
        if suffix not in LAYER_IMAGE_FORMATS:
            raise InputError(
                f"--face-only-output {path}: the face layer needs alpha; write it as an RGBA sequence of "
                f"{', '.join(LAYER_IMAGE_FORMATS)} (face.%06d.exr), not {suffix or 'no extension'}"
            )
        sequence_codec(path, LAYER_IMAGE_FORMATS[suffix][0])
        return
    if suffix not in LAYER_VIDEO_SUFFIXES:
        raise InputError(
            f"--face-only-output {path}: the face layer needs alpha, which "
            f"{suffix or 'a file without extension'} does not carry here; write ProRes 4444 with alpha "
            "in .mov, or an RGBA image sequence such as "
            "face.%06d.exr / .png / .tiff"
        )
    try:
        validate_encoder(LAYER_ENCODER)
    except InputError as exc:
        raise InputError(
            f"--face-only-output {path}: ProRes 4444 with alpha cannot be written here ({exc})"
        ) from None


def layer_pix_fmt(path: Path, bits: int) -> str:
    """The image pixel format of a layer sequence for an input of `bits` per sample."""
    eight, deep = LAYER_IMAGE_FORMATS[path.suffix.lower()]
    return deep if bits > 8 else eight


def layer_bits(path: Path, bits: int) -> int:
    """8 or 16: the precision of the layer pictures for a `path` written from a `bits` input."""
    return 8 if is_sequence_pattern(path) and layer_pix_fmt(path, bits) == "rgba" else 16


def layer_info(info: VideoInfo, bits: int) -> VideoInfo:
    """`info` as the layer's writer sees it: RGBA pictures of `bits`, the input's colour tags (the
    matrix ProRes is written with, at limited range as ProRes is), no audio nor other streams."""
    return replace(
        info, pix_fmt=LAYER_PIX_FMTS[bits], bit_depth=bits, color_range=1, audio_streams=0, other_streams=()
    )


def open_face_layer_writer(
    path: Path, info: VideoInfo, start_number: int, metadata: dict[str, str] | None = None
) -> Writer:
    """`metadata`: container tags of a video layer (a chunk's segment records its range so)."""
    check_face_only_output(path)
    layer = layer_info(info, layer_bits(path, info.bit_depth))
    if is_sequence_pattern(path):
        half = "half" if info.bit_depth <= 10 else "float"
        return SequenceWriter(
            path,
            layer,
            pix_fmt=layer_pix_fmt(path, info.bit_depth),
            start_number=start_number,
            pixel_format=NATIVE,
            exr_format=half,
        )
    # a short queue: 16-bit RGBA pictures are 8 bytes a pixel (64 MB for a 4K frame)
    return VideoWriter(path, layer, LAYER_ENCODER, metadata=metadata, pixel_format=NATIVE, queue_size=4)


def open_matte_writer(
    path: Path, info: VideoInfo, start_number: int, metadata: dict[str, str] | None = None
) -> Writer:
    check_matte_output(path)
    grey = matte_info(info)
    if is_sequence_pattern(path):
        return SequenceWriter(
            path, grey, pix_fmt=grey.pix_fmt, start_number=start_number, pixel_format=NATIVE
        )
    return VideoWriter(path, grey, MATTE_ENCODER, metadata=metadata, pixel_format=NATIVE)


def face_layer(
    original: np.ndarray,
    swapped: np.ndarray,
    matte: np.ndarray,
    bits: int = 16,
    native: NativePicture | None = None,
) -> np.ndarray:
    """[H, W, 4] straight RGBA (uint8 or uint16 for `bits` 8 / 16) from one frame's 8-bit BGR
    before and after the swap and its uint8 matte: F = plate + (out − plate) / a inside the matte
    (so a·F + (1 − a)·plate = out), transparent black outside. Only the matte's bounding box is
    computed.

    `native`: the frame's own picture before the swap, deeper than 8 bits (video/pictures/native.py): the
    plate is then read from it at its precision and only the swap's change comes from the 8-bit
    view, as the main output composes it, so the layer keeps the input's gradients too."""
    height, width = matte.shape
    scale, dtype = (1, np.uint8) if bits == 8 else (257, np.uint16)
    layer = np.zeros((height, width, 4), dtype)
    rows, cols = np.flatnonzero(matte.any(axis=1)), np.flatnonzero(matte.any(axis=0))
    if not len(rows):
        return layer
    box = np.s_[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    alpha = matte[box].astype(np.float32)
    plate = original[box][..., ::-1].astype(np.float32)
    out = swapped[box][..., ::-1].astype(np.float32)
    painted = alpha > 0
    safe = np.where(painted, alpha, np.float32(255))[..., None] / np.float32(255)
    base = plate
    if native is not None and bits == 16:
        base = rgb_box(native, (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1))
        base = base * np.float32(255)
    colour = np.where(painted[..., None], base + (out - plate) / safe, 0)
    top = 255 * scale
    layer[box][..., :3] = np.clip(np.rint(colour * scale), 0, top).astype(dtype)
    layer[box][..., 3] = alpha.astype(dtype) * scale
    return layer


def layer_picture(layer: np.ndarray) -> NativePicture:
    """A [H, W, 4] uint8 / uint16 layer as the RGBA picture the layer writers take (full range)."""
    height, width = layer.shape[:2]
    pix_fmt = LAYER_PIX_FMTS[8 if layer.dtype == np.uint8 else 16]
    return NativePicture(pix_fmt, width, height, [layer.reshape(height, width * 4)], 0, 2)


class CompositingWriters:
    """The compositing outputs of one job (`matte`, `layer`: either may be None), written frame
    for frame beside the main output; sequence frames numbered `start_number + frame index`."""

    def __init__(self, matte: Writer | None, layer: Writer | None, start_number: int) -> None:
        self.matte = matte
        self.layer = layer
        self.start_number = start_number
        self.layer_bits = layer.info.bit_depth if layer is not None else 16  # of the pictures it takes

    @property
    def writers(self) -> list[Writer]:
        return [w for w in (self.matte, self.layer) if w is not None]

    def prepare(
        self,
        original: np.ndarray,
        swapped: np.ndarray,
        matte: np.ndarray,
        native: NativePicture | None = None,
    ) -> tuple:
        """One frame's (matte, layer) as their writers take them: a sequence's encoded image, a
        video's picture (None: not asked for). Called on the render workers, so the layer and
        the images are made in parallel; `write` then only files them, in order. `native`: the
        frame's own picture before the swap (the plate of a deep input's layer)."""
        layer = None
        if self.layer is not None:
            fmt = None if native is None else native_format(native.pix_fmt)
            deep = native if fmt is not None and fmt.bits > 8 else None
            layer = face_layer(original, swapped, matte, self.layer_bits, deep)
        prepared: list[Any] = []
        for writer, picture in ((self.matte, matte), (self.layer, layer)):
            if writer is None or picture is None:
                prepared.append(None)
                continue
            shown = matte_picture(picture) if writer is self.matte else layer_picture(picture)
            prepared.append(writer.encode(shown) if isinstance(writer, SequenceWriter) else shown)
        return tuple(prepared)

    def write(self, index: int, pts: int | None, time_base: Fraction, prepared: tuple) -> None:
        """File input frame `index`'s `prepare`d matte and layer."""
        number = self.start_number + index
        for writer, item in zip((self.matte, self.layer), prepared, strict=True):
            if writer is None:
                continue
            if isinstance(writer, SequenceWriter):
                writer.write_encoded(item, number=number)
            elif isinstance(writer, VideoWriter):
                writer.write(item, pts, time_base)
            else:  # a chunked render's segments: placed by the frame's number
                writer.write(item, pts, time_base, number=number)

    def commit(self) -> None:
        """Sequences: the frames written so far into place (a finished chunk)."""
        for writer in self.writers:
            if not isinstance(writer, VideoWriter):
                writer.commit()

    def close(self) -> None:
        for writer in self.writers:
            writer.close()

    def abort(self) -> None:
        for writer in self.writers:
            writer.abort()


def open_compositing_writers(
    matte: Path | None,
    layer: Path | None,
    info: VideoInfo,
    start_number: int,
    metadata: dict[str, str] | None = None,
) -> CompositingWriters | None:
    """The writers of the compositing outputs asked for (None: neither); on a failure to open the
    second, the first is aborted. `metadata`: the container tags of a video one."""
    if matte is None and layer is None:
        return None
    opened: list[Writer] = []
    try:
        matte_writer = open_matte_writer(matte, info, start_number, metadata) if matte is not None else None
        if matte_writer is not None:
            opened.append(matte_writer)
        layer_writer = (
            open_face_layer_writer(layer, info, start_number, metadata) if layer is not None else None
        )
    except BaseException:
        for writer in opened:
            writer.abort()
        raise
    return CompositingWriters(matte_writer, layer_writer, start_number)


def describe_output(option: str, path: Path, info: VideoInfo, start_number: int) -> dict[str, object]:
    """What a compositing output holds, for the report."""
    record: dict[str, object] = {"option": option, "path": str(path)}
    layer = option == "--face-only-output"
    if is_sequence_pattern(path):
        pix_fmt = layer_pix_fmt(path, info.bit_depth) if layer else MATTE_PIX_FMT
        if path.suffix.lower() == ".exr":
            pix_fmt += " (half)" if info.bit_depth <= 10 else " (float)"
        record |= {"format": f"{path.suffix.lower()[1:]} sequence", "pix_fmt": pix_fmt}
        record["start_number"] = start_number
    else:
        encoder = LAYER_ENCODER if layer else MATTE_ENCODER
        record |= {"format": f"{encoder.codec} {encoder.profile or ''}".strip(), "pix_fmt": encoder.pix_fmt}
    if layer:
        record["alpha"] = "straight"
    return record


def sequence_complete(pattern: Path, start_number: int, frames: tuple[int, int]) -> bool:
    """Whether every file of input frames [start, end) of the sequence `pattern` exists."""
    start, end = frames
    return all(frame_path(pattern, start_number + i).is_file() for i in range(start, end))


def publish_sequence(staged: Path, final: Path, start_number: int, count: int) -> None:
    """Move frames 0..count-1 of the sequence `staged` to their names in `final` (a rename; a copy
    to a hidden name, then a rename, across file systems), so each file appears whole."""
    for i in range(count):
        source, target = frame_path(staged, start_number + i), frame_path(final, start_number + i)
        try:
            try:
                os.replace(source, target)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                temp = target.parent / f".{target.name}.partial"
                shutil.copyfile(source, temp)
                os.replace(temp, target)
                source.unlink()
        except OSError as exc:
            raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
