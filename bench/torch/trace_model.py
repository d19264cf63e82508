"""Writes a benchmark model as a TorchScript file, for bench_deploy.

    python3 bench/torch/trace_model.py cnn|mlp|lenet OUT.pt

cnn is the CNN of tutorials/02_train_fashion_mnist.cpp; mlp and lenet are the
standard workloads' models (Note [Standard workloads] in bench/harness.h);
the same architectures as bench/torch/torch_peer.cc. In eval mode, traced at
batch 1 and frozen: torch.jit.freeze folds batch norm into the convolutions,
as tandem::load does, so both sides load the model a deployment would ship.
Weights are random; load and run times do not depend on them. Runs with
Debian's python3-torch (/usr/bin/python3, for Debian's libtorch) and with the
current PyTorch of build/peers (for the wheel's); tools/tandem.sh bench
installs both.
"""
import sys
import warnings

import torch
from torch import nn


def make(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                             nn.Linear(84, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(128, 10))


def main() -> None:
    warnings.simplefilter("ignore")  # Newer PyTorch deprecates TorchScript; it still ships it.
    torch.manual_seed(0)
    model = make(sys.argv[1]).eval()
    with torch.no_grad():
        traced = torch.jit.trace(model, torch.randn(1, 1, 28, 28))
    torch.jit.freeze(traced).save(sys.argv[2])


if __name__ == "__main__":
    main()
