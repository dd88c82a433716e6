"""NVIDIA ModelOpt's ONNX tools on one file: AutoCast to float16, or INT8 Q/DQ quantisation.

Called in-process (`run`) when `modelopt` imports in ffbatch's interpreter, or as a script in
another one (``python modelopt_run.py REQUEST.json``, the result as the last line of stdout):
ModelOpt's ``[onnx]`` extra pins onnx and onnxruntime-gpu releases of its own, so it usually
lives in a virtual environment of its own (`convert.modelopt_python`). Imports only the
standard library, numpy, onnx and modelopt: that environment needs nothing of ffbatch.

A request: ``{"mode": "fp16" | "int8", "src": PATH, "dst": PATH, "calibration": NPZ | None,
"fp32_ops": [op types kept in float32]}``; the NPZ holds each graph input by name, items on
axis 0 (real face crops and embeddings, models/calibration.py).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import sys
from typing import Any


def version() -> str:
    return importlib.metadata.version("nvidia-modelopt")


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Convert `request["src"]` into `request["dst"]`; returns what was done, for the sidecar."""
    mode, src, dst = request["mode"], str(request["src"]), str(request["dst"])
    calibration = request.get("calibration")
    fp32_ops = sorted(request["fp32_ops"])
    if mode == "fp16":
        import onnx
        from modelopt.onnx.autocast import convert_to_mixed_precision

        model = convert_to_mixed_precision(
            onnx_path=src,
            low_precision_type="fp16",
            op_types_to_exclude=fp32_ops,
            keep_io_types=True,
            calibration_data=calibration,
            providers=["cpu"],
        )
        onnx.save(model, dst)
        how = "ModelOpt AutoCast (fp16, I/O types kept)"
    elif mode == "int8":
        import numpy as np
        from modelopt.onnx.quantization import quantize

        if calibration is None:
            raise ValueError("INT8 quantisation needs calibration data")
        with np.load(calibration) as data:
            feeds = {k: data[k] for k in data.files}
        quantize(
            src,
            quantize_mode="int8",
            calibration_data=feeds,
            calibration_method="entropy",
            calibration_eps=["cpu"],
            high_precision_dtype="fp16",
            op_types_to_exclude_fp16=fp32_ops,
            output_path=dst,
            log_level="WARNING",
        )
        how = "ModelOpt ONNX quantize (int8 Q/DQ, entropy calibration, fp16 high precision)"
    else:
        raise ValueError(f"unknown mode {mode!r}")
    return {
        "made": how,
        "fp32_ops": fp32_ops,
        "high_precision": "fp16",
        "tool": f"nvidia-modelopt {version()}",
    }


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING)
    with open(argv[0], encoding="utf-8") as fh:
        request = json.load(fh)
    result = run(request)
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
