#!/usr/bin/env python3
"""torch_gemm.py - cuBLAS GEMM times at given shapes (the PyTorch side of
bench/gemm_sweep.sh), strict f32 (TF32 off) and optionally bf16/f16.

    python3 bench/torch_gemm.py M,N,K [M,N,K ...] [--dtypes f32,bf16,f16]

One JSON object per line: shape, dtype, median and best ms of 20 runs after
5 warm-ups (CUDA events), TFLOP/s from the best.
"""
import argparse, json
import torch

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--dtypes", default="f32")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    for s in a.shapes:
        M, N, K = (int(v) for v in s.split(","))
        for name in a.dtypes.split(","):
            x = torch.randn(M, K, device="cuda", dtype=dt[name])
            y = torch.randn(K, N, device="cuda", dtype=dt[name])
            for _ in range(5): x @ y
            ts = []
            for _ in range(20):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(); x @ y; e1.record(); torch.cuda.synchronize()
                ts.append(e0.elapsed_time(e1))
            ts.sort()
            print(json.dumps(dict(gemm=name, m=M, n=N, k=K, ms_median=round(ts[10], 4), ms_min=round(ts[0], 4),
                                  tflops=round(2 * M * N * K / (ts[0] * 1e-3) / 1e12, 2), who="torch")), flush=True)

if __name__ == "__main__":
    main()
