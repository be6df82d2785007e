"""The instruction log of a schedule: every primitive with its inputs, outputs and decision.

A :class:`InstructionLog` prints as Python that rebuilds the program on a fresh
``Schedule``, serialises to JSON, and replays with :meth:`InstructionLog.apply`. It is
``sch.instructions``. (It is not a handlers ``Trace``: a trace is the decisions of one run
of a schedule program, the log is every primitive the schedule received.)

>>> import probsched as ps
>>> A = ps.placeholder((64,), name="A")
>>> B = ps.compute((64,), lambda i: A[i] + 1.0, name="B")
>>> sch = ps.Schedule(ps.create_func([A, B]))
>>> (i,) = sch.get_loops(sch.get_block("B"))
>>> outer, inner = sch.split(i, [None, 16])
>>> sch.vectorize(inner)
>>> print(sch.instructions)
b0 = sch.get_block("B")
(l1,) = sch.get_loops(b0)
l2, l3 = sch.split(l1, factors=[None, 16])
sch.vectorize(l3)
>>> other = ps.InstructionLog.from_json(sch.instructions.to_json()).apply(ps.Schedule(sch.func))
>>> other.mod == sch.mod
True
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from ..errors import ScheduleError

if TYPE_CHECKING:
    from .schedule import Schedule


class BlockRV:
    """A handle to a block, by name (names are unique and stable under replay)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is BlockRV and other.name == self.name

    def __hash__(self) -> int:
        return hash(("BlockRV", self.name))

    def __repr__(self) -> str:
        return f"BlockRV({self.name!r})"


class LoopRV:
    """A handle to a loop, by the name of its variable."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is LoopRV and other.name == self.name

    def __hash__(self) -> int:
        return hash(("LoopRV", self.name))

    def __repr__(self) -> str:
        return f"LoopRV({self.name!r})"


def _encode(v: Any) -> Any:
    if isinstance(v, BlockRV):
        return {"block": v.name}
    if isinstance(v, LoopRV):
        return {"loop": v.name}
    if isinstance(v, tuple):
        return {"tuple": [_encode(x) for x in v]}
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, dict):
        return {"dict": [[k, _encode(x)] for k, x in v.items()]}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    import numpy as np

    if isinstance(v, np.generic):
        return v.item()
    raise ScheduleError(f"instruction log: value {v!r} of type {type(v).__name__} cannot be serialised")


def _decode(v: Any) -> Any:
    if isinstance(v, dict):
        if "block" in v:
            return BlockRV(v["block"])
        if "loop" in v:
            return LoopRV(v["loop"])
        if "tuple" in v:
            return tuple(_decode(x) for x in v["tuple"])
        if "dict" in v:
            return {k: _decode(x) for k, x in v["dict"]}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


class Instruction:
    """One primitive call: ``kind`` (the Schedule method), inputs, attributes, outputs, decision."""

    __slots__ = ("kind", "inputs", "attrs", "outputs", "decision")

    def __init__(self, kind: str, inputs: Sequence, attrs: Dict[str, Any], outputs: Sequence, decision: Any = None) -> None:
        self.kind = kind
        self.inputs = list(inputs)
        self.attrs = dict(attrs)
        self.outputs = list(outputs)
        self.decision = decision

    def to_data(self) -> dict:
        """JSON-ready form."""
        d = {
            "kind": self.kind,
            "inputs": [_encode(x) for x in self.inputs],
            "attrs": [[k, _encode(v)] for k, v in self.attrs.items()],
            "outputs": [_encode(x) for x in self.outputs],
        }
        if self.decision is not None:
            d["decision"] = _encode(self.decision)
        return d

    @staticmethod
    def from_data(d: dict) -> "Instruction":
        """Inverse of :meth:`to_data`."""
        return Instruction(
            d["kind"],
            [_decode(x) for x in d["inputs"]],
            {k: _decode(v) for k, v in d["attrs"]},
            [_decode(x) for x in d["outputs"]],
            _decode(d.get("decision")),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Instruction) and self.to_data() == other.to_data()

    def __repr__(self) -> str:
        return f"Instruction({self.kind}, inputs={self.inputs}, attrs={self.attrs}, outputs={self.outputs})"


class InstructionLog:
    """An ordered list of :class:`Instruction`; prints as Python, round-trips through JSON."""

    FORMAT = 1

    def __init__(self, instructions: Optional[Sequence[Instruction]] = None) -> None:
        self.instructions: List[Instruction] = list(instructions or [])

    def append(self, inst: Instruction) -> None:
        """Add an instruction at the end."""
        self.instructions.append(inst)

    def copy(self) -> "InstructionLog":
        """A shallow copy (instructions are never mutated after being recorded)."""
        return InstructionLog(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self):
        return iter(self.instructions)

    def __getitem__(self, index: int) -> Instruction:
        return self.instructions[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InstructionLog) and self.instructions == other.instructions

    def decisions(self) -> Dict[int, Any]:
        """Instruction index -> decision of every sampling instruction."""
        return {i: inst.decision for i, inst in enumerate(self.instructions) if inst.decision is not None}

    def to_json(self) -> str:
        """JSON text."""
        return json.dumps(
            {"format": self.FORMAT, "instructions": [i.to_data() for i in self.instructions]},
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(text: str) -> "InstructionLog":
        """Parse :meth:`to_json` text."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"instruction log JSON is not valid JSON: {exc}") from None
        if not isinstance(d, dict) or d.get("format") != InstructionLog.FORMAT:
            raise ScheduleError("not a probsched instruction log (missing or unknown 'format')")
        return InstructionLog([Instruction.from_data(x) for x in d["instructions"]])

    def apply(self, sch: "Schedule", *, decisions: bool = True) -> "Schedule":
        """Replay every instruction onto ``sch`` (a fresh Schedule of the same function); returns it.

        Sampling instructions reuse their recorded decision when ``decisions`` is true.
        """
        for inst in self.instructions:
            method = getattr(sch, inst.kind, None)
            if method is None or inst.kind.startswith("_"):
                raise ScheduleError(f"instruction log: unknown instruction {inst.kind!r}")
            kwargs = dict(inst.attrs)
            if decisions and inst.decision is not None:
                kwargs["decision"] = inst.decision
            out = method(*inst.inputs, **kwargs)
            produced = out if isinstance(out, (list, tuple)) else ([] if out is None else [out])
            expected = inst.outputs
            got = [x for x in produced if isinstance(x, (BlockRV, LoopRV))]
            if [x for x in expected if isinstance(x, (BlockRV, LoopRV))] != got:
                raise ScheduleError(
                    f"instruction log: replaying {inst.kind} produced {got}, the log recorded {expected}"
                )
        return sch

    def __str__(self) -> str:
        return self.as_python()

    def as_python(self) -> str:
        """Python statements that rebuild the schedule from ``sch = ps.Schedule(func)``."""
        names: Dict[Any, str] = {}
        counter = [0]
        lines = []

        def ref(v: Any) -> str:
            if isinstance(v, (BlockRV, LoopRV)):
                if v in names:
                    return names[v]
                if isinstance(v, BlockRV):
                    return f'sch.get_block("{v.name}")'
                return f'sch.get_loop("{v.name}")'
            if isinstance(v, list):
                return "[" + ", ".join(ref(x) for x in v) + "]"
            if isinstance(v, tuple):
                return "(" + ", ".join(ref(x) for x in v) + ("," if len(v) == 1 else "") + ")"
            if isinstance(v, str):
                return json.dumps(v)
            return repr(v)

        for inst in self.instructions:
            args = [ref(x) for x in inst.inputs]
            args += [f"{k}={ref(v)}" for k, v in inst.attrs.items()]
            if inst.decision is not None:
                args.append(f"decision={ref(inst.decision)}")
            call = f"sch.{inst.kind}({', '.join(args)})"
            outs = []
            for o in inst.outputs:
                if isinstance(o, (BlockRV, LoopRV)):
                    prefix = "b" if isinstance(o, BlockRV) else "l"
                    names[o] = f"{prefix}{counter[0]}"
                    counter[0] += 1
                    outs.append(names[o])
                else:
                    outs.append(f"v{counter[0]}")
                    counter[0] += 1
            if not outs:
                lines.append(call)
            elif inst.kind in ("get_loops", "get_child_blocks", "get_producers", "get_consumers") and len(outs) == 1:
                lines.append(f"({outs[0]},) = {call}")
            elif len(outs) == 1 and inst.kind not in ("split", "get_loops", "get_child_blocks"):
                lines.append(f"{outs[0]} = {call}")
            else:
                lines.append(f"{', '.join(outs)} = {call}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"InstructionLog({len(self.instructions)} instructions)"
