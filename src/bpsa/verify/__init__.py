"""Verification on top of the simulator: whole-accelerator scenarios on any transport
(:mod:`bpsa.verify.scenarios`), random layer fuzzing (:mod:`bpsa.verify.fuzz`), bounded model
checks (:mod:`bpsa.verify.formal`) and floating-point corner operands
(:mod:`bpsa.verify.float_operands`).

This package may import :mod:`bpsa.sim` (and everything below it); :mod:`bpsa.sim`, its cocotb
testbenches (:mod:`bpsa.sim.testbenches`) included, never imports this package, by an import
statement or by a module name passed as a string.
"""
