"""Verilog generation flow: reproducible Verilog plus the configuration as JSON."""

import importlib
from pathlib import Path

from amaranth.back import verilog

from bpsa.config import Config

__all__ = ["TOPS", "elaborate_top", "generate_verilog", "write_verilog"]

#: Tops that can be generated: name -> "module:Class", the class taking a Config. Imported
#: lazily, so a block's module is loaded only when that block is generated.
TOPS = {
    "pe": "bpsa.gateware.pe:PE",
    "array": "bpsa.gateware.array:SystolicArray",
    "feeder": "bpsa.gateware.feeder:DataFeeder",
    "bp_loss_addr": "bpsa.gateware.bp_im2col:TransposedAddressGenerator",
    "bp_grad_addr": "bpsa.gateware.bp_im2col:DilatedAddressGenerator",
    "im2col_addr": "bpsa.gateware.im2col_addr:Im2colAddressGenerator",
    "conv_forward": "bpsa.gateware.engines.conv_forward:ConvForward",
    "conv_backward": "bpsa.gateware.engines.conv_backward:ConvBackward",
    "axil_regs": "bpsa.gateware.axi_lite:RegisterFile",
    "dma": "bpsa.gateware.dma:DmaEngine",
    "accelerator": "bpsa.gateware.accelerator:Accelerator",
    "setup_alu": "bpsa.gateware.seq_arith:setup_alu",
}


def elaborate_top(config, top):
    """The component for ``top`` (a key of :data:`TOPS`) built for ``config``."""
    if top not in TOPS:
        raise ValueError(f"top must be one of {sorted(TOPS)}, not {top!r}")
    module, cls = TOPS[top].split(":")
    return getattr(importlib.import_module(module), cls)(config)


def generate_verilog(config, top="pe", *, name=None):
    """Verilog text of ``top`` for ``config``. No source locations or absolute paths are
    emitted, so the text is the same on every machine and from every working directory."""
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, not {config!r}")
    component = elaborate_top(config, top)
    return verilog.convert(component, name=name or top, emit_src=False,
                           strip_internal_attrs=True)


def write_verilog(config, top="pe", out_dir="build", *, name=None):
    """Write ``<name>.v`` and ``<name>.json`` (the configuration) into ``out_dir``; return the
    path of the Verilog file."""
    name = name or top
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    v_path = out / f"{name}.v"
    v_path.write_text(generate_verilog(config, top, name=name))
    (out / f"{name}.json").write_text(config.to_json())
    return v_path
