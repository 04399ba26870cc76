"""The set-up sequencer: the checks, geometry and tiling of a layer descriptor, in hardware.

It compiles the programs of :mod:`bpsa.plan.setup` (the step grammar of
:mod:`bpsa.plan.grammar`) into FSM states, one a step, on a shared sequential multiplier /
divider (:class:`bpsa.gateware.seq_arith.SeqMulDiv`, reached through the ``alu`` port): the
descriptor checks, the geometry, then the tiling and the address checks of the descriptor's
phase. The host evaluates the same programs on integers, so the plan it computes is this
one's by construction (``tests/test_gateware_controller_setup_sequencer.py`` checks it on
random layers).
"""

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import Config
from bpsa.gateware.axi_lite import descriptor_layout
from bpsa.gateware.controller.interfaces import AccelError
from bpsa.gateware.seq_arith import ArithOp, alu_signature
from bpsa.plan import grammar, setup
from bpsa.spec.regmap import Phase

__all__ = ["SetupSequencer", "compile_expr", "compile_steps", "plan_layout", "program_name"]


def program_name(key):
    """FSM name of a tiling program (:func:`bpsa.plan.setup.programs`' key)."""
    if key == setup.ZF_GRADIENT:
        return "GRADIENT_ZF"
    if key == setup.ZF_LOSS:
        return "LOSS_ZF"
    if key == setup.CF_FORWARD:
        return "FORWARD_CF"
    return Phase(key).name


def plan_layout(config):
    """The sequencer's result: every register of :data:`bpsa.plan.setup.PLAN_REGISTERS` and
    ``error`` (:class:`AccelError`; ``NONE`` when the layer runs)."""
    widths = setup.register_widths(config)
    return data.StructLayout({**{name: unsigned(widths[name]) for name in setup.PLAN_REGISTERS},
                              "error": AccelError})


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "&": lambda a, b: a & b, "|": lambda a, b: a | b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
        "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def compile_expr(expr, env):
    """The Amaranth value of the plan expression ``expr``; ``env`` maps names to values."""
    expr = grammar.lift(expr)
    if isinstance(expr, grammar.Const):
        return Const(expr.value)
    if isinstance(expr, grammar.Name):
        return env[expr.name]
    if expr.op in ("<<", ">>", "low_bits", "high_bits"):
        value, amount = compile_expr(expr.args[0], env), expr.args[1]
        if not isinstance(amount, grammar.Const):
            raise TypeError(f"{expr.op} takes a constant amount, not {amount!r}")
        n = amount.value
        return {"<<": lambda: value << n, ">>": lambda: value >> n,
                "low_bits": lambda: value[:n].any(),
                "high_bits": lambda: value[n:].any()}[expr.op]()
    args = [compile_expr(a, env) for a in expr.args]
    if expr.op == "select":
        return Mux(*args)
    return _OPS[expr.op](*args)


def compile_steps(m, name, steps, then, *, env, regs, alu, fail):
    """FSM states ``name_0`` ... running ``steps`` in order (inside ``m.FSM``), then going to
    state ``then`` (a name, or a callable adding the statements of that transition). ``regs``:
    register name -> Signal; ``fail(code)`` adds the statements of a refusal."""
    names = [f"{name}_{i}" for i in range(len(steps))]

    def goto(i):
        if i < len(steps):
            m.next = names[i]
        elif callable(then):
            then()
        else:
            m.next = then

    for i, step in enumerate(steps):
        with m.State(names[i]):
            if isinstance(step, (grammar.Mul, grammar.Div)):
                m.d.comb += [alu.start.eq(~alu.busy & ~alu.done),
                             alu.a.eq(compile_expr(step.a, env)),
                             alu.b.eq(compile_expr(step.b, env)),
                             alu.op.eq(ArithOp.MUL if isinstance(step, grammar.Mul)
                                       else ArithOp.DIV)]
                with m.If(alu.done):
                    m.d.sync += regs[step.dst].eq(alu.result)
                    with m.If(alu.overflow):
                        fail(AccelError.TOO_LARGE)
                    with m.Else():
                        goto(i + 1)
            elif isinstance(step, grammar.Set):
                m.d.sync += [regs[dst].eq(compile_expr(e, env)) for dst, e in step.assigns]
                goto(i + 1)
            elif isinstance(step, (grammar.Check, grammar.Checks)):
                checks = step.checks if isinstance(step, grammar.Checks) else (step,)
                for j, check in enumerate(checks):
                    with (m.If if j == 0 else m.Elif)(compile_expr(check.cond, env)):
                        fail(AccelError(int(check.code)))
                with m.Else():
                    goto(i + 1)
            elif isinstance(step, grammar.Skip):
                with m.If(compile_expr(step.cond, env)):
                    goto(i + 1 + step.count)
                with m.Else():
                    goto(i + 1)
            else:
                raise TypeError(f"not a plan step: {step!r}")


class SetupSequencer(wiring.Component):
    """Runs the set-up of one descriptor (see the module docstring).

    Parameters
    ----------
    config : Config
    phases : tuple of :class:`bpsa.spec.regmap.Phase`
        The phases the accelerator generates; a descriptor of another phase is refused
        (``PHASE``).

    Members
    -------
    desc : In(stream.Signature(descriptor_layout(config)))
        A descriptor to set up; taken when the sequencer is idle. Its payload must stay
        stable until ``plan`` is taken (the register file holds it).
    window_lo, window_hi : In(32)
        The DMA window the tensors must lie in.
    plan : Out(stream.Signature(plan_layout(config)))
        The registers and ``error``. ``valid`` rises in the cycle the last step finishes (its
        register writes land at the end of that cycle) or a check refuses; the registers hold
        their values until the next descriptor is taken.
    alu : Out(alu_signature())
        The sequential multiplier / divider, shared with the controller.
    busy : Out(1)
        A descriptor is being set up.
    """

    def __init__(self, config, phases):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        self.phases = tuple(Phase(p) for p in phases)
        if not self.phases:
            raise ValueError("phases must name at least one Phase")
        super().__init__({
            "desc": In(stream.Signature(descriptor_layout(config))),
            "window_lo": In(32), "window_hi": In(32),
            "plan": Out(stream.Signature(plan_layout(config))),
            "alu": Out(alu_signature(setup.UNIT_WIDTH)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        widths = setup.register_widths(cfg)
        regs = {name: Signal(widths[name], name=name) for name in setup.PLAN_REGISTERS}
        error = Signal(AccelError)
        d = self.desc.payload
        env = {f: getattr(d, f) for f in setup.DESCRIPTOR if f not in ("phase", "window_lo",
                                                                         "window_hi")}
        env["phase"] = d.phase.as_value()
        env.update(window_lo=self.window_lo, window_hi=self.window_hi, **regs)
        for name, reg in regs.items():
            m.d.comb += getattr(self.plan.payload, name).eq(reg)
        m.d.comb += self.plan.payload.error.eq(error)

        def fail(code):
            m.d.comb += [self.plan.valid.eq(1), self.plan.payload.error.eq(code)]
            m.d.sync += error.eq(code)
            m.next = "IDLE"

        def finish():
            m.d.comb += self.plan.valid.eq(1)
            m.next = "IDLE"

        with m.FSM(name="setup"):
            with m.State("IDLE"):
                m.d.comb += self.desc.ready.eq(1)
                with m.If(self.desc.valid):
                    m.d.sync += error.eq(AccelError.NONE)
                    m.next = "CHECK_0"
            compile_steps(m, "CHECK", setup.checks(cfg, self.phases) + setup.geometry(cfg),
                          "PHASE_SETUP", env=env, regs=regs, alu=self.alu, fail=fail)
            with m.State("PHASE_SETUP"):     # the descriptor's program (phase, mode)
                for i, (key, p, mode) in enumerate(setup.programs(cfg, self.phases)):
                    cond = d.phase.as_value() == p.value
                    if mode is not None:
                        cond = cond & (d.mode == mode.value)
                    with (m.If if i == 0 else m.Elif)(cond):
                        m.next = f"{program_name(key)}_0"
                with m.Else():
                    fail(AccelError.PHASE)
            for key, _, _ in setup.programs(cfg, self.phases):
                steps = setup.tiling_program(cfg, key) + setup.address_program(cfg, key)
                compile_steps(m, program_name(key), steps, finish, env=env, regs=regs,
                              alu=self.alu, fail=fail)
        m.d.comb += self.busy.eq(~self.desc.ready)
        return m
