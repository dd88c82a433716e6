"""scripts/bench_facefusion.py's parts that need no FaceFusion: its arguments, the medians and
ratios, the profile split and the JSON + PNG it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_facefusion as bf  # noqa: E402


@pytest.fixture
def facefusion(tmp_path) -> tuple[Path, Path]:
    tree = tmp_path / "ff"
    tree.mkdir()
    (tree / "facefusion.py").write_text("")
    return tree, Path(sys.executable)


def test_arguments_and_their_defaults(facefusion):
    tree, py = facefusion
    args = bf.parse_args(["--facefusion", str(tree), "--facefusion-python", str(py), "--sizes", "720p"])
    assert args.sizes == ["720p"] and args.faces == ["1", "6"] and args.runs == 3 and args.frames == 10
    assert bf.parse_args(
        ["--facefusion", str(tree), "--facefusion-python", str(py), "--faces", "6,1"]
    ).faces == [
        "6",
        "1",
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sizes", "480p"], "choose from 720p, 1080p"),
        (["--faces", "2"], "choose from 1, 6"),
        (["--runs", "0"], "--runs must be at least 1"),
        (["--standins", "/nonexistent-h12"], "not a directory"),
    ],
)
def test_bad_arguments_are_exit_2_with_a_message(facefusion, capsys, extra, message):
    tree, py = facefusion
    with pytest.raises(SystemExit) as info:
        bf.parse_args(["--facefusion", str(tree), "--facefusion-python", str(py), *extra])
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_a_missing_facefusion_tree_or_python_is_exit_2_from_the_command_line(tmp_path, facefusion):
    tree, py = facefusion
    script = [sys.executable, str(ROOT / "scripts" / "bench_facefusion.py")]
    done = subprocess.run(
        [*script, "--facefusion", str(tmp_path), "--facefusion-python", str(py)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "no facefusion.py there" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run(
        [*script, "--facefusion", str(tree), "--facefusion-python", str(tmp_path / "python")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "not an executable file" in done.stderr


def test_medians_and_ratios():
    row = bf.summarise(10, [20.0, 30.0, 25.0], [10.0, 12.0, 40.0])
    assert row["facefusion"]["median_s"] == 25.0 and row["ffbatch"]["median_s"] == 12.0
    assert row["facefusion"]["fps"] == pytest.approx(0.4) and row["ffbatch"]["fps"] == pytest.approx(10 / 12)
    assert row["ratio_ffbatch_over_facefusion_fps"] == pytest.approx(25 / 12)
    assert row["run_ratios"] == pytest.approx([2.0, 2.5, 0.625])  # pair by pair, as alternated


def test_profile_split_takes_the_first_matching_rule_over_the_whole_stack():
    collapsed = "\n".join(
        [
            "process_frame (x.py:1);forward_swap_face (facefusion/core.py:9);run (ort.py:3) 70",
            "get_inference_pool (facefusion/inference_manager.py:4);forward_swap_face (core.py:9) 10",
            "detect_faces (facefusion/face_detector.py:2);apply_nms (facefusion/face_helper.py:5) 15",
            "something (elsewhere.py:1) 5",
            "garbage line without a count",
        ]
    )
    split = bf.split_profile(collapsed, "facefusion")
    assert split == {"swapper model": 0.7, "detection": 0.15, "model load + hash": 0.1, "other": 0.05}
    assert bf.split_profile("", "ffbatch") == {}


def test_results_are_written_as_json_and_a_png(tmp_path):
    row = {"case": "720p-1face", **bf.summarise(4, [8.0], [4.0])}
    row["profile"] = {"facefusion": {"swapper model": 0.8, "other": 0.2}, "ffbatch": {"swapper model": 1.0}}
    results = {"machine": "test", "facefusion_version": "FaceFusion 3.8.1", "cases": [row]}
    path, chart = bf.write_results(results, tmp_path / "out")
    assert json.loads(path.read_text())["cases"][0]["ratio_ffbatch_over_facefusion_fps"] == 2.0
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000
