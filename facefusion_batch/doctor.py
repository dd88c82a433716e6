"""`ffbatch doctor`: what this machine offers, without starting a render."""

from __future__ import annotations

import importlib.util
import os
import platform


def _version(module: str) -> str:
    if importlib.util.find_spec(module) is None:
        return "not installed"
    try:
        mod = __import__(module)
        return str(getattr(mod, "__version__", "installed"))
    except Exception as exc:  # a broken optional install is a finding, not a crash
        return f"broken ({type(exc).__name__}: {exc})"


def _encoders() -> list[str]:
    import av

    usable = []
    for name in ("libx264", "libx265", "h264_nvenc", "hevc_nvenc", "libsvtav1"):
        try:
            av.codec.Codec(name, "w")
            usable.append(name)
        except Exception:
            continue
    return usable


def report_lines() -> list[str]:
    from facefusion_batch.paths import ffbatch_home
    from facefusion_batch.runtime.backends import nvidia_gpu_count

    lines = [
        f"python        {platform.python_version()} on {platform.machine()} ({os.cpu_count()} cores)",
        f"ffbatch home  {ffbatch_home()}",
        f"onnxruntime   {_version('onnxruntime')}",
        f"av (PyAV)     {_version('av')}",
        f"opencv        {_version('cv2')}",
        f"torch         {_version('torch')}",
        f"tensorrt      {_version('tensorrt')}",
    ]
    try:
        import onnxruntime as ort

        lines.append(f"ort providers {', '.join(ort.get_available_providers())}")
    except Exception:
        pass
    gpus = nvidia_gpu_count()
    if gpus:
        import torch

        for i in range(gpus):
            p = torch.cuda.get_device_properties(i)
            lines.append(f"gpu {i}         {p.name}, sm_{p.major}{p.minor}, {p.total_memory / 2**30:.1f} GiB")
    else:
        lines.append("gpu           no NVIDIA GPU (torch with CUDA not present or no device)")
    lines.append(
        f"encoders      {', '.join(_encoders())} (present in this FFmpeg build; NVENC also "
        "needs a GPU that has it)"
    )
    lines.append(
        "auto backend  cpu (onnxruntime): the cuda and tensorrt backends are not built yet"
        if not gpus
        else "auto backend  cpu: a GPU is present but the GPU backends are not built yet"
    )
    return lines
