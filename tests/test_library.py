"""The library face (docs/library.md): `from facefusion_batch import RenderSettings, Renderer, render`."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest
from media import decode_all, make_clip

import facefusion_batch
from facefusion_batch import EncoderSettings, FfbatchError, InputError, Renderer, RenderSettings, render


@pytest.fixture(scope="module")
def clips(tmp_path_factory, astronaut_image) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("library")
    image = cv2.resize(astronaut_image, (256, 256), interpolation=cv2.INTER_AREA)
    clip = {"image": image, "size": (256, 256), "pan": False, "audio": None}
    one = make_clip(work / "one.mp4", frames=4, **clip)
    two = make_clip(work / "two.mkv", frames=3, fps=24, **clip)
    return one, two


def test_a_renderer_loaded_once_renders_two_clips_through_the_library(clips, t1_path, tmp_path):
    one, two = clips
    lossless = EncoderSettings(crf=0)  # so that what the swap did not touch is the input to the level
    settings = RenderSettings(
        input=one, output=tmp_path / "one-out.mp4", sources=(t1_path,), encoder=lossless, quiet=True
    )
    renderer = Renderer.load(settings)
    reports = [
        render(settings, renderer=renderer),
        render(replace(settings, input=two, output=tmp_path / "two-out.mkv"), renderer=renderer),
    ]
    for clip, report in zip(clips, reports, strict=True):
        given, _ = decode_all(clip)
        out, _ = decode_all(report.output)
        assert report.status == "ok" and report.frames_out == len(given) == len(out)
        assert report.faces_swapped == len(given)  # the astronaut, on every frame
        assert [pts for pts, _ in out] == [pts for pts, _ in given]
        diff = np.abs(out[0][1].astype(int) - given[0][1].astype(int)).max(axis=2)
        assert diff[40:130, 90:170].mean() > 2  # her face took the source's
        assert diff[200:].max() == 0 and diff[:, :40].max() == 0  # her suit and the background, as they were


def test_bad_settings_raise_an_input_error_and_write_nothing(t1_path, tmp_path):
    settings = RenderSettings(input=tmp_path / "missing.mp4", output=tmp_path / "out.mp4", sources=(t1_path,))
    with pytest.raises(InputError) as caught:
        render(settings)
    assert isinstance(caught.value, FfbatchError) and caught.value.exit_code == 2
    assert "missing.mp4" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_importing_the_package_does_not_load_the_pipeline():
    code = (
        "import sys, facefusion_batch.errors;"
        "print(sorted(m for m in sys.modules if m.startswith(('facefusion_batch.', 'cv2', 'av'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # _version: the one-line version file written at install time
    assert loaded.strip() in (
        "['facefusion_batch._version', 'facefusion_batch.errors']",
        "['facefusion_batch.errors']",
    )
    assert facefusion_batch.render is render and facefusion_batch.__version__
    with pytest.raises(AttributeError):
        facefusion_batch.not_a_name  # noqa: B018


def test_every_name_of_the_library_face_is_the_one_defined_in_the_api_module():
    from facefusion_batch import api

    names = [n for n in facefusion_batch.__all__ if n != "__version__"]
    assert "Renderer" in names and "render" in names
    assert all(getattr(facefusion_batch, n) is getattr(api, n) for n in names)


def test_the_swap_is_one_settings_type(tmp_path):
    """`swap` is a SwapSettings: without it the classical swap (as the library always rendered);
    the classical settings alone are refused with the spelling that works."""
    from facefusion_batch import ClassicalSettings, SwapSettings

    plain = RenderSettings(input=tmp_path / "in.mp4", output=tmp_path / "out.mp4", sources=())
    assert plain.swap == SwapSettings(swapper="classical")
    with pytest.raises(TypeError, match=r"SwapSettings\(swapper='classical', classical=ClassicalSettings"):
        replace(plain, swap=ClassicalSettings(blend="feather"))
