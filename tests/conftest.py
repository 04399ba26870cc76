"""Test order: longest first.

``make test`` runs on two pytest-xdist workers (``--dist worksteal``); a worker that finishes
while the other is in a minutes-long Verilator test leaves a core idle. Split into equal
shares longest first (longest-processing-time-first scheduling), the long tests spread over
both workers and the many short ones fill the gaps at the end; tests that share a fixture
of wider scope stay together.

The order comes from ``tests/durations.json`` (seconds a test, as measured by ``make
test-durations``, which runs the suite with ``--record-durations``). A test missing from it
(a new one) counts as :data:`NEW_LONG` seconds when it builds or runs generated Verilog,
proves a property or runs Yosys (:func:`_long`), else as 0: it runs early or late, and the
next ``make test-durations`` gives it its place.
"""

import json
from pathlib import Path

#: Where the recorded durations live.
DURATIONS = Path(__file__).with_name("durations.json")
#: Markers of the long tests.
LONG_MARKERS = ("verilator", "cocotb", "formal")
#: Test modules that run Yosys or nextpnr (tens of seconds a test).
SYNTHESIS_MODULES = ("test_tools_synth", "test_tools_yosys", "test_tools_overheads",
                     "test_platform_board", "test_platform_pll")
#: Seconds assumed for a long test that has no recorded duration.
NEW_LONG = 30.0


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test's duration (setup + call + teardown, seconds) "
                          "as JSON to PATH at the end of the run (make test-durations)")


def _long(item):
    return (any(item.get_closest_marker(m) for m in LONG_MARKERS)
            or item.module.__name__.rpartition(".")[2] in SYNTHESIS_MODULES)


def _group(item):
    """Tests that share a fixture of wider scope than a function, defined by the test suite
    (a module's synthesis report, say), run together: apart, each would set it up again."""
    shared = tuple(sorted(name for name, defs in item._fixtureinfo.name2fixturedefs.items()
                          if defs and defs[-1].scope != "function" and defs[-1].baseid))
    return (item.module.__name__, shared) if shared else item.nodeid


def pytest_collection_modifyitems(config, items):
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}

    def seconds(item):
        return recorded.get(item.nodeid, NEW_LONG if _long(item) else 0.0)

    groups = {}
    for item in items:
        groups.setdefault(_group(item), []).append(item)
    # longest processing time first: each group, longest first, to the worker with the least
    # work so far; worksteal hands each of the N workers a contiguous 1/N of the list (an
    # idle one then steals the tail of another's queue), so each worker's share is one run
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    shares, load = [[] for _ in range(workers)], [0.0] * workers
    for group in sorted(groups.values(), key=lambda g: -sum(map(seconds, g))):
        k = load.index(min(load))
        shares[k] += group
        load[k] += sum(map(seconds, group))
    items[:] = [item for share in shares for item in share]


class _Recorder:
    """Adds up each test's phases (on the xdist controller, the workers' reports)."""

    def __init__(self, path):
        self.path, self.seconds = Path(path), {}

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        # the short tests' order does not matter: kept out, the file stays small
        rounded = {k: round(v, 2) for k, v in sorted(self.seconds.items()) if v >= 0.05}
        self.path.write_text(json.dumps(rounded, indent=0) + "\n")


def pytest_configure(config):
    path = config.getoption("--record-durations")
    # xdist workers report to the controller, which records
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Recorder(path), "bpsa-durations")
