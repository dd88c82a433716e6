"""Never a silent substitute (issue 37, item 4): a learned model the user named (an option or a
FaceFusion job step) that is not here is exit 2 naming its file, where it was looked for and
`ffbatch models fetch NAME`; only --swapper auto with no model named falls back to the classical
swap, with a warning in the log and the report; --models-dir must exist and hold a model file, and
FaceFusion's root is taken for its .assets/models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import standins
from media import make_clip
from test_cli import ffbatch, ffbatch_here

from facefusion_batch.errors import InputError
from facefusion_batch.models.facefusion import resolve_models_dir


@pytest.fixture(scope="module")
def clip(tmp_path_factory, t1_small):
    return make_clip(tmp_path_factory.mktemp("named") / "clip.mp4", frames=2, size=(480, 320), image=t1_small)


def test_models_dir_must_exist_and_hold_a_model_file(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        resolve_models_dir(tmp_path / "typo")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is not a directory"):
        resolve_models_dir(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no model file"):
        resolve_models_dir(tmp_path / "empty")
    root = tmp_path / "facefusion"
    standins.write_standins(root / ".assets" / "models", ["inswapper_128"])
    assert resolve_models_dir(root) == root / ".assets" / "models"  # FaceFusion's root
    assert resolve_models_dir(root / ".assets" / "models") == root / ".assets" / "models"
    assert resolve_models_dir(None) is None


def test_a_named_swapper_that_is_absent_is_exit_2(tmp_path, private_home, clip, astronaut_path):
    store = standins.write_standins(tmp_path / "models", ["inswapper_128", "arcface_w600k_r50"])
    out = tmp_path / "o.mp4"
    proc = ffbatch_here(
        "render", clip, "-s", astronaut_path, "--face-swapper-model", "hyperswap_1a_256",
        "--models-dir", store, "-o", out, home=private_home,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"{store / 'hyperswap_1a_256.onnx'}" in proc.stderr
    assert "ffbatch models fetch hyperswap_1a_256" in proc.stderr and not out.exists()
    assert "Traceback" not in proc.stderr


def test_models_dir_errors_on_the_command_line(tmp_path, private_home, clip, astronaut_path):
    for given, message in ((tmp_path / "typo", "does not exist"), (tmp_path, "holds no model file")):
        proc = ffbatch_here(
            "render", clip, "-s", astronaut_path, "--models-dir", given, "-o", tmp_path / "o.mp4",
            home=private_home,
        )  # fmt: skip
        assert proc.returncode == 2 and f"--models-dir {given} {message}" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_auto_falls_back_with_a_warning_and_facefusions_root_is_used(
    tmp_path, private_home, clip, astronaut_path
):
    report = tmp_path / "r.json"
    plain = ffbatch(
        "render", clip, "-s", astronaut_path, "-o", tmp_path / "a.mp4", "--report", report,
        home=private_home,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    warnings = json.loads(report.read_text())["warnings"]
    assert any("using the classical swap" in w for w in warnings)
    root = tmp_path / "facefusion"
    standins.write_standins(root / ".assets" / "models", ["inswapper_128", "arcface_w600k_r50"])
    learned = ffbatch(
        "render", clip, "-s", astronaut_path, "-o", tmp_path / "b.mp4", "--models-dir", root,
        "--report", report, home=private_home,
    )  # fmt: skip
    assert learned.returncode == 0, learned.stderr
    settings = json.loads(report.read_text())["settings"]
    assert Path(settings["models_dir"]) == root / ".assets" / "models"
    assert "inswapper_128 is present, using the learned swapper" in learned.stderr


def test_a_named_enhancer_that_is_absent_is_exit_2(tmp_path, private_home, clip, astronaut_path):
    store = standins.write_standins(tmp_path / "models", ["inswapper_128", "arcface_w600k_r50"])
    proc = ffbatch_here(
        "render", clip, "-s", astronaut_path, "--face-enhancer-model", "codeformer", "--swapper", "classical",
        "--models-dir", store, "-o", tmp_path / "o.mp4", home=private_home,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"{store / 'codeformer.onnx'}" in proc.stderr and "ffbatch models fetch codeformer" in proc.stderr


@pytest.mark.parametrize(
    ("options", "name"),
    [
        (["--face-mask-types", "box", "occlusion", "--face-occluder-model", "xseg_2"], "xseg_2"),
        (["--mask", "region", "--parser-model", "bisenet_resnet_18"], "bisenet_resnet_18"),
        (["--mask", "occlusion"], "xseg_1"),  # the default occluder, asked for by the mask
    ],
    ids=["occluder", "parser", "default-occluder"],
)
def test_a_mask_model_that_is_absent_is_exit_2(tmp_path, private_home, clip, astronaut_path, options, name):
    store = standins.write_standins(tmp_path / "models", ["inswapper_128", "arcface_w600k_r50"])
    out = tmp_path / "o.mp4"
    proc = ffbatch_here(
        "render", clip, "-s", astronaut_path, "--face-swapper-model", "inswapper_128", *options,
        "--models-dir", store, "-o", out, home=private_home,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"{store / (name + '.onnx')}" in proc.stderr and f"ffbatch models fetch {name}" in proc.stderr
    assert "--swapper learned fetches it" in proc.stderr and not out.exists()
    assert "Traceback" not in proc.stderr and not list(
        Path(private_home).rglob(f"{name}.onnx*")
    )  # not fetched
