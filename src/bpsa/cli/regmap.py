"""``bpsa regmap``: the register map of a configuration as JSON, a C header or Markdown
(:func:`bpsa.spec.regmap_export.export`)."""

from pathlib import Path

from bpsa.cli.args import add_config, config_of, parent_dir

__all__ = ["register", "run"]


def register(sub):
    """Add the ``regmap`` sub-parser to ``sub``."""
    sp = sub.add_parser("regmap", help="the register map (offsets, fields, codes, this "
                                       "configuration's constants) as JSON, a C header or "
                                       "Markdown, from the one definition the hardware uses",
                        epilog="example: bpsa regmap --config paper16 --format c -o bpsa.h")
    add_config(sp)
    sp.add_argument("--format", choices=["json", "c", "md"], default="json",
                    help="json (tools), c (a header for firmware) or md (documents); "
                         "default json")
    sp.add_argument("-o", "--output", default=None, help="file to write (default: stdout)")
    sp.set_defaults(func=run)


def run(args):
    """Print the map, or write it to ``-o``."""
    from bpsa.spec.regmap_export import export
    text = export(config_of(args, mx=True), args.format)
    if args.output is None:
        print(text, end="")
        return
    out = Path(args.output)
    parent_dir(out)
    out.write_text(text)
    print(f"wrote {out}")
