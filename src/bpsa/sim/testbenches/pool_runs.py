"""The pooling unit driven run by run, as the controller drives it, for its testbenches (the
Amaranth simulator's in ``tests/test_gateware_frontends_pool_pool.py``, Verilator's in
:mod:`bpsa.sim.testbenches.tb_pool`): each run's buffer words and its ``pool_run_layout``
fields from :func:`bpsa.plan.tiling.pool_plan`, and the output tensor gathered from the result
vectors added into P (integers, or the contract's fp32 addition from ``+0``)."""

import numpy as np

from bpsa.models import floating
from bpsa.plan.tiling import pool_plan

__all__ = ["PoolRuns"]


class PoolRuns:
    """One pooling layer's runs on ``cfg``: ``lay`` holds ``r``, ``s``, ``stride``, ``pad``
    and ``kind`` (``max`` or ``avg``); ``x`` (N x C x H x W) and, backward, ``dy``."""

    def __init__(self, cfg, phase, x, dy, lay, relu):
        n, c, h, w = x.shape
        self.cfg, self.lay, self.relu, self.hw = cfg, lay, relu, (h, w)
        self.plan = pool_plan(cfg, phase, n, c, h, w, lay["r"], lay["s"], lay["stride"],
                              lay["pad"], lay["kind"], relu)
        self.bwd = phase == "pool_backward"
        oh, ow = self.plan["oh"], self.plan["ow"]
        self.out_w = w if self.bwd else ow
        # "planes" of the plan: blocks of pool_lanes planes of an image (planes past C zero)
        lanes = self.lanes = cfg.pool_lanes
        self.cb = -(-c // lanes) * lanes
        self.c = c

        def blocks(t):
            pad = np.zeros((t.shape[0], self.cb) + t.shape[2:], dtype=np.int64)
            pad[:, :c] = t
            return pad.reshape((-1, lanes) + t.shape[2:])

        self.out = np.zeros((n * self.cb // lanes, lanes, h if self.bwd else oh, self.out_w),
                            dtype=np.int64)
        self.shape = (n, c) + self.out.shape[2:]
        self.xp = blocks(x)
        self.dp = blocks(dy) if self.bwd else None

    @property
    def runs(self):
        return self.plan["runs"]

    def words(self, run):
        """The operands the load unit writes into the buffer for ``run``, from word 0
        (encodings as unsigned ``operand_width``-bit words)."""
        width = self.cfg.operand_width
        mask = (1 << width) - 1

        def packed(t):               # lanes x rows x W -> a word a pixel, lane j at bits j w
            return [sum((int(v) & mask) << (j * width) for j, v in enumerate(px))
                    for px in t.reshape(self.lanes, -1).T]

        words = []
        for i in range(run["planes"]):
            if run["x_plane"]:
                words += packed(self.xp[run["i0"] + i, :, run["xlo"]:run["xlo"] + run["xrows"]])
        for i in range(run["planes"]):
            if self.bwd:
                words += packed(self.dp[run["i0"] + i, :, run["dlo"]:run["dlo"] + run["drows"]])
        assert len(words) <= self.cfg.buf_pool_depth // 2
        return words

    def layer(self, run):
        """The ``pool_run_layout`` fields of ``run``."""
        lay, plan, (h, w) = self.lay, self.plan, self.hw
        return {"backward": int(self.bwd), "avg": int(lay["kind"] == "avg"),
                "relu": int(self.relu), "planes": run["planes"], "h": h, "w": w,
                "r": lay["r"], "s": lay["s"], "stride_h": lay["stride"][0],
                "stride_w": lay["stride"][1], "pad_h": lay["pad"][0], "pad_w": lay["pad"][1],
                "oh": plan["oh"], "ow": plan["ow"], "y0": run["y0"], "rows": run["rows"],
                "xlo": run["xlo"], "dlo": run["dlo"], "drows": run["drows"], "q0": run["q0"],
                "rem0": run["rem0"], "qw0": plan["qw0"], "remw0": plan["rw0"], "x_base": 0,
                "d_base": run["d_offset"], "x_plane": run["x_plane"],
                "d_plane": run["d_plane"], "p_row": run["p_row"], "rs": plan["rs"],
                "recip": plan["recip"]}

    def add(self, a, b):
        """P's addition of two lanes (fp32 encodings, or integers)."""
        if self.cfg.is_float:
            return floating.add(a & 0xFFFFFFFF, b & 0xFFFFFFFF)
        return a + b

    def gather(self, run, got):
        """Put ``run``'s P words (``{word: [lanes]}``, the vectors added) into the output."""
        cols, lanes = self.cfg.cols, self.lanes
        epw = cols // lanes                          # a plane's elements a P word
        for i in range(run["planes"]):
            for j in range(lanes):
                flat = [got.get(i * run["p_row"] + e // epw, [0] * cols)[e % epw + j]
                        for e in range(run["rows"] * self.out_w)]
                self.out[run["i0"] + i, j, run["y0"]:run["y0"] + run["rows"]] = \
                    np.array(flat).reshape(run["rows"], self.out_w)

    def result(self):
        n = self.shape[0]
        return self.out.reshape((n, self.cb) + self.shape[2:])[:, :self.c]
