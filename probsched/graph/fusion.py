"""Operator fusion: group a graph's nodes into the sub-programs that become tasks.

The rules follow TVM's operator fusion, with the node kinds of :mod:`.ops`:

- views are never grouped: each group that reads through one substitutes its index map, so
  a broadcast, reshape or transpose costs no pass over memory;
- an anchor (matmul, convolution, pooling) starts a group;
- an elementwise node joins the group that produces one of its inputs when every reader of
  that input is in the group already (or is this node): bias + batch-norm + ReLU after a
  convolution, or a residual add, end in the convolution's group. Failing that, it joins a
  group whose value it shares only with later elementwise or reduction nodes, which are
  likely to join as well (a layer norm reads ``x - mean`` twice; exact GELU reads its input
  twice). A tensor read by several groups is an output of its group, computed once;
- a reduction joins the group of its input unless that group holds an anchor or
  :data:`MAX_REDUCTIONS` reductions already: the two reductions of a softmax or of a layer
  norm, with the elementwise work between them, are one group, and a layer norm after a
  softmax is a group of its own;
- among several groups an elementwise node could join, the latest wins; a join that would
  make two groups depend on each other is refused;
- elementwise work computed from a single value (constants aside), which only the nodes
  of one other group read, each element once (elementwise nodes, a reduction), moves into
  that group, which computes it from that value: a group of such nodes left on its own,
  or the tail of a group that makes wider values than the one it starts from. A quantized
  network's dequantized skip connection, whose bytes the next block's convolution reads
  too, is computed again in the residual add's epilogue instead of stored between tasks
  in float32 by a task of its own; a downsampling convolution stores its bytes, not their
  dequantized floats (4x the bytes), for the residual add to read, and the last block
  stores its bytes for the global average pool;
- a graph output that only a view computes gets a group of its own that copies it out.

A group's outputs are the values it computes that another group or the graph's caller
reads; every other value it computes stays inside its task.

>>> import numpy as np, jax
>>> import probsched as ps
>>> w = np.ones((3, 3, 4, 8), np.float32)
>>> b = np.ones((8,), np.float32)
>>> def f(x):
...     y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
...     return jax.nn.softmax(jax.nn.relu(y + b), axis=-1)
>>> g = ps.from_jax(f, np.ones((1, 6, 6, 4), np.float32))
>>> [[n.op for n in grp.nodes] for grp in fuse(g)]
[['conv_general_dilated', 'add', 'max'], ['reduce_max', 'max', 'sub', 'exp', 'reduce_sum', 'div']]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from .ir import Graph, Node
from .ops import ANCHOR, ELEMWISE, OPS, REDUCE, VIEW

COPY = "copy"
#: Reductions a group may hold: a softmax's maximum and sum, a layer norm's mean and variance.
MAX_REDUCTIONS = 2


@dataclass(eq=False)
class Group:
    """Nodes fused into one task: ``nodes`` in graph order, its ``kind`` (``"anchor"``,
    ``"reduce"``, ``"elemwise"`` or ``"copy"``), the values it ``outputs`` and the values
    it reads from outside (``inputs``: graph inputs, constants, other groups' outputs), both
    in a deterministic order. A copy group has no nodes: it materialises ``outputs`` (a
    graph output made by views only)."""

    kind: str
    nodes: List[Node] = field(default_factory=list)
    outputs: List[int] = field(default_factory=list)
    inputs: List[int] = field(default_factory=list)
    deps: Set[int] = field(default_factory=set, repr=False)  # indices of groups it reads from

    @property
    def anchor(self) -> Optional[Node]:
        """The group's anchor node (its first node for a group without one)."""
        for n in self.nodes:
            if OPS[n.op].kind == ANCHOR:
                return n
        return self.nodes[0] if self.nodes else None


class _Fuser:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producer = graph.producer()
        self.kind: Dict[int, str] = {}
        for n in graph.nodes:
            self.kind[id(n)] = OPS[n.op].kind_of([graph.types[v] for v in n.outputs])
        self._sources: Dict[int, frozenset] = {}
        self.group_of: Dict[int, int] = {}  # id(node) -> group index
        self.groups: List[Group] = []
        # readers of each source value, through views: which grouped nodes read it
        self.readers: Dict[int, List[Node]] = {}
        for n in graph.nodes:
            if self.kind[id(n)] != VIEW:
                for s in self.node_sources(n):
                    self.readers.setdefault(s, []).append(n)
        self.escaping = {s for v in graph.outputs for s in self.sources(v)}  # what the graph's outputs are made of
        self.position = {id(n): i for i, n in enumerate(graph.nodes)}  # graph order

    def sources(self, value: int) -> tuple:
        """The non-view values ``value`` is computed from (itself unless a view makes it),
        in the order a walk through the views' inputs meets them."""
        got = self._sources.get(value)
        if got is None:
            p = self.producer.get(value)
            if p is None or self.kind[id(p)] != VIEW:
                got = (value,)
            else:
                got = tuple(dict.fromkeys(s for v in p.inputs for s in self.sources(v)))
            self._sources[value] = got
        return got

    def node_sources(self, n: Node) -> tuple:
        return tuple(dict.fromkeys(s for v in n.inputs for s in self.sources(v)))

    def source_group(self, value: int) -> Optional[int]:
        p = self.producer.get(value)
        return None if p is None else self.group_of.get(id(p))

    def depends_on(self, start: int, target: int) -> bool:
        """Whether group ``start`` reads, directly or not, from group ``target``."""
        seen, stack = set(), [start]
        while stack:
            g = stack.pop()
            if g == target:
                return True
            if g in seen:
                continue
            seen.add(g)
            stack.extend(self.groups[g].deps)
        return False

    def new_group(self, n: Node, kind: str, deps: Set[int]) -> None:
        self.groups.append(Group(kind, [n], deps=set(deps)))
        self.group_of[id(n)] = len(self.groups) - 1

    def join(self, n: Node, g: int, deps: Set[int]) -> None:
        grp = self.groups[g]
        grp.nodes.append(n)
        grp.deps |= deps - {g}
        if self.kind[id(n)] == REDUCE and grp.kind == ELEMWISE:
            grp.kind = REDUCE
        self.group_of[id(n)] = g

    def place(self, n: Node) -> None:
        kind = self.kind[id(n)]
        srcs = self.node_sources(n)
        deps = {g for g in (self.source_group(s) for s in srcs) if g is not None}
        if kind == ANCHOR:
            return self.new_group(n, kind, deps)
        strict, loose = [], []
        for s in srcs:
            g = self.source_group(s)
            if g is None or any(self.depends_on(h, g) for h in deps if h != g):
                continue
            grp = self.groups[g]
            if kind == REDUCE:
                reductions = sum(self.kind[id(m)] == REDUCE for m in grp.nodes)
                if grp.kind != ANCHOR and reductions < MAX_REDUCTIONS:
                    strict.append(g)
                continue
            if s in self.graph.outputs:
                continue
            others = [r for r in self.readers.get(s, []) if r is not n and self.group_of.get(id(r)) != g]
            if not others:
                strict.append(g)
            elif all(self.kind[id(r)] != ANCHOR and id(r) not in self.group_of for r in others):
                # the other readers are later elementwise or reduction nodes, which will
                # likely join g too (a layer norm reads x - mean twice)
                loose.append(g)
        candidates = strict or loose
        if candidates:
            self.join(n, max(candidates), deps)
        else:
            self.new_group(n, kind, deps)

    def run(self) -> List[Group]:
        for n in self.graph.nodes:
            if self.kind[id(n)] != VIEW:
                self.place(n)
        self._sink_elementwise()
        self._copy_groups()
        self._inputs_outputs()
        return self._ordered()

    def _reader_group(self, nodes: List[Node]) -> Optional[int]:
        """The one group, other than theirs, that reads the values ``nodes`` make, when each
        of its readers of them reads every element once (an elementwise node of their size,
        or a reduction: a broadcast read would compute a value again per copy, a window
        several times) and none is an output of the graph."""
        inside = {id(n) for n in nodes}
        made = {v for n in nodes for v in n.outputs}
        if made & self.escaping:
            return None
        types = self.graph.types
        targets = set()
        for v in made:
            for r in self.readers.get(v, []):
                if id(r) in inside:
                    continue
                if self.kind[id(r)] not in (ELEMWISE, REDUCE):
                    return None
                read = [u for u in r.inputs if v in self.sources(u)]
                if any(types[u].size != types[v].size for u in read):
                    return None
                if self.kind[id(r)] == ELEMWISE and types[r.outputs[0]].size != types[v].size:
                    return None
                targets.add(self.group_of[id(r)])
        return targets.pop() if len(targets) == 1 else None

    def _read_from(self, nodes: List[Node]) -> List[int]:
        """The values ``nodes`` read that they do not make and that are not constants."""
        made = {v for n in nodes for v in n.outputs}
        reads = (s for n in nodes for s in self.node_sources(n))
        return [s for s in dict.fromkeys(reads) if s not in made and not self.graph.is_constant(s)]

    def _movable_tail(self, g: int) -> Optional[Tuple[int, int]]:
        """``(i, target)`` when the nodes of group ``g`` from its ``i``-th on may move to group
        ``target`` (the module doc): elementwise, computed from one value of ``g`` alone, and
        wider than it (a dequantization: moved, ``g`` stores the bytes instead of floats)."""
        nodes = self.groups[g].nodes
        for i in range(len(nodes) - 1, 0, -1):
            tail = nodes[i:]
            if self.kind[id(tail[0])] != ELEMWISE:
                return None
            read = self._read_from(tail)
            if len(read) != 1 or self.source_group(read[0]) != g:
                continue
            narrow = self.graph.types[read[0]].nbytes
            if all(self.graph.types[v].nbytes <= narrow for n in tail for v in n.outputs):
                continue
            target = self._reader_group(tail)
            return None if target is None or target == g else (i, target)
        return None

    def _move(self, nodes: List[Node], target: int) -> None:
        into = self.groups[target]
        into.nodes = sorted(into.nodes + nodes, key=lambda n: self.position[id(n)])
        into.deps |= {g for g in (self.source_group(s) for s in self._read_from(nodes)) if g is not None} - {target}
        for n in nodes:
            self.group_of[id(n)] = target

    def _sink_elementwise(self) -> None:
        """Move elementwise work to the one group that reads it (the module doc)."""
        moved: Dict[int, int] = {}  # lone groups emptied into another
        for e, grp in enumerate(self.groups):
            if grp.kind == ELEMWISE and all(self.kind[id(n)] == ELEMWISE for n in grp.nodes):
                if len(self._read_from(grp.nodes)) == 1:
                    target = self._reader_group(grp.nodes)
                    if target is not None and target != e:
                        self._move(grp.nodes, target)
                        moved[e] = target
                        continue
            tail = self._movable_tail(e)
            if tail is not None:
                i, target = tail
                self._move(grp.nodes[i:], target)
                del grp.nodes[i:]
        if not moved:
            return

        def final(g: int) -> int:
            while g in moved:
                g = moved[g]
            return g

        kept = [i for i in range(len(self.groups)) if i not in moved]
        index = {old: new for new, old in enumerate(kept)}
        for i in kept:
            grp = self.groups[i]
            grp.deps = {index[final(d)] for d in grp.deps if final(d) != i}
        self.groups = [self.groups[i] for i in kept]
        self.group_of = {k: index[final(g)] for k, g in self.group_of.items()}

    def _copy_groups(self) -> None:
        for v in dict.fromkeys(self.graph.outputs):
            p = self.producer.get(v)
            if p is not None and self.kind[id(p)] == VIEW:
                deps = {g for g in (self.source_group(s) for s in self.sources(v)) if g is not None}
                self.groups.append(Group(COPY, [], outputs=[v], deps=deps))

    def _inputs_outputs(self) -> None:
        escaping: Set[int] = set()
        for grp in self.groups:
            reads: List[int] = []
            for n in grp.nodes:
                reads += self.node_sources(n)
            if grp.kind == COPY:
                reads += self.sources(grp.outputs[0])
            own = {v for n in grp.nodes for v in n.outputs}
            ext = [v for v in dict.fromkeys(reads) if v not in own]
            grp.inputs = ext
            escaping.update(v for v in ext if v in self.producer)
        for v in self.graph.outputs:
            if v in self.producer and self.kind[id(self.producer[v])] != VIEW:
                escaping.add(v)
        for grp in self.groups:
            if grp.kind != COPY:
                grp.outputs = [v for n in grp.nodes for v in n.outputs if v in escaping]

    def _ordered(self) -> List[Group]:
        """Groups in an order where each comes after those it reads from (creation order
        where that is free)."""
        done: List[int] = []
        state: Dict[int, int] = {}

        def visit(g: int) -> None:
            if state.get(g) == 2:
                return
            state[g] = 1
            for d in sorted(self.groups[g].deps):
                visit(d)
            state[g] = 2
            done.append(g)

        for g in range(len(self.groups)):
            visit(g)
        return [self.groups[g] for g in done]


def fuse(graph: Graph) -> List[Group]:
    """The graph's nodes grouped into tasks, in an executable order (see the module doc)."""
    return _Fuser(graph).run()


__all__ = ["fuse", "Group", "COPY"]
