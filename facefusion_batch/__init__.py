"""ffbatch: an offline, batched face-swap renderer for video files.

The library face (docs/library.md): `from facefusion_batch import RenderSettings, Renderer, render`.
Its names load on first use, so importing one module of the package does not load the pipeline.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

try:  # from the git tags, written at install time (setuptools-scm's version_file, pyproject.toml)
    from facefusion_batch._version import __version__
except ImportError:  # a source tree that was never installed
    try:
        __version__ = _metadata.version("facefusion-batch")
    except _metadata.PackageNotFoundError:
        __version__ = "0.0.0+unknown"

# The revision of what a render outputs: bumped by every change of output pixels or timestamps
# (with a CHANGELOG.md line); tests/test_golden_cpu.py fails when the golden checksums change
# without it. The version and the revision go into the settings digest, the segment tags and
# the report, so that no resume or "up to date" skip joins the output of two algorithms.
RENDER_REVISION = 10

if TYPE_CHECKING:
    from facefusion_batch.api import (
        ClassicalSettings,
        DeviceSettings,
        EncoderSettings,
        FfbatchError,
        InputError,
        JobReport,
        Renderer,
        RenderSettings,
        SwapSettings,
        render,
    )

__all__ = [
    "ClassicalSettings",
    "DeviceSettings",
    "EncoderSettings",
    "FfbatchError",
    "InputError",
    "JobReport",
    "RenderSettings",
    "Renderer",
    "SwapSettings",
    "render",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from facefusion_batch import api

        return getattr(api, name)
    raise AttributeError(f"module 'facefusion_batch' has no attribute {name!r}")
