#!/usr/bin/env bash
# Run R (2026-12-03): ResNet-50's 23 convolution shapes at batch 32, ours
# (bench_conv: forward, input and weight gradients, GPU timestamps) and cuDNN
# (conv_torch.py, TF32 off), then a sweep of forced GEMM tiles and the
# pixel-major form (MEGANEURA_VK_CONV_CT=0).
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 330 - ($(date +%s) - t0) )); }
timeout 90 /tmp/b/meganeura_bench_conv --batch 32 > $o/conv.jsonl 2>>$o/log.txt; echo "auto rc $? $(left) s left" >> $o/log.txt
timeout 90 python3 bench/conv_torch.py --batch 32 > $o/conv_torch.jsonl 2>>$o/log.txt; echo "torch rc $? $(left) s left" >> $o/log.txt
for t in 128,128,16,8,8 128,64,8,8,8 64,128,8,8,8 64,64,16,4,8 128,128,8,8,8 64,64,8,4,4; do
  l=$(left); [ $l -lt 40 ] && break
  MEGANEURA_VK_GEMM_TILE=$t timeout $(( l - 10 )) /tmp/b/meganeura_bench_conv --batch 32 --runs 5 --warmup 2 >> $o/conv_sweep.jsonl 2>>$o/log.txt
  echo "tile $t rc $? $(left) s left" >> $o/log.txt
done
l=$(left); [ $l -gt 40 ] && MEGANEURA_VK_CONV_CT=0 timeout $(( l - 10 )) /tmp/b/meganeura_bench_conv --batch 32 --runs 5 --warmup 2 >> $o/conv_sweep.jsonl 2>>$o/log.txt
echo "end $(left) s left" >> $o/log.txt
