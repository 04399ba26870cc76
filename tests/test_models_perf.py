"""The cycle model of the forward pass and the zero-free loss and gradient
(``bpsa.models.perf``) against the RTL's counters (whole accelerator, native transport) on
random layers: the MAC slots the array is fed, the DMA's bytes and the buffer words written
(loads into A and B, P's accumulations and clears) and read by the engines exactly, the
cycles within the bounds the notes of the one-array issue state (below, with what the model
leaves out); on every layer of the workload it refuses nothing the controller runs, and its
roofline is a lower bound."""

import csv
import re
import statistics
from importlib import resources

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.models.perf import layer_cycles, roofline_cycles, traditional_cycles
from bpsa.plan import tiling
from bpsa.spec.layer import ConvLayer

SMALL = load_config("small")
SMALL_CF = load_config("small_cf")


def _random_jobs(count, seed, phases=("loss", "gradient")):
    from bpsa.spec.layer import ConvLayer
    from bpsa.sim.accel_run import check_job
    rng = np.random.default_rng(seed)
    jobs = []
    while len(jobs) < count:
        r, st = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        lay = dict(batch=int(rng.integers(1, 4)), channels=int(rng.integers(1, 24)),
                   height=int(rng.integers(4, 24)), width=int(rng.integers(4, 24)),
                   out_channels=int(rng.integers(1, 24)), kernel_h=r, kernel_w=r,
                   stride_h=st, stride_w=st, pad_h=r // 2, pad_w=r // 2)
        phase = phases[len(jobs) % len(phases)]
        mode = None if phase == "forward" else "zero_free"
        try:
            p = check_job(SMALL, ConvLayer(**lay, dil_h=1, dil_w=1), phase, mode=mode)
        except ValueError:
            continue
        if "strips" not in p:
            jobs.append({"phase": phase, "layer": lay, "seed": 1, "mode": mode})
    return jobs


def _model(config, phase, lay):
    return layer_cycles(config, phase, ConvLayer.from_dict(lay))


def _cycle_errors(jobs):
    """Run ``jobs`` on the RTL; assert the model's MAC slots and MACs exact; return the
    relative cycle errors."""
    from bpsa.sim.native import run_jobs
    errors = []
    for job, r in zip(jobs, run_jobs(SMALL, jobs)):
        m = _model(SMALL, job["phase"], job["layer"])
        c = r["counters"]
        assert m.array_slots == c["macs"] + c["gated_macs"], job
        assert m.macs == r["useful_macs"], job
        assert (m.dma_read_bytes, m.dma_write_bytes) == (c["dma_read_bytes"],
                                                         c["dma_write_bytes"]), job
        # the buffer words the loads write (the energy model's action counts)
        assert (m.a_writes, m.b_writes, m.p_writes, m.a_reads, m.b_reads) == (
            c["buf_a_writes"], c["buf_b_writes"], c["buf_p_writes"], c["buf_a_reads"],
            c["buf_b_reads"]), job
        # P's reads: the accumulations' and the stores' words, and the DMA's repeated reads
        # the model leaves out (on 100 random layers: 14 % more in all, 5.6 % the median)
        assert c["buf_p_reads"] >= m.p_reads, job
        errors.append(abs(m.cycles / r["cycles"] - 1))
    return errors


@pytest.mark.verilator
def test_model_against_rtl_counters():
    errors = _cycle_errors(_random_jobs(30, seed=3))
    # measured: median 0.14 %, worst 1.7 % (a 2,537-cycle loss), since the loads are timed
    # by their DMA segments and a command's cycles (they were a fitted constant a command:
    # the worst was 4.5 %, a 604-cycle gradient bound by its DMA commands); the zero-free
    # loss's walker is timed exactly (its loader and transposer are modelled)
    assert statistics.median(errors) <= 0.01, sorted(errors)
    assert max(errors) <= 0.03, sorted(errors)


@pytest.mark.long       # make test-long: the paper16 accelerator's build
@pytest.mark.verilator
def test_loss_steps_of_images_on_paper16():
    """The zero-free loss in steps of images of one input block (W loaded once for them,
    ``setup``'s search) through the paper16 accelerator: bit-exact (``run_jobs``), the model's
    compute cycles and DMA bytes the RTL's; its cycles within 15 % (measured: one step of 8
    images +0.1 %, 4 steps of 2 images +0.4 %; 4 steps of 4 and of 8 images -9.6 % and
    -13.6 %: the RTL's DMA and array both idle 4,400 cycles there, which the model has not)."""
    from bpsa.plan.tiling import plan
    from bpsa.sim.native import run_jobs
    cfg = load_config("paper16")
    jobs = [{"phase": "loss", "seed": 1, "mode": "zero_free",
             "layer": dict(batch=n, channels=c, height=7, width=7, out_channels=64,
                           kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1,
                           dil_h=1, dil_w=1)} for n, c in ((8, 16), (2, 64), (4, 64))]
    for job, r in zip(jobs, run_jobs(cfg, jobs)):
        layer = ConvLayer.from_dict(job["layer"])
        assert plan(cfg, "loss", layer, mode="zero_free")["images"] > 1
        m, c = layer_cycles(cfg, "loss", layer), r["counters"]
        assert (m.dma_read_bytes, m.dma_write_bytes) == (c["dma_read_bytes"],
                                                         c["dma_write_bytes"])
        assert m.compute_cycles == c["compute_cycles"]
        assert abs(m.cycles / r["cycles"] - 1) <= 0.15, (job, m.cycles, r["cycles"])


def test_zero_free_loss_walk_constants_are_the_walkers():
    """The zero-free loss walker's timeline (the model's ``TIMING["zfl_slots"]``) has the
    walker's transposer slots."""
    from bpsa.gateware.frontends.zero_free.loss import SLOTS
    from bpsa.models.perf import TIMING
    assert TIMING["zfl_slots"] == SLOTS


@pytest.mark.verilator
def test_forward_model_against_rtl_counters():
    errors = _cycle_errors(_random_jobs(30, seed=11, phases=("forward",)))
    # measured: median 0.45 %, worst 2.6 %, since the feeder's lane registers overflowing
    # across kernel rows and its FIFOs' lead are modelled (2x2 stride-2 layers were 11-16 %
    # low before)
    assert statistics.median(errors) <= 0.01, sorted(errors)
    assert max(errors) <= 0.03, sorted(errors)


@pytest.mark.verilator
def test_model_of_column_strips_against_rtl_counters():
    """Layers whose rows are too wide for the controller, which the driver cuts into column
    strips (a descriptor each): the model sums the strips (MAC slots and DMA bytes exact)."""
    jobs = [{"phase": phase, "seed": 1, "mode": None if phase == "forward" else "zero_free",
             "layer": dict(batch=1, channels=2, height=5, width=w, out_channels=3,
                           kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1,
                           dil_h=1, dil_w=1)}
            for phase, w in (("loss", 380), ("gradient", 200), ("forward", 1060))]
    for job in jobs:
        assert _model(SMALL, job["phase"], job["layer"]).strips == 2
    errors = _cycle_errors(jobs)
    # measured: loss 0.2 %, gradient 0.2 %, forward 0.4 % (the host's gathering between
    # strips is counted by neither)
    assert max(errors) <= 0.02, errors


def _workload():
    with resources.files("bpsa.workloads").joinpath("conv_layers.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.mark.long       # make test-long (the channel-first workload test below runs it all)
def test_model_runs_every_workload_layer_on_paper16():
    """Every layer of the workload, every phase, batch 1 (the refusals do not depend on the
    batch; ``make perf`` runs batch 8): a figure or the controller's own refusal (the same
    as :func:`bpsa.plan.tiling.plan`'s)."""
    cfg = load_config("paper16")
    ran = 0
    for row in _workload():
        c, h, w, k = (int(row[x]) for x in ("C", "H", "W", "K"))
        r, s, st, p, d = (int(row[x]) for x in ("R", "S", "stride", "pad", "dilation"))
        for phase in ("forward", "loss", "gradient"):
            layer = ConvLayer.conv(1, c, h, w, k, r, s, st, p, d)
            try:
                m = layer_cycles(cfg, phase, layer)
            except ValueError as e:
                with pytest.raises(ValueError, match=re.escape(str(e)[:40])):
                    tiling.plan_or_strips(cfg, phase, layer,
                                          mode="bp_im2col" if phase == "forward"
                                          else "zero_free")
                continue
            ran += 1
            assert 0 < m.utilization <= 1 and m.cycles >= m.compute_cycles, (row, phase)
            assert m.array_slots >= m.macs
            assert m.cycles >= m.roofline_cycles, (row, phase)   # a lower bound
    assert ran >= 70


def test_roofline_by_hand():
    """paper16: 256 MACs a cycle, 8 bus bytes a cycle, int16 operands, int32 results."""
    cfg = load_config("paper16")
    # ResNet-50 layer3.0.conv2's loss: 115,605,504 MACs / 256 = 451,584 cycles; it moves
    # dY 256*14*14*2 + W 256*256*9*2 + dX 256*28*28*4 = 2,082,816 bytes = 260,352 cycles
    m = layer_cycles(cfg, "loss", ConvLayer.conv(1, 256, 28, 28, 256, 3, 3, stride=2, pad=1))
    assert m.roofline_cycles == 451_584
    assert m.over_roofline == pytest.approx(m.cycles / 451_584)
    # a 1x1 stride-2 gradient, C=64, 8x8, K=16: 16,384 MACs = 64 cycles; the X its taps
    # read (every other row and column) 64*16*2 + dY 16*16*2 + dW 16*64*4 = 6,656 bytes =
    # 832 cycles: the bus bounds it
    m = layer_cycles(cfg, "gradient", ConvLayer.conv(1, 64, 8, 8, 16, 1, 1, stride=(2, 2)))
    assert m.roofline_cycles == 832


def test_model_refuses_other_phases_and_modes():
    with pytest.raises(ValueError, match="forward and the zero-free loss and gradient"):
        layer_cycles(SMALL, "fc", ConvLayer.conv(1, 1, 4, 4, 1, 1, 1))
    with pytest.raises(ValueError, match="does not generate the forward engine"):
        layer_cycles(SMALL.replace(dataflows=("is",)), "forward",
                     ConvLayer.conv(1, 1, 4, 4, 1, 1, 1))
    with pytest.raises(ValueError, match="does not generate the zero-free mode"):
        layer_cycles(SMALL.replace(backward_modes=("bp_im2col",)), "loss",
                     ConvLayer.conv(1, 1, 4, 4, 1, 1, 1))


def test_cli_perf(capsys):
    import json

    from bpsa.cli import main
    assert main(["perf", "--config", "small", "--layer", "C=8,H=16,K=8,R=3,stride=2,pad=1,N=2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [e["phase"] for e in out["layers"]] == ["forward", "loss", "gradient"]
    want = layer_cycles(SMALL, "gradient", ConvLayer.conv(2, 8, 16, 16, 8, 3, 3, stride=2, pad=1))
    assert out["layers"][2]["cycles"] == want.cycles
    assert main(["perf", "--config", "small"]) == 2
    assert "give one of --layer" in capsys.readouterr().err
    assert main(["perf", "--config", "small", "--layer", "C=8,H=2,K=8,R=5"]) == 2
    assert "more than the padded input" in capsys.readouterr().err
    # a layer the controller cannot tile, even in column strips: its reason
    assert main(["perf", "--config", "small", "--layer", "C=1,H=40,K=1,R=31,pad=15"]) == 2
    assert "does not fit a bank of buffer B" in capsys.readouterr().err
    # rows too wide for the controller: the driver's column strips
    assert main(["perf", "--config", "small", "--layer", "C=1,H=4,W=2000,K=1,R=3",
                 "--json"]) == 0
    assert [e["strips"] for e in json.loads(capsys.readouterr().out)["layers"]] == [4, 16, 12]


def test_traditional_flow_against_a_full_size_rtl_run():
    """ResNet-50 layer3.0.conv2's loss the traditional way on paper16 (`bpsa sim --baseline`,
    measured at 1d54693: 2,221,068 cycles, after the forward's X reuse; 2,307,774 at defc2ab);
    utilization counts the layer's own MACs."""
    cfg = load_config("paper16")
    m = traditional_cycles(cfg, "loss", ConvLayer.conv(1, 256, 28, 28, 256, 3, 3, stride=2,
                                                       pad=1))
    assert abs(m.cycles / 2_221_068 - 1) < 0.01
    assert m.macs == 256 * 14 * 14 * 256 * 9
    assert m.utilization == pytest.approx(m.macs / (256 * m.cycles))
    with pytest.raises(ValueError, match="applies to loss and gradient"):
        traditional_cycles(cfg, "forward", ConvLayer.conv(1, 1, 4, 4, 1, 1, 1))


# --- the channel-first front end (issue 22) -----------------------------------------------

def _cf(config, layer, **kw):
    return layer_cycles(config, "forward", layer, frontend="channel_first", **kw)


def test_channel_first_layer_by_hand():
    """small (4x4, int8, 64-bit bus), C = 4, 8 x 8, K = 4, 3 x 3 pad 1: one run (one channel
    block, one output-channel block, no band). The engine: no multi-tile (2 C > rows), 9
    tiles of P = 64 pixels, the drain 4 cycles behind the pipelined PEs; the X bank words: 4 channels x 22 kernel-row hits x 22
    kernel-column hits (the taps' pixels inside the image). Every other figure is a count of
    the controller's steps (the program's words, the DMA's segments and hand-offs)."""
    from bpsa.models import perf
    from bpsa.models.perf import TIMING as T
    m = _cf(SMALL_CF, ConvLayer.conv(1, 4, 8, 8, 4, 3, 3, pad=(1, 1)))
    R = C = 4
    lat = SMALL_CF.mac_latency       # the array's drain, behind the PEs' pipeline
    engine = (R + T["cf_setup"] + R + T["cf_preload"] + 9 * max(64, 2 * R) + R + C + lat
              + T["cf_drain"])
    assert engine == (R + 7) + R + 2 + 9 * 64 + (R + C + 4 + 1) == 606
    # the controller is the layer's program: the dispatcher takes its words a cycle each
    # (not the loads: they wait for the DMA); the fetch unit brings them 8 at a time, a DMA
    # command of fetch_chunk cycles each, the words up to the first load before it
    desc = {"phase": 0, "n": 1, "c": 4, "h": 8, "w": 8, "k": 4, "r": 3, "s": 3, "stride_h": 1,
            "stride_w": 1, "pad_h": 1, "pad_w": 1, "dil_h": 1, "dil_w": 1, "mode": 2,
            "requant": 0}
    setup, ((program, words, pre),), _ = perf._dispatch(SMALL_CF, desc)
    assert setup == T["fetch"] and 0 < pre < program < words
    before, after = -(-pre // 8), -(-words // 8) - -(-pre // 8)
    fetched = setup + before * T["fetch_chunk"]
    # X: 64 pixels of 4 lanes, a word a cycle (two a beat); W: 4 channels x 9 taps, 4 lanes;
    # each load taken and checked by the load unit, its first command 2 cycles after the
    # load was offered (or when the DMA is free), its segments + cf_dma_command to its
    # done, the next state 2 cycles on; then the program's words after the loads, up to RUN
    x_load, w_load = 64 + T["cf_dma_command"], 36 + T["cf_dma_command"]
    loaded = max(setup + program + 2, fetched) + x_load + 2 + (2 + w_load) + 2
    ready = max(loaded, loaded - 2 + after * T["fetch_chunk"] + 2)
    # a new step: FLUSH, then P's 64 words cleared; the store (64 words x 4 int32 = 128
    # beats, one chunk) is kicked cf_flush cycles after the run, its machine idle after its
    # done and S_STEP, then DRAIN ends and DONE
    start = ready + 1 + 64
    store = 128 + T["cf_dma_command"] + T["store_read"] + 2
    assert m.frontend == "channel_first" and m.runs == 1 and m.tiles == 9
    assert m.compute_cycles == engine
    assert m.cycles == start + engine + T["cf_flush"] + store + 2
    assert m.load_wait_cycles == ready - (setup + program + 2 * 3)  # beyond the hand-offs
    assert m.dma_read_bytes == 256 + 144 and m.dma_write_bytes == 4 * 64 * 4
    assert m.dma_busy_cycles == (x_load + w_load + store
                                 + (before + after) * T["fetch_chunk"])
    assert m.x_sram_words == 4 * 22 * 22 and m.x_word_operands == 1
    assert m.macs == m.array_slots == 4 * 64 * 4 * 9
    assert m.utilization == pytest.approx(m.macs / (16 * m.cycles))
    assert m.a_words == 64 and m.b_words == 36


def test_dispatch_reads_the_program():
    """The model's dispatcher costs come from the layer's program (the words the RTL runs):
    a run each RUN, its non-load words before it, every word once; and the DMA's load
    segments: a cycle for each stretch inside one word and one beat."""
    from bpsa.models import perf
    from bpsa.plan import tiling
    from bpsa.plan.instructions import program_words
    from bpsa.spec import isa
    from bpsa.spec.regmap import Mode, Phase
    lay = ConvLayer.conv(2, 5, 9, 11, 9, 3, 2, stride=(2, 1), pad=(1, 0))
    desc = tiling.setup_descriptor(Phase.GRADIENT, lay, Mode.ZERO_FREE)
    setup_cycles, gaps, _ = perf._dispatch(SMALL, dict(desc, requant=0))
    words = program_words(SMALL, {"addr_x": 0x1000_0000, "addr_w": 0x2000_0000,
                                  "addr_dy": 0x3000_0000, "addr_out": 0x4000_0000,
                                  "window_lo": 0, "window_hi": (1 << 32) - 1, **desc})
    ops = [isa.decode(w)[0] for w in words]
    assert len(gaps) == ops.count(isa.Opcode.RUN) == perf.layer_cycles(
        SMALL, "gradient", lay).runs
    last_run = len(ops) - 1 - ops[::-1].index(isa.Opcode.RUN)
    assert sum(g[1] for g in gaps) == last_run + 1
    assert sum(g[0] for g in gaps) == last_run + 1 - ops[:last_run].count(isa.Opcode.LOAD)
    assert setup_cycles == perf.TIMING["fetch"]
    # 4 lanes in 8-element beats: a word a cycle; 3 lanes: 24 elements in 8 words + 3 beats,
    # 1 boundary shared (element 0); from slot 4 of the first beat, beats start at elements
    # 4, 12 and 20, and 12 starts a word too
    assert perf._dma_segments(64, 4, 8, 0) == perf._dma_segments(64, 4, 8, 4) == 16
    assert perf._dma_segments(24, 3, 8, 0) == 8 + 3 - 1
    assert perf._dma_segments(25, 3, 8, 0) == 9 + 4 - 2
    assert perf._dma_segments(24, 3, 8, 4) == 8 + 3 - 1
    assert perf._dma_segments(7, 16, 4, 2) == 1 + 2 - 0
    assert perf._dma_segments(0, 3, 8, 0) == 0


#: Channel-first layers of ``small`` (N C H W, K R S, stride, pad, dilation): a 7 x 7 / 2
#: stem, banded layers whose stores run beside the next band's runs (P's other half),
#: several channel blocks, multi-tile, batch 2, P single-buffered (``dbl`` 0: one step, and
#: two steps each waiting for its store), runs of fewer than 2 rows pixels.
CF_LAYERS = (
    ((1, 3, 32, 32), (8, 7, 7), (2, 2), (3, 3), (1, 1)),
    ((1, 2, 30, 40), (3, 3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 5, 9, 11), (9, 3, 2), (2, 1), (1, 0), (1, 2)),
    ((1, 16, 14, 14), (16, 1, 1), (2, 2), (0, 0), (1, 1)),
    ((2, 2, 30, 26), (5, 2, 3), (1, 1), (0, 2), (1, 1)),
    ((1, 12, 13, 3), (7, 2, 2), (2, 2), (2, 1), (2, 1)),
    ((1, 3, 15, 15), (12, 3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 6, 5, 5), (5, 3, 3), (2, 2), (0, 0), (1, 1)),
    ((2, 6, 18, 18), (8, 3, 3), (1, 1), (1, 1), (1, 1)),
)


@pytest.mark.verilator
def test_channel_first_model_against_rtl_counters():
    """The channel-first model on the whole accelerator (native transport): DMA bytes, MAC
    slots and the engine's busy cycles exact, BUSY_CYCLES within 2 % (the issue's bound for
    the model; measured with the instruction dispatcher: within 1.3 %, 30 cycles at most;
    the state-by-state model of the on-chip walker was within 0.15 %)."""
    from bpsa.sim.native import run_with_driver
    rng = np.random.default_rng(5)

    async def body(drv, t):
        out = []
        for (n, c, h, w), (k, r, s), st, pad, dil in CF_LAYERS:
            x = rng.integers(-128, 128, (n, c, h, w))
            wt = rng.integers(-128, 128, (k, c, r, s))
            await drv.forward(x, wt, st, pad, dil, frontend="channel_first")
            out.append(drv.counters)
        return out

    errors = []
    for ((n, c, h, w), (k, r, s), st, pad, dil), got in zip(CF_LAYERS,
                                                             run_with_driver(SMALL_CF, body)):
        m = _cf(SMALL_CF, ConvLayer.conv(n, c, h, w, k, r, s, stride=st, pad=pad, dil=dil))
        assert (m.dma_read_bytes, m.dma_write_bytes) == (got["dma_read_bytes"],
                                                         got["dma_write_bytes"])
        assert m.array_slots == got["macs"] + got["gated_macs"]
        assert m.compute_cycles == got["compute_cycles"]
        assert (m.a_writes, m.b_writes, m.p_writes, m.a_reads, m.b_reads) == (
            got["buf_a_writes"], got["buf_b_writes"], got["buf_p_writes"], got["buf_a_reads"],
            got["buf_b_reads"])
        assert got["buf_p_reads"] >= m.p_reads
        errors.append(abs(m.cycles / got["busy_cycles"] - 1))
    assert max(errors) <= 0.02, errors


def test_channel_first_is_stride_insensitive():
    """paper16, 32 channels, K = 16, 3 x 3 pad 1, 12 x 12 outputs from 12 x 12 (stride 1),
    23 x 23 (stride 2) and 34 x 34 (stride 3) inputs: the channel-first engine's cycles and X
    bank reads are the same (a stride skips pixels, it reads none of them); the feeder's
    words per context grow with the stride (its interest region spans (rows - 1) s + 3
    columns), and at stride 3 it is slower than at 1."""
    p16 = load_config("paper16")
    cf, fd = [], []
    for st, h in ((1, 12), (2, 23), (3, 34)):
        layer = ConvLayer.conv(1, 32, h, h, 16, 3, 3, stride=st, pad=1)
        cf.append(_cf(p16, layer))
        fd.append(layer_cycles(p16, "forward", layer))
    assert len({m.compute_cycles for m in cf}) == 1
    assert len({m.x_sram_words for m in cf}) == 1
    assert fd[2].compute_cycles > 1.2 * fd[0].compute_cycles
    assert all(m.compute_cycles < f.compute_cycles for m, f in zip(cf, fd))


def test_channel_first_multi_tile():
    """C = 3 on paper16 (16 rows): a tile holds min(16 // 3, S) = 3 taps of a 3 x 3 kernel
    row: 3 tiles a run instead of 9 without multi-tile; on small (4 rows) C = 2 holds 2
    taps: ceil(3 / 2) = 2 tiles a kernel row. C = 3 on small (2 C > 4 rows): none."""
    p16 = load_config("paper16")
    layer = ConvLayer.conv(1, 3, 16, 16, 16, 3, 3, pad=1)
    with_, without = _cf(p16, layer), _cf(p16, layer, multi_tile=False)
    assert (with_.runs, with_.tiles, without.tiles) == (1, 3, 9)
    assert with_.compute_cycles < without.compute_cycles and with_.cycles < without.cycles
    assert with_.macs == without.macs and with_.x_sram_words == without.x_sram_words
    m = _cf(SMALL_CF, ConvLayer.conv(1, 2, 12, 12, 6, 3, 3, pad=(1, 1)))
    assert (m.runs, m.tiles) == (2, 2 * 3 * 2)
    m = _cf(SMALL_CF, ConvLayer.conv(1, 3, 12, 12, 4, 3, 3, pad=(1, 1)))
    assert m.tiles == _cf(SMALL_CF, ConvLayer.conv(1, 3, 12, 12, 4, 3, 3, pad=(1, 1)),
                          multi_tile=False).tiles == 9


def test_channel_first_refusals():
    with pytest.raises(ValueError, match="does not generate the channel-first front end"):
        _cf(SMALL_CF.replace(forward_frontends=("feeder",)), ConvLayer.conv(1, 3, 8, 8, 4, 3, 3))
    with pytest.raises(ValueError, match="runs the forward, not 'loss'"):
        layer_cycles(SMALL_CF, "loss", ConvLayer.conv(1, 3, 8, 8, 4, 3, 3),
                     frontend="channel_first")
    with pytest.raises(ValueError, match="multi_tile applies to the channel-first"):
        layer_cycles(SMALL_CF, "forward", ConvLayer.conv(1, 3, 8, 8, 4, 3, 3), multi_tile=False)
    with pytest.raises(ValueError, match="'feeder' or 'channel_first', not 'x'"):
        layer_cycles(SMALL_CF, "forward", ConvLayer.conv(1, 3, 8, 8, 4, 3, 3), frontend="x")
    # the controller's own refusal: W of a block of 4 channels of a 16 x 16 kernel
    with pytest.raises(ValueError, match="W of one channel block"):
        _cf(SMALL_CF, ConvLayer.conv(1, 4, 16, 16, 4, 16, 16))


def test_feeder_x_sram_words_match_the_feeder_model():
    """One run (one group, K <= cols, no band): the feeder's X SRAM words are
    :func:`bpsa.models.feeder_model.traffic`'s (which the RTL's counter matches)."""
    from bpsa.models import feeder_model
    from bpsa.spec.layer import ConvLayer
    for c, h, w, r, st, p, d in ((3, 9, 11, 3, 1, 1, 1), (2, 8, 13, 3, 2, 1, 1),
                                 (5, 7, 20, 2, 2, 0, 1), (1, 12, 17, 5, 3, 2, 1),
                                 (4, 10, 9, 3, 1, 2, 2)):
        m = layer_cycles(SMALL_CF, "forward", ConvLayer.conv(1, c, h, w, 4, r, r, st, p, d))
        lay = feeder_model.FeederDescriptor.of(
            ConvLayer.conv(1, c, h, w, 1, r, r, stride=st, pad=p, dil=d))
        assert m.runs == 1 and m.frontend == "feeder" and m.x_word_operands == 8
        assert m.x_sram_words == feeder_model.traffic(SMALL_CF, lay)["words_read"]


def test_channel_first_runs_the_workload_on_paper16():
    """Every workload layer, batch 2: a figure or the controller's channel-first refusal
    (:func:`bpsa.plan.tiling.plan`'s); the roofline bounds it, every slot is fed once a tile
    and pixel."""
    cfg = load_config("paper16")
    ran = 0
    for row in _workload():
        c, h, w, k = (int(row[x]) for x in ("C", "H", "W", "K"))
        r, s, st, p, d = (int(row[x]) for x in ("R", "S", "stride", "pad", "dilation"))
        layer = ConvLayer.conv(2, c, h, w, k, r, s, st, p, d)
        try:
            m = _cf(cfg, layer)
        except ValueError as e:
            with pytest.raises(ValueError, match=re.escape(str(e)[:40])):
                tiling.plan(cfg, "forward", layer, mode="channel_first")
            continue
        ran += 1
        assert 0 < m.utilization <= 1 and m.cycles >= m.roofline_cycles, row
        assert m.array_slots >= m.macs and m.tiles >= m.runs * r
        assert m.load_wait_cycles <= m.cycles - m.compute_cycles
    assert ran >= 25


def test_phase_table_keeps_or_raises_refusals():
    """``phase_table``: one entry a layer and phase; a layer the configuration cannot tile
    gets its reason with ``refusals``, else its ValueError."""
    from bpsa.models.perf import phase_table, workload_layers
    from bpsa.spec.layer import parse_layer
    ok = ("-", "ok", parse_layer("C=8,H=16,K=8,R=3,stride=2,pad=1,N=2"))
    big = ("-", "big", parse_layer("C=1,H=40,W=40,K=1,R=31,pad=15"))
    rows = phase_table(SMALL, [ok, big], ["loss", "gradient"], requant=True)
    assert [(r["layer"], r["phase"]) for r in rows] == [
        ("ok", "loss"), ("ok", "gradient"), ("big", "loss"), ("big", "gradient")]
    assert rows[0]["batch"] == 2 and rows[1]["cycles"] == layer_cycles(
        SMALL, "gradient", ok[2]).cycles
    assert "refused" in rows[2] and "cycles" not in rows[2]
    with pytest.raises(ValueError, match="does not fit a bank of buffer B"):
        phase_table(SMALL, [big], ["loss"], refusals=False)
    assert all(layer.batch == 3 for _, _, layer in workload_layers(3))


def test_channel_first_mx_tiles():
    """MX: a channel-first tile holds one tap and streams at least P's MX spacing
    (``TIMING["mx_spacing"]``, the P buffer's ``MX_SPACING``, the front end's
    ``min_tile_cycles``); the engine's cycles equal the model's on the Verilator runs of
    ``bpsa sim --engine --im2col channel_first`` and ``bpsa fuzz`` in MX (their summaries'
    ``model_cycles``)."""
    from bpsa.gateware.frontends.channel_first.channel_first import min_tile_cycles
    from bpsa.gateware.results.psum_buffer import MX_SPACING
    from bpsa.models.perf import TIMING, _cf_compute
    assert TIMING["mx_spacing"] == MX_SPACING
    mx = SMALL_CF.replace(name="cf_mx", arithmetic="mxint8", operand_width=8, acc_width=21)
    assert min_tile_cycles(mx) == max(2 * mx.rows, MX_SPACING) and min_tile_cycles(SMALL_CF) \
        == 2 * SMALL_CF.rows
    run = dict(channels=2, layer_channels=2, in_rows=2, width=2, out_rows=2, ow=2, r=1, s=3,
               sh=1, sw=1, pt=0, pw=1, dh=1, dw=1)
    (c_int, _, t_int), (c_mx, _, t_mx) = (_cf_compute(c, **run) for c in (SMALL_CF, mx))
    assert (t_int, t_mx) == (2, 3)            # two taps a tile in integers, one in MX
    # the same set-up, preload and drain; tiles of max(4 pixels, 8) and max(4, 9) cycles
    assert c_mx - 3 * MX_SPACING == c_int - 2 * 2 * SMALL_CF.rows


def test_grouped_layer_is_its_packs():
    """Six depthwise groups on small's 4 columns: a pack of 4 and one of 2, each the ordinary
    convolution of its channels; the MACs and the roofline the grouped layer's own."""
    layer = ConvLayer.conv(2, 6, 7, 7, 6, 3, 3, 2, 1, groups=6)
    for phase in ("forward", "loss", "gradient"):
        m = layer_cycles(SMALL, phase, layer)
        parts = [layer_cycles(SMALL, phase, ConvLayer.conv(2, c, 7, 7, c, 3, 3, 2, 1))
                 for c in (4, 2)]
        for name in ("cycles", "array_slots", "dma_read_bytes", "dma_write_bytes", "a_reads",
                     "p_writes", "runs"):
            assert getattr(m, name) == sum(getattr(p, name) for p in parts), (phase, name)
        assert m.macs == layer.macs == 2 * 6 * 4 * 4 * 9
        assert m.utilization == pytest.approx(layer.macs / (16 * m.cycles))
        assert m.roofline_cycles == roofline_cycles(SMALL, phase, layer, macs=layer.macs)


@pytest.mark.verilator
def test_grouped_model_against_rtl_counters():
    """Grouped and depthwise layers of every phase through the RTL (packs of groups): the
    model's MAC slots, DMA bytes and buffer words exact, its cycles within 4 % (measured:
    median 1.9 %, worst 3.3 %, the forwards of the small packs)."""
    lays = [dict(batch=2, channels=6, height=7, width=7, out_channels=6, kernel_h=3,
                 kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, groups=6),
            dict(batch=1, channels=8, height=9, width=6, out_channels=16, kernel_h=3,
                 kernel_w=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1, groups=8),
            dict(batch=1, channels=8, height=6, width=6, out_channels=8, kernel_h=1,
                 kernel_w=1, stride_h=1, stride_w=1, pad_h=0, pad_w=0, groups=2)]
    jobs = [{"phase": p, "layer": lay, "seed": 1, "mode": None if p == "forward"
             else "zero_free"} for lay in lays for p in ("forward", "loss", "gradient")]
    errors = _cycle_errors(jobs)
    assert max(errors) <= 0.04 and statistics.median(errors) <= 0.025, errors
