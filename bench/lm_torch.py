#!/usr/bin/env python3
"""lm_torch.py - PyTorch / transformers side of the language-model benchmark
(bench/run_lm_gpu.sh runs it beside bench/bench_lm.c on the same GPU).

  train  --config FILE --batch B --seq T [--steps N] [--attn eager|sdpa] [--autocast off|bf16|f16]
         f32 eager training step (TF32 off, AdamW lr 1e-4, wd 0.01) of the
         architecture of FILE with random weights: median ms and
         torch.cuda.max_memory_allocated (the peak ours is compared with);
         --autocast: the step under torch.autocast of that dtype (f32 master
         weights; f16 with GradScaler(init_scale=65536)), the reference of
         the fast contract (bench_lm --precision)
  infer  --model DIR --prefill N --decode M [--forward F] [--compile]
         f32, batch 1: prefill = one forward pass over N tokens (median ms),
         forward = the same over the first F tokens; decode = model.generate
         greedy with M new tokens minus the same with 1 new token, per token.
         --compile: static KV cache + torch.compile (fullgraph, default mode;
         the forward passes also in mode "reduce-overhead"), all measured
         after warm-up
  export-check --dir DIR --prompt TEXT --tokens K --ours FILE
         loads DIR (our mn_llama_export) with LlamaForCausalLM.from_pretrained,
         generates K tokens greedily, and compares the text with FILE (what
         `meganeura generate --temperature 0` printed)
One JSON line per measurement on stdout.
"""
import argparse
import json
import statistics
import sys
import time

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def sync():
    torch.cuda.synchronize()


def timed(fn, warmup, runs):
    for _ in range(warmup):
        fn()
    sync()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ts)


def train(a):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig.from_json_file(a.config)
    cfg._attn_implementation = "eager" if a.attn == "eager" else "sdpa"
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).float().cuda().train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)
    x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")
    torch.cuda.reset_peak_memory_stats()

    dt = {"bf16": torch.bfloat16, "f16": torch.float16}.get(a.autocast)
    scaler = torch.amp.GradScaler("cuda", init_scale=65536.0) if a.autocast == "f16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dt or torch.float32, enabled=dt is not None):
            loss = m(x, labels=x).loss
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    ms = timed(step, 3, a.steps)
    print(json.dumps(dict(bench="torch_lm_train", config=a.config, attn=a.attn, autocast=a.autocast, batch=a.batch, seq=a.seq,
                          params=sum(p.numel() for p in m.parameters()), step_ms=round(ms, 3),
                          peak_bytes=torch.cuda.max_memory_allocated())), flush=True)


def infer(a):
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="sdpa").cuda().eval()
    m.generation_config.eos_token_id = None
    V = m.config.vocab_size
    g = torch.Generator().manual_seed(0)
    x = torch.randint(3, V, (1, a.prefill), generator=g).cuda()
    kind = "eager"
    orig = m.forward
    eager = lambda ids: orig(input_ids=ids, use_cache=False).logits
    fwd, fwd_ro = eager, None
    t0 = time.perf_counter()
    if a.compile:
        kind = "compiled"
        fwd = torch.compile(eager, fullgraph=True)
        fwd_ro = torch.compile(eager, fullgraph=True, mode="reduce-overhead")
        m.generation_config.cache_implementation = "static"
        # generate would otherwise compile the decode step itself in
        # "reduce-overhead" mode (CUDA graphs), which fails in this
        # torch/transformers pair ("accessing tensor output of CUDAGraphs that
        # has been overwritten"); compile it ourselves in the default mode
        m.generation_config.disable_compile = True
        m.forward = torch.compile(m.forward, fullgraph=True)
    xf = x[:, :a.forward]

    def run(f, ids):
        def go():
            with torch.no_grad():
                f(ids)
        return go

    def gen(n):
        with torch.no_grad():
            return m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, pad_token_id=0)

    r = dict(bench="torch_lm_infer", model=a.model, kind=kind, prefill_tokens=a.prefill)
    pre = timed(run(fwd, x), 3, a.runs)
    r.update(prefill_ms=round(pre, 3), prefill_tokens_per_s=round(1e3 * a.prefill / pre, 1))
    r.update(forward_tokens=a.forward, forward_ms=round(timed(run(fwd, xf), 3, a.runs), 3))
    if fwd_ro is not None:
        try:
            r.update(prefill_ms_reduce_overhead=round(timed(run(fwd_ro, x), 3, a.runs), 3),
                     forward_ms_reduce_overhead=round(timed(run(fwd_ro, xf), 3, a.runs), 3))
        except Exception as e:  # keep the other numbers
            r.update(reduce_overhead_error=str(e)[:200])
    try:
        g1 = timed(lambda: gen(1), 2, a.runs)
        gm = timed(lambda: gen(a.decode), 2, a.runs)
        r.update(decode_tokens=a.decode, decode_ms_per_token=round((gm - g1) / (a.decode - 1), 4),
                 decode_tokens_per_s=round(1e3 * (a.decode - 1) / (gm - g1), 1))
    except Exception as e:
        r.update(decode_error=str(e)[:200])
    r.update(setup_s=round(time.perf_counter() - t0, 1))
    print(json.dumps(r), flush=True)


def export_check(a):
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM.from_pretrained(a.dir, dtype=torch.float32).eval()
    tk = Tokenizer.from_file(a.dir + "/tokenizer.json")
    ids = torch.tensor([tk.encode(a.prompt, add_special_tokens=False).ids])
    with torch.no_grad():
        out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.tokens, do_sample=False,
                         pad_token_id=0, eos_token_id=None)
    text = a.prompt + tk.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=False)
    ours = open(a.ours, encoding="utf-8").read().rstrip("\n")
    same = text == ours
    common = next((i for i, (p, q) in enumerate(zip(text, ours)) if p != q), min(len(text), len(ours)))
    print(json.dumps(dict(bench="export_check", dir=a.dir, loaded=True, params=sum(p.numel() for p in m.parameters()),
                          same_text=same, common_prefix_chars=common, transformers_text=text, ours_text=ours)),
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--config", required=True)
    t.add_argument("--batch", type=int, default=1)
    t.add_argument("--seq", type=int, default=128)
    t.add_argument("--steps", type=int, default=10)
    t.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
    t.add_argument("--autocast", default="off", choices=["off", "bf16", "f16"])
    i = sub.add_parser("infer")
    i.add_argument("--model", required=True)
    i.add_argument("--prefill", type=int, default=512)
    i.add_argument("--decode", type=int, default=128)
    i.add_argument("--forward", type=int, default=128)
    i.add_argument("--runs", type=int, default=5)
    i.add_argument("--compile", action="store_true")
    e = sub.add_parser("export-check")
    e.add_argument("--dir", required=True)
    e.add_argument("--prompt", required=True)
    e.add_argument("--tokens", type=int, default=16)
    e.add_argument("--ours", required=True)
    a = ap.parse_args()
    {"train": train, "infer": infer, "export-check": export_check}[a.cmd](a)


if __name__ == "__main__":
    try:
        main()
    except Exception as ex:  # one line the run script can keep
        print(json.dumps(dict(bench="error", argv=sys.argv[1:], error="%s: %s" % (type(ex).__name__, ex))), flush=True)
        raise
