"""The board top and the bitstream flow: board settings, the resource count and fit check,
build plans for both boards (no tools run), the fit refusal of an obviously too large
configuration after Yosys and before place and route (through ``bpsa bitstream``), and the
whole system end to end under Verilator (``src/bpsa/sim/testbenches/tb_board.py``). Bitstream builds
themselves are ``make bitstream``, not part of the tests."""

import gc
import json
import os
import sys
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable

from bpsa.config import Config, load_config
from bpsa.platform.board import (
    BOARDS,
    FitError,
    SocTop,
    check_fit,
    count_resources,
    load_board,
    load_core,
    prepare,
)


def test_board_settings():
    for name in BOARDS:
        s = load_board(name)
        assert s.clock_hz > 0 and s.sram_bytes & (s.sram_bytes - 1) == 0
        assert {"lut", "ff", "dsp", "bram"} <= set(s.capacity)
        load_config(s.config)
        assert s.platform_class().__name__.endswith("Platform")
    assert load_board("icebreaker").capacity["dsp"] == 8
    assert load_board("ulx3s").capacity["bram"] == 208
    with pytest.raises(ValueError, match=r"board must be one of \['icebreaker', 'ulx3s'\]"):
        load_board("arty")


def test_count_and_fit():
    cells = {"SB_LUT4": 100, "SB_DFFE": 10, "SB_DFFESR": 5, "SB_MAC16": 9,
             "SB_RAM40_4K": 3, "SB_CARRY": 50}
    used = count_resources("ice40", cells)
    assert used == {"lut": 100, "ff": 15, "dsp": 9, "bram": 3, "spram": 0}
    cap = load_board("icebreaker").capacity
    with pytest.raises(FitError, match=r"DSP: 9 used > 8 available") as e:
        check_fit(used, cap)
    assert "LUT" not in str(e.value)
    used = count_resources("ecp5", {"LUT4": 10, "CCU2C": 5, "TRELLIS_FF": 7, "DP16KD": 300,
                                    "MULT18X18D": 2})
    assert used == {"lut": 20, "ff": 7, "dsp": 2, "bram": 300}
    with pytest.raises(FitError, match=r"BRAM: 300 used > 208 available"):
        check_fit(used, load_board("ulx3s").capacity)
    check_fit({"lut": 5280, "ff": 0, "dsp": 8, "bram": 30, "spram": 4}, cap)


def test_core_loading():
    from bpsa.platform.board_tops import StandInCore
    assert load_core("bpsa.platform.board_tops:StandInCore") is StandInCore
    assert load_core(StandInCore) is StandInCore
    with pytest.raises(ValueError, match="core must be 'module:attribute'"):
        load_core("bpsa.platform.board_tops")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(TypeError, match="config must be a Config"):
            SocTop({"rows": 2}, core=StandInCore)
        with pytest.raises(ValueError, match="dma_data_width 128 \\(allowed on boards: 64\\)"):
            SocTop(Config(name="wide", dma_data_width=128), core=StandInCore)
        gc.collect()


@pytest.mark.parametrize("board", BOARDS)
def test_build_plan(board, tmp_path):
    """The platform's build plan with the stand-in core: pins, clock constraint and the tool
    steps (nothing is run)."""
    s, steps = prepare(board, Config(name="t", buf_a_depth=64, buf_b_depth=64,
                                     buf_p_depth=64), tmp_path,
                       core="bpsa.platform.board_tops:StandInCore")
    assert [v for v, _ in steps] == (["YOSYS", "NEXTPNR_ICE40", "ICEPACK"] if board ==
                                     "icebreaker" else ["YOSYS", "NEXTPNR_ECP5", "ECPPACK"])
    assert "--timing-allow-fail" in steps[1][1] and "--report" in steps[1][1]
    assert "--detailed-timing-report" in steps[1][1]
    ys = (tmp_path / "top.ys").read_text()
    assert "stat -json" in ys
    if board == "icebreaker":
        assert "-dsp" in ys
        pcf = (tmp_path / "top.pcf").read_text()
        assert "set_frequency" in pcf and " 12.0" in pcf
        assert "uart_0__rx__io 6" in pcf and "uart_0__tx__io 9" in pcf
    else:
        lpf = (tmp_path / "top.lpf").read_text()
        # The oscillator's port constraint and the design clock's, on the PLL output.
        assert 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ' in lpf
        assert f'FREQUENCY NET "pll.clkop" {float(s.clock_hz)} HZ' in lpf
        assert "cell \\EHXPLLL " in (tmp_path / "top.il").read_text()
        assert '"M1"' in lpf and '"L4"' in lpf
        # synth_ecp5 in two halves around splitnets (Yosys issue #4349 in ABC9)
        synth = [line for line in ys.splitlines() if "synth_ecp5" in line or
                 line == "splitnets"]
        assert [line.split(" -run ")[-1] if "synth" in line else line for line in synth] == \
            [":map_luts", "splitnets", "map_luts:"]


def test_fit_refusal(tmp_path, capsys):
    """A core with a multiplier per PE of the 4x4 ``small`` preset on the iCE40UP5K (8
    SB_MAC16): refused after Yosys, before nextpnr, with the overflowing resource named; exit
    status 2."""
    from bpsa.cli import main
    status = main(["bitstream", "--board", "icebreaker", "--config", "small",
                   "--core", "bpsa.platform.board_tops:MultiplierCore", "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2
    assert "does not fit iCE40UP5K-SG48 (icebreaker) with configuration 'small'" in err
    assert "DSP: 16 used > 8 available" in err
    assert not (tmp_path / "top.asc").exists() and not (tmp_path / "pnr.log").exists()


def test_missing_core(tmp_path, capsys):
    from bpsa.cli import main
    assert main(["bitstream", "--board", "ulx3s", "--core", "sim.nonexistent:Core",
                 "-o", str(tmp_path)]) == 2
    assert "is not available" in capsys.readouterr().err


@pytest.mark.cocotb
def test_board_verilator():
    """Tensor in over the serial line, the stand-in core's DMA copies it through the SRAM's AXI
    port, result out; STATUS, irq, DMA errors."""
    from bpsa.platform.board_tops import register_tops
    from bpsa.sim.runner import run_cocotb
    register_tops()
    tests, failures = run_cocotb(load_config("small"), "bpsa.sim.testbenches.tb_board",
                                 top="soc_standin")
    assert tests == 1 and failures == 0


@pytest.mark.cocotb
@pytest.mark.long
def test_accelerator_over_serial_verilator():
    """The real accelerator in the board system, driven by the host driver over the serial
    protocol on a simulated UART line: a forward layer equals the golden model."""
    from bpsa.platform.board_tops import register_tops
    from bpsa.sim.runner import run_cocotb
    register_tops()
    tests, failures = run_cocotb(load_config("small"), "bpsa.sim.testbenches.tb_board_accel",
                                 top="soc_accel")
    assert tests == 1 and failures == 0


def test_route_limit():
    """``--config auto`` skips a design that fits but is above the board's measured routable
    share; the ULX3S limit lies between the 4x4 ``ecp5_train`` that routed (32,574 LUTs,
    1db0b59) and the 8x8 ``ecp5_train8`` that did not finish routing (about 48,400)."""
    from bpsa.platform.board import check_route_limit
    settings = load_board("ulx3s")
    cap = settings.capacity
    assert settings.route_limit == {"lut": 0.5}
    check_route_limit({"lut": 32574, "ff": 20508}, cap, settings.route_limit)   # 4x4
    with pytest.raises(FitError, match=r"LUT: 48400 used > 50% of 83640 \(route_limit\)"):
        check_route_limit({"lut": 48400}, cap, settings.route_limit)            # 8x8
    assert load_board("icebreaker").route_limit == {}
    check_route_limit({"lut": 10 ** 6}, cap, {})


def test_route_limit_setting_checked(tmp_path):
    from bpsa.platform.board import CONSTRAINTS_DIR
    text = (CONSTRAINTS_DIR / "ulx3s.toml").read_text().replace("lut = 0.5", "lut = 1.5")
    (tmp_path / "ulx3s.toml").write_text(text)
    with pytest.raises(ValueError, match="route_limit.lut = 1.5"):
        load_board("ulx3s", constraints_dir=tmp_path)


def test_build_first_fit_tries_smaller_presets(monkeypatch):
    """``--config auto``: the presets largest first; each one that does not fit is logged and
    the next tried; the last one's FitError when none fits."""
    from bpsa.platform import board
    candidates = board.presets_largest_first()
    sizes = [board.preset_size(c) for c in candidates]
    assert sizes == sorted(sizes, reverse=True)
    fitting = candidates[2].name

    def build(b, config, out, **kw):
        if config.name != fitting:
            raise board.FitError(f"{config.name} is too large")
        return {"config": config.name, "route_check": kw["route_check"]}
    monkeypatch.setattr(board, "build_bitstream", build)
    logged = []
    report = board.build_first_fit("ulx3s", candidates, "unused", route_check=True,
                                   log=logged.append)
    assert report == {"config": fitting, "route_check": True}
    assert logged == [f"[ulx3s] {c.name} is too large; trying a smaller preset"
                      for c in candidates[:2]]
    with pytest.raises(board.FitError, match=f"{candidates[0].name} is too large"):
        board.build_first_fit("ulx3s", candidates[:1], "unused", log=logged.append)
    with pytest.raises(ValueError, match="at least one configuration"):
        board.build_first_fit("ulx3s", [], "unused")


def test_seed_args_name_each_runs_files():
    from bpsa.platform.board import _seed_args
    args = ["--json", "top.json", "--textcfg", "top.config", "--report", "top.report.json",
            "--seed", "1", "--router", "router1"]
    out, renamed = _seed_args(args, 7, "router2")
    assert out == ["--json", "top.json", "--textcfg", "top.seed7.config", "--report",
                   "top.seed7.report.json", "--seed", "7", "--router", "router2"]
    assert renamed == {"top.seed7.config": "top.config",
                       "top.seed7.report.json": "top.report.json"}
    assert _seed_args(["--asc", "top.asc"], 2)[0] == ["--asc", "top.seed2.asc", "--seed", "2"]


def test_seeds_run_and_the_best_is_kept(tmp_path):
    """A stand-in nextpnr: seed N routes at 50 + N MHz against 52 MHz, seed 3 fails. Seed 2
    is the best that routed: its files get the names the packer reads."""
    from bpsa.platform.board import _place_and_route
    tool = tmp_path / "fake_nextpnr.py"
    tool.write_text(
        "import json, sys\n"
        "a = sys.argv[1:]\n"
        "seed = int(a[a.index('--seed') + 1])\n"
        "if seed == 3:\n"
        "    print('ERROR: failed to route'); sys.exit(1)\n"
        "fmax = {'clk': {'achieved': 50.0 + seed, 'constraint': 52}}\n"
        "open(a[a.index('--report') + 1], 'w').write(json.dumps({'fmax': fmax}))\n"
        "open(a[a.index('--textcfg') + 1], 'w').write(f'seed {seed}')\n"
        "print('routed', seed)\n")
    env = {**os.environ, "NEXTPNR_ECP5": sys.executable}
    args = [str(tool), "--textcfg", "top.config", "--report", "top.report.json", "--seed", "1"]
    logged = []
    seconds, fmax, best = _place_and_route("NEXTPNR_ECP5", args, tmp_path, env, [1, 2, 3],
                                           None, 2, logged.append)
    assert best == 2 and fmax == {1: {"clk": 51.0}, 2: {"clk": 52.0}}
    assert (tmp_path / "top.config").read_text() == "seed 2"
    assert json.loads((tmp_path / "top.report.json").read_text())["fmax"]["clk"][
        "achieved"] == 52.0
    assert "routed 2" in (tmp_path / "pnr.log").read_text()
    assert len(logged) == 1 and logged[0].startswith("seed 3: NEXTPNR_ECP5 failed")
    with pytest.raises(RuntimeError, match="NEXTPNR_ECP5 failed"):
        _place_and_route("NEXTPNR_ECP5", args, tmp_path, env, [3], None, 1, logged.append)
