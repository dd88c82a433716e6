"""Start-up without re-hashing: a model file verified once is trusted while its size, mtime_ns and
inode hold; `ffbatch models verify` re-hashes in full; empty files and garbage records are never
trusted (issue 39 item 4, issue 38 "Model store").

The FaceFusion files here are small random bytes with a `.hash` sidecar holding their CRC32, as
FaceFusion's release assets pair them (a replica of the layout, not the real weights).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from test_cli import ffbatch_here

from facefusion_batch.errors import ModelError
from facefusion_batch.models import facefusion, store
from facefusion_batch.models.catalog import ModelSpec, Url, build_catalog

PAYLOAD = np.random.default_rng(7).integers(0, 256, 200_000, dtype=np.uint8).tobytes()
SHA = hashlib.sha256(PAYLOAD).hexdigest()


def ffbatch(*args, home: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI in this process (`cli.main`, tests/test_cli.py `ffbatch_here`; `home`: a private
    model store as FFBATCH_HOME)."""
    return ffbatch_here(*args, home=home)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("FFBATCH_HOME", str(h))
    return h


def put_facefusion_file(home: Path, data: bytes = PAYLOAD) -> Path:
    """inswapper_128.onnx in the store with its `.hash` beside it, as FaceFusion publishes them."""
    models = home / "models"
    models.mkdir(parents=True, exist_ok=True)
    (models / "inswapper_128.hash").write_text(f"{zlib.crc32(data):08x}")
    path = models / "inswapper_128.onnx"
    path.write_bytes(data)
    return path


def flip_byte_keeping_time(path: Path, offset: int = 1000) -> None:
    """Change one byte in place (same inode, same size) and put the mtime back."""
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def pinned_catalog(tmp_path: Path):
    mirror = tmp_path / "mirror" / "fake.bin"
    mirror.parent.mkdir(parents=True, exist_ok=True)
    mirror.write_bytes(PAYLOAD)
    spec = ModelSpec(
        name="fake",
        file="fake.bin",
        sha256=SHA,
        size=None,
        licence="test",
        kind="model",
        sources=(Url(mirror.as_uri()),),
    )
    return build_catalog([spec])


class Counter:
    def __init__(self, real) -> None:
        self.real, self.calls = real, 0

    def __call__(self, path):
        self.calls += 1
        return self.real(path)


def test_models_verify_rehashes_and_finds_a_flipped_byte_with_the_timestamp_put_back(home):
    path = put_facefusion_file(home)
    first = ffbatch("models", "verify", "inswapper_128", home=home)
    assert first.returncode == 0, first.stderr
    assert "inswapper_128: ok" in first.stdout
    assert json.loads(store.sidecar_path(path).read_text())["sha256"] == SHA

    flip_byte_keeping_time(path)
    # a render trusts the record (same size, mtime and inode): that is the point of the record...
    assert store.verify("inswapper_128").ok
    # ...and `models verify` is the full check that does not
    second = ffbatch("models", "verify", "inswapper_128", home=home)
    assert second.returncode == 2, second.stdout + second.stderr
    assert "inswapper_128: FAILED sha256 differs from the one recorded" in second.stdout


def test_a_verified_file_is_hashed_again_only_when_size_mtime_or_inode_move(home, tmp_path, monkeypatch):
    cat = pinned_catalog(tmp_path)
    path = store.model_path("fake", catalog=cat)
    record = json.loads(store.sidecar_path(path).read_text())
    st = path.stat()
    assert (record["size"], record["mtime_ns"], record["inode"]) == (st.st_size, st.st_mtime_ns, st.st_ino)

    counter = Counter(store.sha256_file)
    monkeypatch.setattr(store, "sha256_file", counter)
    for _ in range(3):
        assert store.verify("fake", catalog=cat).ok
    assert counter.calls == 0

    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # touched
    assert store.verify("fake", catalog=cat).ok and counter.calls == 1
    assert store.verify("fake", catalog=cat).ok and counter.calls == 1

    # replaced by a copy with size and mtime kept: a new inode, so hashed again
    st = path.stat()
    copy = path.with_name("copy.bin")
    shutil.copyfile(path, copy)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(copy, path)
    assert path.stat().st_ino != st.st_ino
    assert store.verify("fake", catalog=cat).ok and counter.calls == 2

    assert store.verify("fake", catalog=cat, full=True).ok and counter.calls == 3


def test_the_crc32_beside_a_facefusion_file_is_kept_in_its_record(home, monkeypatch):
    path = put_facefusion_file(home)
    assert store.verify("inswapper_128").ok
    expected = f"{zlib.crc32(PAYLOAD):08x}"
    assert facefusion.check_beside(path) == expected
    assert json.loads(store.sidecar_path(path).read_text())["crc32"] == expected

    # a later run (empty in-process memo) reads the CRC32 from the record, never the file
    monkeypatch.setattr(facefusion, "_CRC_MEMO", {})

    def no_reading(_path):
        raise AssertionError("the file was read again")

    monkeypatch.setattr(facefusion, "crc32_file", no_reading)
    assert facefusion.check_beside(path) == expected
    # the .hash is still read every time: an edited one is noticed
    (path.with_suffix(".hash")).write_text("0badc0de")
    with pytest.raises(ModelError, match="CRC32 .* expects 0badc0de"):
        facefusion.check_beside(path)


def test_a_crc32_recorded_for_another_state_of_the_file_is_not_used(home, monkeypatch):
    path = put_facefusion_file(home)
    assert store.verify("inswapper_128").ok
    facefusion.check_beside(path)
    monkeypatch.setattr(facefusion, "_CRC_MEMO", {})
    path.write_bytes(PAYLOAD[:-1] + b"\0")  # same size, new mtime
    with pytest.raises(ModelError, match="fails verification"):
        facefusion.check_beside(path)


def test_an_empty_store_file_is_fetched_again_or_refused(home, tmp_path):
    cat = pinned_catalog(tmp_path)
    path = store.model_path("fake", catalog=cat)
    path.write_bytes(b"")
    res = store.verify("fake", catalog=cat)
    assert not res.ok and res.reason == "empty file (0 bytes)"
    with pytest.raises(ModelError, match=r"unusable: .*fake.bin \(empty file \(0 bytes\)\)"):
        store.model_path("fake", catalog=cat, fetch=False)
    assert store.model_path("fake", catalog=cat).read_bytes() == PAYLOAD  # fetched again


def test_an_empty_facefusion_file_fails_models_verify(home):
    path = put_facefusion_file(home)
    assert store.verify("inswapper_128").ok
    path.write_bytes(b"")
    out = ffbatch("models", "verify", "inswapper_128", home=home)
    assert out.returncode == 2
    assert "inswapper_128: FAILED empty file (0 bytes)" in out.stdout


def test_a_truncated_facefusion_file_is_not_trusted(home):
    path = put_facefusion_file(home)
    assert store.verify("inswapper_128").ok
    with open(path, "r+b") as fh:
        fh.truncate(len(PAYLOAD) // 2)
    res = store.verify("inswapper_128")
    assert not res.ok and "differs from the one recorded" in res.reason


def test_a_garbage_record_of_a_pinned_file_is_said_and_the_file_rehashed(home, tmp_path, caplog):
    cat = pinned_catalog(tmp_path)
    path = store.model_path("fake", catalog=cat)
    sidecar = store.sidecar_path(path)
    sidecar.write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert store.verify("fake", catalog=cat).ok
    assert "fake.bin.verified.json is unreadable" in caplog.text
    assert json.loads(sidecar.read_text())["sha256"] == SHA


@pytest.mark.parametrize("garbage", ["{not json", '{"sha256": 5, "size": "x"}', "[]"])
def test_a_garbage_record_of_an_unpinned_file_is_never_trusted(home, garbage):
    path = put_facefusion_file(home)
    assert store.verify("inswapper_128").ok
    store.sidecar_path(path).write_text(garbage)
    res = store.verify("inswapper_128")
    assert not res.ok and "inswapper_128.onnx.verified.json is" in res.reason and "made again" in res.reason
    with pytest.raises(ModelError, match="verified.json is (unreadable|malformed)"):
        store.model_path("inswapper_128", fetch=False)
    out = ffbatch("models", "verify", "inswapper_128", home=home)
    assert out.returncode == 2
    assert "FAILED its record inswapper_128.onnx.verified.json is" in out.stdout


@pytest.mark.parametrize("where", ["store", "models_dir"])
def test_the_crc32_computed_while_validating_is_kept_so_the_first_run_reads_the_file_once(
    home, tmp_path, monkeypatch, where
):
    if where == "store":
        path, models_dir = put_facefusion_file(home), None
    else:
        models_dir = tmp_path / "mine"
        models_dir.mkdir()
        path = models_dir / "inswapper_128.onnx"
        path.write_bytes(PAYLOAD)
        (models_dir / "inswapper_128.hash").write_text(f"{zlib.crc32(PAYLOAD):08x}")
    assert store.verify("inswapper_128", models_dir=models_dir).ok  # hashed and validated (CRC32)
    monkeypatch.setattr(facefusion, "_CRC_MEMO", {})

    def no_reading(_path):
        raise AssertionError("the file was read again")

    monkeypatch.setattr(facefusion, "crc32_file", no_reading)
    assert facefusion.check_beside(path) == f"{zlib.crc32(PAYLOAD):08x}"


def test_trusted_sha256_reads_the_record_while_the_file_is_unchanged(home, tmp_path, monkeypatch):
    from facefusion_batch import fsutil
    from facefusion_batch.models import records

    cat = pinned_catalog(tmp_path)
    path = store.model_path("fake", catalog=cat)
    counter = Counter(fsutil.sha256_file)
    monkeypatch.setattr(fsutil, "sha256_file", counter)
    assert records.trusted_sha256(path) == SHA and counter.calls == 0
    path.write_bytes(PAYLOAD[::-1])  # changed: hashed now, the new content's sha256
    assert records.trusted_sha256(path) == hashlib.sha256(PAYLOAD[::-1]).hexdigest()
    assert counter.calls == 1


@pytest.mark.parametrize(
    ("spoil", "said"),
    [
        (lambda p: p.write_bytes(b""), "empty file (0 bytes)"),
        (lambda p: store.sidecar_path(p).write_text("\x00garbage"), "verified.json is unreadable"),
        (lambda p: p.write_bytes(PAYLOAD[: len(PAYLOAD) // 3]), "differs from the one recorded"),
    ],
    ids=["empty", "garbage-record", "truncated"],
)
def test_a_render_stops_on_a_spoilt_learned_model_saying_which(home, spoil, said):
    """What a render asks before loading a learned model: exit 2 (ModelError) naming the file
    and what is wrong with it, never a silent run on it."""
    from facefusion_batch.pipeline.model_resolution import model_state

    path = put_facefusion_file(home)
    assert model_state("inswapper_128", None) == "present"
    spoil(path)
    with pytest.raises(ModelError, match=re.escape(said)) as err:
        model_state("inswapper_128", None)
    assert str(path) in str(err.value) and err.value.exit_code == 2
