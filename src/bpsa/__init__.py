"""backprop-systolic: a generator of systolic-array accelerators that train convolutional
networks. :func:`simulate` runs layers on a simulated accelerator from Python."""

__all__ = ["simulate"]


def simulate(config="small", **options):
    """An accelerator generated for ``config`` (a preset name, a TOML path or a
    :class:`bpsa.config.Config`), simulated under Verilator in this process: a
    :class:`bpsa.sim.native.SimulatedAccelerator` (``forward``, ``loss``, ``gradient``,
    ``fc_backward`` on numpy integer tensors, ``counters``). Use it in a ``with`` block::

        with bpsa.simulate("small") as acc:
            y = acc.forward(x, w, stride=2, padding=1)

    The first call for a configuration builds its Verilator model (a minute or more, cached
    in ``./sim_build`` or ``$BPSA_SIM_BUILD``) and says so on standard error, with a progress
    bar; ``progress=False`` builds in silence.
    """
    from bpsa.sim.native import SimulatedAccelerator
    return SimulatedAccelerator(config, **options)
