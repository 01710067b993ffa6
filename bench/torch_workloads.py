"""torch_workloads.py - the PyTorch side of meganeura_bench's workloads (issue 11),
from ../shared/bench/torch_anchors.py (its MLPs, U-Net, ResNet-50, Whisper encoder
and SmolLM2 as they were) plus the workloads of bench/bench_models.c under the same
names: ResNet-50 at batch 4, the U-Nets with the noise-prediction loss (the
conditioned one and the action expert are the modules of
tests/fixtures/gen_workloads.py, which the C builders follow), the SmolVLA action
expert with its flow-matching loss.

Each workload is built with random weights (no hub access), timed as a train step
(forward + backward + optimizer) and as inference, in strict f32 (TF32 off) and
bf16 autocast; optionally torch.compile with its compile time. Prints JSON lines.
  python3 bench/torch_workloads.py [--only a,b] [--modes f32] [--compile [--compile-mode M]] [--runs N]
"""
import argparse, json, os, statistics, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))

def sync(): torch.cuda.synchronize()

def timeit(fn, warmup, runs):
    for _ in range(warmup): fn()
    sync(); ts = []
    for _ in range(runs):
        t0 = time.perf_counter(); fn(); sync(); ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts), min(ts)

# ---- workloads ---------------------------------------------------------------
class MLP(nn.Module):
    def __init__(s):
        super().__init__(); s.f1 = nn.Linear(128, 64); s.f2 = nn.Linear(64, 64); s.f3 = nn.Linear(64, 10, bias=False)
    def forward(s, x): return s.f3(F.relu(s.f2(F.relu(s.f1(x)))))

class MnistMLP(nn.Module):
    def __init__(s):
        super().__init__(); s.f1 = nn.Linear(784, 128); s.f2 = nn.Linear(128, 10)
    def forward(s, x): return s.f2(F.relu(s.f1(x)))

class ResBlock(nn.Module):
    def __init__(s, ci, co, g):
        super().__init__()
        s.n1 = nn.GroupNorm(g, ci); s.c1 = nn.Conv2d(ci, co, 3, padding=1, bias=False)
        s.n2 = nn.GroupNorm(g, co); s.c2 = nn.Conv2d(co, co, 3, padding=1, bias=False)
        s.r = nn.Conv2d(ci, co, 1, bias=False) if ci != co else nn.Identity()
    def forward(s, x):
        h = s.c1(F.silu(s.n1(x))); h = s.c2(F.silu(s.n2(h))); return s.r(x) + h

class UNet(nn.Module):
    def __init__(s, cin=4, base=32, levels=3, groups=8):
        super().__init__()
        s.cin = nn.Conv2d(cin, base, 3, padding=1, bias=False)
        s.enc = nn.ModuleList(); s.down = nn.ModuleList(); c = base; chans = []
        for l in range(levels):
            co = base << l; s.enc.append(ResBlock(c, co, groups)); chans.append(co)
            s.down.append(nn.Conv2d(co, co, 3, stride=2, padding=1, bias=False) if l < levels - 1 else nn.Identity()); c = co
        s.mid = ResBlock(c, c, groups)
        s.dec = nn.ModuleList()
        for l in reversed(range(levels)):
            co = base << l; s.dec.append(ResBlock(c + chans[l], co, groups)); c = co
        s.out = nn.Conv2d(c, cin, 3, padding=1, bias=False); s.levels = levels
    def forward(s, x):
        h = s.cin(x); skips = []
        for l in range(s.levels):
            h = s.enc[l](h); skips.append(h); h = s.down[l](h)
        h = s.mid(h)
        for i, l in enumerate(reversed(range(s.levels))):
            if h.shape[-1] != skips[l].shape[-1]: h = F.interpolate(h, scale_factor=2, mode="nearest")
            h = s.dec[i](torch.cat([h, skips[l]], 1))
        return s.out(h)

def smollm2():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, rms_norm_eps=1e-5, rope_theta=10000.0,
                      tie_word_embeddings=True, max_position_embeddings=2048)
    return LlamaForCausalLM(cfg)

def whisper_tiny_encoder():
    from transformers import WhisperConfig, WhisperModel
    cfg = WhisperConfig(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                        decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80)
    return WhisperModel(cfg).encoder

def resnet50():
    import torchvision
    return torchvision.models.resnet50()

def unet_cond():
    import gen_workloads as G
    return G.UNet({"base": 64, "levels": 3, "groups": 16, "in_channels": 4, "conv_bias": True, "eps": 1e-5,
                   "attention_levels": 6, "context_dim": 768, "head_dim": 32, "time_embedding": True})

def smolvla():
    import gen_workloads as G
    return G.Expert({"hidden": 720, "layers": 16, "heads": 15, "kv_heads": 5, "head_dim": 64, "ffn": 2048,
                     "action_dim": 32, "chunk": 50, "vlm_len": 16, "kv_dim": 320, "rms_eps": 1e-5,
                     "rope_theta": 10000.0, "min_period": 4e-3, "max_period": 4.0})

def flow_loss(m, a, n, t, vlm):
    tau = t[:, None, None]
    return F.mse_loss(m(tau * n + (1 - tau) * a, t, vlm), n - a)

def workloads(full):
    W = []
    # name, model ctor, make inputs, loss fn(model, *inputs), optimizer, inference fn(model, *inputs)
    one = lambda m, x, *rest: m(x)
    W.append(("mlp_ci_b16", MLP, lambda: (torch.randn(16, 128),), lambda m, x: F.cross_entropy(m(x), torch.arange(16, device="cuda") % 10), "sgd", one))
    W.append(("mnist_mlp_b64", MnistMLP, lambda: (torch.randn(64, 784),), lambda m, x: F.cross_entropy(m(x), torch.arange(64, device="cuda") % 10), "adam", one))
    W.append(("sd_unet_tiny_b4", lambda: UNet(4, 32, 3, 8), lambda: (torch.randn(4, 4, 32, 32), torch.randn(4, 4, 32, 32)), lambda m, x, n: F.mse_loss(m(x), n), "adam", one))
    for b in (2, 16):
        W.append((f"sd_unet_small_b{b}", lambda: UNet(4, 64, 3, 16), lambda b=b: (torch.randn(b, 4, 32, 32), torch.randn(b, 4, 32, 32)), lambda m, x, n: F.mse_loss(m(x), n), "adam", one))
    W.append(("sd_unet_cond_b2", unet_cond, lambda: (torch.randn(2, 4, 32, 32), torch.randn(2, 4, 32, 32), torch.tensor([999.0, 37.0]), torch.randn(2, 77, 768)),
              lambda m, x, n, t, c: F.mse_loss(m(x, t, c), n), "adam", lambda m, x, n, t, c: m(x, t, c)))
    for b in (1, 4, 32):
        W.append((f"resnet50_b{b}", resnet50, lambda b=b: (torch.randn(b, 3, 224, 224),), lambda m, x: F.cross_entropy(m(x), torch.arange(x.shape[0], device="cuda") % 1000), "sgd", one))
    for b in (1, 8):
        W.append((f"smolvla_chunk50_b{b}", smolvla, lambda b=b: (torch.randn(b, 50, 32), torch.randn(b, 50, 32), torch.rand(b), torch.randn(b, 16, 320)),
                  flow_loss, "adamw", lambda m, a, n, t, v: m(n, t, v)))
    for b in (1, 8):
        W.append((f"whisper_tiny_enc_b{b}", whisper_tiny_encoder, lambda b=b: (torch.randn(b, 80, 3000),), lambda m, x: m(x).last_hidden_state.float().pow(2).mean(), "adam", one))
    W.append(("smollm2_135m_b1_s128", smollm2, lambda: (torch.randint(0, 49152, (1, 128)),), lambda m, x: m(x, labels=x).loss, "adamw", one))
    W.append(("smollm2_135m_b8_s512", smollm2, lambda: (torch.randint(0, 49152, (8, 512)),), lambda m, x: m(x, labels=x).loss, "adamw", one))
    return W

def run(args):
    out = []
    for name, ctor, mk, lossf, optname, inferf in workloads(args.full):
        if args.only and not any(o in name for o in args.only.split(",")): continue
        for mode in args.modes.split(","):
            torch.manual_seed(0)
            strict = mode == "f32"
            torch.backends.cuda.matmul.allow_tf32 = not strict
            torch.backends.cudnn.allow_tf32 = not strict
            torch.set_float32_matmul_precision("highest" if strict else "high")
            m = ctor().cuda()
            inputs = tuple(t.cuda() for t in mk())
            opt = {"sgd": lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9),
                   "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
                   "adamw": lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.1)}[optname](m.parameters())
            ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if mode == "bf16" else (lambda: torch.autocast("cuda", enabled=False))
            fwd_model = m
            ct = 0.0
            if args.compile:
                t0 = time.perf_counter(); fwd_model = torch.compile(m, mode=args.compile_mode)
                with ctx(): l = lossf(fwd_model, *inputs)
                l.backward(); opt.zero_grad(set_to_none=True); sync(); ct = time.perf_counter() - t0
            def train():
                opt.zero_grad(set_to_none=True)
                with ctx(): l = lossf(fwd_model, *inputs)
                l.backward(); opt.step()
            def infer():
                with torch.no_grad(), ctx(): inferf(fwd_model, *inputs)
            m.train(); tmed, tmin = timeit(train, args.warmup, args.runs)
            m.eval(); imed, imin = timeit(infer, args.warmup, args.runs)
            params = sum(p.numel() for p in m.parameters())
            r = dict(workload=name, mode=mode, compiled=bool(args.compile), compile_mode=args.compile_mode if args.compile else "",
                     compile_s=round(ct, 2), params=params,
                     train_ms_median=round(tmed, 3), train_ms_min=round(tmin, 3), infer_ms_median=round(imed, 3), infer_ms_min=round(imin, 3),
                     peak_mem_mib=round(torch.cuda.max_memory_allocated() / 2**20, 1), torch=torch.__version__)
            print(json.dumps(r), flush=True); out.append(r)
            del m, opt, fwd_model; torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    return out

def gemm(args):
    for dt, tf32 in (("f32", False), ("tf32", True), ("bf16", False), ("f16", False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        dtype = {"f32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dt]
        for n in (1024, 4096, 8192):
            a = torch.randn(n, n, device="cuda", dtype=dtype); b = torch.randn(n, n, device="cuda", dtype=dtype)
            med, mn = timeit(lambda: a @ b, 3, 10)
            print(json.dumps(dict(gemm=dt, n=n, ms_median=round(med, 4), tflops=round(2 * n**3 / (mn * 1e-3) / 1e12, 1))), flush=True)
    x = torch.empty(2**28, device="cuda"); y = torch.empty_like(x)
    med, mn = timeit(lambda: y.copy_(x), 3, 10)
    print(json.dumps(dict(copy_bytes=2 * x.numel() * 4, gbps=round(2 * x.numel() * 4 / (mn * 1e-3) / 1e9, 1))), flush=True)

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="f32,bf16"); ap.add_argument("--compile", action="store_true")
    ap.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead", "max-autotune-no-cudagraphs"])
    ap.add_argument("--warmup", type=int, default=5); ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", default=""); ap.add_argument("--full", action="store_true"); ap.add_argument("--gemm", action="store_true")
    a = ap.parse_args()
    print(json.dumps(dict(torch=torch.__version__, gpu=torch.cuda.get_device_name())), flush=True)
    if a.gemm: gemm(a)
    else: run(a)
