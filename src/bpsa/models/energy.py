"""Energy of a layer from its action counts: every action (a multiply-accumulate fired, a buffer
word read or written, a byte of external memory moved) times its energy on a technology, summed
(the Accelergy / ZigZag method).

    energy = macs_fired (E_mult + E_add)
             + sum over buffers (reads + writes) E_sram(capacity, word bits)
             + (DMA bytes read + written) E_dram_byte

The per-action energies are :data:`TECH_45NM`'s, from Horowitz, "Computing's energy problem
(and what we can do about it)", ISSCC 2014, Fig. 1.1.9 (45 nm, 0.9 V), each number with its
source in :data:`SOURCES`; the ones the paper does not give are derived from its points by the
rules below, and say so.

- Multiplies: integer 8 bits 0.2 pJ and 32 bits 3.1 pJ (published); other widths on the
  geometric line through the two (the energy grows as the square of the width: 16 bits
  0.79 pJ, derived). Floating point: fp16 1.1 pJ, fp32 3.7 pJ (published); bf16 is priced as
  fp16 (its 8-bit significand multiplier is smaller: an upper bound). MX formats multiply
  8-bit elements: priced as the 8-bit integer multiply (the e4m3 significands are 4 bits: an
  upper bound), the block scales left out.
- Adds (the accumulation, at the accumulator's width): integer 8, 16, 32 bits 0.03, 0.05,
  0.1 pJ (published), linear between and beyond; fp32 0.9 pJ (published).
- SRAM: a 64-bit read of 8 KB 10 pJ, 32 KB 20 pJ, 1 MB 100 pJ (published); other capacities
  on the log-log line through the nearest two (below 8 KB, the 8-32 KB slope: the square root
  of the capacity); other widths in proportion to the bits; a write as a read. A buffer's
  capacity is the whole memory (:func:`bpsa.models.area.memories`), whose two banks share it.
- External memory (DRAM): 640 pJ per 32-bit word (Han et al., "EIE", ISCA 2016, Table I, from
  Horowitz's figures), 160 pJ a byte read or written.
- Left out: a gated MAC (zero gating holds the operand registers: its datapath does not
  switch; its clock is not modelled), the operand and pipeline registers, the controller and
  the wires. The figures rank configurations and show what an action saves; they are not a
  sign-off power analysis.

The action counts come from the RTL's counters (:func:`actions_from_counters`: ``bpsa sim
--energy``; the buffer counters count the memory the run's front end reads,
:func:`counted_memories`) or from the cycle model (:func:`actions_from_model`: ``bpsa perf
--energy``), which counts the same buffer words as the counters (checked equal on the
model's random layers and ``make rtl-layers``; P's reads apart) and leaves the split of the
MACs into fired and gated to a ``zero_fraction`` of the data.
"""

from dataclasses import dataclass
from math import log

from bpsa.config import FLOAT_WIDTHS
from bpsa.models.area import memories

__all__ = ["SOURCES", "TECH_45NM", "Technology", "actions_from_counters", "actions_from_model",
           "counted_memories", "energy", "mac_pj", "rows_energy", "sram_pj"]

_HOROWITZ = "Horowitz, ISSCC 2014, Fig. 1.1.9 (45 nm, 0.9 V)"
_EIE = "Han et al., EIE, ISCA 2016, Table I (45 nm, after Horowitz)"


@dataclass(frozen=True)
class Technology:
    """Per-action energies (pJ) of one technology: ``int_mult`` and ``int_add`` ``{bits:
    pJ}``, ``float_mult`` and ``float_add`` ``{format: pJ}``, ``sram_64`` ``{bytes: pJ}``
    (a 64-bit read), ``dram_byte``."""
    name: str
    int_mult: dict
    int_add: dict
    float_mult: dict
    float_add: dict
    sram_64: dict
    dram_byte: float


#: 45 nm, from :data:`SOURCES`.
TECH_45NM = Technology(
    name="45nm",
    int_mult={8: 0.2, 32: 3.1},
    int_add={8: 0.03, 16: 0.05, 32: 0.1},
    float_mult={"fp16": 1.1, "fp32": 3.7},
    float_add={"fp16": 0.4, "fp32": 0.9},
    sram_64={8 * 1024: 10.0, 32 * 1024: 20.0, 1024 * 1024: 100.0},
    dram_byte=640.0 / 4)

#: Where each number of :data:`TECH_45NM` comes from.
SOURCES = {
    "int_mult": _HOROWITZ, "int_add": _HOROWITZ, "float_mult": _HOROWITZ,
    "float_add": _HOROWITZ, "sram_64": _HOROWITZ, "dram_byte": _EIE,
}


def _int_mult(tech, bits):
    """An integer multiply of ``bits``-bit operands: the geometric line through the two
    published widths (the square of the width)."""
    (b0, e0), (b1, e1) = sorted(tech.int_mult.items())
    return e0 * (e1 / e0) ** (log(bits / b0) / log(b1 / b0))


def _int_add(tech, bits):
    """An integer add of ``bits`` bits: linear between the published widths, and beyond the
    last two."""
    pts = sorted(tech.int_add.items())
    for (b0, e0), (b1, e1) in zip(pts, pts[1:]):
        if bits <= b1 or (b1, e1) == pts[-1]:
            return e0 + (e1 - e0) * (bits - b0) / (b1 - b0)
    raise AssertionError("unreachable")


def mac_pj(config, tech=TECH_45NM):
    """``(multiply, add)`` pJ of one fired multiply-accumulate of ``config``'s arithmetic (see
    the module docstring)."""
    if config.arithmetic in FLOAT_WIDTHS:
        return tech.float_mult["fp16"], tech.float_add["fp32"]
    if config.is_mx:
        return _int_mult(tech, 8), _int_add(tech, config.acc_width)
    return _int_mult(tech, config.operand_width), _int_add(tech, config.acc_width)


def sram_pj(capacity_bytes, width_bits, tech=TECH_45NM):
    """pJ of one access of ``width_bits`` to an SRAM of ``capacity_bytes``: the 64-bit
    energy on the log-log line through the nearest two published capacities (below the
    smallest, the first two), in proportion to the width."""
    if capacity_bytes <= 0 or width_bits <= 0:
        raise ValueError(f"an SRAM has a positive capacity and width, not {capacity_bytes} "
                         f"bytes of {width_bits}-bit words")
    pts = sorted(tech.sram_64.items())
    pair = next(((p, q) for p, q in zip(pts, pts[1:]) if capacity_bytes <= q[0]), pts[-2:])
    (c0, e0), (c1, e1) = pair
    e64 = e0 * (e1 / e0) ** (log(capacity_bytes / c0) / log(c1 / c0))
    return e64 * width_bits / 64


#: The memory each front end's buffer counters count (``buf_a_*``, ``buf_b_*``): the RTL counts
#: the reads of the engine that ran (:mod:`bpsa.gateware.control.counters`).
_COUNTED = {"feeder": ("A", "B"), "zero_free": ("A", "B"), "channel_first": ("CF", "B"),
            "bp_im2col": ("BP_A", "BP_B"), "pool": ("POOL", None)}


def counted_memories(mode):
    """``(A's, B's)`` names in :func:`bpsa.models.area.memories` of the memories the buffer
    counters ``buf_a_*`` and ``buf_b_*`` count for a run in ``mode`` (a forward's front end,
    a backward mode, or ``"pool"``)."""
    try:
        return _COUNTED[mode]
    except KeyError:
        raise ValueError(f"mode must be one of {sorted(_COUNTED)}, not {mode!r}") from None


def actions_from_counters(config, mode, counters):
    """The action counts of one RTL run from its counters (the names of
    :data:`bpsa.spec.regmap.COUNTERS`): ``macs_fired``, ``macs_gated``, ``{memory: (reads,
    writes)}`` as ``memory``, ``dram_bytes``."""
    a, b = counted_memories(mode)
    mem = {a: (counters["buf_a_reads"], counters["buf_a_writes"]),
           "P": (counters["buf_p_reads"], counters["buf_p_writes"])}
    if b is not None:
        mem[b] = (counters["buf_b_reads"], counters["buf_b_writes"])
    return {"macs_fired": counters["macs"], "macs_gated": counters["gated_macs"],
            "memory": mem,
            "dram_bytes": counters["dma_read_bytes"] + counters["dma_write_bytes"]}


def actions_from_model(config, row, *, zero_fraction=0.0):
    """The action counts of one layer phase from the cycle model (``row``: a
    :class:`bpsa.models.perf.LayerCycles` or its dict, as a network step's rows, with its
    ``phase``): the buffer words it counts exactly as the RTL's counters (P's reads: its
    accumulations and stores), the DMA bytes, and the MACs: ``zero_fraction`` of the layer's
    MACs gated (a zero operand: ReLU outputs, zero-spaced gradients) with every slot beyond
    them (padding, partial tiles), the rest fired."""
    if not 0.0 <= zero_fraction <= 1.0:
        raise ValueError(f"zero_fraction is in [0, 1], not {zero_fraction}")
    get = row.get if isinstance(row, dict) else lambda k, d=None: getattr(row, k, d)
    phase = get("phase")
    if phase is not None and phase.startswith("pool"):
        mode = "pool"
    elif get("frontend") == "channel_first":
        mode = "channel_first"
    else:
        mode = "zero_free" if phase in ("loss", "gradient") else "feeder"
    a, b = counted_memories(mode)
    mem = {a: (get("a_reads"), get("a_writes")), "P": (get("p_reads"), get("p_writes"))}
    if b is not None:
        mem[b] = (get("b_reads"), get("b_writes"))
    fired = round(get("macs") * (1 - zero_fraction))
    return {"macs_fired": fired, "macs_gated": max(0, get("array_slots") - fired),
            "memory": mem, "dram_bytes": get("dma_read_bytes") + get("dma_write_bytes")}


def energy(config, actions, tech=TECH_45NM):
    """The energy of ``actions`` (:func:`actions_from_counters`' dict) on ``config``: ``{"pj":
    total, "pj_per_mac": total over the MACs fired and gated, "parts": {action: pJ}}`` with
    the parts ``mac`` (multiplies and adds fired), one a memory (``sram_<name>``) and
    ``dram``."""
    mult, add = mac_pj(config, tech)
    geo = memories(config)
    parts = {"mac": actions["macs_fired"] * (mult + add)}
    for name, (reads, writes) in actions["memory"].items():
        words, bits = geo[name]
        parts[f"sram_{name}"] = (reads + writes) * sram_pj(words * bits / 8, bits, tech)
    parts["dram"] = actions["dram_bytes"] * tech.dram_byte
    total = sum(parts.values())
    slots = actions["macs_fired"] + actions["macs_gated"]
    return {"pj": total, "pj_per_mac": total / slots if slots else 0.0, "parts": parts}


def rows_energy(config, rows, *, zero_fraction=0.0, tech=TECH_45NM):
    """The energy of the cycle model's ``rows`` (a network step's, or
    :func:`bpsa.models.perf.phase_table`'s; those not run are left out), each row's
    ``energy_pj`` set: ``{"pj", "pj_per_mac" (over the layers' MACs), "parts": {action: pJ},
    "phases": {phase: pJ}}``. A row's own ``zero_fraction`` (a measured one:
    :func:`bpsa.torch.sparsity.zero_fractions`) takes the place of ``zero_fraction``."""
    total = {"pj": 0.0, "parts": {}, "phases": {}}
    macs = 0
    for r in rows:
        if r.get("status", "run") != "run" or "refused" in r:
            continue
        zf = r.get("zero_fraction", zero_fraction)
        e = energy(config, actions_from_model(config, r, zero_fraction=zf), tech)
        r["energy_pj"] = e["pj"]
        total["pj"] += e["pj"]
        total["phases"][r["phase"]] = total["phases"].get(r["phase"], 0.0) + e["pj"]
        for k, v in e["parts"].items():
            total["parts"][k] = total["parts"].get(k, 0.0) + v
        macs += r["macs"]
    total["pj_per_mac"] = total["pj"] / macs if macs else 0.0
    return total
