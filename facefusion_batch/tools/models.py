"""`ffbatch models list | fetch | verify | prepare | calibration-crops`: the work behind the commands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from facefusion_batch.errors import InputError
from facefusion_batch.faces.detect import YuNetDetector
from facefusion_batch.faces.identity import Recogniser
from facefusion_batch.models import store
from facefusion_batch.models.assets import asset_path
from facefusion_batch.models.calibration import EMBEDDINGS, MANIFEST, identity_path, needs_identity
from facefusion_batch.models.catalog import DEFAULT_DETECTOR, DEFAULT_SET
from facefusion_batch.models.facefusion import MODELS, RECOGNISER
from facefusion_batch.models.prepare import prepared_path, variant_catalog, variant_name
from facefusion_batch.runtime.backends import select_backend
from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.tools.calibration import PHOTOS, extract_crops, write_identity


def list_lines() -> Iterator[str]:
    for spec, status in store.list_models():
        yield f"{spec.name:24s} {spec.kind:6s} {status:10s} {spec.licence}"


def fetch(names: list[str] | None, force: bool) -> Iterator[str]:
    """Each model (the default set when none is named) fetched, verified, one line each."""
    for name in names or DEFAULT_SET:
        yield f"{name}: {store.fetch(name, force=force)}"


def verify(names: list[str] | None) -> tuple[list[str], bool]:
    """The sha256 of each model in the store (all present by default), re-hashed in full whatever
    the records say: lines, and whether all passed."""
    targets = names or [spec.name for spec, status in store.list_models() if status != "missing"]
    lines, ok = [], True
    for name in targets:
        result = store.verify(name, full=True)
        lines.append(f"{name}: {'ok' if result.ok else 'FAILED'} {result.reason}")
        ok &= result.ok
    return lines, ok


def prepare(
    name: str,
    *,
    fp16: bool,
    int8: bool,
    calibration_dir: Path | None,
    models_dir: Path | None,
    force: bool,
) -> Iterator[str]:
    """NAME's dynamic-batch copy and optional fp16 / INT8 variants, one line each."""
    if name not in MODELS:
        raise InputError(f"models prepare: {name!r} is not a learned model (known: {', '.join(MODELS)})")
    if int8 and calibration_dir is None:
        raise InputError("--int8 needs --calibration-dir (make one with: ffbatch models calibration-crops)")
    if calibration_dir is not None and not calibration_dir.is_dir():
        raise InputError(f"--calibration-dir {calibration_dir}: no such directory")
    if calibration_dir is not None:
        _check_calibration_set(calibration_dir)
        if needs_identity(name) and (force or not identity_path(calibration_dir, name).is_file()):
            _write_identity(calibration_dir, name, models_dir)
    catalog = variant_catalog(name, calibration_dir=calibration_dir)
    for variant in ["batch"] + ["fp16"] * fp16 + ["int8"] * int8:
        target = variant_name(name, variant)
        if force:
            path = store.fetch(target, force=True, models_dir=models_dir, catalog=catalog)
        else:
            path = prepared_path(target, models_dir=models_dir, catalog=catalog)
        yield f"{target}: {path}"


def _check_calibration_set(directory: Path) -> None:
    for needed in (MANIFEST, EMBEDDINGS):
        if not (directory / needed).is_file():
            raise InputError(
                f"--calibration-dir {directory} is not a calibration set with face embeddings (no {needed}); "
                "make one with: ffbatch models calibration-crops [VIDEO_OR_PHOTO...] -o DIR"
            )


def _write_identity(directory: Path, name: str, models_dir: Path | None) -> None:
    """identity/NAME.npy: the swapper's identity input for each calibration face (its converter
    run where it has one)."""
    model = MODELS[name]
    converter = None
    if model.converter:
        path = prepared_path(
            variant_name(model.converter, "batch"),
            models_dir=models_dir,
            catalog=variant_catalog(model.converter),
        )
        converter = select_backend(DeviceSettings()).load(path, label=model.converter)
    write_identity(
        directory, name, model_path=store.model_path(name, models_dir=models_dir), converter=converter
    )


def _recogniser(models_dir: Path | None) -> Recogniser:
    """The recogniser from its dynamic-batch copy (FaceFusion's file fixes the batch at 1)."""
    path = prepared_path(
        variant_name(RECOGNISER, "batch"), models_dir=models_dir, catalog=variant_catalog(RECOGNISER)
    )
    return Recogniser(select_backend(DeviceSettings()).load(path, label=RECOGNISER), MODELS[RECOGNISER])


def calibration_crops(
    sources: list[Path], output: Path, count: int, models_dir: Path | None, *, photos: bool = True
) -> int:
    """Aligned face crops and their embeddings from the embedded photos (unless `photos` is
    False) and `sources` (videos or photos) into `output` (the default detector, on the CPU)."""
    for source in sources:
        if not source.is_file():
            raise InputError(f"{source}: no such file")
    if count < 1:
        raise InputError(f"--count must be at least 1 (got {count})")
    if not sources and not photos:
        raise InputError("calibration-crops: no videos or photos given, and --no-photos")
    every = [asset_path(p) for p in PHOTOS] * photos + list(sources)
    path = store.model_path(DEFAULT_DETECTOR, models_dir=models_dir)
    detector = YuNetDetector(select_backend(DeviceSettings()).load(path, label=DEFAULT_DETECTOR))
    written = extract_crops(every, output, detector, _recogniser(models_dir), count=count)
    if written == 0:
        raise InputError("no face found in the given videos or photos")
    return written
