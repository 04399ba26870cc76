"""Pipeline registers: a signal delayed by a number of cycles."""

from amaranth.hdl import Signal

__all__ = ["delayed"]


def delayed(m, value, n, *, name="product"):
    """``value`` through ``n`` more registers (``<name>_d1``, ...), built into ``m``; ``value``
    itself when ``n`` is 0."""
    for k in range(n):
        later = Signal.like(value, name=f"{name}_d{k + 1}")
        m.d.sync += later.eq(value)
        value = later
    return value
