"""Navigation and functional rewriting of the (immutable) statement tree of a PrimFunc.

A *path* is the tuple of child indices from the function body down to a statement: the
first index selects a root statement, each next one a child of a loop (or of a blockized
block's body). Rewrites rebuild only the nodes on the path; everything else is shared.

>>> import probsched as ps
>>> A = ps.placeholder((4, 4), name="A")
>>> B = ps.compute((4, 4), lambda i, j: A[i, j] + 1.0, name="B")
>>> idx = TreeIndex(ps.create_func([A, B]))
>>> idx.loop_path("j"), idx.block_path("B")
((0, 0), (0, 0, 0))
>>> [l.name for l in idx.loops_above("B")]
['i', 'j']
"""

from __future__ import annotations

from typing import Container, Dict, Iterator, List, Optional, Tuple, Union

from ..errors import ScheduleError
from ..ir.expr import Const, Expr, Var, free_vars, substitute
from ..ir.stmt import Block, Loop, PrimFunc, Stmt, map_blocks  # noqa: F401 - map_blocks: the IR's, used from here

Path = Tuple[int, ...]


def children_of(s: Stmt) -> tuple:
    """Child statements of a loop or of a blockized block (whose body is a tuple)."""
    if isinstance(s, Loop):
        return s.body
    if isinstance(s, Block) and isinstance(s.body, tuple):
        return s.body
    return ()


def with_children(s: Stmt, new_children: tuple) -> Stmt:
    """``s`` with its children replaced."""
    if isinstance(s, Loop):
        return s.replace(body=new_children)
    if isinstance(s, Block):
        return s.replace(body=new_children)
    raise TypeError(f"{type(s).__name__} has no children")


def make_room(cache: dict, limit: int) -> None:
    """Drop the oldest entry of a memo ``cache`` (dicts keep insertion order) when it holds
    ``limit`` entries, tolerating another thread emptying or resizing it meanwhile.

    >>> c = {1: "a", 2: "b"}
    >>> make_room(c, 2); c
    {2: 'b'}
    """
    if len(cache) >= limit:
        try:
            cache.pop(next(iter(cache)), None)
        except (StopIteration, RuntimeError):
            pass


#: recently built indexes by id of their function (see TreeIndex.of)
_RECENT: Dict[int, "TreeIndex"] = {}
_RECENT_MAX = 32


class TreeIndex:
    """Name -> path lookups for one (immutable) function, built once in a single walk."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.loops: Dict[str, Path] = {}
        self.blocks: Dict[str, Path] = {}
        self.order: Dict[str, int] = {}  # pre-order position of each named statement
        self.block_nodes: List[Block] = []  # every block, in program order
        n = 0
        body = func.body
        stack: List[Tuple[Path, object]] = [((i,), body[i]) for i in range(len(body) - 1, -1, -1)]
        while stack:
            path, s = stack.pop()
            if isinstance(s, Loop):
                self.loops[s.name] = path
                self.order["loop:" + s.name] = n
                kids = s.body
            elif isinstance(s, Block):
                self.blocks[s.name] = path
                self.order["block:" + s.name] = n
                self.block_nodes.append(s)
                kids = s.body if isinstance(s.body, tuple) else ()
            else:
                kids = ()
            n += 1
            for i in range(len(kids) - 1, -1, -1):
                stack.append((path + (i,), kids[i]))

    @classmethod
    def of(cls, func: PrimFunc) -> "TreeIndex":
        """The index of ``func``, shared: a function is immutable, and a search round asks
        for the index of the same function from several primitives in a row (rebuilt
        each time, it was a large share of an evolutionary round)."""
        hit = _RECENT.get(id(func))
        if hit is not None and hit.func is func:
            return hit
        idx = cls(func)
        make_room(_RECENT, _RECENT_MAX)
        _RECENT[id(func)] = idx  # the entry holds ``func``, so its id is not reused meanwhile
        return idx

    def at(self, path: Path) -> Stmt:
        """The statement at ``path``."""
        node = self.func.body[path[0]]
        for i in path[1:]:
            node = children_of(node)[i]
        return node

    def loop_path(self, name: str) -> Path:
        """Path of the loop named ``name``."""
        return self.loops[name]

    def block_path(self, name: str) -> Path:
        """Path of the block named ``name``."""
        return self.blocks[name]

    def loop(self, name: str) -> Loop:
        """The loop named ``name``."""
        return self.at(self.loops[name])

    def block(self, name: str) -> Block:
        """The block named ``name``."""
        return self.at(self.blocks[name])

    def ancestors(self, path: Path) -> list:
        """Statements strictly above ``path``, outermost first."""
        return [self.at(path[:k]) for k in range(1, len(path))]

    def loops_above(self, block_name: str) -> list:
        """Loops enclosing a block, outermost first (stops at an enclosing block)."""
        out = []
        for s in self.ancestors(self.blocks[block_name]):
            if isinstance(s, Loop):
                out.append(s)
            else:
                out = []  # loops outside an enclosing (blockized) block are not this block's
        return out

    def is_ancestor(self, outer: Path, inner: Path) -> bool:
        """True when ``outer`` is a strict prefix of ``inner``."""
        return len(outer) < len(inner) and inner[: len(outer)] == outer

    def blocks_under(self, path: Path) -> list:
        """Blocks inside the statement at ``path`` (including it if it is a block), in order."""
        return [b for b in iter_blocks(self.at(path))]

    def block_order(self, name: str) -> int:
        """Pre-order position of a block (program order)."""
        return self.order["block:" + name]


def iter_blocks(s: Union[Stmt, tuple]) -> Iterator[Block]:
    """Blocks in ``s`` (a statement or tuple) in program order, nested ones included."""
    if isinstance(s, tuple):
        for x in s:
            yield from iter_blocks(x)
        return
    if isinstance(s, Block):
        yield s
    for c in children_of(s):
        yield from iter_blocks(c)


def iter_outer_blocks(s: Union[Stmt, tuple]) -> Iterator[Block]:
    """Blocks in ``s`` not nested in another block of ``s`` (a blockized block stands for
    its tile: its iterators summarise the inner block's)."""
    if isinstance(s, tuple):
        for x in s:
            yield from iter_outer_blocks(x)
        return
    if isinstance(s, Block):
        yield s
        return
    for c in children_of(s):
        yield from iter_outer_blocks(c)


def replace_at(func: PrimFunc, path: Path, new: tuple) -> PrimFunc:
    """Splice ``new`` (zero or more statements) in place of the statement at ``path``."""

    def rebuild(siblings: tuple, rest: Path) -> tuple:
        i = rest[0]
        if len(rest) == 1:
            return siblings[:i] + tuple(new) + siblings[i + 1 :]
        node = siblings[i]
        return siblings[:i] + (with_children(node, rebuild(children_of(node), rest[1:])),) + siblings[i + 1 :]

    return func.replace(body=rebuild(func.body, path))


def insert_at(func: PrimFunc, parent: Optional[Path], position: int, new: tuple) -> PrimFunc:
    """Insert statements as children of ``parent`` (None = function body) before ``position``."""

    if parent is None or parent == ():
        body = func.body[:position] + tuple(new) + func.body[position:]
        return func.replace(body=body)

    def rebuild(siblings: tuple, rest: Path) -> tuple:
        i = rest[0]
        node = siblings[i]
        if len(rest) == 1:
            kids = children_of(node)
            return siblings[:i] + (with_children(node, kids[:position] + tuple(new) + kids[position:]),) + siblings[i + 1 :]
        return siblings[:i] + (with_children(node, rebuild(children_of(node), rest[1:])),) + siblings[i + 1 :]

    return func.replace(body=rebuild(func.body, parent))


def remove_at(func: PrimFunc, path: Path) -> PrimFunc:
    """Remove the statement at ``path`` and every loop left empty by that."""
    func = replace_at(func, path, ())
    # Walk up: a loop whose body became empty goes too.
    p = path[:-1]
    while p:
        node = TreeIndex.of(func).at(p)
        if isinstance(node, Loop) and not node.body:
            func = replace_at(func, p, ())
            p = p[:-1]
        else:
            break
    return func


def substitute_loop_vars(s: Union[Stmt, tuple], mapping: Dict[str, Expr]) -> Union[Stmt, tuple]:
    """Rewrite bindings and predicates of every block in ``s`` with a var -> expr mapping."""
    if not mapping:
        return s
    keys = set(mapping)

    def fix(b: Block) -> Block:
        touched = any(free_vars(x) & keys for x in b.bindings) or bool(free_vars(b.predicate) & keys)
        if not touched:
            return b
        return b.replace(
            bindings=tuple(substitute(x, mapping) for x in b.bindings),
            predicate=substitute(b.predicate, mapping),
        )

    return map_blocks(s, fix)


def unscheduled(idx: "TreeIndex", blk: Block) -> bool:
    """Whether ``blk`` is alone in a root loop nest of one serial, unannotated loop per
    iterator, in its iterators' order, without a predicate: a block no primitive has
    touched yet, which a program rewrite (Winograd's, flat windows) may replace whole."""
    loops = idx.loops_above(blk.name)
    return (
        len(idx.block_path(blk.name)) == len(loops) + 1
        and len(loops) == len(blk.iters)
        and all(isinstance(b, Var) and b.name == l.name for b, l in zip(blk.bindings, loops))
        and all(l.kind == "serial" and not l.annotations and l.extent == it.extent for l, it in zip(loops, blk.iters))
        and all(len(l.body) == 1 for l in loops)
        and isinstance(blk.predicate, Const)
    )


def fresh_name(taken: Container[str], base: str) -> str:
    """``base`` or ``base_1``, ``base_2``... whichever is not in ``taken``."""
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def all_names(func: PrimFunc) -> set:
    """Every loop, block and buffer name of a function (block iterators are block-scoped)."""
    idx = TreeIndex.of(func)
    return set(idx.loops) | set(idx.blocks) | {b.name for b in func.params + func.allocs}


def require(cond: bool, primitive: str, message: str) -> None:
    """Raise :class:`ScheduleError` ``"<primitive>: <message>"`` unless ``cond``."""
    if not cond:
        raise ScheduleError(f"{primitive}: {message}")


def stmt_label(s: Stmt) -> str:
    """``loop i_0`` / ``block C`` for messages."""
    if isinstance(s, Loop):
        return f"loop {s.name}"
    if isinstance(s, Block):
        return f"block {s.name}"
    return type(s).__name__
