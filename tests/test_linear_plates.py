"""Scene-linear EXR plates (video/pictures/colour.py, video/pictures/native.py's float composition).

The plate is generated: t1.jpg decoded from sRGB to linear light, a window exposed six times
over (highlights up to 6.0) and a floor far down in the shadows (values below 0.002), written as
half- or float EXR by FFmpeg's own EXR encoder. Outputs are decoded and checked sample by sample:
every sample outside what the swap painted keeps its bits, half stays half, values above 1.0
survive, the faces change without a colour cast, and an OCIO view (OpenColorIO's built-in ACES
config, no file fetched) is what the face stages see.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from test_cli import ffbatch_here

from facefusion_batch.api import Renderer, RenderSettings, render
from facefusion_batch.errors import InputError
from facefusion_batch.models.assets import asset_path
from facefusion_batch.video.pictures.colour import srgb_decode, srgb_encode, view_transform
from facefusion_batch.video.pictures.native import NativePicture, compose, rgb_box, view8

SIZE = (320, 224)
FRAMES = (1001, 1002)
ACES_CG = "ocio://cg-config-v2.2.0_aces-v1.3_ocio-v2.4"  # built into OpenColorIO 2.4+: no file


def ffbatch(*args) -> subprocess.CompletedProcess:
    """The command in this process (`cli.main`, tests/test_cli.py `ffbatch_here`): usage errors."""
    return ffbatch_here(*args)


def linear_plate() -> np.ndarray:
    """[h, w, 3] float32 linear RGB with highlights above 1.0 (left eighth) and a deep-shadow floor."""
    bgr = cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), SIZE, interpolation=cv2.INTER_AREA)
    rgb = srgb_decode(bgr[..., ::-1].astype(np.float32) / 255)
    h, w = rgb.shape[:2]
    rgb[:, : w // 8] *= 6.0
    rgb[-h // 8 :] *= 0.002
    return rgb


def write_exr(path: Path, rgb: np.ndarray, fmt: str) -> None:
    """One EXR frame as FFmpeg's EXR encoder writes it (`fmt`: half | float, zip1)."""
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb, np.float32), format="gbrpf32le")
    ctx = av.CodecContext.create("exr", "w")
    ctx.width, ctx.height, ctx.pix_fmt, ctx.time_base = (
        rgb.shape[1],
        rgb.shape[0],
        "gbrpf32le",
        Fraction(1, 24),
    )
    ctx.options = {"compression": "zip1", "format": fmt}
    path.write_bytes(b"".join(bytes(p) for p in ctx.encode(frame) + ctx.encode(None)))


def decode(path: Path) -> NativePicture:
    with av.open(str(path)) as container:
        frame = next(container.decode(video=0))
        return NativePicture.from_av(frame, frame.format.name, frame.width, frame.height)


def samples(picture: NativePicture) -> np.ndarray:
    """[3, h, w] of the picture's stored values, as raw bits (for bit-exact comparison)."""
    planes = np.stack(picture.planes[:3])
    return planes.view(np.uint16 if planes.dtype == np.float16 else np.uint32)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("linear")


@pytest.fixture(scope="module")
def plates(work) -> dict[str, Path]:
    rgb = linear_plate()
    patterns = {}
    for fmt in ("half", "float"):
        folder = work / fmt
        folder.mkdir()
        for number in FRAMES:
            write_exr(folder / f"plate.{number}.exr", rgb, fmt)
        patterns[fmt] = folder / "plate.%04d.exr"
    return patterns


@pytest.fixture(scope="module")
def job(plates, source, work) -> RenderSettings:
    return RenderSettings(
        input=plates["half"], output=work / "unused.%04d.exr", sources=(source,), workers=1, quiet=True
    )


@pytest.fixture(scope="module")
def renderer(job) -> Renderer:
    return Renderer.load(job)


@pytest.fixture(scope="module")
def rendered(renderer, job, plates) -> dict[str, tuple[Path, dict, Path, Path]]:
    """fmt -> (output folder, report, matte pattern, display folder): the default render of each
    plate, and its 8-bit render (PNG: the picture the face stages painted)."""
    results = {}
    for fmt in ("half", "float"):
        matte = job.output.parent / f"matte-{fmt}.%04d.png"
        out, report = run(renderer, replace(job, input=plates[fmt], matte_output=matte), f"out-{fmt}")
        display = job.output.parent / f"display-{fmt}"
        display.mkdir()
        png = replace(job, input=plates[fmt], output=display / "comp.%04d.png")
        render(replace(png, encoder=replace(job.encoder, pix_fmt="rgb24")), renderer=renderer)
        results[fmt] = (out, report, matte, display)
    return results


def run(renderer, job, name: str, **changes) -> tuple[Path, dict]:
    out = job.output.parent / name
    out.mkdir()
    settings = replace(job, output=out / "comp.%04d.exr", report=out / "report.json", **changes)
    render(settings, renderer=renderer)
    return out, json.loads((out / "report.json").read_text())


def test_srgb_formula():
    linear = np.array([0.0, 0.0031308, 0.18, 1.0, 6.0, -0.5, 1e-6], np.float32)
    encoded = srgb_encode(linear)
    assert encoded[1] == pytest.approx(0.04045, abs=1e-5) and encoded[3] == pytest.approx(1.0, abs=1e-6)
    assert encoded[2] == pytest.approx(0.4613561, abs=1e-5) and encoded[4] > 1.5 and encoded[5] < 0
    np.testing.assert_allclose(srgb_decode(encoded), linear, rtol=2e-6, atol=1e-9)


@pytest.mark.parametrize("fmt", ["half", "float"])
def test_linear_exr_keeps_every_sample_outside_the_faces(rendered, plates, fmt):
    out, report, matte, display = rendered[fmt]
    assert "linear → sRGB (built-in)" in report["frames_as"] and report["faces_swapped"] >= 4
    for number in FRAMES:
        before, after = decode(plates[fmt].parent / f"plate.{number}.exr"), decode(out / f"comp.{number}.exr")
        assert after.pix_fmt == before.pix_fmt == ("gbrpf16le" if fmt == "half" else "gbrpf32le")
        sizes = [
            p.stat().st_size for p in (plates[fmt].parent / f"plate.{number}.exr", out / f"comp.{number}.exr")
        ]
        assert sizes[1] < 1.1 * sizes[0]  # half is not written as float
        changed = (samples(before) != samples(after)).any(axis=0)
        alpha = cv2.imread(str(matte.parent / (matte.name % number)), cv2.IMREAD_GRAYSCALE)
        assert 0.01 < changed.mean() < 0.15
        assert not (changed & (alpha == 0)).any()  # outside what was painted every sample keeps its bits
        rgb_in, rgb_out = (rgb_box(p, (0, 0, p.width, p.height)) for p in (before, after))
        highlights = (rgb_in > 1).any(axis=-1)
        assert (
            highlights.mean() > 0.05
            and (rgb_out[highlights & ~changed] == rgb_in[highlights & ~changed]).all()
        )
        floor = rgb_in[-SIZE[1] // 8 :]
        assert len(np.unique(rgb_out[-SIZE[1] // 8 :])) == len(np.unique(floor)) > 300  # shadow detail
        # the faces change without a colour cast: each channel's share of the changed pixels' mean
        share_in = rgb_in[changed].mean(axis=0) / rgb_in[changed].mean()
        share_out = rgb_out[changed].mean(axis=0) / rgb_out[changed].mean()
        assert np.abs(share_out - share_in).max() < 0.08, (share_in, share_out)
        assert np.isfinite(rgb_out).all()
        # the output seen through the view is what the face stages painted (the 8-bit render of the
        # same plate), but where a highlight keeps its overshoot above display white
        after.view = view_transform(after.pix_fmt, "auto", None)
        shown, painted = (
            view8(after).astype(int),
            cv2.imread(str(display / f"comp.{number}.png")),
        )
        over = (shown == 255).any(axis=-1) | (srgb_encode(rgb_in) > 1).any(axis=-1)
        assert (painted != view8(before)).any(axis=-1)[changed].mean() > 0.9
        assert np.abs(shown - painted)[~over].max() <= 1


def test_display_referred_reading_is_another_view(renderer, job, rendered):
    """--input-colorspace srgb: the plate's values shown as display values (0-1 as they are): the
    face stages see another picture, so the faces differ from the linear reading's."""
    out, report = run(renderer, job, "out-srgb", input_colorspace="srgb")
    assert "srgb (display values as they are)" in report["frames_as"]
    before, after = decode(job.input.parent / "plate.1001.exr"), decode(out / "comp.1001.exr")
    linear = decode(rendered["half"][0] / "comp.1001.exr")
    changed = (samples(before) != samples(after)).any(axis=0)
    assert 0.005 < changed.mean() < 0.15
    assert ((samples(after) != samples(linear)).any(axis=0) & changed).mean() > 0.005
    rgb_in, rgb_out = (rgb_box(p, (0, 0, p.width, p.height)) for p in (before, after))
    highlights = (rgb_in > 1).any(axis=-1) & ~changed
    assert highlights.mean() > 0.05 and (rgb_out[highlights] == rgb_in[highlights]).all()


def test_compose_float_changes_only_the_painted_samples():
    rgb = linear_plate()
    picture = NativePicture(
        "gbrpf16le", SIZE[0], SIZE[1], [rgb[..., c].astype(np.float16) for c in (1, 2, 0)]
    )
    picture.view = view_transform("gbrpf16le", "auto", None)
    original = view8(picture)
    swapped = original.copy()
    rng = np.random.default_rng(0)
    swapped[40:120, 100:200] = rng.integers(0, 256, (80, 100, 3))
    swapped[100:110, 0:30] = 0  # darkened highlights (view above 1.0 shown as 255)
    result = compose(picture.copy(), original, swapped, [(0, 100, 40, 100, 80), (0, 0, 100, 30, 10)])
    changed = (samples(picture) != samples(result)).any(axis=0)
    inside = np.zeros(changed.shape, bool)
    inside[40:120, 100:200] = inside[100:110, 0:30] = True
    assert changed[inside].mean() > 0.95 and not changed[~inside].any()
    # the painted picture, at float precision; a highlight keeps its overshoot above display white
    over = (view8(result) == 255).any(axis=-1) | (picture.view.forward(rgb) > 1).any(axis=-1)
    assert np.abs(view8(result).astype(int) - swapped)[~over].max() <= 1
    darkened = rgb_box(result, (0, 100, 30, 110)) < rgb[100:110, 0:30]
    assert darkened.all()


def test_ocio_view_is_what_the_face_stages_see(renderer, job, plates, rendered, monkeypatch):
    pytest.importorskip("PyOpenColorIO")
    aces = view_transform("gbrpf16le", "auto", ACES_CG)  # the config's scene_linear: ACEScg
    rec709 = view_transform("gbrpf16le", "Linear Rec.709 (sRGB)", ACES_CG)
    assert aces is not None and rec709 is not None and "ACEScg" in aces.name
    plate = linear_plate()[:112]  # the faces' rows: no shadow floor, which the ACES view crushes
    shown = aces.forward(plate)
    assert np.abs(shown - rec709.forward(plate)).max() > 0.05  # another colour space, another view
    assert np.abs(shown - srgb_encode(plate)).max() > 0.05  # and not the built-in sRGB
    visible = (shown > 0.02).all(axis=-1) & (shown < 0.98).all(axis=-1)
    back = aces.inverse(shown)
    # ACES 1.x's output transform inverts to within 1.6 % on this plate's saturated colours
    np.testing.assert_allclose(back[visible], plate[visible], rtol=0.02, atol=1e-4)
    # a render through the OCIO environment variable: the same exactness outside the faces
    monkeypatch.setenv("OCIO", ACES_CG)
    out, report = run(renderer, job, "out-ocio")
    assert "OCIO ACEScg" in report["frames_as"]
    builtin = decode(rendered["half"][0] / "comp.1001.exr")
    before, after = decode(plates["half"].parent / "plate.1001.exr"), decode(out / "comp.1001.exr")
    changed = (samples(before) != samples(after)).any(axis=0)
    assert 0.01 < changed.mean() < 0.15 and (samples(after) != samples(builtin)).any()
    assert np.isfinite(rgb_box(after, (0, 0, after.width, after.height))).all()


def test_colourspace_mistakes_are_refused():
    with pytest.raises(InputError, match="not a floating-point"):
        view_transform("yuv420p", "linear", None)
    with pytest.raises(InputError, match="no OCIO config is set"):
        view_transform("gbrpf16le", "ACEScg", None)
    pytest.importorskip("PyOpenColorIO")
    with pytest.raises(InputError, match="did you mean ACEScg"):
        view_transform("gbrpf16le", "ACEScgg", ACES_CG)
    with pytest.raises(InputError, match="no such file"):
        view_transform("gbrpf32le", "auto", "/nonexistent/config.ocio")


def test_command_line_options(plates, source, work):
    """--input-colorspace and --ocio-config from the command line: a mistyped OCIO colour space
    and a colour space on an integer (8-bit) input are exit 2 with the reason, nothing written."""
    pytest.importorskip("PyOpenColorIO")
    out = work / "cli" / "comp.%04d.exr"
    out.parent.mkdir()
    mistyped = ffbatch("render", plates["half"], "-s", source, "-o", out, "--ocio-config", ACES_CG,
                       "--input-colorspace", "ACEScgg", "-q")  # fmt: skip
    assert mistyped.returncode == 2 and "(did you mean ACEScg?)" in mistyped.stderr
    for number in FRAMES:
        cv2.imwrite(str(work / "cli" / f"plate.{number}.png"), np.zeros((64, 64, 3), np.uint8))
    plate, comp = work / "cli" / "plate.%04d.png", work / "cli" / "out.%04d.png"
    integer = ffbatch("render", plate, "-s", source, "-o", comp, "--input-colorspace", "linear")
    assert integer.returncode == 2 and "not a floating-point (EXR) picture" in integer.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["plate.1001.png", "plate.1002.png"]


def test_range_report_names_the_plate_numbers(renderer, job, rendered):
    """A range of the plate (--frame-range 1002-1002 is frames=(1, 2)): the report gives the range
    in the plate's own numbers beside the 0-based one, and the frame is the whole render's."""
    out, report = run(renderer, replace(job, frames=(1, 2)), "out-range")
    assert report["frames"] == [1, 2] and report["frame_range"] == [1002, 1002]
    assert sorted(p.name for p in out.glob("*.exr")) == ["comp.1002.exr"]
    whole = decode(rendered["half"][0] / "comp.1002.exr")
    assert (samples(decode(out / "comp.1002.exr")) == samples(whole)).all()
