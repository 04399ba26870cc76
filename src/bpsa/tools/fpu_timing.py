"""Area and timing of the floating-point multiply-add (:class:`bpsa.gateware.fp.fpu.FloatMac`) on
the ECP5-85F, out of context, until the configuration takes a floating-point arithmetic and
``bpsa synth --top`` can build it::

    python -m bpsa.tools.fpu_timing bf16 [-o build/fpu]

The operands and the sum are registered at the unit's inputs (so every path is register to
register); prints the placed cells and nextpnr's Fmax.
"""

import argparse
import json
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from bpsa.gateware.fp.fpu import FloatMac
from bpsa.spec.numeric import FLOAT_FORMATS, float_format
from bpsa.tools.yosys import ecp5_timing

__all__ = ["main", "measure"]


class _Registered(wiring.Component):
    def __init__(self, fmt):
        self.fmt = fmt
        bits = FLOAT_FORMATS[fmt].bits
        super().__init__({"a": In(bits), "b": In(bits), "acc": In(32), "result": Out(32)})

    def elaborate(self, platform):
        m = Module()
        mac = m.submodules.mac = FloatMac(self.fmt)
        for name in ("a", "b", "acc"):
            reg = Signal.like(getattr(self, name), name=f"{name}_in")
            m.d.sync += reg.eq(getattr(self, name))
            m.d.comb += getattr(mac, name).eq(reg)
        m.d.comb += self.result.eq(mac.result)
        return m


def measure(fmt, out):
    """``{"luts", "ffs", "dsps", "fmax_mhz", "latency"}`` of the ``fmt`` multiply-add; the
    Verilog, netlist and reports go to ``out``."""
    fmt = float_format(fmt).name
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    top = f"fp_mac_{fmt}"
    path = out / f"{top}.v"
    path.write_text(verilog.convert(_Registered(fmt), name=top))
    timing = ecp5_timing(path, top)
    used = json.loads((out / f"{top}_ecp5_timing.report.json").read_text())["utilization"]
    return {"luts": used["TRELLIS_COMB"]["used"], "ffs": used["TRELLIS_FF"]["used"],
            "dsps": used["MULT18X18D"]["used"], "fmax_mhz": timing["fmax_mhz"].get("clk"),
            "latency": FloatMac.LATENCY}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bpsa.tools.fpu_timing",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("fmt", choices=sorted(FLOAT_FORMATS))
    parser.add_argument("-o", "--output", default="build/fpu")
    args = parser.parse_args(argv)
    r = measure(args.fmt, Path(args.output) / args.fmt)
    print(f"{args.fmt} multiply-add: {r['luts']} LUTs (placed TRELLIS_COMB), {r['ffs']} FFs, "
          f"{r['dsps']} DSPs, {r['fmax_mhz']} MHz out of context, latency {r['latency']}")


if __name__ == "__main__":
    main()
