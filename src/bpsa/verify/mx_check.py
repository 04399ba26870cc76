"""The MX quantizer and block dot product against independent implementations, at scale:
``bpsa.models.mx.quantize`` against Graphcore's gfloat on random blocks (zeros, float32
subnormals, rounding ties, saturating and mixed-magnitude blocks, negative zeros), both scale
rules; ``dequantize`` against ml_dtypes; ``matmul`` against exact rationals. Writes
``docs/results/mx.md`` (``make mx-check``)."""

import argparse
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bpsa.models.mx import dequantize, matmul, quantize
from bpsa.spec.numeric import MX_FORMATS
from bpsa.tools.results import current_command, write_page
from bpsa.verify.mx_reference import (conversion_blocks, gfloat_quantize, mldtypes_dequantize,
                                      rational_matmul)

__all__ = ["check", "main"]

CHUNK = 5000


def _conversion(name, blocks, seed):
    """Mismatched blocks of quantize (floor rule) against gfloat, and of dequantize against
    ml_dtypes, over ``blocks`` random blocks."""
    rng = np.random.default_rng(seed)
    bad_q = bad_d = 0
    for start in tqdm(range(0, blocks, CHUNK), desc=f"{name} conversion", leave=False):
        x = conversion_blocks(rng, min(CHUNK, blocks - start))
        codes, scales = quantize(x, name)
        ref_codes, ref_scales = gfloat_quantize(x, name)
        bad_q += int(((codes != ref_codes).any(axis=1) | (scales[:, 0] != ref_scales)).sum())
        back = dequantize(codes, scales, name)
        ref = mldtypes_dequantize(codes, scales[:, 0], name)
        bad_d += int((~((back == ref) | (np.isnan(back) & np.isnan(ref)))).any(axis=1).sum())
    return bad_q, bad_d


def _dot(name, products, seed):
    """Mismatched outputs of matmul against exact rationals over random GEMMs of about
    ``products`` outputs (K up to 160: up to five blocks)."""
    rng = np.random.default_rng(seed)
    done = bad = 0
    while done < products:
        m, k, n = int(rng.integers(1, 6)), int(rng.integers(1, 161)), int(rng.integers(1, 6))
        a = rng.standard_normal((m, k)) * np.ldexp(1.0, rng.integers(-125, 120, size=(m, 1)))
        b = rng.standard_normal((k, n)) * np.ldexp(1.0, rng.integers(-125, 120, size=(1, n)))
        a[rng.random(a.shape) < 0.2] = 0
        ac, sa = quantize(a.astype(np.float32), name, axis=1)
        bc, sb = quantize(b.astype(np.float32), name, axis=0)
        got = matmul(ac, sa, bc, sb, name)
        ref = rational_matmul(dequantize(ac, sa, name, axis=1), dequantize(bc, sb, name, axis=0))
        bad += int((got != ref).sum())
        done += m * n
    return done, bad


def check(blocks=100_000, products=2_000, seed=1):
    """One row per MX format: blocks converted, mismatches, dot-product outputs, mismatches."""
    rows = []
    for i, name in enumerate(MX_FORMATS):
        t0 = time.perf_counter()
        bad_q, bad_d = _conversion(name, blocks, seed + i)
        outputs, bad_m = _dot(name, products, seed + 100 + i)
        rows.append({"format": name, "blocks": blocks, "quantize_mismatches": bad_q,
                     "dequantize_mismatches": bad_d, "dot_outputs": outputs,
                     "dot_mismatches": bad_m, "seconds": time.perf_counter() - t0})
    return rows


def _markdown(rows):
    lines = ["`bpsa.models.mx` against independent implementations: `quantize` (OCP MX 6.3, "
             "the floor scale) against Graphcore's gfloat (`compute_scale_amax`, "
             "`round_ndarray(..., sat=True)`, `encode_ndarray`; INT8 clipped to +-127/64 "
             "first, the contract's symmetric range); `dequantize` against ml_dtypes "
             "(`float8_e4m3fn`, `float8_e5m2`, `float8_e8m0fnu`); `matmul` (the block dot "
             "product) against exact rationals rounded once per block "
             "(`bpsa.verify.mx_reference`). Blocks from `conversion_blocks`: random float32 "
             "encodings (subnormals included), values spread over 24 binades, all-zero "
             "blocks, one non-zero element, rounding ties, values just below a power of two, "
             "negative zeros. The contract: `docs/architecture/mx.md`.", "",
             "| format | blocks | quantize mismatches | dequantize mismatches | dot-product "
             "outputs | dot-product mismatches | time (s) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['format']} | {r['blocks']:,} | {r['quantize_mismatches']:,} "
                     f"| {r['dequantize_mismatches']:,} | {r['dot_outputs']:,} "
                     f"| {r['dot_mismatches']:,} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=100_000)
    parser.add_argument("--products", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-o", "--out", default="docs/results")
    args = parser.parse_args(argv)
    rows = check(args.blocks, args.products, args.seed)
    path = write_page(Path(args.out) / "mx.md", "MX formats against independent implementations",
                      current_command(), _markdown(rows), data={"rows": rows})
    for r in rows:
        print(f"{r['format']:>11}: {r['blocks']:,} blocks, quantize {r['quantize_mismatches']} "
              f"mismatches, dequantize {r['dequantize_mismatches']}; {r['dot_outputs']:,} "
              f"dot products, {r['dot_mismatches']} mismatches ({r['seconds']:.0f} s)")
    print(f"wrote {path}")
    if any(r["quantize_mismatches"] or r["dequantize_mismatches"] or r["dot_mismatches"]
           for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
