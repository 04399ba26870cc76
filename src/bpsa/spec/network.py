"""Whole networks as data: the layer lists of ``bpsa/workloads/networks/*.csv`` and the loader
that checks them.

A network file is CSV with ``#`` comment lines and the header
``layer,op,C,H,W,K,R,S,stride,pad,dilation`` and optionally ``groups``, one row a layer of one
image (the batch is the caller's). ``op`` is one of :data:`OPS`:

- ``conv``: X ``C x H x W``, ``K`` outputs, an ``R x S`` kernel, symmetric ``pad``, ``groups``
  (default 1; it divides ``C`` and ``K``: a depthwise layer has ``groups = C``);
- ``fc``: ``C`` inputs, ``K`` outputs, ``H = W = R = S = 1``;
- ``max_pool``, ``avg_pool``: ``R x S`` windows over ``C x H x W``, ``K`` empty (or ``C``);
- ``global_avg_pool``: ``R = H`` and ``S = W``.

Output sizes follow :func:`bpsa.spec.layer.out_size`. :func:`load_network` takes a name of
:func:`network_names` or a path; every error is a :exc:`NetworkError` naming the file, the
line and the field.
"""

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from bpsa.spec.layer import out_size

__all__ = ["COLUMNS", "OPS", "OPTIONAL", "NetLayer", "Network", "NetworkError", "load_network",
           "network_csv", "network_from_rows", "network_names"]

COLUMNS = ("layer", "op", "C", "H", "W", "K", "R", "S", "stride", "pad", "dilation")
#: The columns a file may leave out, and their value then.
OPTIONAL = {"groups": "1"}
OPS = ("conv", "fc", "max_pool", "avg_pool", "global_avg_pool")
POOLS = ("max_pool", "avg_pool", "global_avg_pool")

#: The smallest value of each integer field.
_LEAST = {"C": 1, "H": 1, "W": 1, "K": 1, "R": 1, "S": 1, "stride": 1, "pad": 0, "dilation": 1}


class NetworkError(ValueError):
    """A network that does not exist or a malformed network file."""


@dataclass(frozen=True)
class NetLayer:
    """One layer of a network file (``line``: its line in the file)."""
    name: str
    op: str
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: int
    pad: int
    dilation: int
    line: int
    groups: int = 1

    @property
    def out_hw(self):
        return tuple(out_size(size, kernel, self.stride, self.pad, self.dilation)
                     for size, kernel in ((self.h, self.r), (self.w, self.s)))

    @property
    def macs(self):
        """Multiply-accumulates of one image's forward pass (0 for pooling)."""
        if self.op in POOLS:
            return 0
        oh, ow = self.out_hw
        return self.k * oh * ow * self.c // self.groups * self.r * self.s


@dataclass(frozen=True)
class Network:
    name: str
    source: str
    layers: tuple

    def __iter__(self):
        return iter(self.layers)


def _packaged():
    return resources.files("bpsa.workloads").joinpath("networks")


def network_names():
    """Names of the networks shipped in the package."""
    return sorted(p.name[:-4] for p in _packaged().iterdir() if p.name.endswith(".csv"))


def load_network(name_or_path):
    """The :class:`Network` named ``name_or_path`` (:func:`network_names`), or read from that
    file; :exc:`NetworkError` for an unknown name or a malformed file."""
    text_path = str(name_or_path)
    if text_path in network_names():
        source = f"workloads/networks/{text_path}.csv"
        text = _packaged().joinpath(f"{text_path}.csv").read_text()
        name = text_path
    else:
        path = Path(text_path)
        if path.suffix != ".csv" and not path.exists():
            raise NetworkError(f"unknown network {text_path!r}: give one of "
                               f"{', '.join(network_names())} or a .csv file")
        try:
            text = path.read_text()
        except OSError as e:
            raise NetworkError(f"{text_path}: cannot read the network file ({e.strerror})") \
                from None
        source, name = text_path, path.stem
    return Network(name, source, tuple(_parse(source, text)))


def network_from_rows(name, source, rows):
    """A :class:`Network` of ``rows`` (dicts with the :data:`COLUMNS` as keys and maybe
    :data:`OPTIONAL`'s, values as in a file), checked as a file's rows are (``line``: the
    row's number from 1)."""
    seen = {}
    return Network(name, source, tuple(
        _layer(source, i, {**OPTIONAL, **{k: str(row[k]) for k in COLUMNS + tuple(OPTIONAL)
                                          if k in row}}, seen)
        for i, row in enumerate(rows, 1)))


def network_csv(network, comment=""):
    """``network`` as the text of a network file (``comment``: ``#`` lines first; the
    ``groups`` column when a layer is grouped)."""
    grouped = any(lay.groups != 1 for lay in network)
    lines = [f"# {line}" for line in comment.splitlines()] + [
        ",".join(COLUMNS + (("groups",) if grouped else ()))]
    for lay in network:
        k = "" if lay.op in POOLS else lay.k
        lines.append(f"{lay.name},{lay.op},{lay.c},{lay.h},{lay.w},{k},{lay.r},{lay.s},"
                     f"{lay.stride},{lay.pad},{lay.dilation}"
                     + (f",{lay.groups}" if grouped else ""))
    return "\n".join(lines) + "\n"


def _parse(source, text):
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise NetworkError(f"{source}: no header and no layers")
    head_line, head = lines[0]
    header = [x.strip() for x in next(csv.reader([head]))]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise NetworkError(f"{source}:{head_line}: the header lacks the column "
                           f"{missing[0]!r} (columns: {','.join(COLUMNS)})")
    if len(lines) == 1:
        raise NetworkError(f"{source}: no layers after the header")
    seen = {}
    for number, line in lines[1:]:
        cells = [x.strip() for x in next(csv.reader([line]))]
        if len(cells) != len(header):
            raise NetworkError(f"{source}:{number}: {len(cells)} fields, the header has "
                               f"{len(header)}")
        row = {**OPTIONAL, **dict(zip(header, cells))}
        yield _layer(source, number, row, seen)


def _layer(source, number, row, seen):
    def fail(field, message):
        raise NetworkError(f"{source}:{number}: field {field!r}: {message}")

    name, op = row["layer"], row["op"]
    if not name:
        fail("layer", "empty layer name")
    if name in seen:
        fail("layer", f"{name!r} again (first on line {seen[name]})")
    seen[name] = number
    if op not in OPS:
        fail("op", f"{op!r} is not one of {', '.join(OPS)}")
    if op in POOLS and row["K"] in ("", row["C"]):
        row = dict(row, K=row["C"])
    values = {}
    for field, least in _LEAST.items():
        text = row[field]
        try:
            value = int(text)
        except ValueError:
            fail(field, f"{text!r} is not an integer")
        if value < least:
            fail(field, f"{value} is below {least}")
        values[field] = value
    if op == "fc" and (values["H"], values["W"], values["R"], values["S"]) != (1, 1, 1, 1):
        fail("H", "an fc layer has H = W = R = S = 1 (C inputs, K outputs)")
    if op in POOLS and values["K"] != values["C"]:
        fail("K", f"a pooling layer keeps its {values['C']} channels, not {values['K']}")
    if op == "global_avg_pool" and (values["R"], values["S"]) != (values["H"], values["W"]):
        fail("R", f"global_avg_pool's window is the whole {values['H']} x {values['W']} input")
    try:
        groups = int(row["groups"] or "1")
    except ValueError:
        fail("groups", f"{row['groups']!r} is not an integer")
    if groups < 1 or (groups != 1 and op != "conv"):
        fail("groups", f"{groups}: a conv layer's groups are at least 1, another layer's 1")
    if values["C"] % groups or values["K"] % groups:
        fail("groups", f"{groups} does not divide C = {values['C']} and K = {values['K']}")
    layer = NetLayer(name, op, values["C"], values["H"], values["W"], values["K"],
                     values["R"], values["S"], values["stride"], values["pad"],
                     values["dilation"], number, groups)
    if min(layer.out_hw) < 1:
        fail("R", f"the {layer.r} x {layer.s} kernel (dilation {layer.dilation}) does not "
                  f"fit the {layer.h} x {layer.w} input padded by {layer.pad}")
    return layer
