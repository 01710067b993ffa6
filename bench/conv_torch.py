#!/usr/bin/env python3
"""conv_torch.py - the cuDNN side of bench/bench_conv.c: the same 23 shapes
of torchvision's resnet50 (bias-free, padding k/2), f32 with TF32 off,
cudnn.benchmark on (the algorithm search PyTorch users turn on for fixed
shapes). Per shape: the forward (F.conv2d), the input gradient and the
weight gradient (aten.convolution_backward with one output each), timed with
CUDA events over --runs calls after warm-up, the median in microseconds.

  conv_torch.py [--batch N] [--runs R] [--only I,J,..]

One JSON line per shape, the fields of bench_conv.c's lines:
  {"bench":"conv_torch","i":..,"C":..,"H":..,"O":..,"k":..,"stride":..,"batch":..,"count":..,
   "gflop":..,"fwd_us":..,"dgrad_us":..,"wgrad_us":..,"fwd_tflops":..,..}
and {"bench":"conv_torch_total",...} weighted by the counts as there.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True

# (C, H, O, k, stride, count): bench_conv.c's table
SHAPES = [
    (3, 224, 64, 7, 2, 1),
    (64, 56, 64, 1, 1, 1), (64, 56, 64, 3, 1, 3), (64, 56, 256, 1, 1, 4), (256, 56, 64, 1, 1, 2),
    (256, 56, 128, 1, 1, 1), (128, 56, 128, 3, 2, 1), (128, 28, 512, 1, 1, 4), (256, 56, 512, 1, 2, 1),
    (512, 28, 128, 1, 1, 3), (128, 28, 128, 3, 1, 3), (512, 28, 256, 1, 1, 1), (256, 28, 256, 3, 2, 1),
    (256, 14, 1024, 1, 1, 6), (512, 28, 1024, 1, 2, 1), (1024, 14, 256, 1, 1, 5), (256, 14, 256, 3, 1, 5),
    (1024, 14, 512, 1, 1, 1), (512, 14, 512, 3, 2, 1), (512, 7, 2048, 1, 1, 3), (1024, 14, 2048, 1, 2, 1),
    (2048, 7, 512, 1, 1, 2), (512, 7, 512, 3, 1, 2),
]


def timed(fn, runs):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    only = None if a.only is None else {int(t) for t in a.only.split(",")}
    dev = "cuda"
    tot = {"fwd": 0.0, "dgrad": 0.0, "wgrad": 0.0}
    flop_tot = 0.0
    for i, (C, H, O, k, s, count) in enumerate(SHAPES):
        if only is not None and i not in only:
            continue
        p = k // 2
        x = torch.randn(a.batch, C, H, H, device=dev)
        w = torch.randn(O, C, k, k, device=dev) * 0.05
        y = F.conv2d(x, w, stride=s, padding=p)
        dy = torch.ones_like(y)
        bw = lambda mask: torch.ops.aten.convolution_backward(
            dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)
        t = {
            "fwd": timed(lambda: F.conv2d(x, w, stride=s, padding=p), a.runs),
            "dgrad": timed(lambda: bw([True, False, False]), a.runs),
            "wgrad": timed(lambda: bw([False, True, False]), a.runs),
        }
        oh = y.shape[2]
        fl = 2.0 * a.batch * O * oh * oh * C * k * k
        rec = {"bench": "conv_torch", "i": i, "C": C, "H": H, "O": O, "k": k, "stride": s, "batch": a.batch,
               "count": count, "gflop": round(fl * 1e-9, 4)}
        for key, us in t.items():
            rec[key + "_us"] = round(us, 2)
            rec[key + "_tflops"] = round(fl * 1e-6 / us, 2)
            if key != "dgrad" or i != 0:
                tot[key] += count * us
        flop_tot += count * fl * (2 if i == 0 else 3)
        print(json.dumps(rec), flush=True)
        del x, w, y, dy
    ms = sum(tot.values()) * 1e-3
    print(json.dumps({"bench": "conv_torch_total", "batch": a.batch, "fwd_ms": round(tot["fwd"] * 1e-3, 3),
                      "dgrad_ms": round(tot["dgrad"] * 1e-3, 3), "wgrad_ms": round(tot["wgrad"] * 1e-3, 3),
                      "ms": round(ms, 3), "tflops": round(flop_tot * 1e-9 / ms, 2) if ms > 0 else 0}))


if __name__ == "__main__":
    main()
