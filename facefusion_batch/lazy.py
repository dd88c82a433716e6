"""Third-party modules loaded on first use (the standard library's LazyLoader recipe).

`onnx` costs about half a second to import, half the CLI's start-up, and a usage error, `--help`
or a render whose model files are already verified never touch it: the modules that rewrite or
check ONNX graphs bind it with `module("onnx")` and the import happens at their first `onnx.`
attribute. Type checkers see the real module (`if TYPE_CHECKING: import onnx`).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def module(name: str) -> ModuleType:
    """`name` as a module that is imported when an attribute of it is first read (at once if it
    is imported already)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    lazy = importlib.util.module_from_spec(spec)
    sys.modules[name] = lazy
    loader.exec_module(lazy)
    return lazy
