#!/usr/bin/env bash
# Run V (2026-12-04): where SmolLM2-135M's 8 x 512 training step goes after
# run U's GEMM change (MEGANEURA_PROFILE=1, a trace summed by
# bench/trace_summary.py), and the attention kernels against PyTorch's SDPA
# at 8 x 512 and 1 x 2048.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
cfg=tests/fixtures/configs
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 5 > $o/lm.jsonl 2> $o/lm_profile.txt; echo "lm profile rc $?" >> $o/log.txt
MEGANEURA_DUMP=graph MEGANEURA_TRACE=/tmp/t.json timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 3 >> $o/lm.jsonl 2>/tmp/g.txt; echo "lm trace rc $?" >> $o/log.txt
python3 bench/trace_summary.py /tmp/t.json --last 1 > $o/lm_trace_summary.txt 2>&1
python3 - /tmp/t.json /tmp/g.txt > $o/lm_trace_nodes.txt <<'PY'
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
        try: line.setdefault(int(l[1:l.index(" ")]), l.strip()[:220])
        except ValueError: pass
for n in sorted(t, key=lambda n: -t[n])[:150]: print(round(t[n], 1), nm[n], line.get(n, n))
PY
timeout 60 /tmp/b/meganeura_bench_attn --only b8t512,b1t2048 --runs 10 > $o/attn.jsonl 2>>$o/log.txt; echo "attn rc $?" >> $o/log.txt
timeout 60 python3 bench/attn_torch.py --only b8t512,b1t2048 --runs 10 >> $o/attn.jsonl 2>>$o/log.txt; echo "attn torch rc $?" >> $o/log.txt
