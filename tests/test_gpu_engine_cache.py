"""TensorRT engine keys, names, profiles and mismatch handling; the builder against a fake
TensorRT (10.x without strong typing flags / 11.x style). No GPU or TensorRT needed."""

from __future__ import annotations

import json
import types

import pytest

from facefusion_batch.errors import EXIT_USAGE
from facefusion_batch.runtime.engine_cache import (
    EngineCache,
    EngineKey,
    EngineMismatchError,
    MachineKey,
    Profile,
    batch_range,
    input_profiles,
)
from facefusion_batch.runtime.session import TensorInfo

YUNET_INPUTS = (TensorInfo("input", ("batch", 3, "height", "width"), "tensor(float)"),)
MESH_INPUTS = (TensorInfo("input_1", ("batch", 3, 192, 192), "tensor(float)"),)
L4 = MachineKey(gpu="NVIDIA L4", sm="sm_89", tensorrt="10.16.1.11", platform="linux-x86_64")
H100 = MachineKey(gpu="NVIDIA H100 80GB HBM3", sm="sm_90", tensorrt="10.16.1.11", platform="linux-x86_64")
SHA = "ab" * 32


def key(machine=L4, max_batch=16, precision="fp16", sha=SHA, model="face_mesh_468"):
    return EngineKey(model, sha, precision, input_profiles(MESH_INPUTS, max_batch), machine)


def test_batch_profile_and_shapes():
    assert batch_range(16) == (1, 16, 16)
    assert batch_range(16, opt=8) == (1, 8, 16)
    (p,) = input_profiles(MESH_INPUTS, 32)
    assert p == Profile("input_1", (1, 3, 192, 192), (32, 3, 192, 192), (32, 3, 192, 192))
    (y,) = input_profiles(YUNET_INPUTS, 8, dynamic={"height": (32, 384, 640), "width": (32, 640, 640)})
    assert y.min == (1, 3, 32, 32) and y.opt == (8, 3, 384, 640) and y.max == (8, 3, 640, 640)
    assert y.accepts((4, 3, 384, 640)) and not y.accepts((9, 3, 384, 640)) and not y.accepts((1, 3, 704, 640))
    with pytest.raises(Exception, match="no profile range"):
        input_profiles(YUNET_INPUTS, 8)
    with pytest.raises(Exception, match="at least 1"):
        batch_range(0)


def test_engine_name_says_what_it_depends_on():
    name = key().filename()
    assert name.startswith("face_mesh_468-abababababab-nvidia-l4-sm_89-trt10.16.1.11-fp16-b1-16-16-")
    assert name.endswith(".engine")
    # every part of the key changes the name
    names = {
        key().filename(),
        key(machine=H100).filename(),
        key(max_batch=8).filename(),
        key(precision="int8").filename(),
        key(sha="cd" * 32).filename(),
        key(machine=MachineKey("NVIDIA L4", "sm_89", "11.4.0.106", "linux-x86_64")).filename(),
    }
    assert len(names) == 6
    assert EngineKey.from_json(json.loads(json.dumps(key().to_json()))) == key()


def test_machine_mismatch_messages():
    assert key().machine_mismatch(L4) == []
    msg = key().machine_mismatch(H100)
    assert msg == ["built for NVIDIA L4 (sm_89), this GPU is NVIDIA H100 80GB HBM3 (sm_90)"]
    other_trt = MachineKey("NVIDIA L4", "sm_89", "11.4.0.106", "linux-x86_64")
    assert key().machine_mismatch(other_trt) == [
        "built with TensorRT 10.16.1.11, this is TensorRT 11.4.0.106"
    ]


def test_profiles_cover():
    wide, narrow = key(max_batch=32), key(max_batch=8)
    assert wide.serves(narrow) and not narrow.serves(wide)
    assert not key(machine=H100).serves(key())
    assert not key(precision="fp32").serves(key())


def _build_counter(payload=b"ENGINE"):
    calls = []

    def build():
        calls.append(1)
        return payload + bytes([len(calls)]), {"built": "now"}

    return build, calls


def test_resolve_builds_once_then_reuses(tmp_path):
    cache = EngineCache(tmp_path)
    build, calls = _build_counter()
    path = cache.resolve(key(), policy="build", build=build)
    assert path.name == key().filename() and path.is_file()
    meta = json.loads(path.with_name(path.name + ".json").read_text())
    assert meta["key"]["machine"]["gpu"] == "NVIDIA L4" and meta["engine_sha256"]
    assert cache.resolve(key(), policy="refuse", build=build) == path
    assert len(calls) == 1
    # a wider stored engine serves a narrower request
    assert cache.resolve(key(max_batch=4), policy="refuse", build=build) == path


def test_engine_for_another_gpu_is_refused_or_rebuilt(tmp_path):
    cache = EngineCache(tmp_path)
    build, calls = _build_counter()
    cache.resolve(key(machine=H100), policy="build", build=build)
    with pytest.raises(EngineMismatchError) as err:
        cache.resolve(key(), policy="refuse", build=build)
    text = str(err.value)
    assert "NVIDIA H100 80GB HBM3 (sm_90)" in text and "NVIDIA L4 (sm_89)" in text
    assert "ffbatch engines build face_mesh_468" in text
    assert err.value.exit_code == EXIT_USAGE
    path = cache.resolve(key(), policy="build", build=build)
    assert "sm_89" in path.name and len(calls) == 2
    assert len(cache.entries()) == 2  # the other GPU's engine is kept for that GPU


def test_damaged_engine_is_never_loaded(tmp_path):
    cache = EngineCache(tmp_path)
    build, calls = _build_counter()
    path = cache.resolve(key(), policy="build", build=build)
    path.write_bytes(b"truncated")
    with pytest.raises(EngineMismatchError, match="damaged"):
        cache.resolve(key(), policy="refuse", build=build)
    rebuilt = cache.resolve(key(), policy="build", build=build)
    assert rebuilt == path and len(calls) == 2
    assert not cache.entries()[0].check_bytes()


def test_entries_without_sidecar_are_reported(tmp_path):
    (tmp_path / "stray.engine").write_bytes(b"x")
    (tmp_path / "bad.engine").write_bytes(b"x")
    (tmp_path / "bad.engine.json").write_text("{")
    problems = {e.path.name: e.problem for e in EngineCache(tmp_path).entries()}
    assert "no sidecar" in problems["stray.engine"]
    assert "unreadable" in problems["bad.engine"]
    assert EngineCache(tmp_path).find(key()) is None


def test_timing_cache_per_gpu_and_version(tmp_path):
    cache = EngineCache(tmp_path)
    assert cache.timing_cache_path(L4) != cache.timing_cache_path(H100)
    assert cache.timing_cache_path(L4).name == "timing-nvidia-l4-sm_89-trt10.16.1.11.cache"


# --- the builder against a fake TensorRT ------------------------------------------------------------


def fake_tensorrt(version: str, strongly_typed: bool):
    log = {"flags": [], "shapes": [], "network_flags": None, "timing_in": None}

    class Flag:
        FP16 = "FP16"

    class NetworkFlags:
        pass

    if strongly_typed:
        NetworkFlags.STRONGLY_TYPED = 1

    class TimingCache:
        def __init__(self, data):
            log["timing_in"] = data

        def serialize(self):
            return b"TIMING"

    class Config:
        def set_memory_pool_limit(self, pool, size):
            log["workspace"] = size

        def set_flag(self, flag):
            log["flags"].append(flag)

        def create_timing_cache(self, data):
            return TimingCache(data)

        def set_timing_cache(self, cache, ignore_mismatch):
            self._cache = cache

        def get_timing_cache(self):
            return self._cache

        def add_optimization_profile(self, profile):
            log["profiles"] = profile

    class Profile_:
        def set_shape(self, name, lo, opt, hi):
            log["shapes"].append((name, tuple(lo), tuple(opt), tuple(hi)))

    class Builder:
        def __init__(self, logger):
            pass

        def create_network(self, flags):
            log["network_flags"] = flags
            return "network"

        def create_builder_config(self):
            return Config()

        def create_optimization_profile(self):
            return Profile_()

        def build_serialized_network(self, network, config):
            return b"SERIALIZED"

    class Parser:
        num_errors = 0

        def __init__(self, network, logger):
            pass

        def parse_from_file(self, path):
            log["onnx"] = path
            return True

    class Logger:
        WARNING = 2

        def __init__(self, level):
            pass

    trt = types.SimpleNamespace(
        __version__=version,
        Logger=Logger,
        Builder=Builder,
        OnnxParser=Parser,
        BuilderFlag=Flag,
        NetworkDefinitionCreationFlag=NetworkFlags,
        MemoryPoolType=types.SimpleNamespace(WORKSPACE="WORKSPACE"),
    )
    return trt, log


@pytest.mark.parametrize("version,strong", [("11.4.0.106", True), ("10.16.1.11", True), ("10.0.0", False)])
def test_build_engine_is_strongly_typed_with_profile_and_timing_cache(tmp_path, version, strong):
    from facefusion_batch.runtime.tensorrt_backend import build_engine

    trt, log = fake_tensorrt(version, strong)
    timing = tmp_path / "timing.cache"
    timing.write_bytes(b"OLD")
    k = EngineKey(
        "yunet_2023mar_batch",
        SHA,
        "fp16",
        input_profiles(YUNET_INPUTS, 16, dynamic={"height": (32, 384, 640), "width": (32, 640, 640)}),
        L4,
    )
    engine, meta = build_engine(trt, tmp_path / "m.onnx", k, timing_cache=timing)
    assert engine == b"SERIALIZED"
    assert log["shapes"] == [("input", (1, 3, 32, 32), (16, 3, 384, 640), (16, 3, 640, 640))]
    assert log["timing_in"] == b"OLD" and timing.read_bytes() == b"TIMING"
    if strong:
        assert log["network_flags"] == 1 << 1 and log["flags"] == []  # precision from the ONNX file
    else:  # a TensorRT without strong typing: fp16 through the builder flag
        assert log["network_flags"] == 0 and log["flags"] == ["FP16"]
    assert meta["strongly_typed"] is strong


def test_profiles_for_face_level_models_scale_with_faces_per_frame():
    from facefusion_batch.runtime.tensorrt_backend import profiles_for

    assert profiles_for("face_mesh_468", MESH_INPUTS, 16)[0].max[0] == 64
    assert profiles_for("yunet_2023mar_batch", YUNET_INPUTS, 16)[0].max == (16, 3, 640, 640)
