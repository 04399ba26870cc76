"""cocotb testbenches of the generated Verilog (``tb_*``) and the helpers only they (and the
tests of the same blocks) use: ``tb_util``, ``pe_streams``, ``pool_runs``.

cocotb imports a testbench in the simulator's process, by the module name a runner passes to
:func:`bpsa.sim.runner.run_cocotb` (``bpsa.sim.testbenches.tb_<top>``). A testbench imports the
library of :mod:`bpsa.sim` (``runner.load_config_json``, ``jobs``, the engine tops' ``*_run``
modules) and the layers below it; it never imports a runner (:mod:`bpsa.sim.simcmd`,
:mod:`bpsa.sim.accel_run`) nor :mod:`bpsa.verify`, so the runner -> testbench edge is the only
one between them.
"""
