"""The Verilator build's names: no compiled simulator may be named like a header that
Verilator's or the C++ library's sources include (the build passes ``-I.``; a binary named
``array`` once broke every later build in its folder)."""

import subprocess
from pathlib import Path

from bpsa.platform.verilog import TOPS
from bpsa.sim.runner import sim_toplevel, verilator_env


def _include_dirs():
    """The C++ compiler's system include directories and Verilator's."""
    out = subprocess.run(["g++", "-xc++", "-E", "-v", "-"], input="", capture_output=True,
                         text=True, check=True).stderr
    lines = out.split("#include <...> search starts here:")[1].split("End of search list.")[0]
    dirs = [Path(line.strip()) for line in lines.splitlines() if line.strip()]
    root = Path(verilator_env())
    return dirs + [root / "include", root / "include" / "vltstd"]


def test_no_simulator_binary_shadows_a_header():
    dirs = _include_dirs()
    assert any((d / "array").exists() for d in dirs)      # the header that bit us is there
    for top in TOPS:
        name = sim_toplevel(top)
        assert name.isidentifier() and name != top
        assert not any((d / name).exists() for d in dirs), (top, name)


def test_stale_builds_of_the_same_top_are_pruned(tmp_path):
    import os

    from bpsa.sim.runner import STALE_AFTER, prune_builds
    now = 1_000_000_000.0
    current = tmp_path / "accelerator_small_aaaaaaaaaaaa"
    old = tmp_path / "accelerator_small_bbbbbbbbbbbb"             # same top, other sources
    recent = tmp_path / "accelerator_small_cccccccccccc"          # in use by another run
    other_config = tmp_path / "accelerator_small_tinybuf_dddddddddddd"
    other_top = tmp_path / "array_small_eeeeeeeeeeee"
    for d, age in ((current, 0), (old, STALE_AFTER + 10), (recent, 60),
                   (other_config, 10 * STALE_AFTER), (other_top, 10 * STALE_AFTER)):
        d.mkdir()
        (d / ".lock").write_text("")
        os.utime(d / ".lock", (now - age, now - age))
    assert prune_builds(current, now=now) == [old]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (current, recent, other_config, other_top))


def test_traced_builds_have_their_own_folder(monkeypatch):
    from bpsa.config import load_config
    from bpsa.sim.runner import build_name
    cfg = load_config("small")
    monkeypatch.delenv("WAVES", raising=False)
    plain = build_name(cfg, "pe")
    monkeypatch.setenv("WAVES", "1")
    traced = build_name(cfg, "pe")
    monkeypatch.setenv("WAVES", "0")
    assert build_name(cfg, "pe") == plain != traced
    assert plain.startswith("pe_small_") and traced.startswith("pe_small_")
    assert build_name(cfg, "array") != plain


def test_generator_digest_is_stable():
    from bpsa.sim.runner import generator_digest
    assert generator_digest() == generator_digest()
    assert len(generator_digest()) == 64


def test_run_build_logs_and_shows_progress(tmp_path, capsys):
    """A build's output goes to its log; its compile units are counted on standard error."""
    import sys

    from bpsa.sim.runner import run_build
    script = ("print('verilating'); print('c++ -O2 -c -o a.o a.cpp'); "
              "print('c++ -O0 -c -o b.o b.cpp'); print('c++ a.o b.o -o lib.so')")
    status = run_build([sys.executable, "-c", script], cwd=tmp_path, env=None,
                       log_path=tmp_path / "build.log")
    assert status == 0
    assert (tmp_path / "build.log").read_text().splitlines() == [
        "verilating", "c++ -O2 -c -o a.o a.cpp", "c++ -O0 -c -o b.o b.cpp",
        "c++ a.o b.o -o lib.so"]
    err = capsys.readouterr().err
    assert "compiling C++: 2" in err and "bpsa: built in " in err
    assert err.endswith("(2 C++ units compiled)\n")
    status = run_build([sys.executable, "-c", "import sys; sys.exit(3)"], cwd=tmp_path,
                       env=None, log_path=tmp_path / "quiet.log", progress=False)
    assert status == 3 and capsys.readouterr().err == ""


def test_announce_is_quiet_without_progress(capsys):
    from bpsa.sim.runner import announce
    announce("building x", progress=False)
    assert capsys.readouterr().err == ""
    announce("building x")
    assert capsys.readouterr().err == "bpsa: building x\n"


def test_simulator_choice(monkeypatch, tmp_path):
    """The cocotb builds run on Verilator or Icarus Verilog, each in its own folder; an
    unknown simulator, or Icarus without iverilog, is refused before any work."""
    import pytest

    from bpsa.config import load_config
    from bpsa.sim import runner
    small = load_config("small")
    assert runner.build_name(small, "pe").count("_") == 2
    assert "_icarus_" in runner.build_name(small, "pe", "icarus")
    assert runner.build_name(small, "pe") != runner.build_name(small, "pe", "icarus")
    with pytest.raises(ValueError, match="simulator must be one of verilator, icarus"):
        runner.build_top(small, "pe", simulator="vcs", build_root=tmp_path)
    monkeypatch.setattr(runner.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="needs Icarus Verilog's iverilog"):
        runner.build_top(small, "pe", simulator="icarus", build_root=tmp_path)
    assert not any(tmp_path.iterdir())
