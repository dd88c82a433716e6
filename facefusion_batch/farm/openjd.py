"""`ffbatch plan --format openjd`: the plan as an Open Job Description job template (2023-09).

Deadline Cloud and any other OpenJD farm run it as it is (`openjd run`, a Deadline Cloud job
bundle's `template.yaml`). Two steps:

- `Render`: one task per chunk, its task parameter `Chunk` an integer range over the plan's chunk
  tasks (all inputs' chunks, numbered as `plan --format json` numbers them);
- `Join`: depends on `Render` (every chunk done), one task per join (an input's output, then its
  compositing videos), its task parameter `Join` an integer range.

Each task runs an embedded bash script that picks its command by number, as the Slurm plan does,
with the job parameter `Ffbatch` (the command that runs ffbatch on the workers, shell words; the
plan's `--ffbatch` by default) in front. The template is JSON, which every OpenJD parser reads.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from facefusion_batch.errors import InputError

SPECIFICATION = "jobtemplate-2023-09"


def _script(tasks: list[list[str]], first: int, skip: int, what: str) -> str:
    """bash: `script NUMBER FFBATCH` runs task NUMBER (counted from `first`) with the words of
    FFBATCH in place of the plan's first `skip` words."""
    lines = [
        "#!/bin/bash",
        "set -euo pipefail",
        'eval "ffbatch=($2)"  # the Ffbatch job parameter: shell words',
        'case "$1" in',
    ]
    for number, argv in enumerate(tasks, first):
        lines.append(f'  {number}) exec "${{ffbatch[@]}}" {shlex.join(argv[skip:])} ;;')
    lines += [f'  *) echo "ffbatch plan: there is no {what} task $1" >&2; exit 2 ;;', "esac", ""]
    script = "\n".join(lines)
    if "{{" in script or "}}" in script:
        raise InputError(
            "plan --format openjd: a path or option holds '{{' or '}}', which OpenJD reads as an expression"
        )
    return script


def _step(name: str, parameter: str, tasks: list[list[str]], first: int, skip: int) -> dict[str, Any]:
    return {
        "name": name,
        "parameterSpace": {
            "taskParameterDefinitions": [
                {"name": parameter, "type": "INT", "range": f"{first}-{first + len(tasks) - 1}"}
            ]
        },
        "script": {
            "embeddedFiles": [{"name": "Tasks", "type": "TEXT", "data": _script(tasks, first, skip, name)}],
            "actions": {
                "onRun": {
                    "command": "bash",
                    "args": ["{{Task.File.Tasks}}", f"{{{{Task.Param.{parameter}}}}}", "{{Param.Ffbatch}}"],
                }
            },
        },
    }


def to_openjd(plan, summary: str) -> str:
    """`plan` (farm/plan.py's Plan) as an OpenJD job template, JSON text."""
    tasks = plan.tasks()
    chunks = plan.chunk_tasks
    skip = len(plan.command)  # the words of --ffbatch, which the Ffbatch parameter replaces
    join = _step("Join", "Join", tasks[chunks:], chunks, skip)
    join["dependencies"] = [{"dependsOn": "Render"}]
    template = {
        "specificationVersion": SPECIFICATION,
        "name": "ffbatch",
        "description": f"ffbatch plan: {summary}",
        "parameterDefinitions": [
            {
                "name": "Ffbatch",
                "type": "STRING",
                "default": shlex.join(plan.command),
                "description": "The command that runs ffbatch on the workers (shell words), e.g. "
                "/opt/ffbatch/bin/ffbatch",
            }
        ],
        # image sequences have no join: each chunk writes its frames at their final names
        "steps": [_step("Render", "Chunk", tasks[:chunks], 0, skip), *([join] if tasks[chunks:] else [])],
    }
    return json.dumps(template, indent=2) + "\n"
