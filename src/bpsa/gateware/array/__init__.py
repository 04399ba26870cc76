"""The PE (integer and floating point), the systolic array, its floating-point reductions and
the arithmetic abstraction (:mod:`.arith`).
"""
