"""Writes the whole-network workload files ``src/bpsa/workloads/networks/*.csv`` from the
PyTorch models themselves (needs the torch extra, torchvision included).

Each network is its ``nn.Module`` (torchvision's ``alexnet``, ``vgg16``, ``resnet18``,
``resnet50`` v1.5, ``squeezenet1_1``, ``mobilenet_v2`` and ``resnext50_32x4d`` (their
grouped and depthwise convolutions with a ``groups`` column), ``weights=None``, at ImageNet
resolution 224 x 224;
the digits CNN of the training example, :class:`bpsa.torch.models.DigitsCNN`, on 8 x 8
images) traced by :func:`bpsa.torch.trace.trace`: the rows are the layers the accelerator
runs, in execution order, named by their module paths. The host operations the trace lists
(ReLU, batch normalization, residual additions, concatenations, flatten, dropout, biases)
are not rows. The files are the data the tools read (:mod:`bpsa.spec.network`, without
PyTorch); ``tests/test_spec_network.py`` checks them against the independent per-layer table
``workloads/conv_layers.csv`` and ``tests/test_torch_trace.py`` against a fresh trace. Run
``python -m bpsa.tools.gen_networks`` to rewrite them.
"""

from pathlib import Path

from bpsa.spec.network import network_csv

OUT_DIR = Path(__file__).resolve().parent.parent / "workloads" / "networks"

#: name -> (factory path, input shape of one image, title)
NETWORKS = {
    "alexnet": ("torchvision.models:alexnet", (3, 224, 224),
                "AlexNet (torchvision alexnet), 3 x 224 x 224"),
    "vgg16": ("torchvision.models:vgg16", (3, 224, 224),
              "VGG-16 (torchvision vgg16), 3 x 224 x 224"),
    "resnet18": ("torchvision.models:resnet18", (3, 224, 224),
                 "ResNet-18 (torchvision resnet18), 3 x 224 x 224"),
    "resnet50": ("torchvision.models:resnet50", (3, 224, 224),
                 "ResNet-50 v1.5 (torchvision resnet50), 3 x 224 x 224"),
    "squeezenet1_1": ("torchvision.models:squeezenet1_1", (3, 224, 224),
                      "SqueezeNet 1.1 (torchvision squeezenet1_1), 3 x 224 x 224"),
    "mobilenet_v2": ("torchvision.models:mobilenet_v2", (3, 224, 224),
                     "MobileNetV2 (torchvision mobilenet_v2), 3 x 224 x 224"),
    "resnext50_32x4d": ("torchvision.models:resnext50_32x4d", (3, 224, 224),
                        "ResNeXt-50 32x4d (torchvision resnext50_32x4d), 3 x 224 x 224"),
    "digits": ("bpsa.torch.models:digits_cnn", (1, 8, 8),
               "digits CNN of bpsa train (sklearn load_digits), 1 x 8 x 8"),
}


def traced(name):
    """The :class:`bpsa.torch.trace.Traced` of network ``name`` (one image)."""
    from bpsa.torch.trace import load_factory, trace
    path, shape, _ = NETWORKS[name]
    return trace(load_factory(path), (1, *shape), name=name)


def main():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, (path, _, title) in NETWORKS.items():
        text = network_csv(traced(name).network,
                           f"{title}. One row a layer, per image (the batch is the caller's).\n"
                           f"Traced from {path} by python -m bpsa.tools.gen_networks.")
        (OUT_DIR / f"{name}.csv").write_text(text)
        print(f"wrote {OUT_DIR / f'{name}.csv'}")


if __name__ == "__main__":
    main()
