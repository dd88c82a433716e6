"""Finished work is reused only when this code made it with these settings and its bytes are the
ones written (issue 38): a segment, a many-input output or a compositing output with bytes
flipped is rendered again with a warning naming it; work of another render revision is rendered
again, or with --reuse-across-versions reused, each said in a warning; concat refuses to join
segments of two versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from media import make_clip
from test_cli import ffbatch_here

from facefusion_batch import RENDER_REVISION, cli
from facefusion_batch.errors import InputError
from facefusion_batch.farm import manifest, reuse
from facefusion_batch.farm.concat import join_segments
from facefusion_batch.farm.manifest import Manifest, open_manifest
from facefusion_batch.video.decode.segments import read_tags
from facefusion_batch.video.encode.written import record_path


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_clip(tmp_path_factory.mktemp("reuse") / "in.mp4", frames=6, size=(128, 96))


def flip_bytes(path: Path, count: int = 300, at: float = 0.5) -> None:
    """Flip `count` bytes from `at` of the way into `path`, its size and mtime kept (bit rot, a
    bad copy)."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    first = int(len(data) * at)
    for i in range(first, first + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    import os

    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_segment_with_flipped_bytes_is_rendered_again(clip, astronaut_path, tmp_path):
    seg = tmp_path / "seg.mp4"
    args = ("render", clip, "-s", astronaut_path, "--frames", "0:4", "-o", seg)
    assert ffbatch_here(*args, "-q").returncode == 0
    assert record_path(seg).is_file()
    tags = read_tags(seg)
    assert tags[reuse.TAG_RENDERED_BY].endswith(f"render revision {RENDER_REVISION}")
    again = ffbatch_here(*args)
    assert again.returncode == 0 and "up to date" in again.stderr
    good = seg.read_bytes()
    flip_bytes(seg)
    damaged = ffbatch_here(*args)
    assert damaged.returncode == 0, damaged.stderr
    assert f"{seg}: its sha256 does not match" in damaged.stderr and "rendering it again" in damaged.stderr
    assert "up to date" not in damaged.stderr
    assert seg.read_bytes() == good  # the same frames, encoded again the same way


def test_many_input_outputs_and_their_mattes_with_flipped_bytes_are_rendered_again(
    clip, astronaut_path, tmp_path
):
    second = make_clip(tmp_path / "second.mp4", frames=4, size=(128, 96), seed=3)
    out = tmp_path / "out"
    out.mkdir()
    args = ("render", clip, second, "-s", astronaut_path, "--output-dir", out)
    args += ("--matte-output", out / "{stem}.matte.mkv")
    first = ffbatch_here(*args, "-q")
    assert first.returncode == 0, first.stderr
    a, b, matte = out / "in-swapped.mp4", out / "second-swapped.mp4", out / "in.matte.mkv"
    flip_bytes(a)
    rerun = ffbatch_here(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{a}: its sha256 does not match" in rerun.stderr
    assert f"{b} is up to date" in rerun.stderr and f"{a} is up to date" not in rerun.stderr
    assert ffbatch_here(*args).stderr.count("is up to date") == 2  # rendered again, and recorded again
    flip_bytes(matte, 4, at=0.9)  # in a frame, past the tags
    third = ffbatch_here(*args)
    assert third.returncode == 0, third.stderr
    assert f"{matte}: its sha256 does not match" in third.stderr
    assert f"{a} is up to date" not in third.stderr  # never skipped with a damaged matte


def run_cli(*args) -> int:
    with pytest.raises(SystemExit) as ended:
        cli.main([str(a) for a in args])
    return ended.value.code


def as_revision(monkeypatch, revision: int) -> None:
    """This process as if it were a build of another render revision."""
    monkeypatch.setattr(manifest, "RENDER_REVISION", revision)
    monkeypatch.setattr(reuse, "RENDERED_BY", f"ffbatch test, render revision {revision}")


def test_a_segment_of_another_render_revision_is_rendered_again_or_reused_when_asked(
    clip, astronaut_path, tmp_path, monkeypatch, capsys
):
    seg = tmp_path / "seg.mp4"
    report = tmp_path / "r.json"
    args = ("render", clip, "-s", astronaut_path, "--frames", "0:3", "-o", seg, "--report", report)
    assert run_cli(*args) == 0
    data = json.loads(report.read_text())
    assert data["render_revision"] == RENDER_REVISION and data["status"] == "ok"
    capsys.readouterr()
    as_revision(monkeypatch, RENDER_REVISION + 1)
    assert run_cli(*args, "--reuse-across-versions") == 0
    err = capsys.readouterr().err
    assert f"render revision {RENDER_REVISION}, this is ffbatch test, render revision" in err
    assert "reusing it as it is (--reuse-across-versions)" in err
    assert json.loads(report.read_text())["status"] == "skipped"
    assert run_cli(*args) == 0
    err = capsys.readouterr().err
    assert "rendering it again (--reuse-across-versions would reuse it)" in err
    assert json.loads(report.read_text())["status"] == "ok"
    assert read_tags(seg)[reuse.TAG_RENDERED_BY] == f"ffbatch test, render revision {RENDER_REVISION + 1}"


def test_concat_refuses_segments_of_two_render_revisions(clip, astronaut_path, tmp_path, monkeypatch):
    one, two = tmp_path / "a.mp4", tmp_path / "b.mp4"
    assert run_cli("render", clip, "-s", astronaut_path, "--frames", "0:3", "-o", one, "-q") == 0
    as_revision(monkeypatch, RENDER_REVISION + 1)
    assert run_cli("render", clip, "-s", astronaut_path, "--frames", "3:6", "-o", two, "-q") == 0
    with pytest.raises(InputError, match="rendered by different versions of ffbatch"):
        join_segments([one, two], tmp_path / "joined.mp4")
    join_segments([one, two], tmp_path / "joined.mp4", across_versions=True)


def test_saved_progress_of_another_revision_is_discarded_unless_reuse_is_asked(tmp_path):
    def wanted(digest: str) -> Manifest:
        return Manifest(tmp_path, "in", "out", digest, 10, 30, settings_alone="same", rendered_by="r2")

    saved = wanted("digest-of-revision-1")
    saved.rendered_by = "ffbatch 0.1.0, render revision 1"
    saved.segments = {"0:10": {"file": "00000000-00000010.mp4"}}
    saved.save()
    asked: list[str] = []

    def refuse(what: str, by: str) -> bool:
        asked.append(by)
        return False

    assert open_manifest(wanted("digest-of-revision-2"), False, refuse).segments == {}
    assert asked == ["ffbatch 0.1.0, render revision 1"]
    saved.save()
    kept = open_manifest(wanted("digest-of-revision-2"), False, lambda what, by: True)
    assert kept.segments == saved.segments
