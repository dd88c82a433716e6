"""`ffbatch doctor`: what this machine offers, without starting a render.

GPUs (name, compute capability, memory), torch and its CUDA, TensorRT,
onnxruntime's providers, NVENC/NVDEC (in the FFmpeg build, and whether they
actually open here), built engines, and what `--backend auto` would choose
and why. Nothing here may fail: a broken optional install is a finding.
"""

from __future__ import annotations

import importlib.util
import os
import platform

from facefusion_batch.cores import usable_cores
from facefusion_batch.paths import ffbatch_home
from facefusion_batch.runtime.backends import availability, choose_auto
from facefusion_batch.runtime.engine_cache import EngineCache, MachineKey
from facefusion_batch.runtime.nvml import list_gpus, load_pynvml
from facefusion_batch.runtime.onnxruntime_backend import cuda_provider_problem
from facefusion_batch.video.decode.hwaccel import NVDEC, NVENC, codecs_present, nvdec_opens, nvenc_opens
from facefusion_batch.video.encode.formats import ENCODER_TABLE, available_encoders, containers_for


def _version(module: str) -> str:
    if importlib.util.find_spec(module) is None:
        return "not installed"
    try:
        mod = __import__(module)
        return str(getattr(mod, "__version__", "installed"))
    except Exception as exc:  # a broken optional install is a finding, not a crash
        return f"broken ({type(exc).__name__}: {exc})"


def report_lines() -> list[str]:
    avail = availability()
    torch_line = _version("torch")
    if avail.torch is not None:
        torch_line = f"{avail.torch} ({'CUDA ' + avail.torch_cuda if avail.torch_cuda else 'CPU-only build'})"
    trt_line = avail.tensorrt or avail.tensorrt_problem
    lines = [
        f"python        {platform.python_version()} on {platform.machine()} "
        f"({usable_cores()} of {os.cpu_count()} cores usable)",
        f"ffbatch home  {ffbatch_home()}",
        f"onnxruntime   {_version('onnxruntime')}",
        f"av (PyAV)     {_version('av')}",
        f"opencv        {_version('cv2')}",
        f"torch         {torch_line}",
        f"tensorrt      {trt_line}",
    ]
    nvml_state = "available" if load_pynvml() is not None else "not available (nvidia-ml-py, driver)"
    lines.append(f"nvml          {nvml_state}")
    try:
        import onnxruntime as ort

        providers = ort.get_available_providers()
        note = ""
        if "CUDAExecutionProvider" in providers and not avail.gpus:
            note = " (the CUDA provider is listed but no GPU is visible: sessions would fall back to CPU)"
        lines.append(f"ort providers {', '.join(providers)}{note}")
    except Exception:
        pass
    ort_gpu = cuda_provider_problem() or "available (onnxruntime's CUDA provider)"
    lines.append(f"gpu runtimes  torch (the default on --backend cuda); --gpu-runtime onnxruntime: {ort_gpu}")
    gpus = list_gpus()
    if gpus:
        for g in gpus:
            driver = f", driver {g.driver}" if g.driver else ""
            lines.append(f"gpu {g.index}         {g.describe()}{driver}")
    else:
        lines.append("gpu           no NVIDIA GPU (no driver/NVML, or torch without CUDA, or no device)")
    enc, dec = codecs_present(NVENC, "w"), codecs_present(NVDEC, "r")
    # the encoder table render validates against: doctor lists nothing render would refuse
    software = available_encoders(gpu=False)
    lines.append(f"encoders      {', '.join(software)} (software)")
    for name in software:
        lines.append(f"  {name:<12}{ENCODER_TABLE[name].family}: {' '.join(containers_for(name))}")
    if not gpus:
        lines.append(
            f"nvenc         in this FFmpeg build: {', '.join(enc) or 'none'}; unusable here (no NVIDIA GPU)"
        )
        lines.append(
            f"nvdec         in this FFmpeg build: {', '.join(dec) or 'none'}; unusable here (no NVIDIA GPU)"
        )
    else:
        problem = nvenc_opens(enc[0]) if enc else "not in this FFmpeg build"
        lines.append(
            f"nvenc         {', '.join(enc) or 'none'}: {'opens on this GPU' if not problem else problem}"
        )
        problem = nvdec_opens() if dec else "not in this FFmpeg build"
        state = problem or "CUDA decoding available"
        lines.append(f"nvdec         {', '.join(dec) or 'none'}: {state}")
    lines.extend(_engine_lines(gpus, avail.tensorrt))
    chosen, why = choose_auto(avail)
    lines.append(f"auto backend  {chosen}: {why}")
    return lines


def _engine_lines(gpus, trt_version: str | None) -> list[str]:
    cache = EngineCache()
    entries = cache.entries()
    if not entries:
        return [f"engines       none in {cache.directory}"]
    if not gpus or not trt_version:
        return [
            f"engines       {len(entries)} in {cache.directory} (cannot check them here: no GPU or TensorRT)"
        ]
    g = gpus[0]
    machine = MachineKey(gpu=g.name, sm=g.sm_tag, tensorrt=trt_version)
    fit = [e for e in entries if e.key is not None and not e.key.machine_mismatch(machine)]
    return [f"engines       {len(entries)} in {cache.directory}, {len(fit)} built for this GPU and TensorRT"]
