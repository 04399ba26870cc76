"""The results pages' shared writer and renderers (:mod:`bpsa.tools.results`): every page starts
with its title and ``Written by `<command>` at commit <commit> on <date>.``, the JSON twin holds
the same stamp, and the area, boards and training pages hold a row a report of small made-up
inputs (in a temporary directory, outside git: a report's commit and date then come from its
JSON, or read ``not committed``)."""

import json
import re

import pytest

from bpsa.tools import results

DATE = re.compile(r"\d{4}-\d\d-\d\d")


def _header(path):
    lines = path.read_text().splitlines()
    m = re.fullmatch(r"Written by `(.+)` at commit (\S+) on (\S+)\.", lines[2])
    assert m, lines[:3]
    return lines[0], m.group(1), m.group(2), m.group(3)


def test_write_page_stamps_the_page_and_its_json(tmp_path):
    path = results.write_page(tmp_path / "sub" / "p.md", "A page", "make thing", "| a |\n",
                              data={"rows": [1, 2]}, commit="abc1234", date="2026-01-02")
    assert _header(path) == ("# A page", "make thing", "abc1234", "2026-01-02")
    assert path.read_text().endswith("\n| a |\n")
    assert json.loads(path.with_suffix(".json").read_text()) == {
        "command": "make thing", "commit": "abc1234", "date": "2026-01-02", "rows": [1, 2]}


def test_write_page_defaults_to_now(tmp_path):
    path = results.write_page(tmp_path / "p.md", "T", "cmd", "body")
    _, _, commit, date = _header(path)
    assert commit == results.git_commit() and date == results.today()
    assert re.fullmatch(r"[0-9a-f]{4,}(-dirty)?|unknown", commit) and DATE.fullmatch(date)
    assert not path.with_suffix(".json").exists()


def test_current_command():
    assert results.current_command(["/x/.venv/bin/bpsa", "synth", "--top", "a b"]) \
        == "bpsa synth --top 'a b'"
    assert results.current_command(["/x/src/bpsa/tools/roofline.py", "-o", "d"]) \
        == "python -m bpsa.tools.roofline -o d"


def test_file_stamp_outside_git_is_none(tmp_path):
    (tmp_path / "f.json").write_text("{}")
    assert results.file_stamp(tmp_path / "f.json") is None


def _block(top, config, luts, fmax=None, **extra):
    data = {"top": top, "config": {"name": config}, "targets": {"ecp5": {
        "summary": {"luts": luts, "ffs": 10, "dsps": 1, "brams": 2}}}, **extra}
    if fmax is not None:
        data["timing"] = {"fmax_mhz": {"clk": fmax}}
    return data


def test_area_page_a_table_per_configuration(tmp_path):
    synth = tmp_path / "synth"
    for folder, data in {
            "dma": _block("dma", "cfg_a", 1234, 117.7, command="bpsa synth --top dma",
                          commit="1111111", date="2026-02-03"),
            "pe/x": _block("pe", "cfg_b", 66),
            "rep": {"config": {"name": "cfg_a"}, "targets": ["ecp5"], "blocks": {
                "accelerator": {"targets": {"ecp5": {"summary": {
                    "luts": 40290, "ffs": 5, "dsps": 3, "brams": 21}}}}}},
            "ovh": {"config": {"name": "cfg_b"}, "variants": {}, "overheads": {}}}.items():
        (synth / folder).mkdir(parents=True)
        name = "design_report.json" if folder == "rep" else f"{folder.split('/')[0]}_area.json"
        (synth / folder / name).write_text(json.dumps(data))
    (synth / "dma" / "dma_ecp5_timing.report.json").write_text("{}")     # skipped
    (synth / "cfg_b.toml").write_text("")
    out = tmp_path / "results" / "area.md"
    rows = results.render_area(synth, out, command="make area")
    assert len(rows) == 3
    title, command, commit, date = _header(out)
    assert (title, command) == ("# Area and timing per block", "make area")
    md = out.read_text()
    assert md.index("## cfg_a") < md.index("## cfg_b")
    assert ("| dma | 1,234 | 10 | 1 | 2 | 117.7 | `bpsa synth --top dma` | 1111111, 2026-02-03 |"
            in md)
    # no command recorded: the bpsa synth command rebuilt (the TOML next to the reports)
    assert (f"| pe | 66 | 10 | 1 | 2 |  | `bpsa synth --config {synth.as_posix()}/cfg_b.toml "
            f"--top pe --targets ecp5 -o {synth.as_posix()}/pe/x` | not committed |") in md
    assert "| accelerator (hierarchy kept) | 40,290 |" in md
    assert f"- `{synth.as_posix()}/ovh/ovh_area.json` (not committed)" in md


def _build(board="ulx3s", config="c1", fmax=58.9, **extra):
    return {"board": board, "device": "LFE5U-85F", "config": config, "clock_mhz": 50.0,
            "times_s": {"synth": 100.0, "pnr": 900.0, "total": 1000.0},
            "synth_cells": {"lut": 48331, "ff": 26168, "dsp": 22, "bram": 78},
            "capacity": {"lut": 83640, "ff": 83640, "dsp": 156, "bram": 208}, "fit": True,
            "utilization": {"TRELLIS_COMB": {"used": 51467, "available": 83640}},
            "fmax_mhz": {"pll.clk": fmax}, "timing_met": fmax >= 50, **extra}


def test_boards_add_replaces_the_row_of_its_board_and_configuration(tmp_path):
    boards = tmp_path / "boards"
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_build(fmax=40.0)))
    results.add_board(report, boards, command="bpsa bitstream --board ulx3s")
    report.write_text(json.dumps(_build(fmax=58.9)))
    (tmp_path / "timing_paths.md").write_text("## Failing paths\n")
    path = results.add_board(report, boards, command="bpsa bitstream --board ulx3s --x")
    assert (boards / "ulx3s_c1_timing_paths.md").read_text() == "## Failing paths\n"
    report.write_text(json.dumps(_build(board="icebreaker", config="ice40", fit=False)))
    results.add_board(report, boards, command="bpsa bitstream --board icebreaker")
    assert path.name == "ulx3s_c1.json"
    saved = json.loads(path.read_text())
    assert saved["command"] == "bpsa bitstream --board ulx3s --x"
    assert saved["commit"] == results.git_commit() and saved["date"] == results.today()
    out = tmp_path / "boards.md"
    assert results.render_boards(boards, out, command="make bitstream") == 2
    assert _header(out)[:2] == ("# FPGA boards", "make bitstream")
    md = out.read_text()
    assert ("| ulx3s | `c1` | 48,331 / 83,640 (51,467 placed, 62%) | 26,168 | 22 / 156 "
            "| 78 / 208 | 58.90 | 50 | met | 1,000 s (synth 100 s, pnr 900 s) "
            "| `bpsa bitstream --board ulx3s --x` |") in md
    assert "40.00" not in md
    assert "| icebreaker | `ice40` |" in md and "refused before P&R" in md


def test_training_page_a_row_a_run(tmp_path):
    train = tmp_path / "training"
    train.mkdir()
    run = {"config": "small_bf16", "backend": "model", "epochs": 2, "test_accuracy": 0.95,
           "reference_accuracy": 0.9, "cycles_per_step": 796181,
           "history": [{"test_accuracy": 0.5}, {"test_accuracy": 0.95}],
           "reference": [{"test_accuracy": 0.4}, {"test_accuracy": 0.9}]}
    (train / "torch_a.json").write_text(json.dumps(run))
    results.add_training(train / "torch_a.json", command="bpsa train --json")
    (train / "bf16.json").write_text(json.dumps({
        "command": "python -m bpsa.tools.float_training", "commit": "2222222",
        "date": "2026-03-04", "float": run, "float_reference_fp32": run["reference"]}))
    out = tmp_path / "training.md"
    rows = results.render_training(train, out, command="make train-torch")
    assert len(rows) == 3
    assert _header(out)[:2] == ("# Training curves", "make train-torch")
    md = out.read_text()
    stamp = f"{results.git_commit()}, {results.today()}"
    assert ("| torch_a | `small_bf16` | model | 2 | 95.00% | 90.00% | 796,181 "
            f"| `bpsa train --json` | {stamp} |") in md
    assert ("| bf16: float | `small_bf16` | model | 2 | 95.00% | 90.00% | 796,181 "
            "| `python -m bpsa.tools.float_training` | 2222222, 2026-03-04 |") in md
    assert "| bf16: float_reference_fp32 | PyTorch |  | 2 | 90.00% |" in md


def test_index_lists_every_page_in_a_toctree(tmp_path):
    md = results.render_index(tmp_path / "index.md").read_text()
    toctree = md[md.index("```{toctree}"):]
    for name, title, _, target in results.PAGES:
        assert f"[{title}]({name}.md)" in md and f"`{target.split(', ')[0]}`" in md
        assert f"\n{name}\n" in toctree


def test_main_renders_a_page(tmp_path, capsys):
    (tmp_path / "synth").mkdir()
    out = tmp_path / "area.md"
    assert results.main(["area", "--synth", str(tmp_path / "synth"), "-o", str(out)]) == 0
    assert _header(out)[1].startswith("python -m bpsa.tools.results area --synth ")
    assert "0 rows" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        results.main(["boards", "--add", "x.json"])       # --add needs --command


def test_format_table(tmp_path):
    """A row a model and a column a format, each cell the accuracy and its difference from the
    float32 run beside it in points (the references listed); a summary without ``model`` / ``arithmetic`` is read from its
    command and preset; a JSON without a reference is left out."""
    runs = {
        "a": {"history": [{}], "command": "bpsa train --model x.y:lenet --config small_bf16",
              "config": "small_bf16", "test_accuracy": 0.95, "reference_accuracy": 0.9},
        "b": {"history": [{}], "model": "x.y:lenet", "arithmetic": "mxint8",
              "mx_scale_rule": "ceil", "test_accuracy": 0.885, "reference_accuracy": 0.9},
        "d": {"history": [{}], "model": "x.y:lenet", "arithmetic": "mxint8",
              "mx_scale_rule": "floor", "test_accuracy": 0.9, "reference_accuracy": 0.95},
        "c": {"history": [{}], "model": "x.y:cnn", "arithmetic": "int",
              "test_accuracy": 0.5, "reference_accuracy": None},
    }
    for name, data in runs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    lines = results.format_table(tmp_path).splitlines()
    assert lines[0] == "| model | PyTorch float32 | bf16 | mxint8 (ceil) | mxint8 (floor) |"
    assert lines[2] == ("| `lenet` | 90.00% / 95.00% | 95.00% (+5.0) | 88.50% (-1.5) | "
                        "90.00% (-5.0) |")
    assert len(lines) == 3


def test_git_commit_ignores_written_results(tmp_path):
    """A checkout whose only changes are measurements' outputs (docs/results, docs/synth,
    docs/figures) is its commit; a changed source file makes it dirty."""
    import subprocess

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    for rel in ("src/a.py", "docs/synth/x/area.md", "docs/results/r.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("1\n")
    git("add", ".")
    git("commit", "-q", "-m", "c")
    (tmp_path / "docs/synth/x/area.md").write_text("2\n")
    (tmp_path / "docs/results/r.md").write_text("2\n")
    clean = results.git_commit(tmp_path / "docs/synth")
    assert re.fullmatch(r"[0-9a-f]{4,}", clean)
    (tmp_path / "src/a.py").write_text("2\n")
    assert results.git_commit(tmp_path) == clean + "-dirty"
