#!/usr/bin/env bash
# Run L: channel-major implicit GEMMs for conv2d and its input gradient
# (MM_CT) against the pixel-major form (MEGANEURA_VK_CONV_CT=0), every
# workload; profiles of ResNet-50 b32 and Whisper b8
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - t0) )); }
timeout 150 /tmp/b/meganeura_bench --backend vulkan --models > $o/models_ct.jsonl 2>>$o/log.txt
echo "after ct $(left) s left" >> $o/log.txt
MEGANEURA_VK_CONV_CT=0 timeout 150 /tmp/b/meganeura_bench --backend vulkan --models > $o/models_noct.jsonl 2>>$o/log.txt
echo "after noct $(left) s left" >> $o/log.txt
MEGANEURA_PROFILE=1 timeout 100 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 --runs 20 > /dev/null 2> $o/r50_profile.txt
MEGANEURA_PROFILE=1 timeout 100 /tmp/b/meganeura_bench --backend vulkan --only whisper_tiny_enc_b8 --runs 20 > /dev/null 2> $o/whisper_profile.txt
echo "end $(left) s left" >> $o/log.txt
