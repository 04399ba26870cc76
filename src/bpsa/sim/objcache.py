"""A compile cache for Verilator's run-time library, shared by the builds of one build root.

Every Verilator build compiles the same run-time sources (``verilated.cpp``,
``verilated_vpi.cpp``, ``verilated_threads.cpp``, ...; about 9 s of a 12-s cocotb build of a
small block) with the same flags. Verilator's makefile calls ``$(OBJCACHE) $(CXX) ...`` for
every compile; :func:`bpsa.sim.runner.verilator_env` sets ``OBJCACHE`` to this script, which
serves a compile of a source under ``$VERILATOR_ROOT/include`` from ``$BPSA_OBJCACHE_DIR``
when the same command compiled the same source before, and runs every other compile as it is.

Entries are keyed by the whole command line and the source's bytes (the headers it includes
belong to the same Verilator install, whose path is in the command line); an entry is written
by an atomic rename, so parallel builds at worst compile the same object twice.
"""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["cached_compile", "main"]


def _cacheable(cmd, root):
    """``(source, object)`` of a run-time compile ``cmd`` (``... -c -o X.o SRC.cpp``), or
    ``None`` for any other command."""
    if "-c" not in cmd or "-o" not in cmd or not cmd[-1].endswith(".cpp"):
        return None
    source = Path(cmd[-1]).resolve()
    include = (Path(root).resolve() / "include")
    if include not in source.parents:
        return None
    return source, Path(cmd[cmd.index("-o") + 1])


def cached_compile(cmd, *, root, cache):
    """Run the compile ``cmd`` or serve it from ``cache``; returns its exit status."""
    found = _cacheable(cmd, root) if root and cache else None
    if found is None:
        return subprocess.call(cmd)
    source, obj = found
    dep = obj.with_suffix(".d")
    key = hashlib.sha256("\0".join(cmd).encode() + b"\0" + source.read_bytes()).hexdigest()
    entry = Path(cache) / key[:24]
    if (entry / "obj.o").exists():
        shutil.copyfile(entry / "obj.o", obj)
        if (entry / "obj.d").exists():
            shutil.copyfile(entry / "obj.d", dep)
        return 0
    status = subprocess.call(cmd)
    if status == 0 and obj.exists():
        tmp = Path(cache) / f".{key[:24]}.{os.getpid()}"
        tmp.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(obj, tmp / "obj.o")
        if dep.exists():
            shutil.copyfile(dep, tmp / "obj.d")
        try:
            tmp.rename(entry)
        except OSError:             # another build stored it first
            shutil.rmtree(tmp, ignore_errors=True)
    return status


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    return cached_compile(argv, root=os.environ.get("VERILATOR_ROOT"),
                          cache=os.environ.get("BPSA_OBJCACHE_DIR"))


if __name__ == "__main__":
    sys.exit(main())
