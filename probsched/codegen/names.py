"""Identifiers of the generated module: every IR name mapped to a unique, safe Python name.

IR names may collide with each other once scoping is flattened (block iterators are scoped
to their block, loop variables to the function, buffers to the function), with Python
keywords and builtins (``for``, ``range``, ``min``) or with the helpers the generated code
uses (``np``, ``prange``, ``_u64``). :class:`Namer` hands out fresh names: the IR name when
it is free, otherwise the name with a numeric suffix.

>>> n = Namer()
>>> n.fresh("i"), n.fresh("i"), n.fresh("range"), n.fresh("np"), n.fresh("for")
('i', 'i_1', 'range_1', 'np_1', 'for_1')
"""

from __future__ import annotations

import builtins
import keyword

# Names the generated module itself binds or calls; never handed out.
HELPERS = frozenset({"np", "prange", "_u64", "numba"})
RESERVED = frozenset(keyword.kwlist) | frozenset(getattr(keyword, "softkwlist", ())) | frozenset(dir(builtins)) | HELPERS


class Namer:
    """Hands out identifiers unique within one generated module."""

    def __init__(self, taken=()) -> None:
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        """A new identifier based on ``base`` (``base`` itself when free and safe)."""
        if not base.isidentifier():
            base = "".join(c if (c.isalnum() or c == "_") else "_" for c in base) or "x"
            if base[0].isdigit():
                base = "_" + base
        # Names starting with "_ps" are kept for helper functions and globals.
        if base.startswith("_ps"):
            base = "u" + base
        name, n = base, 0
        while name in self.taken or name in RESERVED:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name

    def helper(self, base: str) -> str:
        """A fresh identifier for a helper function or global (prefixed ``_ps_``)."""
        name, n = f"_ps_{base}", 0
        while name in self.taken:
            n += 1
            name = f"_ps_{base}_{n}"
        self.taken.add(name)
        return name
