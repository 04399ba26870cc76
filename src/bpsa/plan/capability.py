"""What a configuration can run: the one check of a convolution phase's front end or backward
mode, its requantization and its ReLU against the hardware a configuration generates.

The driver (:meth:`bpsa.host.driver.Driver.run`), the simulator's jobs
(:func:`bpsa.sim.accel_run.check_job`), the cycle model (:func:`bpsa.models.perf.layer_cycles`)
and through them the command line all call :func:`check`, so that each refuses the same
things with the same words. Whether a layer's *shape* fits the buffers is the tiling's
question (:mod:`bpsa.plan.tiling`), asked after this one.
"""

from bpsa.plan.tiling import MODE_NAMES, default_mode, mode_value

__all__ = ["MODE_LABELS", "MX_MODES", "PHASES", "check", "requant_applies", "requant_limit",
           "resolve_mode"]

#: The convolution phases (FC layers and pooling have their own checks).
PHASES = ("forward", "loss", "gradient")
#: The backward modes as the messages name them.
MODE_LABELS = {"zero_free": "zero-free", "bp_im2col": "BP-im2col"}


#: What each phase runs on in an OCP MX format (``docs/architecture/mx.md``): the front ends
#: built in MX so far.
MX_MODES = {"forward": ("channel_first",), "loss": ("channel_first",),
            "gradient": ("zero_free",)}


def requant_limit(config):
    """The largest requantization shift the descriptor's OUT_SHIFT field holds."""
    return (1 << (config.acc_width - 1).bit_length()) - 1


def _name(mode):
    return mode.replace("-", "_") if isinstance(mode, str) else mode


def requant_applies(phase, mode):
    """Whether the output of ``phase`` run in ``mode`` (:func:`resolve_mode`'s name) may leave
    requantized: the forward's and the zero-free loss's (their outputs feed a next layer; the
    channel-first loss is a set of forwards)."""
    return phase == "forward" or phase == "loss" and mode in ("zero_free", "channel_first")


def resolve_mode(config, phase, mode=None):
    """The front end or backward mode ``phase`` of a convolution runs in, by name, whether or
    not ``config`` generates it (:func:`check` asks that).

    ``mode``: for the forward, the front end, ``"feeder"`` (default; a backward mode's name,
    given for a whole training step, also means the feeder) or ``"channel_first"``; for the
    loss, ``"zero_free"``, ``"bp_im2col"`` (default :func:`bpsa.plan.tiling.default_mode`) or
    ``"channel_first"`` (each stride class as a stride-1 forward on the channel-first front
    end); for the gradient, ``"zero_free"`` or ``"bp_im2col"``. Returns ``"feeder"``,
    ``"channel_first"``, ``"zero_free"`` or ``"bp_im2col"``; :exc:`ValueError` for a phase or
    mode that is not one of these. In an MX format no ``mode`` means the phase's
    :data:`MX_MODES`."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
    mode = _name(mode)
    if mode is None and config.is_mx:
        return MX_MODES[phase][0]
    if phase == "forward":
        if mode in (None, *MODE_NAMES.values()):
            return "feeder"
        if mode not in ("feeder", "channel_first"):
            raise ValueError(f"the forward's front end (mode) must be 'feeder' or "
                             f"'channel_first', not {mode!r}")
        return mode
    if mode == "channel_first":
        if phase == "gradient":
            raise ValueError("the channel-first front end runs the forward and the loss's "
                             "stride classes; the gradient runs in mode zero_free or bp_im2col")
        return mode
    return MODE_NAMES[mode_value(mode or default_mode(config, phase))]


def check(config, phase, *, mode=None, requant=None, relu=False):
    """:func:`resolve_mode` of ``phase`` and ``mode``, when the accelerator generated for
    ``config`` can run it with ``requant`` (a shift, or ``None``; see
    :func:`requant_applies`) and ``relu`` (the forward's only); :exc:`ValueError` naming the
    reason when it cannot."""
    mode = resolve_mode(config, phase, mode)
    if config.is_float and requant not in (None, 0):
        raise ValueError(f"arithmetic {config.arithmetic!r}: requant rounds the fp32 sums to "
                         f"the operand format and takes no shift (give 0), not {requant!r}")
    if relu and phase != "forward":
        raise ValueError(f"relu applies to the forward, not to {phase}")
    if config.is_mx:
        if mode not in MX_MODES[phase]:
            raise ValueError(f"arithmetic {config.arithmetic!r} runs the {phase} in mode "
                             f"{MX_MODES[phase][0]!r} (the front end built in MX), not "
                             f"{mode!r}")
        if requant is not None:
            raise ValueError(f"arithmetic {config.arithmetic!r}: results leave as float32 "
                             f"(the driver quantizes the next layer's operands), so requant "
                             f"must be None, not {requant!r}")
    if mode == "channel_first" and not config.has_frontend("channel_first"):
        raise ValueError(f"configuration {config.name!r} does not generate the channel-first "
                         f"front end (its forward_frontends: {list(config.forward_frontends)})")
    if mode == "feeder" and not (config.has("os") and config.reserve_registers):
        raise ValueError(f"configuration {config.name!r} does not generate the forward engine "
                         f"(the 'os' dataflow with reserve registers) that the forward phase "
                         f"runs on")
    if mode in MODE_LABELS and not config.has_mode(mode):
        raise ValueError(f"configuration {config.name!r} does not generate the "
                         f"{MODE_LABELS[mode]} mode of the {phase} (its backward modes: "
                         f"{list(config.backward_modes)})")
    if requant is not None:
        if not requant_applies(phase, mode):
            where = f"the {phase}" + (f" in mode {mode!r}" if phase == "loss" else "")
            raise ValueError(f"requantization applies to the forward and the zero-free loss, "
                             f"not to {where}")
        limit = requant_limit(config)
        if isinstance(requant, bool) or not _is_int(requant) or not 0 <= requant <= limit:
            raise ValueError(f"requant (a shift) must be an integer in [0, {limit}], not "
                             f"{requant!r}")
    return mode


def _is_int(value):
    import numbers
    return isinstance(value, numbers.Integral)
