"""``make compare-zigzag``: ZigZag (KU Leuven's ``zigzag-dse``), an independent energy and
latency model, next to this project's energy model on forward layers of the workload.

ZigZag lives in an environment of its own (``--venv``, created and filled from PyPI on the
first run; it imports ``six`` without declaring it). Both models describe the same hardware:
the configuration's ``rows x cols`` output-stationary array (an output's accumulator in its
PE: register levels of no cost, as :mod:`bpsa.models.energy` prices no register), the data
feeder's lane registers (a level of X between A and the PEs that holds the elements one
context's kernel row spans: the feeder steps over them once for the row's ``S`` taps), the
buffers A (X), B (W) and P (Y) with our sizes and word widths, a DRAM behind the DMA bus, and
the same per-action energies (:data:`bpsa.models.energy.TECH_45NM`: a MAC's multiply and add,
an SRAM word by :func:`~bpsa.models.energy.sram_pj` of its buffer, a DRAM access of
``dma_data_width`` bits at its bytes' energy). The spatial unrolling is fixed (output channels
across the columns, output pixels of a row across the rows). Each layer runs twice in ZigZag:
with the driver's loop order forced (:func:`plan_ordering`: the same hardware and mapping, so
the two models should agree) and with the order ZigZag's LOMA search finds for the least
energy (how far the driver's plan, chosen for cycles, is from the energy optimum). The cycle
model runs the layer as the driver plans it on the data feeder's forward.

Writes ``zigzag.md`` and ``zigzag.json`` (``docs/results/``).
"""

import argparse
import csv
import json
import subprocess
import time
from importlib import resources
from pathlib import Path

from bpsa.config import load_config
from bpsa.models.area import memories
from bpsa.models.energy import TECH_45NM, actions_from_model, energy, mac_pj, sram_pj
from bpsa.models.perf import layer_cycles
from bpsa.plan import setup, tiling
from bpsa.spec.layer import ConvLayer
from bpsa.spec.regmap import Mode, Phase
from bpsa.tools.compare_scalesim import ensure_venv
from bpsa.tools.results import current_command, write_page

__all__ = ["ZIGZAG", "accelerator_yaml", "compare", "main", "mapping_yaml", "plan_ordering",
           "workload_yaml"]

#: ZigZag's packages (``six``: imported, not declared by 3.9.1).
ZIGZAG = ("zigzag-dse==3.9.1", "six")

#: Runs one layer in ZigZag's environment and prints its figures as JSON.
_DRIVER = """
import json, logging, sys
logging.disable(logging.CRITICAL)
from zigzag.api import get_hardware_performance_zigzag
from zigzag.hardware.architecture.memory_port import DataDirection as DD
acc, work, mapping, out = sys.argv[1:5]
_, _, cmes = get_hardware_performance_zigzag(workload=work, accelerator=acc, mapping=mapping,
                                             opt="energy", dump_folder=out, lpf_limit=6,
                                             loma_show_progress_bar=False)
cme = cmes[0][1][0][0]
levels = {}
for op, accesses in cme.memory_word_access.items():
    mem_op = cme.layer.memory_operand_links.layer_to_mem_op(op)
    hier = cme.accelerator.memory_hierarchy.get_memory_levels(mem_op)
    for lvl, a, e in zip(hier, accesses, cme.mem_energy_breakdown[op]):
        d = levels.setdefault(lvl.name, {"words": 0, "pj": 0.0})
        d["words"] += sum(a.get(x) for x in (DD.RD_OUT_TO_LOW, DD.WR_IN_BY_LOW,
                                             DD.RD_OUT_TO_HIGH, DD.WR_IN_BY_HIGH))
        d["pj"] += e
print(json.dumps({"macs": int(cme.layer.total_mac_count), "mac_pj": cme.mac_energy,
                  "pj": cme.energy_total, "levels": levels,
                  "cycles": cme.latency_total2, "order": str(cme.temporal_mapping)}))
"""


def _memory(name, bits, words, cost, operands, ports, served):
    prefix = {"read": "r", "write": "w", "read_write": "rw"}
    port_lines = "\n".join(
        f"      - {{name: {prefix[kind]}_port_{i + 1}, type: {kind}, bandwidth_min: {bits}, "
        f"bandwidth_max: {bits}, allocation: [{', '.join(repr(a) for a in alloc)}]}}"
        for i, (kind, alloc) in enumerate(ports))
    return (f"  {name}:\n    size: {bits * words}\n    r_cost: {cost}\n    w_cost: {cost}\n"
            f"    area: 0\n    latency: 1\n    operands: [{', '.join(operands)}]\n"
            f"    ports:\n{port_lines}\n    served_dimensions: {served}\n")


def lane_span(config, layer):
    """The X elements one context's kernel row spans (``rows`` output pixels of a row): what
    the data feeder's lane registers take from A once for the row's taps."""
    return (config.rows - 1) * layer.stride[1] + (layer.kernel_w - 1) * layer.dil_w + 1


def accelerator_yaml(config, layer, tech=TECH_45NM):
    """ZigZag's accelerator description of ``config`` running ``layer`` (the lane registers
    sized by :func:`lane_span`; see the module docstring)."""
    op, acc = config.operand_width, config.acc_width
    geo = memories(config)
    mult, add = mac_pj(config, tech)
    out = [f"name: bpsa_{config.name}\n\nmemories:\n"]
    for name, operand, bits in (("reg_X", "I1", op), ("reg_W", "I2", op)):
        out.append(_memory(name, bits, 1, 0.0, [operand],
                           [("read", [f"{operand}, tl"]), ("write", [f"{operand}, fh"])], "[]"))
    out.append(_memory("reg_P", acc, 1, 0.0, ["O"],
                       [("read", ["O, tl"]), ("read", ["O, th"]), ("write", ["O, fl"]),
                        ("write", ["O, fh"])], "[]"))
    out.append(_memory("reg_lane", op, lane_span(config, layer), 0.0, ["I1"],
                       [("read", ["I1, tl"]), ("write", ["I1, fh"])], "[D1, D2]"))
    for name, buf, operand in (("sram_A", "A", "I1"), ("sram_B", "B", "I2"),
                               ("sram_P", "P", "O")):
        words, bits = geo[buf]
        cost = sram_pj(words * bits / 8, bits, tech)
        ports = ([("read", ["O, tl", "O, th"]), ("write", ["O, fl", "O, fh"])] if operand == "O"
                 else [("read", [f"{operand}, tl"]), ("write", [f"{operand}, fh"])])
        out.append(_memory(name, bits, words, cost, [operand], ports, "[D1, D2]"))
    bus = config.dma_data_width
    out.append(_memory("dram", bus, 10 ** 9 // bus, bus // 8 * tech.dram_byte, ["I1", "I2", "O"],
                       [("read_write", ["I1, fh", "I1, tl", "I2, fh", "I2, tl", "O, fh",
                                        "O, tl", "O, fl", "O, th"])], "[D1, D2]"))
    out.append(f"\noperational_array:\n  unit_energy: {mult + add}\n  unit_area: 1\n"
               f"  dimensions: [D1, D2]\n  sizes: [{config.cols}, {config.rows}]\n")
    return "".join(out)


def workload_yaml(config, layer):
    """ZigZag's description of ``layer``'s forward (a :class:`bpsa.spec.layer.ConvLayer`)."""
    (oh, ow), (sh, sw), (ph, pw) = layer.out_hw, layer.stride, layer.pad
    acc = config.acc_width
    return (f"- id: 0\n  name: layer\n  operator_type: Conv\n"
            f"  equation: O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]\n"
            f"  dimension_relations: [ix={sw}*ox+{layer.dil_w}*fx, iy={sh}*oy+{layer.dil_h}*fy]\n"
            f"  loop_dims: [B, K, C, OY, OX, FY, FX]\n"
            f"  loop_sizes: [{layer.batch}, {layer.out_channels}, {layer.channels}, {oh}, {ow}, "
            f"{layer.kernel_h}, {layer.kernel_w}]\n"
            f"  pr_loop_dims: [IX, IY]\n  padding: [[{pw}, {pw}], [{ph}, {ph}]]\n"
            f"  operand_precision: {{I: {config.operand_width}, W: {config.operand_width}, "
            f"O: {acc}, O_final: {acc}}}\n  operand_source: {{I: 0, W: 0}}\n")


def _split(total, most):
    """``(inner, outer)``, ``inner * outer == total`` (ZigZag's loops divide the layer): the
    fewest ``outer`` pieces no larger than ``most``."""
    outer = -(-total // max(most, 1))
    while total % outer:
        outer += 1
    return total // outer, outer


def plan_ordering(config, layer):
    """The driver's loop order of ``layer``'s forward on the data feeder (innermost first;
    ZigZag's ``temporal_ordering``): per output pixel a group's channels and the taps; the
    contexts of a band (its rows, a row's pixels ``rows`` at a time); the ``kb`` output-channel
    blocks P holds; the groups; the steps of blocks; the bands. A loop the plan does not cut
    evenly (a group of 44 of 64 channels, bands of 9 of 224 rows) is rounded to the next
    divisor with as many or more pieces (2 groups of 32, 28 bands of 8): ZigZag's loops
    divide the layer."""
    e = setup.run(config, tiling.setup_descriptor(Phase.FORWARD, layer, Mode.BP_IM2COL),
                  addresses=False)
    oh, ow = layer.out_hw
    cg, groups = _split(layer.channels, e["cg"])
    kb, steps = _split(-(-layer.out_channels // config.cols), e["kb"])
    bh, bands = _split(oh, e["bh"])
    loops = [("FX", layer.kernel_w), ("FY", layer.kernel_h), ("C", cg),
             ("OX", -(-ow // config.rows)), ("OY", bh), ("K", kb), ("C", groups),
             ("K", steps), ("OY", bands), ("B", layer.batch)]
    return [(dim, size) for dim, size in loops if size > 1]


def mapping_yaml(config, layer, ordering=None):
    """The spatial unrolling (output channels across the columns, output pixels across the
    rows) and ``ordering`` (:func:`plan_ordering`'s list; None: ZigZag searches)."""
    ow = layer.out_hw[1]
    order = "" if ordering is None else "  temporal_ordering:\n" + "".join(
        f"    - [{dim}, {size}]\n" for dim, size in ordering)
    return (f"- name: default\n  spatial_mapping:\n    D1:\n      - K, "
            f"{min(config.cols, layer.out_channels)}\n    D2:\n      - OX, "
            f"{min(config.rows, ow)}\n  memory_operand_links: {{O: O, W: I2, I: I1}}\n"
            + order)


def _ours(config, layer):
    """This project's figures of ``layer``'s forward: MACs, each buffer's words, DRAM words of
    the bus, energy by part."""
    m = layer_cycles(config, "forward", layer, frontend="feeder")
    row = dict(m.as_dict(), phase="forward")
    e = energy(config, actions_from_model(config, row))
    bus = config.dma_data_width // 8
    words = {"sram_A": m.a_reads + m.a_writes, "sram_B": m.b_reads + m.b_writes,
             "sram_P": m.p_reads + m.p_writes,
             "dram": -(-(m.dma_read_bytes + m.dma_write_bytes) // bus)}
    pj = {"sram_A": e["parts"]["sram_A"], "sram_B": e["parts"]["sram_B"],
          "sram_P": e["parts"]["sram_P"], "dram": e["parts"]["dram"]}
    return {"macs": m.macs, "slots": m.array_slots, "mac_pj": e["parts"]["mac"], "pj": e["pj"],
            "words": words, "level_pj": pj, "cycles": m.cycles}


def _zigzag(python, work, files, timeout):
    """One ZigZag run of the YAML ``files`` (name -> text) in ``work``: its figures (a dict),
    or ``{"reason": ...}``, and the seconds it took."""
    work.mkdir(parents=True, exist_ok=True)
    for f, text in files.items():
        (work / f).write_text(text)
    t0 = time.perf_counter()
    res = subprocess.run([str(python), "-c", _DRIVER, *(str(work / f) for f in files),
                          str(work / "outputs")], capture_output=True, text=True,
                         timeout=timeout)
    seconds = round(time.perf_counter() - t0, 1)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"reason": f"ZigZag failed: {tail[0]}"}, seconds
    return json.loads(res.stdout.strip().splitlines()[-1]), seconds


def compare(config, layers, python, out_dir, timeout=600):
    """Each ``(name, layer)`` through ZigZag (``python``: its environment's), with the
    driver's loop order (``zigzag``) and with its own search's (``search``), and through this
    project's model (``ours``); a dict a layer."""
    rows = []
    for name, layer in layers:
        base = {"accelerator.yaml": accelerator_yaml(config, layer),
                "workload.yaml": workload_yaml(config, layer)}
        row = {"layer": name, "ours": _ours(config, layer),
               "ordering": plan_ordering(config, layer)}
        for key, order in (("zigzag", row["ordering"]), ("search", None)):
            files = dict(base, **{"mapping.yaml": mapping_yaml(config, layer, order)})
            row[key], row[f"{key}_seconds"] = _zigzag(python, Path(out_dir) / key / name,
                                                      files, timeout)
        rows.append(row)
        print(f"{name}: ours {row['ours']['pj'] / 1e6:,.1f} uJ, ZigZag "
              + ", ".join(f"{key} {row[key]['pj'] / 1e6:,.1f} uJ" for key in ("zigzag", "search")
                          if "pj" in row[key]), flush=True)
    return rows


#: The levels the page compares (ZigZag's names; ours: :func:`_ours`).
_LEVELS = (("sram_A", "A"), ("sram_B", "B"), ("sram_P", "P"), ("dram", "DRAM"))


def _markdown(config, rows):
    head = " | ".join(f"{label} words" for _, label in _LEVELS)
    lines = [f"ZigZag ({ZIGZAG[0]}) and this project's energy model on the forward of "
             f"workload layers (batch 1) on `{config.name}` ({config.rows}x{config.cols}, "
             f"output-stationary), the same buffers, lane registers and per-action energies "
             f"({TECH_45NM.name}). ZigZag runs each layer with the driver's loop order "
             "(the same mapping: the ratios should be near 1) and with its own search's "
             "order for the least energy (the last column: how much energy the driver's "
             "plan, chosen for cycles, spends over ZigZag's optimum). Words: each buffer's "
             "reads and writes (DRAM: bus words). Ratios: this project / ZigZag.", "",
             f"| layer | driver's loop order (innermost first) | MACs equal | ours (uJ) | "
             f"ZigZag (uJ) | ratio | {head} | ZigZag's own order (uJ) | ours / it |",
             "|---|---|---|---:|---:|---:|" + "---:|" * len(_LEVELS) + "---:|---:|"]
    for r in rows:
        o, z, best = r["ours"], r["zigzag"], r.get("search", {})
        order = " ".join(f"{d}{s}" for d, s in r.get("ordering", ()))
        if "reason" in z:
            lines.append(f"| {r['layer']} | {order} | not run: {z['reason']} |"
                         + " |" * (5 + len(_LEVELS)))
            continue

        def ratio(level, z=z, o=o):
            zw = z["levels"].get(level, {}).get("words", 0)
            return f"{o['words'][level] / zw:.2f}" if zw else "-"
        words = " | ".join(ratio(level) for level, _ in _LEVELS)
        own = (f"{best['pj'] / 1e6:,.1f} | {o['pj'] / best['pj']:.2f}" if "pj" in best
               else f"{best.get('reason', 'not run')} | -")
        lines.append(f"| {r['layer']} | {order} | {o['macs'] == z['macs']} | "
                     f"{o['pj'] / 1e6:,.1f} | {z['pj'] / 1e6:,.1f} | {o['pj'] / z['pj']:.2f} | "
                     f"{words} | {own} |")
    lines += ["", "Where they differ with the same loop order: **A** - the feeder reads whole "
              "SRAM words (`ceil((offset + span) / B)` a kernel row of a context, the offset "
              "being where the row starts in its word: 2 or 3 words for a span of 18), ZigZag "
              "the span's bits in words (1.125); **P** - P clears each word as a step starts "
              "and every accumulation reads the word it adds to (the first one too), where "
              "ZigZag writes an output's first partial sum without a read and clears nothing "
              "(4 accesses an output against 2 when a layer has one group); a loop the plan "
              "cuts unevenly is rounded for ZigZag to a divisor (the order column: 16 groups "
              "of 8 channels for the plan's 13 groups of 10, 28 bands of 8 rows for its 25 of "
              "9), so "
              "the two see different numbers of groups (P accumulations) or bands; **DRAM** - "
              "a band re-reads the X rows it shares with the band before (its halo: `R - "
              "stride` rows, 7 on AlexNet's first layer), which ZigZag does not count. "
              "ZigZag's own search (LOMA, `lpf_limit` 6) is not exhaustive: on vgg16.conv3_1 "
              "its order costs more than the driver's. MACs are the layer's in both.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="paper16")
    ap.add_argument("--venv", default=".venv-zigzag",
                    help="ZigZag's own environment (created when missing)")
    ap.add_argument("--layers", type=int, default=10, help="the workload's first N layers")
    ap.add_argument("-o", "--out", default="docs/results")
    ap.add_argument("--work", default="build/zigzag", help="ZigZag's inputs and dumps")
    args = ap.parse_args(argv)
    config = load_config(args.config)
    python = ensure_venv(Path(args.venv), list(ZIGZAG), "import zigzag.api, six")
    with resources.files("bpsa.workloads").joinpath("conv_layers.csv").open() as f:
        table = [r for r in csv.DictReader(f) if int(r["dilation"]) == 1][:args.layers]
    layers = [(f"{r['network']}.{r['layer']}", ConvLayer.conv(
        1, *(int(r[x]) for x in ("C", "H", "W", "K", "R", "S", "stride", "pad"))))
        for r in table]
    rows = compare(config, layers, python, args.work)
    write_page(Path(args.out) / "zigzag.md", "ZigZag next to the energy model",
               current_command(), _markdown(config, rows),
               data={"config": config.name, "rows": rows})
    print(_markdown(config, rows))


if __name__ == "__main__":
    main()
