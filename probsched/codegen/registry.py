"""The extension point for new statement kinds: ``register_stmt_emitter(cls, fn)``.

A statement class that the generator does not know (an intrinsic call, a micro-kernel)
registers a function ``fn(stmt, ctx)`` that writes its source through the emission context
``ctx`` (see :class:`probsched.codegen.emit.Emitter`): ``ctx.line(text)``,
``ctx.indented()``, ``ctx.expr(e)``, ``ctx.index(buffer, indices)``, ``ctx.array(buffer)``,
``ctx.add_global(hint, obj)`` (brings another njit function or a constant into the
generated module), ``ctx.fresh(hint)``, ``ctx.emit(stmts)`` and ``ctx.comment(text)``.

The function may be called more than once per build (the generator makes an analysis pass
before the real one), so it must only write through ``ctx``. A statement that writes
parameters should define ``writes()`` returning the buffers (or ``(buffer, indices)``
pairs) it writes, so that kernels know which parameters are outputs.

Blocks marked by an annotation (as ``tensorize`` marks them) can be emitted by a function
registered with :func:`register_block_emitter`.

>>> class Nop:  # any class works; IR statements subclass probsched.ir.stmt.Stmt
...     pass
>>> register_stmt_emitter(Nop, lambda stmt, ctx: ctx.line("pass"))
>>> lookup(Nop()) is not None
True
>>> unregister_stmt_emitter(Nop)
"""

from __future__ import annotations

from typing import Callable, Optional

_EMITTERS: dict = {}
_BLOCK_EMITTERS: dict = {}
_generation = [0]


def generation() -> int:
    """A number that changes whenever an emitter is registered or removed (keys build caches)."""
    return _generation[0]


def register_stmt_emitter(cls: type, fn: Callable) -> None:
    """Make the generator call ``fn(stmt, ctx)`` for statements of class ``cls``.

    A later registration for the same class replaces the earlier one; subclasses of ``cls``
    use ``fn`` unless they register their own.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_stmt_emitter: {cls!r} is not a class")
    if not callable(fn):
        raise TypeError(f"register_stmt_emitter: {fn!r} is not callable")
    _EMITTERS[cls] = fn
    _generation[0] += 1


def unregister_stmt_emitter(cls: type) -> None:
    """Forget the emitter of ``cls`` (no error when there is none)."""
    if _EMITTERS.pop(cls, None) is not None:
        _generation[0] += 1


def register_block_emitter(annotation: str, fn: Callable) -> None:
    """Make the generator call ``fn(block, ctx)`` for blocks annotated with ``annotation``.

    ``fn`` replaces the emission of the block's init and body (``tensorize`` marks a block
    with an annotation naming its micro-kernel). It runs where the body would: the block's
    iterators are bound (``ctx.expr`` / ``ctx.index`` accept expressions of them) and the
    block predicate guards it. Returning ``False`` falls back to the default emission.
    """
    if not callable(fn):
        raise TypeError(f"register_block_emitter: {fn!r} is not callable")
    _BLOCK_EMITTERS[str(annotation)] = fn
    _generation[0] += 1


def unregister_block_emitter(annotation: str) -> None:
    """Forget the block emitter of ``annotation`` (no error when there is none)."""
    if _BLOCK_EMITTERS.pop(str(annotation), None) is not None:
        _generation[0] += 1


def lookup_block(block) -> Optional[Callable]:
    """The block emitter for the first of ``block``'s annotations that has one, else None."""
    for key, _ in block.annotations:
        fn = _BLOCK_EMITTERS.get(key)
        if fn is not None:
            return fn
    return None


def lookup(stmt) -> Optional[Callable]:
    """The emitter registered for ``type(stmt)`` or its nearest base class, else None."""
    for klass in type(stmt).__mro__:
        fn = _EMITTERS.get(klass)
        if fn is not None:
            return fn
    return None
