"""The tops ``bpsa verilog``, ``bpsa synth`` and the Verilator builds generate (no Amaranth
import here, so the command line lists them at once)."""

from bpsa.config import FLOAT_TOP_NAMES

__all__ = ["FLOAT_TOPS", "TOPS"]

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
    "pool": "bpsa.gateware.engines.pool:PoolEngine",
    "channel_first": "bpsa.gateware.engines.channel_first:ChannelFirst",
    "axil_regs": "bpsa.gateware.axi_lite:RegisterFile",
    "dma": "bpsa.gateware.dma:DmaEngine",
    "accelerator": "bpsa.gateware.accelerator:Accelerator",
    "dispatcher": "bpsa.gateware.controller.dispatcher:Dispatcher",
    "fetch": "bpsa.gateware.controller.fetch:Fetch",
    "load_unit": "bpsa.gateware.controller.load_unit:LoadUnit",
    "step_scheduler": "bpsa.gateware.controller.step_scheduler:StepScheduler",
    "requantizer": "bpsa.gateware.controller.requantizer:Requantizer",
    "psum_buffer": "bpsa.gateware.controller.psum_buffer:PsumBuffer",
    "zf_loss": "bpsa.gateware.engines.zf_loss:ZeroFreeLossWalker",
    "zf_gradient": "bpsa.gateware.engines.zf_gradient:ZeroFreeGradientWalker",
}

#: The tops built in floating point (``Config.is_float``; ``bpsa.config.FLOAT_TOP_NAMES``), with
#: the class for it (the PE has its own); every other top refuses such a configuration.
FLOAT_TOPS = {name: "bpsa.gateware.pe_float:FloatPE" if name == "pe" else TOPS[name]
              for name in FLOAT_TOP_NAMES}
