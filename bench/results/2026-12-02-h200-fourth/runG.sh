#!/usr/bin/env bash
# Run G: f32 GEMM tiles at the SmolLM2 prefill shapes (B transposed, as the model's weights)
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT; t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
SH=512x576x576:nt,512x576x192:nt,512x576x1536:nt,512x1536x576:nt,128x576x1536:nt,128x1536x576:nt
for t in auto 64,64,16,4,8 64,64,16,4,8,2 32,32,16,4,4 32,32,16,4,4,2 32,32,16,4,4,4 64,32,16,4,4 64,32,16,4,4,2 32,64,16,4,4 32,64,16,4,4,2 64,64,16,4,4 64,64,16,4,4,2 64,64,16,8,8 64,64,32,8,8 64,128,8,8,8 128,64,8,8,8 128,32,16,8,4 64,32,16,8,4 32,32,32,4,4,2 64,32,32,4,4,2; do
  [ $(el) -gt 400 ] && break
  if [ $t = auto ]; then unset MEGANEURA_VK_GEMM_TILE; else export MEGANEURA_VK_GEMM_TILE=$t; fi
  timeout 60 /tmp/b/meganeura_bench_gemm --backend vulkan --precision strict --shapes $SH --runs 20 2>>$o/log.txt | sed "s/^{/{\"asked\":\"$t\",/" >> $o/sweep.jsonl
done
unset MEGANEURA_VK_GEMM_TILE
python3 - >> $o/torch.jsonl 2>>$o/log.txt <<'PY'
import torch, time, json
torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
for M, K, N in ((512,576,576),(512,576,192),(512,576,1536),(512,1536,576),(128,576,1536),(128,1536,576)):
    x = torch.randn(M, K, device="cuda"); w = torch.randn(N, K, device="cuda")
    for _ in range(10): torch.nn.functional.linear(x, w)
    torch.cuda.synchronize(); ts = []
    for _ in range(50):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); torch.nn.functional.linear(x, w); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ms = min(ts)
    print(json.dumps(dict(M=M, K=K, N=N, ms_min=round(ms, 4), tflops=round(2*M*N*K/ms/1e9, 2))))
PY
echo "done $(el) s" >> $o/log.txt
