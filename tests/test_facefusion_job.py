"""ffbatch render --facefusion-job: job files as FaceFusion 3.8.1's own job commands wrote them
(tests/data/facefusion_jobs, see its README) run unchanged: keys of processors a step does not run
ignored, remix steps rendered from the earlier step's file, steps sharing an output joined in order,
a processor ffbatch lacks refused by name. Variants are those files with one value changed."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
import standins
from media import audio_packets, decode_all, make_clip
from test_cli import ffbatch, ffbatch_here

from facefusion_batch.cli import FACEFUSION_ALIASES, FACEFUSION_SAME, facefusion_argv
from facefusion_batch.errors import InputError
from facefusion_batch.tools.facefusion_job import read_facefusion_job
from facefusion_batch.video.encode.trimmed import trim_range, write_trimmed

ACCEPTED = frozenset(FACEFUSION_ALIASES) | FACEFUSION_SAME
JOBS = Path(__file__).parent / "data" / "facefusion_jobs"
RUNS = (
    "swap-default", "swap-image", "swap-and-enhance", "swap-then-enhance-remix", "two-steps-one-output",
    "swap-trimmed",
)  # fmt: skip
REFUSED = {"lip-syncer": "lip_syncer", "frame-colorizer": "frame_colorizer"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, t1_small, astronaut_path):
    """The media FaceFusion's commands named (target.mp4, target2.mp4, target.jpg, source.jpg) and
    the stand-in models; each test copies what it needs into its own directory."""
    d = tmp_path_factory.mktemp("ffjobs")
    make_clip(d / "target.mp4", frames=3, size=(480, 320), image=t1_small)
    make_clip(d / "target2.mp4", frames=2, size=(480, 320), image=t1_small, seed=1)
    cv2.imwrite(str(d / "target.jpg"), t1_small)
    cv2.imwrite(str(d / "source.jpg"), cv2.imread(str(astronaut_path)))
    standins.write_standins(d / "models", ["hyperswap_1a_256", "arcface_w600k_r50", "gfpgan_1.4"])
    return d


def job_dir(tmp_path: Path, workdir: Path, name: str, **changes) -> Path:
    """A directory holding the media and the job `name` (FaceFusion's file; `changes` set in
    every step's args)."""
    for item in workdir.iterdir():
        (tmp_path / item.name).symlink_to(item)
    job = json.loads((JOBS / f"{name}.json").read_text())
    for step in job["steps"]:
        step["args"].update(changes)
    (tmp_path / f"{name}.json").write_text(json.dumps(job, indent=4))
    return tmp_path


def test_the_files_are_facefusions_output():
    for path in JOBS.glob("*.json"):
        job = json.loads(path.read_text())
        assert job["version"] == "1" and job["date_created"].startswith("2026-12-06")
        for step in job["steps"]:
            assert len(step["args"]) == 85 and step["status"] == "queued"
            assert step["args"]["output_audio_encoder"] == "flac"  # the machine's ffmpeg lists it first
    assert sorted(p.stem for p in JOBS.glob("*.json")) == sorted([*RUNS, *REFUSED])


def test_keys_of_processors_not_run_are_ignored_and_the_rest_mapped():
    job = read_facefusion_job(JOBS / "swap-and-enhance.json", ACCEPTED)
    assert "face_enhancer_model" not in job.ignored and "lip_syncer_model" in job.ignored
    assert "voice_extractor_model" in job.ignored and "face_debugger_items" in job.ignored
    argv = facefusion_argv(["render", *job.steps[0].argv])
    pairs = dict(zip(argv[1:-1:2], argv[2:-1:2], strict=False))
    assert argv[-1] == "target.mp4" and pairs["-o"] == "output-swap-and-enhance-0.mp4"
    assert pairs["--swapper-model"] == "hyperswap_1a_256" and pairs["--enhancer-model"] == "gfpgan_1.4"
    assert pairs["--faces"] == "reference" and pairs["--reference-frame"] == "0"
    assert pairs["--pixel-boost"] == "256" and pairs["--preset"] == "veryfast"
    assert pairs["--score-threshold"] == "0.707107"  # FaceFusion's 0.5 is cls·obj; ffbatch's √(cls·obj)
    remix = read_facefusion_job(JOBS / "swap-then-enhance-remix.json", ACCEPTED).steps[1]
    assert remix.target == Path("swapped-swap-then-enhance-remix-0.mp4") and remix.final == Path(
        "enhanced.mp4"
    )
    assert "--swapper" in remix.argv and remix.argv[remix.argv.index("--swapper") + 1] == "none"
    assert "--source-paths" not in remix.argv and "--face-swapper-model" not in remix.argv


@pytest.mark.parametrize("name, processor", sorted(REFUSED.items()))
def test_a_processor_ffbatch_lacks_is_refused_by_name(tmp_path, workdir, name, processor):
    d = job_dir(tmp_path, workdir, name)
    proc = ffbatch_here("render", "--facefusion-job", f"{name}.json", "--models-dir", "models", cwd=d)
    assert proc.returncode == 2 and f"runs {processor}, which ffbatch does not have" in proc.stderr
    assert "Traceback" not in proc.stderr and not (d / "output.mp4").exists()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"trim_frame_start": -1}, "trim_frame_start = -1 is not a frame number"),
        ({"trim_frame_end": "3"}, "trim_frame_end = '3' is not a frame number"),
        ({"trim_frame_start": 3, "trim_frame_end": 3}, "trim_frame_end 3 is not after trim_frame_start 3"),
        ({"output_video_scale": 0.5}, "output_video_scale = 0.5"),
        ({"output_audio_volume": 50}, "output_audio_volume = 50"),
        ({"output_video_fps": 12.0}, "output_video_fps 12 differs from the target's 25 fps"),
        ({"output_video_resolution": "640x360"}, "output_video_resolution 640x360 differs"),
        ({"processors": ["face_swapper", "face_editor"]}, "runs face_editor, which ffbatch does not have"),
        ({"face_swapper_colour": "x"}, "face_swapper_colour is not an option ffbatch knows"),
        ({"output_path": None}, "needs target_path and output_path"),
    ],
)
def test_what_ffbatch_cannot_do_the_same_way_is_refused_by_name(
    tmp_path, workdir, monkeypatch, changes, message
):
    d = job_dir(tmp_path, workdir, "swap-default", **changes)
    monkeypatch.chdir(d)  # the job's paths are relative, as FaceFusion's commands were given them
    with pytest.raises(InputError, match="step 0") as err:
        read_facefusion_job(d / "swap-default.json", ACCEPTED)
    assert message in str(err.value)


def test_older_keys_and_other_defaults_are_accepted(tmp_path, workdir, monkeypatch):
    monkeypatch.chdir(job_dir(tmp_path, workdir, "swap-default"))
    for changes in (
        {"keep_temp": True, "output_video_resolution": "480x320", "output_video_fps": 25.0},
        {"face_detector_model": "yunet", "output_audio_encoder": "aac"},
        {"face_detector_model": "scrfd", "face_detector_size": "320x320", "face_detector_angles": [0, 90]},
        {"face_detector_model": "yunet", "face_detector_margin": [10, 0, 20, 0]},
    ):
        job = json.loads(Path("swap-default.json").read_text())
        job["steps"][0]["args"].update(changes)
        Path("changed.json").write_text(json.dumps(job))
        steps = read_facefusion_job(Path("changed.json"), ACCEPTED).steps
        assert len(steps) == 1
        for key, value in changes.items():  # the detector's keys go to render as FaceFusion's options
            if key.startswith("face_detector"):
                values = [str(v) for v in value] if isinstance(value, list) else [value]
                at = steps[0].argv.index("--" + key.replace("_", "-")) + 1
                assert steps[0].argv[at : at + len(values)] == values


def test_bad_job_files_are_refused(tmp_path):
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "empty.json").write_text(json.dumps({"version": "1", "date_created": "x", "steps": []}))
    for path, match in (
        (tmp_path / "text.json", "not a FaceFusion job file"),
        (tmp_path / "empty.json", "no steps"),
        (tmp_path / "absent.json", "no such file"),
    ):
        with pytest.raises(InputError, match=match):
            read_facefusion_job(path, ACCEPTED)


@pytest.mark.slow
def test_the_default_job_renders_and_lists_ignored_keys_once_at_v(tmp_path, workdir, private_home):
    d = job_dir(tmp_path, workdir, "swap-default")
    proc = ffbatch(
        "render", "--facefusion-job", "swap-default.json", "--models-dir", "models", "-v",
        "--report", "r.json", cwd=d, home=private_home,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["output.mp4"]
    assert proc.stderr.count("lip_syncer_model") == 1 and "ignored" in proc.stderr
    report = json.loads((d / "r.json").read_text())
    assert report["settings"]["swap"]["learned"]["swapper_model"] == "hyperswap_1a_256"
    assert report["faces_swapped"] >= 1 and report["audio"] == "copied"
    assert len(decode_all(d / "output.mp4")[0]) == 3
    assert audio_packets(d / "output.mp4") == audio_packets(d / "target.mp4")  # flac asked: kept as is
    assert sorted(p.name for p in d.iterdir() if "swap-default-" in p.name) == []  # step files removed
    again = ffbatch("render", "--facefusion-job", "swap-default.json", "--models-dir", "models", cwd=d)
    assert again.returncode == 2 and "output.mp4 already exists" in again.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["swap-image", "swap-and-enhance", "swap-then-enhance-remix"])
def test_default_jobs_render(tmp_path, workdir, private_home, name):
    d = job_dir(tmp_path, workdir, name)
    proc = ffbatch(
        "render", "--facefusion-job", f"{name}.json", "--models-dir", "models", cwd=d, home=private_home
    )
    assert proc.returncode == 0, proc.stderr
    outputs = {"swap-image": ["output.jpg"], "swap-then-enhance-remix": ["swapped.mp4", "enhanced.mp4"]}
    assert proc.stdout.split() == outputs.get(name, ["output.mp4"])
    assert not [p.name for p in d.iterdir() if f"-{name}-" in p.name]  # step files removed
    if name == "swap-then-enhance-remix":  # the enhancer alone on the swapped clip: faces change only
        (swapped, _), (enhanced, _) = decode_all(d / "swapped.mp4"), decode_all(d / "enhanced.mp4")
        assert len(swapped) == len(enhanced) == 3
        assert [p for p, _ in swapped] == [p for p, _ in enhanced]
        diff = [cv2.absdiff(a, b).max(axis=2) > 8 for (_, a), (_, b) in zip(swapped, enhanced, strict=True)]
        assert 0 < sum(int(m.sum()) for m in diff) < 0.5 * sum(m.size for m in diff)


@pytest.mark.slow
def test_steps_sharing_an_output_are_joined_in_order(tmp_path, workdir, private_home):
    d = job_dir(tmp_path, workdir, "two-steps-one-output")
    proc = ffbatch(
        "render", "--facefusion-job", "two-steps-one-output.json", "--models-dir", "models",
        cwd=d, home=private_home,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    frames, tb = decode_all(d / "output.mp4")
    first, tb1 = decode_all(d / "target.mp4")
    assert len(frames) == 5 and tb == tb1
    step = round(Fraction(1, 25) / tb)
    assert [p for p, _ in frames] == [i * step for i in range(5)]  # the second clip follows the first
    assert not [p.name for p in d.iterdir() if "-two-steps-one-output-" in p.name]
    ours, first_audio = audio_packets(d / "output.mp4"), audio_packets(d / "target.mp4")
    assert ours[: len(first_audio)] == first_audio  # the first clip's sound, packet for packet


def test_enhance_only_render_needs_an_enhancer(tmp_path, workdir):
    shutil.copy(workdir / "target.mp4", tmp_path / "t.mp4")
    proc = ffbatch_here("render", tmp_path / "t.mp4", "--swapper", "none", "-o", tmp_path / "o.mp4")
    assert proc.returncode == 2 and "--swapper none renders the enhancer alone" in proc.stderr


def test_trim_frames_are_facefusions_range():
    """FaceFusion's restrict_trim_frame: START inclusive, END exclusive, each clamped to the video."""
    assert trim_range(10, None, None) == (0, 10) and trim_range(10, 2, None) == (2, 10)
    assert trim_range(10, None, 4) == (0, 4) and trim_range(10, 3, 40) == (3, 10)
    assert trim_range(10, 12, None) == (10, 10)  # nothing left: the job says so (exit 2)
    step = read_facefusion_job(JOBS / "swap-trimmed.json", ACCEPTED).steps[0]
    assert step.trim == (1, 3) and not [a for a in step.argv if a.startswith("--trim")]


@pytest.mark.parametrize("ext", [".mp4", ".mkv"])  # Matroska records no stream duration
def test_a_trimmed_clip_starts_at_0_with_the_sound_of_its_span(tmp_path, workdir, ext):
    """write_trimmed on a segment of frames 1..2 (the input's timestamps, as --frames writes it)."""
    frames, tb = decode_all(workdir / "target.mp4")
    segment = tmp_path / f"seg{ext}"
    with av.open(str(segment), "w") as out:
        video = out.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = 480, 320, "yuv420p"
        for pts, image in frames[1:3]:
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            frame.pts, frame.time_base = round(pts * tb * 25), Fraction(1, 25)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
    write_trimmed(segment, workdir / "target.mp4", tmp_path / f"out{ext}")
    trimmed, tb2 = decode_all(tmp_path / f"out{ext}")
    assert [p * tb2 for p, _ in trimmed] == [0, Fraction(1, 25)]

    def sound(path):
        with av.open(str(path)) as c:
            return np.concatenate([f.to_ndarray()[0] for f in c.decode(audio=0)])

    ours, theirs = sound(tmp_path / f"out{ext}"), sound(workdir / "target.mp4")[1920:5760]  # 1/25..3/25 s
    assert 3840 <= len(ours) <= 3840 + 1024  # the span, plus at most one AAC frame of padding
    assert np.corrcoef(ours[:3840], theirs)[0, 1] > 0.99  # the same sound, in step
    assert np.corrcoef(ours[:3840], sound(workdir / "target.mp4")[:3840])[0, 1] < 0.9  # not from 0


@pytest.mark.slow
def test_the_trimmed_job_renders_frames_1_and_2_with_their_sound(tmp_path, workdir, private_home):
    d = job_dir(tmp_path, workdir, "swap-trimmed")
    proc = ffbatch(
        "render", "--facefusion-job", "swap-trimmed.json", "--models-dir", "models", cwd=d, home=private_home
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["output.mp4"]
    trimmed, tb = decode_all(d / "output.mp4")
    assert [p * tb for p, _ in trimmed] == [0, Fraction(1, 25)]
    (tmp_path / "whole").mkdir()
    whole = ffbatch(
        "render", "--facefusion-job", "swap-default.json", "--models-dir", "models", cwd=job_dir(
            tmp_path / "whole", workdir, "swap-default"), home=private_home,
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    swapped, _ = decode_all(tmp_path / "whole" / "output.mp4")
    target, _ = decode_all(d / "target.mp4")
    for (_, ours), (_, full), (_, original) in zip(trimmed, swapped[1:3], target[1:3], strict=True):
        # frames 1, 2, swapped: as the whole job's up to codec noise (the trimmed file starts on an
        # I-frame; x264 on one core, as a pinned test worker, codes them 1.1-2.0 apart), far from
        # the original's (6.8-9.4 apart)
        near, far = cv2.absdiff(ours, full).mean(), cv2.absdiff(ours, original).mean()
        assert near < 0.5 * far and far > 4, (near, far)
    with av.open(str(d / "output.mp4")) as c:
        assert c.streams.audio[0].duration * c.streams.audio[0].time_base < 0.08 + 1024 / 48000
    assert not [p.name for p in d.iterdir() if "swap-trimmed-" in p.name or ".frames" in p.name]


def test_facefusions_no_tracker_swaps_every_kept_face_unsmoothed(tmp_path, workdir, monkeypatch):
    """face_tracker_score 0 (FaceFusion's default) is FaceFusion without a tracker: ffbatch's tracker
    neither holds a face back nor smooths its points (scripts/compare_facefusion.py measured the
    difference); another score is refused."""
    step = read_facefusion_job(JOBS / "swap-default.json", ACCEPTED).steps[0]
    argv = facefusion_argv(["render", *step.argv])
    pairs = dict(zip(argv[1:-1:2], argv[2:-1:2], strict=False))
    assert pairs["--face-presence"] == "0" and pairs["--smoothing"] == "0"
    d = job_dir(tmp_path, workdir, "swap-default", face_tracker_score=0.3)
    monkeypatch.chdir(d)
    with pytest.raises(InputError, match="face_tracker_score = 0.3 is not supported"):
        read_facefusion_job(d / "swap-default.json", ACCEPTED)
