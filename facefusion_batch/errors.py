"""Errors that carry their exit status, so the CLI can map them without guessing.

Exit codes follow the farm contract: 0 done, 1 internal error, 2 bad input or
usage, 129 hung up (SIGHUP), 130 interrupted (SIGINT), 143 terminated (SIGTERM); 131 (SIGQUIT)
and 138 (SIGUSR1, a scheduler's warning before its kill) are 128 + the signal too.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_HANGUP = 129
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class FfbatchError(Exception):
    """Base class: a message meant for the user, and an exit code."""

    exit_code = EXIT_INTERNAL


class InputError(FfbatchError):
    """Bad input file, bad argument or bad settings: the user can fix it."""

    exit_code = EXIT_USAGE


class NoFaceError(InputError):
    """A source image in which no face was found."""


class ModelError(FfbatchError):
    """A model file is missing, corrupt, unreachable or has the wrong signature."""

    exit_code = EXIT_USAGE


class BackendUnavailableError(InputError):
    """The requested backend cannot run here (no NVIDIA GPU, no TensorRT, ...)."""


class OutputError(FfbatchError):
    """The output cannot be written (directory missing, disk full, ...)."""

    exit_code = EXIT_USAGE


class Interrupted(FfbatchError):
    """The job was stopped by a signal; partial output was removed."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str = "interrupted", exit_code: int = EXIT_INTERRUPTED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# The one registry of signals: every signal the handlers below turned into an exception, newest
# last. One handler set (`signal_handlers`) for the whole run, installed by the CLI before any
# model loads (or by a job run as a library); the frame loop and the job's start look here for a
# signal whose exception Python or a library swallowed.
_received: list[Interrupted] = []
_EXITS = {
    "SIGINT": EXIT_INTERRUPTED,
    "SIGTERM": EXIT_TERMINATED,
    "SIGHUP": EXIT_HANGUP,
    "SIGQUIT": 131,
    "SIGUSR1": 138,
}


# The signal stopping the run (the first one), kept from the handlers' installation until they are
# put back; while it is set, or once the process's run is over, a further signal ends the process at
# once (`_end_now`) instead of unwinding the clean-up a second time (it aborted: status -6).
_stopping: list[Interrupted] = []
_run_over = False
_last_cleanups: list[Callable[[], None]] = []


def at_abrupt_exit(cleanup: Callable[[], None]) -> None:
    """Run `cleanup` (removing temporary and lock files) when a second signal ends the process
    without unwinding; it must be quick and must not raise."""
    if cleanup not in _last_cleanups:
        _last_cleanups.append(cleanup)


def _end_now(first: Interrupted, why: str) -> None:
    """A second signal: the files `at_abrupt_exit` knows go, one line, and the first signal's
    status, without waiting for worker threads or running finalizers."""
    for cleanup in _last_cleanups:
        with contextlib.suppress(Exception):
            cleanup()
    with contextlib.suppress(Exception):
        if sys.stderr is not None:
            sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.write(2, f"ffbatch: error: {first}; stopped at once ({why})\n".encode())
    os._exit(first.exit_code)


def note_signal(stop: Interrupted) -> Interrupted:
    """Remember a signal a handler is about to raise as `stop` (see `signal_behind`)."""
    _received.append(stop)
    return stop


def swallowed_signal() -> Interrupted | None:
    """The newest signal the CLI's handlers raised in this run, if any: a job about to start with
    one noted never saw it unwind (it landed where an exception is dropped or caught: a
    finalizer, a library's broad `except` while the models load), and must stop now."""
    return _received[-1] if _received else None


def forget_signals() -> None:
    """A new run in the same process (a test calling the CLI again) starts with none noted."""
    _received.clear()


def signal_behind(exc: BaseException) -> Interrupted | None:
    """The signal an unexpected exception really is: a SIGTERM or SIGINT that lands while a C
    extension initialises (a lazy `import onnxruntime`) comes out as ImportError("initialization
    failed"); found in the exception's chain, else in what the handlers noted."""
    for link in exception_chain(exc):
        if isinstance(link, Interrupted):
            return link
    return swallowed_signal()


def exception_chain(exc: BaseException) -> list[BaseException]:
    """`exc` and every exception behind it (`__cause__` and `__context__`, both followed), each
    once: a chain may loop back on itself (a library re-raising an exception it caught, or code
    that sets `__context__`), and a walk that trusts it to end never would."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        link = todo.pop(0)
        if id(link) in seen:
            continue
        seen.add(id(link))
        chain.append(link)
        todo.extend(e for e in (link.__cause__, link.__context__) if e is not None)
    return chain


def signal_error(signum: int) -> Interrupted:
    """SIGINT → exit 130, SIGTERM → 143, SIGHUP (the terminal or the ssh session went away) → 129."""
    name = signal.Signals(signum).name
    what = {"SIGINT": "interrupted", "SIGHUP": "hung up", "SIGQUIT": "quit"}.get(name, "terminated")
    return Interrupted(f"{what} ({name})", exit_code=_EXITS.get(name, EXIT_TERMINATED))


def _on_signal(signum: int, frame: Any) -> None:
    """The handler of every signal the run owns: noted, then raised (Ctrl-C as Python has it,
    KeyboardInterrupt, so that writers say the partial output was removed)."""
    stop = signal_error(signum)
    if _stopping:
        _end_now(_stopping[0], f"a second signal, {signal.Signals(signum).name}")
    if _run_over:
        _end_now(stop, "the run had ended")
    _stopping.append(stop)
    note_signal(stop)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise stop


def _signals_to_own() -> list[signal.Signals]:
    owned = [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1]
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_signal):  # not ignored (nohup, &)
        owned.append(signal.SIGINT)
    return owned


@contextmanager
def signal_handlers(process: bool = False) -> Iterator[None]:
    """Own SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGUSR1 for the block (on the main thread;
    elsewhere, or when they are owned already, nothing changes): each unwinds like Ctrl-C, with
    exit 128 + the signal, so no .lock or .partial is left; a second signal ends the process at
    once (`_end_now`), with the first one's status.
    Python drops an exception raised while a finalizer or a weakref callback runs; those are
    kept quiet here, the registry has them. The previous handlers come back afterwards, unless
    the block is the `process`'s whole run: then the handlers stay, and any signal while the
    interpreter winds down (joining worker threads) ends it at once too."""
    global _run_over
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is _on_signal
    ):
        yield
        return
    _stopping.clear()
    _run_over = False
    previous: dict[signal.Signals, Callable | int | None] = {}
    previous_hook = sys.unraisablehook

    def unraisable(info: Any) -> None:
        if not isinstance(info.exc_value, KeyboardInterrupt | Interrupted):
            previous_hook(info)

    try:
        for signum in _signals_to_own():
            previous[signum] = signal.getsignal(signum)
            signal.signal(signum, _on_signal)
        sys.unraisablehook = unraisable
        yield
    finally:
        sys.unraisablehook = previous_hook
        if process:
            _run_over = True
        else:
            _stopping.clear()
            for signum, handler in previous.items():
                if handler is not None:  # None: set outside Python, cannot be put back
                    signal.signal(signum, handler)


def raise_if_signalled() -> None:
    """Raise a noted signal whose exception never unwound (swallowed by a finalizer or a
    library's broad `except`): SIGINT as KeyboardInterrupt, the others as their Interrupted."""
    noted = swallowed_signal()
    if noted is None:
        return
    if noted.exit_code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    raise noted


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the choice closest to a mistyped `word`, or '' when none is close."""
    choices = list(choices)
    # two letters swapped (libx246) first: difflib scores libx265 as close as libx264
    close = [c for c in choices if sorted(c) == sorted(word)] or difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""
