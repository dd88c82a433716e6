"""A full disk while writing: a clear message, a non-zero exit, nothing left behind.

Two real ways to run out of space, no mocks: a tiny tmpfs (needs root and mount
rights; skipped otherwise) and a file-size limit (RLIMIT_FSIZE, which makes
writes past the limit fail with EFBIG; Python ignores SIGXFSZ).
"""

import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from media import make_clip

from facefusion_batch.models.assets import asset_path


@pytest.fixture(scope="module")
def clip(tmp_path_factory, t1_small) -> Path:
    # enough frames that the encoded video is far larger than the space we allow
    return make_clip(
        tmp_path_factory.mktemp("full") / "clip.mp4",
        frames=40,
        size=(640, 360),
        image=t1_small,
        audio="aac",
        crf=0,
    )


def render(clip: Path, out: Path, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "facefusion_batch",
            "render",
            str(clip),
            "-s",
            str(asset_path("astronaut.png")),
            "-o",
            str(out),
            "-q",
            "--crf",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=preexec,
    )


def assert_failed_cleanly(proc: subprocess.CompletedProcess, out: Path) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "ffbatch: error:" in proc.stderr
    assert not out.exists()
    assert [p.name for p in out.parent.iterdir()] == [], "temporary files left behind"


@pytest.mark.slow
def test_file_size_limit(tmp_path, clip):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "out.mp4"
    limit = 200_000

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = render(clip, out, preexec=small_files)
    assert_failed_cleanly(proc, out)


@pytest.mark.slow
def test_tiny_filesystem(tmp_path, clip):
    mount = tmp_path / "tiny"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        out = mount / "out.mp4"
        proc = render(clip, out)
        assert_failed_cleanly(proc, out)
    finally:
        subprocess.run(["umount", str(mount)], check=False)
