"""The command line's front door: ``--version``, examples in ``--help``, and bad arguments
answered with one line and exit status 2 before any work (a negative seed, a batch of 0, an
SGD shift outside the accumulator, an output directory that cannot be written, a phase that
is not one); ``bpsa regmap`` writes the map where asked."""

import json

import pytest

from bpsa.cli import main
from bpsa.spec import regmap


def _one_line_error(capsys, argv, *needles):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err, err
    for n in needles:
        assert n in err, err


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("bpsa ")


def test_help_lists_commands_and_examples(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("verilog", "synth", "sim", "bitstream", "fuzz", "perf", "regmap", "zeros"):
        assert cmd in out
    assert "examples:" in out and "bpsa regmap --format c" in out


@pytest.mark.parametrize("argv,needle", [
    (["sim", "--seed", "-5", "--gemm", "2,2,2"], "--seed: -5 is below 0"),
    (["fuzz", "--seed", "x"], "'x' is not an integer"),
    (["perf", "--workload", "--batch", "0"], "--batch: 0 is below 1"),
    (["sim", "--phase", "nope"], "invalid choice: 'nope'"),
    (["regmap", "--format", "yaml"], "invalid choice: 'yaml'"),
    (["train", "--dataset", "digits", "--backend", "fpga"], "invalid choice: 'fpga'"),
    (["perf", "--network", "digits", "--clock", "0"], "--clock: 0 is not above 0"),
])
def test_bad_arguments_get_one_line(capsys, argv, needle):
    _one_line_error(capsys, argv, needle, f"bpsa {argv[0]}")


@pytest.mark.parametrize("argv,needle", [
    (["perf", "--network", "resnet1000"], "unknown network 'resnet1000'"),
    (["perf", "--network", "digits", "--phases", "forward,back"], "--phases 'forward,back'"),
    (["perf", "--network", "digits", "--plot", "x.gif"], "must end in .png, .svg or .pdf"),
    (["perf", "--workload", "--csv"], "--plot, --csv, --phases, --clock and --frontend apply "
                                      "to --network"),
    (["perf", "--workload", "--clock", "50"], "--clock and --frontend apply to --network"),
    (["perf", "--network", "digits", "--phase", "loss"], "a --network or --model step takes "
                                                         "--phases"),
    (["sim", "--gemm", "4,4,4", "--requant", "2"], "--requant applies to --phase forward"),
    (["sweep", "--grid", "rows=8,100"], "grid point rows=100: rows must be in [1, 64]"),
    (["sweep", "--grid", "colz=8"], "'colz' is not a configuration field"),
    (["sweep", "--grid", "rows=8", "--network", "nope"], "unknown network 'nope'"),
    (["sweep", "--grid", "rows=8", "-o", "x.txt"], "the sweep writes a .csv file"),
    (["train", "--dataset", "digits", "--config", "small", "--numpy-loop"],
     "signed 16-bit operands"),
    (["train", "--dataset", "digits", "--batch", "24", "--numpy-loop"],
     "--batch 24: give a power of two"),
    (["train", "--dataset", "mnist"], "--dataset 'mnist': without --model, give digits"),
    (["train", "--dataset", "digits", "--numpy-loop", "--lr", "0.1"],
     "--lr and --optimizer apply to PyTorch's loop"),
    (["perf", "--model", "torchvision.models:resnet18"], "--model and --input N,C,H,W go "
                                                         "together"),
    (["perf", "--model", "torchvision.models:resnet18", "--input", "1,3,224"],
     "give N,C,H,W as four positive integers"),
    (["sim", "--phase", "pool"], "give a layer: --phase pool --layer"),
    (["sim", "--phase", "pool", "--layer", "C=8,H=7,kind=mean,R=2"],
     "pooling kind must be one of max, avg, global_avg"),
    (["sim", "--phase", "pool", "--layer", "C=8,H=7,kind=max,R=2,stride=0"],
     "stride must be at least 1"),
    (["sim", "--phase", "pool", "--layer", "C=8,H=4,kind=max,R=6"],
     "larger than the padded input"),
    (["sim", "--phase", "pool", "--layer", "C=8,H=7,kind=max,R=2", "--requant", "1"],
     "--requant do not apply"),
    (["sim", "--phase", "pool", "--config", "ecp5", "--layer", "C=8,H=7,kind=max,R=2"],
     "configuration 'ecp5' generates no max pooling (pool_kinds: none)"),
    (["sim", "--phase", "pool", "--layer", "C=8,H=600,kind=max,R=3"],
     "not even one row band fits"),
    (["sim", "--phase", "loss", "--layer", "C=4,H=8,K=4,R=3", "--simulator", "icarus"],
     "--simulator icarus runs the cocotb harness: add --harness cocotb"),
    (["sim", "--gemm", "4,4,4", "--simulator", "icarus"],
     "--simulator applies only to --phase through the accelerator with --harness cocotb"),
])
def test_bad_values_get_one_line(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bpsa: error:" in err and needle in err, err


@pytest.mark.parametrize("shift", ["99", "-3"])
def test_sgd_shift_is_checked(capsys, shift):
    assert main(["sim", "--dataflow", "interleaved", "--gemm", "2,2,2", "--sgd-shift",
                 shift]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--sgd-shift {shift}: give a shift in [0, 31]" in err


def test_unwritable_output_is_refused(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for argv in (["verilog", "-o", str(blocker / "out")],
                 ["regmap", "-o", str(blocker / "out" / "map.json")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot write there" in err, err


def test_regmap_writes_the_map(capsys, tmp_path):
    out = tmp_path / "maps" / "paper16.json"
    assert main(["regmap", "--config", "paper16", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["config"] == "paper16" and data["version"] == list(regmap.MAP_VERSION)
    assert main(["regmap", "--format", "c"]) == 0
    header = capsys.readouterr().out
    assert "#define BPSA_PROG_ADDR 0x030u" in header and "BPSA_ADDR_OUT " not in header


def test_make_help_lists_every_target():
    import re
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    targets = set(re.findall(r"^([a-z][a-z-]*):(?!=)", (root / "Makefile").read_text(),
                             flags=re.M))
    assert {"install", "test", "verilog", "sim", "synth", "bitstream", "clean-sim",
            "regmap"} <= targets
    out = subprocess.run(["make", "-s", "help"], cwd=root, check=True, capture_output=True,
                         text=True).stdout
    listed = set(re.findall(r"^make ([a-z][a-z-]*)", out, flags=re.M))
    assert targets == listed, (targets - listed, listed - targets)


def test_perf_network_table_json_csv_and_plot(capsys, tmp_path):
    main(["perf", "--network", "digits", "--config", "small", "--batch", "4"])
    out = capsys.readouterr().out
    assert "digits on small (4x4), batch 4:" in out and "pooling" in out
    main(["perf", "--network", "digits", "--config", "small", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["network"] == "digits" and len(data["layers"]) == 15
    main(["perf", "--network", "digits", "--config", "small", "--csv", "--phases", "forward"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("layer,op,phase") and len(lines) == 6
    png, svg = tmp_path / "p" / "d.png", tmp_path / "d.svg"
    for path in (png, svg):
        main(["perf", "--network", "digits", "--config", "small", "--plot", str(path)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in svg.read_bytes()[:400]


@pytest.mark.parametrize("loop", [[], ["--numpy-loop"]], ids=["offload", "numpy_loop"])
def test_train_summary(capsys, tmp_path, loop):
    """bpsa train --dataset digits: the digits CNN as an nn.Module through the offload (int16
    scaling on ecp5_train), or the hand-written fixed-point loop."""
    plot = tmp_path / "curves.png"
    main(["train", "--dataset", "digits", "--epochs", "1", "--json", "--plot", str(plot),
          *loop])
    data = json.loads(capsys.readouterr().out)
    assert data["epochs"] == 1 and data["backend"] == "model"
    assert 0 < data["test_accuracy"] <= 1 and 0 < data["reference_accuracy"] <= 1
    assert data["cycles_per_step"] > 0 and plot.read_bytes()[:4] == b"\x89PNG"


def _nothing_runs(monkeypatch, *targets):
    """Make each ``module:function`` of ``targets`` fail the test when called (a refusal must
    come before any work)."""
    import importlib

    def forbidden(*args, **kwargs):
        raise AssertionError("the command ran instead of refusing")
    for target in targets:
        module, _, name = target.partition(":")
        monkeypatch.setattr(importlib.import_module(module), name, forbidden)


@pytest.mark.parametrize("argv,needle,runner", [
    (["fuzz", "--config", "plain_os", "--count", "1"],
     "configuration 'plain_os' generates no accelerator phase to fuzz",
     "bpsa.sim.native:run_with_driver"),
    (["sim", "--phase", "fc", "--baseline", "--layer", "N=2,I=3,O=5000"],
     "cannot run FC layer 'N=2,I=3,O=5000' on 'small': FC layer O = 5000 does not fit the "
     "descriptor's 12-bit fields (dim_width 12: at most 4095)", "bpsa.sim.accel_run:run_fc"),
    (["sim", "--phase", "forward", "--layer", "C=4,H=8,K=5000,R=1"],
     "out_channels = 5000 does not fit dim_width 12",
     "bpsa.sim.accel_run:run_layer"),
    (["sim", "--phase", "pool", "--layer", "C=5000,H=4,kind=max,R=2"],
     "pooling layer C = 5000 does not fit", "bpsa.sim.pool_run:run_pool"),
    (["sim", "--gemm", "4,4,4", "--trace", "t.fst"],
     "--trace and --trace-window apply only to --phase through the accelerator",
     "bpsa.sim.simcmd:run_gemm"),
    (["sim", "--gemm", "4,4,4", "--harness", "cocotb"],
     "--harness applies only to --phase through the accelerator", "bpsa.sim.simcmd:run_gemm"),
    (["sim", "--phase", "forward", "--layer", "C=4,H=8,K=4,R=3", "--stall", "0.2"],
     "--stall applies only to --gemm in --dataflow os", "bpsa.sim.accel_run:run_layer"),
    (["perf", "--layer", "C=4,H=8,K=4,R=3", "--zero-fraction", "0.5"],
     "--zero-fraction applies with --energy", "bpsa.models.perf:phase_table"),
    (["perf", "--layer", "C=4,H=8,K=4,R=3", "--energy", "--zero-fraction", "1.5"],
     "--zero-fraction 1.5: give a fraction in [0, 1]", "bpsa.models.perf:phase_table"),
    (["sim", "--gemm", "4,4,4", "--energy"],
     "--energy applies only to --phase forward|loss|gradient|step through the accelerator",
     "bpsa.sim.simcmd:run_gemm"),
    (["sim", "--phase", "pool", "--layer", "C=4,H=4,kind=max,R=2", "--energy"],
     "--energy applies only to --phase forward|loss|gradient|step through the accelerator",
     "bpsa.sim.pool_run:run_pool"),
])
def test_refusals_come_before_any_work(capsys, monkeypatch, tmp_path, argv, needle, runner):
    """Bad input found by trying the commands as a new user: one line, exit status 2, and
    the runner never called (was a traceback, or an option silently ignored)."""
    monkeypatch.chdir(tmp_path)
    _nothing_runs(monkeypatch, runner)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bpsa: error:" in err and needle in err, err


def test_help_is_plain_text(capsys):
    """``bpsa --help`` and every command's: no reStructuredText markup."""
    from bpsa.cli import COMMANDS
    for argv in [["--help"]] + [[c.__name__.rpartition(".")[2], "--help"] for c in COMMANDS]:
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert "``" not in out and ":func:" not in out and ":mod:" not in out, argv


def test_train_model_notes_layers_kept_in_pytorch(capsys, monkeypatch, tmp_path):
    """A model offloaded to a configuration without a pooling unit keeps its poolings and
    its ReLUs' masks in PyTorch (the ReLUs' forwards are the convolutions' stores): a note on
    standard error, also when warnings are errors (was a traceback under
    PYTHONWARNINGS=error)."""
    import warnings

    import bpsa.torch.train
    history = [{"epoch": 1, "loss": 1.0, "train_accuracy": 0.5, "test_accuracy": 0.5,
                "train_cycles": 0}]
    monkeypatch.setattr(bpsa.torch.train, "_epochs", lambda *a, **k: history)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["train", "--dataset", "digits", "--config", "ecp5", "--epochs", "1",
                     "--no-reference", "--json", "--plot", str(tmp_path / "c.png")]) == 0
    captured = capsys.readouterr()
    assert "bpsa: note: these layers stay in PyTorch: relu1.mask, relu2.mask: the backward's " \
           "mask: no max pooling on the accelerator alone reads its output; pool1: " \
           "configuration 'ecp5' has no max pooling unit" in captured.err
    assert json.loads(captured.out)["kept"]["gap"] == "configuration 'ecp5' has no avg " \
                                                       "pooling unit"


def test_perf_workload_totals_per_network(capsys, monkeypatch):
    """``bpsa perf --workload``: after the rows, each network's total cycles, MACs and
    utilization (MACs over cycles times the PEs, as a row's), in the table and the JSON."""
    import bpsa.models.perf
    from bpsa.spec.layer import ConvLayer
    a, b = ConvLayer.conv(1, 8, 8, 8, 8, 3, 3, pad=1), ConvLayer.conv(1, 4, 6, 6, 8, 1, 1)
    monkeypatch.setattr(bpsa.models.perf, "workload_layers",
                        lambda batch: [("netA", "a", a), ("netA", "b", b), ("netB", "a", a)])
    assert main(["perf", "--workload", "--phase", "forward", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows, totals = data["layers"], data["totals"]
    assert totals["netA"]["cycles"] == rows[0]["cycles"] + rows[1]["cycles"]
    assert totals["netA"]["macs"] == rows[0]["macs"] + rows[1]["macs"]
    assert totals["netB"]["utilization"] == pytest.approx(rows[2]["utilization"])
    assert main(["perf", "--workload", "--phase", "forward"]) == 0
    out = capsys.readouterr().out
    assert f"{totals['netA']['cycles']:,d}" in out and f"{totals['netA']['macs']:,d} MACs" in out


def test_verilog_says_what_it_does_and_synth_names_outputs_by_configuration(
        capsys, monkeypatch, tmp_path):
    """``bpsa verilog`` says on standard error what it generates before the (minute-long)
    elaboration; ``bpsa synth`` writes into build/synth/<configuration>/ by default, so two
    configurations keep their reports."""
    from pathlib import Path

    import bpsa.platform.verilog
    import bpsa.tools.synth
    monkeypatch.chdir(tmp_path)

    def write_verilog(config, top, out):
        assert "generating the Verilog of accelerator for paper16" in capsys.readouterr().err
        return out / f"{top}.v"
    monkeypatch.setattr(bpsa.platform.verilog, "write_verilog", write_verilog)
    assert main(["verilog", "--config", "paper16", "--top", "accelerator"]) == 0
    assert "wrote build/paper16/accelerator.v" in capsys.readouterr().out

    class Report:
        def __init__(self, out):
            self.markdown_path = self.json_path = out / "report.md"
            self.markdown_path.write_text("report\n")

    seen = []
    monkeypatch.setattr(bpsa.tools.synth, "synth_report",
                        lambda config, top, out, **kw: seen.append(out) or Report(Path(out)))
    for name in ("small", "paper16"):
        assert main(["synth", "--config", name]) == 0
    assert seen == [str(Path("build/synth/small")), str(Path("build/synth/paper16"))]


def test_sim_trace_says_where_it_wrote(capsys, monkeypatch, tmp_path):
    """``bpsa sim --trace`` prints the trace file's path with the summary."""
    import bpsa.sim.accel_run
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bpsa.sim.accel_run, "run_layer", lambda *a, **k: {"match": True})
    assert main(["sim", "--phase", "forward", "--layer", "C=4,H=8,K=4,R=3", "--trace",
                 "w.fst", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"] == str(tmp_path / "w.fst")
