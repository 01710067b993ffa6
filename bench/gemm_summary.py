#!/usr/bin/env python3
"""gemm_summary.py - joins bench_gemm.c's and gemm_torch.py's JSON lines (one
GPU run) into a table: per shape, layout and precision, the best tile (and
rounding) of ours, its TFLOP/s, cuBLAS's and the ratio; the issue-12 target
is >= 0.60 for bf16 and f16 at n = 4096 and 8192. Failed checks are listed.

  gemm_summary.py ours.jsonl torch.jsonl [--all]
--all: every tile and rounding, not only the best per shape.
"""
import json
import sys


def load(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_all = "--all" in sys.argv
    ours = [r for r in load(args[0]) if r.get("bench") == "gemm"]
    torch = {}
    for r in load(args[1]) if len(args) > 1 else []:
        if r.get("bench") == "gemm_torch" and r.get("reduction", "default") == "default":
            key = (r["precision"], r["M"], r["K"], r["N"], r["layout"])
            torch[key] = max(torch.get(key, 0), r["tflops"])
    bad = [r for r in ours if r.get("check") != "ok"]
    best = {}
    for r in ours:
        if "tflops" not in r or r.get("check") != "ok":
            continue
        key = (r["precision"], r["M"], r["K"], r["N"], r["layout"])
        if show_all:
            best[key + (r["tile"], r["round"])] = r
        elif key not in best or r["tflops"] > best[key]["tflops"]:
            best[key] = r
    print(f"{'prec':6} {'M':>5} {'K':>5} {'N':>6} {'lay':3} {'tile':20} {'round':5} {'ours':>8} {'cuBLAS':>8} {'ratio':>6}")
    for key in sorted(best, key=lambda k: (k[0], k[4], k[1], k[2], k[3])):
        r = best[key]
        t = torch.get(key[:5])
        ratio = f"{r['tflops'] / t:.2f}" if t else "-"
        print(f"{r['precision']:6} {r['M']:5} {r['K']:5} {r['N']:6} {r['layout']:3} {r['tile']:20} {r['round']:5} "
              f"{r['tflops']:8.1f} {t if t else '-':>8} {ratio:>6}")
    for r in load(args[0]):
        if r.get("bench") == "round_bits":
            print(f"rounding {r['precision']} {r['round']}: {r['mismatches']} of {r['of']} values differ from "
                  "round-to-nearest-even")
    for r in bad:
        print("FAILED:", json.dumps(r))


if __name__ == "__main__":
    main()
