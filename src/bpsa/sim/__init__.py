"""The simulator: generated Verilog built under Verilator (:mod:`bpsa.sim.runner`), the native
transport (:mod:`bpsa.sim.native`, behind :func:`bpsa.simulate`), layer jobs, and the cocotb
testbenches with the runners that drive them, in one room whose imports point one way:

1. the library (``runner``, ``jobs``, ``gemm``, ``lanes``, ``native``, and the engine tops'
   ``*_run`` modules: operands, buffer images, descriptors, golden results, summaries);
2. :mod:`bpsa.sim.testbenches`, the cocotb testbenches and the helpers only they use: they
   import the library, never a runner;
3. the runners (:mod:`bpsa.sim.simcmd`, :mod:`bpsa.sim.accel_run`): they name a testbench by
   its module (``run_cocotb(config, "bpsa.sim.testbenches.tb_array", ...)``, which cocotb
   imports in the simulator's process) and no library module or testbench imports them.

A module name passed as a string is an import edge like any other (``tests/test_package.py``
reads both). :mod:`bpsa.verify` sits above this package and may import it; nothing here imports
:mod:`bpsa.verify`.
"""
