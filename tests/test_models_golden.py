"""Tests of src/bpsa/models/golden.py against a naive scalar-loop model written from DESIGN.md.

The naive model below shares no code with src/bpsa/models/golden.py: it walks every index of the
formulas

    Y[n,k,oh,ow] = sum_{c,r,q} X[n,c, oh*s + r*d - p, ow*s + q*d - p] * W[k,c,r,q]
    dX[n,c,h,w]  = sum over (k,r,q,oh,ow) landing on (h, w) of dY[n,k,oh,ow] * W[k,c,r,q]
    dW[k,c,r,q]  = sum_{n,oh,ow} dY[n,k,oh,ow] * X[n,c, oh*s + r*d - p, ow*s + q*d - p]

with plain Python integers.
"""

import dataclasses

import numpy as np
import pytest

from bpsa.models import golden

# --- naive reference (independent of src/bpsa/models/golden.py) -----------------------------

def naive_out(size, kernel, s, p, d):
    return (size + 2 * p - d * (kernel - 1) - 1) // s + 1


def naive_conv2d(x, w, s, p, d):
    n_n, n_c, n_h, n_w = x.shape
    n_k, _, n_r, n_s = w.shape
    n_oh = naive_out(n_h, n_r, s[0], p[0], d[0])
    n_ow = naive_out(n_w, n_s, s[1], p[1], d[1])
    y = [[[[0] * n_ow for _ in range(n_oh)] for _ in range(n_k)] for _ in range(n_n)]
    for n in range(n_n):
        for k in range(n_k):
            for oh in range(n_oh):
                for ow in range(n_ow):
                    acc = 0
                    for c in range(n_c):
                        for r in range(n_r):
                            for q in range(n_s):
                                h = oh * s[0] + r * d[0] - p[0]
                                v = ow * s[1] + q * d[1] - p[1]
                                if 0 <= h < n_h and 0 <= v < n_w:
                                    acc += int(x[n, c, h, v]) * int(w[k, c, r, q])
                    y[n][k][oh][ow] = acc
    return np.array(y, dtype=np.int64).reshape(n_n, n_k, n_oh, n_ow)


def naive_input_grad(dy, w, hw, s, p, d):
    n_n, n_k, n_oh, n_ow = dy.shape
    _, n_c, n_r, n_s = w.shape
    dx = np.zeros((n_n, n_c, hw[0], hw[1]), dtype=object)
    for n in range(n_n):
        for k in range(n_k):
            for oh in range(n_oh):
                for ow in range(n_ow):
                    for r in range(n_r):
                        for q in range(n_s):
                            h = oh * s[0] + r * d[0] - p[0]
                            v = ow * s[1] + q * d[1] - p[1]
                            if 0 <= h < hw[0] and 0 <= v < hw[1]:
                                for c in range(n_c):
                                    dx[n, c, h, v] += int(dy[n, k, oh, ow]) * int(w[k, c, r, q])
    return dx.astype(np.int64)


def naive_weight_grad(x, dy, rs, s, p, d):
    n_n, n_c, n_h, n_w = x.shape
    _, n_k, n_oh, n_ow = dy.shape
    dw = np.zeros((n_k, n_c, rs[0], rs[1]), dtype=object)
    for k in range(n_k):
        for c in range(n_c):
            for r in range(rs[0]):
                for q in range(rs[1]):
                    for n in range(n_n):
                        for oh in range(n_oh):
                            for ow in range(n_ow):
                                h = oh * s[0] + r * d[0] - p[0]
                                v = ow * s[1] + q * d[1] - p[1]
                                if 0 <= h < n_h and 0 <= v < n_w:
                                    dw[k, c, r, q] += int(dy[n, k, oh, ow]) * int(x[n, c, h, v])
    return dw.astype(np.int64)


def naive_loss_b_is_zero(kk, r, q, h, v, n_r, n_s, n_oh, n_ow, s, p, d):
    """Loss matrix B element (row (k, r, q) of the rotated kernel, column (n, h, w)) is a
    zero-space element iff the unrotated tap (R-1-r, S-1-q) at input (h, w) comes from no dY
    pixel, i.e. no oh with oh*s + (R-1-r)*d - p == h (likewise w)."""
    def hit(pos, tap, out, s_, p_, d_):
        num = pos + p_ - tap * d_
        return num % s_ == 0 and 0 <= num // s_ < out
    return not (hit(h, n_r - 1 - r, n_oh, s[0], p[0], d[0])
                and hit(v, n_s - 1 - q, n_ow, s[1], p[1], d[1]))


# --- random cases --------------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    n: int
    c: int
    k: int
    hw: tuple
    rs: tuple
    s: tuple
    p: tuple
    d: tuple
    # What is passed to golden (an int when both axes agree and the case chose so).
    s_arg: object
    p_arg: object
    d_arg: object
    x: np.ndarray
    w: np.ndarray
    dy: np.ndarray

    @property
    def out(self):
        return (naive_out(self.hw[0], self.rs[0], self.s[0], self.p[0], self.d[0]),
                naive_out(self.hw[1], self.rs[1], self.s[1], self.p[1], self.d[1]))


def _values(rng, shape):
    v = rng.integers(-7, 8, size=shape)
    v[rng.random(shape) < 0.2] = 0
    return v


def make_case(n, c, k, hw, rs, s, p, d, seed=0, as_int=False):
    rng = np.random.default_rng(seed)
    s, p, d = (tuple(s), tuple(p), tuple(d))
    args = [v[0] if as_int and v[0] == v[1] else v for v in (s, p, d)]
    x = _values(rng, (n, c, *hw))
    w = _values(rng, (k, c, *rs))
    oh = naive_out(hw[0], rs[0], s[0], p[0], d[0])
    ow = naive_out(hw[1], rs[1], s[1], p[1], d[1])
    dy = _values(rng, (n, k, oh, ow))
    return Case(n, c, k, tuple(hw), tuple(rs), s, p, d, *args, x, w, dy)


def random_case(seed):
    rng = np.random.default_rng(seed)
    rs = tuple(int(v) for v in rng.integers(1, 5, size=2))
    d = tuple(int(v) for v in rng.integers(1, 4, size=2))
    s = tuple(int(v) for v in rng.integers(1, 5, size=2))
    # Padding from 0 to beyond d(R-1) (so the loss virtual map is sometimes cropped).
    p = tuple(int(rng.integers(0, d[i] * (rs[i] - 1) + 3)) for i in range(2))
    hw = tuple(max(1, d[i] * (rs[i] - 1) + 1 - 2 * p[i]) + int(rng.integers(0, 7))
               for i in range(2))
    if rng.random() < 0.3:          # square case passed as plain ints
        rs, d, s, p, hw = rs[:1] * 2, d[:1] * 2, s[:1] * 2, p[:1] * 2, hw[:1] * 2
    n, c, k = (int(v) for v in rng.integers(1, 4, size=3))
    n = min(n, 2)
    return make_case(n, c, k, hw, rs, s, p, d, seed=seed + 1000, as_int=rng.random() < 0.5)


SEEDS = range(100)

EDGE_CASES = {
    # name: (n, c, k, hw, rs, s, p, d)
    "1x1_stride2_downsample": (2, 2, 3, (7, 7), (1, 1), (2, 2), (0, 0), (1, 1)),
    "pad_beyond_dR": (1, 2, 2, (5, 4), (3, 3), (2, 2), (3, 4), (1, 1)),
    "far_edge_remainder": (1, 1, 2, (4, 6), (3, 3), (2, 2), (1, 1), (1, 1)),
    "stride_gt_kernel": (2, 1, 1, (9, 10), (2, 2), (4, 3), (0, 1), (1, 1)),
    "kernel_equals_padded_input": (1, 2, 2, (3, 4), (5, 4), (1, 1), (1, 0), (1, 1)),
    "single_pixel": (2, 3, 2, (1, 1), (1, 1), (1, 1), (0, 0), (1, 1)),
    "single_pixel_padded": (1, 2, 2, (1, 1), (3, 3), (2, 3), (1, 1), (1, 1)),
    "dilation_fills_input": (1, 1, 2, (7, 5), (3, 2), (2, 2), (0, 0), (3, 4)),
    "per_axis_all_differ": (2, 2, 3, (8, 6), (3, 2), (1, 3), (0, 2), (2, 1)),
    "resnet_conv1_mini": (1, 2, 2, (9, 9), (7, 7), (2, 2), (3, 3), (1, 1)),
    "alexnet_conv1_mini": (1, 1, 2, (14, 13), (5, 5), (4, 4), (2, 2), (1, 1)),
    "dilated_strided_padded": (1, 2, 2, (6, 7), (3, 3), (3, 2), (5, 1), (2, 3)),
}


def all_cases():
    return ([pytest.param(seed, id=f"seed{seed}") for seed in SEEDS]
            + [pytest.param(name, id=name) for name in EDGE_CASES])


def get_case(key):
    if isinstance(key, str):
        return make_case(*EDGE_CASES[key], seed=len(key))
    return random_case(key)


# --- the random cases themselves are what the brief asks for -------------------------------------

def test_random_cases_cover_the_parameter_space():
    cases = [random_case(seed) for seed in SEEDS]
    assert {v for c in cases for v in c.s} == {1, 2, 3, 4}
    assert {v for c in cases for v in c.d} == {1, 2, 3}
    assert any(c.p[i] > c.d[i] * (c.rs[i] - 1) for c in cases for i in range(2))
    assert any(c.p[i] == 0 for c in cases for i in range(2))
    assert any(c.hw[0] != c.hw[1] for c in cases)
    assert any(c.rs[0] != c.rs[1] for c in cases)
    assert any(c.s[0] != c.s[1] and c.p[0] != c.p[1] and c.d[0] != c.d[1] for c in cases)
    assert any(isinstance(c.s_arg, int) for c in cases)
    assert any(c.n > 1 for c in cases)
    # The far-edge remainder (extra zero rows of the loss virtual map) occurs.
    assert any((c.hw[0] + 2 * c.p[0] - c.d[0] * (c.rs[0] - 1) - 1) % c.s[0] for c in cases)
    assert all((c.x == 0).any() and (c.x != 0).any() for c in cases if c.x.size > 20)


# --- direct functions against the naive model ----------------------------------------------------

@pytest.mark.parametrize("key", all_cases())
def test_conv2d_matches_naive(key):
    c = get_case(key)
    y = golden.conv2d(c.x, c.w, c.s_arg, c.p_arg, c.d_arg)
    assert y.dtype == np.int64
    assert y.shape == (c.n, c.k, *c.out)
    assert np.array_equal(y, naive_conv2d(c.x, c.w, c.s, c.p, c.d))


@pytest.mark.parametrize("key", all_cases())
def test_input_grad_matches_naive(key):
    c = get_case(key)
    dx = golden.conv2d_input_grad(c.dy, c.w, c.hw, c.s_arg, c.p_arg, c.d_arg)
    assert dx.dtype == np.int64
    assert dx.shape == c.x.shape
    assert np.array_equal(dx, naive_input_grad(c.dy, c.w, c.hw, c.s, c.p, c.d))


@pytest.mark.parametrize("key", all_cases())
def test_weight_grad_matches_naive(key):
    c = get_case(key)
    dw = golden.conv2d_weight_grad(c.x, c.dy, c.rs, c.s_arg, c.p_arg, c.d_arg)
    assert dw.dtype == np.int64
    assert dw.shape == c.w.shape
    assert np.array_equal(dw, naive_weight_grad(c.x, c.dy, c.rs, c.s, c.p, c.d))


@pytest.mark.parametrize("key", all_cases())
def test_adjoint_identity(key):
    # <conv(x, w), dy> == <x, dX> == <w, dW>: the three phases are adjoint to one another.
    c = get_case(key)
    y = golden.conv2d(c.x, c.w, c.s_arg, c.p_arg, c.d_arg)
    dx = golden.conv2d_input_grad(c.dy, c.w, c.hw, c.s_arg, c.p_arg, c.d_arg)
    dw = golden.conv2d_weight_grad(c.x, c.dy, c.rs, c.s_arg, c.p_arg, c.d_arg)
    total = int((y * c.dy).sum())
    assert int((c.x * dx).sum()) == total
    assert int((c.w * dw).sum()) == total


def test_known_values():
    # 1 x 1 x 3 x 3 input, 2 x 2 kernel, stride 1: worked by hand.
    x = np.arange(1, 10).reshape(1, 1, 3, 3)
    w = np.array([[[[1, 2], [3, 4]]]])
    y = golden.conv2d(x, w)
    assert y.tolist() == [[[[37, 47], [67, 77]]]]
    dy = np.array([[[[1, 0], [0, 2]]]])
    assert golden.conv2d_input_grad(dy, w, 3).tolist() == [[[[1, 2, 0], [3, 6, 4], [0, 6, 8]]]]
    assert golden.conv2d_weight_grad(x, dy, 2).tolist() == [[[[1 + 2 * 5, 2 + 2 * 6],
                                                             [4 + 2 * 8, 5 + 2 * 9]]]]
    # Stride 2, padding 1: y[0,0] only sees x[0,0] * w[1,1].
    y2 = golden.conv2d(x, w, stride=2, padding=1)
    assert y2.tolist() == [[[[4, 2 * 3 + 3 * 4], [4 * 2 + 7 * 4, 5 * 1 + 6 * 2 + 8 * 3 + 9 * 4]]]]


def test_exact_beyond_float_precision():
    # Products and sums beyond 2**53 stay exact in int64.
    x = np.full((1, 2, 2, 2), 1_000_000_009, dtype=np.int64)
    w = np.full((1, 2, 2, 2), 1_000_000_007, dtype=np.int64)
    y = golden.conv2d(x, w)
    assert int(y[0, 0, 0, 0]) == 8 * 1_000_000_009 * 1_000_000_007
    c = golden.gemm(x.reshape(2, 4), w.reshape(4, 2))
    assert c.dtype == np.int64
    assert int(c[1, 1]) == 4 * 1_000_000_009 * 1_000_000_007


def test_inputs_of_narrow_dtypes_do_not_overflow():
    x = np.full((1, 1, 2, 2), 127, dtype=np.int8)
    w = np.full((1, 1, 2, 2), -128, dtype=np.int8)
    assert golden.conv2d(x, w).tolist() == [[[[-4 * 127 * 128]]]]
    dy = np.full((1, 1, 1, 1), 127, dtype=np.int8)
    assert golden.conv2d_input_grad(dy, w, 2).tolist() == [[[[-127 * 128] * 2] * 2]]
    assert golden.conv2d_weight_grad(x, dy, 2).tolist() == [[[[127 * 127] * 2] * 2]]


def test_gemm_matches_naive():
    rng = np.random.default_rng(7)
    a = rng.integers(-50, 51, size=(5, 7), dtype=np.int32)
    b = rng.integers(-50, 51, size=(7, 3), dtype=np.int16)
    c = golden.gemm(a, b)
    expect = [[sum(int(a[i, t]) * int(b[t, j]) for t in range(7)) for j in range(3)]
              for i in range(5)]
    assert c.dtype == np.int64
    assert c.tolist() == expect


@pytest.mark.parametrize("hw,rs,s,p,d,expect", [
    ((224, 224), (7, 7), 2, 3, 1, (112, 112)),
    ((224, 224), (11, 11), 4, 2, 1, (55, 55)),
    ((56, 56), (1, 1), 2, 0, 1, (28, 28)),
    ((299, 299), (3, 3), 2, 0, 1, (149, 149)),
    ((10, 7), (3, 2), (2, 3), (1, 0), (2, 1), (4, 2)),
    (5, 3, 1, 0, 2, (1, 1)),
])
def test_output_hw(hw, rs, s, p, d, expect):
    assert golden.output_hw(hw, rs, s, p, d) == expect


# --- lowerings -----------------------------------------------------------------------------------

@pytest.mark.parametrize("key", all_cases())
def test_lowerings_match_direct(key):
    c = get_case(key)
    args = (c.s_arg, c.p_arg, c.d_arg)
    fwd = golden.lower_forward(c.x, c.w, *args)
    loss = golden.lower_input_grad(c.dy, c.w, c.hw, *args)
    grad = golden.lower_weight_grad(c.x, c.dy, c.rs, *args)
    assert np.array_equal(fwd.result(golden.gemm(fwd.a, fwd.b)), golden.conv2d(c.x, c.w, *args))
    assert np.array_equal(loss.result(golden.gemm(loss.a, loss.b)),
                          golden.conv2d_input_grad(c.dy, c.w, c.hw, *args))
    assert np.array_equal(grad.result(golden.gemm(grad.a, grad.b)),
                          golden.conv2d_weight_grad(c.x, c.dy, c.rs, *args))
    assert fwd.out_shape == (c.n, c.k, *c.out)
    assert loss.out_shape == c.x.shape
    assert grad.out_shape == c.w.shape


@pytest.mark.parametrize("key", all_cases())
def test_lowering_shapes(key):
    c = get_case(key)
    args = (c.s_arg, c.p_arg, c.d_arg)
    taps = c.rs[0] * c.rs[1]
    oh, ow = c.out
    hd, wd = c.s[0] * (oh - 1) + 1, c.s[1] * (ow - 1) + 1
    fwd = golden.lower_forward(c.x, c.w, *args)
    assert fwd.a.shape == (c.n * oh * ow, c.c * taps)
    assert fwd.b.shape == (c.c * taps, c.k)
    loss = golden.lower_input_grad(c.dy, c.w, c.hw, *args)
    assert loss.a.shape == (c.c, c.k * taps)
    assert loss.b.shape == (c.k * taps, c.n * c.hw[0] * c.hw[1])
    grad = golden.lower_weight_grad(c.x, c.dy, c.rs, *args)
    assert grad.a.shape == (c.k, c.n * hd * wd)
    assert grad.b.shape == (c.n * hd * wd, c.c * taps)
    for low in (fwd, loss, grad):
        for m in (low.a, low.b, low.a_src, low.b_src):
            assert m.dtype == np.int64
        assert low.a_zero.shape == low.a.shape and low.a_zero.dtype == bool
        assert low.b_zero.shape == low.b.shape and low.b_zero.dtype == bool
    assert (fwd.phase, loss.phase, grad.phase) == ("forward", "loss", "gradient")
    assert (fwd.a_from, fwd.b_from) == ("x", "w")
    assert (loss.a_from, loss.b_from) == ("w", "dy")
    assert (grad.a_from, grad.b_from) == ("dy", "x")


@pytest.mark.parametrize("seed", range(6))
def test_lowering_elements_follow_the_definitions(seed):
    # Element by element, straight from the documented orientations.
    c = random_case(seed)
    s, p, d = c.s, c.p, c.d
    (n_r, n_s), (oh_n, ow_n), (n_h, n_w) = c.rs, c.out, c.hw
    args = (c.s_arg, c.p_arg, c.d_arg)

    def x_at(n, ch, h, v):
        return int(c.x[n, ch, h, v]) if 0 <= h < n_h and 0 <= v < n_w else 0

    fwd = golden.lower_forward(c.x, c.w, *args)
    for row in range(fwd.a.shape[0]):
        n, oh, ow = row // (oh_n * ow_n), row // ow_n % oh_n, row % ow_n
        for col in range(fwd.a.shape[1]):
            ch, r, q = col // (n_r * n_s), col // n_s % n_r, col % n_s
            assert fwd.a[row, col] == x_at(n, ch, oh * s[0] + r * d[0] - p[0],
                                           ow * s[1] + q * d[1] - p[1])
    for row in range(fwd.b.shape[0]):
        ch, r, q = row // (n_r * n_s), row // n_s % n_r, row % n_s
        assert fwd.b[row].tolist() == c.w[:, ch, r, q].tolist()

    loss = golden.lower_input_grad(c.dy, c.w, c.hw, *args)
    for ch in range(c.c):
        for col in range(loss.a.shape[1]):
            k, r, q = col // (n_r * n_s), col // n_s % n_r, col % n_s
            assert loss.a[ch, col] == c.w[k, ch, n_r - 1 - r, n_s - 1 - q]
    for row in range(loss.b.shape[0]):
        k, r, q = row // (n_r * n_s), row // n_s % n_r, row % n_s
        for col in range(loss.b.shape[1]):
            n, h, v = col // (n_h * n_w), col // n_w % n_h, col % n_w
            # Unrotated tap (R-1-r, S-1-q) at input (h, v) comes from dY pixel (oh, ow).
            num_h = h + p[0] - (n_r - 1 - r) * d[0]
            num_w = v + p[1] - (n_s - 1 - q) * d[1]
            expect = 0
            if num_h % s[0] == 0 and num_w % s[1] == 0:
                oh, ow = num_h // s[0], num_w // s[1]
                if 0 <= oh < oh_n and 0 <= ow < ow_n:
                    expect = int(c.dy[n, k, oh, ow])
            assert loss.b[row, col] == expect

    grad = golden.lower_weight_grad(c.x, c.dy, c.rs, *args)
    hd, wd = s[0] * (oh_n - 1) + 1, s[1] * (ow_n - 1) + 1
    for k in range(c.k):
        for col in range(grad.a.shape[1]):
            n, i, j = col // (hd * wd), col // wd % hd, col % wd
            expect = int(c.dy[n, k, i // s[0], j // s[1]]) if i % s[0] == 0 == j % s[1] else 0
            assert grad.a[k, col] == expect
    for row in range(grad.b.shape[0]):
        n, i, j = row // (hd * wd), row // wd % hd, row % wd
        for col in range(grad.b.shape[1]):
            ch, r, q = col // (n_r * n_s), col // n_s % n_r, col % n_s
            assert grad.b[row, col] == x_at(n, ch, i + r * d[0] - p[0], j + q * d[1] - p[1])


def test_loss_virtual_map_by_hand():
    # BP-im2col Fig. 1/2 setting: dY 2x2 (a b / c d), stride 2, R = S = 3, p = 1, H = W = 3.
    # Virtual map (5 x 5): zero border of d(R-1)-p = 1 and one zero between pixels:
    #   0 0 0 0 0 / 0 a 0 b 0 / 0 0 0 0 0 / 0 c 0 d 0 / 0 0 0 0 0
    a, b, c, d = 1, 2, 3, 4
    dy = np.array([[[[a, b], [c, d]]]])
    w = np.ones((1, 1, 3, 3), dtype=np.int64)
    low = golden.lower_input_grad(dy, w, (3, 3), stride=2, padding=1)
    vmap = np.array([[0, 0, 0, 0, 0], [0, a, 0, b, 0], [0, 0, 0, 0, 0],
                     [0, c, 0, d, 0], [0, 0, 0, 0, 0]])
    for h in range(3):
        for v in range(3):
            assert low.b[:, h * 3 + v].tolist() == vmap[h:h + 3, v:v + 3].ravel().tolist()
    # Column (0, 0) is the paper's red-box window: only one of nine elements is real.
    assert low.b_zero[:, 0].tolist() == [True] * 4 + [False] + [True] * 4
    assert low.b_zero_fraction == 1 - 16 / 81   # 4 pixels x 4 windows each, of 9 x 9


def test_loss_far_edge_rows_by_hand():
    # H = 4, R = 3, p = 1, s = 2: OH = 2 and (4 + 2 - 2 - 1) % 2 = 1 extra zero row at the
    # bottom: virtual map rows 0 a 0 b 0 0 (length H + d(R-1) = 6).
    dy = np.array([[[[5], [7]]]])            # OH = 2, OW = 1 (W = 1, S = 1, no padding in w)
    w = np.ones((1, 1, 3, 1), dtype=np.int64)
    low = golden.lower_input_grad(dy, w, (4, 1), stride=(2, 1), padding=(1, 0))
    vmap = [0, 5, 0, 7, 0, 0]
    assert low.b.tolist() == [[vmap[h + r] for h in range(4)] for r in range(3)]
    assert golden.conv2d_input_grad(dy, w, (4, 1), (2, 1), (1, 0)).ravel().tolist() == \
        [5, 5 + 7, 7, 7]


def test_loss_cropped_when_padding_exceeds_kernel_span():
    # p = 3 > d(R-1) = 2: the zero-inserted dY is cropped by 1 at the top instead of padded.
    # H = 2, R = 3, s = 2: OH = (2 + 6 - 2 - 1) // 2 + 1 = 3, zero-inserted dY = a 0 b 0 c,
    # virtual map = rows 1.. of it, length H + d(R-1) = 4: 0 b 0 c.
    dy = np.array([[[[1], [2], [3]]]])
    w = np.ones((1, 1, 3, 1), dtype=np.int64)
    low = golden.lower_input_grad(dy, w, (2, 1), stride=(2, 1), padding=(3, 0))
    vmap = [0, 2, 0, 3]
    assert low.b.tolist() == [[vmap[h + r] for h in range(2)] for r in range(3)]


def test_gradient_dilated_dy_by_hand():
    # dY 2x2 with stride 3 becomes the 4x4 dilated dY: a 0 0 b / 0 0 0 0 / 0 0 0 0 / c 0 0 d.
    x = np.ones((1, 1, 6, 6), dtype=np.int64)
    dy = np.array([[[[1, 2], [3, 4]]]])
    low = golden.lower_weight_grad(x, dy, (3, 3), stride=3)
    assert low.a.tolist() == [[1, 0, 0, 2] + [0] * 8 + [3, 0, 0, 4]]
    assert low.a_zero.tolist() == [[v == 0 for v in low.a[0]]]
    assert not low.b_zero.any()


# --- structural-zero masks -----------------------------------------------------------------------

def _nonzero_case(key):
    c = get_case(key)
    rng = np.random.default_rng(99)
    for t in (c.x, c.w, c.dy):
        t[t == 0] = rng.choice([-3, -1, 2, 5], size=int((t == 0).sum()))
    return c


def _lowerings(c):
    args = (c.s_arg, c.p_arg, c.d_arg)
    return (golden.lower_forward(c.x, c.w, *args),
            golden.lower_input_grad(c.dy, c.w, c.hw, *args),
            golden.lower_weight_grad(c.x, c.dy, c.rs, *args))


@pytest.mark.parametrize("key", all_cases())
def test_masks_are_exactly_the_structural_zeros(key):
    # With all-nonzero data an element is zero iff it is a zero-space element.
    for low in _lowerings(_nonzero_case(key)):
        assert np.array_equal(low.a == 0, low.a_zero)
        assert np.array_equal(low.b == 0, low.b_zero)
    # With data that has zeros of its own, masked elements are still zero, and the masks are
    # the same (they depend on the shapes only).
    c = get_case(key)
    for low, ref in zip(_lowerings(c), _lowerings(_nonzero_case(key))):
        assert not low.a[low.a_zero].any() and not low.b[low.b_zero].any()
        assert np.array_equal(low.a_zero, ref.a_zero)
        assert np.array_equal(low.b_zero, ref.b_zero)


@pytest.mark.parametrize("key", all_cases())
def test_source_maps_address_the_source_tensors(key):
    c = get_case(key)
    tensors = {"x": c.x, "w": c.w, "dy": c.dy}
    for low in _lowerings(c):
        for m, src, name in ((low.a, low.a_src, low.a_from), (low.b, low.b_src, low.b_from)):
            flat = tensors[name].ravel()
            assert src.min() >= -1 and src.max() < flat.size
            assert np.array_equal(m, np.where(src < 0, 0, flat[np.maximum(src, 0)]))


@pytest.mark.parametrize("key", all_cases())
def test_zero_counts_match_naive_count(key):
    c = get_case(key)
    (n_r, n_s), (oh_n, ow_n), (n_h, n_w) = c.rs, c.out, c.hw
    s, p, d = c.s, c.p, c.d
    fwd, loss, grad = _lowerings(c)
    # Loss B: count zero-space elements one by one from the scatter definition.
    per_kn = sum(naive_loss_b_is_zero(0, r, q, h, v, n_r, n_s, oh_n, ow_n, s, p, d)
                 for r in range(n_r) for q in range(n_s) for h in range(n_h) for v in range(n_w))
    assert int(loss.b_zero.sum()) == c.k * c.n * per_kn
    assert not loss.a_zero.any()
    # Gradient A: of the Hd x Wd dilated dY only OH x OW pixels are real.
    hd, wd = s[0] * (oh_n - 1) + 1, s[1] * (ow_n - 1) + 1
    assert int(grad.a_zero.sum()) == c.k * c.n * (hd * wd - oh_n * ow_n)
    # Gradient B and forward A: padding reads, counted by brute force.
    pad_reads = sum(not (0 <= i + r * d[0] - p[0] < n_h and 0 <= j + q * d[1] - p[1] < n_w)
                    for i in range(hd) for j in range(wd) for r in range(n_r) for q in range(n_s))
    assert int(grad.b_zero.sum()) == c.n * c.c * pad_reads
    fwd_pad = sum(not (0 <= oh * s[0] + r * d[0] - p[0] < n_h
                       and 0 <= ow * s[1] + q * d[1] - p[1] < n_w)
                  for oh in range(oh_n) for ow in range(ow_n)
                  for r in range(n_r) for q in range(n_s))
    assert int(fwd.a_zero.sum()) == c.n * c.c * fwd_pad
    assert not fwd.b_zero.any()
    # The closed form agrees with the masks.
    for low in (fwd, loss, grad):
        counts = golden.structural_zero_counts(low.phase, c.hw, c.rs, c.s_arg, c.p_arg, c.d_arg,
                                               in_channels=c.c, out_channels=c.k, batch=c.n)
        assert counts == {"a_size": low.a.size, "a_zeros": int(low.a_zero.sum()),
                          "b_size": low.b.size, "b_zeros": int(low.b_zero.sum())}
        both = (counts["a_zeros"] + counts["b_zeros"]) / (counts["a_size"] + counts["b_size"])
        assert low.zero_fraction == pytest.approx(both)
        assert low.a_zero_fraction == pytest.approx(counts["a_zeros"] / counts["a_size"])
        assert low.b_zero_fraction == pytest.approx(counts["b_zeros"] / counts["b_size"])


def test_stride2_zero_fraction_is_high():
    # ResNet-50 layer2.0.conv2 shape with one channel: 3x3, stride 2, pad 1, 56x56.
    loss = golden.lower_input_grad(np.ones((1, 1, 28, 28), dtype=np.int64),
                                   np.ones((1, 1, 3, 3), dtype=np.int64), 56, 2, 1)
    assert 0.74 < loss.b_zero_fraction < 0.76
    grad = golden.lower_weight_grad(np.ones((1, 1, 56, 56), dtype=np.int64),
                                    np.ones((1, 1, 28, 28), dtype=np.int64), 3, 2, 1)
    assert grad.a_zero_fraction == 1 - 28 * 28 / 55 ** 2


def test_zero_fraction_helper():
    assert golden.zero_fraction(np.array([True, False, False, False])) == 0.25
    assert golden.zero_fraction(np.ones((2, 3), bool), np.zeros(6, bool)) == 0.5
    assert golden.zero_fraction(np.zeros(0, bool)) == 0.0


def test_lowering_is_frozen_and_read_only():
    low = golden.lower_forward(np.ones((1, 1, 3, 3), np.int64), np.ones((1, 1, 2, 2), np.int64))
    with pytest.raises(dataclasses.FrozenInstanceError):
        low.a = None
    with pytest.raises(ValueError, match="read-only"):
        low.a[0, 0] = 5
    with pytest.raises(ValueError, match="c must have shape"):
        low.result(np.zeros((3, 1), np.int64))


# --- input validation ----------------------------------------------------------------------------

X = np.ones((1, 2, 5, 5), dtype=np.int64)
W = np.ones((3, 2, 3, 3), dtype=np.int64)
DY = np.ones((1, 3, 3, 3), dtype=np.int64)

ALL_FUNCTIONS = {
    "conv2d": lambda **kw: golden.conv2d(X, W, **kw),
    "input_grad": lambda **kw: golden.conv2d_input_grad(DY, W, (5, 5), **kw),
    "weight_grad": lambda **kw: golden.conv2d_weight_grad(X, DY, (3, 3), **kw),
    "lower_forward": lambda **kw: golden.lower_forward(X, W, **kw),
    "lower_input_grad": lambda **kw: golden.lower_input_grad(DY, W, (5, 5), **kw),
    "lower_weight_grad": lambda **kw: golden.lower_weight_grad(X, DY, (3, 3), **kw),
    "output_hw": lambda **kw: golden.output_hw((5, 5), (3, 3), **kw),
    "zero_counts": lambda **kw: golden.structural_zero_counts("loss", 5, 3, **kw),
}


@pytest.mark.parametrize("fn", ALL_FUNCTIONS)
@pytest.mark.parametrize("kwargs,exc,match", [
    ({"stride": 0}, ValueError, "stride"),
    ({"stride": (1, 0)}, ValueError, "stride"),
    ({"padding": -1}, ValueError, "padding"),
    ({"padding": (0, -2)}, ValueError, "padding"),
    ({"dilation": 0}, ValueError, "dilation"),
    ({"stride": (1, 2, 3)}, ValueError, "stride"),
    ({"stride": 1.5}, TypeError, "stride"),
    ({"padding": True}, TypeError, "padding"),
])
def test_bad_parameters(fn, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ALL_FUNCTIONS[fn](**kwargs)


def test_kernel_larger_than_padded_input():
    x = np.ones((1, 1, 4, 6), dtype=np.int64)
    w = np.ones((1, 1, 5, 3), dtype=np.int64)
    with pytest.raises(ValueError, match="kernel_hw"):
        golden.conv2d(x, w)
    with pytest.raises(ValueError, match="kernel_hw"):
        golden.lower_forward(x, w)
    with pytest.raises(ValueError, match="kernel_hw"):
        golden.output_hw((4, 6), (3, 3), dilation=(2, 1))
    with pytest.raises(ValueError, match="kernel_hw"):
        golden.conv2d_weight_grad(x, np.ones((1, 1, 1, 1), np.int64), (5, 3))
    # With enough padding the same kernel fits.
    assert golden.conv2d(x, w, padding=(1, 0)).shape == (1, 1, 2, 4)


def test_bad_shapes_and_types():
    with pytest.raises(ValueError, match="dy must have shape"):
        golden.conv2d_input_grad(np.ones((1, 3, 2, 3), np.int64), W, (5, 5))
    with pytest.raises(ValueError, match="dy must have shape"):
        golden.lower_weight_grad(X, np.ones((1, 3, 3, 4), np.int64), 3)
    with pytest.raises(ValueError, match="batch"):
        golden.conv2d_weight_grad(X, np.ones((2, 3, 3, 3), np.int64), 3)
    with pytest.raises(ValueError, match="input channels"):
        golden.conv2d(X, np.ones((3, 4, 3, 3), np.int64))
    with pytest.raises(ValueError, match="input_hw"):
        golden.conv2d_input_grad(DY, W, (0, 5))
    with pytest.raises(ValueError, match="dimensions"):
        golden.conv2d(X[0], W)
    with pytest.raises(TypeError, match="integer array"):
        golden.conv2d(X.astype(float), W)
    with pytest.raises(ValueError, match="do not chain"):
        golden.gemm(np.ones((2, 3), np.int64), np.ones((2, 3), np.int64))
    with pytest.raises(ValueError, match="phase"):
        golden.structural_zero_counts("backward", 5, 3)


# --- pooling: against naive loops written here ---------------------------------------------

def _naive_pool(x, kind, k, st, p):
    n, c, h, w = x.shape
    if kind == "global_avg":
        k, st, p = (h, w), (1, 1), (0, 0)
    oh, ow = (h + 2 * p[0] - k[0]) // st[0] + 1, (w + 2 * p[1] - k[1]) // st[1] + 1
    y = np.zeros((n, c, oh, ow), dtype=np.int64)
    for i in np.ndindex(n, c, oh, ow):
        vals, count = [], k[0] * k[1]
        for r in range(k[0]):
            for q in range(k[1]):
                hh, ww = i[2] * st[0] + r - p[0], i[3] * st[1] + q - p[1]
                if 0 <= hh < h and 0 <= ww < w:
                    vals.append(int(x[i[0], i[1], hh, ww]))
        if kind == "max":
            y[i] = max(vals)
        else:
            total = sum(vals)
            y[i] = (2 * total + count) // (2 * count)       # nearest, halves up
    return y


def _naive_pool_backward(dy, x, kind, k, st, p, tie):
    n, c, h, w = x.shape
    if kind == "global_avg":
        k, st, p = (h, w), (1, 1), (0, 0)
    acc = np.zeros(x.shape, dtype=np.int64)
    for i in np.ndindex(*dy.shape):
        taps = [(i[2] * st[0] + r - p[0], i[3] * st[1] + q - p[1])
                for r in range(k[0]) for q in range(k[1])]
        taps = [(a, b) for a, b in taps if 0 <= a < h and 0 <= b < w]
        if kind == "max":
            best = max(int(x[i[0], i[1], a, b]) for a, b in taps)
            winners = [(a, b) for a, b in taps if x[i[0], i[1], a, b] == best]
            for a, b in (winners[:1] if tie == "first" else winners):
                acc[i[0], i[1], a, b] += dy[i]
        else:
            for a, b in taps:
                acc[i[0], i[1], a, b] += dy[i]
    if kind != "max":
        count = k[0] * k[1]
        acc = (2 * acc + count) // (2 * count)
    return acc


@pytest.mark.parametrize("seed", range(40))
def test_pooling_against_naive_loops(seed):
    rng = np.random.default_rng(seed)
    kind = ("max", "avg", "global_avg")[seed % 3]
    k = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    st = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    p = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
    h, w = int(rng.integers(k[0], 10)), int(rng.integers(k[1], 10))
    x = rng.integers(-3, 4, (2, 3, h, w))               # few values: many ties
    y = golden.pool2d(x, kind, k, st, p)
    assert np.array_equal(y, _naive_pool(x, kind, k, st, p))
    dy = rng.integers(-50, 50, y.shape)
    for tie in ("first", "all"):
        got = golden.pool2d_backward(dy, x, kind, k, st, p, tie=tie)
        assert np.array_equal(got, _naive_pool_backward(dy, x, kind, k, st, p, tie))


def test_pooling_by_hand():
    x = np.array([[[[1, 3, 3, 0], [2, 0, 1, 1], [5, 5, 0, 2], [0, 1, 2, 2]]]])
    assert golden.pool2d(x, "max", 2).tolist() == [[[[3, 3], [5, 2]]]]
    # sums 6, 5, 11, 6 over 4: 1.5 -> 2, 1.25 -> 1, 2.75 -> 3, 1.5 -> 2
    assert golden.pool2d(x, "avg", 2).tolist() == [[[[2, 1], [3, 2]]]]
    assert golden.pool2d(x, "global_avg").tolist() == [[[[2]]]]           # 30 / 16
    one = np.ones((1, 1, 2, 2), dtype=int)
    first = golden.pool2d_backward(one, x, "max", 2)
    assert first.tolist() == [[[[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]]]]
    every = golden.pool2d_backward(one, x, "max", 2, tie="all")
    assert every.tolist() == [[[[0, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 1], [0, 0, 1, 1]]]]
    # overlapping 2x2 windows, stride 1: the centre of a 3x3 input is in all four
    assert golden.pool2d_backward(np.full((1, 1, 2, 2), 4), np.zeros((1, 1, 3, 3), int),
                                  "avg", 2, 1).tolist() == [[[[1, 2, 1], [2, 4, 2],
                                                              [1, 2, 1]]]]


@pytest.mark.parametrize("call,needle", [
    (lambda x: golden.pool2d(x, "min", 2), "kind must be one of max, avg, global_avg"),
    (lambda x: golden.pool2d(x, "max", 5), "the 5 x 5 window is larger than the 4 x 4 input"),
    (lambda x: golden.pool2d(x, "max", 2, 0), "stride must be >= 1"),
    (lambda x: golden.pool2d(x, "max", 3, 1, 2), "padding must be in [0, kernel // 2]"),
    (lambda x: golden.pool2d_backward(np.zeros((1, 1, 2, 2), int), x, "max", 2, tie="last"),
     "tie must be 'first' or 'all'"),
    (lambda x: golden.pool2d_backward(np.zeros((1, 1, 3, 3), int), x, "max", 2),
     "dy must have shape (1, 1, 2, 2)"),
])
def test_pooling_refusals(call, needle):
    with pytest.raises(ValueError) as e:
        call(np.zeros((1, 1, 4, 4), dtype=int))
    assert needle in str(e.value)


@pytest.mark.parametrize("n,c,h,w,k,r,s,stride,pad,dil,groups", [
    (2, 4, 7, 6, 6, 3, 3, 1, 1, 1, 2),          # grouped
    (1, 6, 9, 9, 6, 3, 3, 2, 1, 1, 6),          # depthwise, stride 2
    (2, 3, 8, 7, 6, 3, 2, 1, 2, 2, 3),          # depthwise x2 (two filters a channel), dilated
    (1, 8, 5, 5, 4, 1, 1, 1, 0, 1, 4),          # grouped 1x1
])
def test_grouped_phases_equal_pytorch(n, c, h, w, k, r, s, stride, pad, dil, groups):
    """conv2d(groups=...) forward and its autograd (float64: exact on these small integers)."""
    import torch
    rng = np.random.default_rng(c * 1000 + k * 10 + groups)
    x = rng.integers(-8, 8, (n, c, h, w))
    wt = rng.integers(-8, 8, (k, c // groups, r, s))
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wtt = torch.tensor(wt, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.conv2d(xt, wtt, stride=stride, padding=pad, dilation=dil,
                                   groups=groups)
    dy = rng.integers(-8, 8, tuple(y.shape))
    y.backward(torch.tensor(dy, dtype=torch.float64))
    kw = {"stride": stride, "padding": pad, "dilation": dil, "groups": groups}
    assert np.array_equal(golden.conv2d(x, wt, **kw), y.detach().numpy().astype(np.int64))
    assert np.array_equal(golden.conv2d_input_grad(dy, wt, (h, w), **kw),
                          xt.grad.numpy().astype(np.int64))
    assert np.array_equal(golden.conv2d_weight_grad(x, dy, (r, s), **kw),
                          wtt.grad.numpy().astype(np.int64))


def test_grouped_refusals():
    x, w = np.zeros((1, 6, 5, 5), int), np.zeros((4, 2, 3, 3), int)
    with pytest.raises(ValueError, match=r"w has 2 input channels but x has 6 \(6 / groups 2"):
        golden.conv2d(x, w, groups=2)
    with pytest.raises(ValueError, match="groups = 4 must be a positive integer that divides"):
        golden.conv2d(np.zeros((1, 8, 5, 5), int), np.zeros((6, 2, 3, 3), int), groups=4)
    with pytest.raises(ValueError, match="groups must be a positive integer, not 0"):
        golden.conv2d(x, w, groups=0)
