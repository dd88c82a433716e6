"""Seeded fuzzing: randomly corrupted copies of a small clip.

Whatever the damage, ffbatch must exit 0 or 2 within a time bound, never print
a traceback, and never leave a file at the output path (or a temporary one
beside it) when it fails. `FFBATCH_FUZZ_CASES` sets how many cases run.
"""

import os
import subprocess
import sys

import av
import cv2
import numpy as np
import pytest
from media import make_clip

from facefusion_batch.models.assets import asset_path

CASES = int(os.environ.get("FFBATCH_FUZZ_CASES", "12"))
TIME_LIMIT_S = 120


def corrupt(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    buf = bytearray(data)
    kind = rng.choice(["truncate", "random_bytes", "zero_run", "duplicate", "header"])
    n = len(buf)
    if kind == "truncate":
        cut = int(rng.integers(1, n))
        return f"truncate at {cut}", bytes(buf[:cut])
    if kind == "random_bytes":
        for _ in range(int(rng.integers(1, 20))):
            at = int(rng.integers(0, n - 64))
            buf[at : at + 32] = rng.integers(0, 256, 32, dtype=np.uint8).tobytes()
        return "random bytes", bytes(buf)
    if kind == "zero_run":
        at = int(rng.integers(0, n - 1))
        length = int(rng.integers(1, max(2, n // 8)))
        buf[at : at + length] = bytes(min(length, n - at))
        return f"zeros at {at}+{length}", bytes(buf)
    if kind == "duplicate":
        at = int(rng.integers(0, n - 1))
        length = int(rng.integers(1, max(2, n // 8)))
        return f"duplicate {at}+{length}", bytes(buf[: at + length] + buf[at:])
    at = int(rng.integers(0, min(n, 256)))
    buf[at] ^= 0xFF
    return f"header byte {at} flipped", bytes(buf)


@pytest.fixture(scope="module")
def clip_bytes(tmp_path_factory) -> bytes:
    t1 = cv2.imread(str(asset_path("t1.jpg")))
    small = cv2.resize(t1, (320, 222))
    path = make_clip(
        tmp_path_factory.mktemp("fuzz") / "clip.mp4", frames=12, size=(320, 180), image=small, audio="aac"
    )
    return path.read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("case", range(CASES))
def test_corrupted_input_fails_cleanly(case, clip_bytes, tmp_path):
    rng = np.random.default_rng(1000 + case)
    what, data = corrupt(clip_bytes, rng)
    src = tmp_path / "corrupt clip.mp4"  # a space in the name, on purpose
    src.write_bytes(data)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "out.mp4"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "facefusion_batch",
            "render",
            str(src),
            "--source",
            str(asset_path("astronaut.png")),
            "-o",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT_S,
        check=False,
    )
    assert proc.returncode in (0, 2), f"{what}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, f"{what}: traceback printed\n{proc.stderr[-2000:]}"
    leftovers = [p.name for p in out_dir.iterdir() if p.name != "out.mp4"]
    assert not leftovers, f"{what}: temporary files left behind: {leftovers}"
    if proc.returncode == 0:
        with av.open(str(out)) as container:
            frames = sum(1 for _ in container.decode(video=0))
        assert frames > 0, f"{what}: an empty video was reported as done"
    else:
        assert not out.exists(), f"{what}: a failed render left a file at the output path"
        assert "ffbatch: error:" in proc.stderr, f"{what}: no clear message\n{proc.stderr}"
