"""Local scratch arrays on the stack: ``stack_empty(n, dtype)`` in generated kernels.

A ``local`` buffer that stays an array (its indices are not all constant) used to be an
``np.empty``: a heap block LLVM knows nothing about, so every ``acc[i] += ...`` of a register
tile is a load and a store through memory. An ``alloca`` is memory LLVM owns: it proves it
aliases no argument and, once its own unrolling makes the indices constant, SROA turns the
elements into registers: a depthwise-convolution row kernel with a register tile of
accumulators runs several times faster with its tile on the stack.

The array is uninitialised, like ``np.empty``, and lives until the function returns (the
``alloca`` sits in the function's entry block, so a call inside a loop does not grow the
stack). It must not escape the function: the emitter only uses it for ``local`` buffers of
at most :data:`MAX_STACK_BYTES`.

>>> import numpy as np
>>> from numba import njit
>>> @njit
... def squares():
...     a = stack_empty(4, np.float32)
...     for i in range(4):
...         a[i] = i * i
...     return a.sum()
>>> float(squares())
14.0
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: Largest local buffer put on the stack. Kernels run on Python threads and numba's
#: threading layer, whose stacks are 2 MiB or more; 32 KiB per buffer (an L1's worth)
#: leaves room for several and still covers every register tile.
MAX_STACK_BYTES = 32 * 1024

#: Byte alignment of a stack array: a cache line. LLVM would give an ``alloca`` of floats
#: the element's alignment (4, or 16 in practice), and then every other 32-byte vector
#: access of a tile read row by row straddles two cache lines.
STACK_ALIGN = 64


@intrinsic
def stack_empty(typingctx, n, dtype):
    """A 1-d C-contiguous array of ``n`` (a literal int) elements of ``dtype`` on the stack."""
    if not isinstance(n, types.IntegerLiteral) or not isinstance(dtype, (types.NumberClass, types.DType)):
        return None
    count = int(n.literal_value)
    elt = dtype.dtype
    arrty = types.Array(elt, 1, "C")

    def codegen(context, builder, signature, args):
        data_type = context.get_data_type(elt)
        ptr = cgutils.alloca_once(builder, data_type, size=count)
        ptr.align = STACK_ALIGN
        intp = context.get_value_type(types.intp)
        itemsize = context.get_abi_sizeof(data_type)
        ary = context.make_array(arrty)(context, builder)
        context.populate_array(
            ary,
            data=ptr,
            shape=[ir.Constant(intp, count)],
            strides=[ir.Constant(intp, itemsize)],
            itemsize=ir.Constant(intp, itemsize),
            meminfo=None,
        )
        return ary._getvalue()

    return arrty(n, dtype), codegen
