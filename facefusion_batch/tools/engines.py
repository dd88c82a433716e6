"""`ffbatch engines build | list | verify`: the work behind the commands (cli.py only parses).

`list` and the byte checks of `verify` run anywhere; `build` and the
compatibility checks need TensorRT and an NVIDIA GPU and say so (exit 2)
when they are missing. `build` and `list` say what share of each engine's
layers runs in fp16, int8 and fp32 (TensorRT's engine inspector, kept in the
engine's sidecar); an engine asked for as fp16 or int8 that came out mostly
fp32 is exit 2 with the reason.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from facefusion_batch import lazy
from facefusion_batch.errors import InputError
from facefusion_batch.models import store
from facefusion_batch.models.catalog import DEFAULT_DETECTOR, DEFAULT_MESH
from facefusion_batch.models.records import trusted_sha256
from facefusion_batch.runtime.device import DeviceSettings, Precision
from facefusion_batch.runtime.engine_cache import (
    SIDECAR_SUFFIX,
    EngineCache,
    EngineEntry,
    EngineKey,
    MachineKey,
)
from facefusion_batch.runtime.engine_precision import describe
from facefusion_batch.runtime.tensorrt_backend import (
    PrecisionMismatchError,
    TensorRTBackend,
    TensorRTSession,
    engine_deviation,
    import_tensorrt,
    machine_key,
    profiles_for,
)
from facefusion_batch.runtime.torch_backend import graph_signature

if TYPE_CHECKING:
    import onnx
else:
    onnx = lazy.module("onnx")  # imported at its first use

log = logging.getLogger("ffbatch")


def engine_device(
    *, gpu: int = 0, precision: str = "auto", max_batch: int | None = None, engines_dir: Path | None = None
) -> DeviceSettings:
    """The device settings the engine commands work with (TensorRT on GPU `gpu`), validated
    (`precision`, as typed, is checked by `validated`)."""
    word = cast(Precision, precision)
    return DeviceSettings(
        backend="tensorrt", gpu=gpu, precision=word, max_batch=max_batch, engines_dir=engines_dir
    ).validated()


def default_models() -> list[str]:
    return [DEFAULT_DETECTOR, DEFAULT_MESH]


def describe_entry(entry: EngineEntry, machine: MachineKey | None) -> str:
    if entry.key is None:
        return f"{entry.path.name}: unusable ({entry.problem})"
    k = entry.key
    b = k.batch
    where = f"{k.machine.gpu} {k.machine.sm}, TensorRT {k.machine.tensorrt}"
    if machine is None:
        state = "cannot check fit here (no GPU or TensorRT)"
    else:
        mismatch = k.machine_mismatch(machine)
        state = "fits this machine" if not mismatch else "; ".join(mismatch)
    size = entry.meta.get("engine_bytes", 0) / 2**20
    what = f"{k.model} {k.precision}, batch {b[0]}–{b[2]} (opt {b[1]}), {where}, {size:.1f} MiB"
    return f"{entry.path.name}\n    {what}: {state}\n    {layer_line(entry.meta)}"


def layer_line(meta: dict) -> str:
    """The engine's layers by precision, as recorded when it was built."""
    layers = meta.get("layers")
    if not isinstance(layers, dict):
        return "layers: precision not recorded (built before ffbatch checked it; rebuild with --force)"
    return f"layers: {describe(layers)}"


def _sidecar(engine: Path) -> dict:
    try:
        return json.loads(engine.with_name(engine.name + SIDECAR_SUFFIX).read_text())
    except (OSError, ValueError):
        return {}


def current_machine(options: DeviceSettings) -> MachineKey | None:
    """This machine's key when TensorRT and a GPU are usable, else None (nothing raised)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return machine_key(import_tensorrt(), options.gpu)
    except Exception:
        return None


def list_engines(options: DeviceSettings) -> list[str]:
    cache = EngineCache(options.engines_dir)
    entries = cache.entries()
    if not entries:
        return [f"no engines in {cache.directory}"]
    machine = current_machine(options)
    return [describe_entry(e, machine) for e in entries]


def build_engines(
    names: list[str] | None,
    options: DeviceSettings,
    *,
    onnx: Path | None = None,
    force: bool = False,
    models_dir: Path | None = None,
) -> list[str]:
    """Build (or find) an engine per model for this GPU; returns lines per engine. An engine asked
    for as fp16 or int8 that comes out mostly fp32 is `PrecisionMismatchError` (exit 2); with
    `--precision auto` it is said and an fp32 engine built instead."""
    names = names or default_models()
    if onnx is not None and len(names) != 1:
        raise InputError("--onnx gives the ONNX of one model: name exactly one model")
    backend = TensorRTBackend(replace(options, engine_policy="build"), purpose="ffbatch engines build")
    lines = []
    try:
        for name in names:
            path = store.model_path(name, models_dir=models_dir)
            precisions = ["fp16"] if options.precision == "auto" else [options.precision]
            for precision in precisions:
                if force:
                    _remove_matching(backend, path, name, precision, onnx)
                try:
                    engine, key, inputs, outputs = backend.engine_for(path, name, precision, onnx)
                except PrecisionMismatchError as exc:
                    if options.precision != "auto":
                        raise
                    lines.append(f"{name}: {exc}; building fp32 instead")
                    precision = "fp32"
                    engine, key, inputs, outputs = backend.engine_for(path, name, precision, onnx)
                session = TensorRTSession(backend, engine, label=name, inputs=inputs, outputs=outputs)
                deviation = engine_deviation(session, path)
                lines.append(
                    f"{name}: {engine} ({precision}, batch ≤ {key.batch[2]}, deviation {deviation:.3g})"
                )
                lines.append(f"    {layer_line(_sidecar(engine))}")
                if options.precision == "auto" and precision == "fp16" and deviation > 1e-2:
                    engine, key, _, _ = backend.engine_for(path, name, "fp32", onnx)
                    lines.append(f"{name}: fp16 deviates too much; also built {engine} (fp32)")
    finally:
        backend.close()
    return lines


def _remove_matching(backend, path: Path, name: str, precision: str, onnx_file: Path | None) -> None:
    inputs, _ = graph_signature(onnx.load(str(path), load_external_data=False))
    sha = trusted_sha256(Path(onnx_file) if (onnx_file and precision == "int8") else path)  # as engine_for
    wanted = EngineKey(name, sha, precision, profiles_for(name, inputs, backend.max_batch), backend.machine)
    for entry in backend.cache.entries():
        if entry.key is not None and entry.key.serves(wanted):
            entry.path.unlink(missing_ok=True)
            entry.path.with_name(entry.path.name + SIDECAR_SUFFIX).unlink(missing_ok=True)


def verify_engines(options: DeviceSettings) -> tuple[list[str], bool]:
    """Check every engine: bytes against their sha256, key against this machine, and (with a GPU)
    its outputs against onnxruntime. Returns the lines and whether all passed."""
    cache = EngineCache(options.engines_dir)
    entries = cache.entries()
    if not entries:
        return [f"no engines in {cache.directory}"], True
    machine = current_machine(options)
    lines, ok = [], True
    backend = None
    for entry in entries:
        problems = [entry.problem] if entry.key is None else []
        if entry.key is not None:
            bad = entry.check_bytes()
            if bad:
                problems.append(bad)
            if machine is None:
                problems.append("cannot run here (no NVIDIA GPU or TensorRT) to check it")
            else:
                problems += entry.key.machine_mismatch(machine)
        if not problems and machine is not None:
            try:
                if backend is None:
                    backend = TensorRTBackend(replace(options, engine_policy="refuse"))
                problems += _run_check(backend, entry)
            except Exception as exc:  # a verify reports, it does not stop at the first bad engine
                problems.append(f"{type(exc).__name__}: {exc}")
        ok &= not problems
        lines.append(f"{entry.path.name}: {'ok' if not problems else 'FAILED ' + '; '.join(problems)}")
    if backend is not None:
        backend.close()
    return lines, ok


def _run_check(backend, entry: EngineEntry) -> list[str]:
    key = entry.key
    if key is None:
        return ["its sidecar has no engine key, so it cannot be run"]
    onnx_path = store.model_path(key.model, fetch=False)
    inputs, outputs = graph_signature(onnx.load(str(onnx_path), load_external_data=False))
    session = TensorRTSession(backend, entry.path, label=key.model, inputs=inputs, outputs=outputs)
    deviation = engine_deviation(session, onnx_path)
    limit = {"fp32": 1e-3, "fp16": 1e-2, "int8": 5e-2}.get(key.precision, 1e-2)
    return (
        [] if deviation <= limit else [f"outputs deviate from onnxruntime by {deviation:.3g} (limit {limit})"]
    )
