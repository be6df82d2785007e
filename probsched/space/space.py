"""Design spaces: schedule rules applied to every block, then postprocessors.

A *rule* is any callable ``rule(sch, block)`` (a :class:`~probsched.schedule.BlockRV`) that
transforms the schedule around one block, sampling the decisions it cannot make; a rule that
does not apply leaves the block alone. A rule that replaces its block by new ones (a
convolution by Winograd's stages) returns those it hands on: the rules after it then
schedule each of them, consumers first, in place of the block. A *postprocessor* is ``post(sch)``, run once after
the rules (MetaSchedule's postprocessors: concrete parallel/vectorize/unroll, decomposed
reductions). A :class:`Space` is itself a schedule program: ``space(sch)``.

>>> import probsched as ps
>>> from handlers import seed, trace
>>> space = compose(lambda sch, block: None, name="nothing")
>>> sch = ps.Schedule(ps.workloads.small("GMM").func)
>>> len(trace(seed(space, 0)).get_trace(sch))
0
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from ..schedule import BlockRV, Schedule

Rule = Callable[[Schedule, BlockRV], Optional[Sequence[BlockRV]]]
Postproc = Callable[[Schedule], None]


class Space:
    """Rules applied to each block, consumers first (blocks created by rules are skipped),
    then postprocessors. Calling the space schedules ``sch`` in place."""

    def __init__(self, rules: Sequence[Rule], postprocs: Sequence[Postproc] = (), name: str = "custom") -> None:
        self.rules: List[Rule] = list(rules)
        self.postprocs: List[Postproc] = list(postprocs)
        self.name = name
        self.target = None  # the Target the rules were made for, when known (space.default sets it)

    def __call__(self, sch: Schedule) -> None:
        # consumers first (MetaSchedule's post order): a producer's compute location is then
        # sampled among its consumers' final loops, and inlining follows the consumer chain
        for block in reversed(list(sch.blocks())):
            self._visit(sch, block, 0)
        for post in self.postprocs:
            post(sch)

    def _visit(self, sch: Schedule, block: str, first: int) -> None:
        """Apply the rules from index ``first`` on to ``block``."""
        for i in range(first, len(self.rules)):
            if not sch.has_block(block):  # inlined or replaced by an earlier rule
                break
            handed = self.rules[i](sch, BlockRV(block))
            if handed:  # the block was replaced: the later rules take its successors
                for new in reversed(list(handed)):
                    self._visit(sch, new.name, i + 1)
                return

    def __repr__(self) -> str:
        names = [getattr(r, "__name__", type(r).__name__) for r in self.rules]
        return f"Space({self.name}: {', '.join(names)})"


def compose(*rules: Rule, postprocs: Sequence[Postproc] = (), name: str = "custom") -> Space:
    """A space from rules (and postprocessors)."""
    return Space(rules, postprocs, name)


class _Fixed(Space):
    """A space whose every draw runs with some sample sites conditioned (:func:`fixing`)."""

    def __init__(self, space: Space, decisions: Union[Dict[str, Any], Callable[[str], Any]], name: str) -> None:
        super().__init__(space.rules, space.postprocs, name)
        self.target = space.target
        self.decisions = decisions if callable(decisions) else dict(decisions)

    def __call__(self, sch: Schedule) -> None:
        from handlers import condition

        condition(super().__call__, self.decisions)(sch)


def fixing(space: Space, decisions: Union[Dict[str, Any], Callable[[str], Any]], name: Optional[str] = None) -> Space:
    """``space`` with the sample sites of ``decisions`` fixed to their values (conditioned:
    no strategy proposes others), e.g. a block's arithmetic unit, to compare the search with
    and without the AMX tiles; ``decisions`` a mapping site -> value or a callable site ->
    value (None: not fixed); named ``name`` (default: the space's, ``+fixed``).

    >>> import probsched as ps
    >>> from handlers import seed, trace
    >>> w = ps.workloads.matmul(8, 16, 16)
    >>> tr = trace(seed(fixing(ps.space.default(), {"Z/intrin": "matmul_4x16"}), 0)).get_trace(ps.Schedule(w.func))
    >>> tr["Z/intrin"].value
    'matmul_4x16'
    >>> vector = fixing(ps.space.default(), lambda site: "vector" if site.endswith("/unit") else None, "vector")
    >>> vector.name, trace(seed(vector, 0)).get_trace(ps.Schedule(w.func))["Z/intrin"].value.startswith("matmul_")
    ('vector', True)
    """
    return _Fixed(space, decisions, name or f"{space.name}+fixed")
