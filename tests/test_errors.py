"""The way from an exception to an exit status and a report ends on any exception (issue 38): an
exception chain that loops back on itself once hung a job with --report at full CPU forever."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

from facefusion_batch import errors
from facefusion_batch.errors import Interrupted, exception_chain, signal_behind
from facefusion_batch.farm.jobs import failure_record


def cyclic_error() -> ValueError:
    """A ValueError whose chain loops: its context's context is itself (what a library that
    re-raises a caught exception under another can leave)."""
    first, second = ValueError("damaged around frame 7"), RuntimeError("decoder gave up")
    first.__context__ = second
    second.__cause__ = first
    return first


def finishes(call: Callable[[], object], seconds: float = 10) -> object:
    """call() on a thread: its result, or the test fails after `seconds` (a hang, not a wait)."""
    box: list[object] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{call} did not end in {seconds} s"
    return box[0]


def test_the_chain_walk_ends_on_a_cycle_and_visits_each_exception_once(monkeypatch):
    monkeypatch.setattr(errors, "_received", [])
    exc = cyclic_error()
    chain = finishes(lambda: exception_chain(exc))
    assert [type(e).__name__ for e in chain] == ["ValueError", "RuntimeError"]
    assert finishes(lambda: signal_behind(exc)) is None
    assert finishes(lambda: failure_record(exc))["status"] == "failed"


def test_a_signal_inside_a_cyclic_chain_is_still_found(monkeypatch):
    monkeypatch.setattr(errors, "_received", [])
    exc = cyclic_error()
    stop = Interrupted("terminated (SIGTERM)", exit_code=143)
    exc.__context__.__context__ = stop  # behind the cause: both links are followed
    assert finishes(lambda: signal_behind(exc)) is stop


def test_a_job_failing_with_a_cyclic_chain_writes_its_report_and_exits_1(
    monkeypatch, tmp_path, face_clip, astronaut_path
):
    from facefusion_batch import cli
    from facefusion_batch.pipeline import run

    def loading_fails(*args, **kwargs):
        raise cyclic_error()

    monkeypatch.setattr(run, "load_models", loading_fails)
    out, report = tmp_path / "o.mp4", tmp_path / "r.json"
    argv = ["render", str(face_clip), "-s", str(astronaut_path), "-o", str(out), "-q"]
    argv += ["--report", str(report)]

    def main() -> object:
        with pytest.raises(SystemExit) as ended:
            cli.main(argv)
        return ended.value.code

    assert finishes(main, 60) == 1
    data = json.loads(report.read_text())
    assert data["status"] == "failed" and "damaged around frame 7" in data["message"]
    assert not out.exists()


# -- one signal owner -----------------------------------------------------------------------------

SIGNALS = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129, "SIGQUIT": 131, "SIGUSR1": 138}


@pytest.mark.parametrize("name", sorted(SIGNALS))
@pytest.mark.parametrize("swallowed", [False, True], ids=["raised", "swallowed"])
def test_a_signal_while_the_models_load_ends_the_job_with_its_status_and_no_output(
    name, swallowed, monkeypatch, tmp_path, face_clip, astronaut_path
):
    """The signal is sent from inside loading (no sleeps): the one handler set is already there,
    and the job ends with 130 / 143 / 129, no output, no temporary file, its report 'interrupted'
    — also when a library's broad `except` swallowed the signal's exception."""
    import os
    import signal

    from facefusion_batch import cli
    from facefusion_batch.pipeline import run

    real, owners = run.load_models, []

    def loading_gets_a_signal(*args, **kwargs):
        owned = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
        owners.append({s: signal.getsignal(s) for s in owned})
        try:
            os.kill(os.getpid(), getattr(signal, name))
            for _ in range(1000):  # the handler runs between bytecodes, inside this try
                pass
        except BaseException:
            if not swallowed:
                raise
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "load_models", loading_gets_a_signal)
    out, report = tmp_path / "o.mp4", tmp_path / "r.json"
    with pytest.raises(SystemExit) as ended:
        cli.main(
            [
                "render",
                str(face_clip),
                "-s",
                str(astronaut_path),
                "-o",
                str(out),
                "-q",
                "--report",
                str(report),
            ]
        )
    assert ended.value.code == SIGNALS[name]
    assert all(handler is errors._on_signal for handler in owners[0].values())  # one owner, before loading
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert json.loads(report.read_text())["status"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) is not errors._on_signal  # the caller's handlers are back
    assert errors.swallowed_signal() is None
