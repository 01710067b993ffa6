#!/usr/bin/env python3
"""gemm_torch.py - the PyTorch (cuBLAS) side of bench/bench_gemm.c: the same
shapes and layouts, f32 with TF32 off ("strict"), bf16 and f16 operands
(torch.matmul on tensors of that dtype: cuBLAS with f32 accumulation), so
that bench/gemm_summary.py can divide ours by cuBLAS from the same run.

  gemm_torch.py [--precision strict,bf16,f16] [--shapes square,skinny,MxKxN[:nt]] [--runs N]
                [--no-reduced-reduction]

PyTorch's defaults otherwise (what a user gets, and what the cuBLAS numbers of
issue 12 were measured with): cuBLAS may reduce bf16/f16 split-K partial sums
in reduced precision; --no-reduced-reduction forbids it (f32 throughout, our
contract), and the records then say "reduction":"f32".

Each run executes R products (R as bench_gemm.c picks it) timed with CUDA
events; ms per product, the best and the median of --runs. One JSON line per
measurement:
  {"bench":"gemm_torch","precision":..,"M":..,"K":..,"N":..,"layout":..,"reps":R,
   "ms_min":..,"ms_median":..,"tflops":..}
"""
import argparse
import json
import math
import statistics

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

DTYPES = {"strict": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def shapes(arg):
    out = []
    for tok in arg.split(","):
        if tok == "square":
            out += [(n, n, n, "nn") for n in (1024, 2048, 4096, 8192)]
        elif tok == "skinny":
            for k, n in ((576, 1536), (576, 49152), (2048, 8192)):
                out += [(m, k, n, "nt") for m in (128, 512, 4096)]
        else:
            dims, _, lay = tok.partition(":")
            m, k, n = (int(v) for v in dims.split("x"))
            out.append((m, k, n, lay or "nn"))
    return out


def reps_for(m, k, n):
    flops = 2.0 * m * n * k
    r = max(1, min(16, math.ceil(1e12 / flops)))
    while r > 1 and r * m * n * 4 > 6e9:
        r -= 1
    return r


def bench(prec, m, k, n, lay, runs):
    dt = DTYPES[prec]
    a = torch.rand((k, m) if lay[0] == "t" else (m, k), device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(dt)
    b = torch.rand((n, k) if lay[1] == "t" else (k, n), device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(dt)
    opa = a.t() if lay[0] == "t" else a
    opb = b.t() if lay[1] == "t" else b
    r = reps_for(m, k, n)
    outs = [torch.empty((m, n), device="cuda", dtype=dt) for _ in range(r)]

    def run():
        for o in outs:
            torch.matmul(opa, opb, out=o)

    for _ in range(2):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / r)
    best = min(times)
    return {"bench": "gemm_torch", "precision": prec, "M": m, "K": k, "N": n, "layout": lay, "reps": r,
            "ms_min": round(best, 5), "ms_median": round(statistics.median(times), 5),
            "tflops": round(2.0 * m * n * k / (best * 1e-3) / 1e12, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="strict,bf16,f16")
    ap.add_argument("--shapes", default="square,skinny")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--no-reduced-reduction", action="store_true")
    a = ap.parse_args()
    if a.no_reduced_reduction:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    for prec in a.precision.split(","):
        for m, k, n, lay in shapes(a.shapes):
            rec = bench(prec, m, k, n, lay, a.runs)
            rec["reduction"] = "f32" if a.no_reduced_reduction else "default"
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
