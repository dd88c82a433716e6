"""`ffbatch concat --report R --task-report T...`: a farm job's one report, merged at its join.

`ffbatch plan --report R` gives every chunk task its own report (`R`'s stem plus the chunk's
frames) and the join `--report R` with every chunk's report: the join's report holds the
stream copy's numbers, each task's report as it was written (or that it is missing), and the
job's totals (frames in and out, faces found and swapped, the tasks' seconds). Its status is
`ok` only when the join succeeded and every task's report says `ok` or `skipped`
(a finished segment a rerun left alone); else `incomplete` (a report missing or failed) or the
join's own failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from facefusion_batch import __version__
from facefusion_batch.errors import FfbatchError, InputError
from facefusion_batch.farm.concat import JoinReport, concat_command
from facefusion_batch.farm.jobs import command_line, failure_record
from facefusion_batch.fsutil import write_json_atomically

_SUMMED = ("frames_in", "frames_out", "faces_found", "faces_swapped", "wall_seconds")
# counts by name (faces not swapped by reason, swapped faces by the swap's decision)
COUNTED = ("faces_not_swapped", "swap_decisions")
_FINISHED = ("ok", "skipped")


def read_task_report(path: Path) -> dict[str, Any]:
    """A chunk task's report, or what is wrong with it (`status: missing`)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {"report": str(path), "status": "missing", "message": "no report: the task did not run"}
    except (OSError, ValueError) as exc:
        return {"report": str(path), "status": "missing", "message": f"unreadable: {exc}"}
    if not isinstance(data, dict):
        return {"report": str(path), "status": "missing", "message": "not a report (no JSON object)"}
    return {"report": str(path), **data}


def summed_counts(reports: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Each of COUNTED summed over `reports` by name (names sorted; a report without one adds nothing)."""
    out: dict[str, dict[str, int]] = {}
    for key in COUNTED:
        total: dict[str, int] = {}
        for report in reports:
            counts = report.get(key)
            for name, n in (counts.items() if isinstance(counts, dict) else ()):
                if isinstance(n, int):
                    total[name] = total.get(name, 0) + n
        out[key] = dict(sorted(total.items()))
    return out


def merged_report(
    output: Path, join: JoinReport | None, tasks: list[Path], failure: dict[str, str] | None = None
) -> dict[str, Any]:
    entries = [read_task_report(t) for t in tasks]
    totals: dict[str, Any] = {}
    for key in _SUMMED:
        values = [e.get(key) for e in entries]
        known = [v for v in values if isinstance(v, int | float)]
        totals[key] = round(sum(known), 3) if key == "wall_seconds" else sum(known)
    unfinished = [e["report"] for e in entries if e.get("status") not in _FINISHED]
    if failure is not None:
        state = failure
    elif unfinished:
        state = {"status": "incomplete", "message": f"{len(unfinished)} task(s) without an ok report"}
    else:
        state = {"status": "ok"}
    record: dict[str, Any] = {
        "output": str(output),
        **state,
        **totals,
        **summed_counts(entries),
        "tasks": entries,
        "unfinished_tasks": unfinished,
        "ffbatch": __version__,
        "command": command_line(),
    }
    if join is not None:
        record["join"] = {
            "segments": join.segments,
            "packets": join.packets,
            "audio_packets": join.audio_packets,
            "seconds": round(join.seconds, 3),
            "bytes": join.bytes,
        }
    return record


def concat_with_report(
    segments: list[Path],
    output: Path,
    *,
    audio_from: Path | None,
    overwrite: bool,
    clean: bool,
    report: Path | None,
    task_reports: list[Path],
) -> JoinReport:
    """`ffbatch concat`, writing `report` (merged with `task_reports`) whether the join succeeds
    or fails."""
    if task_reports and report is None:
        raise InputError("--task-report is merged into --report: give --report too")
    try:
        join = concat_command(segments, output, audio_from=audio_from, overwrite=overwrite, clean=clean)
    except (Exception, KeyboardInterrupt) as exc:
        if report is not None:
            record = merged_report(output, None, task_reports, failure_record(exc))
            try:
                write_json_atomically(report, record)
            except (FfbatchError, OSError):
                pass  # the join's own error is the one shown
        raise
    if report is not None:
        write_json_atomically(report, merged_report(output, join, task_reports))
    return join
