"""trace_summary.py - where the GPU time of a MEGANEURA_TRACE file goes.

  MEGANEURA_TRACE=t.json meganeura_bench_lm infer ...   (any program)
  python3 bench/trace_summary.py t.json [--last N]

The trace holds one event per dispatch with its GPU start and duration
(timestamps around each dispatch, so the gaps include the barriers and the
front end's ramp between kernels) and the execute it belongs to. For the last N executes (default 3):
dispatches, the span from the first start to the last end, the busy time
(sum of durations), the idle time between kernels, and per op the time and
the idle time before its kernels.
"""
import json, sys
from collections import defaultdict


def executes(events):
    runs, cur = [], []
    for e in events:
        if cur and e["args"].get("execute") != cur[-1]["args"].get("execute"):
            runs.append(cur); cur = []
        cur.append(e)
    if cur: runs.append(cur)
    return runs


def main():
    path = sys.argv[1]
    last = int(sys.argv[sys.argv.index("--last") + 1]) if "--last" in sys.argv else 3
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    runs = executes(ev)
    print(f"{path}: {len(ev)} dispatches in {len(runs)} executes")
    for k, r in enumerate(runs[-last:]):
        span = r[-1]["ts"] + r[-1]["dur"] - r[0]["ts"]
        busy = sum(e["dur"] for e in r)
        op_t, op_gap, op_n = defaultdict(float), defaultdict(float), defaultdict(int)
        prev = None
        for e in r:
            op_t[e["name"]] += e["dur"]; op_n[e["name"]] += 1
            if prev is not None: op_gap[e["name"]] += max(0.0, e["ts"] - prev)
            prev = e["ts"] + e["dur"]
        print(f"execute {len(runs) - last + k}: {len(r)} dispatches, span {span:.1f} us, busy {busy:.1f} us, "
              f"idle {span - busy:.1f} us ({100 * (span - busy) / span:.0f}%)")
        for name in sorted(op_t, key=lambda n: -(op_t[n] + op_gap[n])):
            print(f"  {name:22s} {op_n[name]:5d} calls  busy {op_t[name]:9.1f} us  idle before {op_gap[name]:8.1f} us  "
                  f"mean {op_t[name] / op_n[name]:7.2f} us")


if __name__ == "__main__":
    main()
