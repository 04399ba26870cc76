"""The ECP5 PLL: divider computation within the EHXPLLL limits, the refusal of a frequency it
cannot make, and the instance with its clock constraint in the ULX3S board top (elaborated and
extracted only; no Yosys or nextpnr run)."""

from dataclasses import replace
from fractions import Fraction

import pytest

from bpsa.config import Config
from bpsa.gateware.bus.uart import uart_divisor
from bpsa.platform import board
from bpsa.platform.board import load_board, prepare
from bpsa.platform.pll import ECP5_PLL_LIMITS, ecp5_pll_dividers

TINY = Config(name="t", buf_a_depth=64, buf_b_depth=64, buf_p_depth=64)
STANDIN = "bpsa.platform.board_tops:StandInCore"


def _check(fin, fout, d):
    lim = ECP5_PLL_LIMITS
    pfd = Fraction(fin) / d["CLKI_DIV"]
    assert pfd * d["CLKFB_DIV"] == fout                       # exact, feedback from CLKOP
    vco = Fraction(fout) * d["CLKOP_DIV"]
    assert vco == d["vco_hz"] and lim["vco"][0] <= vco <= lim["vco"][1]
    assert lim["pfd"][0] <= pfd <= lim["pfd"][1]
    for k in ("CLKI_DIV", "CLKFB_DIV", "CLKOP_DIV"):
        assert lim["div"][0] <= d[k] <= lim["div"][1]
    assert d["CLKOP_CPHASE"] == d["CLKOP_DIV"] - 1


def test_dividers():
    assert ecp5_pll_dividers(25e6, 12_500_000) == {
        "CLKI_DIV": 2, "CLKFB_DIV": 1, "CLKOP_DIV": 48, "CLKOP_CPHASE": 47,
        "vco_hz": 600_000_000}
    assert ecp5_pll_dividers(25_000_000, 10_000_000) == {
        "CLKI_DIV": 5, "CLKFB_DIV": 2, "CLKOP_DIV": 60, "CLKOP_CPHASE": 59,
        "vco_hz": 600_000_000}
    for fout in (6_250_000, 12_500_000, 20_000_000, 25_000_000, 40_000_000,
                 50_000_000, 100_000_000, 125_000_000, 200_000_000):
        _check(25_000_000, fout, ecp5_pll_dividers(25_000_000, fout))
    _check(12_000_000, 48_000_000, ecp5_pll_dividers(12_000_000, 48_000_000))


@pytest.mark.parametrize("fout", [7_777_777, 12_345_678, 10_000_001, 8_000_000])
def test_dividers_refused(fout):
    with pytest.raises(ValueError, match=rf"clock_hz {fout} cannot be made exactly by the "
                                         rf"ECP5 PLL from 25 MHz"):
        ecp5_pll_dividers(25_000_000, fout)


def test_dividers_out_of_range():
    with pytest.raises(ValueError, match=r"clock_hz 1000000 is outside the ECP5 PLL output "
                                         r"range"):
        ecp5_pll_dividers(25_000_000, 1_000_000)
    with pytest.raises(ValueError, match=r"clock_hz 500000000 is outside"):
        ecp5_pll_dividers(25_000_000, 500_000_000)
    with pytest.raises(ValueError, match=r"PLL input 1e\+06 Hz is outside"):
        ecp5_pll_dividers(1_000_000, 10_000_000)


def test_ulx3s_top_has_pll(tmp_path, monkeypatch):
    """The board's clock_hz (not the 25 MHz oscillator's) comes from an EHXPLLL; the timing
    constraint is on the PLL output net, the oscillator keeps its port constraint, and the UART
    divisor is computed from the design clock."""
    s = load_board("ulx3s")
    assert s.clock_hz != 25_000_000
    div = ecp5_pll_dividers(25_000_000, s.clock_hz)
    divisors = []

    class Recording(board.SocTop):
        def __init__(self, *args, divisor, **kwargs):
            divisors.append(divisor)
            super().__init__(*args, divisor=divisor, **kwargs)

    monkeypatch.setattr(board, "SocTop", Recording)
    prepare("ulx3s", TINY, tmp_path, core=STANDIN)
    assert divisors == [uart_divisor(s.clock_hz, s.baud)]
    il = (tmp_path / "top.il").read_text()
    assert il.count("cell \\EHXPLLL ") == 1
    for k in ("CLKI_DIV", "CLKFB_DIV", "CLKOP_DIV", "CLKOP_CPHASE"):
        assert f"parameter \\{k} {div[k]}\n" in il
    assert 'parameter \\FEEDBK_PATH "CLKOP"' in il
    lpf = (tmp_path / "top.lpf").read_text()
    assert f'FREQUENCY NET "pll.clkop" {float(s.clock_hz)} HZ;' in lpf
    assert 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ;' in lpf
    assert lpf.count("FREQUENCY") == 2


def test_ulx3s_at_oscillator_has_no_pll(tmp_path):
    s = replace(load_board("ulx3s"), clock_hz=25_000_000)
    prepare("ulx3s", TINY, tmp_path, core=STANDIN, settings=s)
    assert "EHXPLLL" not in (tmp_path / "top.il").read_text()
    lpf = (tmp_path / "top.lpf").read_text()
    assert "FREQUENCY NET" not in lpf and 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ;' in lpf


def test_clock_refused(tmp_path):
    s = replace(load_board("ulx3s"), clock_hz=7_777_777)
    with pytest.raises(ValueError, match=r"clock_hz 7777777 cannot be made exactly by the ECP5 "
                                         r"PLL .*ulx3s\.toml"):
        prepare("ulx3s", TINY, tmp_path, core=STANDIN, settings=s)
    s = replace(load_board("icebreaker"), clock_hz=6_000_000)
    with pytest.raises(ValueError, match=r"clock_hz must be the board oscillator \(12000000 Hz\) "
                                         r"on ice40 boards \(no PLL is generated there\), not "
                                         r"6000000"):
        prepare("icebreaker", TINY, tmp_path, core=STANDIN, settings=s)
    assert not (tmp_path / "top.il").exists()


def test_refusal_names_the_nearest_clocks():
    # from 25 MHz the PLL makes f = 25 MHz * CLKFB_DIV / CLKI_DIV with CLKI_DIV <= 8 (phase
    # detector >= 3.125 MHz): next to 66.6 MHz, 25 * 21 / 8 = 65.625 and 25 * 11 / 4 = 68.75
    with pytest.raises(ValueError, match=r"the nearest it makes: 65625000 Hz or 68750000 Hz$"):
        ecp5_pll_dividers(25_000_000, 66_600_000)
    for f in (65_625_000, 68_750_000):
        _check(25_000_000, f, ecp5_pll_dividers(25_000_000, f))


def test_with_clock(tmp_path):
    s = load_board("ulx3s")
    assert board.with_clock(s, None) is s
    fast = board.with_clock(s, 62_500_000)
    assert fast.clock_hz == 62_500_000 and fast.config == s.config
    with pytest.raises(ValueError, match=r"clock_hz 66600000 cannot be made exactly"):
        board.with_clock(s, 66_600_000)
    with pytest.raises(ValueError, match=r"clock_hz must be a positive integer \(Hz\), not 0"):
        board.with_clock(s, 0)
    ice = load_board("icebreaker")
    assert board.with_clock(ice, 12_000_000).clock_hz == 12_000_000
    with pytest.raises(ValueError, match=r"clock_hz must be the icebreaker oscillator "
                                         r"\(12000000 Hz\): no PLL is generated on ice40 "
                                         r"boards, not 24000000"):
        board.with_clock(ice, 24_000_000)


def test_bitstream_clock_option(tmp_path, capsys):
    from bpsa.cli import main
    for clock, why in (("66.6", "--clock 66.6: clock_hz 66600000 cannot be made exactly"),
                       ("62.5000001", "--clock must be a positive frequency in MHz with a "
                                      "whole number of Hz, not 62.5"),
                       ("-5", "--clock must be a positive frequency"),
                       ):
        assert main(["bitstream", "--board", "ulx3s", "--clock", clock,
                     "-o", str(tmp_path / "b")]) == 2
        err = capsys.readouterr().err
        assert why in err, err
    assert not (tmp_path / "b" / "top.il").exists()
