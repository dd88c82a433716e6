"""The CPU's ceiling for the learned swapper: GEMM peak, and the swapper's rate over a sweep of
batch sizes and thread counts, against the layout ffbatch's cpu backend picks.

- GEMM peak: onnxruntime's own MatMul (the MLAS kernels the swapper's convolutions run on) on
  2048x2048 float32, at 1 and at all cores;
- the inswapper stand-in (scripts/make_standins.py: the real layer structure, random weights):
  its multiply-adds counted from the graph's inferred shapes, timed at batch 1/2/4 and
  1/all intra-op threads; GFLOP/s = 2 x MACs x faces / seconds;
- ffbatch's layout (the cpu backend's threads; as many faces per call as a render has, up to
  its memory budget) as a share of the sweep's best.

    python scripts/bench_cpu_rate.py [--standins DIR] [--reps 2] [--out out/bench/cpu_rate.json]

Writes the JSON and a PNG chart beside it. The figures are this machine's, under its load at the
time (recorded in the JSON): only ratios from one run compare.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--standins", type=Path, help="a directory with inswapper_128.onnx (else made)")
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "cpu_rate.json")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    thread_counts = sorted({1, cores})
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory(prefix="ffbatch-rate-") as tmp:
        work = Path(tmp)
        source = args.standins / "inswapper_128.onnx" if args.standins else None
        model = onnx.load(str(source)) if source else make_standins.inswapper()
        macs = multiply_adds(model)
        swapper = work / "inswapper_128.batch.onnx"
        onnx.save(make_dynamic_batch(model)[0], str(swapper))
        del model
        peaks = {t: gemm_peak(work, t) for t in thread_counts}
        sweep = []
        rng = np.random.default_rng(1)
        for threads in thread_counts:
            sess = session(swapper, threads)
            for batch in batches:
                feeds = {
                    "target": rng.uniform(0, 1, (batch, 3, 128, 128)).astype(np.float32),
                    "source": rng.standard_normal((batch, 512)).astype(np.float32),
                }
                seconds = best_seconds(lambda s=sess, f=feeds: s.run(None, f), args.reps)
                rate = 2 * macs * batch / seconds / 1e9
                sweep.append({"threads": threads, "batch": batch, "s_per_call": seconds, "gflops": rate})
                print(
                    f"threads {threads} batch {batch}: {seconds:.2f} s/call, {rate:.1f} GFLOP/s", flush=True
                )
            del sess
    best = max(sweep, key=lambda r: r["gflops"])
    # a render hands the swapper every face of its frame batch, up to the call's memory budget
    ours_threads, ours_most = OnnxRuntimeCpuBackend().threads, BatchPolicy().items_per_call(128)
    ours = max(
        (r for r in sweep if r["threads"] == ours_threads and r["batch"] <= (ours_most or 1 << 16)),
        key=lambda r: r["gflops"],
        default=None,
    )
    result = {
        "machine": f"{platform.machine()}, {cores} cores, {platform.processor() or 'cpu'}",
        "load_average_at_end": os.getloadavg(),
        "onnxruntime": ort.__version__,
        "swapper_gflop_per_face": 2 * macs / 1e9,
        "gemm_peak_gflops": {str(t): round(v, 1) for t, v in peaks.items()},
        "sweep": sweep,
        "best": best,
        "ffbatch_layout": {"threads": ours_threads, "most_faces_per_call": ours_most},
        "ffbatch_share_of_best": ours["gflops"] / best["gflops"] if ours else None,
        "best_share_of_gemm_peak": best["gflops"] / peaks[best["threads"]],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    chart(result, args.out.with_suffix(".png"))
    print(json.dumps({k: result[k] for k in ("gemm_peak_gflops", "best", "ffbatch_share_of_best")}, indent=1))


def chart(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    threads = sorted({r["threads"] for r in result["sweep"]})
    for t in threads:
        rows = [r for r in result["sweep"] if r["threads"] == t]
        ax.plot([r["batch"] for r in rows], [r["gflops"] for r in rows], "o-", label=f"swapper, {t} threads")
        ax.axhline(result["gemm_peak_gflops"][str(t)], ls="--", lw=1, color=ax.lines[-1].get_color())
    ax.set_xlabel("faces per call")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"inswapper stand-in on {result['machine']} (dashed: MatMul peak)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
