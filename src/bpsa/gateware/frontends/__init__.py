"""The front ends that address operands into the array, one folder each, and the output-
stationary engine that hosts the feeder, the zero-free walkers and channel-first
(:mod:`.conv_forward`).
"""
