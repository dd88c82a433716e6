"""How the face stages see a floating-point (EXR) plate: a view transform to display values.

EXR plates hold scene-linear light by convention: values above 1.0 are highlights, shadow detail
lives far below 1/255. The face stages work on an 8-bit display picture, so each float picture is
shown to them through a view transform (`forward`: plate values → display 0–1), and the change
the swap makes is taken back through its inverse (video/pictures/native.py's `compose_float`):

    out = in + inverse(view(in) + d) − inverse(view(in))

inside the painted rectangles, where d is the 8-bit change in display units; every sample the
swap left alone (d = 0) leaves bit for bit, highlights and shadows included.

The transforms (`--input-colorspace`, `--ocio-config` or the `OCIO` environment variable):

- `linear` without OCIO (the default for EXR): the built-in sRGB view, IEC 61966-2-1's encoding
  (Rec.709 primaries, no tone mapping), `srgb_encode` below, extended past 1.0 and below 0;
- `srgb`: the plate already holds display values (0–1 shown as they are);
- with an OCIO config: the config's default display and view, from the named colour space
  (`auto` and `linear`: the config's scene_linear role), through OpenColorIO's CPU processor.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from facefusion_batch.errors import InputError, did_you_mean

AUTO, LINEAR, SRGB = "auto", "linear", "srgb"
BUILTIN_COLORSPACES = (AUTO, LINEAR, SRGB)
# floating-point pixel formats (FFmpeg's EXR decoder gives the f16 ones for half, f32 for float)
FLOAT_PIX_FMTS = ("gbrpf16le", "gbrapf16le", "gbrpf32le", "gbrapf32le")
HALF_PIX_FMTS = ("gbrpf16le", "gbrapf16le")

# IEC 61966-2-1 (sRGB): the linear segment's end and slope, the power curve's offset and exponent
_SRGB_CUT, _SRGB_SLOPE, _SRGB_OFFSET, _SRGB_GAMMA = 0.0031308, 12.92, 0.055, 2.4


def srgb_encode(linear: np.ndarray) -> np.ndarray:
    """Linear light → sRGB-encoded display values, odd-symmetric below 0 and unbounded above 1."""
    x = np.abs(linear)
    power = (1 + _SRGB_OFFSET) * np.power(np.maximum(x, _SRGB_CUT), 1 / _SRGB_GAMMA) - _SRGB_OFFSET
    return np.copysign(np.where(x <= _SRGB_CUT, x * _SRGB_SLOPE, power), linear).astype(np.float32)


def srgb_decode(encoded: np.ndarray) -> np.ndarray:
    """The inverse of `srgb_encode`."""
    y = np.abs(encoded)
    cut = _SRGB_CUT * _SRGB_SLOPE
    power = np.power((np.maximum(y, cut) + _SRGB_OFFSET) / (1 + _SRGB_OFFSET), _SRGB_GAMMA)
    return np.copysign(np.where(y <= cut, y / _SRGB_SLOPE, power), encoded).astype(np.float32)


def is_float_format(pix_fmt: str) -> bool:
    return pix_fmt in FLOAT_PIX_FMTS


@dataclass(frozen=True)
class ViewTransform:
    """Plate RGB (float32 [..., 3]) → display RGB and back. `name` says which, for the log and report."""

    name: str
    kind: str  # srgb (built-in) | identity | ocio
    display_max: float | None = None  # display values past it have no inverse (OCIO views: 1.0)
    _processors: Any = field(default=None, compare=False, repr=False)  # OCIO (forward, inverse)

    def forward(self, rgb: np.ndarray) -> np.ndarray:
        return self._apply(rgb, 0)

    def inverse(self, display: np.ndarray) -> np.ndarray:
        return self._apply(display, 1)

    def _apply(self, rgb: np.ndarray, direction: int) -> np.ndarray:
        if self.kind == "identity":
            return np.asarray(rgb, np.float32)
        if self.kind == "srgb":
            return srgb_decode(rgb) if direction else srgb_encode(rgb)
        out = np.ascontiguousarray(rgb, np.float32).copy()
        self._processors[direction].applyRGB(out.reshape(-1, 3))
        return out

    def view8(self, rgb: np.ndarray) -> np.ndarray:
        """The 8-bit BGR picture the face stages see of plate RGB [h, w, 3]."""
        display = np.clip(self.forward(rgb), 0, 1)
        return np.rint(display[..., ::-1] * np.float32(255)).astype(np.uint8)


def view_transform(pix_fmt: str, colorspace: str, ocio_config: str | None) -> ViewTransform | None:
    """The view for an input of `pix_fmt` (None: an integer picture, shown as it is); InputError
    (exit 2) for a colour space or OCIO config that cannot be used. `ocio_config` None: $OCIO."""
    config = ocio_config or os.environ.get("OCIO") or None
    if not is_float_format(pix_fmt):
        if colorspace not in (AUTO, SRGB):
            raise InputError(
                f"--input-colorspace {colorspace}: the input is {pix_fmt}, not a floating-point (EXR) "
                "picture; only EXR plates are read through a view transform"
            )
        return None
    if colorspace == SRGB:
        return ViewTransform("srgb (display values as they are)", "identity")
    if config is None:
        if colorspace not in (AUTO, LINEAR):
            raise InputError(
                f"--input-colorspace {colorspace!r} names an OCIO colour space, but no OCIO config is "
                f"set (--ocio-config or the OCIO environment variable); without one choose "
                f"{', '.join(BUILTIN_COLORSPACES)}{did_you_mean(colorspace, BUILTIN_COLORSPACES)}"
            )
        return ViewTransform("linear → sRGB (built-in)", "srgb")
    return _ocio_view(config, colorspace)


@functools.lru_cache(maxsize=8)
def _ocio_view(config_path: str, colorspace: str) -> ViewTransform:
    try:
        import PyOpenColorIO as ocio
    except ImportError:
        raise InputError(
            "an OCIO config is set (--ocio-config or $OCIO) but OpenColorIO's Python package is not "
            "installed: pip install 'facefusion-batch[ocio]'"
        ) from None
    if not config_path.startswith("ocio://") and not Path(config_path).is_file():
        raise InputError(f"OCIO config {config_path}: no such file")
    try:
        config = ocio.Config.CreateFromFile(config_path)
    except Exception as exc:  # OCIO raises its own Exception type for any bad config
        raise InputError(f"OCIO config {config_path} cannot be read: {exc}") from None
    names = [cs.getName() for cs in config.getColorSpaces()]
    source = config.getRoleColorSpace("scene_linear") if colorspace in (AUTO, LINEAR) else colorspace
    if source not in names:
        raise InputError(
            f"--input-colorspace {colorspace!r}: OCIO config {config_path} has no such colour space"
            f"{did_you_mean(colorspace, names)}"
        )
    display = config.getDefaultDisplay()
    view = config.getDefaultView(display)
    processors = []
    for direction in (ocio.TRANSFORM_DIR_FORWARD, ocio.TRANSFORM_DIR_INVERSE):
        transform = ocio.DisplayViewTransform(src=source, display=display, view=view, direction=direction)
        try:
            processor = config.getProcessor(transform)
            processors.append(processor.getOptimizedCPUProcessor(ocio.OPTIMIZATION_LOSSLESS))
        except Exception as exc:
            raise InputError(f"OCIO config {config_path}: {source} → {display}/{view}: {exc}") from None
    return ViewTransform(f"OCIO {source} → {display} / {view}", "ocio", 1.0, tuple(processors))
