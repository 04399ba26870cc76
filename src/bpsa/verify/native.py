"""The whole accelerator under Verilator at compiled speed: a C++ clock loop, AXI4 memory and
AXI4-Lite master (``native/accel_harness.cpp``) in a shared library, driven from Python through
:mod:`ctypes` at transaction granularity.

:class:`NativeTransport` has the host driver's four transport calls (``read32``, ``write32``,
``read_mem``, ``write_mem``) plus ``idle(cycles)``, so :class:`bpsa.host.driver.Driver` runs on
it unchanged. Memory reads and writes go straight into the C++ memory (no simulated cycles).
Random ready / valid stalls on the memory channels (``stall``: the probability that a channel
stalls in a cycle, from ``seed``) exercise back-pressure. Builds are cached under the runner's
build root by a hash of the Verilog, the configuration and the harness.
"""

import ctypes
import fcntl
import hashlib
import os
import subprocess
from importlib import resources
from pathlib import Path

from bpsa.verify.runner import sim_build_root, verilator_env

__all__ = ["NativeTransport", "SimulatedAccelerator", "build_native", "run_jobs"]

#: Memory behind the DMA port for :func:`run_jobs` (the cocotb testbench's too).
JOB_MEMORY = 1 << 20
#: Stall probability of a memory channel in a job with ``"pauses"``.
JOB_STALL = 0.35

_HARNESS = resources.files("bpsa.verify") / "native" / "accel_harness.cpp"


def build_native(config, *, build_root=None):
    """Build (once) the accelerator for ``config`` with the C++ harness; returns the path of
    the shared library."""
    from bpsa.platform.verilog import generate_verilog

    root = verilator_env()
    text = generate_verilog(config, "accelerator")
    harness = _HARNESS.read_text()
    key = hashlib.sha256((text + config.to_json() + harness).encode()).hexdigest()[:12]
    build_dir = Path(build_root or sim_build_root()) / f"native_accelerator_{config.name}_{key}"
    lib = build_dir / "libbpsa_accelerator.so"
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.exists():
            return lib
        (build_dir / "accelerator.v").write_text(text)
        (build_dir / "accel_harness.cpp").write_text(harness)
        cmd = [os.path.join(root, "bin", "verilator"), "--cc", "accelerator.v",
               "--top-module", "accelerator", "--exe", "accel_harness.cpp", "--build",
               "-j", str(os.cpu_count() or 1), "-Wno-fatal", "-Wno-lint", "-Wno-style",
               "-Mdir", "obj", "-CFLAGS", "-fPIC", "-LDFLAGS", "-shared",
               "-o", str(lib.resolve())]
        with open(build_dir / "build.log", "w") as log:
            done = subprocess.run(cmd, cwd=build_dir, stdout=log, stderr=subprocess.STDOUT)
        if done.returncode != 0 or not lib.exists():
            tail = (build_dir / "build.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"Verilator build of the native accelerator failed:\n{tail}")
    return lib


class NativeTransport:
    """A simulated accelerator for ``config`` in this process (see the module docstring).

    Parameters
    ----------
    mem_bytes : int
        Size of the memory behind the DMA port (byte addresses from 0).
    seed, stall : int, float
        The memory's random stalls: each channel stalls in a cycle with probability ``stall``.
    """

    def __init__(self, config, *, mem_bytes=1 << 22, seed=1, stall=0.0, build_root=None):
        if not 0.0 <= stall < 1.0:
            raise ValueError(f"stall must be a probability in [0, 1), not {stall!r}")
        self.config = config
        lib = self._lib = ctypes.CDLL(str(build_native(config, build_root=build_root)))
        vp, u64, u32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32
        buf = ctypes.c_char_p
        for name, res, args in (
                ("bpsa_new", vp, [u64, u64, ctypes.c_double]), ("bpsa_free", None, [vp]),
                ("bpsa_set_stall", None, [vp, ctypes.c_double]),
                ("bpsa_cycles", u64, [vp]),
                ("bpsa_read32", ctypes.c_int, [vp, u32, ctypes.POINTER(u32)]),
                ("bpsa_write32", ctypes.c_int, [vp, u32, u32]),
                ("bpsa_read_mem", ctypes.c_int, [vp, u64, u64, buf]),
                ("bpsa_write_mem", ctypes.c_int, [vp, u64, u64, buf]),
                ("bpsa_run", u64, [vp, u64, ctypes.c_int])):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self.mem_bytes = mem_bytes
        self._sim = lib.bpsa_new(mem_bytes, seed, stall)

    def close(self):
        if self._sim:
            self._lib.bpsa_free(self._sim)
            self._sim = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def set_stall(self, stall):
        """From now on, each memory channel stalls in a cycle with probability ``stall``."""
        if not 0.0 <= stall < 1.0:
            raise ValueError(f"stall must be a probability in [0, 1), not {stall!r}")
        self._lib.bpsa_set_stall(self._sim, stall)

    @property
    def cycles(self):
        """Clock cycles simulated so far."""
        return self._lib.bpsa_cycles(self._sim)

    def _check(self, resp, what):
        if resp != 0:
            raise RuntimeError(f"{what}: AXI4-Lite response {resp}" if resp > 0 else
                               f"{what}: no response in 10,000 cycles")

    async def read32(self, offset):
        value = ctypes.c_uint32()
        self._check(self._lib.bpsa_read32(self._sim, offset, ctypes.byref(value)),
                    f"read of register {offset:#x}")
        return value.value

    async def write32(self, offset, value):
        self._check(self._lib.bpsa_write32(self._sim, offset, value & 0xFFFF_FFFF),
                    f"write of register {offset:#x}")

    async def read_mem(self, addr, nbytes):
        out = ctypes.create_string_buffer(nbytes)
        if self._lib.bpsa_read_mem(self._sim, addr, nbytes, out) != 0:
            raise ValueError(f"memory read [{addr:#x}, +{nbytes}) outside {self.mem_bytes} bytes")
        return out.raw

    async def write_mem(self, addr, data):
        data = bytes(data)
        if self._lib.bpsa_write_mem(self._sim, addr, len(data), data) != 0:
            raise ValueError(f"memory write [{addr:#x}, +{len(data)}) outside "
                             f"{self.mem_bytes} bytes")

    async def idle(self, cycles):
        """Let the hardware run ``cycles`` cycles, or until its interrupt is raised."""
        self._lib.bpsa_run(self._sim, cycles, 1)


def run_jobs(config, jobs, *, seed=1):
    """Run testbench jobs (:func:`bpsa.verify.jobs.run_job`; ``"pauses"``: random memory
    stalls, ``"expect"``: the refusal the job must get) through the driver on the native
    transport; returns one summary a job, as the cocotb testbench does. Raises
    :exc:`AssertionError` when a result differs from the golden model or a refusal is wrong."""
    import asyncio

    from bpsa.host.driver import Driver
    from bpsa.verify import jobs as job_runner

    with NativeTransport(config, mem_bytes=JOB_MEMORY, seed=seed) as t:
        drv = Driver(t, config, mem_size=JOB_MEMORY)

        async def walk():
            await drv.open()
            return await job_runner.run_jobs(
                config, drv, jobs, lambda: t.cycles,
                before=lambda i, job: t.set_stall(JOB_STALL if job.get("pauses") else 0.0))

        return asyncio.run(walk())


class SimulatedAccelerator:
    """An accelerator generated for ``config``, simulated in this process on the native
    transport, with the host driver's layer calls as plain functions (numpy in, numpy out).
    ``counters`` holds the hardware's counters of the last call. Use it as a context manager
    (:func:`bpsa.simulate`)."""

    def __init__(self, config, *, mem_bytes=1 << 24, seed=1, stall=0.0):
        import asyncio

        from bpsa.config import load_config
        from bpsa.host.driver import Driver

        self.config = load_config(config)
        self.transport = NativeTransport(self.config, mem_bytes=mem_bytes, seed=seed,
                                         stall=stall)
        self.driver = Driver(self.transport, self.config, mem_size=mem_bytes)
        self._run = asyncio.run
        self._run(self.driver.open())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.transport.close()

    @property
    def counters(self):
        return dict(self.driver.counters)

    def forward(self, x, w, stride=1, padding=0, dilation=1):
        """Y (N x K x OH x OW) of ``x`` (N x C x H x W) by ``w`` (K x C x R x S)."""
        return self._run(self.driver.forward(x, w, stride, padding, dilation))

    def loss(self, dy, w, input_hw, stride=1, padding=0, dilation=1):
        """dX (N x C x H x W) of ``dy`` (N x K x OH x OW) and ``w``."""
        return self._run(self.driver.loss(dy, w, input_hw, stride, padding, dilation))

    def gradient(self, x, dy, kernel_hw, stride=1, padding=0, dilation=1):
        """dW (K x C x R x S) of ``x`` and ``dy``."""
        return self._run(self.driver.gradient(x, dy, kernel_hw, stride, padding, dilation))

    def fc_backward(self, x, w, dy):
        """``(dx, dw)`` of a fully connected layer ``y = x w^T``."""
        return self._run(self.driver.fc_backward(x, w, dy))
