"""Do no harm for a face in profile (swap/classical/fit.py `far_eye_hidden`, `profile_holds`): how
much more of one eye than of the other its own face hides, measured on its mesh; such a face is
painted at reduced strength, on both kernel sets alike, and from half its far eye it is left
exactly as it came and counted as not swapped."""

from __future__ import annotations

from dataclasses import replace

import hostk
import numpy as np
import pytest

from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.pipeline.build import prepare_sources
from facefusion_batch.swap.classical import fit
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.stage import ClassicalSwapper

HOST = HostKernels()


@pytest.fixture(scope="module")
def swapper(models, astronaut_path):
    settings = ClassicalSettings()
    return ClassicalSwapper(
        prepare_sources(models, (astronaut_path,), settings), models.triangles, models.regions, settings
    )


def painted(k, swapper, image, table, strength: float) -> tuple[np.ndarray, np.ndarray]:
    """`image` with every face of `table` painted at `strength`, and the paste's matte."""
    frames = k.upload([image])
    frames.mattes = {}
    regions = [replace(r, strength=strength) for r in swapper.regions(table, frames.sizes)]
    k.paint_faces(frames, regions, swapper.textures_for(k), swapper.settings.paint)
    matte = frames.mattes[0]
    return np.asarray(k.download(frames)[0]).astype(np.float64), np.asarray(matte, np.float64)


def test_half_strength_lies_halfway_on_both_kernel_sets(swapper, t1_image, t1_faces):
    full, full_matte = painted(HOST, swapper, t1_image, t1_faces, 1.0)
    half, half_matte = painted(HOST, swapper, t1_image, t1_faces, 0.5)
    none, _ = painted(HOST, swapper, t1_image, t1_faces, 0.0)
    image = t1_image.astype(np.float64)
    changed = np.abs(full - image).max(axis=2) > 8
    assert changed.sum() > 5000  # the swap did paint
    # halfway up to rounding, but where two faces' regions overlap (the second paints over the
    # first's half) or the full paint clipped at 0 or 255
    off = np.abs(half - (image + full) / 2)[changed]
    assert np.mean(off <= 1.0) > 0.99 and np.median(off) <= 0.5, np.percentile(off, [50, 99, 100])
    assert np.array_equal(none, image)  # none of it: the frame's own bits
    np.testing.assert_allclose(half_matte, full_matte * 0.5, atol=1e-6)

    torch = pytest.importorskip("torch")
    from facefusion_batch.kernels.torch_kernels import TorchKernels

    on_torch = TorchKernels(torch.device("cpu"))
    torch_half, torch_matte = painted(on_torch, swapper, t1_image, t1_faces, 0.5)
    torch_full, torch_full_matte = painted(on_torch, swapper, t1_image, t1_faces, 1.0)
    assert np.abs(torch_half - half)[changed].mean() < 0.5
    off = np.abs(torch_half - (image + torch_full) / 2)[changed]
    assert np.mean(off <= 1.0) > 0.99 and np.median(off) <= 0.5, np.percentile(off, [50, 99, 100])
    np.testing.assert_allclose(torch_matte, torch_full_matte * 0.5, atol=1e-6)


def turned(mesh: np.ndarray, degrees: float, bowed: float = 0.0) -> np.ndarray:
    """`mesh` turned about its own vertical axis by `degrees` and bowed (chin down) by `bowed`
    degrees (the eye line levelled first), as the mesh model's depth has it (smaller nearer the
    camera)."""
    m = mesh.astype(np.float64) - mesh.mean(axis=0)
    angle = -eye_frame(mesh)[0]
    roll = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    t, b = np.radians(degrees), np.radians(bowed)
    yaw = np.array([[np.cos(t), 0, np.sin(t)], [0, 1, 0], [-np.sin(t), 0, np.cos(t)]])
    pitch = np.array([[1, 0, 0], [0, np.cos(b), -np.sin(b)], [0, np.sin(b), np.cos(b)]])
    return m @ roll.T @ yaw.T @ pitch.T


def test_a_turning_face_hides_more_and_more_of_its_far_eye(models, t1_faces):
    """t1's frontal faces hide none of either eye; the same meshes turned about their vertical
    axis hide more and more of the far eye and none of the near one, over half of it at 70°
    (further on the far eye falls outside the face's outline, where nothing covers it: the mesh
    model draws no such face). Bowed instead, a face hides its two eyes alike under its brows:
    that is no profile."""
    surface = np.ascontiguousarray(models.triangles, np.int32)
    regions = models.regions
    yaws = np.abs([eye_frame(m)[2] for m in t1_faces.mesh])
    frontal = [m for m, y in zip(t1_faces.mesh, yaws, strict=True) if y < 0.05]
    assert len(frontal) >= 2
    for mesh in frontal:
        assert fit.far_eye_hidden(mesh, surface, regions) == 0.0
        far = [fit.hidden_share(turned(mesh, d), surface, regions.right_eye) for d in (0, 20, 40, 55, 70)]
        near = [fit.hidden_share(turned(mesh, d), surface, regions.left_eye) for d in (0, 20, 40, 55, 70)]
        assert far == sorted(far) and far[0] == far[1] == 0.0 and far[-1] >= fit.HIDDEN_NONE, far
        assert far[2] > 0.0 and max(near) == 0.0, (far, near)
        assert fit.far_eye_hidden(turned(mesh, 70), surface, regions) >= fit.HIDDEN_NONE
        # bowed, the brows hide the two eyes alike: no profile, however far (0 turn, 15-45°)
        for bowed in (15, 30, 45):
            assert fit.far_eye_hidden(turned(mesh, 0, bowed), surface, regions) <= fit.HIDDEN_FROM, bowed


@pytest.mark.parametrize("eyes_mouth", ["eyes", "target", "source"])
def test_a_face_in_profile_is_left_as_it_came(models, astronaut_path, t1_image, monkeypatch, eyes_mouth):
    """t1's most turned face (Matt, 0.43 of the yaw proxy) hides a quarter of his far eye at most,
    where the default span starts; the others less. With the span moved to end at his share he is
    in full profile: his pixels keep the frame's own bits, the others are swapped, and the report
    counts him as not swapped, by reason; whichever eyes and mouth the swap paints."""
    frame = HOST.upload([t1_image])
    table = models.mesh(HOST, frame, models.detector(HOST, frame))
    surface = np.ascontiguousarray(models.triangles, np.int32)
    hidden = np.array([fit.far_eye_hidden(m, surface, models.regions) for m in table.mesh])
    matt = int(np.argmax(hidden))
    second = np.sort(hidden)[-2]
    assert second < hidden[matt] <= fit.HIDDEN_FROM, hidden  # painted whole by default
    monkeypatch.setattr(fit, "HIDDEN_FROM", (second + hidden[matt]) / 2)
    monkeypatch.setattr(fit, "HIDDEN_NONE", hidden[matt])

    result, report = hostk.reported(models, astronaut_path, [t1_image] * 2, eyes_mouth=eyes_mouth)
    assert report.faces_not_swapped.get(fit.NOT_SWAPPED) == 2, report.faces_not_swapped
    assert result.faces_swapped == 10 and sum(report.swap_decisions.values()) == 10, report.swap_decisions
    x0, y0, x1, y1 = (int(v) for v in table.box[matt])
    for out in result.frames:
        assert np.array_equal(out[y0:y1, x0:x1], t1_image[y0:y1, x0:x1])
        for i in set(range(len(table))) - {matt}:
            a, b, c, d = (int(v) for v in table.box[i])
            assert np.abs(out[b:d, a:c].astype(int) - t1_image[b:d, a:c]).mean() > 2, i


def test_a_source_photo_in_profile_is_named_in_the_log(models, t1_image, tmp_path, monkeypatch, caplog):
    """A source photo whose own face hides its far eye as a target in profile does is named in
    a warning: Matt cut out of t1.jpg (t1's most turned face) with the span moved to start below
    the share his crop hides; not with the default span, and never a frontal face."""
    import cv2

    from facefusion_batch.pipeline.build import prepare_sources

    frame = HOST.upload([t1_image])
    table = models.mesh(HOST, frame, models.detector(HOST, frame))
    surface = np.ascontiguousarray(models.triangles, np.int32)
    hidden = np.array([fit.far_eye_hidden(m, surface, models.regions) for m in table.mesh])
    paths = {}
    for name, row in (("matt", int(np.argmax(hidden))), ("frontal", int(np.argmin(hidden)))):
        x0, y0, x1, y1 = (int(v) for v in table.box[row])
        pad = (x1 - x0) // 2
        crop = t1_image[max(0, y0 - pad) : y1 + pad, max(0, x0 - pad) : x1 + pad]
        paths[name] = tmp_path / f"{name}.png"
        cv2.imwrite(str(paths[name]), crop)
    settings = ClassicalSettings()

    def warned(path) -> bool:
        caplog.clear()
        with caplog.at_level("WARNING"):
            prepare_sources(models, (path,), settings)
        return any("the source face is in profile" in r.getMessage() for r in caplog.records)

    crop = HOST.upload([cv2.imread(str(paths["matt"]))])
    mesh = models.mesh(HOST, crop, models.detector(HOST, crop)).mesh[0]
    share = fit.far_eye_hidden(mesh, surface, models.regions)
    assert 0 < share < fit.HIDDEN_FROM
    assert not warned(paths["matt"]) and not warned(paths["frontal"])
    monkeypatch.setattr(fit, "HIDDEN_FROM", share / 2)
    assert warned(paths["matt"]) and not warned(paths["frontal"])
