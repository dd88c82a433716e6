"""`ffbatch plan --format openjd` (issue 37, item 3): an Open Job Description template that the
`openjd-model` package's own parser accepts, whose render step's integer task space covers the
chunks, whose join step depends on it, and whose every task runs the plan's command for its number
with the Ffbatch job parameter in front."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from media import make_clip
from test_cli import ffbatch_here

openjd = pytest.importorskip("openjd.model")

from openjd.model import (  # noqa: E402
    ParameterValue,
    ParameterValueType,
    StepParameterSpaceIterator,
    create_job,
    decode_job_template,
)

# stands in for ffbatch on the "worker": prints the arguments it was given, as JSON
ECHO = f"{sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("openjd")
    return d, [make_clip(d / "a clip.mp4", frames=5), make_clip(d / "b.mp4", frames=3, audio=None)]


def test_the_template_parses_and_every_task_runs_its_command(clips, astronaut_path):
    d, inputs = clips
    args = [*inputs, "-s", astronaut_path, "--chunk-frames", "2", "--output-dir", d / "out", "--crf", "16"]
    proc = ffbatch_here("plan", *args, "--format", "openjd")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(ffbatch_here("plan", *args, "--format", "json").stdout)
    template = decode_job_template(template=json.loads(proc.stdout))  # the package's own parser
    assert template.parameterDefinitions[0].name == "Ffbatch"
    assert template.parameterDefinitions[0].default == "ffbatch"
    job = create_job(
        job_template=template,
        job_parameter_values={"Ffbatch": ParameterValue(type=ParameterValueType.STRING, value=ECHO)},
    )
    render, join = job.steps
    assert [d.dependsOn for d in join.dependencies] == ["Render"]
    chunks = [c for j in plan["jobs"] for c in j["chunks"]]
    joins = [j["join"] for j in plan["jobs"]]
    assert len(chunks) == 3 + 2 and plan["tasks"] == {"chunks": 5, "joins": 2}
    skip = len(plan["command"])
    for step, name, expected in ((render, "Chunk", chunks), (join, "Join", joins)):
        numbers = [task[name].value for task in StepParameterSpaceIterator(space=step.parameterSpace)]
        assert numbers == [str(t["task"]) for t in expected]
        script = d / f"{step.name}.sh"
        script.write_text(step.script.embeddedFiles[0].data)
        for number, task in zip(numbers, expected, strict=True):
            ran = subprocess.run(["bash", script, number, ECHO], capture_output=True, text=True, check=True)
            assert json.loads(ran.stdout) == task["argv"][skip:]
        missing = subprocess.run(["bash", script, "99", ECHO], capture_output=True, text=True)
        assert missing.returncode == 2 and "no " in missing.stderr


def test_braces_openjd_would_read_are_refused(tmp_path, astronaut_path):
    clip = make_clip(tmp_path / "{{x}}.mp4", frames=2)
    proc = ffbatch_here("plan", clip, "-s", astronaut_path, "-o", tmp_path / "o.mp4", "--format", "openjd")
    assert proc.returncode == 2 and "OpenJD reads as an expression" in proc.stderr
