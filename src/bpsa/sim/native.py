"""The whole accelerator under Verilator at compiled speed: a C++ clock loop, AXI4 memory and
AXI4-Lite master (``native/accel_harness.cpp``) in a shared library, driven from Python through
:mod:`ctypes` at transaction granularity.

:class:`NativeTransport` has the host driver's four transport calls (``read32``, ``write32``,
``read_mem``, ``write_mem``) plus ``idle(cycles)``, so :class:`bpsa.host.driver.Driver` runs on
it unchanged. Memory reads and writes go straight into the C++ memory (no simulated cycles).
Random ready / valid stalls on the memory channels (``stall``: the probability that a channel
stalls in a cycle, from ``seed``) exercise back-pressure. Builds are cached under the runner's
build root by a hash of the generator's sources (:func:`generator_digest`), the configuration,
the harness and the build options.
"""

import ctypes
import fcntl
import hashlib
import os
import re
import shutil
from importlib import resources
from pathlib import Path

from bpsa.spec.regmap import CONTROL_BITS, REGISTER_MAP
from bpsa.sim.runner import (announce, generator_digest, prune_builds, run_build,
                             sim_build_root, verilator_env)

__all__ = ["HangError", "NativeTransport", "SimulatedAccelerator", "TraceWindowError",
           "build_native", "check_trace_path", "default_build", "expected_cycles",
           "job_memory", "run_jobs", "run_with_driver"]

#: Memory behind the DMA port for small jobs (also the cocotb testbench's; :func:`job_memory`).
JOB_MEMORY = 1 << 20
#: Stall probability of a memory channel in a job with ``"pauses"``.
JOB_STALL = 0.35

_HARNESS = resources.files("bpsa.sim") / "native" / "accel_harness.cpp"
_SHIM = resources.files("bpsa.sim") / "native" / "shim"


#: C++ optimisation levels :func:`build_native` accepts.
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3")


def default_build(config):
    """``(opt, threads)`` for ``config``: the build we measured fastest over a run of a few
    hundred thousand cycles (docs/guides/simulation.md), ``-O2`` with one thread;
    ``$BPSA_NATIVE_OPT`` (one of :data:`OPT_LEVELS`) sets the level instead: ``make test``
    builds at ``-O1``, about 30 % less compiling for runs of seconds."""
    opt = os.environ.get("BPSA_NATIVE_OPT") or "-O2"
    if opt not in OPT_LEVELS:
        raise ValueError(f"BPSA_NATIVE_OPT must be one of {', '.join(OPT_LEVELS)}, not {opt!r}")
    return (opt, 1)


_PORT = re.compile(r"^\s*(input|output)\s+(\[[0-9]+:0\]\s*)?(\S+);", re.M)


def native_top(text):
    """A top module ``accelerator_native`` around the generated ``accelerator`` whose reset
    goes through a register (one cycle later). Verilator evaluates the logic that depends on a
    top-level input on every ``eval()`` (twice a cycle); with the reset registered, the next
    state of every register (an ``if (rst)`` in each) is evaluated once a cycle, at the clock
    edge, instead of twice."""
    body = text[text.index("\nmodule accelerator("):]
    body = body[:body.index("endmodule")]
    ports = _PORT.findall(body)
    if not any(name == "rst" for _, _, name in ports):
        raise RuntimeError("the generated accelerator has no 'rst' port")
    decls = "".join(f"  {d} {w or ''}{name};\n" for d, w, name in ports)
    conns = ",\n".join(f"    .{name}({'rst_q' if name == 'rst' else name})"
                        for _, _, name in ports)
    return (f"module accelerator_native({', '.join(name for _, _, name in ports)});\n{decls}"
            f"  reg rst_q = 1'b1;\n  always @(posedge clk) rst_q <= rst;\n"
            f"  accelerator core (\n{conns}\n  );\nendmodule\n")


def build_native(config, *, opt=None, threads=None, trace=False, build_root=None,
                 progress=True):
    """Build (once) the accelerator for ``config`` with the C++ harness; returns the path of
    the shared library. ``opt``: the C++ optimisation level of the model (``-O0`` .. ``-O3``),
    ``threads``: Verilator's model threads, ``trace``: with FST tracing; defaults from
    :func:`default_build` (``-O0`` for a traced build). A missing compiler or ``make`` is
    named instead of a build log. ``progress``: a build (not a cached one) says what it builds
    and shows its progress on standard error."""
    from bpsa.platform.verilog import generate_verilog

    d_opt, d_threads = default_build(config)
    # a traced run spends its time writing the waveform: build it quickly
    opt = opt if opt is not None else ("-O0" if trace else d_opt)
    threads = threads if threads is not None else d_threads
    if opt not in OPT_LEVELS:
        raise ValueError(f"opt must be one of {', '.join(OPT_LEVELS)}, not {opt!r}")
    if not isinstance(threads, int) or not 1 <= threads <= 64:
        raise ValueError(f"threads must be an integer in [1, 64], not {threads!r}")
    for tool in ("make", os.environ.get("CXX", "c++")):
        if shutil.which(tool) is None:
            raise RuntimeError(f"the native transport needs {tool!r} (a C++ compiler and "
                               f"make) on PATH to build the Verilator model")
    root = verilator_env(build_root)
    harness = _HARNESS.read_text()
    shims = "".join((_SHIM / name).read_text() for name in ("lz4.h", "zlib.h")) if trace else ""
    flavour = f"{opt}_t{threads}{'_fst' if trace else ''}"
    key = hashlib.sha256((generator_digest() + config.to_json() + harness + shims + flavour)
                         .encode()).hexdigest()[:12]
    build_dir = (Path(build_root or sim_build_root())
                 / f"native_accelerator_{config.name}_{flavour[1:]}_{key}")
    lib = build_dir / "libbpsa_accelerator.so"
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        prune_builds(build_dir)
        if lib.exists():
            return lib
        announce(f"building the Verilator model of configuration {config.name!r} "
                 f"({config.rows}x{config.cols}, {opt}{', FST trace' if trace else ''}) once, "
                 f"into {build_dir}: a minute or more; later runs reuse it", progress)
        text = generate_verilog(config, "accelerator")
        (build_dir / "accelerator.v").write_text(text + "\n" + native_top(text))
        (build_dir / "accel_harness.cpp").write_text(harness)
        cflags = "-fPIC"
        if trace:   # FST without the LZ4 and zlib libraries (see native/shim/)
            shim = build_dir / "shim"
            shim.mkdir(exist_ok=True)
            for name in ("lz4.h", "zlib.h"):
                (shim / name).write_text((_SHIM / name).read_text())
            cflags += f" -DBPSA_TRACE -I{shim.resolve()}"
        cmd = [os.path.join(root, "bin", "verilator"), "--cc", "accelerator.v",
               "--top-module", "accelerator_native",
               "--prefix", "Vaccelerator", "--exe", "accel_harness.cpp", "--build",
               "-j", str(os.cpu_count() or 1), "-Wno-fatal", "-Wno-lint", "-Wno-style",
               "--x-assign", "fast", "--x-initial", "fast",
               "-Mdir", "obj", "-CFLAGS", cflags, "-LDFLAGS", "-shared",
               "-o", str(lib.resolve())]
        if threads > 1:
            cmd += ["--threads", str(threads)]
        if trace:
            cmd += ["--trace-fst", "--trace-structs"]
        # the model's own optimisation level (verilator_env sets -O0 for the cocotb builds)
        flags = " ".join(f for f in os.environ.get("MAKEFLAGS", "").split()
                         if not f.startswith(("OPT_FAST=", "OPT_SLOW=", "OPT_GLOBAL=")))
        slow = "-O0"   # construction and settle code: run once, not worth optimising
        flags += f" OPT_FAST={opt} OPT_SLOW={slow} OPT_GLOBAL={opt}"
        if trace:   # verilated.mk links -llz4 -lz for FST; the shims need neither
            flags += " LDLIBS=-shared"
        env = dict(os.environ, MAKEFLAGS=flags)
        status = run_build(cmd, cwd=build_dir, env=env, log_path=build_dir / "build.log",
                           progress=progress)
        if status != 0 or not lib.exists():
            tail = (build_dir / "build.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"Verilator build of the native accelerator failed "
                               f"(log: {build_dir / 'build.log'}):\n{tail}")
    return lib


class HangError(RuntimeError):
    """The accelerator raised no interrupt within the watchdog's cycles after START."""


class TraceWindowError(ValueError):
    """The trace window lies outside the run."""


def expected_cycles(config, job):
    """A generous estimate of a job's cycles (progress bars, the hang watchdog):
    :func:`bpsa.host.driver.expected_cycles` of its layer."""
    from bpsa.host.driver import expected_cycles as layer_cycles
    from bpsa.models.golden import output_hw
    from bpsa.sim.jobs import job_layer
    lay = job_layer(job)
    oh, ow = output_hw((lay.height, lay.width), (lay.kernel_h, lay.kernel_w), lay.stride,
                       lay.pad, lay.dil)
    if job["phase"] in ("pool_forward", "pool_backward"):
        from bpsa.host.driver import expected_pool_cycles
        return expected_pool_cycles(job["phase"], lay.batch, lay.channels, lay.height,
                                    lay.width, lay.kernel_h, lay.kernel_w, max(oh, 1),
                                    max(ow, 1))
    return layer_cycles(config, job["phase"], lay, baseline=bool(job.get("baseline")))


def check_trace_path(path):
    """``path`` as a :class:`~pathlib.Path` when it names a writable ``.fst`` file (created
    empty); :exc:`ValueError` saying why not."""
    path = Path(path)
    if path.suffix != ".fst":
        raise ValueError(f"trace file {str(path)!r} must end in .fst")
    try:
        path.open("wb").close()
    except OSError as e:
        raise ValueError(f"cannot write trace file {str(path)!r}: {e.strerror}") from None
    return path


class NativeTransport:
    """A simulated accelerator for ``config`` in this process (see the module docstring).

    Parameters
    ----------
    mem_bytes : int
        Size of the memory behind the DMA port (byte addresses from 0).
    seed, stall : int, float
        The memory's random stalls: each channel stalls in a cycle with probability ``stall``.
    opt, threads : str, int
        The model's build (:func:`build_native`).
    progress : bool
        A first build of the model says so and shows its progress on standard error.
    trace, trace_window : path, (int, int)
        Write an FST waveform of cycles ``FIRST..LAST`` (default: all) to ``trace``.
    hardware : Config
        The configuration the model is generated for (default: ``config``): one with deeper
        buffers runs ``config``'s programs too (:meth:`bpsa.config.Config.check_runs_on`).
    watchdog : int or None
        Cycles: :meth:`idle` raises :exc:`HangError` with the last STATUS when the interrupt
        has not come that many cycles after the last START.
    on_cycles : callable or None
        Given the cycle count after every :meth:`idle`.
    """

    watchdog = None
    on_cycles = None

    def __init__(self, config, *, mem_bytes=1 << 22, seed=1, stall=0.0, opt=None,
                 threads=None, trace=None, trace_window=None, build_root=None, progress=True,
                 hardware=None):
        if not 0.0 <= stall < 1.0:
            raise ValueError(f"stall must be a probability in [0, 1), not {stall!r}")
        if trace_window is not None and trace is None:
            raise ValueError("a trace window needs a trace file")
        first, last = trace_window if trace_window is not None else (0, (1 << 64) - 1)
        if not 0 <= first <= last:
            raise ValueError(f"trace window {first}:{last} must have 0 <= FIRST <= LAST")
        if trace is not None:
            trace = check_trace_path(trace)
        self.config = config
        self.hardware = config if hardware is None else hardware
        config.check_runs_on(self.hardware)
        lib = self._lib = ctypes.CDLL(str(build_native(
            self.hardware, opt=opt, threads=threads, trace=trace is not None, build_root=build_root,
            progress=progress)))
        vp, u64, u32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32
        buf = ctypes.c_char_p
        for name, res, args in (
                ("bpsa_new", vp, [u64, u64, ctypes.c_double]), ("bpsa_free", None, [vp]),
                ("bpsa_set_stall", None, [vp, ctypes.c_double]),
                ("bpsa_cycles", u64, [vp]),
                ("bpsa_trace", ctypes.c_int, [vp, ctypes.c_char_p, u64, u64]),
                ("bpsa_read32", ctypes.c_int, [vp, u32, ctypes.POINTER(u32)]),
                ("bpsa_write32", ctypes.c_int, [vp, u32, u32]),
                ("bpsa_read_mem", ctypes.c_int, [vp, u64, u64, buf]),
                ("bpsa_write_mem", ctypes.c_int, [vp, u64, u64, buf]),
                ("bpsa_run", u64, [vp, u64, ctypes.c_int])):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self.mem_bytes = mem_bytes
        self.trace, self.trace_window = trace, (first, last)
        self._sim = lib.bpsa_new(mem_bytes, seed, stall)
        if trace is not None:
            lib.bpsa_trace(self._sim, str(trace).encode(), first, last)

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
        if offset == REGISTER_MAP["CONTROL"] and value >> CONTROL_BITS["START"] & 1:
            self._started = self.cycles
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
        ran = self._lib.bpsa_run(self._sim, cycles, 1)
        now = self.cycles
        if self.on_cycles is not None:
            self.on_cycles(now)
        started = getattr(self, "_started", None)
        if (ran == cycles and self.watchdog is not None and started is not None
                and now - started > self.watchdog):
            status = await self.read32(REGISTER_MAP["STATUS"])
            raise HangError(f"no interrupt {now - started:,} cycles after START (watchdog "
                            f"{self.watchdog:,}); STATUS {status:#x} at cycle {now:,}")


def job_memory(config, jobs):
    """Bytes of memory behind the DMA port for ``jobs``: :data:`JOB_MEMORY`, or a power of two
    with room for the largest job's tensors (zero-spaced baseline copies included) when
    that is more."""
    from bpsa.sim.jobs import job_layer
    need = 0
    for job in jobs:
        lay = job_layer(job)
        hw = (lay.height + lay.dil_h * lay.kernel_h) * (lay.width + lay.dil_w * lay.kernel_w)
        elements = lay.batch * (lay.channels + lay.out_channels) * hw * lay.stride_h \
            * lay.stride_w + lay.out_channels * lay.crs
        need = max(need, 4 * elements * (config.acc_width + 7) // 8)
    return max(JOB_MEMORY, 1 << (need - 1).bit_length())


def run_with_driver(config, body, *, mem_bytes=JOB_MEMORY, seed=1, **options):
    """``await body(driver, transport)`` on a fresh native transport of ``mem_bytes`` bytes
    (``options``: see :class:`NativeTransport`) with an opened :class:`bpsa.host.driver.Driver`;
    returns its result."""
    import asyncio

    from bpsa.host.driver import Driver
    with NativeTransport(config, mem_bytes=mem_bytes, seed=seed, **options) as t:
        drv = Driver(t, config, mem_size=mem_bytes, poll_interval=1024)

        async def walk():
            await drv.open()
            return await body(drv, t)

        return asyncio.run(walk())


def run_jobs(config, jobs, *, seed=1, progress=False, trace=None, trace_window=None,
             opt=None, threads=None, build_root=None, plans=None, hardware=None):
    """Run testbench jobs (:func:`bpsa.sim.jobs.run_job`; ``"pauses"``: random memory
    stalls, ``"expect"``: the refusal the job must get) through the driver on the native
    transport; returns one summary a job, as the cocotb testbench does. Raises
    :exc:`AssertionError` when a result differs from the golden model or a refusal is wrong,
    :exc:`HangError` when a job runs ``2 BUDGET_FACTOR`` times past :func:`expected_cycles` (a
    backstop: the driver gives up on a descriptor at ``BUDGET_FACTOR`` times). ``progress``: a
    progress bar of cycles against the expected total (and the build's, when the model is
    built); ``trace``, ``trace_window``, ``opt``,
    ``threads``, ``build_root``, ``hardware``: see :class:`NativeTransport`; ``plans``: a job's plan each,
    handed on to the driver (:func:`bpsa.sim.jobs.run_jobs`)."""
    from tqdm import tqdm

    from bpsa.host.driver import BUDGET_FACTOR

    from bpsa.sim import jobs as job_runner

    expected = [expected_cycles(config, job) for job in jobs]
    with tqdm(total=sum(expected), unit="cycle", unit_scale=True, disable=not progress,
              leave=False, dynamic_ncols=True) as bar:

        async def body(drv, t):
            def before(i, job):
                t.set_stall(JOB_STALL if job.get("pauses") else 0.0)
                t.watchdog = 2 * BUDGET_FACTOR * expected[i]
                bar.set_description(f"{job['phase']} {i + 1}/{len(jobs)}")

            def log(i, summary):
                bar.total = bar.total - expected[i] + summary["sim_cycles"]
                bar.refresh()

            if progress:
                def on_cycles(now):
                    bar.update(now - bar.n)
                t.on_cycles = on_cycles
            out = await job_runner.run_jobs(config, drv, jobs, lambda: t.cycles,
                                            before=before, log=log, plans=plans)
            if trace_window is not None and trace_window[0] > t.cycles:
                raise TraceWindowError(f"trace window {trace_window[0]}:{trace_window[1]} starts "
                                 f"after the run's last cycle ({t.cycles:,})")
            return out

        return run_with_driver(config, body, mem_bytes=job_memory(config, jobs), seed=seed,
                               opt=opt, threads=threads, trace=trace,
                               trace_window=trace_window, build_root=build_root,
                               progress=progress, hardware=hardware)


class SimulatedAccelerator:
    """An accelerator generated for ``config``, simulated in this process on the native
    transport, with the host driver's layer calls as plain functions (numpy in, numpy out).
    ``counters`` holds the hardware's counters of the last call; ``options`` go to
    :class:`NativeTransport` (``trace``, ``trace_window``, ``opt``, ``threads``; ``progress``:
    the first use of a configuration builds its Verilator model for a minute or more and says
    so on standard error, unless false). Use it as a context manager (:func:`bpsa.simulate`).
    ``pool`` and ``pool_backward`` need a
    configuration with the pooling unit (``pool_kinds``). An MX configuration: float32 tensors
    in, quantized by the driver per phase with ``mx_scale_rule`` (``"floor"`` or ``"ceil"``,
    :func:`bpsa.models.mx.quantize`), float32 sums out."""

    def __init__(self, config, *, mem_bytes=1 << 24, seed=1, stall=0.0, mx_scale_rule="floor",
                 **options):
        import asyncio

        from bpsa.config import load_config
        from bpsa.host.driver import Driver

        self.config = load_config(config)
        self.transport = NativeTransport(self.config, mem_bytes=mem_bytes, seed=seed,
                                         stall=stall, **options)
        self.driver = Driver(self.transport, self.config, mem_size=mem_bytes)
        self.driver.mx_scale_rule = mx_scale_rule
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

    def _floats(self, out, requant):
        """A floating-point configuration's result as float32 values: fp32 sums, or (with
        ``requant``) the operand format's values, exact in float32; integers as they are."""
        if not self.config.is_float:
            return out
        import numpy as np

        from bpsa.models import floating
        if requant is not None:
            return floating.to_float32(np.asarray(out), self.config.arithmetic)
        return np.asarray(out, dtype=np.int64).astype(np.uint32).view(np.float32)

    def forward(self, x, w, stride=1, padding=0, dilation=1, requant=None, relu=False):
        """Y (N x K x OH x OW) of ``x`` (N x C x H x W) by ``w`` (K x C x R x S); with
        ``requant`` (a shift) as operands, :func:`bpsa.models.golden.requantize` of Y;
        ``relu``: ``max(0, Y)``. Floating point: float32 (or ml_dtypes) tensors in, rounded
        to the operand format by the contract; float32 out (with ``requant=0``, values of the
        operand format)."""
        return self._floats(self._run(self.driver.forward(x, w, stride, padding, dilation,
                                                          requant, relu)), requant)

    def pool(self, x, kind, kernel=None, stride=None, padding=0, relu=False):
        """Pooling forward (``max``, ``avg``, ``global_avg``) on the pooling unit (floating
        point: float32 out, values of the operand format)."""
        return self._floats(self._run(self.driver.pool(x, kind, kernel, stride, padding,
                                                       relu)), 0)

    def pool_backward(self, dy, x, kind, kernel=None, stride=None, padding=0, relu=False,
                      requant=None):
        """dX of :meth:`pool` (``relu``: masked where ``x`` is not positive; floating point:
        float32)."""
        return self._floats(self._run(self.driver.pool_backward(dy, x, kind, kernel, stride,
                                                                padding, relu, requant)),
                            requant)

    def loss(self, dy, w, input_hw, stride=1, padding=0, dilation=1, mode=None, requant=None):
        """dX (N x C x H x W) of ``dy`` (N x K x OH x OW) and ``w`` (``requant``: as for
        :meth:`forward`, zero-free mode; floating point as for :meth:`forward`)."""
        return self._floats(self._run(self.driver.loss(dy, w, input_hw, stride, padding,
                                                       dilation, mode, requant)), requant)

    def gradient(self, x, dy, kernel_hw, stride=1, padding=0, dilation=1, mode=None):
        """dW (K x C x R x S) of ``x`` and ``dy`` (floating point: float32)."""
        return self._floats(self._run(self.driver.gradient(x, dy, kernel_hw, stride, padding,
                                                           dilation, mode)), None)

    def fc_backward(self, x, w, dy):
        """``(dx, dw)`` of a fully connected layer ``y = x w^T``."""
        return self._run(self.driver.fc_backward(x, w, dy))
