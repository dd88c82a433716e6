"""What GPUs this machine has, and how busy they are during a run (NVML).

NVML (`pynvml`, from the `nvidia-ml-py` package) reads the driver directly: it
needs no CUDA context, so the doctor and the sampler never disturb the render.
Everything here is optional: without the package, the driver or a GPU, the
inventory is empty and the sampler reports nothing.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

log = logging.getLogger("ffbatch")


@dataclass(frozen=True)
class GpuInfo:
    index: int  # the CUDA device index this process uses (after CUDA_VISIBLE_DEVICES)
    name: str
    sm: tuple[int, int]  # compute capability (major, minor)
    total_bytes: int
    free_bytes: int | None = None
    uuid: str | None = None
    driver: str | None = None

    @property
    def sm_tag(self) -> str:
        return f"sm_{self.sm[0]}{self.sm[1]}"

    def describe(self) -> str:
        free = f", {self.free_bytes / 2**30:.1f} GiB free" if self.free_bytes is not None else ""
        return f"{self.name}, {self.sm_tag}, {self.total_bytes / 2**30:.1f} GiB{free}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def load_pynvml() -> ModuleType | None:
    """The initialised pynvml module, or None (not installed, no driver, no GPU)."""
    if importlib.util.find_spec("pynvml") is None:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        log.debug("NVML unavailable: %s", exc)
        return None


def nvml_gpus(nvml: ModuleType) -> list[GpuInfo]:
    """Every GPU the driver sees, in NVML's (PCI bus) order."""
    out = []
    driver = None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
    except Exception:
        pass
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        try:
            sm = tuple(int(v) for v in nvml.nvmlDeviceGetCudaComputeCapability(h))
        except Exception:
            sm = (0, 0)
        try:
            uuid = _text(nvml.nvmlDeviceGetUUID(h))
        except Exception:
            uuid = None
        out.append(
            GpuInfo(
                index=i,
                name=_text(nvml.nvmlDeviceGetName(h)),
                sm=(sm[0], sm[1]),
                total_bytes=int(mem.total),
                free_bytes=int(mem.free),
                uuid=uuid,
                driver=driver,
            )
        )
    return out


def torch_gpus() -> list[GpuInfo]:
    """CUDA devices as torch numbers them; empty without torch or CUDA. Creates no context."""
    if importlib.util.find_spec("torch") is None:
        return []
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        out = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            uuid = getattr(p, "uuid", None)
            out.append(
                GpuInfo(
                    index=i,
                    name=p.name,
                    sm=(p.major, p.minor),
                    total_bytes=int(p.total_memory),
                    uuid=f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else uuid,
                )
            )
        return out
    except Exception as exc:  # a broken CUDA install must not crash a CPU render
        log.debug("torch cannot list CUDA devices: %s", exc)
        return []


def list_gpus() -> list[GpuInfo]:
    """GPUs as the backends will number them (torch's order), with NVML's free memory and driver.

    Without torch, NVML's list (what the driver sees); without either, empty.
    """
    nvml = load_pynvml()
    from_nvml = nvml_gpus(nvml) if nvml is not None else []
    from_torch = torch_gpus()
    if not from_torch:
        return from_nvml
    by_uuid = {g.uuid: g for g in from_nvml if g.uuid}
    merged = []
    for g in from_torch:
        extra = by_uuid.get(g.uuid) if g.uuid else None
        if extra is None and len(from_nvml) == len(from_torch):
            extra = from_nvml[g.index]  # same count: assume the same order
        merged.append(
            GpuInfo(
                index=g.index,
                name=g.name,
                sm=g.sm,
                total_bytes=g.total_bytes,
                free_bytes=extra.free_bytes if extra else None,
                uuid=g.uuid,
                driver=extra.driver if extra else None,
            )
        )
    return merged


@dataclass
class _Samples:
    utilisation: list[float] = field(default_factory=list)
    memory_used: list[int] = field(default_factory=list)
    encoder: list[float] = field(default_factory=list)
    decoder: list[float] = field(default_factory=list)


class NvmlSampler:
    """Samples GPU utilisation and memory on a thread while a job runs.

    `read(i)` returns (gpu %, memory used bytes, memory total bytes, encoder %,
    decoder %) for device `i`; by default it asks NVML. Tests pass a fake.
    """

    def __init__(
        self,
        devices: list[int],
        *,
        interval_s: float = 0.5,
        read=None,
        names: dict[int, str] | None = None,
    ) -> None:
        self.devices = list(devices)
        self.interval_s = interval_s
        self.names = names or {}
        self._nvml = None
        self._handles: dict[int, Any] = {}
        if read is None:
            self._nvml = load_pynvml()
            read = self._read_nvml if self._nvml is not None else None
        self._read = read
        self._samples = {d: _Samples() for d in self.devices}
        self._total: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0.0
        self.elapsed = 0.0

    @property
    def available(self) -> bool:
        return self._read is not None and bool(self.devices)

    def _read_nvml(self, device: int) -> tuple[float, int, int, float, float]:
        nvml = self._nvml
        assert nvml is not None  # this reader is chosen only when pynvml loaded
        h = self._handles.get(device)
        if h is None:
            h = self._handles[device] = nvml.nvmlDeviceGetHandleByIndex(device)
        util = nvml.nvmlDeviceGetUtilizationRates(h)
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        try:
            enc = float(nvml.nvmlDeviceGetEncoderUtilization(h)[0])
            dec = float(nvml.nvmlDeviceGetDecoderUtilization(h)[0])
        except Exception:
            enc = dec = float("nan")
        return float(util.gpu), int(mem.used), int(mem.total), enc, dec

    def sample_once(self) -> None:
        for d in self.devices:
            try:
                gpu, used, total, enc, dec = self._read(d)
            except Exception as exc:  # a sampler must never break the render
                log.debug("NVML sample of GPU %d failed: %s", d, exc)
                continue
            s = self._samples[d]
            s.utilisation.append(gpu)
            s.memory_used.append(used)
            s.encoder.append(enc)
            s.decoder.append(dec)
            self._total[d] = total

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def start(self) -> NvmlSampler:
        self.started = time.perf_counter()
        if self.available and self._thread is None:
            self.sample_once()
            self._thread = threading.Thread(target=self._run, name="ffbatch-nvml", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            self.sample_once()
        if self.started:
            self.elapsed = time.perf_counter() - self.started

    def __enter__(self) -> NvmlSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def summary(self) -> dict[str, Any]:
        """Per device: utilisation mean/p50/p90/max (%), peak memory used (MiB), sample count."""
        if not self.available:
            return {"available": False, "reason": "NVML not available (no nvidia-ml-py, driver or GPU)"}
        out: dict[str, Any] = {"available": True, "interval_s": self.interval_s, "devices": {}}
        for d, s in self._samples.items():
            n = len(s.utilisation)  # the sampler thread may be appending: read a consistent prefix
            if not n:
                out["devices"][str(d)] = {"samples": 0}
                continue
            util = np.asarray(s.utilisation[:n], np.float64)
            enc = np.asarray(s.encoder[:n], np.float64)
            dec = np.asarray(s.decoder[:n], np.float64)
            entry = {
                "name": self.names.get(d, ""),
                "samples": int(util.size),
                "utilisation_mean_pct": round(float(util.mean()), 1),
                "utilisation_p50_pct": round(float(np.percentile(util, 50)), 1),
                "utilisation_p90_pct": round(float(np.percentile(util, 90)), 1),
                "utilisation_max_pct": round(float(util.max()), 1),
                "memory_used_max_mib": round(max(s.memory_used[:n]) / 2**20, 1),
                "memory_total_mib": round(self._total.get(d, 0) / 2**20, 1),
            }
            if np.isfinite(enc).any():
                entry["encoder_mean_pct"] = round(float(np.nanmean(enc)), 1)
            if np.isfinite(dec).any():
                entry["decoder_mean_pct"] = round(float(np.nanmean(dec)), 1)
            out["devices"][str(d)] = entry
        return out
