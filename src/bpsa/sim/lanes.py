"""Pack and unpack lane vectors: an ``ArrayLayout`` port is one flat bit vector in Verilog."""

__all__ = ["pack", "unpack"]


def pack(values, width):
    """Lane values (lane 0 in the least significant bits) as one unsigned integer."""
    mask = (1 << width) - 1
    word = 0
    for k, v in enumerate(values):
        word |= (int(v) & mask) << (k * width)
    return word


def unpack(word, width, count, signed=True):
    """The ``count`` lanes of ``word``, as signed or unsigned integers."""
    mask = (1 << width) - 1
    out = []
    for k in range(count):
        v = (int(word) >> (k * width)) & mask
        if signed and v >> (width - 1):
            v -= 1 << width
        out.append(v)
    return out
