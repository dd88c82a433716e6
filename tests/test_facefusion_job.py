"""ffbatch render --facefusion-job: a FaceFusion 3 job file's steps, each a render; FaceFusion's
arguments mapped to ffbatch's options, anything else refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import standins
from media import decode_all, make_clip
from test_cli import ffbatch

from facefusion_batch.cli import FACEFUSION_ALIASES, FACEFUSION_SAME, facefusion_argv
from facefusion_batch.errors import InputError
from facefusion_batch.tools.facefusion_job import job_steps, step_output_name

ACCEPTED = frozenset(FACEFUSION_ALIASES) | FACEFUSION_SAME


def step_args(target, output, source, **changes) -> dict:
    """A step's args as FaceFusion 3.8 writes them: every step key, unset ones null, the rest at
    its defaults."""
    args = {
        "source_paths": [str(source)], "target_path": str(target), "output_path": str(output),
        "face_detector_model": "yolo_face", "face_detector_size": "640x640",
        "face_detector_margin": [0, 0, 0, 0], "face_detector_angles": [0], "face_detector_score": 0.5,
        "face_landmarker_model": "2dfan4", "face_landmarker_score": 0.5,
        "face_selector_mode": "many", "face_selector_order": "large-small",
        "face_selector_gender": None, "face_selector_race": None,
        "face_selector_age_start": None, "face_selector_age_end": None,
        "reference_face_position": 0, "reference_face_distance": 0.3, "reference_frame_number": 0,
        "face_tracker_score": 0.0, "face_occluder_model": "xseg_1", "face_parser_model": "bisenet_resnet_34",
        "face_mask_types": ["box"], "face_mask_areas": ["upper-face", "lower-face", "mouth"],
        "face_mask_regions": ["skin", "nose", "mouth"], "face_mask_blur": 0.3,
        "face_mask_padding": [0, 0, 0, 0],
        "voice_extractor_model": "kim_vocal_2", "trim_frame_start": None, "trim_frame_end": None,
        "temp_frame_format": "png", "temp_pixel_format": "bgr24", "target_frame_amount": 2,
        "output_image_quality": 80, "output_image_scale": 1.0, "output_audio_encoder": "aac",
        "output_audio_quality": 80, "output_audio_volume": 100, "output_video_encoder": "libx264",
        "output_video_preset": "veryfast", "output_video_quality": 80, "output_video_scale": 1.0,
        "output_video_fps": 25.0, "workflow_mode": "auto", "workflow_strategy": "memory",
        "processors": ["face_swapper"], "face_swapper_model": "hyperswap_1a_256",
        "face_swapper_pixel_boost": "256x256", "face_swapper_weight": 0.5,
        "face_enhancer_model": "gfpgan_1.4", "face_enhancer_blend": 80, "face_enhancer_weight": 0.5,
    }  # fmt: skip
    args.update(changes)
    return args


def write_job(path: Path, *steps: dict) -> Path:
    job = {
        "version": "1",
        "date_created": "2026-11-30T22:00:00",
        "date_updated": None,
        "steps": [{"args": a, "status": "queued"} for a in steps],
    }
    path.write_text(json.dumps(job))
    return path


@pytest.fixture(scope="module")
def clip(tmp_path_factory, t1_small):
    return make_clip(tmp_path_factory.mktemp("job") / "clip.mp4", frames=3, size=(480, 320), image=t1_small)


def test_steps_become_facefusion_command_lines(tmp_path, clip, astronaut_path):
    out0, out1 = tmp_path / "a.mp4", tmp_path / "b.mp4"
    job = write_job(
        tmp_path / "nightly.json",
        step_args(clip, out0, astronaut_path),
        # FaceFusion's remix: the target is step 0's output under its step name
        step_args(step_output_name(out0, "nightly", 0), out1, astronaut_path, face_selector_mode="one",
                  processors=["face_swapper", "face_enhancer"], face_enhancer_model="codeformer"),
    )  # fmt: skip
    steps = job_steps(job, ACCEPTED)
    assert [s.target for s in steps] == [clip, out0] and [s.output for s in steps] == [out0, out1]
    argv = facefusion_argv(["render", *steps[1].argv])
    assert argv[-1] == str(out0)  # the input, last
    pairs = dict(zip(argv[1:-1:2], argv[2:-1:2], strict=True))
    assert pairs["--faces"] == "one" and pairs["--swapper-model"] == "hyperswap_1a_256"
    assert pairs["--enhancer-model"] == "codeformer" and pairs["--pixel-boost"] == "256"
    assert pairs["--mask-areas"] == "upper-face,lower-face,mouth" and pairs["--preset"] == "veryfast"
    assert "--enhancer-model" not in facefusion_argv(["render", *steps[0].argv])  # no face_enhancer


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"face_editor_model": "live_portrait"}, "face_editor_model is not an option ffbatch knows"),
        ({"processors": ["face_swapper", "lip_syncer"]}, "not ['lip_syncer']"),
        ({"processors": ["face_enhancer"]}, "ffbatch runs face_swapper"),
        ({"face_detector_model": "retinaface"}, "face_detector_model = 'retinaface' is not supported"),
        ({"trim_frame_start": 10}, "trim_frame_start = 10 is not supported"),
        ({"output_video_scale": 0.5}, "output_video_scale = 0.5"),
        ({"output_video_fps": 12.0}, "output_video_fps 12 differs from the target's 25 fps"),
        ({"output_path": None}, "needs target_path and output_path"),
    ],
)
def test_what_ffbatch_cannot_do_the_same_way_is_refused_by_name(
    tmp_path, clip, astronaut_path, changes, message
):
    job = write_job(tmp_path / "j.json", step_args(clip, tmp_path / "o.mp4", astronaut_path, **changes))
    with pytest.raises(InputError, match="step 0") as err:
        job_steps(job, ACCEPTED)
    assert message in str(err.value)


def test_bad_job_files_are_refused(tmp_path, clip, astronaut_path):
    same = write_job(
        tmp_path / "same.json",
        step_args(clip, tmp_path / "o.mp4", astronaut_path),
        step_args(clip, tmp_path / "o.mp4", astronaut_path),
    )
    with pytest.raises(InputError, match="writes .*o.mp4 as step 0 does"):
        job_steps(same, ACCEPTED)
    (tmp_path / "text.json").write_text("not json")
    for path, match in (
        (tmp_path / "text.json", "not a FaceFusion job file"),
        (write_job(tmp_path / "empty.json"), "no steps"),
        (tmp_path / "absent.json", "no such file"),
    ):
        with pytest.raises(InputError, match=match):
            job_steps(path, ACCEPTED)


def test_render_a_facefusion_job(tmp_path, private_home, clip, astronaut_path):
    store = standins.write_standins(tmp_path / "models", ["hyperswap_1a_256", "arcface_w600k_r50"])
    out0, out1 = tmp_path / "a.mp4", tmp_path / "b.mp4"
    job = write_job(
        tmp_path / "nightly.json",
        step_args(clip, out0, astronaut_path),
        step_args(step_output_name(out0, "nightly", 0), out1, astronaut_path, face_selector_mode="one"),
    )
    proc = ffbatch(
        "render", "--facefusion-job", job, "--models-dir", store, "--report", tmp_path / "r.json",
        home=private_home,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r0 = json.loads((tmp_path / "r-0.json").read_text())
    r1 = json.loads((tmp_path / "r-1.json").read_text())
    assert r0["settings"]["swap"]["learned"]["swapper_model"] == "hyperswap_1a_256"
    # many, then one a frame: the rest are not the first face; of the chosen three, the ones the
    # mesh is not sure are faces (the stand-in swapper's output is noise) are left as they are
    chosen = r1["faces_swapped"] + r1["faces_not_swapped"].get("track_not_swapping", 0)
    assert r0["faces_swapped"] > 3 and chosen == 3 and r1["faces_swapped"] >= 1
    assert r1["faces_not_swapped"]["not_the_first_face"] >= 1
    assert Path(r1["settings"]["input"]) == out0  # the remix rendered step 0's output again
    assert len(decode_all(out0)[0]) == len(decode_all(out1)[0]) == 3
    refused = write_job(
        tmp_path / "bad.json",
        step_args(clip, tmp_path / "c.mp4", astronaut_path, frame_colorizer_model="ddcolor"),
    )
    bad = ffbatch("render", "--facefusion-job", refused, "--models-dir", store, home=private_home)
    assert bad.returncode == 2 and "frame_colorizer_model is not an option ffbatch knows" in bad.stderr
    assert not (tmp_path / "c.mp4").exists()
