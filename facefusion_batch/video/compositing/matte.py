"""`--matte-output`: the alpha each frame's faces were pasted with, as its own picture stream.

A compositor redoes the blend from it (Nuke, Resolve, Flame): 8-bit grey, 255 where a face
replaced the picture, 0 wherever nothing was pasted, one matte per output frame with the
output frame's timestamp. Written losslessly: FFV1 grey in .mkv / .avi, or a grey PNG / TIFF
image sequence (`matte.%06d.png`, numbered by input frame from the output's start number).
The writers are video/compositing/compositing.py's, shared with `--face-only-output`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from facefusion_batch.errors import InputError
from facefusion_batch.video.decode.probe import VideoInfo
from facefusion_batch.video.encode.sequence import is_sequence_pattern, sequence_codec
from facefusion_batch.video.pictures.native import NativePicture

MATTE_PIX_FMT = "gray"
MATTE_VIDEO_SUFFIXES = (".mkv", ".avi")
MATTE_IMAGE_SUFFIXES = (".png", ".tif", ".tiff")


def check_matte_output(path: Path) -> None:
    """Exit 2 up front unless `path` names a matte ffbatch can write."""
    suffix = path.suffix.lower()
    if is_sequence_pattern(path):
        if suffix not in MATTE_IMAGE_SUFFIXES:
            raise InputError(
                f"--matte-output {path}: a matte sequence is written as {', '.join(MATTE_IMAGE_SUFFIXES)}"
            )
        sequence_codec(path, MATTE_PIX_FMT)
    elif suffix not in MATTE_VIDEO_SUFFIXES:
        raise InputError(
            f"--matte-output {path}: write the matte as FFV1 in {' or '.join(MATTE_VIDEO_SUFFIXES)}, or as "
            f"an image sequence such as matte.%06d.png"
        )


def matte_info(info: VideoInfo) -> VideoInfo:
    """`info` as the matte stream's writer sees it: grey, full range, no colour, no audio."""
    return replace(
        info,
        pix_fmt=MATTE_PIX_FMT,
        bit_depth=8,
        color_space=2,
        color_range=2,
        color_primaries=2,
        color_trc=2,
        audio_streams=0,
        other_streams=(),
    )


def matte_picture(matte: np.ndarray) -> NativePicture:
    """A uint8 [H, W] matte as the grey picture the matte writer takes."""
    height, width = matte.shape
    return NativePicture(MATTE_PIX_FMT, width, height, [matte], colorspace=2, color_range=2)
