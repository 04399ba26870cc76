"""Test order: the tests that build or run generated Verilog (Verilator, cocotb) or prove
properties (formal) first, the many short ones after them.

``make test`` runs on two pytest-xdist workers; a worker that finishes while the other is in
a minutes-long Verilator test leaves a core idle. Started first, the long tests are spread
over both workers and the short ones fill the gaps at the end. Within each class the order
of the files and of their tests is kept.
"""

#: Markers of the long tests, started first.
LONG_MARKERS = ("verilator", "cocotb", "formal")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in LONG_MARKERS))
