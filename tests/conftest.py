"""Test order: the tests that build or run generated Verilog (Verilator, cocotb), prove
properties (formal) or run Yosys and nextpnr first, the many short ones after them.

``make test`` runs on two pytest-xdist workers; a worker that finishes while the other is in
a minutes-long Verilator test leaves a core idle. Started first, the long tests are spread
over both workers and the short ones fill the gaps at the end. Within each class the order
of the files and of their tests is kept.
"""

#: Markers of the long tests, started first.
LONG_MARKERS = ("verilator", "cocotb", "formal")
#: Test modules that run Yosys or nextpnr (tens of seconds a test), also started first.
SYNTHESIS_MODULES = ("test_tools_synth", "test_tools_yosys", "test_tools_overheads",
                     "test_platform_board", "test_platform_pll")


def _long(item):
    return (any(item.get_closest_marker(m) for m in LONG_MARKERS)
            or item.module.__name__.rpartition(".")[2] in SYNTHESIS_MODULES)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not _long(item))
