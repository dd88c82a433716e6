"""The package's rooms and their arrows (docs/architecture.md), read from the source itself.

Fails when a module imports across a forbidden arrow, when modules import each other in a
cycle, or when a function imports the package itself (allowed only to keep the optional GPU
and cluster packages lazy: torch, TensorRT, Ray).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import facefusion_batch

PACKAGE = Path(facefusion_batch.__file__).resolve().parent
NAME = "facefusion_batch"

# modules that belong to no room: small utilities every room may use
BASE = {"cores", "errors", "fsutil", "lazy", "paths", "timing", "progress", "stdout", "__main__", "_version"}
# room → the rooms it may import (and itself); the base modules are always allowed
ALLOWED: dict[str, set[str]] = {
    # the library face; the package's __init__ re-exports it
    "api": {"config", "settings", "farm", "pipeline"},
    "cli": {"config", "settings", "farm", "tools"},
    "tools": {"farm", "pipeline", "runtime", "models", "video", "config", "settings", "faces", "kernels"},
    "farm": {"pipeline", "video", "config", "settings"},
    "pipeline": {"faces", "swap", "kernels", "runtime", "video", "config", "settings", "models"},
    # the settings types, the option table, their checks, device resolution, output checks
    "settings": {"faces", "swap", "kernels", "runtime", "models", "video"},
    "config": {"settings", "runtime"},  # the settings' old address: a re-export of settings
    "faces": {"kernels", "runtime", "models"},
    "swap": {"faces", "kernels", "runtime", "models"},
    "kernels": {"runtime"},
    "runtime": {"models"},
    "models": set(),
    "video": set(),
}
# the only modules whose functions may import the package: they hold torch-, TensorRT- or
# Ray-backed code that must not load on a machine without them
LAZY_IMPORTERS = {
    "kernels.factory": {"kernels.torch_kernels"},  # the torch set only for a backend with a device
    "runtime.torch_backend": {"runtime.onnx_torch"},  # the ONNX interpreter imports torch
    "__init__": {"api"},  # the library face loads on first use, not with every module of the package
}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = modules()


def room(module: str) -> str:
    head = module.split(".")[0]
    if head == "__main__":  # `python -m facefusion_batch` is the command line
        return "cli"
    if head == "__init__":  # the package's names are the library face's
        return "api"
    return "base" if head in BASE else head


def resolve(name: str) -> str | None:
    """The module of this package that `name` (dotted, without the package) lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> list[tuple[str, bool, int]]:
    """(imported module, inside a function, line) for every import of the package in `module`."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, bool, int]] = []
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    here = module if is_package else module.rpartition(".")[0]
                    for _ in range(child.level - 1):
                        here = here.rpartition(".")[0]
                    base = ".".join(p for p in (NAME, here, base) if p)
                names = [f"{base}.{a.name}" for a in child.names] + [base]
            else:
                visit(child, inner)
                continue
            if isinstance(child, ast.ImportFrom) and child.module is None and not child.level:
                continue
            for n in names:
                if n == NAME or n.startswith(NAME + "."):
                    target = resolve(n[len(NAME) + 1 :])
                    if target and target != module:
                        found.append((target, in_function, child.lineno))
            visit(child, inner)

    visit(tree, False)
    # `from x import a, b` names the module twice (x.a may be a module or a name in x)
    return sorted(set(found))


GRAPH = {m: imports(m) for m in MODULES}


def test_every_import_follows_an_allowed_arrow():
    wrong = []
    for module, targets in GRAPH.items():
        mine = room(module)
        for target, _, line in targets:
            theirs = room(target)
            if theirs in ("base", mine) or mine == "base" and target.split(".")[0] in BASE:
                continue
            if mine == "base" or theirs not in ALLOWED[mine]:
                wrong.append(f"{module}:{line} → {target} ({mine} → {theirs})")
    assert not wrong, "imports across forbidden arrows:\n" + "\n".join(wrong)


def test_no_import_cycles():
    graph = {m: {t for t, _, _ in targets} for m, targets in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in graph:
        if v not in index:
            strongconnect(v)
    assert not cycles, f"modules that import each other in a cycle: {cycles}"


def test_functions_import_the_package_only_to_keep_gpu_and_cluster_packages_lazy():
    inner = defaultdict(list)
    for module, targets in GRAPH.items():
        for target, in_function, line in targets:
            if in_function and target not in LAZY_IMPORTERS.get(module, set()):
                inner[module].append(f"{target} (line {line})")
    assert not inner, "imports of the package inside functions:\n" + "\n".join(
        f"{m}: {', '.join(t)}" for m, t in sorted(inner.items())
    )


def test_the_rooms_are_the_ones_the_architecture_names():
    rooms = {room(m) for m in MODULES} - {"base"}
    assert rooms == set(ALLOWED), rooms ^ set(ALLOWED)


# modules that may import the command-line library: the command line alone (the option table,
# settings/options.py, is plain data that cli.py turns into typer's parameters)
TYPER_IMPORTERS = {"cli"}


def test_only_the_command_line_imports_typer():
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if any(n.split(".")[0] in ("typer", "click") for n in names) and module not in TYPER_IMPORTERS:
                found.append(f"{module}:{node.lineno}")
    assert not found, "typer or click imported outside cli.py: " + ", ".join(found)


DOC = PACKAGE.parent / "docs" / "architecture.md"


def doc_rooms() -> dict[str, tuple[str, set[str]]]:
    """docs/architecture.md's rooms table: room → (what it is, the rooms it may import)."""
    rows = {}
    text = DOC.read_text(encoding="utf-8").split("## Rooms and arrows", 1)[1].split("\n## ", 1)[0]
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            name = cells[0].strip("`").removesuffix("/").removesuffix(".py")
            rows[name] = (cells[1], set() if cells[2] == "—" else {r.strip() for r in cells[2].split(",")})
    return rows


def test_the_architecture_doc_draws_every_room_with_its_arrows_and_modules():
    rows = doc_rooms()
    assert set(rows) == set(ALLOWED), set(rows) ^ set(ALLOWED)
    for name, (text, arrows) in rows.items():
        assert arrows == ALLOWED[name], (
            f"{name}: the doc says {sorted(arrows)}, the test {sorted(ALLOWED[name])}"
        )
        folder = PACKAGE / name
        if folder.is_dir():  # a folder's row names each of its modules, those of its subfolders too
            stems = [
                p.parent.name if p.stem == "__init__" else p.stem
                for p in folder.rglob("*.py")
                if p.parent != folder or p.stem != "__init__"
            ]
            unnamed = [m for m in stems if not re.search(rf"(?<![\w/]){m}\b", text)]
            assert not unnamed, f"docs/architecture.md's {name}/ row does not name {unnamed}"


def test_every_module_path_the_architecture_doc_names_exists():
    text = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)+)/?(?:\.py|\.[A-Za-z_]+)?`", text))
    missing = [
        n
        for n in sorted(named)
        if not any((root / f"{n}.py").exists() or (root / n).is_dir() for root in (PACKAGE, PACKAGE.parent))
    ]
    assert named and not missing, f"docs/architecture.md names modules that do not exist: {missing}"
