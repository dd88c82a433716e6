"""Checksums of what the CPU path renders, recorded before a refactor and checked after it.

`cases()` names each case: the pipeline settings and the frames it renders. Each case is
rendered twice: with every frame on its own ("output", recorded before the refactor, so it
still holds the rewrite over kernel sets to the old pixels) and with the default face tracks
("tracked": landmark smoothing and the per-track decision change pixels, deliberately). Frames come from
the demo clip's camera path over t1.jpg (examples/make_inputs.py: `render_frame`, no encoder
involved), the source is astronaut.png. `python tests/golden.py record [CASE ...]` writes
tests/data/golden_cpu.json; tests/test_golden_cpu.py renders every case again and compares.

The file also keeps, under `render_revisions`, the fingerprint of every case's checksums per
RENDER_REVISION (facefusion_batch/__init__.py) they were recorded at: `record` refuses to
change the checksums without a bump of the revision, and the test fails when they were changed
by hand without one.

Beside the checksums, `record` writes reference statistics of the same frames
(tests/data/golden_cpu_blocks.npz.xz, ~160 KB): per 16 x 16 block, the sum of the rendered
frame's difference from its input frame in each channel and the sum of its absolute values
(exact integers; 0 where the swap left the block alone), and the demo frames' own 40 x 40 block
means. Where a checksum differs (another machine's float rounding), `input_drift` and
`compare_blocks` tell a rounding drift from a change of output without storing the frames.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "data" / "golden_cpu.json"
REVISIONS = "render_revisions"  # the goldens file's key beside the cases: revision -> fingerprint
BLOCKS = HERE / "data" / "golden_cpu_blocks.npz.xz"
BLOCK = 16  # px: the side of the blocks the reference statistics are taken over
INPUT_BLOCK = 40  # px: the same for the demo frames' own block means (720 and 1280 are multiples)
INPUT_LEVELS = 0.5  # the most a demo frame's block mean may move by rounding
# A rounding drift (levels): each block's mean moved at most MAX_LEVELS (and each pixel where the
# recording is the input), their mean over the swapped blocks at most MEAN_LEVELS; how these were
# chosen: docs/development.md, Goldens
MAX_LEVELS, MEAN_LEVELS = 4, 0.04
DEMO_SECONDS, DEMO_FPS, DEMO_SIZE = 10.0, 25, (1280, 720)


@dataclass(frozen=True)
class Case:
    name: str
    frames: tuple[int, ...]  # demo-clip frame numbers, rendered as one batch
    swap: dict  # ClassicalSettings fields, or for a learned case LearnedSettings fields
    faces: str = "many"
    learned: bool = False  # FaceFusion stand-ins (tests/standins.py) instead of the classical swap
    legacy: bool = True  # the classical defaults of before the swap-quality work (LEGACY)


# The classical defaults the pre-refactor checksums were recorded with; the "defaults" case
# renders today's (the source's eyes, the target's inner mouth, tighter local colour).
LEGACY = {
    "eyes_mouth": "target",
    "shading_scale": 0.25,
    "shading_limit": (30.0, 6.0, 6.0),
    "shape": 0.0,
    "mirror_fill": False,
    "match_sharpness": False,
    "match_grain": False,
    "feather": 0.25,
}


def cases() -> list[Case]:
    every_30 = tuple(range(0, 250, 30))
    two = (0, 125)
    return [
        Case("default", every_30, {}),
        Case("feather", two, {"blend": "feather"}),
        Case("poisson", two, {"blend": "poisson"}),
        Case("global", two, {"colour": "global"}),
        Case("colour-none", two, {"colour": "none"}),
        Case("eyes-mouth-source", two, {"eyes_mouth": "source"}),
        Case("faces-one", two, {}, faces="one"),
        Case("defaults", every_30, {}, legacy=False),
        Case("inswapper", two, {"swapper_model": "inswapper_128"}, learned=True),
        Case(
            "hyperswap-masks-boost-weight",
            two,
            {
                "swapper_model": "hyperswap_1a_256",
                "pixel_boost": 512,
                "weight": 0.3,
                "masks": {"types": ("box", "occlusion", "region"), "padding": (5, 0, 10, 0)},
            },
            learned=True,
        ),
        Case(
            "inswapper-gfpgan",
            two,
            {"swapper_model": "inswapper_128", "enhancer_model": "gfpgan_1.4", "enhancer_blend": 60},
            learned=True,
        ),
    ]


def demo_frames(numbers: tuple[int, ...]) -> list[np.ndarray]:
    sys.path.insert(0, str(HERE.parent / "examples"))
    from make_inputs import render_frame  # noqa: PLC0415

    from facefusion_batch.models.assets import asset_path
    from facefusion_batch.video.pictures.stills import read_image

    photo = read_image(asset_path("t1.jpg"))
    return [render_frame(photo, i / DEMO_FPS, DEMO_SECONDS, DEMO_SIZE) for i in numbers]


def digest(frames: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for f in frames:
        h.update(np.ascontiguousarray(f).tobytes())
    return h.hexdigest()


def block_stats(frame: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Per BLOCK x BLOCK block of `frame - base`: each channel's sum and the sum of the absolute
    values over the channels, int32 of shape (rows, cols, 4)."""
    h, w, c = frame.shape
    if h % BLOCK or w % BLOCK or c != 3:
        raise ValueError(f"a golden frame is {w}x{h}x{c}: not 3 channels in whole {BLOCK}-px blocks")
    d = (frame.astype(np.int32) - base.astype(np.int32)).reshape(h // BLOCK, BLOCK, w // BLOCK, BLOCK, 3)
    return np.concatenate([d.sum(axis=(1, 3)), np.abs(d).sum(axis=(1, 3, 4))[..., None]], axis=2)


@dataclass(frozen=True)
class Drift:
    """How far rendered frames are from the recorded ones, in levels (0-255)."""

    worst_pixel: int  # the largest |difference| where the recording equals the input (known exactly)
    worst_block: float  # the largest change of a block's mean difference or mean |difference|
    mean: float  # the mean change of those over the blocks the swap touched, then or now
    where: str  # the frame and block of the worst block

    @property
    def within_rounding(self) -> bool:
        return self.worst_pixel <= MAX_LEVELS and self.worst_block <= MAX_LEVELS and self.mean <= MEAN_LEVELS

    def __str__(self) -> str:
        return (
            f"largest pixel change outside the swapped blocks {self.worst_pixel}, largest change of a "
            f"block's mean {self.worst_block:.3f} ({self.where}), mean over the swapped blocks "
            f"{self.mean:.4f}; a rounding drift keeps them within {MAX_LEVELS}, {MAX_LEVELS} and "
            f"{MEAN_LEVELS}"
        )


def compare_blocks(
    recorded: np.ndarray, frames: list[np.ndarray], inputs: list[np.ndarray], numbers: tuple[int, ...]
) -> Drift:
    """`frames` (rendered from `inputs`, demo frames `numbers`) against the recorded statistics.

    Where the recording's block is untouched (all its sums 0) the recorded pixels are the input's,
    so those are compared pixel by pixel. Elsewhere the change of each block's mean difference
    (per channel) and mean |difference| is taken, at most and on average over the blocks the
    swap touched then or now: a rounding drift moves single pixels along edges, far at times, but
    hardly moves a block's mean."""
    worst_pixel, worst_block, where, changes = 0, 0.0, "-", []
    for number, frame, base, ref in zip(numbers, frames, inputs, recorded, strict=True):
        now = block_stats(frame, base)
        untouched = ~ref.any(axis=2)
        if untouched.any():
            rows, cols = np.nonzero(untouched)
            d = np.abs(frame.astype(np.int16) - base.astype(np.int16))
            d = d.reshape(ref.shape[0], BLOCK, ref.shape[1], BLOCK, 3)[rows, :, cols]
            worst_pixel = max(worst_pixel, int(d.max()))
        # per block: |change of the mean difference| per channel (sums over BLOCK² pixels) and of
        # the mean |difference| (sums over 3 BLOCK² values)
        change = np.abs(now - ref) / np.array([BLOCK**2] * 3 + [3 * BLOCK**2], np.float64)
        touched = ref.any(axis=2) | now.any(axis=2)
        changes.append(change[touched])
        if change.size and change.max() > worst_block:
            r, c, _ = np.unravel_index(int(change.argmax()), change.shape)
            worst_block, where = float(change.max()), f"frame {number}, block at x={c * BLOCK} y={r * BLOCK}"
    touched_changes = np.concatenate(changes) if changes else np.zeros((0, 4))
    mean = float(touched_changes.mean()) if touched_changes.size else 0.0
    return Drift(worst_pixel, worst_block, mean, where)


def input_means(frame: np.ndarray) -> np.ndarray:
    """The mean of each INPUT_BLOCK x INPUT_BLOCK block and channel of a demo frame, in 1/16 levels."""
    h, w, c = frame.shape
    blocks = frame.reshape(h // INPUT_BLOCK, INPUT_BLOCK, w // INPUT_BLOCK, INPUT_BLOCK, c)
    return np.round(blocks.mean(axis=(1, 3)) * 16).astype(np.uint16)


def input_drift(recorded: dict[int, np.ndarray], inputs: list[np.ndarray], numbers: tuple[int, ...]) -> float:
    """The largest change of a block mean of the demo frames `numbers`, in levels."""
    return max(
        float(np.abs(input_means(f).astype(np.int32) - recorded[n]).max()) / 16
        for n, f in zip(numbers, inputs, strict=True)
    )


@dataclass
class References:
    """What tests/data/golden_cpu_blocks.npz.xz holds."""

    frames: dict[str, tuple[str, np.ndarray]]  # "case/kind" -> (its checksum, each frame's block_stats)
    inputs: dict[int, np.ndarray]  # demo frame number -> its input_means


def pack_blocks(refs: References) -> bytes:
    """The reference file's bytes: each distinct frame's statistics once, xz-compressed."""
    rows: list[np.ndarray] = []
    seen: dict[bytes, int] = {}
    index: dict[str, dict] = {}
    for key, (checksum, frames) in refs.frames.items():
        at = []
        for stats in frames:
            k = stats.tobytes()
            if k not in seen:
                seen[k] = len(rows)
                rows.append(stats)
            at.append(seen[k])
        index[key] = {"rows": at, "checksum": checksum}
    numbers = sorted(refs.inputs)
    buf = io.BytesIO()
    np.savez(
        buf,
        blocks=np.stack(rows).astype(np.int32),
        index=np.array(json.dumps(index, sort_keys=True)),
        input_numbers=np.array(numbers, np.int32),
        input_means=np.stack([refs.inputs[n] for n in numbers]),
    )
    return lzma.compress(buf.getvalue(), preset=9)


def load_blocks(path: Path = BLOCKS) -> References:
    with np.load(io.BytesIO(lzma.decompress(path.read_bytes()))) as data:
        blocks, index = data["blocks"], json.loads(str(data["index"]))
        inputs = dict(zip(map(int, data["input_numbers"]), data["input_means"], strict=True))
    return References({key: (e["checksum"], blocks[e["rows"]]) for key, e in index.items()}, inputs)


def swap_settings(case: Case):
    from facefusion_batch.config import SwapSettings
    from facefusion_batch.swap.classical.settings import ClassicalSettings
    from facefusion_batch.swap.learned import LearnedSettings
    from facefusion_batch.swap.masks import MaskSettings

    if not case.learned:
        classical = ClassicalSettings(**({**LEGACY, **case.swap} if case.legacy else case.swap))
        return SwapSettings(swapper="classical", classical=classical)
    fields = dict(case.swap)
    fields["masks"] = MaskSettings(**fields.get("masks", {}))
    return SwapSettings(swapper="learned", learned=LearnedSettings(**fields))


def render_case(case: Case, models, source: Path, tracking="default") -> list[np.ndarray]:
    """The frames the CPU path renders for `case` (`tracking`: the default, or None for every
    frame on its own, as before faces were tracked)."""
    from facefusion_batch.faces.track import TrackSettings

    tracking = TrackSettings() if tracking == "default" else tracking
    from facefusion_batch.kernels.host import HostKernels
    from facefusion_batch.pipeline.build import build_pipeline

    pipeline = build_pipeline(models, (source,), swap_settings(case), case.faces, tracking=tracking)
    return pipeline(HostKernels(), demo_frames(case.frames)).frames


def load_case_models(standin_dir: Path | None):
    """The default models (classical cases) or the stand-ins in `standin_dir` (learned ones)."""
    from facefusion_batch.pipeline.build import load_models

    return load_models("cpu", threads=2, models_dir=standin_dir)


def checksums_fingerprint(recorded: dict) -> str:
    """sha256 of every case's checksums (the revisions key left out): what a bump stands for."""
    cases_only = {k: v for k, v in recorded.items() if k != REVISIONS}
    return hashlib.sha256(json.dumps(cases_only, sort_keys=True).encode()).hexdigest()


def with_revision(recorded: dict, revision: int) -> dict:
    """`recorded` with its fingerprint under `revision`; ValueError when the checksums changed
    and the revision was not bumped (or a revision already stands for other checksums)."""
    revisions = dict(recorded.get(REVISIONS, {}))
    fingerprint = checksums_fingerprint(recorded)
    held = revisions.get(str(revision))
    if held is not None and held != fingerprint:
        raise ValueError(
            f"the golden checksums changed but RENDER_REVISION is still {revision}: bump it in "
            "facefusion_batch/__init__.py (and say what changed in CHANGELOG.md), then record again"
        )
    if revisions and revision < max(map(int, revisions)):
        raise ValueError(f"RENDER_REVISION {revision} is older than the goldens' {max(map(int, revisions))}")
    revisions[str(revision)] = fingerprint
    return {**{k: v for k, v in recorded.items() if k != REVISIONS}, REVISIONS: revisions}


def record(names: list[str] | None = None) -> tuple[dict[str, dict[str, str]], bytes]:
    """Render and digest every case, or only `names` (the others keep their recording): the
    goldens file's content and the reference statistics file's."""
    import os
    import tempfile

    from facefusion_batch import paths
    from facefusion_batch.models.assets import asset_path

    sys.path.insert(0, str(HERE))
    import standins  # noqa: PLC0415

    source = asset_path("astronaut.png")
    home = Path(tempfile.mkdtemp())
    standins.copy_store(paths.ffbatch_home(), home / "home")
    os.environ["FFBATCH_HOME"] = str(home / "home")
    standin_dir = standins.write_standins(home / "standins")
    models = {False: load_case_models(None), True: load_case_models(standin_dir)}
    previous = json.loads(GOLDEN.read_text())
    out = dict(previous) if names else {REVISIONS: previous.get(REVISIONS, {})}
    refs = load_blocks() if names and BLOCKS.exists() else References({}, {})
    for case in cases():
        if names and case.name not in names:
            continue
        inputs = demo_frames(case.frames)
        # "output": every frame on its own, what the pipeline rendered before faces were tracked
        rendered = {
            "output": render_case(case, models[case.learned], source, tracking=None),
            "tracked": render_case(case, models[case.learned], source),
        }
        out[case.name] = {"input": digest(inputs), **{k: digest(v) for k, v in rendered.items()}}
        for kind, frames in rendered.items():
            stats = [block_stats(f, b) for f, b in zip(frames, inputs, strict=True)]
            refs.frames[f"{case.name}/{kind}"] = (out[case.name][kind], np.stack(stats))
        refs.inputs.update({n: input_means(f) for n, f in zip(case.frames, inputs, strict=True)})
        print(case.name, out[case.name]["output"][:16], flush=True)
    from facefusion_batch import RENDER_REVISION

    return with_revision(out, RENDER_REVISION), pack_blocks(refs)


if __name__ == "__main__" and sys.argv[1:2] == ["record"]:
    recorded, blocks = record(sys.argv[2:])
    GOLDEN.write_text(json.dumps(recorded, indent=2) + "\n")
    BLOCKS.write_bytes(blocks)
