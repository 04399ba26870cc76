"""The native (compiled) simulation transport: the host driver runs the whole accelerator under
Verilator through it, every phase bit-exact against the golden model, with and without random
memory back-pressure (which changes cycles, never results)."""

import asyncio

import numpy as np
import pytest

from bpsa.config import load_config
from bpsa.host.driver import Driver
from bpsa.models import golden
from bpsa.spec.numeric import wrap_array

pytestmark = pytest.mark.verilator

SMALL = load_config("small")


async def _step(t, rng):
    drv = Driver(t, SMALL, mem_size=1 << 21)
    await drv.open()
    x = rng.integers(-128, 128, (2, 3, 11, 9))
    w = rng.integers(-128, 128, (5, 3, 3, 3))
    args = ((2, 1), (1, 1), (1, 1))            # stride, padding, dilation
    y = await drv.forward(x, w, *args)
    cycles = [drv.counters["busy_cycles"]]
    assert np.array_equal(y, wrap_array(golden.conv2d(x, w, *args), 32))
    dy = rng.integers(-128, 128, y.shape)
    dx = await drv.loss(dy, w, (11, 9), *args)
    cycles.append(drv.counters["busy_cycles"])
    assert np.array_equal(dx, wrap_array(golden.conv2d_input_grad(dy, w, (11, 9), *args), 32))
    dw = await drv.gradient(x, dy, (3, 3), *args)
    cycles.append(drv.counters["busy_cycles"])
    assert np.array_equal(dw, wrap_array(golden.conv2d_weight_grad(x, dy, (3, 3), *args), 32))
    fx, fw, fdy = (rng.integers(-128, 128, s) for s in ((6, 21), (9, 21), (6, 9)))
    fdx, fdw = await drv.fc_backward(fx, fw, fdy)
    cycles.append(drv.counters["busy_cycles"])
    assert np.array_equal(fdx, fdy @ fw) and np.array_equal(fdw, fdy.T @ fx)
    return cycles


def test_driver_on_native_transport():
    from bpsa.verify.native import NativeTransport
    results = []
    for stall in (0.0, 0.4):
        with NativeTransport(SMALL, mem_bytes=1 << 21, seed=5, stall=stall) as t:
            results.append(asyncio.run(_step(t, np.random.default_rng(2))))
            assert t.cycles > sum(results[-1])
    plain, stalled = results
    assert all(s > p for p, s in zip(plain, stalled)), (plain, stalled)


def test_native_transport_checks():
    from bpsa.verify.native import NativeTransport
    with pytest.raises(ValueError, match="stall must be a probability"):
        NativeTransport(SMALL, stall=1.0)
    with NativeTransport(SMALL, mem_bytes=4096) as t:
        with pytest.raises(ValueError, match="outside 4096 bytes"):
            asyncio.run(t.write_mem(4000, bytes(200)))
        asyncio.run(t.write_mem(8, b"\x01\x02"))
        assert asyncio.run(t.read_mem(8, 3)) == b"\x01\x02\x00"


def test_simulate_entry_point():
    """``bpsa.simulate``: a layer in a few lines, numpy in and out, with the counters."""
    import bpsa
    rng = np.random.default_rng(7)
    x, w = rng.integers(-128, 128, (1, 4, 12, 12)), rng.integers(-128, 128, (6, 4, 3, 3))
    with bpsa.simulate("small") as acc:
        y = acc.forward(x, w, stride=2, padding=1)
        assert np.array_equal(y, wrap_array(golden.conv2d(x, w, 2, 1), 32))
        assert acc.counters["macs"] + acc.counters["gated_macs"] >= y.size * 4 * 9
        dw = acc.gradient(x, y % 7, (3, 3), stride=2, padding=1)
        assert np.array_equal(dw, golden.conv2d_weight_grad(x, y % 7, (3, 3), 2, 1))
