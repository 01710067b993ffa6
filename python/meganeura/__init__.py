"""meganeura - Python bindings of Meganeura-C (libmeganeura.so), over its C
API through ctypes, with numpy arrays in and out.

    import meganeura as mn
    with mn.Graph() as g:
        x = g.input("x", (64, 784))
        y = g.input("y", (64,), mn.I32)
        h = g.relu(x @ g.param("fc1.weight", (784, 128), "kaiming_uniform") + g.param("fc1.bias", (128,)))
        logits = g.output(h @ g.param("fc2.weight", (128, 10), "kaiming_uniform") + g.param("fc2.bias", (10,)),
                          "logits")
        g.loss(g.cross_entropy(logits, y))
        with mn.Session(g, optimizer=mn.AdamW(lr=1e-3)) as s:
            loss = s.step(x=images, y=labels)

Modules: graph (Graph, Tensor, the ops), session (Session, Device,
optimizers, checkpoints), tokenizer, mnist (the data cache), onnx (ONNX
import: mn.onnx.load), _lib (the library and the errors). examples/python/mnist.py trains MNIST.
"""
from ._lib import (BackendError, DtypeError, Error, FileError, FormatError, InvalidArgumentError,
                   NonFiniteError, NotFoundError, OutOfMemoryError, ShapeError, StateError,
                   UnsupportedError, status_name)
from .graph import ALL_AXES, BF16, F16, F32, I32, NONE, Graph, Init, Tensor, fold_batch_norm
from .session import (SGD, Adam, AdamW, Device, Optimizer, Session, bf16_decode, bf16_encode, checkpoint_meta,
                      list_devices)
from .tokenizer import Tokenizer
from . import mnist, onnx

__version__ = "0.1.0"

__all__ = ["Graph", "Tensor", "Init", "Session", "Device", "Optimizer", "SGD", "Adam", "AdamW", "Tokenizer",
           "checkpoint_meta", "list_devices", "fold_batch_norm", "mnist", "onnx", "status_name", "bf16_encode",
           "bf16_decode",
           "F32", "F16", "BF16", "I32", "NONE", "ALL_AXES",
           "Error", "InvalidArgumentError", "ShapeError", "DtypeError", "OutOfMemoryError", "FileError",
           "FormatError", "NotFoundError", "UnsupportedError", "BackendError", "StateError", "NonFiniteError"]
