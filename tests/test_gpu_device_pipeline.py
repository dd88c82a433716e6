"""The device-resident classical pipeline (what the cuda backend runs) against the host pipeline,
on the CPU, on t1.jpg (six faces). (feather is covered op by op in test_gpu_device_ops.py.)

Tolerances: the same faces are found and swapped; over the whole frames the mean absolute
difference is at most 0.1 levels, the 99.9th percentile at most 6, and at most 0.1% of the
pixels differ by more than 8 (edge pixels of the coverage map, where OpenCV's 1/32-pixel
remap quantisation and the NaN border of the warp map fall differently).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from facefusion_batch.pipeline.build import Models, build_pipeline  # noqa: E402
from facefusion_batch.runtime.device_pipeline import DeviceFaceSwapPipeline, device_pipeline_for  # noqa: E402
from facefusion_batch.runtime.torch_backend import TorchBackend  # noqa: E402
from facefusion_batch.swap.classical import ClassicalSettings  # noqa: E402


@pytest.fixture(scope="module")
def torch_models(models):
    backend = TorchBackend(device="cpu")
    return Models(
        backend=backend,
        detector=type(models.detector)(
            backend.load(models.paths["yunet_2023mar_batch"], label="yunet_2023mar_batch"),
            models.detector.settings,
        ),
        mesh=type(models.mesh)(
            backend.load(models.paths["face_mesh_468"], label="face_mesh_468"), models.mesh.settings
        ),
        triangles=models.triangles,
        regions=models.regions,
        paths=models.paths,
    )


@pytest.mark.parametrize("blend", ["multiband", "poisson"])
def test_device_pipeline_matches_host(models, torch_models, t1_image, astronaut_path, blend):
    frames = [t1_image]
    swap = ClassicalSettings(blend=blend)
    host = build_pipeline(models, (astronaut_path,), swap, "many")
    device = device_pipeline_for(
        build_pipeline(torch_models, (astronaut_path,), swap, "many"), torch_models.backend
    )
    assert isinstance(device, DeviceFaceSwapPipeline)
    a, b = host(frames), device(frames)
    assert (a.faces_found, a.faces_swapped, a.frames_with_faces) == (b.faces_found, b.faces_swapped, 1)
    assert b.faces_swapped >= 5
    for x, y in zip(a.frames, b.frames, strict=True):
        assert x.shape == y.shape and y.dtype == np.uint8
        d = np.abs(x.astype(np.int16) - y.astype(np.int16))
        assert d.mean() <= 0.1
        assert np.percentile(d, 99.9) <= 6
        assert (d.max(axis=-1) > 8).mean() <= 1e-3
    # the input frames are never written to
    assert not np.shares_memory(b.frames[0], frames[0])


def test_device_pipeline_without_faces_returns_frames_unchanged(torch_models, astronaut_path):
    device = device_pipeline_for(
        build_pipeline(torch_models, (astronaut_path,), ClassicalSettings(), "many"), torch_models.backend
    )
    frames = [np.full((90, 160, 3), 127, np.uint8) for _ in range(3)]
    result = device(frames)
    assert result.faces_found == 0 and len(result.frames) == 3
    for f in result.frames:
        np.testing.assert_array_equal(f, frames[0])
    stages = device.timer.seconds
    assert {"upload", "detect", "download"} <= set(stages)


def test_the_hook_keeps_the_host_pipeline_on_the_cpu_and_wraps_it_on_a_device(
    models, torch_models, astronaut_path
):
    from facefusion_batch.runtime.backends import device_pipeline_for as hook

    host = build_pipeline(models, (astronaut_path,), ClassicalSettings(), "many")
    assert hook(host, models.backend) is host
    wrapped = hook(
        build_pipeline(torch_models, (astronaut_path,), ClassicalSettings(), "many"), torch_models.backend
    )
    assert isinstance(wrapped, DeviceFaceSwapPipeline)
