"""TensorRT engine keys, names, profiles and mismatch handling. No GPU or TensorRT needed."""

from __future__ import annotations

import json

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
    # insightface's retinaface/scrfd batch copy: [batch, 3, ?, ?], height and width by their place
    unnamed = (TensorInfo("input.1", ("batch", 3, "?", "?"), "tensor(float)"),)
    (r,) = input_profiles(unnamed, 8, dynamic={"height": (32, 640, 640), "width": (32, 640, 640)})
    assert r.min == (1, 3, 32, 32) and r.opt == (8, 3, 640, 640) and r.max == (8, 3, 640, 640)
    with pytest.raises(Exception, match="no profile range"):
        input_profiles((TensorInfo("x", ("batch", "?"), "tensor(float)"),), 8, dynamic={"height": (1, 2, 3)})
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


# --- profiles for files that fix the batch -------------------------------------------------------------
# (the builder itself is tested against the TensorRT stand-in: tests/test_tensorrt_standin.py)


def test_a_static_batch_is_never_given_a_range():
    """FaceFusion's files fix the batch at 1; TensorRT refuses a profile that ranges over a static dim."""
    fixed = (TensorInfo("target", (1, 3, 128, 128), "tensor(float)"),)
    (p,) = input_profiles(fixed, 16)
    assert p.min == p.opt == p.max == (1, 3, 128, 128)
    weighted = (*MESH_INPUTS, TensorInfo("weight", (1,), "tensor(double)"))
    k = EngineKey("m", SHA, "fp32", input_profiles(weighted, 8), L4)
    assert k.profiles[1].max == (1,) and k.batch == (1, 8, 8)  # the widest input's range


def test_profiles_for_face_level_models_scale_with_faces_per_frame():
    from facefusion_batch.runtime.tensorrt_backend import profiles_for

    assert profiles_for("face_mesh_468", MESH_INPUTS, 16)[0].max[0] == 64
    assert profiles_for("yunet_2023mar_batch", YUNET_INPUTS, 16)[0].max == (16, 3, 640, 640)
