"""Amaranth enums built from the contract's Python enums (:mod:`bpsa.spec`), so a code is
written once and the hardware and the host read the same values."""

from amaranth.lib import enum

__all__ = ["hw_enum"]


def hw_enum(source, shape):
    """An :class:`amaranth.lib.enum.Enum` of ``shape`` with the members, name and docstring of
    the Python enum ``source``; :exc:`ValueError` when a value does not fit ``shape`` bits."""
    widest = max(member.value for member in source)
    if widest >= 1 << shape:
        raise ValueError(f"{source.__name__} needs {widest.bit_length()} bits, not {shape}")
    namespace = enum.EnumType.__prepare__(source.__name__, (enum.Enum,), shape=shape)
    for member in source:
        namespace[member.name] = member.value
    namespace["__doc__"] = source.__doc__
    namespace["__module__"] = source.__module__
    namespace["__qualname__"] = source.__qualname__
    return enum.EnumType(source.__name__, (enum.Enum,), namespace, shape=shape)
