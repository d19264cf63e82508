"""The peers of bench_onnx: onnxruntime, and PyTorch eager and TorchScript, on the real models.

  peer.py ort MODEL_DIR NAME               (the virtual environment's onnxruntime)
  peer.py eager|script MODEL_DIR NAME      (Debian's python3-torch and python3-torchvision)

Each run is a fresh process that prints "key value" lines, as bench_onnx's Tandem child does
(bench/harness.h, Note [Side by side in separate processes]): load_ms (onnxruntime's session
creation; building the torch model, and tracing and freezing it for TorchScript), first_call_ms
(the first call at batch 1), batch1_ms and batch32_ms (the median of steady calls). The inputs
are the ones export_models.py saved beside each model.
"""

import os
import statistics
import sys
import time
import warnings

import numpy as np

warnings.simplefilter("ignore")

CALLS = {1: 20, 32: 5}


def emit(key, value):
    print(f"{key} {value:.9g}", flush=True)


def figures(load, run, inputs):
    begin = time.perf_counter()
    load()
    emit("load_ms", (time.perf_counter() - begin) * 1000)
    begin = time.perf_counter()
    run(inputs[1])
    emit("first_call_ms", (time.perf_counter() - begin) * 1000)
    for batch, calls in CALLS.items():
        run(inputs[batch])  # A new batch size may plan once; not a steady call.
        samples = []
        for _ in range(calls):
            begin = time.perf_counter()
            run(inputs[batch])
            samples.append((time.perf_counter() - begin) * 1000)
        emit(f"batch{batch}_ms", statistics.median(samples))


def main(mode, folder, name):
    inputs = {b: np.load(os.path.join(folder, f"{name}.input{b}.npy")) for b in CALLS}
    if mode == "ort":
        import onnxruntime
        session = None

        def load():
            nonlocal session
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 2
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(os.path.join(folder, name + ".onnx"), options,
                                                   providers=["CPUExecutionProvider"])

        figures(load, lambda x: session.run(None, {"input": x}), inputs)
        return
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import export_models
    torch.set_num_threads(2)
    model = None

    def load():
        nonlocal model
        for candidate, module, example in export_models.models():
            if candidate == name:
                model = module.eval()
                if mode == "script":
                    with torch.no_grad():
                        model = torch.jit.freeze(torch.jit.trace(model, example(2)))
                return

    tensors = {b: torch.from_numpy(x) for b, x in inputs.items()}

    def run(x):
        with torch.inference_mode():
            model(torch.from_numpy(x))

    figures(load, run, {b: t.numpy() for b, t in tensors.items()})


if __name__ == "__main__":
    main(*sys.argv[1:4])
