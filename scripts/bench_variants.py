"""FP16 / INT8 variants of a learned model against float32, on real face crops: deviation in levels
(from each variant's sidecar, written when `ffbatch models prepare` made it) and CPU speed
(onnxruntime's CPU provider, the same real crops, best of `--runs`).

    ffbatch models calibration-crops FOOTAGE.mp4 -o CROPS --models-dir MODELS
    ffbatch models prepare inswapper_128 --fp16 --int8 --calibration-dir CROPS --models-dir MODELS
    python scripts/bench_variants.py inswapper_128 --calibration-dir CROPS [--batch 4 --runs 3] [--json OUT]

With $FFBATCH_MODELOPT_PYTHON set (or nvidia-modelopt importable) the variants are ModelOpt's;
otherwise ffbatch's cast pass and onnxruntime's quantize_static (the sidecar's "tool" says which).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from facefusion_batch.models import store
from facefusion_batch.models.calibration import feeds_for, identity_for, load_for
from facefusion_batch.models.prepare import variant_catalog, variant_name


def session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def best_seconds(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], runs: int) -> float:
    sess.run(None, feeds)  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name")
    parser.add_argument("--calibration-dir", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    catalog = variant_catalog(args.name, calibration_dir=args.calibration_dir)
    rows = []
    crops = load_for(args.name, args.calibration_dir, args.batch)
    identity = identity_for(args.name, args.calibration_dir, len(crops))
    for variant in ("batch", "fp16", "int8"):
        path = store.model_path(variant_name(args.name, variant), catalog=catalog, fetch=False)
        record = json.loads(store.sidecar_path(path).read_text(encoding="utf-8"))
        sess = session(path, args.threads)
        feeds = feeds_for(args.name, sess, crops, np.random.default_rng(0), len(crops), identity)
        seconds = best_seconds(sess, feeds, args.runs)
        dev = record.get("deviation_from_fp32", {})
        rows.append(
            {
                "variant": "fp32" if variant == "batch" else variant,
                "tool": record.get("tool", "ffbatch (dynamic batch)"),
                "max_levels": dev.get("max_levels", 0.0),
                "mean_levels": dev.get("mean_levels", 0.0),
                "measured_on": dev.get("measured_on", ""),
                "cpu_ms_per_face": 1000 * seconds / len(crops),
            }
        )
    print(f"{args.name}, batch {len(crops)}, {args.threads} threads, onnxruntime {ort.__version__}")
    print(f"{'variant':8s} {'max lv':>8s} {'mean lv':>8s} {'ms/face':>9s}  tool")
    for r in rows:
        print(
            f"{r['variant']:8s} {r['max_levels']:8.2f} {r['mean_levels']:8.3f} "
            f"{r['cpu_ms_per_face']:9.1f}  {r['tool']}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
