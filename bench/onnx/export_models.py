"""The real models of the ONNX rows, exported by PyTorch with fixed random weights.

  /usr/bin/python3 bench/onnx/export_models.py OUT_DIR

Debian's python3-torch and python3-torchvision (installed by `tools/tandem.sh
bench`, never needed to build or use Tandem) export each model with
torch.onnx.export, its batch dimension free, into OUT_DIR/<name>.onnx, with
inputs at batch 1, 2 and 32 (<name>.input<B>.npy) and torch's outputs for
them (<name>.output<B>.npy), so that bench_onnx can check Tandem's answers
and time every runtime on the same files.
"""

import os
import sys

import numpy as np
import torch
import torchvision


class Encoder(torch.nn.Module):
    """A small transformer encoder over token embeddings: [batch, 32] int64 -> [batch, 32, 64]."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 64)
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2)

    def forward(self, tokens):
        return self.encoder(self.embed(tokens))


class LstmClassifier(torch.nn.Module):
    """Two LSTM layers over a [batch, 50, 32] sequence, the last step classified into 10."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


def models():
    torch.manual_seed(0)
    image = lambda b: torch.randn(b, 3, 224, 224)
    yield "resnet18", torchvision.models.resnet18(), image
    yield "mobilenet_v2", torchvision.models.mobilenet_v2(), image
    yield "squeezenet1_1", torchvision.models.squeezenet1_1(), image
    yield "transformer_encoder", Encoder(), lambda b: torch.randint(0, 1000, (b, 32))
    yield "lstm", LstmClassifier(), lambda b: torch.randn(b, 50, 32)


def main(out):
    os.makedirs(out, exist_ok=True)
    for name, model, example in models():
        model.eval()
        path = os.path.join(out, name + ".onnx")
        # With gradients on: torch's transformer layers then take their plain path,
        # which the exporter knows, instead of the fused inference kernel.
        torch.onnx.export(model, example(2), path, input_names=["input"], output_names=["output"],
                          opset_version=13,
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        with torch.no_grad():
            for batch in (1, 2, 32):
                x = example(batch)
                np.save(os.path.join(out, f"{name}.input{batch}.npy"), x.numpy())
                np.save(os.path.join(out, f"{name}.output{batch}.npy"), model(x).numpy())
        print("exported", path, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
