"""Standard output carries only what a script may read (an output's path, a list), one line
at a time; logs go to stderr. The command line's own library (typer) stays in cli.py."""

from __future__ import annotations

import os
import sys


def say(line: str) -> None:
    """`line` on standard output, flushed (a reader sees each output as it is done). A name the
    stream's encoding cannot spell is written as the file system's bytes."""
    stream = sys.stdout
    try:
        stream.write(line + "\n")
    except UnicodeEncodeError:
        stream.flush()
        stream.buffer.write(os.fsencode(line) + b"\n")
    stream.flush()
