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

from typing import Callable, List, Optional, Sequence

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
