"""`render --ray`: segments on Ray actors, a killed worker's segment retried elsewhere.

Ray runs locally here (`ray.init()` on this machine, CPU actors). Without Ray
installed the test that needs it is skipped; the message test always runs.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest
from media import audio_packets, decode_all, make_clip
from test_cli import ffbatch_here
from test_compositing_outputs import decoded, sequence

from facefusion_batch.config import RenderSettings
from facefusion_batch.farm.jobs import render
from facefusion_batch.models.assets import asset_path
from facefusion_batch.video.encode.encoder_policy import EncoderSettings


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("farm ray")


@pytest.fixture(scope="module")
def clip(work) -> Path:
    photo = cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), (640, 443), interpolation=cv2.INTER_AREA)
    return make_clip(work / "in.mp4", image=photo, size=(320, 240), frames=16)


@pytest.fixture(scope="module")
def source(work) -> Path:
    path = work / "face.png"
    cv2.imwrite(str(path), cv2.imread(str(asset_path("astronaut.png"))))
    return path


def test_ray_missing_is_a_usage_error(tmp_path, clip, source, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without it
    out = tmp_path / "o.mp4"
    proc = ffbatch_here("render", clip, "-s", source, "-o", out, "--ray", "auto")
    assert proc.returncode == 2, proc.stderr
    assert "pip install" in proc.stderr and "ray" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_renders_like_a_local_render_and_retries_a_dead_worker(work, clip, source, local_ray):
    from facefusion_batch.farm.ray_runner import render_with_ray

    settings = RenderSettings(
        input=clip,
        output=work / "local.mp4",
        sources=(source,),
        encoder=EncoderSettings(crf=0),
        quiet=True,
        faces="one",  # the other faces of the group photo are counted as not swapped
    )
    local = render(settings)
    out = work / "ray out.mp4"
    report = work / "ray.json"
    killed = []

    def kill_first(actor, task) -> None:
        if not killed:
            killed.append(task.frames)
            local_ray.kill(actor)  # the node "went away" while holding this segment

    code = render_with_ray(
        [replace(settings, output=out, chunk_frames=8)],
        address="auto",
        workers=2,
        report_path=report,
        on_dispatch=kill_first,
    )
    assert code == 0
    job = json.loads(report.read_text())["jobs"][0]
    assert job["status"] == "ok" and job["retries"] == 1 and killed
    assert job["segments"] == {"total": 2, "reused": 0, "rendered": 2}
    assert len(job["workers"]) == 1  # the survivor rendered both segments
    # faces not swapped, by reason, as the local render counts them (the killed segment once)
    assert (
        job["faces_not_swapped"] == local.faces_not_swapped
        and local.faces_not_swapped["not_the_largest_face"] > 0
    )
    assert job["faces_found"] - job["faces_swapped"] == sum(job["faces_not_swapped"].values())
    # the swapped faces by the swap's decision (swap/classical/fit.py), summed over segments as well
    assert job["swap_decisions"] == local.swap_decisions
    assert sum(job["swap_decisions"].values()) == job["faces_swapped"]
    got, ref = decode_all(out)[0], decode_all(settings.output)[0]
    assert len(got) == len(ref) == 16 and [p for p, _ in got] == [p for p, _ in ref]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, ref, strict=True))
    assert audio_packets(out) == audio_packets(clip)
    assert not (work / ".ray out.mp4.ffbatch").exists()


@pytest.mark.slow
def test_a_worker_the_cluster_cannot_start_holds_no_segment(work, clip, source, local_ray, monkeypatch):
    """Three one-CPU actors on a two-CPU Ray: the third never starts while the others live, so
    it gets no segment and the two render all four (a segment handed to it would wait forever).
    With no actor able to start at all, the job fails once the start timeout passes."""
    from facefusion_batch.errors import FfbatchError
    from facefusion_batch.farm import ray_runner

    settings = RenderSettings(
        input=clip, output=work / "three.mp4", sources=(source,), quiet=True, chunk_frames=4
    )
    report = work / "three.json"
    given = []
    code = ray_runner.render_with_ray(
        [settings], address="auto", workers=3, report_path=report,
        on_dispatch=lambda actor, task: given.append(actor),
    )  # fmt: skip
    assert code == 0
    job = json.loads(report.read_text())["jobs"][0]
    assert job["segments"] == {"total": 4, "reused": 0, "rendered": 4} and job["retries"] == 0
    assert len(given) == 4 and len(set(given)) <= 2 and len(job["workers"]) <= 2
    assert len(decode_all(settings.output)[0]) == 16

    monkeypatch.setattr(ray_runner, "plan_pool", lambda ray, workers: (1, {"num_cpus": 64}, 1))
    with pytest.raises(FfbatchError, match="no Ray worker started within 2 s"):  # not a hang
        ray_runner.render_with_ray(
            [replace(settings, output=work / "never.mp4")], address="auto", start_timeout=2
        )
    assert not (work / "never.mp4").exists()


@pytest.mark.slow
def test_ray_writes_a_local_renders_matte_and_face_layer(work, clip, source, local_ray):
    """Two segments on two actors, each writing its share of an FFV1 matte video and an EXR
    face-layer sequence into the work directory; after the join they are the local render's
    (decoded pixels, pts), and only the outputs are left."""
    from facefusion_batch.farm.ray_runner import render_with_ray

    runs = {}
    for name in ("local", "ray"):
        folder = work / f"compositing {name}"
        folder.mkdir()
        runs[name] = RenderSettings(
            input=clip,
            output=folder / "out.mp4",
            sources=(source,),
            encoder=EncoderSettings(crf=0),
            matte_output=folder / "matte.mkv",
            face_only_output=folder / "face.%04d.exr",
            quiet=True,
        )
    render(runs["local"])
    assert render_with_ray([replace(runs["ray"], chunk_frames=8)], address="auto", workers=2) == 0
    numbers = range(1001, 1017)
    folder = runs["ray"].output.parent
    faces = [f"face.{n}.exr" for n in numbers]
    assert sorted(p.name for p in folder.iterdir()) == sorted(["out.mp4", "matte.mkv", *faces])
    got, pts = decoded(runs["ray"].matte_output, "gray")
    want, want_pts = decoded(runs["local"].matte_output, "gray")
    assert pts == want_pts and len(got) == 16 and all(a.any() for a in got[8:])
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    layers = [sequence(run.output.parent, "face", numbers, "gbrapf32le") for run in runs.values()]
    assert all(np.array_equal(a, b) for a, b in zip(*layers, strict=True))


@pytest.mark.slow
def test_ray_writes_each_inputs_compositing_outputs_from_templates(work, clip, source, local_ray):
    """Several inputs on Ray (`--output-dir`) with templated compositing paths: each input's
    matte video and face-layer sequence are its local single-input render's; run again, all up
    to date."""
    from facefusion_batch.farm.jobs import run_render_command

    photo = cv2.resize(cv2.imread(str(asset_path("t1.jpg"))), (640, 443), interpolation=cv2.INTER_AREA)
    second = make_clip(work / "second.mp4", image=photo[:, ::-1].copy(), size=(320, 240), frames=10)
    folder = work / "templated"
    (folder / "out").mkdir(parents=True)
    base = RenderSettings(
        input=clip,
        output=folder / "unused.mp4",
        sources=(source,),
        encoder=EncoderSettings(crf=0),
        matte_output=folder / "{stem}.matte.mkv",
        face_only_output=folder / "{stem}.face.%04d.png",
        quiet=True,
    )
    local = {}
    for path in (clip, second):
        own = folder / f"local {path.stem}"
        own.mkdir()
        job = replace(
            base,
            input=path,
            output=own / "out.mp4",
            matte_output=own / "m.mkv",
            face_only_output=own / "f.%04d.png",
        )
        render(job)
        local[path.stem] = job

    def run() -> int:
        return run_render_command(
            replace(base, chunk_frames=8), [clip, second], output=None, output_dir=folder / "out",
            output_pattern="{stem}-swapped{ext}", frames=None, ray="auto", ray_workers=2,
        )  # fmt: skip

    assert run() == 0
    for stem, count in (("in", 16), ("second", 10)):
        got, pts = decoded(folder / f"{stem}.matte.mkv", "gray")
        want, want_pts = decoded(local[stem].matte_output, "gray")
        assert pts == want_pts and len(got) == count
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
        numbers = range(1001, 1001 + count)
        own = local[stem].output.parent
        layers = [sequence(folder, f"{stem}.face", numbers, "rgba"), sequence(own, "f", numbers, "rgba")]
        assert all(np.array_equal(a, b) for a, b in zip(*layers, strict=True))
    written = {p: p.stat().st_mtime_ns for p in folder.glob("*.*")}
    assert run() == 0 and {p: p.stat().st_mtime_ns for p in written} == written


@pytest.fixture
def ffbatch_logger():
    """`main()` sets up the ffbatch logger for a terminal; put it back for the tests after this one."""
    import logging

    logger = logging.getLogger("ffbatch")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.mark.slow
def test_ray_from_the_command_line_with_many_inputs(work, clip, source, local_ray, capsys, ffbatch_logger):
    from facefusion_batch.cli import main

    broken = work / "broken.mp4"
    broken.write_bytes(b"\0" * 100)
    out_dir = work / "ray outputs"
    out_dir.mkdir()
    args = ["render", str(clip), str(broken), "-s", str(source), "--output-dir", str(out_dir)]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--ray", "auto", "--ray-workers", "1", "--chunk-frames", "10", "-q"])
    assert exit_.value.code == 2  # the broken input failed, the other one is there
    assert capsys.readouterr().out.splitlines() == [str(out_dir / "in-swapped.mp4")]
    frames, _ = decode_all(out_dir / "in-swapped.mp4")
    assert len(frames) == 16


def test_actors_load_their_models_under_the_drivers_device_settings(monkeypatch, clip, source):
    """--backend/--streams/--max-batch/--precision are part of the settings an actor gets (it is
    another process: nothing else of the driver's reaches it)."""
    from facefusion_batch.farm.ray_runner import SegmentWorker, on_actor_gpu
    from facefusion_batch.pipeline import build
    from facefusion_batch.runtime.device import DeviceSettings
    from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCpuBackend

    seen = []

    def select(device, *, threads=None):
        seen.append(device)
        return OnnxRuntimeCpuBackend(threads)

    monkeypatch.setattr(build, "select_backend", select)
    device = DeviceSettings(backend="cuda", streams=3, max_batch=24, precision="fp16", gpu=1)
    settings = RenderSettings(input=clip, output=clip.with_name("x.mp4"), sources=(source,), device=device)
    worker = SegmentWorker(on_actor_gpu(settings), 1)
    expected = DeviceSettings(backend="cuda", streams=3, max_batch=24, precision="fp16", gpu=0)
    assert seen == [expected]  # the actor's one GPU is its device 0
    # a segment whose settings the loaded models do not serve (another reference face) reloads
    worker.render(replace(on_actor_gpu(settings), faces="one"), 0, 4, str(clip.with_name("seg.mp4")), {})
    assert seen == [expected, expected]
    # auto, chosen as the CPU on a driver without a GPU, renders on the cluster's GPUs
    auto = replace(settings, device=DeviceSettings(auto=True))
    assert on_actor_gpu(auto).device.backend == "cuda"
    assert on_actor_gpu(replace(settings, device=DeviceSettings())).device.backend == "cpu"
