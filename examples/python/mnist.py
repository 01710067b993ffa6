#!/usr/bin/env python3
"""mnist.py - trains the MNIST MLP of `meganeura train mnist` from Python.

    PYTHONPATH=python /usr/bin/python3 examples/python/mnist.py [--epochs 20] [--backend cpu|vulkan]

The same model (linear 784->128, relu, linear 128->10 under the parameter
names fc1/fc2), data (the cache `make data` writes, docs/DATA.md, with the
fixed 8,000 / 2,000 split), optimizer (AdamW, lr 5e-3, weight decay 0.01,
warm-up + cosine to lr/100) and augmentation (random shifts of up to 2
pixels) as the C program's defaults, so it reaches the same accuracy (about
97% after 20 epochs). The checkpoint carries model=mlp, so
`meganeura eval mnist --checkpoint FILE` evaluates it too.

Exits 1 if the test accuracy is below --min-accuracy.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import meganeura as mn  # noqa: E402


def mlp(g, batch, training):
    """logits = relu(x @ W1 + b1) @ W2 + b2 (and the loss when training)."""
    x = g.input("x", (batch, 784))
    h = g.relu(x @ g.param("fc1.weight", (784, 128), "kaiming_uniform") + g.param("fc1.bias", (128,)))
    logits = g.output(h @ g.param("fc2.weight", (128, 10), "kaiming_uniform") + g.param("fc2.bias", (10,)),
                      "logits")
    if training:
        g.loss(g.cross_entropy(logits, g.input("y", (batch,), mn.I32)))


def shifted(images, shift, rng):
    """Each 28x28 image moved by a random offset of up to shift pixels each way (zeros moved in)."""
    n = images.shape[0]
    if shift == 0:
        return images
    padded = np.pad(images.reshape(n, 28, 28), ((0, 0), (shift, shift), (shift, shift)))
    dy, dx = rng.integers(-shift, shift + 1, size=(2, n))
    rows = np.arange(28)[None, :] - dy[:, None] + shift
    cols = np.arange(28)[None, :] - dx[:, None] + shift
    return padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]].reshape(n, 784)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--shift", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backend", choices=["cpu", "vulkan"], default="cpu")
    ap.add_argument("--data", help="MNIST cache file (default: %s)" % mn.mnist.default_path())
    ap.add_argument("--checkpoint", default="mnist-mlp-py.safetensors")
    ap.add_argument("--min-accuracy", type=float, default=0, help="exit 1 below this test accuracy (%%)")
    a = ap.parse_args()

    train_x, train_y, test_x, test_y = mn.mnist.load(a.data)
    B = a.batch
    steps = len(train_x) // B
    total = steps * a.epochs
    opt = mn.AdamW(lr=a.lr, weight_decay=0.01, schedule="warmup_cosine", warmup_steps=min(100, total // 10),
                   total_steps=total, min_lr=a.lr * 0.01)
    rng = np.random.default_rng(a.seed)
    logits = np.empty((B, 10), dtype=np.float32)  # reused: the library writes into it

    with mn.Graph() as g:
        mlp(g, B, training=True)
        train = mn.Session(g, backend=a.backend, optimizer=opt, seed=a.seed)
    with train:
        train.set_meta("model", "mlp")
        print("train: %d images, %d steps/epoch, %d epochs, backend %s" % (len(train_x), steps, a.epochs, a.backend),
              file=sys.stderr)
        t0 = time.monotonic()
        for epoch in range(1, a.epochs + 1):
            order = rng.permutation(len(train_x))
            losses, correct = [], 0
            for s in range(steps):
                idx = order[s * B:(s + 1) * B]
                y = train_y[idx]
                losses.append(train.step(x=shifted(train_x[idx], a.shift, rng), y=y))
                correct += int((train.output("logits", out=logits).argmax(1) == y).sum())
            print("epoch %d/%d: loss %.4f, train accuracy %.1f%%, lr %.2g" %
                  (epoch, a.epochs, np.mean(losses), 100 * correct / (steps * B), train.lr), file=sys.stderr)
            train.save(a.checkpoint)
        secs = time.monotonic() - t0
        print("train time %.1f s (%d steps, %.1f steps/s)" % (secs, total, total / secs))

    # evaluation: an inference session of batch 500 loads the checkpoint
    E = 500
    with mn.Graph() as g:
        mlp(g, E, training=False)
        test = mn.Session(g, backend=a.backend)
    with test:
        test.load(a.checkpoint)
        correct = 0
        for at in range(0, len(test_x), E):
            x = np.zeros((E, 784), dtype=np.float32)
            k = min(E, len(test_x) - at)
            x[:k] = test_x[at:at + k]
            test.run(x=x)
            correct += int((test.output("logits")[:k].argmax(1) == test_y[at:at + k]).sum())
    acc = 100 * correct / len(test_x)
    print("checkpoint %s" % a.checkpoint)
    print("test accuracy %.2f%% (%d/%d)" % (acc, correct, len(test_x)))
    return 0 if acc >= a.min_accuracy else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (mn.Error, OSError, ValueError) as e:
        print("mnist.py: error: %s" % e, file=sys.stderr)
        sys.exit(1)
