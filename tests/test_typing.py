"""The package type-checks: mypy (pyproject's [tool.mypy]: strict for the kernel, session, face
table and stage contracts) reports no error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_reports_no_error_on_the_package():
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--hide-error-context"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard: a cold check takes about a minute on 2 cores
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 0 and not errors, "\n".join(errors[:50]) or result.stdout + result.stderr
