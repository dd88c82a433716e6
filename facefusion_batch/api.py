"""The library face: render videos from Python without the command line (docs/library.md).

    from facefusion_batch import RenderSettings, Renderer, render

    settings = RenderSettings(input=Path("in.mp4"), output=Path("out.mp4"), sources=(Path("face.jpg"),))
    report = render(settings)                       # models loaded for this one job
    renderer = Renderer.load(settings)              # or loaded once for several jobs
    render(replace(settings, input=Path("b.mp4"), output=Path("b-out.mp4")), renderer=renderer)

The same pipeline and the same guarantees as `ffbatch render` with one input: the settings are
validated before any work, the output appears only when complete, failures are `FfbatchError`s
(`exit_code` 2 for bad input). The nested settings a job is made of (`EncoderSettings`,
`SwapSettings` with its `ClassicalSettings`, `DeviceSettings`) are exported too; other names are
internal and may change.
"""

from __future__ import annotations

from collections.abc import Callable

# the library face's names are listed once, as the package's __all__ (facefusion_batch/__init__.py);
# `X as X` marks each import here as one of them
from facefusion_batch.config import ClassicalSettings as ClassicalSettings
from facefusion_batch.config import DeviceSettings as DeviceSettings
from facefusion_batch.config import EncoderSettings as EncoderSettings
from facefusion_batch.config import RenderSettings as RenderSettings
from facefusion_batch.config import SwapSettings as SwapSettings
from facefusion_batch.errors import FfbatchError as FfbatchError
from facefusion_batch.errors import InputError as InputError
from facefusion_batch.farm.jobs import render as _render_job
from facefusion_batch.pipeline.run import JobReport as JobReport
from facefusion_batch.pipeline.run import Renderer as Renderer


def render(
    settings: RenderSettings,
    *,
    renderer: Renderer | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> JobReport:
    """Render `settings.input` to `settings.output` and return the job's report.

    `renderer`: models already loaded with `Renderer.load(settings)` for the same sources and
    model settings (several inputs rendered in turn); loaded for this job when None.
    `on_progress`: called with the number of frames finished since the last call.
    Raises `FfbatchError` (`InputError` for bad input or settings: `exit_code` 2)."""
    return _render_job(settings, renderer=renderer, on_progress=on_progress)
