"""The package's rooms and the rule that data flows one way between them (docs/design.md).

Every import inside ``probsched`` (module level, inside functions, and under
``TYPE_CHECKING``) is read from the source with :mod:`ast`. A *room* is a top-level
subpackage or module of ``probsched``. The rooms are layered, lowest first, in
:data:`LAYERS`; an import from one room into another must go down the layers. The front
end and the runtime have stricter rules of their own.
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "probsched"

#: Rooms from the bottom up; a room may import only rooms of lower layers (rooms of one
#: layer do not import each other). The package face (``__init__``), the deprecated aliases
#: and the command line sit on top.
LAYERS = [
    {"errors", "aligned", "arguments", "components", "cache", "target", "models", "version"},
    {"ir"},
    {"te", "precision"},
    {"workloads"},
    {"schedule"},
    {"lowering", "graph", "testing"},
    {"codegen"},
    {"intrinsics", "measure", "runtime"},
    {"space", "database", "baselines"},
    {"cost_model"},
    {"search"},
    {"tuning"},
    {"__init__", "tuner", "model_tuner", "task_search", "selection"},
    {"cli"},
]
RANK = {room: i for i, layer in enumerate(LAYERS) for room in layer}

#: The front end only translates: never the tuner, the measurer, the database, the search,
#: the cost model, the design space, the code generator or the runtime.
FRONT_END_MAY_NOT = {"tuning", "measure", "database", "search", "cost_model", "space", "codegen", "runtime", "intrinsics", "cli"}
#: A process that only runs a compiled model needs the code generator's kernels and the IR.
RUNTIME_MAY = {"codegen", "ir", "aligned", "arguments", "errors", "target", "cache", "version"}


ROOMS = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}


def _room(module: str) -> str:
    """The room of a module, or of a name taken from the package face (``from .. import build``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "__init__"


def imports_between_rooms() -> dict:
    """(importing room, imported room) -> the files that import, for every cross-room import."""
    edges = collections.defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts)
        if module.endswith(".__init__"):
            module, package = module[: -len(".__init__")], module[: -len(".__init__")]
        else:
            package = module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target == "probsched":  # from probsched import x / from .. import x: submodule or face name
                    targets += [f"probsched.{a.name}" for a in node.names]
                elif target.startswith("probsched."):
                    targets.append(target)
            elif isinstance(node, ast.Import):
                targets += [a.name for a in node.names if a.name == "probsched" or a.name.startswith("probsched.")]
            for target in targets:
                src, dst = _room(module), _room(target)
                if src != dst:
                    edges[(src, dst)].add(str(rel))
    return edges


EDGES = imports_between_rooms()


def test_every_room_has_a_layer():
    missing = sorted(ROOMS - set(RANK))
    assert not missing, f"rooms without a place in LAYERS (tests/test_architecture.py, docs/design.md): {missing}"


def test_imports_between_rooms_go_down_the_layers():
    up = [
        f"{src} -> {dst} ({', '.join(sorted(files))})"
        for (src, dst), files in sorted(EDGES.items())
        if dst in RANK and src in RANK and RANK[dst] >= RANK[src]
    ]
    assert not up, "imports that do not go down the layers:\n" + "\n".join(up)


def test_no_circle_between_rooms():
    graph = collections.defaultdict(set)
    for src, dst in EDGES:
        graph[src].add(dst)

    def reaches(start, goal, seen):
        for nxt in graph[start]:
            if nxt == goal or (nxt not in seen and not seen.add(nxt) and reaches(nxt, goal, seen)):
                return True
        return False

    circles = sorted(room for room in list(graph) if reaches(room, room, set()))
    assert not circles, f"rooms on an import circle: {circles}"


@pytest.mark.parametrize("room, forbidden", [("graph", FRONT_END_MAY_NOT)])
def test_the_front_end_only_translates(room, forbidden):
    bad = sorted(f"{dst} ({', '.join(sorted(files))})" for (src, dst), files in EDGES.items() if src == room and dst in forbidden)
    assert not bad, f"the front end imports {bad}"


def test_the_runtime_needs_no_tuner():
    bad = sorted(f"{dst} ({', '.join(sorted(files))})" for (src, dst), files in EDGES.items() if src == "runtime" and dst not in RUNTIME_MAY)
    assert not bad, f"the runtime imports {bad}"


def test_the_reader_sees_every_kind_of_import():
    # the rules are only as good as the import reader: relative, lazy, and from the face
    assert ("tuning", "runtime") in EDGES and ("measure", "codegen") in EDGES and ("runtime", "aligned") in EDGES
    assert ("__init__", "version") in EDGES  # from .version import __version__, in the face
