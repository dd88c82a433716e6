"""ffbatch: an offline, batched face-swap renderer for video files.

The library face (docs/library.md): `from facefusion_batch import RenderSettings, Renderer, render`.
Its names load on first use, so importing one module of the package does not load the pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

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
    "render",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from facefusion_batch import api

        return getattr(api, name)
    raise AttributeError(f"module 'facefusion_batch' has no attribute {name!r}")
