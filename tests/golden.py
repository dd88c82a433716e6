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
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "data" / "golden_cpu.json"
REVISIONS = "render_revisions"  # the goldens file's key beside the cases: revision -> fingerprint
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
    from facefusion_batch.video.stills import read_image

    photo = read_image(asset_path("t1.jpg"))
    return [render_frame(photo, i / DEMO_FPS, DEMO_SECONDS, DEMO_SIZE) for i in numbers]


def digest(frames: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for f in frames:
        h.update(np.ascontiguousarray(f).tobytes())
    return h.hexdigest()


def swap_settings(case: Case):
    from facefusion_batch.config import SwapSettings
    from facefusion_batch.swap.classical import ClassicalSettings
    from facefusion_batch.swap.learned import LearnedSettings
    from facefusion_batch.swap.masks import MaskSettings

    if not case.learned:
        return ClassicalSettings(**({**LEGACY, **case.swap} if case.legacy else case.swap))
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


def record(names: list[str] | None = None) -> dict[str, dict[str, str]]:
    """Render and digest every case, or only `names` (the others keep their recording)."""
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
    for case in cases():
        if names and case.name not in names:
            continue
        out[case.name] = {
            "input": digest(demo_frames(case.frames)),
            # every frame on its own: what the pipeline rendered before faces were tracked
            "output": digest(render_case(case, models[case.learned], source, tracking=None)),
            "tracked": digest(render_case(case, models[case.learned], source)),
        }
        print(case.name, out[case.name]["output"][:16], flush=True)
    from facefusion_batch import RENDER_REVISION

    return with_revision(out, RENDER_REVISION)


if __name__ == "__main__" and sys.argv[1:2] == ["record"]:
    GOLDEN.write_text(json.dumps(record(sys.argv[2:]), indent=2) + "\n")
