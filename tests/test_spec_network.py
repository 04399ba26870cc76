"""The network files and their loader: every shipped network loads; its layers agree with the
independent per-layer table ``workloads/conv_layers.csv`` and its MACs with the published
totals; a malformed file is refused with the file, the line and the field."""

import csv
from importlib import resources

import pytest

from bpsa.spec.network import NetworkError, load_network, network_names

#: Forward multiply-accumulates of one 224 x 224 image (torchvision's models, as published:
#: ResNet-50 4.09 G, ResNet-18 1.82 G, VGG-16 15.47 G, AlexNet 0.71 G, SqueezeNet 1.1 0.35 G).
PUBLISHED_GMACS = {"resnet50": 4.09, "resnet18": 1.82, "vgg16": 15.47, "alexnet": 0.71,
                   "squeezenet1_1": 0.35, "mobilenet_v2": 0.30, "resnext50_32x4d": 4.23}


def _macs(layer):
    """MACs counted here from the file's fields alone."""
    oh = (layer.h + 2 * layer.pad - layer.dilation * (layer.r - 1) - 1) // layer.stride + 1
    ow = (layer.w + 2 * layer.pad - layer.dilation * (layer.s - 1) - 1) // layer.stride + 1
    return layer.k * oh * ow * layer.c // layer.groups * layer.r * layer.s


def test_shipped_networks():
    names = network_names()
    assert set(PUBLISHED_GMACS) | {"digits"} <= set(names)
    for name in names:
        net = load_network(name)
        assert net.name == name and len(net.layers) >= 5
        ops = {lay.op for lay in net}
        assert "conv" in ops
        total = sum(_macs(lay) for lay in net if lay.op in ("conv", "fc"))
        assert total == sum(lay.macs for lay in net)
        if name in PUBLISHED_GMACS:
            assert total / 1e9 == pytest.approx(PUBLISHED_GMACS[name], rel=0.01), name


def test_layers_agree_with_the_per_layer_table():
    with resources.files("bpsa.workloads").joinpath("conv_layers.csv").open() as f:
        table = list(csv.DictReader(f))
    checked = 0
    for row in table:
        if row["network"] not in network_names():
            continue
        # the table names layers its own way (vgg16's conv1_2, squeezenet's fire2.squeeze);
        # the files by their PyTorch module paths: the table's shape is one of the file's
        shapes = {(lay.c, lay.h, lay.w, lay.k, lay.r, lay.s, lay.stride, lay.pad,
                   lay.dilation) for lay in load_network(row["network"]) if lay.op == "conv"}
        want = tuple(int(row[k]) for k in ("C", "H", "W", "K", "R", "S", "stride", "pad",
                                           "dilation"))
        assert want in shapes, row
        checked += 1
    assert checked >= 20


def test_consecutive_shapes_chain_in_a_plain_network():
    """VGG-16 has no branches: each layer's input is the layer before's output."""
    layers = load_network("vgg16").layers
    for a, b in zip(layers, layers[1:]):
        oh, ow = a.out_hw
        if b.op == "fc":
            assert b.c == a.k * oh * ow if a.op != "fc" else b.c == a.k
        else:
            assert (b.c, b.h, b.w) == (a.k, oh, ow), (a.name, b.name)


HEADER = "layer,op,C,H,W,K,R,S,stride,pad,dilation\n"


@pytest.mark.parametrize("body,needle", [
    ("", "no layers after the header"),
    ("a,conv,3,8,8,4,3,3,1,1,1\na,conv,4,8,8,4,3,3,1,1,1\n",
     ":3: field 'layer': 'a' again (first on line 2)"),
    ("a,deconv,3,8,8,4,3,3,1,1,1\n", ":2: field 'op': 'deconv' is not one of"),
    ("a,conv,3,8,eight,4,3,3,1,1,1\n", ":2: field 'W': 'eight' is not an integer"),
    ("a,conv,3,8,8,4,3,3,0,1,1\n", ":2: field 'stride': 0 is below 1"),
    ("a,conv,3,8,8,4,3,3,1,1\n", ":2: 10 fields, the header has 11"),
    ("a,conv,3,4,4,4,7,7,1,0,1\n", ":2: field 'R': the 7 x 7 kernel"),
    ("a,fc,10,2,1,4,1,1,1,0,1\n", ":2: field 'H': an fc layer has H = W = R = S = 1"),
    ("a,max_pool,8,8,8,4,2,2,2,0,1\n", ":2: field 'K': a pooling layer keeps its 8"),
    ("a,global_avg_pool,8,7,7,,3,3,1,0,1\n", ":2: field 'R': global_avg_pool's window"),
])
def test_malformed_files_name_file_line_and_field(tmp_path, body, needle):
    path = tmp_path / "net.csv"
    path.write_text(HEADER + body)
    with pytest.raises(NetworkError) as e:
        load_network(path)
    assert str(path) in str(e.value) and needle in str(e.value), str(e.value)


def test_comments_count_in_line_numbers(tmp_path):
    path = tmp_path / "net.csv"
    path.write_text("# title\n\n" + HEADER + "a,conv,3,8,8,4,3,3,1,1,1\nb,conv,x,8,8,4,3,3,1,1,1\n")
    with pytest.raises(NetworkError, match=r"net.csv:5: field 'C'"):
        load_network(path)


def test_missing_column_and_unknown_network(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("layer,op,C,H,W,K,R,S,stride,pad\nx,conv,1,1,1,1,1,1,1,0\n")
    with pytest.raises(NetworkError, match=r"bad.csv:1: the header lacks the column 'dilation'"):
        load_network(path)
    with pytest.raises(NetworkError, match=r"unknown network 'resnet1000': give one of .*resnet50"):
        load_network("resnet1000")
    with pytest.raises(NetworkError, match=r"cannot read the network file"):
        load_network(tmp_path / "missing.csv")


def test_groups_column(tmp_path):
    from bpsa.spec.network import network_csv
    path = tmp_path / "net.csv"
    path.write_text(HEADER.strip() + ",groups\n" + "dw,conv,8,8,8,8,3,3,1,1,1,8\n"
                    "pw,conv,8,8,8,16,1,1,1,0,1,\n")
    net = load_network(path)
    assert [lay.groups for lay in net] == [8, 1]
    assert net.layers[0].macs == 8 * 8 * 8 * 9 and net.layers[1].macs == 16 * 64 * 8
    again = tmp_path / "again.csv"
    again.write_text(network_csv(net))
    assert [(lay.name, lay.groups) for lay in load_network(again)] == [("dw", 8), ("pw", 1)]
    # a file without the column: every layer one group, and written back without it
    assert "groups" not in network_csv(load_network("resnet18")).splitlines()[0]
    for row, needle in (("a,conv,8,8,8,6,3,3,1,1,1,4", "4 does not divide C = 8 and K = 6"),
                        ("a,max_pool,8,8,8,,2,2,2,0,1,2", "another layer's 1"),
                        ("a,conv,8,8,8,8,3,3,1,1,1,two", "'two' is not an integer")):
        path.write_text(HEADER.strip() + ",groups\n" + row + "\n")
        with pytest.raises(NetworkError, match=f"field 'groups': .*{needle}"):
            load_network(path)
