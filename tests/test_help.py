"""Help a person reads: `render`, `preview` and `plan` list their options in panels, name values
by what they are (no Python types), show examples that parse; "did you mean" for encoder and
model names, hints for ffmpeg's options. All through `cli.main(argv)` in-process."""

from __future__ import annotations

import os
import re
import shlex
from unittest import mock

import pytest
import typer
from media import make_clip
from test_cli import ffbatch, ffbatch_here

from facefusion_batch.cli import PANELS, app, ffmpeg_hint
from facefusion_batch.video.encode.formats import encoder_in_build

COMMANDS = ("render", "preview", "plan", "concat")


def help_text(command: str) -> str:
    proc = ffbatch_here(command, "--help")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout


def sections(text: str) -> dict[str, str]:
    """The help's sections by title (a line ending in ':' at the left margin) and their text."""
    out, title = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            title = line[:-1]
            out[title] = ""
        elif title is not None:
            out[title] += line + "\n"
    return out


def options_in(section: str) -> set[str]:
    return set(re.findall(r"^  (?:-\w, )?(--[\w-]+)", section, re.M))


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_clip(tmp_path_factory.mktemp("help") / "c.mp4", frames=2, size=(64, 48), audio=None)


def test_render_help_groups_its_options_into_panels_in_order():
    text = help_text("render")
    found = sections(text)
    titles = [t for t in found if t in (*PANELS, "Arguments", "Options")]
    assert titles == ["Arguments", *PANELS, "Options"], titles
    where = {option: title for title, body in found.items() for option in options_in(body)}
    expected = {
        "--output": "Input and output",
        "--source": "Input and output",
        "--report": "Input and output",
        "--swapper-model": "Swap",
        "--mask": "Swap",
        "--face-order": "Faces",
        "--reference-face": "Faces",
        "--encoder": "Encoding and quality",
        "--crf": "Encoding and quality",
        "--frame-range": "Farm: ranges, chunks, resume",
        "--chunk-frames": "Farm: ranges, chunks, resume",
        "--gpus": "Device and GPU",
        "--backend": "Device and GPU",
        "--facefusion-job": "FaceFusion names",
        "--verbose": "Options",
    }
    assert {o: where.get(o) for o in expected} == expected
    # the unnamed panel holds only what every command has: a new option must name its panel
    generic = found["Options"].split("\n\n")[0]  # the FaceFusion names' table follows it
    assert options_in(generic) == {"--quiet", "--verbose", "--help"}, generic
    # every option of render is listed once, in some section
    render = typer.main.get_command(app).commands["render"]
    visible = {max(p.opts, key=len) for p in render.params if p.param_type_name == "option" and not p.hidden}
    assert visible <= set(where) | {"--audio"}, visible - set(where)  # --audio/--no-audio: one line


def test_preview_puts_the_shared_options_in_renders_panels():
    commands = typer.main.get_command(app).commands
    render = {p.name: p for p in commands["render"].params}
    for param in commands["preview"].params:
        # one declaration for both (preview's --frames is a count, render's a range: not shared)
        if param.name in render and param.help == render[param.name].help:
            assert param.rich_help_panel == render[param.name].rich_help_panel, param.name


@pytest.mark.parametrize("command", COMMANDS)
def test_no_python_types_in_usage_or_option_lines(command):
    text = help_text(command)
    assert not re.search(r"<(list|int|str|float|path|Path|bool)\b", text), text
    usage = text.splitlines()[0]
    assert usage.startswith(f"Usage: ffbatch {command} [OPTIONS] "), usage
    assert "{" not in usage and "<" not in usage, usage
    assert re.search(r"^  --\S+ (N|NUMBER|TEXT|PATH)\b", text, re.M)  # values named by what they are


def test_no_command_shows_python_types():
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        for sub in getattr(command, "commands", {None: command}):
            words = [name] if sub is None else [name, sub]
            proc = ffbatch_here(*words, "--help")
            assert proc.returncode == 0, (words, proc.stderr)
            assert not re.search(r"<(list|int|str|float|path|Path|bool)\b", proc.stdout), proc.stdout
            assert "{" not in proc.stdout.splitlines()[0], proc.stdout  # typer's {name} in the usage


@pytest.mark.parametrize("command", ["render", "preview", "plan"])
def test_each_command_shows_examples_that_use_its_own_options(command):
    text = help_text(command)
    assert "Examples:" in text
    examples = [line.strip() for line in text.splitlines() if line.startswith(f"    ffbatch {command} ")]
    assert len(examples) >= 2, text
    assert max(len(line) for line in text.splitlines()) <= 80  # a terminal's width
    commands = typer.main.get_command(app).commands
    names = {opt for p in commands[command].params for opt in (*p.opts, *p.secondary_opts)}
    if command == "plan":  # plan passes render's options to its tasks
        names |= {opt for p in commands["render"].params for opt in (*p.opts, *p.secondary_opts)}
    for example in examples:
        words = shlex.split(example.split(" > ")[0])
        used = {w.split("=", 1)[0] for w in words if w.startswith("-")}
        assert used <= names, (example, used - names)


@pytest.mark.parametrize(
    "option, given, suggested",
    [
        ("--encoder", "libx246", "libx264"),
        ("--encoder", "prores", "prores_ks"),
        ("--swapper-model", "inswaper_128", "inswapper_128"),
        ("--enhancer-model", "gfpgan_14", "gfpgan_1.4"),
        ("--occluder-model", "xseg1", "xseg_1"),
    ],
)
def test_a_mistyped_encoder_or_model_name_gets_did_you_mean(
    tmp_path, clip, astronaut_path, option, given, suggested
):
    proc = ffbatch_here("render", clip, "-s", astronaut_path, "-o", tmp_path / "o.mkv", option, given)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ffbatch: error:")]
    assert len(errors) == 1 and f"(did you mean {suggested}?)" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []


def test_a_name_close_to_nothing_gets_no_guess(tmp_path, clip, astronaut_path):
    proc = ffbatch_here("render", clip, "-s", astronaut_path, "-o", tmp_path / "o.mp4", "--encoder", "zzzz")
    assert proc.returncode == 2 and "--encoder 'zzzz' is not supported; choose one of" in proc.stderr
    assert "did you mean" not in proc.stderr


@pytest.mark.parametrize(
    "args, said",
    [
        (["-i", "in.mp4"], "; the input is the first argument: ffbatch render IN.mp4"),
        (["in.mp4", "-o", "out.mp4", "-y"], "; ffmpeg's -y is --overwrite here"),
        (["in.mp4", "-c:v", "libx265"], "; ffmpeg's -c:v is --encoder here"),
        (["in.mp4", "-crf", "20"], "; ffmpeg's -crf is --crf here"),
        (["in.mp4", "-an"], "; ffmpeg's -an is --no-audio here"),
    ],
)
def test_ffmpegs_options_get_a_hint(args, said):
    proc = ffbatch_here("render", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ffbatch: error: No such option: -"), lines
    assert said in lines[0] and lines[0].endswith("(see 'ffbatch render --help')"), lines[0]


def test_ffmpeg_hint_reads_only_ffmpegs_habits():
    assert ffmpeg_hint(["in.mp4", "-s", "face.jpg", "-o", "o.mp4", "-v", "--bogus"]) == ""
    assert ffmpeg_hint(["--", "-y"]) == ""
    assert ffmpeg_hint(["-y", "-i", "x"]) == "; ffmpeg's -y is --overwrite here"  # the first one


@pytest.mark.slow
@pytest.mark.skipif(not encoder_in_build("libsvtav1"), reason="this FFmpeg has no libsvtav1")
def test_svt_av1s_banner_only_with_verbose(tmp_path, clip, astronaut_path):
    """SVT-AV1 writes its banner (some 20 lines) to the process's stderr itself: a child process."""
    runs = {}
    for extra in ((), ("-v",)):
        args = ["render", clip, "-s", astronaut_path, "-o", tmp_path / "o.mkv", "--encoder", "libsvtav1"]
        with mock.patch.dict(os.environ):
            os.environ.pop("SVT_LOG", None)
            proc = ffbatch(*args, "--swapper", "classical", "--overwrite", *extra)
        assert proc.returncode == 0, proc.stderr
        runs[extra] = [line for line in proc.stderr.splitlines() if line.startswith("Svt[")]
    assert runs[()] == [], runs[()]
    assert len(runs[("-v",)]) >= 10 and any(line.startswith("Svt[info]") for line in runs[("-v",)])
