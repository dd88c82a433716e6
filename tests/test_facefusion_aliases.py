"""FaceFusion's option names accepted on render and preview, listed in one help section; --help
readable at 80 columns (issue 13, item 5)."""

from __future__ import annotations

import subprocess

import pytest
import typer.main
from test_cli import ffbatch_here

from facefusion_batch.cli import FACEFUSION_ALIASES, app, facefusion_argv
from facefusion_batch.errors import InputError
from facefusion_batch.tools.facefusion_job import NO_TRACKER


def test_facefusion_names_are_rewritten_to_ffbatchs():
    argv = [
        "render", "-s", "a.jpg", "-t", "clip.mp4", "--face-swapper-model", "hyperswap_1a_256",
        "--face-mask-types", "box", "occlusion", "--face-mask-padding", "10", "0", "0", "0",
        "--face-swapper-pixel-boost", "512x512", "--face-selector-mode=one", "--output-path", "o.mp4",
        "--source-paths", "b.jpg", "c.jpg", "--reference-face-distance", "0.4",
        "--output-video-quality", "90",
    ]  # fmt: skip
    assert facefusion_argv(argv) == [
        "render", "-s", "a.jpg", "--swapper-model", "hyperswap_1a_256", "--mask", "box,occlusion",
        "--mask-padding", "10,0,0,0", "--pixel-boost", "512", "--faces", "one", "--output", "o.mp4",
        "--source", "b.jpg", "--source", "c.jpg", "--reference-distance", "0.4", "--quality", "90",
        "clip.mp4",
    ]  # fmt: skip
    assert facefusion_argv(["models", "list", "-t"]) == ["models", "list", "-t"]  # only render / preview


def test_every_alias_maps_onto_an_option_render_has():
    render = typer.main.get_command(app).commands["render"]
    names = {opt for p in render.params for opt in getattr(p, "opts", [])}
    for ff, (ours, kind) in FACEFUSION_ALIASES.items():
        assert ff not in names, f"{ff} would shadow a real option"
        assert kind == "input" or ours in names, ff


def test_trim_is_refused_with_why_and_a_missing_value_is_a_usage_error():
    with pytest.raises(InputError, match="--frames START:END"):
        facefusion_argv(["render", "clip.mp4", "--trim-frame-start", "10"])
    with pytest.raises(InputError, match="--face-swapper-model"):
        facefusion_argv(["render", "clip.mp4", "--face-swapper-model"])


def run(*args: str, columns: str = "80") -> subprocess.CompletedProcess:
    """The command in this process (`cli.main`, tests/test_cli.py `ffbatch_here`) on a terminal
    `columns` wide."""
    return ffbatch_here(*args, env={"COLUMNS": columns})


def test_help_fits_80_columns_lists_the_aliases_once_and_cuts_no_option_name():
    proc = run("render", "--help")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    assert "…" not in proc.stdout
    section = proc.stdout[proc.stdout.index("FaceFusion's option names") :]
    for ff in FACEFUSION_ALIASES:
        assert any(line.split()[:1] == [ff] for line in section.splitlines()), ff
    main_list = proc.stdout[: proc.stdout.index("FaceFusion's option names")]
    assert "--face-swapper-model" not in main_list  # hidden from the main list
    for name in (
        "--embedding-convention",
        "--reference-face-position",
        "--source-face-index",
        "--face-order",
    ):
        assert name in main_list


def test_an_alias_reaches_the_option_schema(tmp_path):
    """--face-swapper-model with an unknown name is refused by --swapper-model's check: exit 2."""
    photo = tmp_path / "a.jpg"
    photo.write_bytes(b"x")
    proc = run(
        "render", "-t", str(tmp_path / "clip.mp4"), "-s", str(photo), "--face-swapper-model", "nope",
        "-o", str(tmp_path / "o.mp4"),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--swapper-model must be one of" in proc.stderr


def test_face_detector_score_is_facefusions_scale():
    """FaceFusion keeps a YuNet face when cls·obj >= its score; ffbatch's threshold is on √(cls·obj)."""
    argv = facefusion_argv(["render", "clip.mp4", "--face-detector-score", "0.25", "-o", "o.mp4"])
    assert argv == ["render", "clip.mp4", "--score-threshold", "0.5", "-o", "o.mp4"]
    assert facefusion_argv(["render", "--face-detector-score=0.5"])[1:] == ["--score-threshold", "0.707107"]


def test_processors_execution_providers_and_headless_run_map_or_are_refused_by_name():
    head = ["headless-run", "-s", "a.jpg", "-t", "c.mp4", "-o", "o.mp4"]
    assert facefusion_argv([*head, "--processors", "face_swapper"]) == [
        "render",
        *NO_TRACKER,
        "-s",
        "a.jpg",
        "-o",
        "o.mp4",
        "c.mp4",
    ]
    both = facefusion_argv(
        [*head, "--processors", "face_swapper", "face_enhancer", "--execution-providers", "cpu"]
    )
    assert both[-5:] == [
        "--enhancer-model",
        "gfpgan_1.4",
        "--backend",
        "cpu",
        "c.mp4",
    ]  # FaceFusion's default model
    named = facefusion_argv([*head, "--processors", "face_enhancer", "--face-enhancer-model", "codeformer"])
    assert named[5 + len(NO_TRACKER) :] == [
        "--swapper",
        "none",
        "--enhancer-model",
        "codeformer",
        "c.mp4",
    ]  # the enhancer alone
    assert facefusion_argv(["render", "c.mp4", "--execution-providers", "cuda", "cpu"]) == [
        "render", "c.mp4", "--backend", "cuda",
    ]  # fmt: skip
    with pytest.raises(InputError, match="ffbatch does not have lip_syncer"):
        facefusion_argv([*head, "--processors", "face_swapper", "lip_syncer"])
    with pytest.raises(InputError, match="ffbatch has no coreml backend"):
        facefusion_argv([*head, "--execution-providers", "coreml"])


def test_headless_run_is_a_render(tmp_path):
    """Parsed as render: a missing source is render's own exit 2, not an unknown command."""
    args = ["-s", str(tmp_path / "a.jpg"), "-t", str(tmp_path / "c.mp4"), "-o", str(tmp_path / "o.mp4")]
    proc = run("headless-run", *args)
    assert proc.returncode == 2 and f"--source {tmp_path / 'a.jpg'}: no such file" in proc.stderr


def test_headless_run_has_facefusions_no_tracker():
    """FaceFusion's face_tracker_score defaults to 0 (no tracker): headless-run swaps every face
    its detector keeps, unsmoothed, as a job step does; an explicit choice still wins (last)."""
    argv = facefusion_argv(["headless-run", "-t", "c.mp4", "--smoothing", "1"])
    assert argv[: 1 + len(NO_TRACKER)] == ["render", *NO_TRACKER] and argv[-3:-1] == ["--smoothing", "1"]
    assert not set(NO_TRACKER) & set(facefusion_argv(["render", "c.mp4"]))
