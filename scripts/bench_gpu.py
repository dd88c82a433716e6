"""GPU benchmark: one self-contained run of at most ~5 minutes on a machine with an NVIDIA GPU.

On synthesised 1080p clips with 1 and 6 faces it measures, in this process:

- the floor: decode + encode only, through the same reader and writer as a render, the decoder's
  yuv420p planes straight to the encoder (and, for comparison, through BGR);
- the classical default on each backend: cpu (onnxruntime), cuda with the host kernel set (models
  on the GPU, pixels on the CPU), cuda with the torch kernel set (frames cross to the GPU once) with
  BGR frames and with yuv420p planes, tensorrt (if installed);
- batch 1 versus batched, 1 stream versus N;
- the inswapper-architecture stand-in (scripts/make_standins.py, random weights: compute
  only) on the cuda backend, batch 1 versus batched, torch kernel set versus host kernel set;

and prints, per run: fps, render wall / floor wall, mean and p90 GPU utilisation (NVML),
device time per stage (CUDA events), batch sizes achieved and OOM retries.

    python scripts/bench_gpu.py [--frames 120] [--budget 290] [--out out/bench/gpu.json]
    python scripts/bench_gpu.py --runtimes [--out out/bench/gpu-runtimes.json]

`--runtimes` times instead the cuda backend's two runtimes model by model (YuNet, the face mesh,
the inswapper stand-in; batch 1 and 16, inputs already on the device): the ONNX interpreter on
torch (runtime/onnx_torch.py, fp32 and auto) against onnxruntime's CUDA provider with I/O binding
(`--gpu-runtime onnxruntime`, fp32), with how far their outputs are apart. It needs onnxruntime-gpu
for the second; `--device cpu` runs the same measurement on the CPU (a dry run of the script).

Without an NVIDIA GPU (or torch with CUDA) it stops at once with exit status 2.
TensorRT engines are built on first use (minutes); the build time is reported on its own.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

STANDIN = "stand-in with inswapper_128's layer structure and random weights (compute only)"


def fail(message: str) -> None:
    print(f"bench_gpu: {message}", file=sys.stderr)
    sys.exit(2)


def require_gpu():
    try:
        import torch
    except ImportError:
        fail("needs torch with CUDA (pip install 'facefusion-batch[cuda]') and an NVIDIA GPU")
    if not torch.cuda.is_available():
        build = torch.version.cuda or "CPU-only build"
        fail(f"no NVIDIA GPU visible to torch {torch.__version__} ({build}); nothing to measure")
    return torch


def make_clip(path: Path, faces: int, frames: int, size=(1920, 1080), fps: int = 25) -> Path:
    """The CPU benchmark's synthesised clip (a pan over a real photo, tone audio)."""
    from bench import make_clip as make_bench_clip

    return make_bench_clip(path, faces, size, frames, fps)


def floor(clip: Path, out: Path, pixel_format: str = "yuv420p", hwaccel: str = "none") -> dict:
    """Decode + encode only: the CPU benchmark's floor job; by default with the decoder's planes
    (no colour conversion): the true floor, and what a resident render on the GPU also does."""
    from bench import job_floor

    result = job_floor(clip, out, pixel_format, hwaccel)
    return {
        "frames": result["frames"],
        "wall_s": round(result["wall_s"], 3),
        "fps": round(result["frames"] / result["wall_s"], 2),
    }


def render_run(settings, *, resident: bool, planes: bool = True) -> dict:
    """One render. `resident`: the torch kernel set (frames stay on the device), else the host
    kernel set with the models on the GPU; `planes`: frames stay yuv420p planes where they can."""
    import torch

    from facefusion_batch import Renderer, render
    from facefusion_batch.kernels.host import HostKernels
    from facefusion_batch.runtime.nvml import NvmlSampler

    renderer = Renderer.load(settings)
    backend = renderer.models.backend
    if not resident:
        renderer.kernel_set = HostKernels
    if not planes:
        renderer.frame_layout = lambda info, report=None: None
    device = torch.cuda.current_device() if torch.cuda.is_available() else 0
    sampler = NvmlSampler([device], interval_s=0.2).start()
    t0 = time.perf_counter()
    report = render(settings, renderer=renderer)
    wall = time.perf_counter() - t0
    sampler.stop()
    summary = report.summary()
    out = {
        "backend": summary["backend"],
        "frames": report.frames_out,
        "faces": report.faces_swapped,
        "wall_s": round(wall, 3),
        "load_s": round(renderer.load_seconds, 2),
        "fps": round(report.frames_out / wall, 2),
        "frames_as": summary["frames_as"],
        "batch_size_mean": summary["batch_size_mean"],
        "batch_latency_p50_s": summary["batch_latency_p50_s"],
        "batch_latency_p99_s": summary["batch_latency_p99_s"],
        "stage_seconds": summary["stage_seconds"],
    }
    gpu = sampler.summary()
    if gpu.get("available"):
        dev = next(iter(gpu["devices"].values()))
        out["gpu_util_mean_pct"] = dev.get("utilisation_mean_pct")
        out["gpu_util_p90_pct"] = dev.get("utilisation_p90_pct")
        out["gpu_mem_max_mib"] = dev.get("memory_used_max_mib")
    device_report = getattr(backend, "report", None)
    if device_report is not None:
        r = device_report()
        out["device_seconds"] = r.get("device_seconds")
        out["memory_guard"] = r.get("memory_guard")
        out["precision"] = r.get("precision")
    close = getattr(backend, "close", None)
    if close:
        close()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--frames", type=int, default=120, help="frames per GPU clip (CPU runs use a quarter)"
    )
    parser.add_argument("--budget", type=float, default=290.0, help="seconds; later runs are skipped past it")
    parser.add_argument("--out", type=Path, default=None, help="default out/bench/gpu.json (-runtimes.json)")
    parser.add_argument("--runtimes", action="store_true", help="time torch against onnxruntime per model")
    parser.add_argument("--device", default="cuda:0", help="--runtimes: cuda:N, or cpu for a dry run")
    parser.add_argument("--batches", default="1,16", help="--runtimes: batch sizes, comma-separated")
    parser.add_argument("--calls", type=int, default=20, help="--runtimes: timed calls per measurement")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.runtimes:
        out = args.out or ROOT / "out" / "bench" / "gpu-runtimes.json"
        if args.device.startswith("cuda"):
            require_gpu()
        batches = tuple(int(b) for b in args.batches.split(","))
        results = compare_runtimes(args.device, budget=args.budget, batches=batches, calls=args.calls)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2))
        print(f"wrote {out}")
        return
    args.out = args.out or ROOT / "out" / "bench" / "gpu.json"
    torch = require_gpu()

    from facefusion_batch import DeviceSettings, RenderSettings
    from facefusion_batch.models.assets import asset_path
    from facefusion_batch.runtime.device import default_streams

    props = torch.cuda.get_device_properties(0)
    streams = default_streams(props.total_memory)
    results: dict = {
        "gpu": f"{props.name} sm_{props.major}{props.minor}, {props.total_memory / 2**30:.0f} GiB",
        "torch": torch.__version__,
        "streams_default": streams,
        "clips": {},
    }
    print(f"GPU: {results['gpu']}; torch {torch.__version__}; default streams {streams}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="ffbatch-bench-gpu-"))
    source = asset_path("astronaut.png")

    def left() -> float:
        return args.budget - (time.perf_counter() - started)

    try:
        import tensorrt  # noqa: F401

        has_trt = True
    except Exception:
        has_trt = False

    from facefusion_batch.video.decode.hwaccel import hwaccel_problem

    nvdec = not hwaccel_problem("cuda")
    results["nvdec"] = nvdec or hwaccel_problem("cuda")
    for faces in (1, 6):
        clip = make_clip(work / f"clip-{faces}.mp4", faces, args.frames)
        cpu_clip = make_clip(work / f"clip-{faces}-cpu.mp4", faces, max(8, args.frames // 4))
        runs: dict = {
            "floor": floor(clip, work / "floor.mp4"),
            "floor_bgr": floor(clip, work / "floor.mp4", "bgr24"),
        }
        if nvdec:
            runs["floor_nvdec"] = floor(clip, work / "floor.mp4", hwaccel="cuda")
        floor_fps = runs["floor"]["fps"]
        print(
            f"\n{faces} face(s), 1080p, {args.frames} frames: floor (decode+encode) {floor_fps:.1f} fps "
            f"(through BGR {runs['floor_bgr']['fps']:.1f}"
            + (f", NVDEC {runs['floor_nvdec']['fps']:.1f})" if "floor_nvdec" in runs else ")"),
            flush=True,
        )
        base = RenderSettings(
            input=clip, output=work / "out.mp4", sources=(source,), overwrite=True, quiet=True, chunk_frames=0
        )
        plan = [
            (
                "cpu b8 w2",
                replace(base, input=cpu_clip, batch_size=8, workers=2),
                False,
            ),
            (
                f"cuda resident BGR b16 s{streams}",
                replace(
                    base,
                    batch_size=16,
                    workers=streams,
                    device=DeviceSettings(backend="cuda", precision="auto", streams=streams),
                ),
                "bgr",
            ),
            (
                "cuda host kernels b16 s1",
                replace(
                    base,
                    batch_size=16,
                    workers=1,
                    device=DeviceSettings(backend="cuda", precision="auto", streams=1),
                ),
                False,
            ),
            (
                "cuda resident b1 s1",
                replace(
                    base,
                    batch_size=1,
                    workers=1,
                    device=DeviceSettings(backend="cuda", precision="auto", streams=1),
                ),
                True,
            ),
            (
                "cuda resident b16 s1",
                replace(
                    base,
                    batch_size=16,
                    workers=1,
                    device=DeviceSettings(backend="cuda", precision="auto", streams=1),
                ),
                True,
            ),
            (
                f"cuda resident b16 s{streams}",
                replace(
                    base,
                    batch_size=16,
                    workers=streams,
                    device=DeviceSettings(backend="cuda", precision="auto", streams=streams),
                ),
                True,
            ),
        ]
        if nvdec:
            plan.append(
                (
                    f"cuda resident b16 s{streams} NVDEC",
                    replace(
                        base,
                        batch_size=16,
                        workers=streams,
                        device=DeviceSettings(
                            backend="cuda", precision="auto", streams=streams, hwaccel="cuda"
                        ),
                    ),
                    True,
                )
            )
        if has_trt:
            plan.append(
                (
                    f"tensorrt resident b16 s{streams}",
                    replace(
                        base,
                        batch_size=16,
                        workers=streams,
                        device=DeviceSettings(
                            backend="tensorrt", precision="auto", streams=streams, max_batch=16
                        ),
                    ),
                    True,
                )
            )
        for name, settings, resident in plan:
            need = 150.0 if name.startswith("tensorrt") else 25.0
            if left() < need:
                runs[name] = {"skipped": f"budget: {left():.0f} s left"}
                print(f"  {name:34s} skipped (budget)", flush=True)
                continue
            try:
                r = render_run(settings, resident=bool(resident), planes=resident != "bgr")
            except Exception as exc:  # a failed configuration is a finding; the rest still run
                runs[name] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"  {name:34s} FAILED {type(exc).__name__}: {exc}", flush=True)
                continue
            clip_floor = (
                floor_fps
                if not name.startswith("cpu")
                else floor(cpu_clip, work / "floor-cpu.mp4", "bgr24")["fps"]
            )
            r["ratio_to_floor"] = round(clip_floor / r["fps"], 2) if r["fps"] else None
            runs[name] = r
            util = r.get("gpu_util_mean_pct")
            print(
                f"  {name:34s} {r['fps']:7.1f} fps  x{r['ratio_to_floor']:.2f} floor  "
                f"GPU {util if util is not None else '?'}%  batch {r['batch_size_mean']}  "
                f"p50 {r['batch_latency_p50_s']:.3f}s p99 {r['batch_latency_p99_s']:.3f}s  "
                f"(load {r['load_s']} s)",
                flush=True,
            )
        results["clips"][f"{faces}_faces"] = runs

    results["learned_standin"] = learned_standin(work, args, left, source)
    results["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    chart = args.out.with_suffix(".png")
    try:
        draw_chart(results, chart)
    except Exception as exc:  # the numbers matter more than the picture
        print(f"chart not drawn: {type(exc).__name__}: {exc}", file=sys.stderr)
    print(f"\nwritten {args.out} and {chart} ({results['wall_s']} s)")


def draw_chart(results: dict, path: Path) -> None:
    """fps of every run against the floor, per clip; device time per stage of the fastest GPU run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clips = results["clips"]
    fig, axes = plt.subplots(1, len(clips) + 1, figsize=(6 * (len(clips) + 1), 5))
    best: tuple[float, str, dict] | None = None
    for ax, (clip, runs) in zip(axes, clips.items(), strict=False):
        names = [n for n, r in runs.items() if "fps" in r and not n.startswith("floor")]
        fps = [runs[n]["fps"] for n in names]
        bars = ax.barh(names, fps, color=["#888" if n.startswith("cpu") else "#2a7" for n in names])
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
        ax.axvline(runs["floor"]["fps"], color="r", linestyle="--", label="decode+encode floor")
        ax.set_xlabel("frames per second")
        ax.set_title(f"1080p, {clip.replace('_', ' ')}")
        ax.legend(fontsize=8, loc="lower right")
        ax.tick_params(axis="y", labelsize=8)
        for n in names:
            r = runs[n]
            if not n.startswith("cpu") and r.get("device_seconds") and (best is None or r["fps"] > best[0]):
                best = (r["fps"], f"{clip}: {n}", r)
    ax = axes[-1]
    if best is not None:
        _, label, r = best
        stages = {k: v * 1000 / r["frames"] for k, v in r["device_seconds"].items()}
        ax.barh(list(stages), list(stages.values()), color="#27a")
        ax.set_xlabel("device ms per frame (CUDA events)")
        ax.set_title(f"where the GPU time goes ({label})", fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"ffbatch GPU benchmark — {results['gpu']}, torch {results['torch']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def learned_standin(work: Path, args, left, source: Path) -> dict:
    """inswapper stand-in on the cuda backend, batch 1 versus 16 (when make_standins.py is here)."""
    if not (ROOT / "scripts" / "make_standins.py").is_file():
        return {"skipped": "scripts/make_standins.py not present"}
    if left() < 60:
        return {"skipped": f"budget: {left():.0f} s left"}
    try:
        from make_standins import inswapper, iresnet50, write

        from facefusion_batch.config import RenderSettings, SwapSettings
        from facefusion_batch.models.prepare import make_dynamic_batch
        from facefusion_batch.runtime.device import DeviceSettings
        from facefusion_batch.swap.learned import LearnedSettings

        models_dir = work / "standins"
        for name, make in (("inswapper_128", inswapper), ("arcface_w600k_r50", iresnet50)):
            write(make_dynamic_batch(make())[0], models_dir, name)
        frames = max(8, args.frames // 4)
        clip = make_clip(work / "clip-learned.mp4", 1, frames)
        swap = SwapSettings(swapper="learned", learned=LearnedSettings(swapper_model="inswapper_128"))
        out: dict = {"stand_in": STANDIN}
        for batch, resident in ((1, True), (16, True), (16, False)):
            if left() < 20:
                break
            settings = RenderSettings(
                input=clip,
                output=work / "out-learned.mp4",
                sources=(source,),
                device=DeviceSettings(backend="cuda", precision="auto", streams=1),
                batch_size=batch,
                workers=1,
                swap=swap,
                models_dir=models_dir,
                overwrite=True,
                quiet=True,
                chunk_frames=0,
            )
            name = f"b{batch}" + ("" if resident else " host kernels")
            r = render_run(settings, resident=resident)
            out[name] = r
            print(
                f"  inswapper stand-in cuda {name:18s} {r['fps']:7.1f} fps  "
                f"GPU {r.get('gpu_util_mean_pct')}%",
                flush=True,
            )
        return out
    except Exception as exc:
        print(f"  inswapper stand-in FAILED {type(exc).__name__}: {exc}", flush=True)
        return {"error": f"{type(exc).__name__}: {exc}"}


def runtime_models(work: Path) -> dict[str, tuple[Path, dict[str, tuple[int, ...]]]]:
    """Model file and per-item input shapes: YuNet on a 1080p frame letterboxed to 640 wide, the
    face mesh, the inswapper stand-in (its dynamic-batch copy, as a render runs it)."""
    import onnx
    from make_standins import inswapper

    from facefusion_batch.models.prepare import make_dynamic_batch
    from facefusion_batch.models.store import model_path

    swapper = work / "inswapper_128_batch.onnx"
    if not swapper.is_file():
        onnx.save(make_dynamic_batch(inswapper())[0], swapper)
    return {
        "yunet": (model_path("yunet_2023mar_batch"), {"input": (3, 384, 640)}),
        "face_mesh": (model_path("face_mesh_468"), {"input_1": (3, 192, 192)}),
        "inswapper_standin": (swapper, {"target": (3, 128, 128), "source": (512,)}),
    }


def compare_runtimes(device: str, *, budget: float, batches=(1, 16), calls: int = 20) -> dict:
    """ms per call and items/s of each runtime on each model and batch (inputs resident on
    `device`, outputs left there; a call ends when its outputs are ready), and the largest
    difference between the runtimes' fp32 outputs relative to the output's range."""
    import numpy as np
    import torch

    from facefusion_batch.runtime.device import DeviceSettings
    from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCudaBackend, cuda_provider_problem
    from facefusion_batch.runtime.torch_backend import TorchBackend

    started = time.perf_counter()
    on_gpu = device.startswith("cuda")
    gpu = torch.device(device).index or 0 if on_gpu else 0
    results: dict = {"device": torch.cuda.get_device_name(gpu) if on_gpu else "cpu", "calls": calls}
    problem = cuda_provider_problem() if on_gpu else ""
    results["onnxruntime"] = problem or "CUDA provider" if on_gpu else "CPU provider (dry run)"
    runtimes = {
        "torch fp32": lambda: TorchBackend(
            DeviceSettings(backend="cuda", precision="fp32", gpu=gpu), device=device
        ),
        "torch auto": lambda: TorchBackend(
            DeviceSettings(backend="cuda", precision="auto", gpu=gpu), device=device
        ),
    }
    if not problem:
        settings = DeviceSettings(backend="cuda", precision="fp32", gpu=gpu, gpu_runtime="onnxruntime")
        runtimes["onnxruntime fp32"] = lambda: OnnxRuntimeCudaBackend(settings, device=device)
    work = Path(tempfile.mkdtemp(prefix="ffbatch-runtimes-"))

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize(device)

    rng = np.random.default_rng(0)
    for model, (path, shapes) in runtime_models(work).items():
        per_model: dict = {}
        for batch in batches:
            feeds = {
                k: torch.from_numpy(rng.uniform(0, 1, (batch, *s)).astype(np.float32)).to(device)
                for k, s in shapes.items()
            }
            outputs = {}
            for name, make in runtimes.items():
                if time.perf_counter() - started > budget:
                    per_model[f"b{batch} {name}"] = {"skipped": "budget"}
                    continue
                try:
                    session = make().load(path, label=model)
                    for _ in range(3):  # cuDNN's algorithm search and onnxruntime's arena settle
                        out = session.run_device(feeds)
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        out = session.run_device(feeds)
                    sync()
                    ms = (time.perf_counter() - t0) / calls * 1e3
                    outputs[name] = {k: v.float().cpu().numpy() for k, v in out.items()}
                    row = {"ms_per_call": round(ms, 3), "items_per_s": round(batch / ms * 1e3, 1)}
                    row["precision"] = getattr(session, "precision", "fp32")
                except Exception as exc:  # one runtime failing must not hide the others' numbers
                    row = {"error": f"{type(exc).__name__}: {exc}"}
                per_model[f"b{batch} {name}"] = row
                print(f"  {model:18s} b{batch:<3d} {name:17s} {row}", flush=True)
            ref = outputs.get("torch fp32")
            for name, got in outputs.items():
                if ref is not None and name != "torch fp32":
                    dev = max(
                        float(np.abs(got[k] - ref[k]).max()) / max(1.0, float(np.abs(ref[k]).max()))
                        for k in ref
                    )
                    per_model[f"b{batch} {name}"]["max_rel_deviation_from_torch_fp32"] = dev
        results[model] = per_model
    return results


if __name__ == "__main__":
    main()
