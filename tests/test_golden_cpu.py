"""The CPU path renders exactly the frames recorded in tests/data/golden_cpu.json.

The untracked checksums were recorded (`python tests/golden.py record`) before the pipeline
was rewritten over kernel sets, so a refactor that changes one pixel of the default swap, a
blend, a colour mode, face selection or a learned stand-in pipeline fails here. The tracked
ones were recorded when face tracks came in. A deliberate change of the output records them
again, in the same commit, saying why.

Where a checksum differs, the frames are compared with the reference statistics recorded with
it (tests/data/golden_cpu_blocks.npz.xz, golden.compare_blocks): within float rounding (another
machine's builds) the case passes with a warning; beyond it, it fails as a change of output.
"""

from __future__ import annotations

import json
import warnings

import golden
import numpy as np
import pytest
import standins


@pytest.fixture(scope="module")
def case_models(tmp_path_factory, monkeypatch_module):
    from facefusion_batch import paths

    home = standins.copy_store(paths.ffbatch_home(), tmp_path_factory.mktemp("home"))
    monkeypatch_module.setenv("FFBATCH_HOME", str(home))
    standin_dir = standins.write_standins(tmp_path_factory.mktemp("standins"))
    return {False: golden.load_case_models(None), True: golden.load_case_models(standin_dir)}


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


RECORDED = json.loads(golden.GOLDEN.read_text())
REFERENCE = golden.load_blocks()


def assert_as_recorded(case: golden.Case, kind: str, frames: list, inputs: list) -> None:
    """`frames` are the recording's to the bit, or differ from it by float rounding only (a warning)."""
    checksum, reference = REFERENCE.frames[f"{case.name}/{kind}"]
    assert checksum == RECORDED[case.name][kind], "the reference statistics are not the checksums' recording"
    drift = golden.compare_blocks(reference, frames, inputs, case.frames)
    if golden.digest(frames) == checksum:
        assert (drift.worst_pixel, drift.worst_block) == (0, 0.0), "statistics not taken from these frames"
        return
    assert drift.within_rounding, (
        f"{case.name} ({kind}): output pixels changed beyond float rounding: {drift}. A change of output "
        "bumps RENDER_REVISION (facefusion_batch/__init__.py), says so in CHANGELOG.md and records again: "
        f"python tests/golden.py record {case.name}"
    )
    warnings.warn(
        f"{case.name} ({kind}): not the recorded checksum, but within float rounding: {drift}", stacklevel=2
    )


@pytest.mark.parametrize("case", golden.cases(), ids=lambda c: c.name)
def test_cpu_output_is_the_recording_or_within_rounding_of_it(case, case_models, astronaut_path):
    inputs = golden.demo_frames(case.frames)
    moved = golden.input_drift(REFERENCE.inputs, inputs, case.frames)
    if golden.digest(inputs) == RECORDED[case.name]["input"]:
        assert moved == 0, "the reference statistics were not taken from these demo frames"
    else:  # another machine's rounding may reach the demo frames too
        assert moved <= golden.INPUT_LEVELS, f"the demo frames themselves changed (a block mean by {moved})"
    untracked = golden.render_case(case, case_models[case.learned], astronaut_path, tracking=None)
    assert_as_recorded(case, "output", untracked, inputs)
    tracked = golden.render_case(case, case_models[case.learned], astronaut_path)
    assert_as_recorded(case, "tracked", tracked, inputs)


def test_a_rounding_drift_passes_the_block_check_and_a_change_of_output_does_not():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)
    face = base.copy()
    face[16:48, 32:80] = rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)  # the swap: 6 blocks
    recorded = golden.block_stats(face, base)[None]
    assert recorded[0].any(axis=2).sum() == 6

    def drift(frame: np.ndarray) -> golden.Drift:
        return golden.compare_blocks(recorded, [frame], [base], (0,))

    assert drift(face) == golden.Drift(0, 0.0, 0.0, "-")
    rounded = face.astype(np.int16)
    rounded[16:48, 32:80] += rng.choice([-1, 0, 0, 0, 0, 1], (32, 48, 3))  # ±1 here and there
    rounded[20, 40] += 40  # an edge pixel on the other side of a threshold
    rounded = np.clip(rounded, 0, 255).astype(np.uint8)
    assert golden.digest([rounded]) != golden.digest([face]) and drift(rounded).within_rounding
    brighter = face.copy()
    brighter[16:48, 32:80] = np.clip(face[16:48, 32:80].astype(np.int16) + 1, 0, 255)  # the face a level up
    assert not drift(brighter).within_rounding and drift(brighter).mean > golden.MEAN_LEVELS
    one_block = face.copy()
    one_block[32:48, 64:80] //= 2  # one block of the face changed
    changed = drift(one_block)
    assert not changed.within_rounding and changed.where == "frame 0, block at x=64 y=32"
    outside = face.copy()
    outside[2, 2] += 5  # a pixel the swap left alone before
    assert drift(outside).worst_pixel == 5 and not drift(outside).within_rounding


def test_the_goldens_were_recorded_at_this_render_revision():
    """Re-recorded goldens (a change of output pixels) without a bump of RENDER_REVISION fail
    here, so a resume or an "up to date" skip never mixes two algorithms' frames."""
    from facefusion_batch import RENDER_REVISION

    revisions = RECORDED[golden.REVISIONS]
    assert max(map(int, revisions)) == RENDER_REVISION
    assert revisions[str(RENDER_REVISION)] == golden.checksums_fingerprint(RECORDED), (
        "the golden checksums changed without a bump of RENDER_REVISION (facefusion_batch/__init__.py)"
    )
    changed = {**RECORDED, "default": {**RECORDED["default"], "tracked": "0" * 64}}
    with pytest.raises(ValueError, match="bump it"):
        golden.with_revision(changed, RENDER_REVISION)  # what `golden.py record` does without a bump
    assert (
        golden.with_revision(changed, RENDER_REVISION + 1)[golden.REVISIONS][str(RENDER_REVISION)]
        == (revisions[str(RENDER_REVISION)])
    )


def test_no_committed_goldens_gave_a_revision_other_checksums():
    """Every committed version of the goldens file that names revisions agrees with this one:
    a revision stands for one set of checksums for good (a hand edit of both is caught here)."""
    import subprocess

    rel = str(golden.GOLDEN.relative_to(golden.HERE.parent))
    try:
        commits = subprocess.run(
            ["git", "log", "--format=%H", "--", rel],
            cwd=golden.HERE,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    revisions = RECORDED[golden.REVISIONS]
    for commit in commits:
        shown = subprocess.run(
            ["git", "show", f"{commit}:{rel}"], cwd=golden.HERE, capture_output=True, text=True
        )
        then = json.loads(shown.stdout) if shown.returncode == 0 else {}
        if golden.REVISIONS not in then:
            continue  # recorded before the revisions
        newest = max(map(int, then[golden.REVISIONS]))
        assert then[golden.REVISIONS][str(newest)] == golden.checksums_fingerprint(then), commit
        for revision, fingerprint in then[golden.REVISIONS].items():
            assert revisions.get(revision) == fingerprint, f"revision {revision} re-used by {commit[:10]}"
