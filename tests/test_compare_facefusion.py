"""scripts/compare_facefusion.py: FaceFusion's own headless-run against ffbatch's on one clip.

The comparison's arithmetic is checked here on made-up frames; the end-to-end run needs a
FaceFusion 3.8.1 checkout and a Python with its requirements ($FACEFUSION_SOURCE,
$FACEFUSION_PYTHON; default /tmp/facefusion and /tmp/ff-venv312/bin/python) and skips without.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
FF_SOURCE = Path(os.environ.get("FACEFUSION_SOURCE", "/tmp/facefusion"))
FF_PYTHON = Path(os.environ.get("FACEFUSION_PYTHON", "/tmp/ff-venv312/bin/python"))

_spec = importlib.util.spec_from_file_location(
    "compare_facefusion", ROOT / "scripts" / "compare_facefusion.py"
)
assert _spec and _spec.loader
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


def frames_with(faces: list[tuple[int, int, int]], shape=(120, 200, 3)) -> np.ndarray:
    """A grey frame with square patches (x, y, value) 30 px wide: the 'swapped faces'."""
    frame = np.full(shape, 100, np.uint8)
    for x, y, value in faces:
        frame[y : y + 30, x : x + 30] = value
    return frame


def test_same_faces_and_their_difference():
    original = frames_with([])
    ff = frames_with([(10, 10, 150), (120, 60, 200)])
    ours = frames_with([(10, 10, 152), (120, 60, 200)])
    result = compare.compare_frames([original], [ff], [ours])
    s = result["summary"]
    assert s["same_faces"] and s["faces_facefusion"] == s["faces_ffbatch"] == 2
    means = sorted(f["mean"] for f in result["frames"][0]["faces"])
    assert means == [0.0, 2.0] and s["face_max"] == 2 and s["within_limit"]
    assert result["worst"][2] == (10, 10, 30, 30)


def test_a_face_only_one_program_swapped():
    original = frames_with([])
    ff = frames_with([(10, 10, 150)])
    ours = frames_with([(10, 10, 150), (120, 60, 200)])
    result = compare.compare_frames([original], [ff], [ours])
    assert not result["summary"]["same_faces"]
    assert result["frames"][0]["ffbatch_only_boxes"] == [[120, 60, 30, 30]]
    far = compare.compare_frames([original], [ff], [frames_with([(10, 10, 160)])])
    assert far["summary"]["face_mean_max"] == 10.0 and not far["summary"]["within_limit"]


def test_arguments_are_checked(tmp_path):
    with pytest.raises(SystemExit) as exc:
        compare.parse_args(["--facefusion", str(tmp_path), "--facefusion-python", "/bin/sh"])
    assert exc.value.code == 2


@pytest.mark.slow
@pytest.mark.skipif(
    not (FF_SOURCE / "facefusion.py").is_file() or not FF_PYTHON.is_file(),
    reason=f"needs a FaceFusion 3.8.1 checkout at {FF_SOURCE} and its Python at {FF_PYTHON} "
    "($FACEFUSION_SOURCE, $FACEFUSION_PYTHON)",
)
@pytest.mark.parametrize(("faces", "landmarker"), [("1", "0.5"), ("6", "0")])
def test_the_same_faces_within_two_levels_of_facefusion(tmp_path, faces, landmarker):
    """One face with FaceFusion's landmarker (its default), six without (the random 2dfan4
    stand-in makes faces so large that six overlap, and FaceFusion re-crops each from the frame
    its previous face was pasted into). 720p, 3 frames: a face enters at the top edge in frame 1
    and one moves fast, which ffbatch's tracker would hold back and smooth (without the job's
    face_tracker_score 0 mapping: 13 faces against 15, one 7.4 levels mean)."""
    out = tmp_path / "out"
    compare.main(
        [
            "--facefusion", str(FF_SOURCE), "--facefusion-python", str(FF_PYTHON), "--frames", "3",
            "--faces", faces, "--landmarker-score", landmarker,
            "--work", str(tmp_path / "w"), "--out", str(out),
        ]
    )  # fmt: skip
    result = json.loads((out / "compare.json").read_text())
    s = result["summary"]
    assert s["same_faces"] and s["faces_facefusion"] >= 2, s
    assert s["face_mean_max"] <= 2.0, s
    for frame in result["frames"]:  # pixels outside the faces untouched by both (lossless in, out)
        assert frame["outside_max_facefusion_vs_input"] == 0 and frame["outside_max_ffbatch_vs_input"] == 0
    assert (out / "compare.png").stat().st_size > 10_000
