"""TensorRT engines on disk, named and checked by everything they depend on.

An engine is tied to the ONNX it was built from (sha256), the GPU (name and
compute capability), the TensorRT version, the OS, the precision and the
optimisation profile. All of that is the engine's `EngineKey`; the file name
says the main parts and a short digest covers the rest:

    face_mesh_468-3f9a0c1d2e4b-nvidia-l4-sm_89-trt10.16.1.11-fp16-b1-64-64-1a2b3c4d.engine

Beside each engine, `<engine>.json` holds the full key, the engine's own
sha256 and how it was built. An engine is used only when its key matches what
is running (and its bytes their sha256); one built for another GPU or
TensorRT is rebuilt or refused with a message that says both sides. Nothing is
ever loaded blindly.

Pure Python: no TensorRT, CUDA or torch needed to read, list or check keys.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from facefusion_batch import fsutil
from facefusion_batch.errors import InputError
from facefusion_batch.paths import ffbatch_home
from facefusion_batch.runtime.session import TensorInfo

log = logging.getLogger("ffbatch")

ENGINE_SUFFIX = ".engine"
SIDECAR_SUFFIX = ".json"
KEY_VERSION = 1


class EngineMismatchError(InputError):
    """A stored engine does not fit this GPU / TensorRT, and the policy is to refuse (exit 2)."""


def default_engines_dir() -> Path:
    return ffbatch_home() / "engines"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._]+", "-", text.lower()).strip("-") or "unknown"


def host_platform() -> str:
    return f"{platform.system().lower()}-{platform.machine().lower()}"


@dataclass(frozen=True)
class Profile:
    """One input's optimisation profile: min, opt and max shapes."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def covers(self, other: Profile) -> bool:
        """Whether every shape `other` allows is allowed here."""
        return (
            self.name == other.name
            and len(self.min) == len(other.min)
            and all(a <= b for a, b in zip(self.min, other.min, strict=True))
            and all(a >= b for a, b in zip(self.max, other.max, strict=True))
        )

    def accepts(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.min) and all(
            lo <= s <= hi for lo, s, hi in zip(self.min, shape, self.max, strict=True)
        )


def batch_range(max_batch: int, opt: int | None = None) -> tuple[int, int, int]:
    """(min, opt, max) of the batch dim. TensorRT tunes kernels for `opt`; we run full batches."""
    if max_batch < 1:
        raise InputError(f"--max-batch must be at least 1 (got {max_batch})")
    opt = max_batch if opt is None else max(1, min(opt, max_batch))
    return 1, opt, max_batch


def _nchw(shape: tuple, axis: int) -> str | None:
    """'height' or 'width' for axis 2 or 3 of a rank-4 input, else None."""
    return ("height", "width")[axis - 2] if len(shape) == 4 and axis in (2, 3) else None


def input_profiles(
    inputs: Iterable[TensorInfo],
    max_batch: int,
    *,
    opt_batch: int | None = None,
    dynamic: dict[str, tuple[int, int, int]] | None = None,
) -> tuple[Profile, ...]:
    """Profiles for every input: a symbolic axis 0 is the batch; fixed dims stay fixed, axis 0
    included (TensorRT refuses a range on a static dim: FaceFusion's files fix the batch at 1);
    other symbolic dims take their (min, opt, max) from `dynamic` by dim name (YuNet's height
    and width), or an unnamed one ('?', insightface's retinaface/scrfd) of an image input
    [N, C, H, W] by its place."""
    b_min, b_opt, b_max = batch_range(max_batch, opt_batch)
    dynamic = dynamic or {}
    out = []
    for info in inputs:
        lo: list[int] = []
        mid: list[int] = []
        hi: list[int] = []
        for axis, dim in enumerate(info.shape):
            if isinstance(dim, int) and dim > 0:
                low, opt, high = dim, dim, dim
            elif axis == 0:
                low, opt, high = b_min, b_opt, b_max
            elif (named := dim if dim in dynamic else _nchw(info.shape, axis)) in dynamic:
                a, b, c = dynamic[named]
                if not a <= b <= c:
                    raise InputError(
                        f"profile for {info.name}.{dim}: need min <= opt <= max (got {a}, {b}, {c})"
                    )
                low, opt, high = a, b, c
            else:
                raise InputError(
                    f"input {info.name!r} has a dynamic dim {dim!r} (axis {axis}) with no profile range; "
                    "TensorRT needs min/opt/max for it"
                )
            lo.append(low)
            mid.append(opt)
            hi.append(high)
        out.append(Profile(info.name, tuple(lo), tuple(mid), tuple(hi)))
    return tuple(out)


def declares_fixed_batch(onnx_path: Path) -> bool:
    """Whether the file fixes the batch (axis 0 of an input of rank ≥ 2 is a number), as
    FaceFusion's do: TensorRT would build such a file for that batch only."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    for v in model.graph.input:
        dims = v.type.tensor_type.shape.dim
        if v.name not in init and len(dims) >= 2 and dims[0].HasField("dim_value"):
            return True
    return False


@dataclass(frozen=True)
class MachineKey:
    """What an engine depends on besides the model: GPU, TensorRT, OS."""

    gpu: str
    sm: str  # "sm_89"
    tensorrt: str
    platform: str = field(default_factory=host_platform)


@dataclass(frozen=True)
class EngineKey:
    model: str
    model_sha256: str
    precision: str
    profiles: tuple[Profile, ...]
    machine: MachineKey

    @property
    def batch(self) -> tuple[int, int, int]:
        """The widest batch range of any input (a fixed-size input such as a fidelity weight has 1)."""
        ranges = [(p.min[0], p.opt[0], p.max[0]) for p in self.profiles if p.min]
        return max(ranges, key=lambda r: r[2], default=(1, 1, 1))

    def digest(self) -> str:
        text = json.dumps(self.to_json(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def filename(self) -> str:
        b = self.batch
        m = self.machine
        return (
            f"{slug(self.model)}-{self.model_sha256[:12]}-{slug(m.gpu)}-{m.sm}-trt{slug(m.tensorrt)}-"
            f"{self.precision}-b{b[0]}-{b[1]}-{b[2]}-{self.digest()}{ENGINE_SUFFIX}"
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["key_version"] = KEY_VERSION
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> EngineKey:
        if data.get("key_version") != KEY_VERSION:
            raise ValueError(f"engine key version {data.get('key_version')!r} (expected {KEY_VERSION})")
        return EngineKey(
            model=data["model"],
            model_sha256=data["model_sha256"],
            precision=data["precision"],
            profiles=tuple(
                Profile(p["name"], tuple(p["min"]), tuple(p["opt"]), tuple(p["max"]))
                for p in data["profiles"]
            ),
            machine=MachineKey(**data["machine"]),
        )

    def machine_mismatch(self, machine: MachineKey) -> list[str]:
        """How this engine's machine differs from `machine` (empty when it may run there)."""
        have, want = self.machine, machine
        out = []
        if have.gpu != want.gpu or have.sm != want.sm:
            out.append(f"built for {have.gpu} ({have.sm}), this GPU is {want.gpu} ({want.sm})")
        if have.tensorrt != want.tensorrt:
            out.append(f"built with TensorRT {have.tensorrt}, this is TensorRT {want.tensorrt}")
        if have.platform != want.platform:
            out.append(f"built on {have.platform}, this is {want.platform}")
        return out

    def serves(self, wanted: EngineKey) -> bool:
        """Same model bytes, precision and machine, and profiles at least as wide."""
        return (
            self.model_sha256 == wanted.model_sha256
            and self.precision == wanted.precision
            and self.machine == wanted.machine
            and len(self.profiles) == len(wanted.profiles)
            and all(a.covers(b) for a, b in zip(self.profiles, wanted.profiles, strict=True))
        )


@dataclass
class EngineEntry:
    path: Path
    key: EngineKey | None
    meta: dict[str, Any]
    problem: str = ""  # why the entry cannot be used at all (no sidecar, bad json, ...)

    def check_bytes(self) -> str:
        """'' when the engine's bytes match the sha256 recorded at build time, else the problem."""
        expected = self.meta.get("engine_sha256")
        if not expected:
            return "no engine_sha256 in its sidecar"
        try:
            actual = _sha256(self.path)
        except OSError as exc:
            return f"cannot read: {exc}"
        return (
            ""
            if actual == expected
            else f"sha256 {actual[:12]}… does not match the recorded {expected[:12]}…"
        )


_sha256 = fsutil.sha256_file


_write_atomic = fsutil.write_bytes_atomically


class EngineCache:
    """The engines directory: lookup by key, mismatch reports, atomic writes, timing caches."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_engines_dir()

    def entries(self) -> list[EngineEntry]:
        if not self.directory.is_dir():
            return []
        out = []
        for path in sorted(self.directory.glob(f"*{ENGINE_SUFFIX}")):
            sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
            try:
                meta = json.loads(sidecar.read_text())
                key = EngineKey.from_json(meta["key"])
                out.append(EngineEntry(path, key, meta))
            except FileNotFoundError:
                out.append(EngineEntry(path, None, {}, "no sidecar (.json) with its key"))
            except (ValueError, KeyError, TypeError) as exc:
                out.append(EngineEntry(path, None, {}, f"unreadable sidecar: {exc}"))
        return out

    def find(self, wanted: EngineKey) -> EngineEntry | None:
        """The best stored engine that serves `wanted` (exact name first, then the narrowest profile)."""
        candidates = [e for e in self.entries() if e.key is not None and e.key.serves(wanted)]
        if not candidates:
            return None
        exact = [e for e in candidates if e.path.name == wanted.filename()]
        if exact:
            return exact[0]
        return min(candidates, key=lambda e: e.key.batch[2] if e.key is not None else 0)

    def foreign(self, wanted: EngineKey) -> list[EngineEntry]:
        """Engines of the same model and precision built for another GPU, TensorRT or OS."""
        return [
            e
            for e in self.entries()
            if e.key is not None
            and e.key.model_sha256 == wanted.model_sha256
            and e.key.precision == wanted.precision
            and e.key.machine_mismatch(wanted.machine)
        ]

    def timing_cache_path(self, machine: MachineKey) -> Path:
        return self.directory / f"timing-{slug(machine.gpu)}-{machine.sm}-trt{slug(machine.tensorrt)}.cache"

    def write(self, key: EngineKey, engine: bytes, meta: dict[str, Any] | None = None) -> Path:
        path = self.directory / key.filename()
        info = dict(meta or {})
        info["key"] = key.to_json()
        info["engine_sha256"] = hashlib.sha256(engine).hexdigest()
        info["engine_bytes"] = len(engine)
        _write_atomic(path, engine)
        _write_atomic(path.with_name(path.name + SIDECAR_SUFFIX), json.dumps(info, indent=1).encode())
        return path

    def resolve(
        self,
        wanted: EngineKey,
        *,
        policy: str,
        build: Callable[[], tuple[bytes, dict[str, Any]]],
    ) -> Path:
        """The engine file for `wanted`: a stored one whose key and bytes check out, else built
        (`policy="build"`) or refused with what differs (`policy="refuse"`)."""
        found = self.find(wanted)
        if found is not None:
            problem = found.check_bytes()
            if not problem:
                return found.path
            reason = f"engine {found.path.name} is damaged ({problem})"
        else:
            foreign = self.foreign(wanted)
            stored = foreign[0].key if foreign else None
            if stored is not None:  # foreign() keeps keyed engines only
                what = "; ".join(stored.machine_mismatch(wanted.machine))
                reason = f"the stored engine {foreign[0].path.name} does not fit this machine ({what})"
            else:
                reason = f"no engine for {wanted.model} ({wanted.precision}, batch ≤ {wanted.batch[2]}) yet"
        if policy == "refuse":
            raise EngineMismatchError(
                f"{reason}; run `ffbatch engines build {wanted.model}` on this machine "
                f"(engines directory {self.directory})"
            )
        log.info(
            "%s: building it for %s %s (this takes a while, once)",
            reason,
            wanted.machine.gpu,
            wanted.machine.sm,
        )
        engine, meta = build()
        return self.write(wanted, engine, meta)
