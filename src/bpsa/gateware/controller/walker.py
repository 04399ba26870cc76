"""The loop walker: the loops of a layer's phase over its tile plan, one FSM for every
generated phase (they share their registers: one phase runs at a time).

From the plan of the set-up sequencer it walks the layer (forward: images, output-channel
blocks, row bands, channel groups; loss: images, row bands, dX channel blocks, output-channel
groups; gradient: output-channel blocks, input-channel groups, images, row bands,
output-channel groups; FC backward: input blocks, batch chunks, output blocks), and for each
group hands the load unit the group's loads, then the step scheduler the run; it tells the
scheduler where a step's results go as soon as the step's last group has started. The
engine of the phase reads the group's geometry from ``run``, the result addressing the run's
place in P from ``geometry``. The per-step programs use the shared multiplier / divider.
"""

from types import SimpleNamespace

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import Config
from bpsa.gateware.axi_lite import Phase, descriptor_layout
from bpsa.gateware.controller.interfaces import AccelError
from bpsa.gateware.controller.load_unit import Cache, Target, load_layout
from bpsa.gateware.controller.setup_sequencer import compile_steps, plan_layout
from bpsa.gateware.controller.step_scheduler import store2_layout, store_layout
from bpsa.gateware.dma import DmaError
from bpsa.gateware.seq_arith import ArithOp, alu_signature
from bpsa.plan import bands as band_programs
from bpsa.plan import setup as setup_programs
from bpsa.spec import regmap
from bpsa.spec.errors import ERROR_DMA_BUS
from bpsa.spec.numeric import element_bytes

__all__ = ["LoopWalker", "Pulse", "engine_run_layout", "pool_walk_layout",
           "run_geometry_layout", "zero_free_run_layout"]

#: Width of sizes, counts and strides.
_W = 48


class Pulse:
    """In a ``("set", [...])`` step of a program: ``signal`` is high in that step's cycle
    (the step's other items are registered)."""

    def __init__(self, signal):
        self.signal = signal


def engine_run_layout(config):
    """One engine run (a group): ``batch`` (FC: batch rows), ``channels`` (input channels),
    ``out_channels``, ``height`` / ``out_height`` (the band's input / output rows) and the
    band's ``pad_top`` / ``pad_bottom``; the rest of the layer is the descriptor's."""
    dim = config.dim_width + 2
    return data.StructLayout({"batch": unsigned(_W), "channels": unsigned(_W),
                              "out_channels": unsigned(_W), "height": unsigned(dim),
                              "out_height": unsigned(dim), "pad_top": unsigned(dim),
                              "pad_bottom": unsigned(dim)})


def zero_free_run_layout(config):
    """What a zero-free loss run needs beyond :func:`engine_run_layout`: the band's top
    padding and ``pad_w`` and the dilations divided by the strides (quotient ``_q``, remainder
    ``_r``), the run's blocks of output channels (``kblocks``), the channels of its last block
    (``kvalid``) and its dY words a block (``plane``)."""
    dim = config.dim_width + 2
    return data.StructLayout({**{name: unsigned(dim) for name in (
        "pt_q", "pt_r", "pw_q", "pw_r", "dh_q", "dh_r", "dw_q", "dw_r", "kblocks", "kvalid")},
        "plane": unsigned(2 * dim)})


def pool_walk_layout(config):
    """A pooling run's band (:mod:`bpsa.gateware.engines.pool`): its first output / dX row
    ``y0`` and ``rows``, the first X row ``xlo`` and dY row ``dlo`` loaded, the walk's start
    ``q0``, ``rem0``; buffer words of a plane's X (``x_plane``) and dY (``d_plane``), and
    where dY starts in the bank (``d_offset``)."""
    dim = config.dim_width + 2
    return data.StructLayout({**{name: unsigned(dim) for name in (
        "y0", "rows", "xlo", "dlo", "drows", "q0", "rem0")},
        **{name: unsigned(_W) for name in ("x_plane", "d_plane", "d_offset")}})


def run_geometry_layout(config):
    """Where a run's results go in P: ``p_row`` words a result row, first row ``row_base``,
    ``kt_rows`` row tiles a column block; FC backward: ``fc_o0`` (the run's first output) and
    ``fc_dw_p0`` (P word of dW row 0); ``clear_words``: the P words the next step uses."""
    paw = exact_log2(config.buf_p_depth)
    return data.StructLayout({"p_row": unsigned(_W), "row_base": unsigned(config.dim_width + 1),
                              "kt_rows": unsigned(_W), "fc_o0": unsigned(_W),
                              "fc_dw_p0": unsigned(paw + 1), "clear_words": unsigned(_W)})


class LoopWalker(wiring.Component):
    """See the module docstring.

    Parameters
    ----------
    config : Config
    phases : tuple of :class:`bpsa.spec.regmap.Phase`
        The phases generated.

    Members
    -------
    go : In(1)
        The plan is ready: walk the descriptor's phase.
    desc : In(descriptor_layout(config)), plan : In(plan_layout(config))
    bank : In(1)
        The buffer half of the next load and run (the step scheduler's).
    xbank : Out(1)
        Forward and zero-free gradient: the half of buffer A holding the run's X (forward: the
        parity of its group count; gradient: of its image and band count).
    alu : Out(alu_signature(48))
    load : Out(stream.Signature(load_layout(config))), load_hit, load_done : In(1),
    load_error : In(DmaError)
        The load unit.
    run_req, last, new_step, final, save, save2 : Out(1), save_step : Out(store_layout()),
    save2_step : Out(store2_layout()); started, finished, sched_fail : In(1),
    sched_code : In(8)
        The step scheduler.
    run : Out(engine_run_layout(config)), geometry : Out(run_geometry_layout(config))
    fail : Out(1), fail_code : Out(8)
        A load, a run or a store failed, or a program overflowed: the layer ends.
    done : Out(1)
        The layer's last store is done.
    """

    def __init__(self, config, phases):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        self.phases = tuple(int(p) for p in phases)
        super().__init__({
            "go": In(1), "desc": In(descriptor_layout(config)), "plan": In(plan_layout(config)),
            "bank": In(1), "xbank": Out(1), "alu": Out(alu_signature(_W)),
            "load": Out(stream.Signature(load_layout(config))), "load_hit": In(1),
            "load_done": In(1), "load_error": In(DmaError),
            "run_req": Out(1), "last": Out(1), "new_step": Out(1), "final": Out(1),
            "save": Out(1), "save_step": Out(store_layout()), "save2": Out(1),
            "save2_step": Out(store2_layout()),
            "started": In(1), "finished": In(1), "sched_fail": In(1), "sched_code": In(8),
            "run": Out(engine_run_layout(config)),
            "zrun": Out(zero_free_run_layout(config)),
            "prun": Out(pool_walk_layout(config)),
            "geometry": Out(run_geometry_layout(config)),
            "fail": Out(1), "fail_code": Out(8), "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        e = self._env(m)
        P = regmap.Phase
        first = {P.FORWARD: "FWD_INIT", P.LOSS: "LOSS_INIT", P.GRADIENT: "GRAD_INIT",
                 P.FC_BACKWARD: "FC_INIT", setup_programs.ZF_GRADIENT: "ZG_INIT",
                 setup_programs.CF_FORWARD: "FCF_INIT",
                 setup_programs.ZF_LOSS: "ZL_INIT_0", P.POOL_FORWARD: "POOL_INIT",
                 P.POOL_BACKWARD: "POOL_INIT"}
        walks = {P.FORWARD: self._forward, P.LOSS: self._loss, P.GRADIENT: self._gradient,
                 P.FC_BACKWARD: self._fc, setup_programs.ZF_GRADIENT: self._zf_gradient,
                 setup_programs.CF_FORWARD: lambda e: self._forward(e, cf=True),
                 setup_programs.ZF_LOSS: self._zf_loss, P.POOL_FORWARD: self._pool,
                 P.POOL_BACKWARD: lambda e: None}
        programs = setup_programs.programs(self.config, self.phases)
        with m.FSM(name="walk"):
            with m.State("IDLE"):
                with m.If(self.go):
                    for i, (key, p, mode) in enumerate(programs):
                        cond = self.desc.phase.as_value() == p.value
                        if mode is not None:
                            cond = cond & (self.desc.mode == mode.value)
                        with (m.If if i == 0 else m.Elif)(cond):
                            m.next = first[key]
            e.program, e.out_band, e.dma_load, e.step_run = self._helpers(e)
            for key, _, _ in programs:
                walks[key](e)
        g = self.geometry
        m.d.comb += self.xbank.eq(e.xbank)
        m.d.comb += [g.p_row.eq(e.p_row), g.row_base.eq(e.row_base), g.kt_rows.eq(e.kt_rows),
                     g.fc_o0.eq(e.fc_o0), g.fc_dw_p0.eq(e.fc_dw_p0),
                     g.clear_words.eq(e.r["np"]),
                     self.run.batch.eq(e.grp_n), self.run.channels.eq(e.grp_c),
                     self.run.out_channels.eq(e.grp_k), self.run.height.eq(e.r["eh"]),
                     self.run.out_height.eq(e.r["eoh"]), self.run.pad_top.eq(e.r["pt"]),
                     self.run.pad_bottom.eq(e.r["pb"])]
        pr = self.prun
        m.d.comb += [pr.y0.eq(e.loop["o0"]), pr.rows.eq(e.r["obh"]), pr.xlo.eq(e.r["y0"]),
                     pr.dlo.eq(e.r["lo"]), pr.drows.eq(e.r["eoh"]), pr.q0.eq(e.r["pq"]),
                     pr.rem0.eq(e.r["pr"]),
                     pr.x_plane.eq(e.r["u"]), pr.d_plane.eq(e.r["eohow"]),
                     pr.d_offset.eq(e.r["dyoff"])]
        z = self.zrun
        m.d.comb += [z.pt_q.eq(e.r["zptq"]), z.pt_r.eq(e.r["zptr"]), z.pw_q.eq(e.r["zpwq"]),
                     z.pw_r.eq(e.r["zpwr"]), z.dh_q.eq(e.r["zdhq"]), z.dh_r.eq(e.r["zdhr"]),
                     z.dw_q.eq(e.r["zdwq"]), z.dw_r.eq(e.r["zdwr"]), z.kblocks.eq(e.r["zgrp"]),
                     z.kvalid.eq(e.r["zkv"]), z.plane.eq(e.r["eohow"])]
        return m

    def _env(self, m):
        """The walkers' registers (shared by the phases) and small helpers."""
        cfg = self.config
        dim, paw = cfg.dim_width, exact_log2(cfg.buf_p_depth)
        plan = self.plan
        r = {name: getattr(plan, name) for name in plan.shape().members if name != "error"}
        # the loops' registers; nb and np start from the plan's (LOSS_INIT), t, u and rowlen
        # are scratch: no other plan register is shadowed
        r.update({name: Signal(_W, name=name) for name in (
            "nb", "np", "t", "u", "rowlen", "len_a", "len_b", "len_x", "yoff", "blen", "dyoff",
            "eohow", "kend", "zstride", "xstep", "dstep", "zdhq", "zdhr", "zdwq", "zdwr",
            "zpwq", "zpwr", "zptq", "zptr", "zkv", "zgrp", "wcb", "zlen", "cend", "cbstep")})
        # row bands (bpsa.plan.tiling): this band's rows, the engine's sub-layer
        r.update({name: Signal(dim + 2, name=name) for name in (
            "obh", "y0", "yend", "eh", "eoh", "pt", "pb", "lo", "hi", "pq", "pr")})
        ptr = {name: Signal(33, name=f"ptr_{name}") for name in (
            "xn", "xg", "x", "w", "wk", "wg", "dy", "dyn", "out", "outn", "outg", "dwg")}
        loop = {name: Signal(_W, name=f"loop_{name}") for name in (
            "n", "c0", "k0", "kti", "o0", "kb0")}

        # outputs leave as accumulators, or as operands when requantized (REQUANT)
        oes = Signal(2, name="out_elem_shift")
        m.d.comb += oes.eq(Mux(self.desc.requant, exact_log2(element_bytes(cfg.operand_width)),
                               exact_log2(element_bytes(cfg.acc_width))))

        def mn(*vals):
            out = vals[0]
            for v in vals[1:]:
                out = Mux(v < out, v, out)
            return out

        def fail(code):
            m.d.comb += [self.fail.eq(1), self.fail_code.eq(code)]
            m.next = "IDLE"

        def save_step(rows, length, nb, stride, addr):
            """The step whose last group just started: what its store needs."""
            s = self.save_step
            return [self.save.eq(1), s.rows.eq(rows), s.length.eq(length), s.nb.eq(nb),
                    s.stride.eq(stride), s.addr.eq(addr)]

        return SimpleNamespace(
            m=m, r=r, ptr=ptr, loop=loop, mn=mn, fail=fail, save_step=save_step,
            banded=plan.banded,
            obs=exact_log2(element_bytes(cfg.operand_width)),
            abs_=exact_log2(element_bytes(cfg.acc_width)),
            oes=oes,                            # log2 bytes of an output element
            grp_c=Signal(_W, name="grp_c"),     # channels of the current group
            grp_k=Signal(_W, name="grp_k"),     # output channels of the current group
            grp_n=Signal(_W, name="grp_n"),     # FC: batch rows of the current group
            p_row=Signal(_W, name="p_row"),     # words per P row (result row) of the next run
            row_base=Signal(dim + 1, name="row_base"),  # gradient: first output channel
            kt_rows=Signal(_W, name="kt_rows"),  # row tiles per column block of the next run
            fc_o0=Signal(_W, name="fc_o0"),     # FC: first output (dW row) of the next run
            fc_dw_p0=Signal(paw + 1, name="fc_dw_p0"),  # FC: P word of dW row 0
            clear_dw=Signal(name="clear_dw"),   # FC: the next step clears the dW rows
            xbank=Signal(name="xbank_reg"))     # forward, ZG: the half of A holding X

    def _helpers(self, e):
        """FSM-state builders: programs, row bands, loads, runs (inside the FSM)."""
        m, r, loop, d, mn, fail = e.m, e.r, e.loop, self.desc, e.mn, e.fail
        banded, alu = e.banded, self.alu
        # the band programs (bpsa.plan.bands) read these and write their registers
        band_env = {"o0": loop["o0"], "obh": r["obh"], "h": d.h, "w": d.w,
                    "stride_h": d.stride_h, "pad_h": d.pad_h, "drh": r["drh"], "oh": r["oh"],
                    "ow": r["ow"], **{name: r[name] for name in band_programs.BAND_REGISTERS}}
        band_regs = {name: r[name] for name in band_programs.BAND_REGISTERS}
        e.band_env, e.band_regs = band_env, band_regs

        def program(name, steps, then):
            """FSM states running ``steps`` in order, then going to ``then``. A step is
            ``("mul"|"div", dst, a, b)``, ``("set", [statements])``, ``("check",
            condition, error)`` or ``("skip", condition, n)`` (skip the next ``n`` steps
            when ``condition`` holds)."""
            names = [f"{name}_{i}" for i in range(len(steps))] + [then]
            for i, step in enumerate(steps):
                nxt = names[i + 1]
                kind = step[0]
                if kind in ("mul", "div"):
                    _, dst, a, b = step
                    with m.State(names[i]):
                        m.d.comb += [alu.start.eq(~alu.busy & ~alu.done), alu.a.eq(a),
                                     alu.b.eq(b),
                                     alu.op.eq(ArithOp.MUL if kind == "mul"
                                               else ArithOp.DIV)]
                        with m.If(alu.done):
                            m.d.sync += dst.eq(alu.result)
                            with m.If(alu.overflow):
                                fail(AccelError.TOO_LARGE)
                            with m.Else():
                                m.next = nxt
                elif kind == "set":
                    with m.State(names[i]):
                        m.d.sync += [s for s in step[1] if not isinstance(s, Pulse)]
                        m.d.comb += [s.signal.eq(1) for s in step[1] if isinstance(s, Pulse)]
                        m.next = nxt
                elif kind == "skip":
                    _, cond, count = step
                    with m.State(names[i]):
                        with m.If(cond):
                            m.next = names[i + 1 + count]
                        with m.Else():
                            m.next = nxt
                else:
                    _, cond, code = step
                    with m.State(names[i]):
                        with m.If(cond):
                            fail(code)
                        with m.Else():
                            m.next = nxt

        # --- DMA helpers -------------------------------------------------------------------
        def dma_load(name, tgt, cache_key, addr, length, lanes, then, runs=None, offset=0,
                     run_words=None, bank=None):
            """States ``name`` (hand the load unit the load into bank ``bank``; it skips a
            slice the bank holds already) and ``name_WAIT``. ``length`` elements from
            ``addr``; with ``runs = (count, run_len, stride)``, ``count`` runs of ``run_len``
            elements ``stride`` bytes apart in memory, packed one after the other into the
            bank, a run every ``run_words`` buffer words (default ``run_len``: one element a
            word) (``length`` is then their total, which names the slice). ``bank``: the bank
            to load (default: the scheduler's, the next run's)."""
            count, run_len, stride = runs if runs is not None else (1, length, 0)
            if run_words is None:
                assert runs is None or lanes == 1, "runs of several lanes a word need run_words"
                run_words = run_len
            lp = self.load.payload
            with m.State(name):
                m.d.comb += [self.load.valid.eq(1), lp.target.eq(tgt),
                             lp.cache.eq(Cache[cache_key.upper()]),
                             lp.bank.eq(self.bank if bank is None else bank),
                             lp.offset.eq(offset), lp.addr.eq(addr), lp.length.eq(length),
                             lp.lanes.eq(lanes), lp.count.eq(count),
                             lp.run_len.eq(run_len), lp.run_words.eq(run_words),
                             lp.stride.eq(stride)]
                with m.If(self.load.ready & self.load_hit):
                    m.next = then
                with m.Elif(self.load.ready):
                    m.next = f"{name}_WAIT"
            with m.State(f"{name}_WAIT"):
                with m.If(self.load_done):
                    with m.If(self.load_error != DmaError.NONE):
                        fail(ERROR_DMA_BUS | self.load_error.as_value())
                    with m.Else():
                        m.next = then

        # --- row bands -------------------------------------------------------------------------
        def out_band(name, then):
            """Band of output rows ``[o0, o0 + obh)`` (forward, gradient): the X rows it
            loads (``y0``, ``eh``; ``yoff = y0 W``, ``blen = eh W``) and the engine's
            padding (bpsa.plan.tiling.bands)."""
            p = d.pad_h
            with m.State(name):
                m.d.sync += r["obh"].eq(mn(r["bh"], r["oh"] - loop["o0"]))
                with m.If(banded):
                    m.next = f"{name}_B_0"
                with m.Else():
                    m.d.sync += [r["y0"].eq(0), r["eh"].eq(d.h), r["pt"].eq(p),
                                 r["pb"].eq(p), r["yoff"].eq(0), r["blen"].eq(r["hw"])]
                    m.next = then
            compile_steps(m, f"{name}_B", band_programs.output_band(), then, env=band_env,
                          regs=band_regs, alu=alu, fail=fail)

        def step_run(prefix):
            """``prefix_RUN_WAIT``: the step scheduler runs the group just loaded (storing and
            clearing P first at a new step), then ``prefix_NEXT``; ``prefix_LAST``: it stores
            the layer's last step, and the layer is done."""
            with m.State(f"{prefix}_RUN_WAIT"):
                m.d.comb += self.run_req.eq(1)
                with m.If(self.sched_fail):
                    fail(self.sched_code)
                with m.Elif(self.started):
                    m.next = f"{prefix}_NEXT"
            with m.State(f"{prefix}_LAST"):
                m.d.comb += self.last.eq(1)
                with m.If(self.sched_fail):
                    fail(self.sched_code)
                with m.Elif(self.finished):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"

        return program, out_band, dma_load, step_run

    def _forward(self, e, cf=False):
        """The forward loops: images, steps of ``kb`` output-channel blocks, row bands, groups
        of input channels, the step's blocks (the runs). X of a group is loaded once into the
        half of buffer A of the group's parity and serves the step's blocks; P holds the
        band's Y of every block of the step (``p_row`` words a block). ``cf``: the
        channel-first front end's (states ``FCF_*``): X is channel-blocked HWC (``N x CT x H
        x W x L``, ``L = cl``), a group is one channel block, loaded as one run of the band's
        pixels (``L`` lanes a word) into the half of the channel-first banks of its parity."""
        S_ = "FCF" if cf else "FWD"
        m, r, ptr, loop, d = e.m, e.r, e.ptr, e.loop, self.desc
        program, dma_load, step_run, save_step, mn = (e.program, e.dma_load, e.step_run,
                                                      e.save_step, e.mn)
        grp_c, grp_k, banded, out_band = e.grp_c, e.grp_k, e.banded, e.out_band
        p_row, row_base, xbank = e.p_row, e.row_base, e.xbank
        obs, oes, C, B = e.obs, e.oes, self.config.cols, self.config.feeder_bus_width
        with m.State(f"{S_}_INIT"):
            m.d.sync += [loop["n"].eq(0), ptr["xn"].eq(d.addr_x), ptr["outg"].eq(d.addr_out)]
            m.next = f"{S_}_IMAGE"
        with m.State(f"{S_}_IMAGE"):       # image n
            m.d.sync += loop["kb0"].eq(0)
            m.next = f"{S_}_KBLK_0"
        program(f"{S_}_KBLK", [            # output-channel blocks [kb0, kend)
            ("set", [r["kend"].eq(mn(loop["kb0"] + r["kb"], r["kt"])), loop["o0"].eq(0),
                     ptr["out"].eq(ptr["outg"])]),
            ("mul", r["zstride"], r["crs"], C),          # elements of a block of W
            ("mul", r["t"], loop["kb0"], r["zstride"]),
            ("mul", r["dstep"], r["ohow"], C),           # elements of a block of Y
            ("mul", r["xstep"], r["dstep"], r["kend"] - loop["kb0"]),
            ("set", [ptr["wk"].eq(d.addr_w + (r["t"] << obs))]),
        ], f"{S_}_BAND")
        out_band(f"{S_}_BAND", f"{S_}_BANDP_0")
        program(f"{S_}_BANDP", [           # step (n, kb0, band o0): P words, first group
            *([("mul", r["u"], r["yoff"], r["cl"])] if cf else []),   # HWC: yoff pixels
            ("mul", r["t"], r["obh"], r["ow"]),
            ("mul", r["rowlen"], r["t"], C),
            ("mul", r["np"], r["t"], r["kend"] - loop["kb0"]),
            ("set", [loop["c0"].eq(0), p_row.eq(r["t"]),
                     ptr["x"].eq(ptr["xn"] + ((r["u"] if cf else r["yoff"]) << obs)),
                     ptr["wg"].eq(ptr["wk"]), Pulse(self.new_step)]),
        ], f"{S_}_GROUP_0")
        program(f"{S_}_GROUP", [           # input channels [c0, c0 + cg): X once for the blocks
            ("set", [grp_c.eq(mn(r["cg"], d.c - loop["c0"])), xbank.eq(~xbank),
                     loop["kti"].eq(loop["kb0"]), loop["k0"].eq(loop["kb0"] * C),
                     ptr["w"].eq(ptr["wg"])]),
            ("mul", r["len_a"], r["blen"], r["cl"] if cf else grp_c),
            ("mul", r["t"], r["rs"], grp_c),
            ("mul", r["len_b"], r["t"], C),
        ], f"{S_}_LOAD_X")
        if cf:
            dma_load(f"{S_}_LOAD_X", Target.CF_X, "cf", ptr["x"], r["len_a"], r["cl"],
                     f"{S_}_BLOCK", bank=self.xbank)
        else:
            dma_load(f"{S_}_LOAD_X", Target.FWD_X, "a", ptr["x"], r["len_a"], B,
                     f"{S_}_BLOCK", bank=self.xbank)
        with m.State(f"{S_}_BLOCK"):       # output-channel block kti: its W words of the group
            m.d.sync += [row_base.eq(loop["kti"] - loop["kb0"]),
                         grp_k.eq(mn(C, d.k - loop["k0"]))]
            m.next = f"{S_}_LOAD_W"
        dma_load(f"{S_}_LOAD_W", Target.FWD_W, "b", ptr["w"], r["len_b"], C,
                 f"{S_}_RUN_WAIT")
        step_run(S_)
        with m.State(f"{S_}_NEXT"):
            m.d.sync += ptr["w"].eq(ptr["w"] + (r["zstride"] << obs))
            with m.If(loop["kti"] + 1 < r["kend"]):
                m.d.sync += [loop["kti"].eq(loop["kti"] + 1), loop["k0"].eq(loop["k0"] + C)]
                m.next = f"{S_}_BLOCK"
            with m.Elif(loop["c0"] + grp_c < d.c):
                m.d.sync += [loop["c0"].eq(loop["c0"] + grp_c),
                             ptr["x"].eq(ptr["x"] + ((r["cpl"] if cf else
                                                      Mux(banded, r["hw"], r["len_a"])) << obs)),
                             ptr["wg"].eq(ptr["wg"] + (r["len_b"] << obs))]
                m.next = f"{S_}_GROUP_0"
            with m.Else():                # the step's last group runs: next step
                m.d.comb += save_step(r["kend"] - loop["kb0"], r["rowlen"], p_row,
                                      r["dstep"] << oes, ptr["out"])
                m.d.sync += ptr["out"].eq(ptr["out"] + (r["rowlen"] << oes))
                with m.If(loop["o0"] + r["obh"] < r["oh"]):
                    m.d.sync += loop["o0"].eq(loop["o0"] + r["obh"])
                    m.next = f"{S_}_BAND"
                with m.Else():            # the blocks' Y is stored: the next blocks
                    m.d.sync += ptr["outg"].eq(ptr["outg"] + (r["xstep"] << oes))
                    with m.If(r["kend"] < r["kt"]):
                        m.d.sync += loop["kb0"].eq(r["kend"])
                        m.next = f"{S_}_KBLK_0"
                    with m.Elif(loop["n"] + 1 < d.n):
                        m.d.sync += [loop["n"].eq(loop["n"] + 1),
                                     ptr["xn"].eq(ptr["xn"] + (r["cimg" if cf else "chw"]
                                                                << obs))]
                        m.next = f"{S_}_IMAGE"
                    with m.Else():
                        m.d.comb += self.final.eq(1)
                        m.next = f"{S_}_LAST"

    def _loss(self, e):
        """The loss loops: images, row bands of dX, dX channel blocks, groups of output channels."""
        m, r, ptr, loop, d = e.m, e.r, e.ptr, e.loop, self.desc
        program, dma_load, step_run, save_step, mn = (e.program, e.dma_load, e.step_run,
                                                      e.save_step, e.mn)
        grp_c, grp_k, banded, plan = e.grp_c, e.grp_k, e.banded, self.plan
        obs, abs_, C, R = e.obs, e.abs_, self.config.cols, self.config.rows
        p_row, row_base, kt_rows = e.p_row, e.row_base, e.kt_rows
        with m.State("LOSS_INIT"):
            m.d.sync += [r["nb"].eq(plan.nb), r["np"].eq(plan.np)]
            m.d.sync += [loop["n"].eq(0), ptr["dyn"].eq(d.addr_dy),
                         ptr["outn"].eq(d.addr_out), row_base.eq(0)]
            m.next = "LOSS_OUTER"
        with m.State("LOSS_OUTER"):      # image n
            m.d.sync += loop["o0"].eq(0)
            m.next = "LOSS_BAND"
        with m.State("LOSS_BAND"):       # band of dX rows [o0, o0 + obh)
            m.d.sync += [r["obh"].eq(mn(r["bh"], d.h - loop["o0"])), loop["c0"].eq(0)]
            with m.If(banded):
                m.next = "LOSS_BAND_B_0"
            with m.Else():
                m.d.sync += [r["eh"].eq(d.h), r["eoh"].eq(r["oh"]), r["pt"].eq(d.pad_h),
                             r["pb"].eq(d.pad_h), r["dyoff"].eq(0), r["yoff"].eq(0),
                             r["blen"].eq(r["hw"]), r["eohow"].eq(r["ohow"])]
                m.next = "LOSS_BANDP_0"
        # the dY rows [lo, hi] it needs (bpsa.plan.bands), then its P words
        compile_steps(m, "LOSS_BAND_B", band_programs.loss_band(), "LOSS_BAND_P_0",
                      env=e.band_env, regs=e.band_regs, alu=self.alu, fail=e.fail)
        program("LOSS_BAND_P", [
            ("div", r["nb"], r["blen"] + (C - 1), C),
            ("mul", r["np"], r["cg"], r["nb"]),
        ], "LOSS_BANDP_0")
        program("LOSS_BANDP", [          # step (n, band o0, dX channel block c0)
            ("set", [grp_c.eq(mn(r["cg"], d.c - loop["c0"]))]),
            ("mul", r["t"], loop["c0"], r["hw"]),
            ("mul", r["u"], loop["c0"], r["rs"]),
            ("set", [loop["k0"].eq(0), ptr["w"].eq(d.addr_w + (r["u"] << obs)),
                     p_row.eq(r["nb"]), Pulse(self.new_step),
                     ptr["out"].eq(ptr["outn"] + ((r["t"] + r["yoff"]) << abs_))]),
        ], "LOSS_GROUP_0")
        program("LOSS_GROUP", [
            ("set", [grp_k.eq(mn(r["kg"], d.k - loop["k0"]))]),
            ("mul", r["u"], r["rs"], grp_c),
            ("mul", r["len_a"], r["u"], grp_k),
            ("mul", r["len_x"], r["crs"], grp_k),
            ("mul", r["len_b"], r["eohow"], grp_k),
            ("mul", r["t"], r["rs"], grp_k),
            ("div", kt_rows, r["t"] + (R - 1), R),
            ("mul", r["t"], r["ohow"], loop["k0"]),
            ("set", [ptr["dy"].eq(ptr["dyn"] + ((r["t"] + r["dyoff"]) << obs))]),
        ], "LOSS_LOAD_A")
        # W[group, block]: one run per output channel unless the block is all of C
        all_c = grp_c == d.c
        dma_load("LOSS_LOAD_A", Target.BWD_A, "a", ptr["w"], r["len_a"], 1,
                 "LOSS_LOAD_B", runs=(Mux(all_c, 1, grp_k), Mux(all_c, r["len_a"], r["u"]),
                                      r["crs"] << obs))
        dma_load("LOSS_LOAD_B", Target.BWD_B, "b", ptr["dy"], r["len_b"], 1,
                 "LOSS_RUN_WAIT", runs=(Mux(banded, grp_k, 1),
                                        Mux(banded, r["eohow"], r["len_b"]),
                                        r["ohow"] << obs))
        step_run("LOSS")
        with m.State("LOSS_NEXT"):
            m.d.sync += [loop["k0"].eq(loop["k0"] + grp_k),
                         ptr["w"].eq(ptr["w"] + (r["len_x"] << obs))]
            with m.If(loop["k0"] + grp_k < d.k):
                m.next = "LOSS_GROUP_0"
            with m.Else():                # the step's last group runs: next step
                m.d.comb += save_step(grp_c, r["blen"], r["nb"], r["hw"] << abs_,
                                      ptr["out"])
                with m.If(loop["c0"] + grp_c < d.c):
                    m.d.sync += loop["c0"].eq(loop["c0"] + grp_c)
                    m.next = "LOSS_BANDP_0"
                with m.Elif(loop["o0"] + r["obh"] < d.h):
                    m.d.sync += loop["o0"].eq(loop["o0"] + r["obh"])
                    m.next = "LOSS_BAND"
                with m.Elif(loop["n"] + 1 < d.n):
                    m.d.sync += [loop["n"].eq(loop["n"] + 1),
                                 ptr["dyn"].eq(ptr["dyn"] + (r["kohow"] << obs)),
                                 ptr["outn"].eq(ptr["outn"] + (r["chw"] << abs_))]
                    m.next = "LOSS_OUTER"
                with m.Else():
                    m.d.comb += self.final.eq(1)
                    m.next = "LOSS_LAST"


    def _gradient(self, e):
        """The gradient loops: output-channel blocks, input-channel groups, images, row bands
        of dY, groups of output channels."""
        m, r, ptr, loop, d = e.m, e.r, e.ptr, e.loop, self.desc
        program, dma_load, step_run, save_step, mn = (e.program, e.dma_load, e.step_run,
                                                      e.save_step, e.mn)
        grp_c, grp_k, banded, out_band = e.grp_c, e.grp_k, e.banded, e.out_band
        obs, abs_, C, R = e.obs, e.abs_, self.config.cols, self.config.rows
        p_row, row_base, kt_rows = e.p_row, e.row_base, e.kt_rows
        with m.State("GRAD_INIT"):
            m.d.sync += [loop["kb0"].eq(0)]
            m.next = "GRAD_KBLK_0"
        program("GRAD_KBLK", [           # output channels [kb0, kend)
            ("set", [r["kend"].eq(mn(loop["kb0"] + r["kb"], d.k)), loop["c0"].eq(0),
                     ptr["xg"].eq(d.addr_x)]),
            ("mul", r["t"], loop["kb0"], r["crs"]),
            ("set", [ptr["outg"].eq(d.addr_out + (r["t"] << abs_))]),
        ], "GRAD_OUTER_0")
        program("GRAD_OUTER", [          # step: output block kb0, channel group c0
            ("set", [grp_c.eq(mn(r["cg"], d.c - loop["c0"]))]),
            ("mul", r["rowlen"], r["rs"], grp_c),
            ("div", r["nb"], r["rowlen"] + (C - 1), C),
            ("mul", r["np"], r["kend"] - loop["kb0"], r["nb"]),
            ("mul", r["len_x"], r["hw"], grp_c),
            ("set", [p_row.eq(r["nb"]), loop["n"].eq(0), ptr["dyn"].eq(d.addr_dy),
                     ptr["xn"].eq(ptr["xg"]), Pulse(self.new_step)]),
        ], "GRAD_IMAGE")
        with m.State("GRAD_IMAGE"):      # image n
            m.d.sync += loop["o0"].eq(0)
            m.next = "GRAD_BAND"
        out_band("GRAD_BAND", "GRAD_BANDP_0")
        program("GRAD_BANDP", [          # band of dY rows [o0, o0 + obh)
            ("mul", r["t"], r["obh"] - 1, d.stride_h),
            ("mul", r["t"], r["wdp1"], r["t"] + 1),
            ("div", kt_rows, r["t"] + (R - 1), R),
            ("mul", r["eohow"], r["obh"], r["ow"]),
            ("mul", r["dyoff"], loop["o0"], r["ow"]),
            ("mul", r["len_b"], r["blen"], grp_c),
            ("set", [r["eoh"].eq(r["obh"]), loop["k0"].eq(loop["kb0"]),
                     ptr["x"].eq(ptr["xn"] + (r["yoff"] << obs))]),
        ], "GRAD_GROUP_0")
        program("GRAD_GROUP", [          # output-channel group k0
            ("set", [grp_k.eq(mn(r["kg"], r["kend"] - loop["k0"])),
                     row_base.eq(loop["k0"] - loop["kb0"])]),
            ("mul", r["len_a"], r["eohow"], grp_k),
            ("mul", r["t"], r["ohow"], loop["k0"]),
            ("set", [ptr["dy"].eq(ptr["dyn"] + ((r["t"] + r["dyoff"]) << obs))]),
        ], "GRAD_LOAD_A")
        dma_load("GRAD_LOAD_A", Target.BWD_A, "a", ptr["dy"], r["len_a"], 1,
                 "GRAD_LOAD_B", runs=(Mux(banded, grp_k, 1),
                                      Mux(banded, r["eohow"], r["len_a"]),
                                      r["ohow"] << obs))
        dma_load("GRAD_LOAD_B", Target.BWD_B, "b", ptr["x"], r["len_b"], 1,
                 "GRAD_RUN_WAIT", runs=(Mux(banded, grp_c, 1),
                                        Mux(banded, r["blen"], r["len_b"]),
                                        r["hw"] << obs))
        step_run("GRAD")
        with m.State("GRAD_NEXT"):
            with m.If(loop["k0"] + grp_k < r["kend"]):
                m.d.sync += loop["k0"].eq(loop["k0"] + grp_k)
                m.next = "GRAD_GROUP_0"
            with m.Elif(loop["o0"] + r["obh"] < r["oh"]):
                m.d.sync += loop["o0"].eq(loop["o0"] + r["obh"])
                m.next = "GRAD_BAND"
            with m.Elif(loop["n"] + 1 < d.n):
                m.d.sync += [loop["n"].eq(loop["n"] + 1),
                             ptr["dyn"].eq(ptr["dyn"] + (r["kohow"] << obs)),
                             ptr["xn"].eq(ptr["xn"] + (r["chw"] << obs))]
                m.next = "GRAD_IMAGE"
            with m.Else():                # the step's last group runs: next step
                m.d.comb += save_step(r["kend"] - loop["kb0"], r["rowlen"], r["nb"],
                                      r["crs"] << abs_, ptr["outg"])
                with m.If(loop["c0"] + grp_c < d.c):
                    m.d.sync += [loop["c0"].eq(loop["c0"] + grp_c),
                                 ptr["xg"].eq(ptr["xg"] + (r["len_x"] << obs)),
                                 ptr["outg"].eq(ptr["outg"] + (r["rowlen"] << abs_))]
                    m.next = "GRAD_OUTER_0"
                with m.Elif(r["kend"] < d.k):
                    m.d.sync += loop["kb0"].eq(r["kend"])
                    m.next = "GRAD_KBLK_0"
                with m.Else():
                    m.d.comb += self.final.eq(1)
                    m.next = "GRAD_LAST"


    def _pool(self, e):
        """The pooling loops, forward and backward: steps of ``pg`` planes (the N C planes
        in memory order), each in bands of rows (one band when the plane fits); a run per
        band. X (not for an average's backward without RELU) and dY (backward) of the step's
        planes go to the pooling buffer's bank, dY after X; P holds the band's output of each
        plane (``p_row`` words a plane)."""
        m, r, ptr, loop, d = e.m, e.r, e.ptr, e.loop, self.desc
        program, dma_load, step_run, save_step, mn = (e.program, e.dma_load, e.step_run,
                                                      e.save_step, e.mn)
        grp_c, p_row, plan = e.grp_c, e.p_row, self.plan
        obs, oes, C = e.obs, e.oes, self.config.cols
        bwd = d.phase.as_value() == regmap.Phase.POOL_BACKWARD
        xskip = bwd & (d.pool_kind == regmap.PoolKind.AVG) & ~d.relu
        out_rows = Mux(bwd, d.h, r["oh"])          # rows of a plane's output
        out_w = Mux(bwd, d.w, r["ow"])
        out_plane = Mux(bwd, r["hw"], r["ohow"])   # elements of a plane's output
        with m.State("POOL_INIT"):
            m.d.sync += [loop["n"].eq(0), ptr["xn"].eq(d.addr_x), ptr["dyn"].eq(d.addr_dy),
                         ptr["outn"].eq(d.addr_out), e.row_base.eq(0)]
            m.next = "POOL_STEP_0"
        program("POOL_STEP", [            # planes [n, n + pg)
            ("set", [grp_c.eq(mn(r["pg"], r["planes"] - loop["n"])), loop["o0"].eq(0)]),
            ("mul", r["xstep"], grp_c, r["hw"]),
            ("mul", r["dstep"], grp_c, r["ohow"]),
            ("mul", r["zstride"], grp_c, out_plane),
        ], "POOL_BAND")
        with m.State("POOL_BAND"):        # rows [o0, o0 + obh) of the output / dX
            m.d.sync += r["obh"].eq(mn(r["bh"], out_rows - loop["o0"]))
            with m.If(bwd):
                m.next = "POOL_BB_0"
            with m.Else():
                m.next = "POOL_BF_0"
        compile_steps(m, "POOL_BF", band_programs.output_band(), "POOL_BF_E", env=e.band_env,
                      regs=e.band_regs, alu=self.alu, fail=e.fail)
        with m.State("POOL_BF_E"):        # the forward loads no dY
            m.d.sync += [r["lo"].eq(0), r["eoh"].eq(0)]
            m.next = "POOL_BP_0"
        compile_steps(m, "POOL_BB", band_programs.pool_backward_band(), "POOL_BP_0",
                      env=e.band_env, regs=e.band_regs, alu=self.alu, fail=e.fail)
        program("POOL_BP", [              # the step's loads and P words
            ("mul", r["len_x"], r["eh"], d.w),
            ("set", [r["u"].eq(Mux(xskip, 0, r["len_x"]))]),
            ("mul", r["len_a"], grp_c, r["u"]),
            ("mul", r["eohow"], r["eoh"], r["ow"]),
            ("mul", r["len_b"], grp_c, r["eohow"]),
            ("mul", r["rowlen"], r["obh"], out_w),
            ("div", p_row, r["rowlen"] + (C - 1), C),
            ("mul", r["np"], grp_c, p_row),
            ("mul", r["t"], r["y0"], d.w),
            ("mul", r["blen"], r["lo"], r["ow"]),
            ("mul", r["yoff"], loop["o0"], out_w),
            ("set", [r["dyoff"].eq(r["len_a"]), Pulse(self.new_step),
                     ptr["x"].eq(ptr["xn"] + (r["t"] << obs)),
                     ptr["dy"].eq(ptr["dyn"] + (r["blen"] << obs)),
                     ptr["out"].eq(ptr["outn"] + (r["yoff"] << oes))]),
        ], "POOL_LOAD_X")
        with m.State("POOL_LOAD_X"):
            with m.If(xskip):
                m.next = "POOL_LOAD_D"
            with m.Else():
                m.next = "POOL_LOAD_XL"
        dma_load("POOL_LOAD_XL", Target.POOL, "pool_x", ptr["x"], r["len_a"], 1,
                 "POOL_LOAD_D", runs=(grp_c, r["len_x"], r["hw"] << obs))
        with m.State("POOL_LOAD_D"):
            with m.If(bwd & (r["eoh"] != 0)):
                m.next = "POOL_LOAD_DL"
            with m.Else():
                m.next = "POOL_RUN_WAIT"
        dma_load("POOL_LOAD_DL", Target.POOL, "pool_dy", ptr["dy"], r["len_b"], 1,
                 "POOL_RUN_WAIT", runs=(grp_c, r["eohow"], r["ohow"] << obs),
                 offset=r["dyoff"])
        step_run("POOL")
        with m.State("POOL_NEXT"):        # every run is a step
            m.d.comb += save_step(grp_c, r["rowlen"], p_row, out_plane << oes, ptr["out"])
            with m.If(loop["o0"] + r["obh"] < out_rows):
                m.d.sync += loop["o0"].eq(loop["o0"] + r["obh"])
                m.next = "POOL_BAND"
            with m.Elif(loop["n"] + grp_c < r["planes"]):
                m.d.sync += [loop["n"].eq(loop["n"] + grp_c),
                             ptr["xn"].eq(ptr["xn"] + (r["xstep"] << obs)),
                             ptr["dyn"].eq(ptr["dyn"] + (r["dstep"] << obs)),
                             ptr["outn"].eq(ptr["outn"] + (r["zstride"] << oes))]
                m.next = "POOL_STEP_0"
            with m.Else():
                m.d.comb += self.final.eq(1)
                m.next = "POOL_LAST"

    def _zf_gradient(self, e):
        """The zero-free gradient loops: blocks of ``kb`` output-channel blocks, input-channel
        blocks (a step each), images, row bands of dY, output-channel blocks (the groups).
        X is blocked by ``B`` channels, dY by ``cols``, dW leaves blocked like the forward's W
        (:mod:`bpsa.gateware.accelerator`)."""
        m, r, ptr, loop, d = e.m, e.r, e.ptr, e.loop, self.desc
        program, dma_load, step_run, save_step, mn = (e.program, e.dma_load, e.step_run,
                                                      e.save_step, e.mn)
        grp_c, banded, out_band, plan = e.grp_c, e.banded, e.out_band, self.plan
        obs, abs_, C, B = e.obs, e.abs_, self.config.cols, self.config.feeder_bus_width
        p_row, row_base = e.p_row, e.row_base
        with m.State("ZG_INIT"):
            m.d.sync += [r["nb"].eq(plan.nb), loop["kb0"].eq(0)]
            m.next = "ZG_KBLK_0"
        program("ZG_KBLK", [             # output-channel blocks [kb0, kend)
            ("set", [r["kend"].eq(mn(loop["kb0"] + r["kb"], r["kt"])), loop["c0"].eq(0)]),
            ("mul", r["t"], loop["kb0"], r["crs"]),
            ("mul", r["t"], r["t"], C),
            ("mul", r["zstride"], r["crs"], C),
            ("mul", r["xstep"], r["xwords"], B),
            ("mul", r["dstep"], r["dwords"], C),
            ("set", [ptr["outg"].eq(d.addr_out + (r["t"] << abs_))]),
        ], "ZG_STEP_0")
        program("ZG_STEP", [             # step: input-channel block c0 (B channels)
            ("set", [grp_c.eq(mn(B, d.c - loop["c0"])), loop["n"].eq(0),
                     ptr["dyn"].eq(d.addr_dy)]),
            ("mul", r["np"], r["kend"] - loop["kb0"], r["nb"]),
            ("mul", r["rowlen"], r["rs"], grp_c),
            ("mul", r["rowlen"], r["rowlen"], C),
            ("mul", r["t"], loop["c0"], r["rs"]),
            ("mul", r["t"], r["t"], C),
            ("mul", r["u"], loop["c0"], r["hw"]),
            ("set", [ptr["out"].eq(ptr["outg"] + (r["t"] << abs_)), p_row.eq(r["nb"]),
                     ptr["xn"].eq(d.addr_x + (r["u"] << obs)), Pulse(self.new_step)]),
        ], "ZG_IMAGE")
        with m.State("ZG_IMAGE"):        # image n
            m.d.sync += loop["o0"].eq(0)
            m.next = "ZG_BAND"
        out_band("ZG_BAND", "ZG_BANDP_0")
        xbank = e.xbank
        program("ZG_BANDP", [            # band of dY rows [o0, o0 + obh)
            ("set", [xbank.eq(~xbank)]),
            ("mul", r["t"], r["yoff"], B),
            ("mul", r["len_a"], r["blen"], B),
            ("mul", r["eohow"], r["obh"], r["ow"]),
            ("mul", r["len_b"], r["eohow"], C),
            ("mul", r["dyoff"], loop["o0"], r["ow"]),
            ("mul", r["dyoff"], r["dyoff"], C),
            ("set", [r["eoh"].eq(r["obh"]), loop["k0"].eq(loop["kb0"]),
                     ptr["x"].eq(ptr["xn"] + (r["t"] << obs))]),
        ], "ZG_GROUP_0")
        program("ZG_GROUP", [            # output-channel block k0
            ("set", [row_base.eq(loop["k0"] - loop["kb0"])]),
            ("mul", r["t"], loop["k0"], r["ohow"]),
            ("mul", r["t"], r["t"], C),
            ("set", [ptr["dy"].eq(ptr["dyn"] + ((r["t"] + r["dyoff"]) << obs))]),
        ], "ZG_LOAD_X")
        # X of an image stays in the bank of the image's parity for all its runs (loaded once,
        # while the image before computes from the other bank)
        dma_load("ZG_LOAD_X", Target.FWD_X, "a", ptr["x"], r["len_a"], B, "ZG_LOAD_DY",
                 bank=self.xbank)
        dma_load("ZG_LOAD_DY", Target.FWD_W, "b", ptr["dy"], r["len_b"], C, "ZG_RUN_WAIT")
        step_run("ZG")
        with m.State("ZG_NEXT"):
            with m.If(loop["k0"] + 1 < r["kend"]):
                m.d.sync += loop["k0"].eq(loop["k0"] + 1)
                m.next = "ZG_GROUP_0"
            with m.Elif(loop["o0"] + r["obh"] < r["oh"]):
                m.d.sync += loop["o0"].eq(loop["o0"] + r["obh"])
                m.next = "ZG_BAND"
            with m.Elif(loop["n"] + 1 < d.n):
                m.d.sync += [loop["n"].eq(loop["n"] + 1),
                             ptr["xn"].eq(ptr["xn"] + (r["xstep"] << obs)),
                             ptr["dyn"].eq(ptr["dyn"] + (r["dstep"] << obs))]
                m.next = "ZG_IMAGE"
            with m.Else():                # the step's last group runs: next step
                m.d.comb += save_step(r["kend"] - loop["kb0"], r["rowlen"], r["nb"],
                                      r["zstride"] << abs_, ptr["out"])
                with m.If(loop["c0"] + grp_c < d.c):
                    m.d.sync += loop["c0"].eq(loop["c0"] + grp_c)
                    m.next = "ZG_STEP_0"
                with m.Elif(r["kend"] < r["kt"]):
                    m.d.sync += loop["kb0"].eq(r["kend"])
                    m.next = "ZG_KBLK_0"
                with m.Else():
                    m.d.comb += self.final.eq(1)
                    m.next = "ZG_LAST"

    def _zf_loss(self, e):
        """The zero-free loss loops: steps of ``cn`` blocks of ``cols`` input channels, row
        bands of dX, steps of ``zn`` images (their dX bands in P; ``cn`` or ``zn`` is 1),
        groups of ``kg`` blocks of output channels, images (dY of the group loaded once into
        the half of buffer A of its parity), the step's input-channel blocks (a run each; with
        one block, W of the group stays in its bank across the images). dY and dX
        are blocked by ``cols`` channels, W is read with the input channels as lanes
        (:mod:`bpsa.gateware.accelerator`)."""
        m, r, ptr, loop, d = e.m, e.r, e.ptr, e.loop, self.desc
        program, dma_load, step_run, save_step, mn = (e.program, e.dma_load, e.step_run,
                                                      e.save_step, e.mn)
        banded, plan = e.banded, self.plan
        obs, oes, C = e.obs, e.oes, self.config.cols
        p_row, row_base, xbank = e.p_row, e.row_base, e.xbank
        cb = loop["kb0"]                 # the input block of the run, and the first image of
        n0 = loop["kti"]                 # the step (loop registers the forward's loops use;
        zng = e.grp_n                    # one phase runs at a time)
        program("ZL_INIT", [             # the strides' quotients of the dilations and pad_w
            ("set", [r["nb"].eq(plan.nb), loop["c0"].eq(0)]),
            ("div", r["zdhq"], d.dil_h, d.stride_h),
            ("div", r["zdwq"], d.dil_w, d.stride_w),
            ("div", r["zpwq"], d.pad_w, d.stride_w),
            ("mul", r["t"], r["zdhq"], d.stride_h),
            ("mul", r["u"], r["zdwq"], d.stride_w),
            ("set", [r["zdhr"].eq(d.dil_h - r["t"]), r["zdwr"].eq(d.dil_w - r["u"])]),
            ("mul", r["t"], r["zpwq"], d.stride_w),
            ("set", [r["zpwr"].eq(d.pad_w - r["t"])]),
            ("mul", r["t"], r["kt"], r["ohow"]),
            ("mul", r["dstep"], r["t"], C),               # dY elements of one image
            ("mul", r["t"], r["ct"], r["hw"]),
            ("mul", r["xstep"], r["t"], C),               # dX elements of one image
            ("mul", r["zstride"], d.k, r["nb"]),          # W elements of an input block
            ("mul", r["cbstep"], r["hw"], C),             # dX elements of an input block
        ], "ZL_CB_0")
        program("ZL_CB", [               # blocks [c0, cend) of input channels (in blocks)
            ("mul", r["u"], loop["c0"], r["zstride"]),
            ("set", [r["wcb"].eq(d.addr_w + (r["u"] << obs)), loop["o0"].eq(0),
                     r["cend"].eq(mn(loop["c0"] + r["cn"], r["ct"]))]),
        ], "ZL_BAND")
        with m.State("ZL_BAND"):         # band of dX rows [o0, o0 + obh)
            m.d.sync += [r["obh"].eq(mn(r["bh"], d.h - loop["o0"])), n0.eq(0)]
            with m.If(banded):
                m.next = "ZL_BAND_B_0"
            with m.Else():
                m.d.sync += [r["eh"].eq(d.h), r["eoh"].eq(r["oh"]), r["pt"].eq(d.pad_h),
                             r["pb"].eq(d.pad_h), r["dyoff"].eq(0), r["yoff"].eq(0),
                             r["blen"].eq(r["hw"]), r["eohow"].eq(r["ohow"])]
                m.next = "ZL_BANDP_0"
        compile_steps(m, "ZL_BAND_B", band_programs.loss_band(), "ZL_BANDP_0",
                      env=e.band_env, regs=e.band_regs, alu=self.alu, fail=e.fail)
        program("ZL_BANDP", [            # the band's top padding by the stride
            ("div", r["zptq"], r["pt"], d.stride_h),
            ("mul", r["t"], r["zptq"], d.stride_h),
            ("set", [r["zptr"].eq(r["pt"] - r["t"]), p_row.eq(r["blen"])]),
            ("mul", r["rowlen"], r["blen"], C),           # dX elements of an image's band
        ], "ZL_STEP_0")
        program("ZL_STEP", [             # step: images [n0, n0 + zng), their bands in P
            ("set", [zng.eq(mn(r["zn"], d.n - n0)), loop["k0"].eq(0)]),
            ("mul", r["np"], zng, r["blen"]),
            ("mul", r["np"], r["np"], r["cend"] - loop["c0"]),
            ("mul", r["t"], n0, r["ct"]),
            ("mul", r["t"], r["t"] + loop["c0"], r["hw"]),
            ("mul", r["t"], r["t"] + r["yoff"], C),
            ("set", [ptr["out"].eq(d.addr_out + (r["t"] << oes)), Pulse(self.new_step)]),
        ], "ZL_GROUP_0")
        program("ZL_GROUP", [            # blocks [k0, k0 + zgrp) of output channels
            ("set", [r["zgrp"].eq(mn(r["kg"], r["kt"] - loop["k0"])), loop["n"].eq(n0)]),
            ("mul", r["t"], loop["k0"] + r["zgrp"], C),
            ("set", [r["kend"].eq(mn(r["t"], d.k))]),
            ("set", [r["zkv"].eq(r["kend"] - (r["t"] - C))]),
            ("mul", r["u"], loop["k0"], C),
            ("mul", r["len_b"], r["kend"] - r["u"], r["nb"]),    # W: channels x R S x cols
            ("mul", r["u"], r["u"], r["nb"]),
            ("mul", r["len_a"], r["eohow"], C),                  # dY: one block's band
            ("mul", r["len_x"], r["ohow"], C),
            ("mul", r["zlen"], r["len_a"], r["zgrp"]),
            ("set", [ptr["wg"].eq(r["wcb"] + (r["u"] << obs))]),
        ], "ZL_IMG_0")
        program("ZL_IMG", [              # image n of the step: a run
            ("mul", r["t"], loop["k0"], r["ohow"]),
            ("mul", r["t"], r["t"] + r["dyoff"], C),
            ("mul", r["u"], loop["n"], r["dstep"]),
            ("set", [ptr["dy"].eq(d.addr_dy + ((r["u"] + r["t"]) << obs)),
                     ptr["w"].eq(ptr["wg"]), cb.eq(loop["c0"]), xbank.eq(~xbank)]),
        ], "ZL_LOAD_DY")
        dma_load("ZL_LOAD_DY", Target.FWD_X, "a", ptr["dy"], r["zlen"], C, "ZL_CBLK",
                 runs=(r["zgrp"], r["len_a"], r["len_x"] << obs), run_words=r["eohow"],
                 bank=self.xbank)
        with m.State("ZL_CBLK"):         # input block cb: a run (cn or zng is 1)
            m.d.sync += row_base.eq(cb - loop["c0"] + loop["n"] - n0)
            m.next = "ZL_LOAD_W"
        dma_load("ZL_LOAD_W", Target.FWD_W, "b", ptr["w"], r["len_b"], C, "ZL_RUN_WAIT")
        step_run("ZL")
        with m.State("ZL_NEXT"):
            m.d.sync += ptr["w"].eq(ptr["w"] + (r["zstride"] << obs))
            with m.If(cb + 1 < r["cend"]):
                m.d.sync += cb.eq(cb + 1)
                m.next = "ZL_CBLK"
            with m.Elif(loop["n"] + 1 < n0 + zng):
                m.d.sync += loop["n"].eq(loop["n"] + 1)
                m.next = "ZL_IMG_0"
            with m.Elif(loop["k0"] + r["zgrp"] < r["kt"]):
                m.d.sync += loop["k0"].eq(loop["k0"] + r["zgrp"])
                m.next = "ZL_GROUP_0"
            with m.Else():                # the step's last run started: next step
                # P rows: the step's images (one block) or blocks (one image)
                m.d.comb += save_step(zng * (r["cend"] - loop["c0"]), r["rowlen"], r["blen"],
                                      Mux(zng > 1, r["xstep"], r["cbstep"]) << oes,
                                      ptr["out"])
                with m.If(n0 + zng < d.n):
                    m.d.sync += n0.eq(n0 + zng)
                    m.next = "ZL_STEP_0"
                with m.Elif(loop["o0"] + r["obh"] < d.h):
                    m.d.sync += loop["o0"].eq(loop["o0"] + r["obh"])
                    m.next = "ZL_BAND"
                with m.Elif(r["cend"] < r["ct"]):
                    m.d.sync += loop["c0"].eq(r["cend"])
                    m.next = "ZL_CB_0"
                with m.Else():
                    m.d.comb += self.final.eq(1)
                    m.next = "ZL_LAST"

    def _fc(self, e):
        """The FC backward loops (interleaved): input blocks, batch chunks (a step each),
        output blocks (the groups)."""
        m, r, ptr, loop, d = e.m, e.r, e.ptr, e.loop, self.desc
        program, dma_load, step_run, save_step, mn = (e.program, e.dma_load, e.step_run,
                                                      e.save_step, e.mn)
        grp_c, grp_k, grp_n = e.grp_c, e.grp_k, e.grp_n
        obs, abs_, R = e.obs, e.abs_, self.config.rows
        p_row, row_base, kt_rows = e.p_row, e.row_base, e.kt_rows
        fc_o0, fc_dw_p0, clear_dw = e.fc_o0, e.fc_dw_p0, e.clear_dw
        with m.State("FC_INIT"):
            m.d.sync += [loop["c0"].eq(0), ptr["outg"].eq(d.addr_out),
                         ptr["dwg"].eq(d.addr_out + (r["kohow"] << abs_)),
                         fc_dw_p0.eq(r["fnb"]), row_base.eq(0), p_row.eq(r["fq"])]
            m.next = "FC_IB"
        with m.State("FC_IB"):           # input block c0
            m.d.sync += [grp_c.eq(mn(r["fib"], d.c - loop["c0"])), loop["n"].eq(0),
                         ptr["dyn"].eq(d.addr_dy),
                         ptr["xn"].eq(d.addr_x + (loop["c0"] << obs)),
                         ptr["outn"].eq(ptr["outg"]), clear_dw.eq(1)]
            m.next = "FC_CHUNK_0"
        program("FC_CHUNK", [            # step: batch rows [n, n + grp_n)
            ("set", [grp_n.eq(mn(r["fnb"], d.n - loop["n"])), loop["k0"].eq(0)]),
            ("mul", r["np"], r["fnb"] + Mux(clear_dw, d.k, 0), r["fq"]),
            ("set", [clear_dw.eq(0), ptr["dy"].eq(ptr["dyn"]),
                     ptr["w"].eq(d.addr_w + (loop["c0"] << obs)),
                     Pulse(self.new_step)]),
            ("mul", r["len_x"], grp_n, grp_c),
            ("mul", r["u"], grp_n, d.k),
            ("mul", r["rowlen"], grp_n, d.c),
        ], "FC_GROUP_0")
        program("FC_GROUP", [            # output block k0
            ("set", [grp_k.eq(mn(r["fob"], d.k - loop["k0"])), fc_o0.eq(loop["k0"])]),
            ("div", kt_rows, grp_k + (R - 1), R),      # output tiles of the run
            ("mul", r["len_a"], grp_n, grp_k),
            ("mul", r["len_b"], grp_k, grp_c),
            ("mul", r["t"], grp_k, d.c),
        ], "FC_LOAD_DY")
        # one DMA run per row, or one for the whole block when its rows are whole
        all_k, all_c = grp_k == d.k, grp_c == d.c
        dma_load("FC_LOAD_DY", Target.BWD_A, "a", ptr["dy"], r["len_a"], 1,
                 "FC_LOAD_X", runs=(Mux(all_k, 1, grp_n), Mux(all_k, r["len_a"], grp_k),
                                    d.k << obs))
        dma_load("FC_LOAD_X", Target.BWD_B, "b", ptr["xn"], r["len_x"], 1,
                 "FC_LOAD_W", runs=(Mux(all_c, 1, grp_n), Mux(all_c, r["len_x"], grp_c),
                                    d.c << obs))
        dma_load("FC_LOAD_W", Target.BWD_B, "w", ptr["w"], r["len_b"], 1,
                 "FC_RUN_WAIT", runs=(Mux(all_c, 1, grp_k), Mux(all_c, r["len_b"], grp_c),
                                      d.c << obs), offset=r["fwoff"])
        step_run("FC")
        with m.State("FC_NEXT"):
            m.d.sync += [loop["k0"].eq(loop["k0"] + grp_k),
                         ptr["dy"].eq(ptr["dy"] + (grp_k << obs)),
                         ptr["w"].eq(ptr["w"] + (r["t"] << obs))]
            with m.If(loop["k0"] + grp_k < d.k):
                m.next = "FC_GROUP_0"
            with m.Else():                # the step's last group runs: next step
                # dX rows [n, n + grp_n) of the input block
                m.d.comb += save_step(grp_n, grp_c, r["fq"], d.c << abs_, ptr["outn"])
                with m.If(loop["n"] + grp_n < d.n):
                    m.d.sync += [loop["n"].eq(loop["n"] + grp_n),
                                 ptr["dyn"].eq(ptr["dyn"] + (r["u"] << obs)),
                                 ptr["xn"].eq(ptr["xn"] + (r["rowlen"] << obs)),
                                 ptr["outn"].eq(ptr["outn"] + (r["rowlen"] << abs_))]
                    m.next = "FC_CHUNK_0"
                with m.Else():            # ... and the block's dW column after it
                    s2 = self.save2_step
                    m.d.comb += [self.save2.eq(1), s2.rows.eq(d.k),
                                 s2.p0.eq(r["fdw0"]), s2.addr.eq(ptr["dwg"])]
                    m.d.sync += [ptr["dwg"].eq(ptr["dwg"] + (grp_c << abs_)),
                                 ptr["outg"].eq(ptr["outg"] + (grp_c << abs_))]
                    with m.If(loop["c0"] + grp_c < d.c):
                        m.d.sync += loop["c0"].eq(loop["c0"] + grp_c)
                        m.next = "FC_IB"
                    with m.Else():
                        m.d.comb += self.final.eq(1)
                        m.next = "FC_LAST"
