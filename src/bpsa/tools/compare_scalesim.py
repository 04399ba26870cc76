"""``make compare-scalesim``: SCALE-Sim 3.0, an independent systolic-array simulator, next to
the cycle model on the forward pass of the workload's layers.

SCALE-Sim needs ``numpy < 2``, so it lives in an environment of its own (``--venv``, created
and filled from PyPI on the first run). Each layer of ``workloads/conv_layers.csv`` runs on a
``rows x cols`` output-stationary array of the configuration with SRAMs of our buffers' sizes
(X: ``buf_a_depth`` words of ``feeder_bus_width`` operands, W: ``buf_b_depth`` x ``cols``
operands, Y: ``buf_p_depth`` x ``cols`` accumulators), stall-free (``InterfaceBandwidth:
CALC``), padding added to H and W as SCALE-Sim wants, traces not kept. The table puts
SCALE-Sim's total cycles next to the model's cycles and the ideal ``MACs / (rows cols)``,
with a sentence for each layer where the two differ by more than 10 %.

SCALE-Sim models no backward pass (no transposed or dilated convolution, no weight gradient)
and no dilation; it is trace-based and slow (minutes a layer at ImageNet sizes, and
gigabytes of memory for the largest), so layers above ``--max-macs`` are listed as not run.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

from bpsa.config import load_config
from bpsa.models.perf import layer_cycles
from bpsa.spec.layer import ConvLayer
from bpsa.spec.numeric import element_bytes

__all__ = ["ensure_venv", "main", "scalesim_config", "topology_row"]

SCALESIM = "scalesim==3.0.0"

#: Runs one layer in SCALE-Sim's environment, with its traces left out (``scale.py`` always
#: writes them).
_DRIVER = """
import sys
from scalesim.scale_sim import scalesim
s = scalesim(save_disk_space=True, verbose=False, config=sys.argv[1], topology=sys.argv[2],
             layout=sys.argv[2], input_type_gemm=False)
s.run_scale(top_path=sys.argv[3])
"""


def scalesim_config(config, name):
    """SCALE-Sim's configuration file for ``config`` (output-stationary, our buffer sizes)."""
    ob, ab = element_bytes(config.operand_width), element_bytes(config.acc_width)
    kb = {"ifmap": config.buf_a_depth * config.feeder_bus_width * ob // 1024,
          "filter": config.buf_b_depth * config.cols * ob // 1024,
          "ofmap": config.buf_p_depth * config.cols * ab // 1024}
    return f"""[general]
run_name = {name}

[architecture_presets]
ArrayHeight : {config.rows}
ArrayWidth : {config.cols}
IfmapSramSzkB : {max(1, kb['ifmap'])}
FilterSramSzkB : {max(1, kb['filter'])}
OfmapSramSzkB : {max(1, kb['ofmap'])}
IfmapOffset : 0
FilterOffset : 10000000
OfmapOffset : 20000000
Dataflow : os
Bandwidth : 10
ReadRequestBuffer : 32
WriteRequestBuffer : 32

[layout]
IfmapCustomLayout : False
IfmapSRAMBankBandwidth : 10
IfmapSRAMBankNum : 10
IfmapSRAMBankPort : 2
FilterCustomLayout : False
FilterSRAMBankBandwidth : 10
FilterSRAMBankNum : 10
FilterSRAMBankPort : 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth : CALC
UseRamulatorTrace : False
"""


def topology_row(row):
    """A SCALE-Sim topology line of a workload row (padding added to H and W)."""
    p = int(row["pad"])
    return (f"{row['network']}.{row['layer']}, {int(row['H']) + 2 * p}, "
            f"{int(row['W']) + 2 * p}, {row['R']}, {row['S']}, {row['C']}, {row['K']}, "
            f"{row['stride']},")


def ensure_venv(venv, packages, probe):
    """The Python of the environment ``venv`` (a :class:`~pathlib.Path`) where ``probe`` (a
    line of Python) runs: created and filled with ``packages`` from PyPI when it does not (an
    independent tool's own environment, apart from the project's)."""
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-c", probe],
                                          capture_output=True).returncode == 0:
        return python
    print(f"installing {' '.join(packages)} into {venv} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return python


def _run_layer(python, config, row, out, timeout):
    """SCALE-Sim's total cycles of one layer, or ``(None, reason)``."""
    name = f"{row['network']}.{row['layer']}"
    work = out / name
    work.mkdir(parents=True, exist_ok=True)
    cfg, topo = work / "scale.cfg", work / "topology.csv"
    cfg.write_text(scalesim_config(config, "run"))
    topo.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                    "Channels, Num Filter, Strides,\n" + topology_row(row) + "\n")
    t0 = time.perf_counter()
    try:
        res = subprocess.run([str(python), "-c", _DRIVER, str(cfg), str(topo), str(work)],
                             capture_output=True, text=True, timeout=timeout,
                             env=dict(os.environ, PYTHONWARNINGS="ignore"))
    except subprocess.TimeoutExpired:
        return None, f"SCALE-Sim ran over {timeout:.0f} s", time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    reports = list(work.rglob("COMPUTE_REPORT.csv"))
    if res.returncode != 0 or not reports:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no report"]
        return None, f"SCALE-Sim failed: {tail[0]}", seconds
    with reports[0].open() as f:
        rep = next(csv.DictReader(f, skipinitialspace=True))
    return int(float(rep["Total Cycles"])), None, seconds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="paper16")
    ap.add_argument("--venv", default=".venv-scalesim",
                    help="SCALE-Sim's own environment (created when missing)")
    ap.add_argument("--max-macs", type=float, default=150e6,
                    help="layers with more MACs are not run (SCALE-Sim takes minutes per "
                         "100 M; default: 150e6)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds a layer")
    ap.add_argument("--only", default=None, help="layers whose name contains one of these "
                                                  "(comma list)")
    ap.add_argument("-o", "--output", default="build/scalesim")
    args = ap.parse_args(argv)
    config = load_config(args.config)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    python = ensure_venv(Path(args.venv), [SCALESIM, "numpy<2"],
                         "import scalesim, numpy; assert numpy.__version__ < '2'")
    with resources.files("bpsa.workloads").joinpath("conv_layers.csv").open() as f:
        rows = list(csv.DictReader(f))
    if args.only:
        keys = args.only.split(",")
        rows = [r for r in rows if any(k in f"{r['network']}.{r['layer']}" for k in keys)]
    peak = config.rows * config.cols
    table = []
    for row in rows:
        c, h, w, k, r, s, st, p, d = (int(row[x]) for x in (
            "C", "H", "W", "K", "R", "S", "stride", "pad", "dilation"))
        m = layer_cycles(config, "forward", ConvLayer.conv(1, c, h, w, k, r, s, st, p, d))
        entry = {"layer": f"{row['network']}.{row['layer']}", "macs": m.macs,
                 "ideal": -(-m.macs // peak), "model": m.cycles,
                 "model_compute": m.compute_cycles}
        if d != 1:
            entry["reason"] = "dilation (SCALE-Sim has none)"
        elif m.macs > args.max_macs:
            entry["reason"] = f"{m.macs / 1e6:,.0f} M MACs, over --max-macs"
        else:
            print(f"SCALE-Sim: {entry['layer']} ({m.macs / 1e6:,.0f} M MACs) ...", flush=True)
            cycles, reason, seconds = _run_layer(python, config, row, out, args.timeout)
            entry.update(scalesim=cycles, scalesim_seconds=round(seconds, 1))
            if reason:
                entry["reason"] = reason
        table.append(entry)
        (out / "compare.json").write_text(json.dumps(table, indent=1))
    print(markdown(config, table))
    (out / "compare.md").write_text(markdown(config, table))


def markdown(config, table):
    lines = [f"| layer | MACs | ideal | SCALE-Sim (os, stall-free) | model | model / SCALE-Sim |",
             "|---|---|---|---|---|---|"]
    notes = []
    for e in table:
        if e.get("scalesim"):
            ratio = e["model"] / e["scalesim"]
            lines.append(f"| {e['layer']} | {e['macs']:,} | {e['ideal']:,} | "
                         f"{e['scalesim']:,} | {e['model']:,} | {ratio:.2f} |")
            if abs(ratio - 1) > 0.10:
                notes.append((e, ratio))
        else:
            lines.append(f"| {e['layer']} | {e['macs']:,} | {e['ideal']:,} | not run: "
                         f"{e['reason']} | {e['model']:,} | |")
    text = "\n".join(lines) + "\n"
    for e, ratio in notes:
        text += (f"\n- {e['layer']}: the model is {abs(ratio - 1):.0%} "
                 f"{'above' if ratio > 1 else 'below'} SCALE-Sim "
                 f"(model compute alone {e['model_compute']:,} cycles, ideal "
                 f"{e['ideal']:,}).")
    return text


if __name__ == "__main__":
    main()
