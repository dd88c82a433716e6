"""Running stages in tests on the host kernel set: `detect`, `analyse` (detect + mesh), `run`,
`reported` (a default pipeline's batch and its report), and `classical_swap` on any kernel set;
and `classical_option`: the classical settings a render's options give."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.pipeline.build import prepare_sources
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.stage import ClassicalSwapper

HOST = HostKernels()


def frames(images: list[np.ndarray]):
    return HOST.upload(list(images))


def detect(models, images: list[np.ndarray]) -> FaceTable:
    return models.detector(HOST, frames(images))


def analyse(models, images: list[np.ndarray], table: FaceTable | None = None) -> FaceTable:
    """Detected (unless `table` is given) and meshed faces of `images`."""
    batch = frames(images)
    table = models.detector(HOST, batch) if table is None else table
    return models.mesh(HOST, batch, table)


def run(pipeline, images: list[np.ndarray]):
    """A pipeline's BatchResult for `images` on the host kernel set."""
    return pipeline(HOST, list(images))


def reported(models, source_path, images: list[np.ndarray], **fields):
    """The default pipeline (every face, `source_path`; the ClassicalSettings `fields` away from
    their defaults) over `images` as one batch of a new job: its BatchResult and a report that
    counted it, as a render's does."""
    from facefusion_batch.config import SwapSettings
    from facefusion_batch.pipeline.build import build_pipeline
    from facefusion_batch.pipeline.report import RenderReport
    from facefusion_batch.pipeline.run import count_not_swapped
    from facefusion_batch.swap.classical.settings import ClassicalSettings

    settings = SwapSettings(classical=ClassicalSettings(**fields)) if fields else SwapSettings()
    pipeline = build_pipeline(models, (source_path,), settings, "many")
    pipeline.start_job()
    result = pipeline(HOST, [np.ascontiguousarray(i) for i in images], seq=0)
    report = RenderReport(input="in", output="out", backend="cpu")
    count_not_swapped(report, result, np.ones(len(images), bool))
    return result, report


def stage(stage, images: list[np.ndarray], table: FaceTable) -> tuple[list[np.ndarray], FaceTable]:
    """One painting stage on `images`: (the frames it painted, the table it returned)."""
    batch = frames(images)
    out = stage(HOST, batch, table)
    return HOST.download(batch), out


def classical_swap(k, models, source_path, image: np.ndarray, table: FaceTable, **fields) -> np.ndarray:
    """`image` with `table`'s faces swapped by the classical swap on kernel set `k`, with the
    ClassicalSettings `fields` away from their defaults."""
    settings = replace(ClassicalSettings(), **fields)
    sources = prepare_sources(models, (source_path,), settings)
    swapper = ClassicalSwapper(sources, models.triangles, models.regions, settings)
    batch = k.upload([image])
    swapper(k, batch, table)
    return k.download(batch)[0]


def classical_option(tmp_path, **options) -> ClassicalSettings:
    """The ClassicalSettings `ffbatch render` takes with `options` (its option names, values as
    typer passes them) beside a plain job's; nothing is read."""
    from facefusion_batch.config import render_settings

    source = tmp_path / "face.png"
    source.write_bytes(b"")  # render_settings checks that it is a file; nothing reads it here
    params = dict(inputs=[tmp_path / "in.mp4"], source=[source], output=tmp_path / "out.mp4", faces="many")
    settings, _ = render_settings({**params, **options}, resolve=False)
    return settings.swap.classical
