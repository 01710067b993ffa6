#!/usr/bin/env python3
"""attn_torch.py - PyTorch's attention at the shapes of meganeura_bench_attn.

torch.nn.functional.scaled_dot_product_attention in f32 with TF32 off, on
SmolLM2-135M's heads (9 query heads on 3 kv heads, head dim 64): forward,
forward + backward (q, k, v all need gradients; the backward of sum(out)),
and decoding steps (one query row over 512 or 2048 keys, no mask). GQA the
way transformers' Llama runs it with sdpa: k and v repeated to the query
heads (repeat_kv; inside the timed region, since the model pays it too).
Each SDPA backend PyTorch offers for f32 is tried (auto, efficient, math;
flash and cudnn take no f32): a backend that refuses the inputs is
reported and skipped. One JSON line per measurement, fields as
bench_attn.c's (ms per call, FLOPs of the kept (query, key) pairs: 4 D per
pair forward, 14 D forward + backward).

    python3 bench/attn_torch.py [--runs R] [--warmup W] [--only b8t512,...]

Does not: compare values (the gates are tests/test_llama_hf.c).
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

HQ, HKV, HD = 9, 3, 64
CASES = [
    ("b1t128", 1, 128, 128, False),
    ("b8t512", 8, 512, 512, False),
    ("b1t2048", 1, 2048, 2048, False),
    ("dec512", 1, 1, 512, True),
    ("dec2048", 1, 1, 2048, True),
]


def pairs(B, Tq, Tk, decode):
    per = Tk if decode else Tq * (Tq + 1) / 2
    return per * B * HQ


def backends():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    yield "auto", None
    yield "efficient", lambda: sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION])
    yield "math", lambda: sdpa_kernel([SDPBackend.MATH])


def timed(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in ev)
    return ms[len(ms) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = torch.device("cuda")
    only = set(args.only.split(",")) if args.only else None
    for name, B, Tq, Tk, decode in CASES:
        if only and name not in only:
            continue
        g = torch.Generator(device=dev).manual_seed(1)
        q = torch.rand(B, HQ, Tq, HD, device=dev, generator=g) * 2 - 1
        k = torch.rand(B, HKV, Tk, HD, device=dev, generator=g) * 2 - 1
        v = torch.rand(B, HKV, Tk, HD, device=dev, generator=g) * 2 - 1
        rep = HQ // HKV
        fl = 4 * HD * pairs(B, Tq, Tk, decode)

        def fwd():
            with torch.no_grad():
                kk = k.repeat_interleave(rep, dim=1)
                vv = v.repeat_interleave(rep, dim=1)
                return F.scaled_dot_product_attention(q, kk, vv, is_causal=not decode)

        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

        def fwd_bwd():
            kk = kg.repeat_interleave(rep, dim=1)
            vv = vg.repeat_interleave(rep, dim=1)
            F.scaled_dot_product_attention(qg, kk, vv, is_causal=True).sum().backward()

        for bname, ctx in backends():
            modes = [("decode", fwd, fl)] if decode else [("fwd", fwd, fl), ("fwd_bwd", fwd_bwd, 3.5 * fl)]
            res = {}
            for mode, fn, flops in modes:
                line = {"bench": "attn", "impl": "torch", "sdpa_backend": bname, "case": name, "mode": mode,
                        "B": B, "Hq": HQ, "Hkv": HKV, "Tq": Tq, "Tk": Tk, "D": HD, "causal": True,
                        "runs": args.runs, "torch": torch.__version__}
                try:
                    if ctx is None:
                        ms = timed(fn, args.runs, args.warmup)
                    else:
                        with ctx():
                            ms = timed(fn, args.runs, args.warmup)
                except Exception as e:  # a backend that does not take these inputs
                    line["error"] = str(e).splitlines()[0][:200]
                    print(json.dumps(line), flush=True)
                    continue
                res[mode] = ms
                line.update({"ms": round(ms, 4), "gflop": round(1e-9 * flops, 4),
                             "tflops": round(1e-9 * flops / ms, 3)})
                if mode == "fwd_bwd" and "fwd" in res:
                    line.update({"fwd_ms": round(res["fwd"], 4), "bwd_ms": round(ms - res["fwd"], 4),
                                 "bwd_over_fwd": round((ms - res["fwd"]) / res["fwd"], 3)})
                print(json.dumps(line), flush=True)
        del q, k, v, qg, kg, vg
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
