"""The pooling unit driven run by run, as the controller drives it, for its testbenches (the
Amaranth simulator's in ``tests/test_gateware_engines_pool.py``, Verilator's in
:mod:`bpsa.verify.tb_pool`): each run's buffer words and its ``pool_run_layout`` fields from
:func:`bpsa.plan.tiling.pool_plan`, and the output tensor gathered from the result vectors
added into P (integers, or the contract's fp32 addition from ``+0``)."""

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
        self.out = np.zeros((n * c, h if self.bwd else oh, self.out_w), dtype=np.int64)
        self.shape = (n, c) + self.out.shape[1:]
        self.xp = x.reshape(n * c, h, w)
        self.dp = dy.reshape(n * c, oh, ow) if self.bwd else None

    @property
    def runs(self):
        return self.plan["runs"]

    def words(self, run):
        """The operands the load unit writes into the buffer for ``run``, from word 0
        (encodings as unsigned ``operand_width``-bit words)."""
        mask = (1 << self.cfg.operand_width) - 1
        words = []
        for i in range(run["planes"]):
            if run["x_plane"]:
                words += list(self.xp[run["i0"] + i, run["xlo"]:run["xlo"] + run["xrows"]]
                              .ravel())
        for i in range(run["planes"]):
            if self.bwd:
                words += list(self.dp[run["i0"] + i, run["dlo"]:run["dlo"] + run["drows"]]
                              .ravel())
        assert len(words) <= self.cfg.buf_pool_depth // 2
        return [int(v) & mask for v in words]

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
        cols = self.cfg.cols
        for i in range(run["planes"]):
            flat = [got.get(i * run["p_row"] + e // cols, [0] * cols)[e % cols]
                    for e in range(run["rows"] * self.out_w)]
            self.out[run["i0"] + i, run["y0"]:run["y0"] + run["rows"]] = \
                np.array(flat).reshape(run["rows"], self.out_w)

    def result(self):
        return self.out.reshape(self.shape)
