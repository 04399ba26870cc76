"""Hardware enums are the contract's enums: same names, values and widths that fit them."""

import pytest

from bpsa.gateware import accelerator
from bpsa.gateware.bus import axi_lite, dma, uart_bridge
from bpsa.gateware.frontends.bp_im2col import generators as bp_im2col
from bpsa.gateware.common.enums import hw_enum
from bpsa.spec import bridge, errors, regmap


@pytest.mark.parametrize("hw,spec", [
    (accelerator.AccelError, errors.AccelError), (dma.DmaError, errors.DmaError),
    (bp_im2col.BPError, errors.BPError), (axi_lite.Phase, regmap.Phase),
    (uart_bridge.Command, bridge.Command), (uart_bridge.Status, bridge.Status),
])
def test_hardware_enum_equals_spec(hw, spec):
    assert [(m.name, m.value) for m in hw] == [(m.name, m.value) for m in spec]
    assert hw.__name__ == spec.__name__
    assert max(m.value for m in spec) < 2 ** hw.as_shape().width


def test_hw_enum_refuses_a_shape_too_narrow():
    with pytest.raises(ValueError, match="AccelError needs 4 bits, not 2"):
        hw_enum(errors.AccelError, 2)
