"""FP32, FP16 and INT8 of the inswapper stand-in on a GPU: what each TensorRT engine really runs in
(its inspector's layer shares, as `ffbatch engines build` prints them), ms per call, and how far
its output is from the FP32 model on face crops, in levels (0-255); the same files on the cuda
backend's runtimes (torch's ONNX interpreter; onnxruntime's CUDA provider where onnxruntime-gpu is).

    python scripts/bench_precisions.py [--out out/bench/precisions.json] [--budget 120]
    python scripts/bench_precisions.py --device cpu --width 32 --batch 2 --calls 2   # dry run

The FP16 and INT8 files come from models/convert.py (`float16_file`, `int8_file`: ModelOpt where it
is at hand, else ffbatch's cast pass and onnxruntime's quantize_static), calibrated on the first
half of the crops and checked on the other half. Crops: a calibration set (`--crops DIR`, from
`ffbatch models calibration-crops`) with its faces' embeddings; else the faces the default
detector finds in the embedded photos (and their mirror images) with seeded identities; the JSON
says which. The weights are random (scripts/make_standins.py, `--width` < 1024 narrows every
layer): compute and numeric behaviour, not face quality. TensorRT engines are built on first use
(a build counts against the budget); an engine that came out mostly FP32 is reported as refused.
A chart is written beside the JSON (.png). Exit 1 when a measurement failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

NAME = "inswapper_128"  # the FaceFusion model whose conventions (template, identity, output) apply
STANDIN = "stand-in with inswapper_128's layer structure and random weights (compute only)"
PRECISIONS = ("fp32", "fp16", "int8")


def standin(work: Path, width: int) -> tuple[Path, list[Any]]:
    """The stand-in's dynamic-batch copy (as a render runs it) and its graph inputs."""
    import onnx
    from make_standins import inswapper

    from facefusion_batch.models.prepare import make_dynamic_batch

    model = make_dynamic_batch(inswapper(width=width))[0]
    path = work / f"{NAME}.onnx"
    onnx.save(model, str(path))
    return path, list(model.graph.input)


def photo_crops() -> np.ndarray:
    """inswapper's aligned crops of the faces in the embedded photos and their mirror images."""
    from facefusion_batch.faces.align import align_crops, host_crops
    from facefusion_batch.faces.detect import YuNetDetector
    from facefusion_batch.kernels.host import HostKernels
    from facefusion_batch.models import store
    from facefusion_batch.models.assets import asset_path
    from facefusion_batch.models.catalog import DEFAULT_DETECTOR
    from facefusion_batch.models.facefusion import learned_model
    from facefusion_batch.runtime.backends import select_backend
    from facefusion_batch.runtime.device import DeviceSettings
    from facefusion_batch.tools.calibration import PHOTOS
    from facefusion_batch.video.pictures.stills import read_image

    spec = learned_model(NAME)
    kernels = HostKernels()
    session = select_backend(DeviceSettings()).load(
        store.model_path(DEFAULT_DETECTOR), label=DEFAULT_DETECTOR
    )
    detector = YuNetDetector(session)
    crops: list[np.ndarray] = []
    for photo in PHOTOS:
        image = read_image(asset_path(photo), "bench_precisions")
        for frame in (image, np.ascontiguousarray(image[:, ::-1])):
            frames = kernels.upload([frame])
            table = detector(kernels, frames)
            if len(table):
                found, _ = align_crops(
                    kernels, frames, table.frame_index, table.landmarks5, spec.template, spec.size or 128
                )
                crops += list(host_crops(kernels, found))
    return np.stack(crops)


def face_feeds(path: Path, inputs: list[Any], crops_dir: Path | None, count: int) -> tuple[dict, str]:
    """The stand-in's inputs for up to `count` face crops (item i swapped with face i+1), and what
    they are."""
    from facefusion_batch.models import calibration
    from facefusion_batch.tools.calibration import identity_inputs

    rng = np.random.default_rng(0)
    if crops_dir is not None:
        crops = calibration.load_for(NAME, crops_dir, count)
        raw = calibration.load_embeddings(crops_dir, len(crops))
        what = f"{len(crops)} crops of calibration set {crops_dir}, identities from their faces' embeddings"
    else:
        try:
            crops = photo_crops()[:count]
            what = f"{len(crops)} faces of the embedded photos and their mirror images (default detector)"
        except Exception as exc:  # no detector in the store and no network: still measure
            crops = calibration.synthetic_crops(count, 128, rng)
            what = f"{count} smooth seeded images (no faces: {type(exc).__name__}: {exc})"
        raw = rng.standard_normal((len(crops), 512)).astype(np.float32)
        raw *= calibration.RAW_EMBEDDING_NORM / np.linalg.norm(raw, axis=1, keepdims=True)
        what += "; identities from seeded random embeddings"
    identity = identity_inputs(NAME, raw, model_path=path)  # through the stand-in's own emap
    shim = types.SimpleNamespace(
        get_inputs=lambda: [
            types.SimpleNamespace(
                name=v.name,
                shape=[d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim],
                type="tensor(float)",
            )
            for v in inputs
        ]
    )
    return calibration.feeds_for(NAME, shim, crops, rng, len(crops), identity), what


def split(feeds: dict[str, np.ndarray]) -> tuple[dict, dict, str]:
    """(calibration half, checking half, what): both the same when there are fewer than 4 items."""
    n = len(next(iter(feeds.values())))
    if n < 4:
        return feeds, feeds, f"all {n} items calibrate and check (too few to split)"
    h = n // 2
    return (
        {k: v[:h] for k, v in feeds.items()},
        {k: v[h:] for k, v in feeds.items()},
        f"{h} items calibrate, {n - h} others check",
    )


def levels(output: np.ndarray) -> np.ndarray:
    from facefusion_batch.models.calibration import output_levels

    found = output_levels(NAME, output)
    return found if found is not None else output.astype(np.float64) * 255.0


def deviation(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    diff = np.abs(levels(got) - levels(ref))
    return {"max_levels": round(float(diff.max()), 3), "mean_levels": round(float(diff.mean()), 4)}


def reference(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The FP32 model's output on onnxruntime's CPU provider: no TF32, no fused kernels."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(["output"], feeds)[0]


class Meter:
    """Runs one loaded session: its output on the checking crops and its ms per call on a batch
    already on the device."""

    def __init__(self, device: str, batch: int, calls: int, check: dict, ref: np.ndarray) -> None:
        import torch

        self.device, self.calls, self.check, self.ref = device, calls, check, ref
        reps = -(-batch // len(ref))
        self.timed = {
            k: torch.from_numpy(np.ascontiguousarray(np.concatenate([v] * reps)[:batch])).to(device)
            for k, v in check.items()
        }
        self.batch = batch

    def sync(self) -> None:
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)

    def __call__(self, session) -> dict[str, Any]:
        got = session.run(self.check)
        row: dict[str, Any] = deviation(got["output"], self.ref)
        for _ in range(3):  # algorithm searches and arenas settle
            session.run_device(self.timed)
        self.sync()
        t0 = time.perf_counter()
        for _ in range(self.calls):
            session.run_device(self.timed)
        self.sync()
        ms = (time.perf_counter() - t0) / self.calls * 1e3
        return {**row, "ms_per_call": round(ms, 3), "items_per_s": round(self.batch / ms * 1e3, 1)}


def tensorrt_rows(files: dict[str, Path], work: Path, meter: Meter, args, left, rows: dict, save) -> None:
    """One engine per precision, built as `ffbatch engines build` builds it, with its layer shares,
    into `rows` (`save` after each)."""
    from facefusion_batch.errors import BackendUnavailableError
    from facefusion_batch.runtime.device import DeviceSettings
    from facefusion_batch.runtime.engine_cache import SIDECAR_SUFFIX
    from facefusion_batch.runtime.engine_precision import describe, shares
    from facefusion_batch.runtime.tensorrt_backend import (
        PrecisionMismatchError,
        TensorRTBackend,
        TensorRTSession,
        import_tensorrt,
    )

    try:
        trt = import_tensorrt()
        options = DeviceSettings(
            backend="tensorrt", precision="fp32", max_batch=args.batch, engines_dir=work / "engines"
        )
        backend = TensorRTBackend(options, purpose="bench_precisions")
    except BackendUnavailableError as exc:
        rows["tensorrt"] = {"skipped": str(exc)}
        return
    m = backend.machine
    rows["tensorrt"] = {"version": str(trt.__version__), "machine": f"{m.gpu} {m.sm}"}
    try:
        for precision in PRECISIONS:
            label = f"tensorrt {precision}"
            if left() < args.min_build:  # a build cannot be stopped half-way
                rows[label] = {
                    "skipped": f"budget: {left():.0f} s left, an engine build needs {args.min_build:.0f}"
                }
                continue
            t0 = time.perf_counter()
            try:
                engine, key, inputs, outputs = backend.engine_for(
                    files["fp32"], NAME, precision, files["int8"] if precision == "int8" else None
                )
                meta = json.loads(engine.with_name(engine.name + SIDECAR_SUFFIX).read_text())
                layers = meta.get("layers") or {}
                session = TensorRTSession(backend, engine, label=NAME, inputs=inputs, outputs=outputs)
                rows[label] = {
                    "build_s": round(time.perf_counter() - t0, 1),
                    "layers": layers,
                    "layer_shares": shares(layers),
                    "layers_line": describe(layers),
                    **meter(session),
                }
            except PrecisionMismatchError as exc:  # what TensorRT made of the file: a finding
                rows[label] = {"refused": str(exc), "build_s": round(time.perf_counter() - t0, 1)}
            except Exception as exc:  # one precision failing must not hide the others
                rows[label] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"  {label:24s} {rows[label]}", flush=True)
            save()
    finally:
        backend.close()


def cuda_backend_rows(files: dict[str, Path], meter: Meter, args, left, rows: dict, save) -> None:
    """The same three files on the cuda backend's runtimes, into `rows` (`save` after each)."""
    from facefusion_batch.runtime.device import DeviceSettings
    from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCudaBackend, cuda_provider_problem
    from facefusion_batch.runtime.torch_backend import TorchBackend

    on_gpu = args.device.startswith("cuda")
    gpu = int(args.device.split(":")[1]) if ":" in args.device else 0

    def torch_backend(precision: str) -> Callable[[], Any]:
        return lambda: TorchBackend(
            DeviceSettings(backend="cuda", precision=precision, gpu=gpu), device=args.device
        )

    runs: dict[str, tuple[Callable[[], Any], Path]] = {
        "torch fp32": (torch_backend("fp32"), files["fp32"]),
        "torch auto (its own fp16)": (torch_backend("auto"), files["fp32"]),
        "torch fp16 file": (torch_backend("fp32"), files["fp16"]),
        "torch int8 file": (torch_backend("fp32"), files["int8"]),
    }
    problem = cuda_provider_problem() if on_gpu else "dry run on the CPU"
    if not problem:
        ort = DeviceSettings(backend="cuda", precision="fp32", gpu=gpu, gpu_runtime="onnxruntime")
        for precision in PRECISIONS:
            runs[f"onnxruntime {precision} file"] = (
                lambda: OnnxRuntimeCudaBackend(ort, device=args.device),
                files[precision],
            )
    rows["onnxruntime_cuda"] = problem or "CUDA provider with I/O binding"
    for label, (make, path) in runs.items():
        if left() < args.min_step:
            rows[label] = {"skipped": f"budget: {left():.0f} s left"}
            continue
        try:
            session = make().load(path, label=NAME)
            rows[label] = {"precision": getattr(session, "precision", "fp32"), **meter(session)}
        except Exception as exc:  # one runtime failing must not hide the others' numbers
            rows[label] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"  {label:24s} {rows[label]}", flush=True)
        save()


def draw_chart(results: dict, path: Path) -> None:
    """ms per call and deviation in levels per run; TensorRT runs labelled with their layer shares."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {k: v for k, v in results["runs"].items() if isinstance(v, dict) and "ms_per_call" in v}
    labels = [f"{k}\n{v['layers_line']}" if "layers_line" in v else k for k, v in runs.items()]
    colours = ["#2a7" if k.startswith("tensorrt") else "#27a" for k in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 1.2 + 0.6 * max(1, len(runs))))
    bars = left.barh(labels, [v["ms_per_call"] for v in runs.values()], color=colours)
    left.bar_label(bars, fmt="%.2f", fontsize=8)
    left.set_xlabel(f"ms per call, batch {results['batch']} (inputs on the device)")
    y = np.arange(len(runs))
    right.barh(y - 0.2, [v["max_levels"] for v in runs.values()], height=0.4, label="max", color="#c44")
    right.barh(y + 0.2, [v["mean_levels"] for v in runs.values()], height=0.4, label="mean", color="#e95")
    right.set_yticks(y, [""] * len(runs))
    right.set_xscale("symlog", linthresh=0.1)
    right.set_xlabel("|output - FP32 model| in levels (0-255), checking crops")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.tick_params(axis="y", labelsize=7)
        ax.invert_yaxis()
    fig.suptitle(f"inswapper stand-in (width {results['width']}) on {results['device']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def summary(results: dict) -> list[str]:
    """One line per run: ms per call, deviation in levels, and the engine's layer shares."""
    runs = results["runs"]
    trt = runs.get("tensorrt", {})
    lines = [
        "tensorrt: " + (trt.get("skipped") or f"{trt.get('version')} on {trt.get('machine')}"),
        f"onnxruntime's CUDA provider: {runs.get('onnxruntime_cuda')}",
        f"{'run':28s} {'ms/call':>9s} {'max lv':>8s} {'mean lv':>8s}  layers / precision",
    ]
    for label, row in runs.items():
        if not isinstance(row, dict) or label == "tensorrt":
            continue
        if "ms_per_call" in row:
            state = row.get("layers_line", row.get("precision", ""))
            numbers = f"{row['ms_per_call']:9.3f} {row['max_levels']:8.3f} {row['mean_levels']:8.4f}"
            lines.append(f"{label:28s} {numbers}  {state}")
        else:
            what = next(iter(row))
            lines.append(f"{label:28s} {what}: {row[what]}"[:240])
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "precisions.json")
    parser.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for a dry run")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds; later runs are skipped past it")
    parser.add_argument("--width", type=int, default=1024, help="stand-in width (1024: inswapper's own)")
    parser.add_argument("--batch", type=int, default=16, help="items per timed call")
    parser.add_argument("--calls", type=int, default=10, help="timed calls per run")
    parser.add_argument("--crops", type=Path, default=None, help="a calibration set (calibration-crops)")
    parser.add_argument("--count", type=int, default=32, help="face crops at most (half calibrate)")
    parser.add_argument("--converter", default="auto", help="models/convert.py: auto, modelopt or builtin")
    parser.add_argument("--min-step", type=float, default=10.0, help="seconds a run needs to be started")
    parser.add_argument("--min-build", type=float, default=60.0, help="seconds a TensorRT build needs")
    args = parser.parse_args(argv)
    if args.width < 8 or args.width % 8 or min(args.batch, args.calls, args.count) < 1:
        parser.error("--width must be a multiple of 8; --batch, --calls and --count at least 1")
    if args.crops is not None and not (args.crops / "manifest.json").is_file():
        parser.error(f"--crops {args.crops}: not a calibration set (no manifest.json)")
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(
                "bench_precisions: no NVIDIA GPU visible to torch; --device cpu for a dry run",
                file=sys.stderr,
            )
            return 2
    started = time.perf_counter()

    def left() -> float:
        return args.budget - (time.perf_counter() - started)

    from facefusion_batch.models.convert import float16_file, int8_file

    work = Path(tempfile.mkdtemp(prefix="ffbatch-precisions-"))
    try:  # the stand-in's files are large (inswapper's: 550 MB)
        fp32, inputs = standin(work, args.width)
        feeds, crops = face_feeds(fp32, inputs, args.crops, args.count)
        calibrate, check, halves = split(feeds)
        files = {"fp32": fp32, "fp16": work / f"{NAME}@fp16.onnx", "int8": work / f"{NAME}@int8.onnx"}
        variants: dict[str, Any] = {}
        for precision, make in (("fp16", float16_file), ("int8", int8_file)):
            t0 = time.perf_counter()
            info = make(fp32, files[precision], calibrate, converter=args.converter)
            variants[precision] = {
                "tool": info.get("tool"),
                "made": info.get("made"),
                "seconds": round(time.perf_counter() - t0, 1),
                "mib": round(files[precision].stat().st_size / 2**20, 1),
            }
            print(f"  {precision} file: {variants[precision]}", flush=True)
        ref = reference(fp32, check)
        meter = Meter(args.device, args.batch, args.calls, check, ref)
        device = args.device
        if device.startswith("cuda"):
            import torch

            device = f"{torch.cuda.get_device_name(torch.device(device))} (torch {torch.__version__})"
        results: dict[str, Any] = {
            "stand_in": STANDIN,
            "width": args.width,
            "device": device,
            "batch": args.batch,
            "calls": args.calls,
            "crops": crops,
            "halves": halves,
            "reference": "the FP32 file on onnxruntime's CPU provider",
            "tensorrt_fp16_from": "tensorrt_backend.fp16_onnx (convert.to_float16), as engines build does",
            "variants": variants,
            "runs": {},
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)

        def save() -> None:  # after every run: a session stopped at its time limit keeps what was measured
            results["wall_s"] = round(time.perf_counter() - started, 1)
            args.out.write_text(json.dumps(results, indent=2) + "\n")

        save()
        tensorrt_rows(files, work, meter, args, left, results["runs"], save)
        cuda_backend_rows(files, meter, args, left, results["runs"], save)
        save()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    chart = args.out.with_suffix(".png")
    try:
        draw_chart(results, chart)
    except Exception as exc:  # the numbers matter more than the picture
        print(f"chart not drawn: {type(exc).__name__}: {exc}", file=sys.stderr)
    print("\n".join(["", *summary(results), f"written {args.out} and {chart} ({results['wall_s']} s)"]))
    failed = [k for k, v in results["runs"].items() if isinstance(v, dict) and "error" in v]
    if failed:
        print(f"bench_precisions: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
