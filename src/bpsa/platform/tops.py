"""The tops ``bpsa verilog``, ``bpsa synth`` and the Verilator builds generate (no Amaranth
import here, so the command line lists them at once)."""

from bpsa.config import FLOAT_TOP_NAMES

__all__ = ["FLOAT_TOPS", "TOPS"]

#: Tops that can be generated: name -> "module:Class", the class taking a Config. Imported
#: lazily, so a block's module is loaded only when that block is generated.
TOPS = {
    "pe": "bpsa.gateware.array.pe:PE",
    "array": "bpsa.gateware.array.systolic:SystolicArray",
    "feeder": "bpsa.gateware.frontends.feeder.feeder:DataFeeder",
    "bp_loss_addr": "bpsa.gateware.frontends.bp_im2col.generators:TransposedAddressGenerator",
    "bp_grad_addr": "bpsa.gateware.frontends.bp_im2col.generators:DilatedAddressGenerator",
    "im2col_addr": "bpsa.gateware.frontends.bp_im2col.im2col_addr:Im2colAddressGenerator",
    "conv_forward": "bpsa.gateware.frontends.conv_forward:ConvForward",
    "conv_backward": "bpsa.gateware.frontends.bp_im2col.conv_backward:ConvBackward",
    "pool": "bpsa.gateware.frontends.pool.pool:PoolEngine",
    "channel_first": "bpsa.gateware.frontends.channel_first.channel_first:ChannelFirst",
    "cf_engine": "bpsa.gateware.frontends.channel_first.channel_first:ChannelFirstEngine",
    "zg_engine": "bpsa.gateware.frontends.zero_free.gradient_engine:ZeroFreeGradientEngine",
    "axil_regs": "bpsa.gateware.bus.axi_lite:RegisterFile",
    "counters": "bpsa.gateware.control.counters:Counters",
    "dma": "bpsa.gateware.bus.dma:DmaEngine",
    "accelerator": "bpsa.gateware.accelerator:Accelerator",
    "dispatcher": "bpsa.gateware.control.dispatcher:Dispatcher",
    "fetch": "bpsa.gateware.control.fetch:Fetch",
    "load_unit": "bpsa.gateware.control.load_unit:LoadUnit",
    "step_scheduler": "bpsa.gateware.control.step_scheduler:StepScheduler",
    "requantizer": "bpsa.gateware.results.requantizer:Requantizer",
    "psum_buffer": "bpsa.gateware.results.psum_buffer:PsumBuffer",
    "zf_loss": "bpsa.gateware.frontends.zero_free.loss:ZeroFreeLossWalker",
    "zf_gradient": "bpsa.gateware.frontends.zero_free.gradient:ZeroFreeGradientWalker",
    "mx_accumulate": "bpsa.gateware.results.mx_accumulate:MxBlockAccumulator",
}

#: The tops built in floating point (``Config.is_float``; ``bpsa.config.FLOAT_TOP_NAMES``), with
#: the class for it (the PE has its own); every other top refuses such a configuration.
FLOAT_TOPS = {name: "bpsa.gateware.array.pe_float:FloatPE" if name == "pe" else TOPS[name]
              for name in FLOAT_TOP_NAMES}
