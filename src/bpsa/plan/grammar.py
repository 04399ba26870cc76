"""A small step grammar for the controller's tiling arithmetic.

The tiling of a layer (group sizes, channel blocks, row bands, tensor sizes) is written once,
as *programs* in this grammar (:mod:`bpsa.plan.setup`). The host evaluates them on Python
integers (:func:`evaluate`, behind :func:`bpsa.plan.tiling.plan`); the controller's set-up
sequencer compiles the same programs into FSM states, one state a step, with one shared
sequential multiplier / divider (:mod:`bpsa.gateware.controller.setup_sequencer`). So the
hardware's tile sizes and refusals are the host's by construction.

Expressions
    :class:`Expr` trees over names (descriptor fields, registers) and integer constants, with
    ``+ - * << >> & |`` (``&`` and ``|`` join conditions), comparisons, :func:`select`
    (``c ? a : b``), :func:`minimum`, :func:`low_bits` and :func:`high_bits`. Arithmetic is exact
    (Python integers, Amaranth's widening arithmetic); comparisons give 0 or 1. A value is cut to a
    register's width only when a step writes it (two's complement, as a hardware register holds it).
Steps
    :class:`Mul` / :class:`Div` (``dst = a * b``, ``a // b`` on the sequential unit: both
    operands unsigned, ``width`` bits; a product that does not fit, or a division by zero, is
    refused with ``overflow``), :class:`Set` (parallel assignments: every right-hand side is
    read before any register is written, as in one clock cycle), :class:`Check` (refuse with
    ``code`` when ``cond`` holds) and :class:`Skip` (skip the next ``count`` steps when
    ``cond`` holds).
"""

import operator
from dataclasses import dataclass

__all__ = ["Check", "Checks", "Div", "Expr", "Mul", "Refusal", "Set", "Skip", "evaluate",
           "fp32_reciprocal", "high_bits", "lift", "low_bits", "minimum", "select", "value",
           "var"]


class Expr:
    """An expression node; build with :func:`var`, :func:`lift` and the operators."""

    def _op(self, op, *others):
        return Op(op, (self,) + tuple(lift(o) for o in others))

    def _rop(self, op, other):
        return Op(op, (lift(other), self))

    def __add__(self, o): return self._op("+", o)
    def __radd__(self, o): return self._rop("+", o)
    def __sub__(self, o): return self._op("-", o)
    def __rsub__(self, o): return self._rop("-", o)
    def __mul__(self, o): return self._op("*", o)
    def __rmul__(self, o): return self._rop("*", o)
    def __lshift__(self, o): return self._op("<<", o)
    def __rshift__(self, o): return self._op(">>", o)
    def __and__(self, o): return self._op("&", o)
    def __rand__(self, o): return self._rop("&", o)
    def __or__(self, o): return self._op("|", o)
    def __ror__(self, o): return self._rop("|", o)
    def __lt__(self, o): return self._op("<", o)
    def __le__(self, o): return self._op("<=", o)
    def __gt__(self, o): return self._op(">", o)
    def __ge__(self, o): return self._op(">=", o)
    def __eq__(self, o): return self._op("==", o)         # noqa: E704
    def __ne__(self, o): return self._op("!=", o)
    __hash__ = object.__hash__

    def __bool__(self):
        raise TypeError("a plan expression has no truth value; use select() or a Check step")


@dataclass(frozen=True, eq=False)
class Name(Expr):
    name: str


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: int


@dataclass(frozen=True, eq=False)
class Op(Expr):
    op: str
    args: tuple


def var(name):
    """The value of a descriptor field or a register, by name."""
    return Name(name)


def lift(value):
    """An :class:`Expr` from an expression or an integer."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a plan expression takes integers, not {value!r}")
    return Const(value)


def select(cond, if_true, if_false):
    """``if_true`` where ``cond`` is non-zero, else ``if_false``."""
    return Op("select", (lift(cond), lift(if_true), lift(if_false)))


def minimum(*values):
    """The smallest of ``values`` (a chain of :func:`select`, first value first)."""
    out = lift(values[0])
    for v in values[1:]:
        out = select(lift(v) < out, v, out)
    return out


def low_bits(value, count):
    """1 when any of the ``count`` lowest bits of ``value`` is set (misalignment)."""
    return Op("low_bits", (lift(value), Const(count)))


def high_bits(value, first):
    """1 when ``value`` has a bit set at ``first`` or above, or is negative."""
    return Op("high_bits", (lift(value), Const(first)))


def fp32_reciprocal(value):
    """The fp32 encoding of ``1 / value`` (``value`` a positive integer below ``2**24``),
    rounded to nearest even (the floating-point average pooling's scale)."""
    return Op("fp32_reciprocal", (lift(value),))


def _fp32_reciprocal(v):
    """``1 / v`` rounded to fp32, in integers: ``v = 2**e`` gives ``2**-e``; otherwise the
    significand ``2**(e + 24) / v`` lies in ``(2**23, 2**24)``, never a tie (``v`` has an odd
    factor), rounded to nearest."""
    if not 1 <= v < 1 << 24:
        raise ValueError(f"fp32_reciprocal takes an integer in [1, 2**24), not {v}")
    e = v.bit_length() - 1
    if v == 1 << e:
        return (127 - e) << 23
    sig = ((1 << (e + 25)) + v) // (2 * v)
    return ((126 - e) << 23) + sig - (1 << 23)


# --- steps ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mul:
    dst: str
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Div:
    dst: str
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Set:
    """Parallel assignments ``((register, expression), ...)``."""
    assigns: tuple


@dataclass(frozen=True)
class Check:
    """Refuse with ``code`` when ``cond`` holds; ``why`` is the host's message, a format string
    over the register and field names."""
    cond: Expr
    code: int
    why: str = ""


@dataclass(frozen=True)
class Checks:
    """Several :class:`Check` in one step (one clock cycle): the first that holds refuses."""
    checks: tuple


@dataclass(frozen=True)
class Skip:
    """Skip the next ``count`` steps when ``cond`` holds."""
    cond: Expr
    count: int


class Refusal(Exception):
    """A :class:`Check` (or the unit's overflow) refused the layer: ``code``, ``step``, and the
    message."""

    def __init__(self, code, step, message):
        self.code, self.step = code, step
        super().__init__(message)


_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "<<": operator.lshift,
           ">>": operator.rshift, "&": operator.and_, "|": operator.or_}
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne}


def value(expr, env):
    """``expr`` on the integers of ``env`` (name -> int)."""
    expr = lift(expr)
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, Name):
        try:
            return env[expr.name]
        except KeyError:
            raise KeyError(f"plan expression reads {expr.name!r}, which has no value") from None
    args = [value(a, env) for a in expr.args]
    if expr.op in _BINARY:
        return _BINARY[expr.op](*args)
    if expr.op in _COMPARE:
        return int(_COMPARE[expr.op](*args))
    if expr.op == "select":
        return args[1] if args[0] else args[2]
    if expr.op == "low_bits":
        return int(args[0] & ((1 << args[1]) - 1) != 0)
    if expr.op == "fp32_reciprocal":
        return _fp32_reciprocal(args[0])
    if expr.op == "high_bits":
        return int(args[0] >> args[1] != 0)
    raise ValueError(f"unknown plan operation {expr.op!r}")


def evaluate(steps, env, widths, *, unit_width, overflow_code):
    """Run ``steps`` on ``env`` (name -> int; updated in place and returned). ``widths``: bits
    of each register a step writes. The sequential unit is ``unit_width`` bits; its overflow
    refuses with ``overflow_code``. Raises :class:`Refusal`."""
    mask = (1 << unit_width) - 1
    i = 0
    while i < len(steps):
        step = steps[i]
        if isinstance(step, (Mul, Div)):
            a, b = value(step.a, env) & mask, value(step.b, env) & mask
            if isinstance(step, Mul):
                result, overflow = a * b, a * b > mask
            else:
                result, overflow = (a // b, False) if b else (mask, True)
            if overflow:
                raise Refusal(overflow_code, step, f"the set-up arithmetic overflows "
                              f"{unit_width} bits ({a} {'*' if isinstance(step, Mul) else '//'}"
                              f" {b})")
            env[step.dst] = result & ((1 << widths[step.dst]) - 1)
        elif isinstance(step, Set):
            new = {dst: value(e, env) for dst, e in step.assigns}
            for dst, v in new.items():
                env[dst] = v & ((1 << widths[dst]) - 1)
        elif isinstance(step, (Check, Checks)):
            for check in step.checks if isinstance(step, Checks) else (step,):
                if value(check.cond, env):
                    raise Refusal(check.code, check, check.why.format(**env))
        elif isinstance(step, Skip):
            if value(step.cond, env):
                i += step.count
        else:
            raise TypeError(f"not a plan step: {step!r}")
        i += 1
    return env
