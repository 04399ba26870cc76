"""Writes the whole-network workload files ``src/bpsa/workloads/networks/*.csv``.

The layer lists follow torchvision's definitions (``alexnet``, ``vgg16``, ``resnet18``,
``resnet50`` v1.5, ``squeezenet1_1``) at ImageNet resolution, 224 x 224, and the small digits
CNN of the training example (8 x 8 images of ``sklearn.datasets.load_digits``). Shapes are
propagated layer by layer here, once; the files are the data the tools read
(:mod:`bpsa.spec.network`), and ``tests/test_spec_network.py`` checks them against the
independent per-layer table ``workloads/conv_layers.csv``.

Not layers of these files: ReLU, batch normalization (folded into the convolutions for
training on the accelerator), dropout, residual additions and concatenations (host or
store-path operations that move no MACs through the array). Run ``python -m
bpsa.tools.gen_networks`` to rewrite the files.
"""

from pathlib import Path

HEADER = "layer,op,C,H,W,K,R,S,stride,pad,dilation"
OUT_DIR = Path(__file__).resolve().parent.parent / "workloads" / "networks"


class _Net:
    """A running shape (channels, height, width) and the rows written so far."""

    def __init__(self, c, h, w):
        self.c, self.h, self.w = c, h, w
        self.rows = []

    def conv(self, name, k, r, stride=1, pad=0, c=None, hw=None, keep=False):
        """A convolution of ``k`` outputs, ``r x r`` kernel, from the running shape (or
        ``c``, ``hw`` given); ``keep``: the running shape stays (a branch)."""
        c = self.c if c is None else c
        h, w = (self.h, self.w) if hw is None else hw
        self.rows.append(f"{name},conv,{c},{h},{w},{k},{r},{r},{stride},{pad},1")
        oh, ow = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - r) // stride + 1
        if not keep:
            self.c, self.h, self.w = k, oh, ow
        return k, oh, ow

    def pool(self, name, kind, r, stride, pad=0):
        if kind == "global_avg_pool":
            r = self.h
        self.rows.append(f"{name},{kind},{self.c},{self.h},{self.w},,{r},{r},{stride},{pad},1")
        self.h = (self.h + 2 * pad - r) // stride + 1
        self.w = (self.w + 2 * pad - r) // stride + 1

    def fc(self, name, k):
        inputs = self.c * self.h * self.w
        self.rows.append(f"{name},fc,{inputs},1,1,{k},1,1,1,0,1")
        self.c, self.h, self.w = k, 1, 1


def alexnet():
    n = _Net(3, 224, 224)
    n.conv("features.0", 64, 11, 4, 2)
    n.pool("features.2", "max_pool", 3, 2)
    n.conv("features.3", 192, 5, 1, 2)
    n.pool("features.5", "max_pool", 3, 2)
    n.conv("features.6", 384, 3, 1, 1)
    n.conv("features.8", 256, 3, 1, 1)
    n.conv("features.10", 256, 3, 1, 1)
    n.pool("features.12", "max_pool", 3, 2)
    n.fc("classifier.1", 4096)
    n.fc("classifier.4", 4096)
    n.fc("classifier.6", 1000)
    return n.rows


def vgg16():
    n = _Net(3, 224, 224)
    for stage, (k, convs) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], 1):
        for i in range(1, convs + 1):
            n.conv(f"conv{stage}_{i}", k, 3, 1, 1)
        n.pool(f"pool{stage}", "max_pool", 2, 2)
    n.fc("fc6", 4096)
    n.fc("fc7", 4096)
    n.fc("fc8", 1000)
    return n.rows


def _resnet(blocks, bottleneck):
    n = _Net(3, 224, 224)
    n.conv("conv1", 64, 7, 2, 3)
    n.pool("maxpool", "max_pool", 3, 2, 1)
    expansion = 4 if bottleneck else 1
    for stage, count in enumerate(blocks, 1):
        width = 64 * 2 ** (stage - 1)
        for b in range(count):
            stride = 2 if stage > 1 and b == 0 else 1
            c, hw = n.c, (n.h, n.w)
            p = f"layer{stage}.{b}"
            if bottleneck:
                n.conv(f"{p}.conv1", width, 1)
                n.conv(f"{p}.conv2", width, 3, stride, 1)     # v1.5: the stride in the 3x3
                n.conv(f"{p}.conv3", width * expansion, 1)
            else:
                n.conv(f"{p}.conv1", width, 3, stride, 1)
                n.conv(f"{p}.conv2", width, 3, 1, 1)
            if b == 0 and (stride != 1 or c != width * expansion):
                n.conv(f"{p}.downsample", width * expansion, 1, stride, c=c, hw=hw, keep=True)
    n.pool("avgpool", "global_avg_pool", None, 1)
    n.fc("fc", 1000)
    return n.rows


def resnet18():
    return _resnet([2, 2, 2, 2], bottleneck=False)


def resnet50():
    return _resnet([3, 4, 6, 3], bottleneck=True)


def squeezenet1_1():
    n = _Net(3, 224, 224)
    n.conv("features.0", 64, 3, 2, 0)
    n.pool("features.2", "max_pool", 3, 2)
    fires = {2: (16, 64), 3: (16, 64), 4: (32, 128), 5: (32, 128), 6: (48, 192),
             7: (48, 192), 8: (64, 256), 9: (64, 256)}
    for f, (sq, ex) in fires.items():
        n.conv(f"fire{f}.squeeze", sq, 1)
        n.conv(f"fire{f}.expand1x1", ex, 1, keep=True)
        n.conv(f"fire{f}.expand3x3", ex, 3, 1, 1, keep=True)
        n.c = 2 * ex                                    # the two expands, concatenated
        if f in (3, 5):                                 # torchvision's features.5, .8
            n.pool({3: "features.5", 5: "features.8"}[f], "max_pool", 3, 2)
    n.conv("classifier.1", 1000, 1)
    n.pool("avgpool", "global_avg_pool", None, 1)
    return n.rows


def digits_cnn():
    """The training example's network: 1 x 8 x 8 digits, 10 classes."""
    n = _Net(1, 8, 8)
    n.conv("conv1", 16, 3, 1, 1)
    n.pool("pool1", "max_pool", 2, 2)
    n.conv("conv2", 32, 3, 2, 1)
    n.pool("gap", "global_avg_pool", None, 1)
    n.fc("fc", 10)
    return n.rows


NETWORKS = {
    "alexnet": (alexnet, "AlexNet (torchvision alexnet), 3 x 224 x 224"),
    "vgg16": (vgg16, "VGG-16 (torchvision vgg16), 3 x 224 x 224"),
    "resnet18": (resnet18, "ResNet-18 (torchvision resnet18), 3 x 224 x 224"),
    "resnet50": (resnet50, "ResNet-50 v1.5 (torchvision resnet50), 3 x 224 x 224"),
    "squeezenet1_1": (squeezenet1_1, "SqueezeNet 1.1 (torchvision squeezenet1_1), "
                                     "3 x 224 x 224"),
    "digits": (digits_cnn, "digits CNN of bpsa train (sklearn load_digits), 1 x 8 x 8"),
}


def main():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, (build, title) in NETWORKS.items():
        text = (f"# {title}. One row a layer, per image (the batch is the caller's).\n"
                f"# Written by python -m bpsa.tools.gen_networks.\n"
                + HEADER + "\n" + "\n".join(build()) + "\n")
        (OUT_DIR / f"{name}.csv").write_text(text)
        print(f"wrote {OUT_DIR / f'{name}.csv'}")


if __name__ == "__main__":
    main()
