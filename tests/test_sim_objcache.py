"""The run-time library's compile cache: a compile of a source under Verilator's include
directory is served from the cache the second time (the same object and dependency file); a
changed command or source, and every other compile, run the compiler."""

import sys

from bpsa.sim.objcache import cached_compile

#: A stand-in compiler: writes ``-o``'s object (the source's text and the flags) and its
#: ``.d`` file, and counts its runs in ``runs.txt``.
COMPILER = """
import sys
from pathlib import Path
args = sys.argv[1:]
out = Path(args[args.index("-o") + 1])
out.write_text(Path(args[-1]).read_text() + " ".join(args[:-1]))
out.with_suffix(".d").write_text(f"{out.name}: {args[-1]}\\n")
with open(Path(__file__).with_name("runs.txt"), "a") as f:
    f.write("run\\n")
sys.exit(0 if "-fail" not in args else 1)
"""


def _setup(tmp_path):
    root = tmp_path / "verilator"
    (root / "include").mkdir(parents=True)
    (root / "include" / "verilated.cpp").write_text("int runtime;")
    (tmp_path / "user.cpp").write_text("int user;")
    (tmp_path / "cc.py").write_text(COMPILER)
    build = tmp_path / "build"
    build.mkdir()
    return root, build


def _compile(tmp_path, root, source, *flags, obj="verilated.o"):
    cmd = [sys.executable, str(tmp_path / "cc.py"), "-O0", *flags, "-c", "-o",
           str(tmp_path / "build" / obj), str(source)]
    return cached_compile(cmd, root=root, cache=tmp_path / "cache")


def _runs(tmp_path):
    path = tmp_path / "runs.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_runtime_compile_is_served_the_second_time(tmp_path):
    root, build = _setup(tmp_path)
    runtime = root / "include" / "verilated.cpp"
    assert _compile(tmp_path, root, runtime) == 0 and _runs(tmp_path) == 1
    first = (build / "verilated.o").read_bytes()
    (build / "verilated.o").unlink()
    (build / "verilated.d").unlink()
    assert _compile(tmp_path, root, runtime) == 0 and _runs(tmp_path) == 1
    assert (build / "verilated.o").read_bytes() == first
    assert (build / "verilated.d").read_text() == f"verilated.o: {runtime}\n"
    # another flag, or a changed source: compiled again
    assert _compile(tmp_path, root, runtime, "-fPIC") == 0 and _runs(tmp_path) == 2
    runtime.write_text("int runtime2;")
    assert _compile(tmp_path, root, runtime) == 0 and _runs(tmp_path) == 3
    assert (build / "verilated.o").read_text().startswith("int runtime2;")


def test_other_compiles_and_failures_are_not_cached(tmp_path):
    root, build = _setup(tmp_path)
    for _ in range(2):
        assert _compile(tmp_path, root, tmp_path / "user.cpp", obj="user.o") == 0
    assert _runs(tmp_path) == 2
    runtime = root / "include" / "verilated.cpp"
    assert _compile(tmp_path, root, runtime, "-fail") == 1
    assert _compile(tmp_path, root, runtime, "-fail") == 1
    assert _runs(tmp_path) == 4
    assert not any((tmp_path / "cache").glob("*/obj.o"))


def test_without_a_cache_directory_every_compile_runs(tmp_path):
    root, build = _setup(tmp_path)
    cmd = [sys.executable, str(tmp_path / "cc.py"), "-c", "-o", str(build / "verilated.o"),
           str(root / "include" / "verilated.cpp")]
    assert cached_compile(cmd, root=root, cache=None) == 0
    assert cached_compile(cmd, root=root, cache=None) == 0
    assert _runs(tmp_path) == 2
