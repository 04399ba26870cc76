"""Components whose constructor arguments are checked before the component exists."""

from amaranth.lib import wiring

__all__ = ["CheckedComponent"]


class CheckedComponent(wiring.Component):
    """A :class:`amaranth.lib.wiring.Component` whose constructor arguments go through
    :meth:`check_parameters` before the object is created, so a refused parameter raises with
    nothing left behind (no half-built component for Amaranth to report as never used)."""

    def __new__(cls, *args, **kwargs):
        cls.check_parameters(*args, **kwargs)
        return super().__new__(cls, *args, **kwargs)

    @classmethod
    def check_parameters(cls, *args, **kwargs):
        """Raise :exc:`TypeError` or :exc:`ValueError` naming a bad argument (the
        constructor's signature); the default accepts everything."""
