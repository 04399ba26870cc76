"""The native (compiled) simulation transport: the host driver runs the whole accelerator under
Verilator through it, every phase bit-exact against the golden model, with and without random
memory back-pressure (which changes cycles, never results)."""

import asyncio

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.host.driver import Driver
from bpsa.models import golden
from bpsa.spec.numeric import wrap_array

pytestmark = pytest.mark.verilator

SMALL = load_config("small")


async def _step(t, rng, config=SMALL):
    drv = Driver(t, config, mem_size=1 << 21)
    await drv.open()
    x = rng.integers(-128, 128, (2, 3, 11, 9))
    w = rng.integers(-128, 128, (5, 3, 3, 3))
    args = ((2, 1), (1, 1), (1, 1))            # stride, padding, dilation
    y = await drv.forward(x, w, *args)
    cycles = [drv.counters["busy_cycles"]]
    assert np.array_equal(y, wrap_array(golden.conv2d(x, w, *args), 32))
    dy = rng.integers(-128, 128, y.shape)
    dx = await drv.loss(dy, w, (11, 9), *args)
    cycles.append(drv.counters["busy_cycles"])
    assert np.array_equal(dx, wrap_array(golden.conv2d_input_grad(dy, w, (11, 9), *args), 32))
    dw = await drv.gradient(x, dy, (3, 3), *args)
    cycles.append(drv.counters["busy_cycles"])
    assert np.array_equal(dw, wrap_array(golden.conv2d_weight_grad(x, dy, (3, 3), *args), 32))
    fx, fw, fdy = (rng.integers(-128, 128, s) for s in ((6, 21), (9, 21), (6, 9)))
    fdx, fdw = await drv.fc_backward(fx, fw, fdy)
    cycles.append(drv.counters["busy_cycles"])
    assert np.array_equal(fdx, fdy @ fw) and np.array_equal(fdw, fdy.T @ fx)
    return cycles


def test_driver_on_native_transport():
    from bpsa.sim.native import NativeTransport
    results = []
    for stall in (0.0, 0.4):
        with NativeTransport(SMALL, mem_bytes=1 << 21, seed=5, stall=stall) as t:
            results.append(asyncio.run(_step(t, np.random.default_rng(2))))
            assert t.cycles > sum(results[-1])
    plain, stalled = results
    assert all(s > p for p, s in zip(plain, stalled)), (plain, stalled)


@pytest.mark.long
def test_wide_memory_bus():
    """dma_data_width 256: every phase bit-exact under memory back-pressure (the harness
    moves 32-byte beats)."""
    from bpsa.sim.native import NativeTransport
    cfg = SMALL.replace(dma_data_width=256, name="small_bus256")
    with NativeTransport(cfg, mem_bytes=1 << 21, seed=3, stall=0.3, opt="-O0") as t:
        asyncio.run(_step(t, np.random.default_rng(4), cfg))


def test_native_transport_checks():
    from bpsa.sim.native import NativeTransport
    with pytest.raises(ValueError, match="stall must be a probability"):
        NativeTransport(SMALL, stall=1.0)
    with NativeTransport(SMALL, mem_bytes=4096) as t:
        with pytest.raises(ValueError, match="outside 4096 bytes"):
            asyncio.run(t.write_mem(4000, bytes(200)))
        asyncio.run(t.write_mem(8, b"\x01\x02"))
        assert asyncio.run(t.read_mem(8, 3)) == b"\x01\x02\x00"


def test_simulate_entry_point():
    """``bpsa.simulate``: a layer in a few lines, numpy in and out, with the counters."""
    import bpsa
    rng = np.random.default_rng(7)
    x, w = rng.integers(-128, 128, (1, 4, 12, 12)), rng.integers(-128, 128, (6, 4, 3, 3))
    with bpsa.simulate("small") as acc:
        y = acc.forward(x, w, stride=2, padding=1)
        assert np.array_equal(y, wrap_array(golden.conv2d(x, w, 2, 1), 32))
        assert acc.counters["macs"] + acc.counters["gated_macs"] >= y.size * 4 * 9
        dw = acc.gradient(x, y % 7, (3, 3), stride=2, padding=1)
        assert np.array_equal(dw, golden.conv2d_weight_grad(x, y % 7, (3, 3), 2, 1))
        # the forward's output requantized for the next layer: 8-bit operands
        y8 = acc.forward(x, w, stride=2, padding=1, requant=9)
        assert np.array_equal(y8, golden.requantize(golden.conv2d(x, w, 2, 1), 9, 8))
        assert acc.counters["dma_write_bytes"] == y.shape[0] * 2 * 6 * 6 * 4


def test_native_top_registers_the_reset():
    """The native build's top puts the reset behind a register and keeps every other port
    (read from the build's own Verilog: the accelerator is elaborated once)."""
    from bpsa.sim.native import build_native, native_top
    built = (build_native(SMALL, progress=False).parent / "accelerator.v").read_text()
    text = built[:built.index("module accelerator_native(")]
    top = native_top(text)
    assert built.endswith(top)
    assert "always @(posedge clk) rst_q <= rst;" in top and ".rst(rst_q)" in top
    header = text[text.index("\nmodule accelerator("):].split(";")[0]
    for port in ("clk", "irq", "axil__awaddr", "mem__rdata", "mem__wstrb"):
        assert port in header and f".{port}({port})" in top


def test_watchdog_ends_a_run_with_the_status():
    """A run that takes longer than the watchdog allows ends with HangError naming STATUS and
    the cycle count, instead of waiting forever."""
    from bpsa.sim.native import HangError, NativeTransport
    with NativeTransport(SMALL, mem_bytes=1 << 20) as t:
        drv = Driver(t, SMALL, mem_size=1 << 20)
        asyncio.run(drv.open())
        t.watchdog = 50
        x, w = np.ones((1, 4, 12, 12), dtype=np.int64), np.ones((4, 4, 3, 3), dtype=np.int64)
        with pytest.raises(HangError, match=r"no interrupt .* cycles after START \(watchdog 50\);"
                                            r" STATUS 0x[0-9a-f]+ at cycle"):
            asyncio.run(drv.forward(x, w))


def _fst_time_steps(path, var):
    """The time steps of an FST file (read by pywellen, the reader of the Surfer viewer) at
    which ``var`` is dumped."""
    import pywellen
    wave = pywellen.Waveform(str(path))
    assert wave.file_format == "FST"
    names = {v.full_name: v for v in wave.all_vars()}
    assert "TOP.accelerator_native.core.clk" in names or any(
        n.startswith("TOP.accelerator_native.core.") for n in names)
    steps = []
    wave.stream_time_steps(lambda time, *_: steps.append(time), [names[var]])
    return steps


@pytest.mark.long
def test_trace_window(tmp_path):
    """``trace`` writes an FST waveform of the cycles in the window only; bad windows and
    paths are refused before anything runs (make test-long: a traced build takes about 100 s
    of make test's budget)."""
    from bpsa.sim.native import NativeTransport
    sizes = {}
    x = np.arange(2 * 8 * 8).reshape(1, 2, 8, 8) % 7
    w = np.ones((3, 2, 3, 3), dtype=np.int64)
    for name, window in (("short", (100, 140)), ("long", (100, 500))):
        path = tmp_path / f"{name}.fst"
        with NativeTransport(SMALL, mem_bytes=1 << 20, trace=path, trace_window=window,
                             opt="-O0") as t:
            drv = Driver(t, SMALL, mem_size=1 << 20)
            asyncio.run(drv.open())
            y = asyncio.run(drv.forward(x, w))
            assert t.cycles > 500
        assert np.array_equal(y, golden.conv2d(x, w))
        sizes[name] = path.stat().st_size
        steps = _fst_time_steps(path, "TOP.clk")
        # two time steps a cycle (clock low, clock high), the window's cycles only
        assert steps == list(range(2 * window[0], 2 * window[1] + 2)), (steps[:3], steps[-3:])
    assert 0 < sizes["short"] < sizes["long"]
    with pytest.raises(ValueError, match="FIRST <= LAST"):
        NativeTransport(SMALL, trace=tmp_path / "a.fst", trace_window=(9, 3))
    with pytest.raises(ValueError, match="must end in .fst"):
        NativeTransport(SMALL, trace=tmp_path / "a.vcd")
    with pytest.raises(ValueError, match="cannot write trace file"):
        NativeTransport(SMALL, trace=tmp_path / "no" / "such" / "dir.fst")
    with pytest.raises(ValueError, match="a trace window needs a trace file"):
        NativeTransport(SMALL, trace_window=(0, 10))


def test_build_options_are_checked():
    from bpsa.sim.native import build_native
    with pytest.raises(ValueError, match="opt must be one of -O0, -O1, -O2, -O3, not '-Ofast'"):
        build_native(SMALL, opt="-Ofast")
    with pytest.raises(ValueError, match=r"threads must be an integer in \[1, 64\], not 0"):
        build_native(SMALL, threads=0)


def test_cli_trace_errors(tmp_path, capsys):
    from bpsa.cli import main
    base = ["sim", "--phase", "forward", "--layer", "C=1,H=4,K=1,R=3"]
    for extra, message in (
            (["--trace-window", "5:9"], "--trace-window needs --trace FILE.fst"),
            (["--trace", str(tmp_path / "t.fst"), "--trace-window", "9:5"],
             "need 0 <= FIRST <= LAST"),
            (["--trace", str(tmp_path / "t.fst"), "--trace-window", "a:b"],
             "give FIRST:LAST, two cycle numbers"),
            (["--trace", str(tmp_path / "t.vcd")], "must end in .fst"),
            (["--trace", str(tmp_path / "x" / "t.fst")], "cannot write trace file"),
            (["--harness", "cocotb", "--trace", str(tmp_path / "t.fst")],
             "--trace needs the native harness")):
        assert main(base + extra) == 2, extra
        assert message in capsys.readouterr().err, extra


@pytest.mark.long
def test_cli_trace_window_after_the_run(tmp_path, capsys):
    """A trace window past the run's last cycle is an error after the run (make test-long:
    its traced build takes about 120 s of make test's budget)."""
    from bpsa.cli import main
    path = tmp_path / "t.fst"
    assert main(["sim", "--phase", "forward", "--layer", "C=1,H=4,K=1,R=3", "--quiet",
                 "--trace", str(path), "--trace-window", "10000000:10000001"]) == 2
    assert "starts after the run's last cycle" in capsys.readouterr().err


def test_job_memory_and_expected_cycles():
    """Memory grows to a power of two that holds a full-size layer's tensors; the cycle
    estimate (progress bar, watchdog) is above the measured cycles of the regression layers
    (``bpsa sim --json`` on small: forward 6,324, loss 26,820, gradient 25,557 cycles)."""
    import dataclasses

    from bpsa.spec.layer import parse_layer
    from bpsa.sim.native import JOB_MEMORY, expected_cycles, job_memory
    small = parse_layer("C=8,H=16,K=8,R=3,stride=2,pad=1,N=2")
    jobs = {p: {"phase": p, "layer": dataclasses.asdict(small)}
            for p in ("forward", "loss", "gradient")}
    assert job_memory(SMALL, list(jobs.values())) == JOB_MEMORY
    for phase, measured in (("forward", 6324), ("loss", 26820), ("gradient", 25557)):
        assert measured < expected_cycles(SMALL, jobs[phase]) < 20 * measured
    big = parse_layer("C=256,H=28,K=256,R=3,stride=2,pad=1")
    mem = job_memory(SMALL, [{"phase": "loss", "layer": dataclasses.asdict(big)}])
    tensors = (256 * 28 * 28 + 256 * 256 * 9 + 256 * 14 * 14) * 4
    assert mem >= 2 * tensors and mem & (mem - 1) == 0


def test_default_build_follows_bpsa_native_opt(monkeypatch):
    """``$BPSA_NATIVE_OPT`` sets the default optimisation level (make test: ``-O1``); -O2
    without it; anything else is refused with the variable's name."""
    from bpsa.sim.native import default_build
    monkeypatch.delenv("BPSA_NATIVE_OPT", raising=False)
    assert default_build(load_config("small")) == ("-O2", 1)
    monkeypatch.setenv("BPSA_NATIVE_OPT", "-O1")
    assert default_build(load_config("small")) == ("-O1", 1)
    monkeypatch.setenv("BPSA_NATIVE_OPT", "-Ofast")
    with pytest.raises(ValueError, match="BPSA_NATIVE_OPT must be one of -O0, -O1, -O2, -O3"):
        default_build(load_config("small"))
