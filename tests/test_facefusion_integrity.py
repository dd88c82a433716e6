"""Integrity of FaceFusion's model files never degrades silently (issue 13, item 1).

A named model whose file or `.hash` sidecar fails verification is exit 2 naming the file
and both hashes, in every swapper mode; a named model that is absent is exit 2 too (issue 37);
`--swapper auto` with no model named falls back to the classical swap, with a warning, only when
the learned files are absent; the sidecar is re-read on every run; usage errors
found while building the pipeline are exit 2 before any frame is decoded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import standins
from media import make_clip
from test_cli import ffbatch_here

from facefusion_batch.config import SwapSettings
from facefusion_batch.errors import InputError, ModelError
from facefusion_batch.models.facefusion import check_beside, crc32_file
from facefusion_batch.pipeline.model_resolution import choose_swapper, model_state
from facefusion_batch.swap.learned import LearnedSettings


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("FFBATCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def ff(tmp_path) -> Path:
    """A FaceFusion-style .assets/models with the inswapper and the recogniser."""
    return standins.write_standins(tmp_path / "ff", ["inswapper_128", "arcface_w600k_r50"])


def auto(named: str | None = None) -> SwapSettings:
    return SwapSettings(swapper="auto", learned=LearnedSettings(swapper_model=named))


def test_auto_takes_the_present_model_and_a_named_absent_one_is_an_error(home, ff, tmp_path, caplog):
    assert choose_swapper(auto("inswapper_128"), ff) == "inswapper_128"
    with pytest.raises(ModelError) as info:  # named: never silently the classical swap
        choose_swapper(auto("hyperswap_1a_256"), ff)
    message = str(info.value)
    assert f"{ff / 'hyperswap_1a_256.onnx'}" in message and "ffbatch models fetch hyperswap_1a_256" in message
    caplog.set_level("DEBUG", logger="ffbatch")
    assert choose_swapper(auto(), tmp_path) is None  # none named, none here: the classical swap, warned
    assert "absent: inswapper_128" in caplog.text and "using the classical swap" in caplog.text
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    # one short line; the files each model lacks only in the debug log (-v)
    assert len(warned) == 1 and "classical swap" in warned[0] and len(warned[0]) < 120, warned


@pytest.mark.parametrize("mode", ["auto", "learned"])
def test_a_corrupt_hash_is_an_error_naming_file_and_hashes(home, ff, mode):
    actual = crc32_file(ff / "inswapper_128.onnx")
    (ff / "inswapper_128.hash").write_text("0badc0de")
    settings = SwapSettings(swapper=mode, learned=LearnedSettings(swapper_model="inswapper_128"))
    with pytest.raises(ModelError) as info:
        if mode == "auto":
            choose_swapper(settings, ff)
        else:
            model_state("inswapper_128", ff)
    message = str(info.value)
    assert "inswapper_128.onnx" in message and "0badc0de" in message and actual in message


def test_a_corrupt_file_of_the_auto_order_is_not_taken_for_absent(home, tmp_path):
    ff = standins.write_standins(tmp_path / "ff", ["inswapper_128", "arcface_w600k_r50"])
    with open(ff / "arcface_w600k_r50.onnx", "r+b") as fh:  # the recogniser this time
        fh.seek(200)
        fh.write(b"\xff\xfe")
    with pytest.raises(ModelError, match="arcface_w600k_r50"):
        choose_swapper(auto(), ff)


def test_the_sidecar_is_read_again_on_every_run(home, ff):
    assert model_state("inswapper_128", ff) == "present"  # the store memo now says "validated"
    (ff / "inswapper_128.hash").write_text("12345678")
    with pytest.raises(ModelError, match="12345678"):
        model_state("inswapper_128", ff)
    (ff / "inswapper_128.hash").write_text("not a crc")
    with pytest.raises(ModelError, match="unreadable"):
        check_beside(ff / "inswapper_128.onnx")


@pytest.fixture(scope="module")
def clip(tmp_path_factory, t1_small) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=2, size=(320, 224), image=t1_small)


def test_cli_corrupt_sidecar_is_exit_2_in_auto_mode(tmp_path, private_home, clip, astronaut_path):
    ff = standins.write_standins(tmp_path / "ff", ["inswapper_128", "arcface_w600k_r50"])
    (ff / "inswapper_128.hash").write_text("0badc0de")
    proc = ffbatch_here(
        "render",
        clip,
        "-s",
        astronaut_path,
        "--models-dir",
        ff,
        "-o",
        tmp_path / "o.mp4",
        home=private_home,
    )
    assert proc.returncode == 2, proc.stderr
    assert "0badc0de" in proc.stderr and "inswapper_128.onnx" in proc.stderr
    assert "classical" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--swapper-model", "hyperswap_1a_256", "--pixel-boost", "384"],  # checked in the settings
        ["--pixel-boost", "384"],  # auto picks hyperswap_1a_256 (256 px): checked at build time
        ["--mask", ""],
    ],
)
def test_cli_usage_errors_of_the_learned_path_are_exit_2(tmp_path, private_home, clip, astronaut_path, args):
    ff = standins.write_standins(tmp_path / "ff", ["hyperswap_1a_256", "arcface_w600k_r50"])
    proc = ffbatch_here(
        "render",
        clip,
        "-s",
        astronaut_path,
        "--models-dir",
        ff,
        *args,
        "-o",
        tmp_path / "o.mp4",
        home=private_home,
    )
    assert proc.returncode == 2, proc.stderr
    assert ("--pixel-boost 384" in proc.stderr) or ("--mask" in proc.stderr)
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


def test_pixel_boost_is_checked_by_the_swapper_stage_too():
    from facefusion_batch.models.facefusion import MODELS
    from facefusion_batch.swap.learned import LearnedSwapper

    class Sig:
        def __init__(self, name):
            self.name, self.shape = name, [1, 512]

    class Session:
        inputs = [Sig("target"), Sig("source")]
        outputs = [Sig("output")]

    with pytest.raises(InputError, match="--pixel-boost 384"):
        LearnedSwapper(Session(), MODELS["hyperswap_1a_256"], None, None, pixel_boost=384)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "learned,match",
    [
        (LearnedSettings(embedding_convention="roop"), "--embedding-convention"),
        (LearnedSettings(enhancer_weight=1.5), "--enhancer-weight"),
        (LearnedSettings(swapper_model="simswap_unofficial_512", pixel_boost=768), "--pixel-boost 768"),
    ],
)
def test_new_learned_options_are_checked_in_the_settings(learned, match):
    from facefusion_batch.config import validate_swap

    with pytest.raises(InputError, match=match):
        validate_swap(SwapSettings(swapper="auto", learned=learned), "many")
    validate_swap(
        SwapSettings(swapper="auto", learned=LearnedSettings(embedding_convention="facefusion")), "many"
    )
