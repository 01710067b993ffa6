#!/usr/bin/env python3
"""metrics_check.py - checks what `--log` and `--plot` write (tests/cli_metrics.sh,
tests/cli_lm.sh), and makes a small MNIST cache for them.

  metrics_check.py synth-mnist OUT            a learnable MNIST-format file (docs/DATA.md):
                                              810 images per digit (8,000 train / 100 test)
  metrics_check.py log FILE.jsonl RATE STEPS EVALS
                                              every line a JSON object; a run record, STEPS
                                              train records (steps 1..STEPS), EVALS eval
                                              records, an end record "ok"; fields as
                                              docs/METRICS.md says; RATE: images_per_s or
                                              tokens_per_s
  metrics_check.py png FILE.svg FILE.png LEGEND...
                                              the SVG parses as XML with axes, ticks and the
                                              legend texts; the PNG (rsvg-convert's rendering)
                                              decodes, has the SVG's size and shows the curves
                                              in their colours
Prints "metrics_check: N passed, 0 failed" or exits 1 naming the first problem.
Standard library only (json, xml, zlib).
"""
import json
import math
import random
import struct
import sys
import xml.etree.ElementTree as ET
import zlib

passed = 0


def ok(cond, what):
    global passed
    if not cond:
        sys.exit("metrics_check: FAILED: %s" % what)
    passed += 1


def synth_mnist(out):
    """Digit d: a bright 6x6 block at a digit-specific place over noise (a
    linear classifier learns it within an epoch). Seeded: the same file each time."""
    per, n = 810, 8100
    noise = random.Random(12345).randbytes(n * 784).translate(bytes(i * 90 // 256 for i in range(256)))
    pix = bytearray(noise)
    labels = bytearray()
    for d in range(10):
        r0, c0 = 2 + (d // 5) * 12, 1 + (d % 5) * 5
        for i in range(per):
            base = (d * per + i) * 784
            for r in range(r0, r0 + 6):
                pix[base + r * 28 + c0:base + r * 28 + c0 + 6] = b"\xff" * 6
            labels.append(d)
    with open(out, "wb") as f:
        f.write(b"MNDS" + struct.pack("<4I", 1, n, 28, 28) + bytes(pix) + bytes(labels))


def finite_or_null(v):
    return v is None or (isinstance(v, (int, float)) and math.isfinite(v))


def check_log(path, rate, steps, evals):
    recs = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            ok(line.endswith("\n"), "line %d ends with a newline" % i)
            try:
                r = json.loads(line)
            except ValueError as e:
                ok(False, "line %d is JSON: %s" % (i, e))
            ok(isinstance(r, dict), "line %d is an object" % i)
            keys = list(r)
            ok(keys[:2] == ["type", "time_s"], "line %d starts with type, time_s: %s" % (i, keys[:2]))
            recs.append(r)
    ok(len(recs) >= 3, "at least a run, a train and an end record")
    ok(recs[0]["type"] == "run" and "command" in recs[0] and "lr" in recs[0], "first record: run")
    ok(recs[-1]["type"] == "end" and recs[-1]["status"] == "ok" and recs[-1]["steps"] == steps,
       "last record: end, ok, %d steps: %s" % (steps, recs[-1]))
    times = [r["time_s"] for r in recs]
    ok(all(b >= a for a, b in zip(times, times[1:])), "time_s never decreases")
    train = [r for r in recs if r["type"] == "train"]
    ev = [r for r in recs if r["type"] == "eval"]
    ok(len(train) + len(ev) + 2 == len(recs), "only run/train/eval/end records")
    ok([r["step"] for r in train] == list(range(1, steps + 1)), "train steps are 1..%d" % steps)
    for r in train:
        ok(set(r) == {"type", "time_s", "step", "epoch", "loss", "accuracy", "lr", rate},
           "train fields at step %d: %s" % (r["step"], sorted(r)))
        ok(isinstance(r["loss"], float) and math.isfinite(r["loss"]) and r["loss"] >= 0, "train loss")
        ok(0 <= r["accuracy"] <= 1, "accuracy in [0, 1]")
        ok(r["lr"] > 0 and r["epoch"] >= 1, "lr > 0, epoch >= 1")
        ok(finite_or_null(r[rate]) and (r[rate] is None or r[rate] > 0), "throughput > 0")
    ok(train[-1]["loss"] < train[0]["loss"], "the loss fell: %g -> %g" % (train[0]["loss"], train[-1]["loss"]))
    ok(len(ev) == evals, "%d eval records, got %d" % (evals, len(ev)))
    for r in ev:
        ok("eval_loss" in r and finite_or_null(r["eval_loss"]), "eval_loss")
        ok(r["step"] in [t["step"] for t in train], "eval step is a train step")
        if "eval_accuracy" in r:
            ok(0 <= r["eval_accuracy"] <= 1, "eval_accuracy in [0, 1]")
        if "eval_perplexity" in r:
            ok(r["eval_perplexity"] is None or abs(math.log(r["eval_perplexity"]) - r["eval_loss"]) < 1e-4,
               "eval_perplexity = exp(eval_loss)")


def png_pixels(path):
    """(width, height, rows of RGBA bytes) of an 8-bit RGB/RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    ok(data[:8] == b"\x89PNG\r\n\x1a\n", "PNG signature")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        ok(zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0], "PNG chunk CRC")
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    ok(ihdr is not None, "PNG has IHDR")
    w, h, depth, ctype, _, _, interlace = ihdr
    ok(depth == 8 and ctype in (2, 6) and interlace == 0, "8-bit RGB(A), not interlaced")
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = w * bpp
    ok(len(raw) == h * (stride + 1), "PNG data size")
    rows, prev = [], bytearray(stride)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            else:
                ok(ft == 0, "PNG filter type %d" % ft)
        prev = line
        if bpp == 3:
            line = bytearray(b for j in range(0, stride, 3) for b in (line[j], line[j + 1], line[j + 2], 255))
        rows.append(bytes(line))
    return w, h, rows


def check_png(svg, png, legends):
    tree = ET.parse(svg)
    root = tree.getroot()
    ns = "{http://www.w3.org/2000/svg}"
    ok(root.tag == ns + "svg", "root element is svg")
    W, H = int(root.get("width")), int(root.get("height"))
    texts = [t.text or "" for t in root.iter(ns + "text")]
    for want in ["step", "loss"] + legends:
        ok(any(want in t for t in texts), "the SVG shows the text %r" % want)
    ok(sum(1 for t in texts if t.replace(".", "").isdigit()) >= 8, "tick labels on the axes")
    ok(len(list(root.iter(ns + "path"))) >= 2, "at least two curves")
    w, h, rows = png_pixels(png)
    ok((w, h) == (W, H), "PNG is %dx%d like the SVG, got %dx%d" % (W, H, w, h))
    dark = train = evalc = 0
    for r in rows:
        for j in range(0, len(r), 4):
            R, G, B, A = r[j], r[j + 1], r[j + 2], r[j + 3]
            if A > 128 and R + G + B < 600:
                dark += 1
            if abs(R - 0x1f) < 40 and abs(G - 0x77) < 40 and abs(B - 0xb4) < 40:
                train += 1
            if abs(R - 0xd6) < 40 and abs(G - 0x27) < 40 and abs(B - 0x28) < 40:
                evalc += 1
    frac = dark / float(w * h)
    ok(0.01 < frac < 0.5, "non-blank, not filled: %.1f%% of the pixels are drawn" % (100 * frac))
    ok(train > 300, "the train curves show in their blue (%d pixels)" % train)
    ok(evalc > 50, "the eval curve shows in its red (%d pixels)" % evalc)


def main(argv):
    if len(argv) == 3 and argv[1] == "synth-mnist":
        synth_mnist(argv[2])
        return
    if len(argv) == 6 and argv[1] == "log":
        check_log(argv[2], argv[3], int(argv[4]), int(argv[5]))
    elif len(argv) >= 4 and argv[1] == "png":
        check_png(argv[2], argv[3], argv[4:])
    else:
        sys.exit(__doc__)
    print("metrics_check: %s: %d checks passed" % (argv[1], passed))


if __name__ == "__main__":
    main(sys.argv)
