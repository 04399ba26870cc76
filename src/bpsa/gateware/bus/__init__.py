"""Buses: the AXI4-Lite register file, the AXI4 DMA, the simulation SRAM, the UART and its
AXI4-Lite bridge.
"""
