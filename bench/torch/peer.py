"""PyTorch from Python: the Python side of the side-by-side benchmarks.

The Tandem benches run it as a child process, with the interpreter of the
virtual environment `tools/tandem.sh bench` makes (build/peers, with the
current PyTorch and onnxruntime from PyPI), and read the "key value" lines it
prints, as they do for bench/torch/torch_peer (bench/harness.h, Note [Side by
side in separate processes]). It measures what the C++ peer cannot:
torch.compile, TorchScript made from Python, and onnxruntime.

  peer.py train --mode eager|compile --model mlp|lenet --batch B --data DIR
  peer.py infer --mode eager|compile|ort --model mlp|lenet --data DIR

The workloads are those of Note [Standard workloads] in bench/harness.h; the
data folder is the one bench_train writes (images.u8, labels.u8, order.i64).
"""

import argparse
import logging
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch

# The legacy ONNX exporter and TorchScript are deprecated, and torch.compile
# logs that this machine has no GPU: notes that would bury the tables.
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)

SAMPLES = 10000
LR = 0.1
MOMENTUM = 0.9
TIMED_EPOCHS = 3


def emit(key, value):
    print(f"{key} {value:.9g}", flush=True)


def peak_rss_mib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def make_model(name):
    nn = torch.nn
    if name == "lenet":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))
    return nn.Sequential(
        nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
        nn.ReLU(), nn.Linear(128, 10))


def read_data(folder):
    images = np.fromfile(os.path.join(folder, "images.u8"), dtype=np.uint8)
    labels = np.fromfile(os.path.join(folder, "labels.u8"), dtype=np.uint8)
    order = np.fromfile(os.path.join(folder, "order.i64"), dtype=np.int64)
    if images.size != SAMPLES * 784 or labels.size != SAMPLES or order.size != SAMPLES:
        sys.exit(f"peer.py: {folder} does not hold the standard data")
    return (torch.from_numpy(images.reshape(SAMPLES, 28, 28).copy()),
            torch.from_numpy(labels.astype(np.int64)), torch.from_numpy(order))


def train(args):
    images, labels, order = read_data(args.data)
    torch.manual_seed(0)
    model = make_model(args.model)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    forward = torch.compile(model) if args.mode == "compile" else model
    batch = args.batch
    steps = SAMPLES // batch
    indices = [order[i * batch:(i + 1) * batch].clone() for i in range(steps)]
    loss = None

    def epoch():
        nonlocal loss
        for idx in indices:
            x = images.index_select(0, idx).to(torch.float32).mul_(1.0 / 255)
            y = labels.index_select(0, idx)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(forward(x.view(batch, 1, 28, 28)), y)
            loss.backward()
            optimizer.step()
        return loss.item()

    first_loss = epoch()  # Warm-up: compiles, caches, page faults.
    rates = []
    last_loss = first_loss
    for _ in range(TIMED_EPOCHS):
        begin = time.perf_counter()
        last_loss = epoch()
        rates.append(steps * batch / (time.perf_counter() - begin))
    emit("samples_per_s", statistics.median(rates))
    emit("first_loss", first_loss)
    emit("last_loss", last_loss)
    emit("peak_rss_mib", peak_rss_mib())


def latency_us(run, calls):
    """The median latency of run() in microseconds, after calls // 10 + 1 unmeasured calls."""
    for _ in range(calls // 10 + 1):
        run()
    samples = []
    for _ in range(calls):
        begin = time.perf_counter_ns()
        run()
        samples.append(time.perf_counter_ns() - begin)
    return statistics.median(samples) / 1000


def infer(args):
    """Steady latency at batch 1 and 64 (b1_us, b64_us) of a model in eval mode, eager,
    torch.compile'd, or exported to ONNX and run by onnxruntime; for onnxruntime also the
    session's creation and first call (load_ms, first_call_ms), what a server pays at start."""
    torch.manual_seed(0)
    model = make_model(args.model).eval()
    inputs = {batch: torch.rand(batch, 1, 28, 28) for batch in (1, 64)}
    calls = {1: 20000, 64: 2000}
    if args.mode == "ort":
        import onnxruntime
        path = os.path.join(args.data, f"{args.model}.onnx")
        with torch.no_grad():
            torch.onnx.export(model, (inputs[1],), path, dynamo=False, input_names=["x"],
                              output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 2
        options.inter_op_num_threads = 1
        begin = time.perf_counter()
        session = onnxruntime.InferenceSession(path, options,
                                               providers=["CPUExecutionProvider"])
        emit("load_ms", (time.perf_counter() - begin) * 1000)
        arrays = {batch: x.numpy() for batch, x in inputs.items()}
        begin = time.perf_counter()
        session.run(None, {"x": arrays[1]})
        emit("first_call_ms", (time.perf_counter() - begin) * 1000)
        for batch in (1, 64):
            emit(f"b{batch}_us",
                 latency_us(lambda: session.run(None, {"x": arrays[batch]}), calls[batch]))
        return
    forward = torch.compile(model) if args.mode == "compile" else model
    with torch.inference_mode():
        for batch in (1, 64):
            x = inputs[batch]
            emit(f"b{batch}_us", latency_us(lambda: forward(x), calls[batch]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["train", "infer"])
    parser.add_argument("--mode", default="eager", choices=["eager", "compile", "ort"])
    parser.add_argument("--model", default="mlp", choices=["mlp", "lenet"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--data", default="")
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.set_num_interop_threads(1)
    print(f"note: torch {torch.__version__}", flush=True)
    if args.command == "train":
        train(args)
    else:
        infer(args)


if __name__ == "__main__":
    main()
