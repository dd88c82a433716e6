"""The 468-point face mesh's topology: tessellation triangles and contour loops.

The data comes from MediaPipe's `face_landmarker.py` (class
`FaceLandmarksConnections`, Apache-2.0), read as text and parsed with `ast`; it
is never imported or executed. `derive_topology` (recipe "face_mesh_topology")
writes it as deterministic JSON::

    {"triangles": [[a, b, c], ...],                  # 852 triangles
     "contours": {"lips": [[a, b], ...], ...},       # edge lists
     "n_points": 468, "source": "...", "licence": "..."}

Contour names follow MediaPipe, where left/right are the *subject's*:
"left_eye" is around point 263 (image right on a frontal face), "right_eye"
around point 33 (image left).
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .store import model_path

if TYPE_CHECKING:
    from .sources import DeriveContext

N_POINTS = 468
N_TRIANGLES = 852
CLASS_NAME = "FaceLandmarksConnections"
TESSELATION = "FACE_LANDMARKS_TESSELATION"
# JSON contour name -> MediaPipe attribute
CONTOURS: Mapping[str, str] = {
    "lips": "FACE_LANDMARKS_LIPS",
    "left_eye": "FACE_LANDMARKS_LEFT_EYE",
    "right_eye": "FACE_LANDMARKS_RIGHT_EYE",
    "left_eyebrow": "FACE_LANDMARKS_LEFT_EYEBROW",
    "right_eyebrow": "FACE_LANDMARKS_RIGHT_EYEBROW",
    "face_oval": "FACE_LANDMARKS_FACE_OVAL",
}
SOURCE_NOTE = "MediaPipe face_landmarker.py, class FaceLandmarksConnections (parsed, not executed)"
LICENCE_NOTE = "Apache-2.0, Copyright The MediaPipe Authors"
LOOP_NAMES = (
    "lips_outer",
    "lips_inner",
    "left_eye",
    "right_eye",
    "left_eyebrow",
    "right_eyebrow",
    "face_oval",
)


class TopologyError(ValueError):
    """The source file or the JSON does not hold the expected topology."""


# --- parsing ---------------------------------------------------------------------------


def _connection(node: ast.expr, where: str) -> tuple[int, int]:
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Connection"
        and len(node.args) == 2
        and not node.keywords
        and all(isinstance(a, ast.Constant) and type(a.value) is int for a in node.args)
    ):
        raise TopologyError(f"{where}: expected Connection(int, int), found {ast.dump(node)[:80]}")
    a, b = node.args
    assert isinstance(a, ast.Constant) and isinstance(b, ast.Constant)
    assert isinstance(a.value, int) and isinstance(b.value, int)  # checked above
    return int(a.value), int(b.value)


def parse_connections(source: str) -> dict[str, list[tuple[int, int]]]:
    """Every list literal of `Connection(a, b)` assigned in class `FaceLandmarksConnections`."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TopologyError(f"cannot parse the source file: {exc}") from None
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS_NAME), None)
    if cls is None:
        raise TopologyError(f"no class {CLASS_NAME} in the source file")
    found: dict[str, list[tuple[int, int]]] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        elif (
            isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        ):
            target, value = node.targets[0].id, node.value
        else:
            continue
        if isinstance(value, ast.List):
            found[target] = [_connection(e, target) for e in value.elts]
    return found


def topology_from_source(source: str) -> dict[str, Any]:
    """The JSON-ready topology from the text of MediaPipe's face_landmarker.py."""
    conns = parse_connections(source)
    if TESSELATION not in conns:
        raise TopologyError(f"{TESSELATION} not found")
    edges = conns[TESSELATION]
    if len(edges) % 3:
        raise TopologyError(f"{TESSELATION} has {len(edges)} edges, not a multiple of 3")
    triangles = []
    for i in range(0, len(edges), 3):
        (a, b), (b2, c), (c2, a2) = edges[i : i + 3]
        if (b, c, a) != (b2, c2, a2):
            raise TopologyError(f"edges {i}..{i + 2} do not close a triangle: {edges[i : i + 3]}")
        triangles.append([a, b, c])
    contours = {}
    for name, attr in CONTOURS.items():
        if attr not in conns:
            raise TopologyError(f"{attr} not found")
        contours[name] = [list(e) for e in conns[attr]]
    data = {
        "n_points": N_POINTS,
        "triangles": triangles,
        "contours": contours,
        "source": SOURCE_NOTE,
        "licence": LICENCE_NOTE,
    }
    check_topology(data)
    return data


def check_topology(data: Mapping[str, Any]) -> None:
    """Raise `TopologyError` unless `data` is 852 valid triangles and every contour."""
    tris = np.asarray(data.get("triangles", []), dtype=np.int64)
    if tris.shape != (N_TRIANGLES, 3):
        raise TopologyError(f"expected {N_TRIANGLES} triangles, found shape {tris.shape}")
    if tris.min() < 0 or tris.max() >= N_POINTS:
        raise TopologyError(f"triangle index out of range 0..{N_POINTS - 1}")
    if np.any((tris[:, 0] == tris[:, 1]) | (tris[:, 1] == tris[:, 2]) | (tris[:, 0] == tris[:, 2])):
        raise TopologyError("degenerate triangle")
    if len({tuple(sorted(t)) for t in tris.tolist()}) != N_TRIANGLES:
        raise TopologyError("duplicate triangles")
    contours = data.get("contours", {})
    for name in CONTOURS:
        edges = np.asarray(contours.get(name, []), dtype=np.int64)
        if edges.ndim != 2 or edges.shape[0] == 0 or edges.shape[1] != 2:
            raise TopologyError(f"contour {name!r} missing or malformed")
        if edges.min() < 0 or edges.max() >= N_POINTS:
            raise TopologyError(f"contour {name!r} has an index out of range")
    loops = _all_loops({n: np.asarray(contours[n], dtype=np.int32) for n in CONTOURS})
    if set(loops) != set(LOOP_NAMES):
        raise TopologyError(f"expected loops {LOOP_NAMES}, found {sorted(loops)}")


def dumps(data: Mapping[str, Any]) -> bytes:
    """Deterministic JSON bytes (the catalogue pins their sha256)."""
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


# --- loops -----------------------------------------------------------------------------


def _components(edges: np.ndarray) -> list[list[tuple[int, int]]]:
    """Split an edge list into connected components, keeping the file's edge order."""
    parent: dict[int, int] = {}

    def find(v: int) -> int:
        while parent.setdefault(v, v) != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for a, b in edges.tolist():
        parent[find(a)] = find(b)
    groups: dict[int, list[tuple[int, int]]] = {}
    for a, b in edges.tolist():
        groups.setdefault(find(a), []).append((a, b))
    return list(groups.values())


def _walk(edges: list[tuple[int, int]]) -> tuple[list[int], bool]:
    """Order the vertices of a simple path or cycle; returns (vertices, closed)."""
    adj: dict[int, list[int]] = {}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    if any(len(n) > 2 for n in adj.values()):
        raise TopologyError("contour is not a simple path or cycle")
    ends = [v for v, n in adj.items() if len(n) == 1]
    closed = not ends
    if not closed and len(ends) != 2:
        raise TopologyError("contour is not a simple path or cycle")
    start = edges[0][0] if closed else (edges[0][0] if edges[0][0] in ends else ends[0])
    order, prev = [start], None
    while True:
        nxt = [v for v in adj[order[-1]] if v != prev]
        if closed:
            # in a cycle both neighbours of the start are candidates: follow the file's first edge
            nxt = [edges[0][1]] if prev is None else nxt
        if not nxt or (closed and nxt[0] == start):
            break
        prev = order[-1]
        order.append(nxt[0])
    if len(order) != len(adj):
        raise TopologyError("contour is not a simple path or cycle")
    return order, closed


def _loop_of(edges: np.ndarray) -> list[list[int]]:
    """Closed loops of one contour.

    Each connected component that is a cycle is one loop (lips: outer and
    inner; eyes; the face oval). Two open chains drawn in the same direction
    (an eyebrow's upper and lower edges, both running outer to inner) are
    joined into one loop: the first chain, then the second reversed.
    """
    comps = [_walk(c) for c in _components(edges)]
    cycles = [v for v, closed in comps if closed]
    chains = [v for v, closed in comps if not closed]
    if len(chains) == 2:
        cycles.append(chains[0] + chains[1][::-1])
    elif chains:
        raise TopologyError(f"cannot close {len(chains)} open chain(s) into a loop")
    return cycles


def _all_loops(contours: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    loops: dict[str, np.ndarray] = {}
    for name, edges in contours.items():
        found = _loop_of(edges)
        if name == "lips":
            if len(found) != 2:
                raise TopologyError(f"lips: expected outer and inner loops, found {len(found)}")
            # both loops have 20 points: tell them apart by the mouth corners
            # (61/291 on the outer loop, 78/308 on the inner one)
            outer = next((lp for lp in found if 61 in lp), None)
            inner = next((lp for lp in found if lp is not outer), None)
            if outer is None or inner is None:
                raise TopologyError("lips: cannot tell the outer loop from the inner one")
            loops["lips_outer"] = np.asarray(outer, dtype=np.int32)
            loops["lips_inner"] = np.asarray(inner, dtype=np.int32)
        else:
            if len(found) != 1:
                raise TopologyError(f"{name}: expected one loop, found {len(found)}")
            loops[name] = np.asarray(found[0], dtype=np.int32)
    return loops


# --- the public object -------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """Mesh topology as numpy arrays.

    `triangles`: int32 [852, 3] vertex indices into the 468 mesh points.
    `contours`: name -> int32 [E, 2] edges (see `CONTOURS` for the names).
    `loops`: name -> int32 [V] ordered vertices of a closed loop (first vertex
    not repeated); names in `LOOP_NAMES`.
    """

    triangles: np.ndarray
    contours: Mapping[str, np.ndarray]
    loops: Mapping[str, np.ndarray]
    n_points: int = N_POINTS

    def loop(self, name: str) -> np.ndarray:
        """Ordered closed loop, e.g. "lips_inner", "lips_outer", "left_eye", "face_oval"."""
        try:
            return self.loops[name]
        except KeyError:
            raise KeyError(f"no loop {name!r}; known: {', '.join(self.loops)}") from None

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Topology:
        check_topology(data)
        tris = np.asarray(data["triangles"], dtype=np.int32)
        contours = {n: np.asarray(data["contours"][n], dtype=np.int32) for n in CONTOURS}
        for arr in (tris, *contours.values()):
            arr.setflags(write=False)
        loops = _all_loops(contours)
        for arr in loops.values():
            arr.setflags(write=False)
        return cls(
            triangles=tris, contours=contours, loops=loops, n_points=int(data.get("n_points", N_POINTS))
        )


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int) -> Topology:
    return Topology.from_data(json.loads(Path(path).read_text(encoding="utf-8")))


def load_topology(path: Path | None = None, *, models_dir: Path | None = None) -> Topology:
    """The face-mesh topology, from `path` or the store (fetched if needed)."""
    if path is None:
        path = model_path("face_mesh_topology", models_dir=models_dir)
    path = Path(path)
    return _load(str(path.resolve()), path.stat().st_mtime_ns)


# --- store hooks ---------------------------------------------------------------------------


def derive_topology(ctx: DeriveContext) -> dict[str, Any]:
    """Recipe "face_mesh_topology": parse the MediaPipe source (ast only) and write JSON."""
    assert ctx.base_path is not None
    data = topology_from_source(ctx.base_path.read_text(encoding="utf-8"))
    ctx.out_path.write_bytes(dumps(data))
    return {"parser": "ast", "triangles": len(data["triangles"])}


def validate_topology_file(path: Path, cached: Any = None) -> dict[str, Any]:
    """Validator "face_mesh_topology": the JSON holds 852 triangles and every contour."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TopologyError(f"unreadable topology JSON: {exc}") from None
    Topology.from_data(data)
    return {"triangles": len(data["triangles"]), "contours": sorted(data["contours"])}
