"""Whole-accelerator scenarios on any transport (the cocotb testbench's, the native one): a
driver opened on the accelerator in, assertions out."""

import numpy as np

from bpsa.host.driver import AcceleratorError
from bpsa.sim.jobs import DEFAULT_JOBS, run_job

__all__ = ["GOOD", "illegal_descriptors"]

GOOD = {"PHASE": 0, "N": 1, "C": 1, "H": 4, "W": 4, "K": 1, "R": 3, "S": 3, "STRIDE_H": 1,
        "STRIDE_W": 1, "PAD_H": 0, "PAD_W": 0, "DIL_H": 1, "DIL_W": 1, "ADDR_X": 0x1000,
        "ADDR_W": 0x2000, "ADDR_DY": 0x3000, "ADDR_OUT": 0x4000, "MODE": 0}


async def illegal_descriptors(cfg, drv, clock, ram_size):
    """Every refusal answered with its code, nothing read or written, no hang; good layers of
    every generated phase still right afterwards; phases not generated refused (PHASE).
    ``drv``: a driver opened on any transport of a ``ram_size``-byte memory; ``clock()``: its
    cycle count."""
    RAM_SIZE = ram_size
    sentinel = bytes([0xA5]) * 4096
    from bpsa.plan.setup import generated_phases
    phases = generated_phases(cfg)
    generated = {p: p in phases for p in (0, 1, 2)}
    zf = int(cfg.has_mode("zero_free"))     # the loss's and the gradient's default mode
    cases = [
        ({"N": 0}, 2), ({"C": 0}, 2), ({"H": 0}, 2), ({"K": 0}, 2), ({"R": 0}, 2),
        ({"STRIDE_H": 0}, 3), ({"STRIDE_W": 0}, 3), ({"DIL_W": 0}, 3),
        ({"R": 5}, 4), ({"S": 3, "W": 2}, 4), ({"R": 3, "DIL_H": 2, "H": 4}, 4),
        # PHASE 3 (FC backward) needs H = W = R = S = 1 and no padding: SHAPE
        ({"PHASE": 3}, 9 if cfg.has("interleaved") and cfg.has("is") else 1),
        ({"PHASE": 7}, 1), ({"PHASE": 15}, 1),
        ({"ADDR_X": RAM_SIZE - 4}, 8), ({"ADDR_OUT": RAM_SIZE - 8}, 8),
        ({"ADDR_X": 0xFFFF_FFF0}, 8),
    ]
    def host_code(change):
        """The error the set-up programs give (a layer the tiling refuses is TOO_LARGE
        before its window is checked)."""
        from bpsa.plan.grammar import Refusal
        from bpsa.plan.setup import run
        desc = {k.lower(): v for k, v in dict(GOOD, **change).items()}
        desc.update(window_lo=0, window_hi=RAM_SIZE - 1)
        try:
            run(cfg, desc, phases=phases)
        except Refusal as e:
            return e.code
        return 0

    for phase in (1, 2):
        mode = {"MODE": zf}
        change = {"PHASE": phase, "ADDR_DY": RAM_SIZE - 2, **mode}
        code = host_code(change)
        assert code in (6, 8) or not generated[phase], code
        cases.append((change, code if generated[phase] else 1))
        cases.append(({"PHASE": phase, "N": 0, **mode}, 2 if generated[phase] else 1))
    # a mode the configuration does not generate for the phase: MODE (10)
    for phase in (1, 2):
        cases.append(({"PHASE": phase, "MODE": 3}, 10 if generated[phase] else 1))
        if generated[phase] and not cfg.has_mode("bp_im2col"):
            cases.append(({"PHASE": phase, "MODE": 0}, 10))
    # requantization on a phase whose output does not feed a next layer: REQUANT (11)
    cases.append(({"PHASE": 2, "REQUANT": 1, "MODE": zf}, 11 if generated[2] else 1))
    if generated[1] and cfg.has_mode("bp_im2col"):
        cases.append(({"PHASE": 1, "REQUANT": 1, "MODE": 0}, 11))
    if not generated[0]:
        cases = [(c, 1 if c.get("PHASE", 0) == 0 else e) for c, e in cases]
    if cfg.acc_width > 8:
        cases.append(({"ADDR_OUT": 0x4001}, 7))
    for i, (change, code) in enumerate(cases):
        desc = dict(GOOD, **change)
        out = desc["ADDR_OUT"]
        if out + len(sentinel) <= RAM_SIZE:
            await drv.t.write_mem(out, sentinel)
        got = await drv.start(desc)
        assert got == code, f"case {i} {change}: error {got:#x}, expected {code:#x}"
        after = await drv.read_counters()
        assert after["dma_read_bytes"] == 0 and after["dma_write_bytes"] == 0, \
            f"case {i} {change}: the refused layer moved data"
        if out + len(sentinel) <= RAM_SIZE:
            assert await drv.t.read_mem(out, len(sentinel)) == sentinel, \
                f"case {i} {change}: memory written"
    # still right on the next good layer of every generated phase (a 1x1 one when the
    # buffers cannot hold the 3x3 layer's tiles in the phase's default mode)
    from bpsa.spec.layer import ConvLayer
    from bpsa.sim.accel_run import check_job
    for phase in ("forward", "loss", "gradient"):
        if generated[("forward", "loss", "gradient").index(phase)]:
            layer = DEFAULT_JOBS[0]["layer"]
            try:
                check_job(cfg, ConvLayer(**layer), phase)
            except ValueError:
                layer = dict(layer, kernel_h=1, kernel_w=1, pad_h=0, pad_w=0)
            job = {"phase": phase, "layer": layer, "seed": 7}
            got, want, _ = await run_job(cfg, drv, job, clock)
            assert np.array_equal(got, want), f"{phase} after the refusals differs"
    # the driver raises the hardware's refusal as an exception with the code's name
    try:
        await drv.forward(np.ones((1, 1, 2, 2), dtype=np.int64),
                          np.ones((1, 1, 3, 3), dtype=np.int64))
    except AcceleratorError as e:
        assert e.name == ("KERNEL_TOO_LARGE" if generated[0] else "PHASE"), e
    else:
        raise AssertionError("a 3x3 kernel on a 2x2 input was not refused")
