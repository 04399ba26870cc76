"""``bpsa fuzz``: random layers through the whole accelerator against the golden model
(:func:`bpsa.verify.fuzz.fuzz`), in an MX format through the channel-first and zero-free
gradient engines (:func:`bpsa.verify.fuzz.fuzz_engine`: the accelerator is not built in MX
yet); exit status 1 on any mismatch."""

import json
import sys

from bpsa.cli.args import UserError, add_config, config_of, int_at_least

__all__ = ["register", "run"]


def register(sub):
    """Add the ``fuzz`` sub-parser to ``sub``."""
    sp = sub.add_parser("fuzz", help="random layers of every phase (and layers the hardware "
                                      "must refuse) through the whole accelerator on the "
                                      "native transport, under random back-pressure, against "
                                      "the golden model; exit 1 on any mismatch")
    add_config(sp)
    sp.add_argument("--count", type=int, default=100, help="random layers (default: 100)")
    sp.add_argument("--seed", type=int_at_least(0), default=1,
                    help="seed of the random layers (default: 1)")
    sp.add_argument("--engines", action="store_true",
                    help="MX: the channel-first and zero-free gradient engines on their own "
                         "(each with its array) instead of the accelerator")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=run)


def run(args):
    """Run ``--count`` random layers and print the tally (or one JSON object)."""
    from bpsa.verify.fuzz import fuzz, fuzz_engine, no_phase
    config = config_of(args, mx=True)
    if args.count < 1:
        raise UserError(f"--count {args.count}: give a positive number of layers")
    progress = not (args.quiet or args.json)
    if args.engines and not config.is_mx:
        raise UserError("--engines applies to an MX arithmetic (the engines built in MX)")
    if args.engines:
        from bpsa.verify.fuzz import engine_phases
        try:
            engine_phases(config)
        except ValueError as e:
            raise UserError(f"--engines: {e}") from None
        res = fuzz_engine(config, args.count, seed=args.seed, progress=progress)
    else:
        why = no_phase(config)
        if config.is_mx:
            from bpsa.gateware.accelerator import check_mx
            try:
                check_mx(config)
            except ValueError as e:
                why = f"the accelerator in {config.arithmetic!r}: {e} (--engines fuzzes the " \
                      f"engines on their own)"
        if why:
            raise UserError(why)
        res = fuzz(config, args.count, seed=args.seed, progress=progress)
    res["config"], res["seed"] = config.name, args.seed
    if args.json:
        print(json.dumps(res, sort_keys=True))
    else:
        refused = ", ".join(f"{k} {v}" for k, v in sorted(res["refused"].items())) or "none"
        where = ("'s engines (" + ", ".join(
            f"{k} {v}" for k, v in sorted(res["phases"].items())) + ")"
            if res.get("target") == "engines" else "")
        print(f"{res['jobs']} random layers on {config.name}{where} (seed {args.seed}): "
              f"{res['ran']} ran, {sum(res['refused'].values())} refused as expected "
              f"({refused}), {len(res['mismatches'])} mismatches")
        print(f"{res['cycles']:,} cycles in {res['seconds']:.1f} s: "
              f"{res['layers_per_second']:.1f} layers/s, "
              f"{res['cycles_per_second']:,.0f} cycles/s")
        for m in res["mismatches"]:
            print(f"MISMATCH {m['error']}\n  job {json.dumps(m['job'], sort_keys=True)}")
    if res["mismatches"]:
        sys.exit(1)
