"""The CPU path renders exactly the frames recorded in tests/data/golden_cpu.json.

The untracked checksums were recorded (`python tests/golden.py record`) before the pipeline
was rewritten over kernel sets, so a refactor that changes one pixel of the default swap, a
blend, a colour mode, face selection or a learned stand-in pipeline fails here. The tracked
ones were recorded when face tracks came in. A deliberate change of the output records them
again, in the same commit, saying why.
"""

from __future__ import annotations

import json

import golden
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


@pytest.mark.parametrize("case", golden.cases(), ids=lambda c: c.name)
def test_cpu_output_is_bit_identical_to_the_recording(case, case_models, astronaut_path):
    recorded = RECORDED[case.name]
    frames = golden.demo_frames(case.frames)
    assert golden.digest(frames) == recorded["input"], "the demo frames themselves changed"
    untracked = golden.render_case(case, case_models[case.learned], astronaut_path, tracking=None)
    assert golden.digest(untracked) == recorded["output"]
    tracked = golden.render_case(case, case_models[case.learned], astronaut_path)
    assert golden.digest(tracked) == recorded["tracked"]


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
