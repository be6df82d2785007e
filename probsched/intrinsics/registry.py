"""The intrinsic registry: kept in the IR (:mod:`probsched.ir.intrinsic`), since the schedule's
``tensorize`` matches against its descriptions; this module is its name in the intrinsics
package."""

from ..ir.intrinsic import Intrinsic, get, list, register, unregister  # noqa: F401

__all__ = ["Intrinsic", "register", "unregister", "get", "list"]
