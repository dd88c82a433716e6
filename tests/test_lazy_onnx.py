"""onnx is imported at its first use (facefusion_batch/lazy.py): it is half the CLI's start-up,
and a usage error, `--help` or a classical render with verified model files never needs it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from media import make_clip

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import sys
    from facefusion_batch import cli

    def ran(argv):
        try:
            cli.main(argv)
        except SystemExit as exit_:
            return exit_.code
        return 0

    def onnx_loaded():  # the lazy module is in sys.modules from the start; its C part only once loaded
        return "onnx.onnx_cpp2py_export" in sys.modules

    assert ran(["--help"]) == 0 and not onnx_loaded()
    assert ran(["render", "nothing.mp4", "-s", sys.argv[2], "-o", sys.argv[3]]) == 2 and not onnx_loaded()
    assert ran(["render", sys.argv[1], "-s", sys.argv[2], "-o", sys.argv[3], "-q"]) == 0, "the render failed"
    assert not onnx_loaded(), "a classical render imported onnx"
    from facefusion_batch.models import convert, store
    graph = convert.onnx.load(str(store.model_path("yunet_2023mar")), load_external_data=False)
    assert graph.graph.input and onnx_loaded()  # and it loads where it is used
    print("ok")
    """
)


@pytest.mark.slow  # a child interpreter and a render: 5-10 s on 2 cores
def test_the_cli_and_a_classical_render_never_import_onnx(tmp_path, astronaut_path, t1_small):
    clip = make_clip(tmp_path / "in.mp4", image=t1_small[:442], size=(640, 442), frames=2, audio=None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(clip), str(astronaut_path), str(tmp_path / "out.mp4")],
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr
    assert (tmp_path / "out.mp4").stat().st_size > 0
