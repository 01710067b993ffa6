#!/usr/bin/env bash
# Run J: SmolLM2 inference, ours and PyTorch eager in the same lease as run I
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
[ -f /tmp/mn-smol/config.json ] || python3 tests/fixtures/gen_llama.py --full tests/fixtures/configs/smollm2-135m.json --out /tmp/mn-smol > /dev/null 2>>$o/log.txt
timeout 60 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 64 --forward 128 --runs 10 >> $o/ours.jsonl 2>>$o/log.txt
timeout 150 python3 bench/lm_torch.py infer --model /tmp/mn-smol --prefill 512 --decode 64 --forward 128 > $o/torch_eager.jsonl 2>>$o/log.txt; echo "torch exit $?" >> $o/log.txt
