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
