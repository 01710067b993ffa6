#!/usr/bin/env bash
# Run Z (2026-12-04, second session): weight gradients over many rows summed
# in parts (autodiff.c ksplit_parts) against MEGANEURA_MATMUL_KSPLIT=0, in
# SmolLM2-135M's 8 x 512 training step, PyTorch eager in the same lease; a
# per-node trace of the step; the op gates on the H200.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 570 - $(date +%s) + t0 )); }
cfg=tests/fixtures/configs
L="/tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10"
for r in 1 2; do
  timeout 90 $L >> $o/lm.jsonl 2>> $o/log.txt; echo "lm rc $?" >> $o/log.txt
  MEGANEURA_MATMUL_KSPLIT=0 timeout 90 $L | sed 's/^{/{"ksplit":0,/' >> $o/lm.jsonl 2>> $o/log.txt; echo "lm ksplit0 rc $?" >> $o/log.txt
done
timeout 200 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 >> $o/torch.jsonl 2>> $o/log.txt; echo "torch rc $?" >> $o/log.txt
MEGANEURA_DUMP=graph MEGANEURA_TRACE=/tmp/t.json timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 3 > /dev/null 2>/tmp/g.txt; echo "trace rc $?" >> $o/log.txt
python3 bench/trace_summary.py /tmp/t.json --last 1 > $o/trace_summary.txt 2>&1
python3 - /tmp/t.json /tmp/g.txt > $o/trace_nodes.txt <<'PY'
import json, sys
from collections import defaultdict
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
last = ev[-1]["args"]["execute"]
t = defaultdict(float); nm = {}
for e in ev:
    if e["args"]["execute"] != last: continue
    t[e["args"]["node"]] += e["dur"]; nm[e["args"]["node"]] = e["name"]
line = {}
for l in open(sys.argv[2], errors="replace"):
    if l.startswith("%") and " = " in l:
        try: line.setdefault(int(l[1:l.index(" ")]), l.strip()[:200])
        except ValueError: pass
for n in sorted(t, key=lambda n: -t[n])[:400]: print(round(t[n], 1), nm[n], line.get(n, n))
PY
for t in test_vulkan_ops test_ops_transformer test_transformer test_workloads; do
  l=$(left); [ $l -gt 20 ] || { echo "$t skipped: $l s left" >> $o/log.txt; continue; }
  timeout $(( l - 10 )) /tmp/b/$t > /tmp/$t.txt 2>&1; echo "$t rc $? $(tail -1 /tmp/$t.txt)" >> $o/log.txt
  grep -m5 FAIL /tmp/$t.txt >> $o/log.txt
done
