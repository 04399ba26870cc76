"""The front-end benchmark's core on a few small layers of ``small``: its table is
:func:`bpsa.models.perf.layer_cycles`' figures for both front ends, a layer the channel-first
plan refuses runs in the driver's column strips (their figures added up) or says why, the
multi-tile and stride tables hold what they claim, and the figure is written the same twice.
``make bench-frontends`` runs it on the whole workload (paper16)."""

import json
from dataclasses import replace

import pytest

from bpsa.config import load_config
from bpsa.models.perf import layer_cycles
from bpsa.plan import tiling
from bpsa.spec.layer import ConvLayer
from bpsa.tools import bench_frontends as bf
from bpsa.tools.results import git_commit, today

SMALL = load_config("small_cf")


def _row(name, c, h, w, k, r, stride=1, pad=0):
    return {"network": "t", "layer": name, "name": f"t.{name}", "C": c, "H": h, "W": w,
            "K": k, "R": r, "S": r, "stride": stride, "pad": pad, "dilation": 1}


ROWS = [
    _row("a", 2, 10, 10, 6, 3, pad=1),       # multi-tile on 4 rows (2 taps a tile)
    _row("b", 8, 10, 10, 4, 1, stride=2),    # two channel blocks
    _row("c", 4, 8, 200, 4, 5),              # a 5-row band of X is 1,000 pixels > 512:
                                              # channel-first in column strips
    _row("d", 4, 16, 16, 4, 16),             # W of a 4-channel block (1,024 words) > 512
]


def test_model_rows_are_layer_cycles():
    model = bf.model_rows(SMALL, ROWS)
    assert [m["layer"] for m in model] == ["t.a", "t.b", "t.c", "t.d"]
    for row, rec in zip(ROWS[:2], model[:2]):
        layer = bf.row_layer(row)
        for fe in bf.FRONTENDS:
            m = layer_cycles(SMALL, "forward", layer, frontend=fe)
            f = rec[fe]
            assert (f["cycles"], f["compute_cycles"], f["x_sram_words"], f["load_wait_cycles"],
                    f["dma_bytes"], f["tiles"], f["strips"]) == (
                m.cycles, m.compute_cycles, m.x_sram_words, m.load_wait_cycles,
                m.dma_read_bytes + m.dma_write_bytes, m.tiles, 0)
            assert f["utilization"] == pytest.approx(m.utilization)
            assert f["x_sram_operands"] == m.x_sram_words * (8 if fe == "feeder" else 1)
        f, c = rec["feeder"]["cycles"], rec["channel_first"]["cycles"]
        assert rec["winner"] == ("channel_first" if c < f else "feeder")
        assert rec["by"] == pytest.approx(max(f, c) / min(f, c))

    # t.c: the channel-first plan refuses the layer, the driver's column strips run it
    c = model[2]["channel_first"]
    with pytest.raises(ValueError, match="not even one row band fits"):
        tiling.plan(SMALL, "forward", bf.row_layer(ROWS[2]), mode="channel_first")
    strips, _ = tiling.column_strips(SMALL, "forward", ConvLayer.conv(1, 4, 8, 200, 4, 5, 5),
                                     mode="channel_first")
    parts = [layer_cycles(SMALL, "forward", replace(bf.row_layer(ROWS[2]), width=st.engine_w),
                          frontend="channel_first") for st in strips]
    assert c["strips"] == len(strips) > 1
    assert c["cycles"] == sum(p.cycles for p in parts)
    assert c["x_sram_words"] == sum(p.x_sram_words for p in parts)
    assert c["utilization"] == pytest.approx(4 * 4 * 4 * 196 * 25 / (16 * c["cycles"]))
    assert model[2]["feeder"]["strips"] == 0

    # t.d: refused by channel-first, in strips too; the feeder runs it alone
    assert "W of one channel block" in model[3]["channel_first"]["refused"]
    assert model[3]["winner"] == "feeder" and model[3]["by"] is None

    text = bf.markdown(SMALL, model, [], [])
    lines = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| t.")}
    for rec in model[:3]:
        line = lines[f"| {rec['layer']}"]
        for fe in bf.FRONTENDS:
            assert f"{rec[fe]['cycles']:,}" in line
        assert f"{bf._SHORT[rec['winner']]} {rec['by']:.2f}x" in line
    assert f"({c['strips']} strips)" in lines["| t.c"]
    assert "refused: W of one channel block" in lines["| t.d"]
    assert "F (only)" in lines["| t.d"]


def test_multi_tile_and_stride_tables():
    multi = bf.multi_tile_rows(SMALL, ROWS)
    assert [m["layer"] for m in multi] == ["t.a"]           # 2 C <= 4 rows
    m = multi[0]
    assert m["taps"] == 2 and m["with"]["tiles"] < m["without"]["tiles"]
    assert m["gain"] == pytest.approx(m["without"]["cycles"] / m["with"]["cycles"])
    assert m["gain"] > 1
    want = layer_cycles(SMALL, "forward", bf.row_layer(ROWS[0]), frontend="channel_first",
                        multi_tile=False)
    assert m["without"]["cycles"] == want.cycles

    st = bf.stride_rows(SMALL, ROWS[0], strides=(1, 2))
    assert [(r["stride"], r["h"], r["out"]) for r in st] == [(1, 10, (10, 10)),
                                                             (2, 19, (10, 10))]
    for r in st:
        for fe in bf.FRONTENDS:
            layer = replace(bf.row_layer(ROWS[0]), height=r["h"], width=r["w"],
                            stride_h=r["stride"], stride_w=r["stride"])
            assert r[fe]["cycles"] == layer_cycles(SMALL, "forward", layer,
                                                   frontend=fe).cycles
    # the same outputs (19 x 19 = 361 pixels still fit a half of the banks, 512, without
    # bands): the channel-first engine's cycles and bank reads do not move
    assert st[0]["channel_first"]["compute_cycles"] == st[1]["channel_first"]["compute_cycles"]
    assert st[0]["channel_first"]["x_sram_words"] == st[1]["channel_first"]["x_sram_words"]
    text = bf.markdown(SMALL, [], multi, st)
    assert f"| t.a | 2x10x10 -> 6, 3x3/1 p1 | 2 | {m['with']['tiles']:,} / " in text
    assert "| 2 | 19 x 19 |" in text


def test_main_table_and_plot(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bf, "load_conv_layers", lambda path=None: [dict(r) for r in ROWS])
    png, page = tmp_path / "f.png", tmp_path / "bench_frontends.md"
    argv = ["--config", "small_cf", "--stride-layer", "t.a", "--plot", str(png),
            "--page", str(page)]
    assert bf.main(argv) == 0
    out = capsys.readouterr().out
    assert "| t.b |" in out and "Multi-tile" in out and "Stride insensitivity" in out
    # the results page: header (command, commit, date), the tables printed, the JSON twin
    lines = page.read_text().splitlines()
    assert lines[:3] == ["# Forward front ends", "", "Written by `python -m "
                         f"bpsa.tools.bench_frontends {' '.join(argv)}` at commit "
                         f"{git_commit()} on {today()}."]
    assert "\n".join(lines[4:]) in out
    assert json.loads(page.with_suffix(".json").read_text())["config"] == "small_cf"
    first = png.read_bytes()
    assert len(first) > 1000
    assert bf.main(["--config", "small_cf", "--stride-layer", "t.a", "--plot", str(png)]) == 0
    assert png.read_bytes() == first                   # the same bytes on every run
    capsys.readouterr()
    assert bf.main(["--config", "small_cf", "--stride-layer", "t.z"]) == 2
    assert "is not a workload layer" in capsys.readouterr().err
    nocf = tmp_path / "nocf.toml"
    nocf.write_text('rows = 4\ncols = 4\nforward_frontends = ["feeder"]\n')
    assert bf.main(["--config", str(nocf)]) == 2
    assert "does not generate the channel-first front end" in capsys.readouterr().err


def test_workload_csv_is_read():
    rows = bf.load_conv_layers()
    assert len(rows) >= 30 and rows[0]["name"] == "alexnet.features.0"
    assert all(isinstance(r[k], int) for r in rows for k in ("C", "H", "K", "stride"))


def test_scaled_keeps_the_kernel_and_fits_it():
    """A layer scaled for the RTL keeps its kernel, stride, padding and dilation, has at most
    the channels and the size asked, and still has an output pixel."""
    from bpsa.spec.layer import out_size
    from bpsa.tools.bench_frontends import load_conv_layers, scaled
    for row in load_conv_layers():
        sc = scaled(row, 8, 24)
        assert (sc["R"], sc["S"], sc["stride"], sc["pad"], sc["dilation"]) == \
            (row["R"], row["S"], row["stride"], row["pad"], row["dilation"])
        assert sc["C"] == min(row["C"], 8) and sc["K"] == min(row["K"], 8)
        assert sc["H"] <= max(24, row["R"]) and sc["W"] <= max(24, row["S"])
        assert out_size(sc["H"], sc["R"], sc["stride"], sc["pad"], sc["dilation"]) >= 1
