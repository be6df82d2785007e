"""A griffe extension: the library's reST-flavoured docstrings rendered as Markdown.

The docstrings of ``probsched`` and ``handlers`` are written for ``help()`` and doctest:
Sphinx roles (``:class:`~probsched.measure.LocalMeasurer```), ``>>>`` examples and ``::``
literal blocks. mkdocstrings renders docstrings as Markdown, where ``>>>`` would become
nested block quotes and ``[...]`` in an example's output a link. Rather than edit the
library, this extension rewrites each docstring once the package is loaded:

- a role whose target griffe can resolve becomes an optional cross-reference (a link when
  the target is on an API page, plain code otherwise); any other role, plain code;
- a run of ``>>>`` lines and their output becomes a fenced ``pycon`` block (without
  ``# doctest:`` directives);
- a paragraph ending in ``::`` ends in ``:`` (its indented block is already code);
- a list that follows a paragraph line gets the blank line Markdown needs.

mkdocs.yml enables it in the python handler's options:
``extensions: [docs/_ext/rest_docstrings.py:RestDocstrings]``.
"""

from __future__ import annotations

import html
import re
from typing import Optional

import griffe

_ROLE = re.compile(r":(?:py:)?(mod|class|func|meth|data|attr|exc|obj):`(~?)([^`]+)`")
_FENCE = re.compile(r"^\s*(```|~~~)")
_DOCTEST_FLAG = re.compile(r"\s*#\s*doctest:.*$")


def _resolve(obj: griffe.Object, target: str) -> Optional[str]:
    """The canonical path of ``target`` as written in ``obj``'s docstring, or None."""
    target = target.strip().rstrip("()")
    if target.startswith("."):  # relative to the docstring's package
        mod = obj if obj.is_module else obj.module
        base = mod if mod.is_package else mod.parent
        rest = target[1:]
        while rest.startswith("."):
            base, rest = base.parent, rest[1:]
        if base is None:
            return None
        target = f"{base.path}.{rest}" if rest else base.path
    head, _, tail = target.partition(".")
    scope = obj if (obj.is_module or obj.is_class) else obj.parent
    candidates = []
    while scope is not None:  # a name visible in the docstring's scope, then its module's
        try:
            candidates.append(scope.resolve(head) + (f".{tail}" if tail else ""))
        except (griffe.NameResolutionError, AttributeError, KeyError):
            pass
        scope = scope.parent
    candidates.append(target)  # an absolute dotted path
    root = obj.package
    for path in candidates:
        parts = path.split(".")
        if parts[0] != root.name:
            if parts[0] in obj.modules_collection:
                node = obj.modules_collection[parts[0]]
            else:
                continue
        else:
            node = root
        try:
            for part in parts[1:]:
                node = node.members[part]
                if node.is_alias:
                    node = node.final_target
            return node.path if not node.is_alias else node.target_path
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
    return None


def _role(obj: griffe.Object, match: re.Match) -> str:
    kind, tilde, target = match.groups()
    shown = target.rsplit(".", 1)[-1] if tilde else target.lstrip(".")
    if kind in ("func", "meth") and not shown.endswith(")"):
        shown += "()"
    path = _resolve(obj, target)
    if path is None:
        return f"`{shown}`"
    # the title stays a Markdown code span, so that ``__call__`` is not read as emphasis
    return f'<autoref identifier="{html.escape(path)}" optional>`{shown}`</autoref>'


def convert(obj: griffe.Object, text: str) -> str:
    """The Markdown form of one docstring (see the module docstring)."""
    out = []
    lines = text.splitlines()
    i, in_fence = 0, False
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
        if in_fence:
            out.append(line)
            i += 1
            continue
        stripped = line.lstrip()
        if stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            if out and out[-1].strip():
                out.append("")
            block = [_DOCTEST_FLAG.sub("", b) for b in block]
            out += [f"{indent}```pycon", *(indent + b for b in block), f"{indent}```", ""]
            continue
        line = _ROLE.sub(lambda m: _role(obj, m), line)
        if line.rstrip().endswith("::") and not line.strip() == "::":
            line = line.rstrip()[:-1]
        is_item = re.match(r"\s*([-*]|\d+\.)\s", line) is not None
        prev = out[-1] if out else ""
        prev_is_item_or_cont = re.match(r"\s*([-*]|\d+\.)\s", prev) is not None or prev.startswith((" ", "\t"))
        if is_item and prev.strip() and not prev_is_item_or_cont:
            out.append("")
        out.append(line)
        i += 1
    return "\n".join(out)


class RestDocstrings(griffe.Extension):
    """Rewrite every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        seen = set()

        def visit(obj: griffe.Object) -> None:
            if obj.path in seen:
                return
            seen.add(obj.path)
            if obj.docstring is not None:
                obj.docstring.value = convert(obj, obj.docstring.value)
            for member in obj.members.values():
                if not member.is_alias:
                    visit(member)

        visit(pkg)
