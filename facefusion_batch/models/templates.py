"""Five-point alignment templates (model facts: which crop each model was trained on), and the
closed-form similarity that maps faces onto them.

The fit is the least-squares 4-degree-of-freedom similarity (rotation, uniform scale,
translation; Umeyama's solution in 2-D, which cannot reflect), solved for all faces at once.
"""

from __future__ import annotations

import numpy as np

# Normalised five-point templates (right eye, left eye, nose tip, right and left mouth
# corner, image-left first); multiply by the crop size.
TEMPLATES: dict[str, np.ndarray] = {
    # InsightFace's frontal 112-px template (its face_align "src3"):
    # (39.730, 51.138) (72.270, 51.138) (56.000, 68.493) (42.463, 87.010) (69.537, 87.010) / 112,
    # to FaceFusion's 8 decimals (the alignment then matches its estimate bit for bit)
    "arcface_112_v1": np.array(
        [
            [0.35473214, 0.45658929],
            [0.64526786, 0.45658929],
            [0.50000000, 0.61154464],
            [0.37913393, 0.77687500],
            [0.62086607, 0.77687500],
        ]
    ),
    # ArcFace's 112-px template (the 96x112 one shifted by 8 px)
    "arcface_112_v2": np.array(
        [
            [0.34191607, 0.46157411],
            [0.65653393, 0.45983393],
            [0.50022500, 0.64050536],
            [0.37097589, 0.82469196],
            [0.63151696, 0.82325089],
        ]
    ),
    "arcface_128": np.array(
        [
            [0.36167656, 0.40387734],
            [0.63696719, 0.40235469],
            [0.50019687, 0.56044219],
            [0.38710391, 0.72160547],
            [0.61507734, 0.72034453],
        ]
    ),
    "ffhq_512": np.array(
        [
            [0.37691676, 0.46864664],
            [0.62285697, 0.46912813],
            [0.50123859, 0.61331904],
            [0.39308822, 0.72541100],
            [0.61150205, 0.72490465],
        ]
    ),
    # FaceFusion's mtcnn_512 (hififace_unofficial_256's crop)
    "mtcnn_512": np.array(
        [
            [0.36562865, 0.46733799],
            [0.63305391, 0.46585885],
            [0.50019127, 0.61942959],
            [0.39032951, 0.77598822],
            [0.61178945, 0.77476328],
        ]
    ),
    # dlib's face chip (get_face_chip, 150 px, padding 0.25) as seen by the five-point detector:
    # measured on dlib's own chips of eight test faces, made left-right symmetric
    "dlib_150": np.array(
        [
            [0.32650, 0.29390],
            [0.67350, 0.29390],
            [0.50000, 0.50125],
            [0.34500, 0.66590],
            [0.65500, 0.66590],
        ]
    ),
}


def template_points(template: str, size: int) -> np.ndarray:
    try:
        return TEMPLATES[template] * float(size)
    except KeyError:
        raise ValueError(f"unknown alignment template {template!r} (known: {', '.join(TEMPLATES)})") from None


def similarity_fit(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """[F,2,3] similarities mapping each src[F,K,2] onto dst ([K,2] or [F,K,2]) in least squares.

    With x = src - mean(src), y = dst - mean(dst): a = Σ x·y / Σ|x|², b = Σ x×y / Σ|x|²
    gives the rotation-and-scale [[a, -b], [b, a]]; the translation maps the means.
    """
    src = np.asarray(src, np.float64)
    dst = np.broadcast_to(np.asarray(dst, np.float64), src.shape)
    src_mean = src.mean(axis=1, keepdims=True)
    dst_mean = dst.mean(axis=1, keepdims=True)
    x = src - src_mean
    y = dst - dst_mean
    norm = np.maximum((x**2).sum(axis=(1, 2)), 1e-12)
    a = (x * y).sum(axis=(1, 2)) / norm
    b = (x[..., 0] * y[..., 1] - x[..., 1] * y[..., 0]).sum(axis=1) / norm
    m = np.empty((len(src), 2, 3), np.float64)
    m[:, 0, 0], m[:, 0, 1] = a, -b
    m[:, 1, 0], m[:, 1, 1] = b, a
    m[:, :, 2] = dst_mean[:, 0] - np.einsum("fij,fj->fi", m[:, :, :2], src_mean[:, 0])
    return m


def template_to_template(src: str, src_size: int, dst: str, dst_size: int) -> np.ndarray:
    """[2,3] similarity from a crop aligned to `src` to one aligned to `dst` (re-cropping a crop)."""
    return similarity_fit(template_points(src, src_size)[None], template_points(dst, dst_size))[0]
