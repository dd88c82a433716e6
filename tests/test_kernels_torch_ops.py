"""The torch kernel set's operations (device="cpu") against the host set's: the kernels' contract.

Stated tolerances (0–255 scale):
- colour conversion I420/NV12 → BGR (BT.601 limited, cv2's convention): max 1 (OpenCV rounds in
  fixed point); other matrices/ranges: against the float formula, max 1;
- resize INTER_AREA / INTER_LINEAR (float): max 1e-3; letterbox: max 1 (uint8 rounding);
- warpAffine (uint8 crops): max 1, mean 0.5; remap (float, OpenCV quantises coordinates to
  1/32 px): mean 0.3, max 6;
- GaussianBlur, pyrDown, pyrUp, multiband blend, masked blur, the shutter's line blur (float):
  max 1e-2;
- 8-bit LAB: max 2 and mean 0.2 levels each way; colour transfer: mean 1.0, 99th percentile 4;
- paste-back of a crop: max 1, mean 0.05.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from facefusion_batch.kernels import torch_ops as D  # noqa: E402

rng = np.random.default_rng(7)


def smooth(h, w, c=3):
    """A smooth random picture (natural images are smooth; noise would only test rounding)."""
    base = rng.uniform(0, 255, (h // 8 + 2, w // 8 + 2, c)).astype(np.float32)
    return np.clip(cv2.resize(base, (w, h), interpolation=cv2.INTER_CUBIC), 0, 255)


def chw(a):
    return torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1)


def hwc(t):
    return t.permute(1, 2, 0).numpy()


def diff(a, b):
    return np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))


@pytest.fixture(scope="module")
def i420():
    h, w = 90, 160
    bgr = np.clip(smooth(h, w) + rng.normal(0, 8, (h, w, 3)), 0, 255).astype(np.uint8)
    return bgr, cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)


def test_yuv420p_and_nv12_match_opencv(i420):
    _, packed = i420
    h, w = 90, 160
    y, u, v = D.i420_planes(torch.from_numpy(packed)[None], h, w)
    got = D.yuv420p_to_bgr(y, u, v)[0].numpy()
    assert diff(got, cv2.cvtColor(packed, cv2.COLOR_YUV2BGR_I420)).max() <= 1
    uv = torch.stack([u, v], dim=-1)
    nv12 = np.concatenate([packed[:h], uv[0].numpy().reshape(h // 2, w)], axis=0)
    got = D.nv12_to_bgr(y, uv)[0].numpy()
    assert diff(got, cv2.cvtColor(nv12, cv2.COLOR_YUV2BGR_NV12)).max() <= 1


@pytest.mark.parametrize("matrix", ["bt601", "bt709", "bt2020"])
@pytest.mark.parametrize("full_range", [False, True])
def test_yuv_matrices_round_trip(matrix, full_range):
    # encode BGR with the standard's forward matrix, decode on the "device"
    kr, kb = D.YUV_MATRICES[matrix]
    bgr = smooth(32, 48)
    r, g, b = bgr[..., 2] / 255, bgr[..., 1] / 255, bgr[..., 0] / 255
    yy = kr * r + (1 - kr - kb) * g + kb * b
    cb, cr = (b - yy) / (2 * (1 - kb)), (r - yy) / (2 * (1 - kr))
    if full_range:
        planes = yy * 255, cb * 255 + 128, cr * 255 + 128
    else:
        planes = yy * 219 + 16, cb * 224 + 128, cr * 224 + 128
    y8, cb8, cr8 = (torch.from_numpy(np.round(p).astype(np.float32))[None] for p in planes)
    got = D.ycbcr_to_bgr(y8, cb8, cr8, matrix, full_range)[0].numpy()
    assert diff(got, np.round(bgr)).max() <= 2  # 8-bit YCbCr quantisation, then rounding


@pytest.mark.parametrize("size", [(90, 160), (77, 131), (400, 700)])
def test_resize_area_and_linear_match_opencv(size):
    img = smooth(270, 480)
    t = chw(img)
    area = cv2.resize(img, size[::-1], interpolation=cv2.INTER_AREA)
    linear = cv2.resize(img, size[::-1], interpolation=cv2.INTER_LINEAR)
    assert diff(hwc(D.resize_area(t, size)), area).max() <= 1e-3
    assert diff(hwc(D.resize_linear(t, size)), linear).max() <= 1e-3


@pytest.mark.parametrize("shape", [(1080, 1920), (270, 480), (500, 375)])
def test_letterbox_matches_the_detector(shape):
    from facefusion_batch.kernels.host_ops import letterbox

    frames = np.stack([smooth(*shape).astype(np.uint8) for _ in range(2)])
    got, scales = D.letterbox(torch.from_numpy(frames), 640)
    ref, ref_scales = letterbox(list(frames), 640)
    assert got.shape == ref.shape
    assert diff(got.numpy(), ref).max() <= 1
    np.testing.assert_allclose(scales, ref_scales)


def test_warp_affine_crops_match_opencv():
    from facefusion_batch.faces.mesh import roi_affines

    frames = np.stack([smooth(200, 300).astype(np.uint8) for _ in range(2)])
    frame_index = np.array([0, 1, 1])
    affines = roi_affines(
        np.array([[150.0, 100.0], [100.0, 80.0], [250.0, 190.0]]),  # the last crop runs off the frame
        np.array([120.0, 80.0, 90.0]),
        np.array([0.2, -0.5, 1.0]),
    )
    ref = np.stack(
        [
            cv2.warpAffine(frames[f], m, (192, 192), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
            for f, m in zip(frame_index, affines, strict=True)
        ]
    )
    got = D.warp_affine(torch.from_numpy(frames), frame_index, torch.from_numpy(affines), (192, 192))
    got = np.round(got.permute(0, 2, 3, 1).numpy())
    d = diff(got, ref)
    assert d.max() <= 1 and d.mean() <= 0.5


def test_remap_matches_opencv():
    tex = smooth(100, 80, 5)
    mx = rng.uniform(-5, 85, (60, 70)).astype(np.float32)
    my = rng.uniform(-5, 105, (60, 70)).astype(np.float32)
    ref = cv2.remap(tex, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    got = hwc(D.remap(chw(tex), torch.from_numpy(mx), torch.from_numpy(my)))
    d = diff(got, ref)
    assert d.mean() <= 0.3 and d.max() <= 6


@pytest.mark.parametrize("sigma", [1.0, 2.5, 7.0, 30.0])
def test_gaussian_blur_matches_opencv(sigma):
    img = smooth(60, 90)
    got = hwc(D.gaussian_blur(chw(img), sigma))
    assert diff(got, cv2.GaussianBlur(img, (0, 0), sigma)).max() <= 1e-2


def test_shutter_streaks_match_opencv():
    """Each face's own line kernel (base.streak_kernel) in one grouped convolution is
    cv2.filter2D's, border reflect-101; a face without a streak is left as it is, bit for bit."""
    from facefusion_batch.kernels.base import streak_kernel

    own = np.random.default_rng(11)  # not the module's draws: the tests after this one keep theirs
    coarse = own.uniform(0, 255, (3, 8, 10, 3)).astype(np.float32)
    faces = np.stack([cv2.resize(c, (64, 48), interpolation=cv2.INTER_CUBIC) for c in coarse])
    streaks = [(9.5, 3.0), (0.0, 0.0), (-2.0, 6.5)]
    got = D.streak_blur_each(torch.from_numpy(faces).permute(0, 3, 1, 2), streaks).permute(0, 2, 3, 1).numpy()
    for face, streak, out in zip(faces, streaks, got, strict=True):
        if streak == (0.0, 0.0):
            assert np.array_equal(out, face)
            continue
        ref = cv2.filter2D(face, -1, streak_kernel(streak), borderType=cv2.BORDER_REFLECT_101)
        assert diff(out, ref).max() <= 1e-2


@pytest.mark.parametrize("shape", [(61, 90), (60, 91), (33, 17)])
def test_pyramids_match_opencv(shape):
    img = smooth(*shape)
    down = cv2.pyrDown(img)
    assert diff(hwc(D.pyr_down(chw(img))), down).max() <= 1e-2
    up = hwc(D.pyr_up(chw(down), shape))
    assert diff(up, cv2.pyrUp(down, dstsize=shape[::-1])).max() <= 1e-2


def test_lab8_matches_opencv_both_ways():
    img = smooth(50, 60).astype(np.uint8)
    lab = cv2.cvtColor(img, cv2.COLOR_BGR2LAB)
    got = np.floor(hwc(D.bgr_to_lab8(chw(img.astype(np.float32)))) + 0.5)
    d = diff(got, lab)
    assert d.max() <= 2 and d.mean() <= 0.2
    back = cv2.cvtColor(lab, cv2.COLOR_LAB2BGR)
    got = np.clip(np.floor(hwc(D.lab8_to_bgr(chw(lab.astype(np.float32)))) + 0.5), 0, 255)
    d = diff(got, back)
    assert d.max() <= 2 and d.mean() <= 0.2


@pytest.fixture(scope="module")
def face_region():
    mask = np.zeros((120, 100), bool)
    mask[20:100, 15:85] = True
    return smooth(120, 100), smooth(120, 100), mask


@pytest.mark.parametrize("sigma", [2.0, 9.0, 20.0])
def test_masked_blur_matches_host(face_region, sigma):
    from facefusion_batch.kernels.host_ops import masked_blur

    img, _, mask = face_region
    got = hwc(D.masked_blur(chw(img), torch.from_numpy(mask), sigma))
    assert diff(got, masked_blur(img, mask, sigma)).max() <= 1e-2


@pytest.mark.parametrize(("mode", "sigma"), [("global", 9.0), ("local", 9.0), ("local", 30.0)])
def test_colour_transfer_matches_host(face_region, mode, sigma):
    """30: the shading's and the tint's blurs both run downscaled."""
    from facefusion_batch.kernels.host_ops import transfer_colour

    target, swapped, mask = face_region
    ref = transfer_colour(swapped, target, mask, 1.0, mode, sigma)
    got = D.transfer_colour(chw(swapped), chw(target), torch.from_numpy(mask), 1.0, mode, sigma)
    d = diff(np.clip(np.floor(hwc(got) + 0.5), 0, 255), ref)
    assert d.mean() <= 1.0 and np.percentile(d, 99) <= 4


def test_colour_transfer_without_skin_keeps_the_face(face_region):
    target, swapped, _ = face_region
    none = torch.zeros(target.shape[:2], dtype=torch.bool)
    got = D.transfer_colour(chw(swapped), chw(target), none, 1.0, "local", 9.0)
    np.testing.assert_array_equal(hwc(got), swapped)


def test_the_inset_ramp_is_the_hosts_and_falls_to_zero_on_the_covered_edge():
    from facefusion_batch.kernels.host_ops import inset_ramp

    covered = np.zeros((3, 40, 50), bool)
    cv2.ellipse(covered[0].view(np.uint8), (25, 20), (18, 12), 20, 0, 360, 1, -1)
    covered[1, 5:30, :] = True  # a face cut by the region's edge (the frame's): full weight there
    covered[2, 10:12, 10:40] = True  # thinner than its ramp
    widths = [3, 2, 4]
    got = D.inset_ramp(torch.from_numpy(covered), widths).numpy()
    for f, width in enumerate(widths):
        ref = inset_ramp(covered[f], width)
        np.testing.assert_array_equal(got[f], ref)
        edge = covered[f] & ~cv2.erode(covered[f].astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
        assert (ref[edge] == 0).all() and (ref[~covered[f]] == 0).all()
    assert (got[0][cv2.erode(covered[0].astype(np.uint8), np.ones((7, 7), np.uint8)) > 0] == 1).all()
    assert (got[1][7:28, 0] == 1).all() and got[1][5, 0] == 0  # the cut edge keeps its weight


def test_local_colour_keeps_the_sources_chroma_spread(face_region):
    """`local` matches the lightness spread only: a source's reddish lids are not stretched to a
    target whose a*/b* vary more (its shading brings the target's tint)."""
    from facefusion_batch.kernels.host_ops import transfer_colour

    target, swapped, mask = face_region
    lab = cv2.cvtColor(target.astype(np.uint8), cv2.COLOR_BGR2LAB).astype(np.float32)
    lab[..., 1:] = 128 + (lab[..., 1:] - 128) * 3  # a target with thrice the chroma spread
    vivid = cv2.cvtColor(np.clip(lab, 0, 255).astype(np.uint8), cv2.COLOR_LAB2BGR).astype(np.float32)

    def spread(bgr, mode):
        out = transfer_colour(swapped, vivid, mask, 1.0, mode, 1e4)  # shading flat: only the stats
        moved = cv2.cvtColor(np.clip(out + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB)
        return moved[mask].astype(np.float32).std(axis=0)

    source = cv2.cvtColor(swapped.astype(np.uint8), cv2.COLOR_BGR2LAB)[mask].astype(np.float32).std(axis=0)
    local, global_ = spread(swapped, "local"), spread(swapped, "global")
    assert np.allclose(local[1:], source[1:], rtol=0.15)
    assert (global_[1:] > 1.2 * source[1:]).all()


def test_local_colour_shrinks_the_sources_chroma_spread_on_a_grey_target(face_region):
    """A grey shot (black-and-white, a desaturated grade): the source's tint spread is shrunk to
    the target's, so its red lips and pink cheeks do not stay on a grey face; on both sets."""
    from facefusion_batch.kernels.host_ops import transfer_colour

    target, swapped, mask = face_region
    grey = np.repeat(cv2.cvtColor(target.astype(np.uint8), cv2.COLOR_BGR2GRAY)[..., None], 3, axis=2)
    grey = grey.astype(np.float32)
    source = cv2.cvtColor(swapped.astype(np.uint8), cv2.COLOR_BGR2LAB)[mask].astype(np.float32).std(axis=0)
    assert (source[1:] > 3).all()  # the source has a tint spread to lose
    host = transfer_colour(swapped, grey, mask, 1.0, "local", 1e4)
    device = hwc(D.transfer_colour(chw(swapped), chw(grey), torch.from_numpy(mask), 1.0, "local", 1e4))
    for out in (host, device):
        lab = cv2.cvtColor(np.clip(out + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB)[mask]
        assert (lab.astype(np.float32)[:, 1:].std(axis=0) < 1.0).all()
        assert np.abs(lab[:, 1:].astype(np.float32) - 128).max() <= 3  # grey, within rounding


def _lab_of(bgr: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(np.clip(bgr + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB).astype(np.float32)


def _spotted_skin(spots, radius: float):
    """(target, source, mask, inner): a target skin whose tint drifts gently across it (a*/b*
    ±10 over the face, as a lit face's does: more tint spread than the source's, which local
    colour would shrink to the target's), and an even skin of its mean with smooth spots
    (`spots`: (LAB channel, 8-bit change, y, x), Gaussian of `radius` px) as the source; the
    skin mask and the part of it well inside."""
    h, w = 120, 100
    even = np.full((h, w, 3), (120, 150, 200), np.float32)
    yy, xx = np.mgrid[:h, :w]
    lab = np.broadcast_to(_lab_of(even)[0, 0], (h, w, 3)).copy()
    drift = lab.copy()
    drift[..., 1] += 20 * (xx / (w - 1) - 0.5)
    drift[..., 2] += 20 * (yy / (h - 1) - 0.5)
    target = cv2.cvtColor(np.round(drift).astype(np.uint8), cv2.COLOR_LAB2BGR).astype(np.float32)
    for channel, change, y, x in spots:
        lab[..., channel] += change * np.exp(-((yy - y) ** 2 + (xx - x) ** 2) / (2 * radius**2))
    source = cv2.cvtColor(np.round(lab).astype(np.uint8), cv2.COLOR_LAB2BGR).astype(np.float32)
    mask = np.zeros((h, w), bool)
    mask[10:110, 10:90] = True
    inner = np.zeros((h, w), bool)
    inner[20:100, 20:80] = True
    return target, source, mask, inner


def test_local_colour_holds_the_targets_tint_and_keeps_the_sources_light_detail():
    """A smooth reddish and a yellowish spot of source skin (lids, a flushed cheek) at half the
    shading's scale move toward the target's tint, on both kernel sets; a lighter spot of the
    same size (the source's own shading, which carries its identity) keeps all its contrast."""
    from facefusion_batch.kernels import host_ops
    from facefusion_batch.kernels.base import TINT_LIMIT

    # redder, bluer, lighter
    target, source, mask, inner = _spotted_skin([(1, 14, 40, 35), (2, -12, 75, 55), (0, 30, 80, 30)], 8.0)

    def measure(out):
        got = _lab_of(out)
        tint = host_ops.masked_blur(got - _lab_of(target), mask, 4.5)[..., 1:]  # at the tint's scale
        return np.abs(tint[inner]).max(), got[76:85, 26:35, 0].mean() - got[76:85, 60:69, 0].mean()

    def both(limit):
        host = host_ops.transfer_colour(source, target, mask, 1.0, "local", 9.0, tint_limit=limit)
        device = D.transfer_colour(
            chw(source), chw(target), torch.from_numpy(mask), 1.0, "local", 9.0, tint_limit=limit
        )
        return measure(host), measure(hwc(device))

    held, free = both(TINT_LIMIT), both(float("inf"))  # inf: the tint is not held
    for (tint, light), (tint_free, light_free) in zip(held, free, strict=True):
        assert tint <= TINT_LIMIT + 1.5 and tint <= tint_free - 0.7, (tint, tint_free)
        assert light > 10 and abs(light - light_free) < 0.5, (light, light_free)


def test_a_shade_limit_lifts_a_dark_source_patch_and_leaves_lighter_shading():
    """`shade_limit`: a dark patch of source skin finer than the shading's scale (a goatee, a
    deep-set brow root) is lifted by as much as its local mean at the tint's finer scale is
    more than the limit darker than the target's even skin, on both kernel sets alike; a
    lighter spot keeps all its contrast (one way only); inf leaves the dark patch as it was."""
    from facefusion_batch.kernels import host_ops

    # darker (a goatee) and lighter (a cheekbone's highlight), finer than the shading's scale
    target, source, mask, _ = _spotted_skin([(0, -50, 40, 35), (0, 30, 80, 60)], 5.0)

    def contrast(out):
        got = _lab_of(out)[..., 0]
        deficit = host_ops.masked_blur((_lab_of(target) - _lab_of(out))[..., :1], mask, 4.5)[..., 0]
        return deficit[40, 35], got[40, 35], got[78:83, 58:63].mean() - got[20:30, 65:80].mean()

    def both(limit):
        host = host_ops.transfer_colour(source, target, mask, 1.0, "local", 9.0, shade_limit=limit)
        device = D.transfer_colour(
            chw(source), chw(target), torch.from_numpy(mask), 1.0, "local", 9.0, shade_limit=limit
        )
        assert np.abs(hwc(device) - host).mean() < 1.0
        return contrast(host), contrast(hwc(device))

    held, free = both(6.0), both(float("inf"))
    for (dark, level, light), (dark_free, level_free, light_free) in zip(held, free, strict=True):
        assert dark_free > 10 and dark < dark_free - 2, (dark, dark_free)
        assert abs((level - level_free) - (dark_free - 6.0)) < 1.5, (level, level_free, dark_free)
        assert light > 10 and abs(light - light_free) < 2, (light, light_free)


def test_the_tint_is_held_on_the_ring_round_the_features_and_its_lightness_left():
    """`tinted`: a bluish, dark patch of source skin just beside a feature (an inner eye corner's
    cool shadow), left out of the skin the statistics and the shade limit use, has its tint held
    toward the target's as far as on the skin itself, on both kernel sets (without `tinted` it
    kept its blue: a grey-blue patch on a warm face); its lightness, the source's own socket,
    stays as it was."""
    from facefusion_batch.kernels import host_ops

    target, source, mask, _ = _spotted_skin([(2, -14, 40, 35), (0, -45, 40, 35)], 6.0)
    yy, xx = np.mgrid[: mask.shape[0], : mask.shape[1]]
    ring = (yy - 40) ** 2 + (xx - 35) ** 2 < 12**2
    skin = mask & ~ring

    def measure(out):
        got = _lab_of(out)
        tint = host_ops.masked_blur(got - _lab_of(target), mask, 4.5)[..., 2]  # at the tint's scale
        return np.abs(tint[ring]).max(), got[38:43, 33:38, 0].mean()

    def both(skin, tinted):
        host = host_ops.transfer_colour(source, target, skin, 1.0, "local", 9.0, tinted=tinted)
        device = D.transfer_colour(
            chw(source),
            chw(target),
            torch.from_numpy(skin),
            1.0,
            "local",
            9.0,
            tinted=None if tinted is None else torch.from_numpy(tinted),
        )
        assert np.abs(hwc(device) - host).mean() < 1.0
        return measure(host), measure(hwc(device))

    # the patch on the ring, with and without `tinted`; and on skin (where it is held as before)
    held, left, on_skin = both(skin, mask), both(skin, None), both(mask, None)
    for (blue, light), (blue_left, light_left), (blue_skin, _) in zip(held, left, on_skin, strict=True):
        assert blue < blue_left - 2.5 and abs(blue - blue_skin) < 1.0, (blue, blue_left, blue_skin)
        assert abs(light - light_left) < 1.0, (light, light_left)


def test_local_colour_darkens_a_dark_features_chroma_with_its_lightness():
    """A flat-lit source onto a contrasty target: the lightness stretch (STD_RATIO_RANGE's top,
    1.4) darkens a brown eye of the source, and on both kernel sets its chroma darkens by the
    same share instead of staying (a maroon eye); skin near the mean keeps its chroma."""
    from facefusion_batch.kernels import host_ops
    from facefusion_batch.kernels.base import STD_RATIO_RANGE

    h, w = 120, 100
    yy, xx = np.mgrid[:h, :w]
    spot = np.exp(-((yy - 50) ** 2 + (xx - 50) ** 2) / (2 * 6.0**2))

    def bgr(lab):
        image = np.round(np.clip(lab, 0, 255)).astype(np.uint8)
        return cv2.cvtColor(image, cv2.COLOR_LAB2BGR).astype(np.float32)

    def lab_of(image):
        levels = np.clip(image + 0.5, 0, 255).astype(np.uint8)
        return cv2.cvtColor(levels, cv2.COLOR_BGR2LAB).astype(np.float32)

    skin_lab = np.array([200.0, 137.0, 150.0])
    lab = np.broadcast_to(skin_lab, (h, w, 3)).copy()
    lab[..., 0] += 6 * np.sin(xx / 7.0)  # a little lightness detail
    lab[..., 0] -= 70 * spot  # the eye: darker, as brown as the skin
    lab[..., 1:] += (np.array([147.0, 168.0]) - skin_lab[1:]) * spot[..., None]
    source = bgr(lab)
    target_lab = np.broadcast_to(skin_lab, (h, w, 3)).copy()
    target_lab[..., 0] += 40 * np.sin(yy / 5.0)  # far more lightness spread: the stretch is capped
    target = bgr(target_lab)
    mask = np.ones((h, w), bool)
    mask[spot > 0.05] = False  # the eye is not skin
    sigma = 1e4  # shading flat: only the statistics act

    host = host_ops.transfer_colour(source, target, mask, 1.0, "local", sigma)
    device = hwc(D.transfer_colour(chw(source), chw(target), torch.from_numpy(mask), 1.0, "local", sigma))
    src = lab_of(source)
    for out in (host, device):
        got = lab_of(out)
        eye = spot > 0.9
        light_share = got[eye, 0].mean() / src[eye, 0].mean()
        chroma_share = np.hypot(*(got[eye, 1:] - 128).T).mean() / np.hypot(*(src[eye, 1:] - 128).T).mean()
        assert light_share < 0.85  # the stretch did darken the eye (ratio STD_RATIO_RANGE[1])
        assert abs(chroma_share - light_share) < 0.06, (chroma_share, light_share, STD_RATIO_RANGE)
        skin = spot < 0.01
        assert np.abs(got[skin, 1:].mean(axis=0) - src[skin, 1:].mean(axis=0)).max() < 1.5


def test_feather_and_multiband_match_host(face_region):
    from facefusion_batch.kernels.host_ops import feather, multiband, multiband_weights

    target, face, mask = face_region
    alpha = np.clip(cv2.GaussianBlur(mask.astype(np.float32), (0, 0), 5), 0, 1)
    a = torch.from_numpy(alpha)
    assert diff(hwc(D.feather(chw(target), chw(face), a)), feather(target, face, alpha)).max() <= 1e-3
    assert diff(hwc(D.multiband(chw(target), chw(face), a)), multiband(target, face, alpha)).max() <= 1e-2
    # the matte of a multiband paste: the widest weight any level gives the face
    weights = multiband_weights(alpha)
    assert diff(D.multiband_weights(a).numpy(), weights).max() <= 1e-3
    assert (weights >= alpha - 1e-6).all() and weights.max() <= 1.0 and (weights > alpha + 0.05).any()
