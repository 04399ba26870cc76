"""The array benchmark's results page from made-up runs (the runs themselves need Verilator and
minutes: ``make bench-array``): the header names the command, commit and date, a row a run."""

from bpsa.config import load_config
from bpsa.tools.bench_array import _fc_line, markdown
from bpsa.tools.results import write_page


def _run(label, cycles, reads, writes):
    return {"label": label, "cycles": cycles, "utilization": 0.5, "total_reads": reads,
            "writes": writes, "gated": 7, "wall_s": 1.5}


def test_page_a_row_a_run(tmp_path):
    cfg = load_config("small")
    rows = [_run("gemm 8x8x8 os", 1234, 5000, 64), _run("fc il", 100, 400, 40),
            _run("fc ws", 150, 300, 30), _run("fc os", 150, 300, 30)]
    fc = {"il": rows[1], "ws": rows[2], "os": rows[3]}
    line = _fc_line(fc, 4, 8)
    assert "cycles 100 vs 300 (3.00x)" in line and "96 more accesses" in line
    assert _fc_line({"il": rows[1]}, 4, 8) is None
    page = write_page(tmp_path / "a.md", "Array", "make bench-array",
                      markdown(cfg, rows, line), commit="abc1234", date="2026-01-02")
    lines = page.read_text().splitlines()
    assert lines[2] == "Written by `make bench-array` at commit abc1234 on 2026-01-02."
    assert "| gemm 8x8x8 os | 1,234 | 0.500 | 5,000 | 64 | 7 | 1.5 |" in lines
    assert lines[-1] == line + "."
