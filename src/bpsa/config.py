"""Generator configuration: one frozen dataclass, validated, loaded from TOML, written as JSON.

Every generated Verilog file has its configuration written next to it as JSON
(:meth:`Config.to_json`), so host software reads the same truth as the hardware.
"""

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path

__all__ = ["ARITHMETICS", "BACKWARD_MODES", "Config", "ConfigError", "DATAFLOWS",
           "DRAIN_REGISTERS", "FLOAT_PARTIALS", "FLOAT_TOP_NAMES", "FLOAT_REDUCE_LATENCY", "FLOAT_WIDTHS", "FORWARD_FRONTENDS",
           "MAC_LATENCY", "MX_TOP_NAMES", "MX_WIDTHS", "POOL_KINDS", "PRESET_DIR", "context_gap", "load_config",
           "os_partials", "preset_names", "require_config"]

#: Dataflows the array can be generated with.
DATAFLOWS = ("os", "ws", "is", "interleaved")

#: Backward front ends (how the loss and the gradient run): the paper's BP-im2col generators
#: with the array input-stationary, and the zero-free walkers with it output-stationary.
BACKWARD_MODES = ("bp_im2col", "zero_free")

#: Pooling kinds the pooling unit can be generated with (global average pooling is ``avg``
#: with the whole plane as the window).
POOL_KINDS = ("max", "avg")

#: Forward front ends: the Fornt data feeder (CHW input, output-stationary array) and Zhou et
#: al.'s channel-first implicit im2col (HWC input, weight-stationary array).
FORWARD_FRONTENDS = ("feeder", "channel_first")

#: Arithmetic formats: two's-complement integers, or floating-point operands (``bf16``,
#: ``fp16``) with fp32 accumulators under the numeric contract of
#: ``docs/architecture/floating_point.md``.
ARITHMETICS = ("int", "bf16", "fp16", "mxint8", "mxfp8_e4m3")

#: The OCP MX block formats (``docs/architecture/mx.md``) and what they fix: operand bits (the
#: element codes), accumulator bits: a block's exact sum of at most 32 products (``mxint8``:
#: 21-bit two's complement; ``mxfp8_e4m3``: 42 bits and, above them, a NaN flag).
MX_WIDTHS = {"mxint8": (8, 21), "mxfp8_e4m3": (8, 43)}

#: The tops built in an MX format so far; every other top refuses an MX configuration.
MX_TOP_NAMES = ("pe", "array", "mx_accumulate", "psum_buffer", "channel_first", "cf_engine",
                "accelerator", "requantizer",
                "zf_gradient", "zg_engine")

#: The floating-point arithmetics and what they fix: operand bits, accumulator bits.
FLOAT_WIDTHS = {"bf16": (16, 32), "fp16": (16, 32)}
#: The buffer depths: a plan reads them as capacities only (the hardware addresses each bank
#: half from its own base, the program's offsets within it), so a configuration's programs
#: also run on hardware generated with the same fields and deeper buffers
#: (:meth:`Config.check_runs_on`).
CAPACITY_FIELDS = ("buf_a_depth", "buf_b_depth", "buf_p_depth", "buf_pool_depth",
                   "buf_cf_depth")

#: The tops (``bpsa.platform.tops``) built in floating point; every other top is integer only
#: so far and refuses a floating-point configuration.
FLOAT_TOP_NAMES = ("pe", "array", "conv_forward", "accelerator", "psum_buffer", "requantizer", "pool",
                   "zf_loss", "zf_gradient")

#: Partial sums an output-stationary floating-point PE keeps per output: its fp32 adder is
#: five stages deep and a partial is read a cycle before its slot enters it, so the product of
#: a context's slot ``k`` goes into partial ``k mod FLOAT_PARTIALS`` (every partial is read again
#: only after its last sum has left the adder); they drain side by side and the array adds
#: them (``bpsa.gateware.array.float_reduce``).
FLOAT_PARTIALS = 6

#: Cycles from an output's partials at the bottom of its column to their sum
#: (``bpsa.gateware.array.float_reduce.PartialReducer``: a register, then three levels of 5-stage
#: adders): a floating-point drain vector leaves ``FLOAT_REDUCE_LATENCY + cols`` cycles after
#: its shift.
FLOAT_REDUCE_LATENCY = 16

#: Cycles the PE's pipelined multiply-accumulate adds to the systolic timing, by arithmetic: a
#: slot's operands are registered in the fabric, then in the multiplier's input registers, its
#: product is registered (the DSP block's output register) and registered again next to the
#: adders, and the accumulator (or the partial sum) adds it; the result of a context end is in
#: the reserve register four cycles after the plain systolic timing. The array's latency
#: contract (``bpsa.gateware.array.systolic``) and the cycle model (``bpsa.models.perf``) are written
#: against this number.
#: Floating point: the operands registered, the multiplier's two stages (``FloatMultiplier``),
#: the adder's five (``FloatAdder``): the sum of a context's last slot is in the reserve
#: registers eight cycles after the plain systolic timing.
MAC_LATENCY = {"int": 4, "bf16": 8, "fp16": 8, "mxint8": 4, "mxfp8_e4m3": 4}

#: Registers between the bottom of a reserve chain and the array's drain outputs (the
#: deskew's first stage included): the chain's value, then the drained result (with the
#: interleave, the SGD step ``w - (G >> shift)`` computed between them). A drained vector
#: leaves ``cols + DRAIN_REGISTERS - 1`` cycles after its chain shift.
DRAIN_REGISTERS = 2

#: Presets shipped inside the package (``bpsa/presets/*.toml``), an
#: :mod:`importlib.resources` traversable.
PRESET_DIR = resources.files("bpsa") / "presets"


class ConfigError(ValueError):
    """An invalid generator parameter. The message names the field, the value and the allowed
    range."""


def _check_int(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer in [{lo}, {hi}], not {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be in [{lo}, {hi}], not {value!r}")


def _check_pow2(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi \
            or value & (value - 1):
        raise ConfigError(f"{name} must be a power of two in [{lo}, {hi}], not {value!r}")


def _check_bool(name, value):
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, not {value!r}")


def os_partials(arithmetic):
    """Partial sums an output-stationary PE keeps per output: 1 for integers,
    :data:`FLOAT_PARTIALS` for floating point (the reserve chain carries them side by
    side)."""
    return FLOAT_PARTIALS if arithmetic in FLOAT_WIDTHS else 1


def context_gap(rows, arithmetic):
    """The fewest cycles between two output-stationary context ends (``a_last`` to
    ``a_last``) in an array of ``rows`` rows: the wait for the last row and the drain's
    ``rows`` shifts; in floating point five more: the next context's first slots read their
    starting partials from the reserve registers up to five cycles before the swap
    (``bpsa.gateware.array.pe_float``: ``mac_latency - 3``), after the previous drain."""
    return 2 * rows + (MAC_LATENCY[arithmetic] - 3 if arithmetic in FLOAT_WIDTHS else 0)


@dataclass(frozen=True)
class Config:
    """Parameters of one generated accelerator.

    Array
        ``rows``, ``cols``: array size, 1..64 each.
    Arithmetic
        ``arithmetic``: number format, ``"int"``, ``"bf16"``, ``"fp16"`` or an MX format. Integers:
        ``operand_width`` 2..32 bits, ``operand_signed``; ``acc_width``: accumulator bits,
        from ``2 * operand_width`` to 64 (accumulation wraps modulo ``2**acc_width``, two's
        complement). Floating point (``docs/architecture/floating_point.md``): ``operand_width`` 16
        and
        ``acc_width`` 32 (fp32 accumulators); built so far for the ``os`` dataflow with
        reserve registers only, the PE and the array (the front ends are integer only).
        OCP MX (``"mxint8"``, ``"mxfp8_e4m3"``; ``docs/architecture/mx.md``): ``operand_width``
        8 and ``acc_width`` a block's exact sum (:data:`MX_WIDTHS`); built so far in the PE
        and the array (not the interleaved dataflow).
    Dataflows and PE features
        ``dataflows``: a non-empty subset of ``os``, ``ws``, ``is``, ``interleaved``.
        ``zero_gating``: skip (and count) MACs with a zero operand.
        ``reserve_registers``: accumulator swap plus shift chain; may only be disabled for an
        output-stationary-only array (the plain-PE baseline), because the other dataflows load
        their held operands through the chain.
    Data feeder (on-the-fly im2col)
        ``feeder_bus_width`` elements per SRAM word (power of two, 1..64), ``feeder_lane_regs``
        (M, 1..16), ``feeder_pattern_width`` (kernel-pattern bits, 1..64),
        ``feeder_fifo_depth`` (1..64).
    Backward front ends
        ``backward_modes``: which of ``bp_im2col`` (needs the ``is`` dataflow) and
        ``zero_free`` (needs ``os`` and the reserve registers) are generated; a descriptor's
        MODE picks one. Default (``None``): every mode the dataflows allow.
    Layer descriptors
        ``dim_width``: bits of every shape field in a layer descriptor (N, C, H, W, K, R, S,
        stride, padding, dilation), 4..16; shapes up to ``2**dim_width - 1``.
    Buffers
        ``buf_a_depth``, ``buf_b_depth``, ``buf_p_depth``: words, powers of two, 16..65536.
    External memory
        ``dma_data_width``: bits of the AXI4 master's data bus, 64, 128 or 256.
    Pooling unit (beside the array; :mod:`bpsa.gateware.frontends.pool.pool`)
        ``pool_kinds``: which of ``max`` and ``avg`` it computes (empty: no pooling unit);
        ``buf_pool_depth``: words of its operand buffer (``pool_lanes`` elements a word, two
        banks), a power of two, 16..65536; ``pool_lanes``: planes it computes at once, 1 or
        ``cols`` (a buffer word holds one element of each of ``pool_lanes`` planes, the
        host lays the pooled tensors out channel-blocked by them, and a P word holds one
        result of each).
    Forward front ends
        ``forward_frontends``: which of ``feeder`` and ``channel_first``
        (:mod:`bpsa.gateware.frontends.channel_first.channel_first`; needs the ``ws`` dataflow) are generated;
        the feeder always is (it also hosts the zero-free walkers), so the choice is
        ``["feeder"]`` or ``["feeder", "channel_first"]``. ``buf_cf_depth``: words of each of
        the channel-first front end's ``rows`` X banks (one pixel's channel a word, two
        halves), a power of two, 16..65536.
    """

    rows: int = 4
    cols: int = 4
    arithmetic: str = "int"
    operand_width: int = 8
    operand_signed: bool = True
    acc_width: int = 32
    dataflows: tuple = DATAFLOWS
    zero_gating: bool = True
    reserve_registers: bool = True
    feeder_bus_width: int = 8
    feeder_lane_regs: int = 3
    feeder_pattern_width: int = 16
    feeder_fifo_depth: int = 4
    backward_modes: tuple = None
    dim_width: int = 12
    buf_a_depth: int = 1024
    buf_b_depth: int = 1024
    buf_p_depth: int = 1024
    dma_data_width: int = 64
    pool_kinds: tuple = ()
    buf_pool_depth: int = 1024
    pool_lanes: int = 1
    forward_frontends: tuple = ("feeder",)
    buf_cf_depth: int = 1024
    name: str = field(default="custom", compare=False)

    def __post_init__(self):
        if isinstance(self.dataflows, (list, str)):
            dataflows = [self.dataflows] if isinstance(self.dataflows, str) else self.dataflows
            object.__setattr__(self, "dataflows", tuple(dataflows))
        if self.backward_modes is None and isinstance(self.dataflows, tuple):
            object.__setattr__(self, "backward_modes", tuple(
                mode for mode in BACKWARD_MODES if self._mode_needs(mode) is None))
        elif isinstance(self.backward_modes, (list, str)):
            modes = self.backward_modes
            object.__setattr__(self, "backward_modes",
                               tuple([modes] if isinstance(modes, str) else modes))
        if isinstance(self.pool_kinds, (list, str)):
            kinds = self.pool_kinds
            object.__setattr__(self, "pool_kinds",
                               tuple([kinds] if isinstance(kinds, str) else kinds))
        if isinstance(self.forward_frontends, (list, str)):
            fe = self.forward_frontends
            object.__setattr__(self, "forward_frontends",
                               tuple([fe] if isinstance(fe, str) else fe))
        self.validate()

    def _mode_needs(self, mode):
        """What backward mode ``mode`` lacks in this configuration (``None``: nothing)."""
        if mode == "bp_im2col" and "is" not in self.dataflows:
            return "the 'is' dataflow"
        if mode == "zero_free" and ("os" not in self.dataflows or not self.reserve_registers):
            return "the 'os' dataflow and reserve_registers"
        if mode == "zero_free" and self.feeder_bus_width < self.cols:
            return "feeder_bus_width >= cols (the loss reads dY words of cols channels)"
        return None

    def validate(self):
        """Raise :class:`ConfigError` for the first invalid field."""
        _check_int("rows", self.rows, 1, 64)
        _check_int("cols", self.cols, 1, 64)
        if self.arithmetic not in ARITHMETICS:
            raise ConfigError(f"arithmetic must be one of {list(ARITHMETICS)}, "
                              f"not {self.arithmetic!r}")
        _check_int("operand_width", self.operand_width, 2, 32)
        _check_bool("operand_signed", self.operand_signed)
        _check_int("acc_width", self.acc_width, 2 * self.operand_width, 64)
        if self.is_float:
            self._validate_float()
        if self.is_mx:
            self._validate_mx()
        if not self.dataflows or any(d not in DATAFLOWS for d in self.dataflows) \
                or len(set(self.dataflows)) != len(self.dataflows):
            raise ConfigError(f"dataflows must be a non-empty list of distinct values from "
                              f"{list(DATAFLOWS)}, not {list(self.dataflows)!r}")
        _check_bool("zero_gating", self.zero_gating)
        _check_bool("reserve_registers", self.reserve_registers)
        if not self.reserve_registers and self.dataflows != ("os",):
            raise ConfigError(f"reserve_registers may only be false when dataflows is ['os'] "
                              f"(other dataflows load held operands through the reserve chain), "
                              f"not with dataflows {list(self.dataflows)!r}")
        _check_pow2("feeder_bus_width", self.feeder_bus_width, 1, 64)
        _check_int("feeder_lane_regs", self.feeder_lane_regs, 1, 16)
        _check_int("feeder_pattern_width", self.feeder_pattern_width, 1, 64)
        _check_int("feeder_fifo_depth", self.feeder_fifo_depth, 1, 64)
        if not isinstance(self.backward_modes, tuple) \
                or any(mo not in BACKWARD_MODES for mo in self.backward_modes) \
                or len(set(self.backward_modes)) != len(self.backward_modes):
            raise ConfigError(f"backward_modes must be a list of distinct values from "
                              f"{list(BACKWARD_MODES)}, not {self.backward_modes!r}")
        for mode in self.backward_modes:
            need = self._mode_needs(mode)
            if need is not None:
                raise ConfigError(f"backward_modes {mode!r} needs {need}; with dataflows "
                                  f"{list(self.dataflows)!r} the allowed modes are "
                                  f"{[mo for mo in BACKWARD_MODES if self._mode_needs(mo) is None]}")
        _check_int("dim_width", self.dim_width, 4, 16)
        for name in ("buf_a_depth", "buf_b_depth", "buf_p_depth"):
            _check_pow2(name, getattr(self, name), 16, 65536)
        _check_pow2("dma_data_width", self.dma_data_width, 64, 256)
        if not isinstance(self.pool_kinds, tuple) \
                or any(k not in POOL_KINDS for k in self.pool_kinds) \
                or len(set(self.pool_kinds)) != len(self.pool_kinds):
            raise ConfigError(f"pool_kinds must be a list of distinct values from "
                              f"{list(POOL_KINDS)}, not {self.pool_kinds!r}")
        _check_pow2("buf_pool_depth", self.buf_pool_depth, 16, 65536)
        if isinstance(self.pool_lanes, bool) or self.pool_lanes not in (1, self.cols):
            raise ConfigError(f"pool_lanes must be 1 or cols ({self.cols}), not "
                              f"{self.pool_lanes!r}")
        if not isinstance(self.forward_frontends, tuple) \
                or any(f not in FORWARD_FRONTENDS for f in self.forward_frontends) \
                or len(set(self.forward_frontends)) != len(self.forward_frontends) \
                or "feeder" not in self.forward_frontends:
            raise ConfigError(f"forward_frontends must be a list of distinct values from "
                              f"{list(FORWARD_FRONTENDS)} holding 'feeder' (it also hosts the "
                              f"zero-free walkers), not {self.forward_frontends!r}")
        if "channel_first" in self.forward_frontends and "ws" not in self.dataflows:
            raise ConfigError(f"forward_frontends 'channel_first' needs the 'ws' dataflow, "
                              f"not dataflows {list(self.dataflows)!r}")
        _check_pow2("buf_cf_depth", self.buf_cf_depth, 16, 65536)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"name must be a non-empty string, not {self.name!r}")

    def _fixed_widths(self, widths, op_why, acc_why):
        """Refuse an ``operand_width`` or ``acc_width`` other than the arithmetic's
        ``widths``."""
        for name, want, why in zip(("operand_width", "acc_width"), widths, (op_why, acc_why)):
            if getattr(self, name) != want:
                raise ConfigError(f"{name} must be {want} with arithmetic {self.arithmetic!r} "
                                  f"({why}), not {getattr(self, name)!r}")

    def _validate_float(self):
        """The fields a floating-point arithmetic fixes or does not build yet."""
        a = self.arithmetic
        self._fixed_widths(FLOAT_WIDTHS[a], "the format's width", "fp32 accumulators")
        if self.dataflows != ("os",):
            raise ConfigError(f"dataflows must be ['os'] with arithmetic {a!r} (the ws, is "
                              f"and interleaved dataflows are not built in floating point "
                              f"yet), not {list(self.dataflows)!r}")
        if not self.reserve_registers:
            raise ConfigError(f"reserve_registers must be true with arithmetic {a!r} (the "
                              f"partial sums drain through the reserve chains)")

    def _validate_mx(self):
        """The fields an MX format fixes or does not build yet."""
        a = self.arithmetic
        self._fixed_widths(MX_WIDTHS[a], "8-bit element codes", "a block's exact sum")
        signed = a == "mxint8"
        if self.operand_signed != signed:
            codes = "two's-complement integers" if signed else "bit patterns"
            raise ConfigError(f"operand_signed must be {signed} with arithmetic {a!r} (the "
                              f"element codes are {codes})")

    # Derived values -----------------------------------------------------------------------

    @property
    def is_float(self):
        """Whether the arithmetic is a floating-point format."""
        return self.arithmetic in FLOAT_WIDTHS

    @property
    def is_mx(self):
        """Whether the arithmetic is an OCP MX block format (:data:`MX_WIDTHS`)."""
        return self.arithmetic in MX_WIDTHS

    def require_int(self, block):
        """Refuse to build ``block`` (a name) in a floating-point configuration: raises
        :class:`ConfigError` naming what is built in floating point so far."""
        if self.is_float:
            raise ConfigError(f"arithmetic {self.arithmetic!r} is not built in the {block} "
                              f"yet (integer only); floating point builds the tops "
                              f"{', '.join(FLOAT_TOP_NAMES)} (bpsa sim --gemm, bpsa sim --engine "
                              f"--phase forward)")
        self.require_not_mx(block)

    def require_not_mx(self, block):
        """Refuse ``block`` (a name) in an MX configuration: raises :class:`ConfigError`
        naming what is built in MX so far."""
        if self.is_mx:
            raise ConfigError(f"arithmetic {self.arithmetic!r} is not built in the {block} yet; "
                              f"MX builds the tops {', '.join(MX_TOP_NAMES)} so far (bpsa "
                              f"verilog, bpsa synth; docs/architecture/mx.md)")

    @property
    def result_width(self):
        """Bits of one stored result element (a lane of a P word, what a store moves):
        ``acc_width`` for the integer (the wrapping sum) and floating-point (the fp32 sum)
        arithmetics; 32 in MX, where a result is the fp32 sum of the blocks folded into it
        (``acc_width`` is a block's exact sum, what the array drains)."""
        return 32 if self.is_mx else self.acc_width

    @property
    def os_partials(self):
        """Partial sums an output-stationary PE keeps per output (:func:`os_partials`)."""
        return os_partials(self.arithmetic)

    @property
    def context_gap(self):
        """The fewest cycles between two output-stationary context ends
        (:func:`context_gap`)."""
        return context_gap(self.rows, self.arithmetic)


    def has(self, dataflow):
        """Whether ``dataflow`` (one of :data:`DATAFLOWS`) is generated."""
        if dataflow not in DATAFLOWS:
            raise ValueError(f"dataflow must be one of {list(DATAFLOWS)}, not {dataflow!r}")
        return dataflow in self.dataflows

    def has_mode(self, mode):
        """Whether backward mode ``mode`` (one of :data:`BACKWARD_MODES`) is generated."""
        if mode not in BACKWARD_MODES:
            raise ValueError(f"backward mode must be one of {list(BACKWARD_MODES)}, "
                             f"not {mode!r}")
        return mode in self.backward_modes

    def has_frontend(self, frontend):
        """Whether forward front end ``frontend`` (one of :data:`FORWARD_FRONTENDS`) is
        generated."""
        if frontend not in FORWARD_FRONTENDS:
            raise ValueError(f"forward front end must be one of {list(FORWARD_FRONTENDS)}, "
                             f"not {frontend!r}")
        return frontend in self.forward_frontends

    def has_pool(self, kind=None):
        """Whether the pooling unit is generated (``kind``: and computes ``kind``, one of
        :data:`POOL_KINDS`)."""
        if kind is None:
            return bool(self.pool_kinds)
        if kind not in POOL_KINDS:
            raise ValueError(f"pool kind must be one of {list(POOL_KINDS)}, not {kind!r}")
        return kind in self.pool_kinds

    @property
    def has_accumulator(self):
        """PEs hold an accumulator (output-stationary or interleaved)."""
        return self.has("os") or self.has("interleaved")

    @property
    def has_held_operand(self):
        """PEs hold a stationary operand (weight-, input-stationary or interleaved)."""
        return self.has("ws") or self.has("is") or self.has("interleaved")

    @property
    def mac_latency(self):
        """Cycles the pipelined PE adds to the systolic timing (:data:`MAC_LATENCY`)."""
        return MAC_LATENCY[self.arithmetic]

    @property
    def vertical_width(self):
        """Width of the PE's vertical channel: partial sums need the accumulator width."""
        return self.acc_width if self.has_held_operand else self.operand_width

    # Conversions --------------------------------------------------------------------------

    def to_dict(self):
        d = dataclasses.asdict(self)
        d["dataflows"] = list(self.dataflows)
        d["backward_modes"] = list(self.backward_modes)
        d["pool_kinds"] = list(self.pool_kinds)
        d["forward_frontends"] = list(self.forward_frontends)
        return d

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def replace(self, **changes):
        """A copy with ``changes``; ``backward_modes`` is derived again (the default) when the
        dataflows or the reserve registers change and it is not given, ``pool_lanes`` follows
        ``cols`` when it was ``cols``."""
        if "backward_modes" not in changes and \
                {"dataflows", "reserve_registers"} & set(changes):
            changes["backward_modes"] = None
        # like the backward modes, the channel-first front end goes with its dataflow
        if "forward_frontends" not in changes and "dataflows" in changes \
                and "ws" not in changes["dataflows"]:
            changes["forward_frontends"] = ("feeder",)
        # a pooling unit of cols lanes keeps one lane a column
        if "pool_lanes" not in changes and "cols" in changes and self.pool_lanes > 1:
            changes["pool_lanes"] = changes["cols"]
        return dataclasses.replace(self, **changes)

    def check_runs_on(self, hardware):
        """Raise :exc:`ConfigError` unless the programs planned for this configuration run on
        ``hardware`` (a :class:`Config`): every field equal but the buffer depths
        (:data:`CAPACITY_FIELDS`), which may be larger there (a plan then uses a prefix of
        each bank half). Tests plan for small buffers on one shared build this way."""
        if not isinstance(hardware, Config):
            raise TypeError(f"hardware must be a Config, not {hardware!r}")
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(hardware, f.name)
            if f.name == "name" or mine == theirs:
                continue
            if f.name in CAPACITY_FIELDS and mine < theirs:
                continue
            allowed = f"at least {mine}" if f.name in CAPACITY_FIELDS else repr(mine)
            raise ConfigError(f"configuration {self.name!r} does not run on hardware "
                              f"{hardware.name!r}: its {f.name} is {theirs!r}, not {allowed}")

    @classmethod
    def from_dict(cls, data, *, name=None):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown configuration field(s) {unknown}; "
                              f"allowed fields are {sorted(known)}")
        data = dict(data)
        if name is not None:
            data.setdefault("name", name)
        return cls(**data)

    @classmethod
    def from_toml(cls, path):
        path = Path(path)
        try:
            with path.open("rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path.name}: not valid TOML: {e}") from None
        return cls.from_dict(data, name=path.stem)


def require_config(value):
    """``value`` if it is a :class:`Config`, else :exc:`TypeError`."""
    if not isinstance(value, Config):
        raise TypeError(f"config must be a Config, not {value!r}")
    return value


def preset_names():
    """Names of the TOML presets in :data:`PRESET_DIR`."""
    return sorted(p.name[:-5] for p in PRESET_DIR.iterdir() if p.name.endswith(".toml"))


def load_config(spec=None):
    """Load a configuration from a preset name (``"small"``), a TOML file path, or ``None``
    (the defaults)."""
    if spec is None or isinstance(spec, Config):
        return spec or Config(name="default")
    path = Path(spec)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ConfigError(f"configuration file {spec!r} does not exist")
        return Config.from_toml(path)
    preset = PRESET_DIR / f"{spec}.toml"
    if not preset.is_file():
        raise ConfigError(f"unknown preset {spec!r}; presets are {preset_names()}, "
                          f"or give a path to a .toml file")
    with resources.as_file(preset) as path:
        return Config.from_toml(path)
