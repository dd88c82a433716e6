"""The CPU's ceiling for the learned models: GEMM peak, and the swapper's and recogniser's rates
over a sweep of batch sizes and thread counts, against the layout ffbatch's cpu backend picks.

- GEMM peak: onnxruntime's own MatMul (the MLAS kernels the convolutions run on) on 2048x2048
  float32, at 1 and at all cores;
- the inswapper and IResNet-50 stand-ins (scripts/make_standins.py: the real layer structure,
  random weights): multiply-adds counted from the graph's inferred shapes, timed at
  1/2/4/8/16 faces per call (--batches) and 1/all intra-op threads; GFLOP/s = 2 x MACs x faces /
  seconds. The configurations alternate within each round (the rounds alternating in
  direction), so a change in the machine's load falls on all alike; each keeps its fastest call
  and its median;
- ffbatch's layout (the cpu backend's threads; as many faces per call as a busy shot gives, up
  to the stage's memory budget, runtime/batching.py items_per_call: the largest batch of the
  sweep up to it) as a share of the sweep's best.

    python scripts/bench_cpu_rate.py [--standins DIR] [--reps 3] [--batches 1,2,4,8,16]
                                     [--models swapper,recogniser] [--out out/bench/cpu_rate.json]

Writes the JSON (with the load average before and after, and the CPU's caches) and a PNG chart
beside it. The figures are this machine's, under its load at the time: only ratios from one run
compare.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import make_standins  # noqa: E402

from facefusion_batch.models.prepare import make_dynamic_batch  # noqa: E402
from facefusion_batch.runtime.batching import BatchPolicy  # noqa: E402
from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCpuBackend  # noqa: E402


def session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def best_seconds(run, reps: int) -> float:
    run()  # warm-up: first-call allocations and kernel selection
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def gemm_peak(directory: Path, threads: int, n: int = 2048, reps: int = 5) -> float:
    path = directory / f"matmul_{n}.onnx"
    if not path.exists():
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["c"])],
            "gemm",
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in ("a", "b")],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
        )
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    sess = session(path, threads)
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((n, n)).astype(np.float32) for x in ("a", "b")}
    return 2 * n**3 / best_seconds(lambda: sess.run(None, feeds), reps) / 1e9


def multiply_adds(model: onnx.ModelProto) -> int:
    """Conv and Gemm/MatMul multiply-adds of one item, from the inferred shapes at batch 1."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes: dict[str, list[int]] = {}
    for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        shapes[v.name] = [d.dim_value if d.HasField("dim_value") else 1 for d in v.type.tensor_type.shape.dim]
    for t in inferred.graph.initializer:
        shapes[t.name] = list(t.dims)
    macs = 0
    for node in inferred.graph.node:
        if node.op_type == "Conv":
            out, weight = shapes[node.output[0]], shapes[node.input[1]]
            macs += int(np.prod(out)) * int(np.prod(weight[1:]))
        elif node.op_type in ("Gemm", "MatMul"):
            out, a = shapes[node.output[0]], shapes[node.input[0]]
            macs += int(np.prod(out)) * a[-1]
    return macs


STANDIN_FILES = {"swapper": "inswapper_128.onnx", "recogniser": "arcface_w600k_r50.onnx"}
# how the stages size their calls (swap/learned.py, faces/identity.py)
CALL_KWARGS: dict[str, dict] = {"swapper": {}, "recogniser": {"channels": 64, "budget_mb": 512.0}}


def swapper_feeds(rng: np.random.Generator, b: int) -> dict[str, np.ndarray]:
    return {
        "target": rng.uniform(0, 1, (b, 3, 128, 128)).astype(np.float32),
        "source": rng.standard_normal((b, 512)).astype(np.float32),
    }


def recogniser_feeds(rng: np.random.Generator, b: int) -> dict[str, np.ndarray]:
    return {"input": rng.uniform(-1, 1, (b, 3, 112, 112)).astype(np.float32)}


def cache_sizes() -> dict[str, str]:
    """This CPU's caches as cpu0 sees them (sysfs: level, type, size, the CPUs sharing it)."""
    sizes = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
            size, shared = (
                (index / "size").read_text().strip(),
                (index / "shared_cpu_list").read_text().strip(),
            )
        except OSError:
            continue
        sizes[f"L{level} {kind}"] = f"{size} (cpus {shared})"
    return sizes


def sweep_model(
    path: Path, macs: int, feeds_of, thread_counts: list[int], batches: list[int], reps: int
) -> list[dict]:
    """Every (threads, batch) configuration timed once per round, the rounds alternating in
    direction, so a change in the machine's load falls on all of them alike; each keeps its
    fastest call (the least disturbed) and its median."""
    rng = np.random.default_rng(1)
    sessions = {t: session(path, t) for t in thread_counts}
    feeds = {b: feeds_of(rng, b) for b in batches}
    configs = [(t, b) for t in thread_counts for b in batches]
    for t, b in configs:
        sessions[t].run(None, feeds[b])  # warm-up: first-call allocations and kernel selection
    times: dict[tuple[int, int], list[float]] = {c: [] for c in configs}
    for round_ in range(reps):
        for t, b in configs if round_ % 2 == 0 else configs[::-1]:
            start = time.perf_counter()
            sessions[t].run(None, feeds[b])
            times[(t, b)].append(time.perf_counter() - start)
    del sessions
    sweep = []
    for (threads, batch), seconds in times.items():
        fastest, median = min(seconds), float(np.median(seconds))
        sweep.append({
            "threads": threads, "batch": batch, "s_per_call": fastest, "s_per_call_median": median,
            "gflops": 2 * macs * batch / fastest / 1e9, "gflops_median": 2 * macs * batch / median / 1e9,
        })  # fmt: skip
        print(
            f"{path.stem} threads {threads} batch {batch}: {fastest:.2f} s/call "
            f"({2 * macs * batch / fastest / 1e9:.1f} GFLOP/s; median {2 * macs * batch / median / 1e9:.1f})",
            flush=True,
        )
    return sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--standins",
        type=Path,
        help="a directory with inswapper_128.onnx, arcface_w600k_r50.onnx (else made)",
    )
    parser.add_argument("--batches", default="1,2,4,8,16")
    parser.add_argument("--models", default="swapper,recogniser", help="swapper, recogniser or both")
    parser.add_argument("--reps", type=int, default=3, help="alternated rounds after a warm-up round")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "cpu_rate.json")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    thread_counts = sorted({1, cores})
    batches = [int(b) for b in args.batches.split(",")]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ffbatch-rate-") as tmp:
        work = Path(tmp)
        models = {}
        for name, make, size, feeds_of in (
            ("swapper", make_standins.inswapper, 128, swapper_feeds),
            ("recogniser", make_standins.iresnet50, 112, recogniser_feeds),
        ):
            if name not in args.models:
                continue
            file = (args.standins / STANDIN_FILES[name]) if args.standins else None
            model = onnx.load(str(file)) if file else make()
            macs = multiply_adds(model)
            path = work / f"{name}.batch.onnx"
            onnx.save(make_dynamic_batch(model)[0], str(path))
            del model
            models[name] = (path, macs, size, feeds_of)
        peaks = {t: gemm_peak(work, t) for t in thread_counts}
        results = {
            name: sweep_model(path, macs, feeds_of, thread_counts, batches, args.reps)
            for name, (path, macs, _, feeds_of) in models.items()
        }
    # a render hands a model every face of its frame batch, in calls of at most items_per_call:
    # on a busy shot that is the largest batch of the sweep up to it
    ours_threads = OnnxRuntimeCpuBackend().threads
    per_model = {}
    for name, sweep in results.items():
        path, macs, size, _ = models[name]
        best = max(sweep, key=lambda r: r["gflops"])
        ours_most = BatchPolicy().items_per_call(size, **CALL_KWARGS[name])
        ours = max(
            (r for r in sweep if r["threads"] == ours_threads and r["batch"] <= (ours_most or 1 << 16)),
            key=lambda r: r["batch"],
            default=None,
        )
        per_model[name] = {
            "gflop_per_face": 2 * macs / 1e9,
            "sweep": sweep,
            "best": best,
            "ffbatch_layout": {"threads": ours_threads, "most_faces_per_call": ours_most},
            "ffbatch_share_of_best": ours["gflops"] / best["gflops"] if ours else None,
            "ffbatch_share_of_best_median": (
                ours["gflops_median"] / max(r["gflops_median"] for r in sweep) if ours else None
            ),
            "best_share_of_gemm_peak": best["gflops"] / peaks[best["threads"]],
        }
    result = {
        "machine": f"{platform.machine()}, {cores} cores, {platform.processor() or 'cpu'}",
        "cache": cache_sizes(),
        "load_average_before": load_before,
        "load_average_at_end": os.getloadavg(),
        "onnxruntime": ort.__version__,
        "reps": args.reps,
        "gemm_peak_gflops": {str(t): round(v, 1) for t, v in peaks.items()},
        "models": per_model,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    chart(result, args.out.with_suffix(".png"))
    print(
        json.dumps(
            {
                "gemm_peak_gflops": result["gemm_peak_gflops"],
                **{
                    n: {k: m[k] for k in ("best", "ffbatch_layout", "ffbatch_share_of_best")}
                    for n, m in per_model.items()
                },
            },
            indent=1,
        )
    )


def chart(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(result["models"]), figsize=(6 * len(result["models"]), 4), squeeze=False)
    for ax, (name, m) in zip(axes[0], result["models"].items(), strict=True):
        threads = sorted({r["threads"] for r in m["sweep"]})
        for t in threads:
            rows = [r for r in m["sweep"] if r["threads"] == t]
            ax.plot(
                [r["batch"] for r in rows], [r["gflops"] for r in rows], "o-", label=f"{t} threads, fastest"
            )
            colour = ax.lines[-1].get_color()
            medians = [r["gflops_median"] for r in rows]
            ax.plot([r["batch"] for r in rows], medians, ":", color=colour, label=f"{t} threads, median")
            ax.axhline(result["gemm_peak_gflops"][str(t)], ls="--", lw=1, color=colour)
        ours = m["ffbatch_layout"]
        ax.set_xscale("log", base=2)
        ax.set_xlabel(
            f"faces per call (ffbatch: up to {ours['most_faces_per_call']}, {ours['threads']} threads)"
        )
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"{name} stand-in (dashed: MatMul peak)", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"{result['machine']}, load {result['load_average_before'][0]:.1f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
