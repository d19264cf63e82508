"""Writes the tutorial's CNN as a TorchScript file, for bench_deploy.

    python3 bench/torch/trace_cnn.py OUT.pt

The same architecture as tutorials/02_train_fashion_mnist.cpp (and
bench/torch/torch_peer.cc), in eval mode, traced at batch 1 and frozen:
torch.jit.freeze folds batch norm into the convolutions, as tandem::load does,
so both sides load the model a deployment would ship. Weights are random;
load and run times do not depend on them. Needs Debian's python3-torch
(tools/tandem.sh bench installs it); run with /usr/bin/python3, the
Debian interpreter it is installed for.
"""
import sys

import torch
from torch import nn


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(128, 10)).eval()
    with torch.no_grad():
        traced = torch.jit.trace(model, torch.randn(1, 1, 28, 28))
    torch.jit.freeze(traced).save(sys.argv[1])


if __name__ == "__main__":
    main()
