"""Small networks as ``nn.Module``s: the digits CNN of ``bpsa train`` (the layers of
``workloads/networks/digits.csv``, :mod:`bpsa.host.digits`)."""

from torch import nn

__all__ = ["DigitsCNN", "digits_cnn"]


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


def digits_cnn():
    """A :class:`DigitsCNN` (PyTorch's default initialisation): ``bpsa perf --model
    bpsa.torch.models:digits_cnn --input 32,1,8,8``."""
    return DigitsCNN()
