"""The whole-accelerator benchmark's layer selection and roofline (its RTL runs are the
native transport's, tested in tests/test_verify_native.py)."""

from bpsa.config import load_config
from bpsa.spec.layer import ConvLayer
from bpsa.tools.bench_accelerator import _roofline, accel_layers
from bpsa.tools.zero_report import DEFAULT_CSV


def test_layers_by_stride_and_phase():
    cfg = load_config("paper16")
    strided = accel_layers(cfg, DEFAULT_CSV, 32, 32, 1)
    every = accel_layers(cfg, DEFAULT_CSV, 32, 32, 1, all_strides=True, phases=("forward",))
    assert all(layer.stride_h >= 2 for layer, _ in strided)
    assert any(layer.stride_h == 1 for layer, _ in every)
    assert len(every) > len(strided)
    names = [n for _, ns in every for n in ns]
    assert "vgg16.conv1_2" in names and "squeezenet1_1.fire2.squeeze" in names


def test_roofline_of_fire2_squeeze():
    """SqueezeNet 1.1 fire2.squeeze on paper16: 3,097,600 MACs / 256 = 12,100 cycles; X
    64*55*55*2 + W 16*64*2 bytes in, Y 16*55*55*4 out = 582,848 bytes = 72,856 bus cycles."""
    layer = ConvLayer.conv(1, 64, 55, 55, 16, 1, 1)
    assert _roofline(load_config("paper16"), layer, "forward") == 72_856
