"""The hardware, in Amaranth, in rooms (one folder a role). Imports point one way, from the
first room of this list to the last; a room imports only the rooms before it (checked by
``tests/test_package.py``):

``common``
    What every block uses: checked components, hardware enums, the skid buffer.
``fp``
    The floating-point units (bf16 / fp16 multipliers, the fp32 adder, conversions).
``array``
    The PE (integer and floating point), the systolic array and its reductions, and the
    arithmetic abstraction the rest of the hardware computes with (:mod:`.array.arith`).
``bus``
    AXI4-Lite register file, AXI4 DMA, the simulation SRAM, UART and its bridge.
``results``
    Where results go: the partial-sum buffer P and the requantizer.
``frontends``
    The front ends that address operands into the array: the Fornt data feeder, the
    zero-free loss and gradient walkers, channel-first implicit im2col (the
    output-stationary engine :mod:`.frontends.conv_forward` hosts them), the BP-im2col
    address generators and their input-stationary engine, and the pooling unit.
``control``
    The instruction-driven controller: fetch, dispatcher, load unit, step scheduler, result
    addressing and the performance counters.
:mod:`.accelerator`
    The top: every room joined behind the AXI4-Lite and AXI4 ports.
"""
