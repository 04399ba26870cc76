"""Small networks as ``nn.Module``s for the 8 x 8 digits: the digits CNN of ``bpsa train``
(the layers of ``workloads/networks/digits.csv``, :mod:`bpsa.host.digits`), a LeNet-5-style
network and a small residual network (``bpsa train --model``)."""

from torch import nn

__all__ = ["DigitsCNN", "LeNetDigits", "ResBlockDigits", "digits_cnn", "lenet_digits",
           "resblock_digits"]


class DigitsCNN(nn.Module):
    """1 x 8 x 8 images: conv 3 x 3 (16) + ReLU, max pooling 2 x 2, conv 3 x 3 stride 2 (32) +
    ReLU, global average pooling, a fully connected layer to 10 classes; no biases (the array
    adds none), as the integer and floating-point digits trainings run it."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.relu2 = nn.ReLU()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(32, 10, bias=False)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.gap(self.relu2(self.conv2(x)))
        return self.fc(self.flatten(x))


def digits_cnn(seed=0):
    """A :class:`DigitsCNN` with ``bpsa train``'s initial weights (He-initialised,
    :func:`bpsa.host.digits_float.init_master` of ``seed``): ``bpsa perf --model
    bpsa.torch.models:digits_cnn --input 32,1,8,8``, ``bpsa train --model ...``."""
    import torch

    from bpsa.host.digits_float import init_master
    net = DigitsCNN()
    w = init_master(seed)
    with torch.no_grad():
        net.conv1.weight.copy_(torch.from_numpy(w["conv1"]))
        net.conv2.weight.copy_(torch.from_numpy(w["conv2"]))
        net.fc.weight.copy_(torch.from_numpy(w["fc"][:, :, 0, 0]))
    return net


class LeNetDigits(nn.Module):
    """A LeNet-5-style network for 1 x 8 x 8 images: two conv 3 x 3 (6, 16) + ReLU + max
    pooling 2 x 2 blocks, then fully connected 64 -> 32 (ReLU) -> 10, every layer with a
    bias (added by PyTorch when offloaded)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(),
                                        nn.Linear(32, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


class ResBlockDigits(nn.Module):
    """A small residual network for 1 x 8 x 8 images: conv 3 x 3 (16) + batch norm + ReLU, one
    basic block (two conv 3 x 3 with batch norm, the residual addition and batch norms on the
    host), max pooling 2 x 2, global average pooling, fully connected to 10."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU())
        self.conv1 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.relu2 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        x = self.gap(self.pool(self.relu2(x + y)))
        return self.fc(x.flatten(1))


def lenet_digits():
    """A :class:`LeNetDigits`."""
    return LeNetDigits()


def resblock_digits():
    """A :class:`ResBlockDigits`."""
    return ResBlockDigits()
