"""test_api.py - the Python package against the C library: every op of the
public header is bound (and records the right shape), numbers against numpy
on the CPU backend, training, checkpoints, errors carrying the library's
messages, deterministic freeing, Vulkan against the CPU (lavapipe in CI)."""
import ctypes
import gc
import os
import re

import numpy as np
import pytest

import meganeura as mn
from meganeura import _lib


def header(root, name="meganeura.h"):
    with open(os.path.join(root, "include", name)) as f:
        text = f.read()
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


# ---- the bindings cover the header ---------------------------------------------------

def test_every_graph_constructor_is_bound(root):
    text = header(root)
    names = re.findall(r"mn_status\s+mn_(\w+)\s*\(\s*mn_graph\s*\*\s*g\s*,\s*mn_tensor\s*\*\s*outs?\b", text)
    assert len(names) > 60, names
    missing = [n for n in names if not hasattr(mn.Graph, n[len("graph_"):] if n.startswith("graph_") else n)]
    assert not missing, "ops of include/meganeura.h without a Graph method: %s" % missing


CTYPE = {"int": ctypes.c_int, "float": ctypes.c_float, "bool": ctypes.c_bool, "int32_t": ctypes.c_int32,
         "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64}


def test_structures_match_the_header(root):
    """Names, order and types of the fields of every structure mirrored in _lib."""
    text = header(root)
    structs = {st.__name__: st for st in _lib.STRUCTS}
    for st in _lib.STRUCTS:
        m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (st.__name__, st.__name__), text, re.S)
        assert m, st.__name__
        fields = []
        for decl in m.group(1).split(";"):
            decl = " ".join(decl.split())
            if decl.startswith("const "):
                decl = decl[len("const "):]
            if not decl:
                continue
            # "float beta1, beta2" / "int stride[2]" / "mn_device *device" / "mn_optimizer optim"
            ctype, _, names = decl.partition(" ")
            for d in names.split(","):
                d = d.strip()
                mm = re.fullmatch(r"(\*?)(\w+)(?:\[(\d+)\])?", d)
                assert mm, (st.__name__, d)
                if mm.group(1):
                    ty = ctypes.c_void_p
                elif ctype in CTYPE:
                    ty = CTYPE[ctype]
                elif ctype in structs:
                    ty = structs[ctype]
                else:
                    assert re.search(r"typedef enum %s \{" % ctype, text), (st.__name__, ctype)
                    ty = ctypes.c_int
                if mm.group(3):
                    ty = ty * int(mm.group(3))
                fields.append((mm.group(2), ty))
        got = list(st._fields_)
        assert [n for n, _ in fields] == [n for n, _ in got], st.__name__
        for (n, want), (_, have) in zip(fields, got):
            assert ctypes.sizeof(want) == ctypes.sizeof(have) and \
                getattr(want, "_type_", want) == getattr(have, "_type_", have), (st.__name__, n, want, have)


# ---- every op records a node of the right shape ---------------------------------------------

def op_cases(g):
    x = g.input("x", (2, 3, 4, 4))
    m = g.input("m", (4, 5))
    v = g.input("v", (4,))
    ids = g.input("ids", (2, 3), mn.I32)
    lab = g.input("lab", (4,), mn.I32)
    pos = g.input("pos", (1,), mn.I32)
    c = g.input("c", (1,), mn.I32)
    w = g.param("w", (6, 3, 3, 3), "kaiming_uniform")
    q = g.input("q", (1, 4, 3, 8))
    kv = g.input("kv", (1, 2, 3, 8))
    cache = g.state("cache", (1, 2, 6, 8))
    t1 = g.input("t1", (2, 3, 5))
    w1 = g.param("w1", (4, 3, 3), "kaiming_uniform")
    wt = g.param("wt", (3, 2, 3, 3), "kaiming_uniform")
    ones = g.constant(np.ones(3, np.float32))
    return [
        (g.matmul(m, g.param("mw", (5, 2))), (4, 2)),
        (g.matmul_ex(m, m, trans_b=True), (4, 4)),
        (g.add(m, 1.0), (4, 5)), (g.sub(m, m), (4, 5)), (g.mul(m, m), (4, 5)), (g.div(m, 2.0), (4, 5)),
        (g.scale(m, 3), (4, 5)),
        *[(getattr(g, u)(m), (4, 5)) for u in ("neg", "exp", "log", "sqrt", "rsqrt", "relu", "sigmoid", "tanh",
                                               "gelu", "gelu_tanh", "silu", "abs", "softmax", "log_softmax",
                                               "stop_gradient")],
        (g.sum(m, 1), (4,)), (g.mean(m, 0, True), (1, 5)), (g.max(m), ()),
        (g.reshape(m, (2, -1)), (2, 10)), (g.permute(x, (0, 2, 3, 1)), (2, 4, 4, 3)),
        (g.transpose(m, 0, 1), (5, 4)),
        (g.cross_entropy(m, lab), ()), (g.cross_entropy(m, lab, ignore_index=-100, label_smoothing=0.1), ()),
        (g.cross_entropy_ex(m, lab), ()),
        (g.cross_entropy_dense(m, g.softmax(m)), ()), (g.mse(m, m), ()),
        (g.conv2d(x, w, None, padding=1), (2, 6, 4, 4)), (g.conv2d(x, w, g.param("cb", (6,)), stride=2), (2, 6, 1, 1)),
        (g.max_pool2d(x, 2), (2, 3, 2, 2)), (g.avg_pool2d(x, 2, count_include_pad=False), (2, 3, 2, 2)),
        (g.clamp(m, 0, 1), (4, 5)), (g.pow(m, 2), (4, 5)), (g.where(m, m, 0.0), (4, 5)),
        (g.dropout(m, 0.5, seed=3), (4, 5)), (g.dropout_ex(m, 0.5, 3, c), (4, 5)),
        (g.rms_norm(m, None), (4, 5)), (g.layer_norm(m, g.param("lw", (5,)), None), (4, 5)),
        (g.group_norm(x, 3), (2, 3, 4, 4)), (g.swiglu(m, m), (4, 5)), (g.geglu(m, m), (4, 5)),
        (g.l1_loss(m, m), ()), (g.bce_with_logits(m, m), ()),
        (g.slice(m, 1, 1, 3), (4, 3)), (g.pad(m, (1, 0), (0, 2)), (5, 7)), (g.concat([m, m], 0), (8, 5)),
        (g.split(m, 1, sizes=(2, 3))[1], (4, 3)), (g.broadcast_to(v, (3, 4)), (3, 4)),
        (g.global_avg_pool(x), (2, 3, 1, 1)), (g.upsample_nearest2d(x, 2, 3), (2, 3, 8, 12)),
        (g.upsample_nearest2x(x), (2, 3, 8, 8)),
        (g.conv1d(t1, w1, None, padding=1), (2, 4, 5)),
        (g.conv_transpose2d(x, wt, None, stride=2), (2, 2, 9, 9)),
        (g.batch_norm2d(x, ones, ones, g.param("rm", (3,)), g.param("rv", (3,), ("constant", 1)), training=False),
         (2, 3, 4, 4)),
        (g.embedding(g.param("emb", (7, 8)), ids), (2, 3, 8)),
        (g.rope(q), (1, 4, 3, 8)), (g.rope(q, pos, theta=500000, offset=2), (1, 4, 3, 8)),
        (g.attention(q, kv, kv, causal=True), (1, 4, 3, 8)),
        (g.kv_append(cache, kv, pos), (1, 2, 6, 8)),
    ]


def test_every_op_records_its_shape():
    with mn.Graph() as g:
        for i, (t, want) in enumerate(op_cases(g)):
            assert t.shape == want, (i, t, want)


# ---- numbers against numpy (CPU) ---------------------------------------------------------

def run_forward(build, feeds, outputs, backend="cpu", device=None):
    with mn.Graph() as g:
        ts = build(g)
        for name in outputs:
            g.output(ts[name], name)
        with mn.Session(g, backend=backend, device=device, seed=7) as s:
            s.run(**feeds)
            return {n: s.output(n) for n in outputs}


def test_forward_matches_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    img = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    k = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)

    def build(g):
        A, Bm, X = g.input("a", a.shape), g.input("b", b.shape), g.input("img", img.shape)
        K = g.constant(k)
        return {"mm": (A @ Bm).relu() * 0.5 - 1.0, "sm": g.softmax(A), "sum": g.sum(A, 1),
                "perm": g.permute(Bm, (1, 0)), "cat": g.concat([A, A], 1), "conv": g.conv2d(X, K, None),
                "ln": g.layer_norm(A, None, None, 1e-5), "pad": g.pad(A, (1, 0), (0, 1)),
                "sl": g.split(A, 1, 2)[1]}

    out = run_forward(build, {"a": a, "b": b, "img": img},
                      ["mm", "sm", "sum", "perm", "cat", "conv", "ln", "pad", "sl"])
    np.testing.assert_allclose(out["mm"], np.maximum(a @ b, 0) * 0.5 - 1.0, rtol=1e-5, atol=1e-6)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(out["sm"], e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out["sum"], a.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["perm"], b.T)
    np.testing.assert_array_equal(out["cat"], np.concatenate([a, a], 1))
    conv = np.zeros((1, 3, 3, 3), np.float32)
    for o in range(3):
        for i in range(3):
            for j in range(3):
                conv[0, o, i, j] = (img[0, :, i:i + 3, j:j + 3] * k[o]).sum()
    np.testing.assert_allclose(out["conv"], conv, rtol=1e-4, atol=1e-5)
    mu, var = a.mean(1, keepdims=True), a.var(1, keepdims=True)
    np.testing.assert_allclose(out["ln"], (a - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out["pad"], np.pad(a, ((1, 0), (0, 1))))
    np.testing.assert_array_equal(out["sl"], a[:, 2:])


def test_tensor_operators_with_numbers_and_arrays():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)

    def build(g):
        A = g.input("a", (2, 3))
        return {"ops": (2.0 * A + 1) / 2 - A ** 2.0 + np.ones(3, np.float32) - (-A),
                "meth": A.relu().sum(1, keepdim=True).reshape((1, 2))}

    out = run_forward(build, {"a": a}, ["ops", "meth"])
    np.testing.assert_allclose(out["ops"], (2 * a + 1) / 2 - a ** 2 + 1 + a, rtol=1e-6)
    np.testing.assert_array_equal(out["meth"], a.sum(1).reshape(1, 2))


def test_attention_and_embedding_match_numpy():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    table = rng.standard_normal((6, 3)).astype(np.float32)
    ids = np.array([[5, 0, 2]], np.int32)

    def build(g):
        Q, K, V = g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape)
        return {"att": g.attention(Q, K, V, causal=True),
                "emb": g.embedding(g.constant(table), g.input("ids", ids.shape, mn.I32))}

    out = run_forward(build, {"q": q, "k": k, "v": v, "ids": ids}, ["att", "emb"])
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
    s = np.where(np.tril(np.ones((4, 4), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(out["att"], (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out["emb"], table[ids])


def test_fold_batch_norm_matches_the_formula():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    gamma, beta, mean = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    var = rng.random(4).astype(np.float32) + 0.5
    w2, b2 = mn.fold_batch_norm(w, b, gamma, beta, mean, var, 1e-5)
    s = gamma / np.sqrt(var.astype(np.float64) + 1e-5)
    np.testing.assert_allclose(w2, w * s[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(b2, (b - mean) * s + beta, rtol=1e-5, atol=1e-6)


# ---- training and checkpoints ---------------------------------------------------------------

def regression(g, n=32):
    x = g.input("x", (n, 3))
    y = g.input("y", (n, 1))
    pred = g.output(x @ g.param("w", (3, 1), ("normal", 0, 0.1)) + g.param("b", (1,)), "pred")
    g.loss(g.mse(pred, y))


def regression_data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    return x, (x @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.25).astype(np.float32)


def test_training_learns_and_checkpoints_round_trip(tmp_path):
    x, y = regression_data()
    ck = str(tmp_path / "reg.safetensors")
    with mn.Graph() as g:
        regression(g)
        with mn.Session(g, optimizer=mn.AdamW(lr=0.05, weight_decay=0.0), seed=3) as s:
            assert s.training and s.step_count == 0
            first = s.step(x=x, y=y)
            for _ in range(300):
                last = s.step(x=x, y=y)
            assert last < first * 1e-3, (first, last)
            assert s.step_count == 301
            np.testing.assert_allclose(s.get_param("w")[:, 0], [1.5, -2.0, 0.5], atol=0.05)
            s.set_meta("note", "from python")
            s.save(ck)
            w = s.get_param("w").copy()
        assert mn.checkpoint_meta(ck, "note") == "from python"
        with mn.Session(g, optimizer=mn.AdamW(lr=0.05, weight_decay=0.0), seed=99) as s2:
            assert not np.array_equal(s2.get_param("w"), w)
            s2.load(ck)
            np.testing.assert_array_equal(s2.get_param("w"), w)
            assert s2.step_count == 301
        with mn.Session(g) as inf:  # inference loads the parameters only
            assert not inf.training
            inf.load(ck)
            inf.run(x=x)
            np.testing.assert_allclose(inf.output("pred"), y, atol=0.05)


def test_schedule_sgd_and_set_param():
    x, y = regression_data()
    with mn.Graph() as g:
        regression(g)
        opt = mn.SGD(lr=0.1, momentum=0.9, schedule="warmup_cosine", warmup_steps=10, total_steps=20, min_lr=0.0)
        with mn.Session(g, optimizer=opt) as s:
            lrs = []
            for _ in range(20):
                lrs.append(s.lr)
                s.step(x=x, y=y)
            assert lrs[0] < lrs[9] and abs(lrs[10] - 0.1) < 1e-6 and lrs[-1] < 0.01
            s.set_param("w", np.array([[1.5], [-2.0], [0.5]]))
            s.set_param("b", [0.25])
            s.run(x=x, y=y)
            assert s.loss < 1e-10


def test_outputs_go_into_given_arrays_and_inputs_are_read_in_place():
    x, y = regression_data()
    with mn.Graph() as g:
        regression(g)
        with mn.Session(g, seed=1) as s:
            buf = np.empty((32, 1), np.float32)
            s.run(x=x)
            assert s.output("pred", out=buf) is buf
            s.run(x=np.asfortranarray(x))  # not C-contiguous: copied, same values
            np.testing.assert_array_equal(s.output("pred"), buf)
            s.run(x=x.astype(np.float64))  # converted
            np.testing.assert_array_equal(s.output("pred"), buf)
            with pytest.raises(TypeError):
                s.output("pred", out=np.empty((32, 1), np.float64))
            assert s.numel("pred") == 32
            peak, total = s.memory()
            assert 0 < peak and 0 < total
            assert set(s.memory_arenas()) == {"parameters", "optimizer", "io", "work"}
            assert "matmul" in s.dump("graph") and s.dump("schedule")


def test_run_outputs_and_state():
    with mn.Graph() as g:
        x = g.input("x", (1, 1, 1, 2))
        pos = g.input("pos", (1,), mn.I32)
        cache = g.state("cache", (1, 1, 3, 2))
        g.output(g.kv_append(cache, x, pos), "cache_out")
        g.output(x * 2.0, "double")
        with mn.Session(g) as s:
            for p in range(3):
                s.run_outputs(["cache_out"], x=np.full((1, 1, 1, 2), p + 1, np.float32), pos=[p])
            np.testing.assert_array_equal(s.output("cache_out")[0, 0], [[1, 1], [2, 2], [3, 3]])


# ---- errors carry the library's messages -------------------------------------------------------

def test_graph_errors():
    with mn.Graph() as g:
        a = g.input("a", (2, 3))
        with pytest.raises(mn.ShapeError, match=r"matmul.*\[2,3\].*\[2,3\]") as e:
            g.matmul(a, a)
        assert e.value.code == "MN_E_SHAPE" and e.value.status == -2
        with pytest.raises(mn.InvalidArgumentError, match="a"):
            g.input("a", (1,))  # the name is taken
        with mn.Graph() as other:
            b = other.input("b", (3, 2))
            with pytest.raises(mn.InvalidArgumentError, match="another graph"):
                g.matmul(a, b)
        assert g.matmul(a, g.input("c", (3, 4))).shape == (2, 4)  # still usable
    with pytest.raises(ValueError, match="closed"):
        g.input("z", (1,))
    with pytest.raises(TypeError):
        g2 = mn.Graph()
        g2.relu(None)


def test_session_errors(tmp_path):
    x, y = regression_data()
    with mn.Graph() as g:
        regression(g)
        with mn.Session(g) as s:
            with pytest.raises(mn.NotFoundError, match="nope"):
                s.set_input("nope", x)
            with pytest.raises(mn.ShapeError, match="'x'"):
                s.set_input("x", x[:3])
            with pytest.raises(mn.StateError):
                s.step(x=x, y=y)  # an inference session
            with pytest.raises(mn.FileError, match="missing.safetensors"):
                s.load(str(tmp_path / "missing.safetensors"))
            bad = tmp_path / "bad.safetensors"
            bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
            with pytest.raises(mn.FormatError, match="bad.safetensors"):
                s.load(str(bad))
            with pytest.raises(mn.FileError):
                s.save(str(tmp_path))  # a directory
        with pytest.raises(ValueError, match="closed"):
            s.run(x=x)
    with mn.Graph() as g:
        g.input("x", (2,))
        with pytest.raises(mn.Error) as e:
            mn.Session(g, optimizer=mn.AdamW())  # training without a loss
        assert e.value.message and e.value.message != e.value.code
    with pytest.raises(TypeError, match="no field"):
        mn.AdamW(learning_rate=1)
    with pytest.raises(mn.FileError):
        mn.checkpoint_meta(str(tmp_path / "none"), "k")


def test_nonfinite_step_raises_and_the_session_goes_on():
    with mn.Graph() as g:
        x = g.input("x", (1, 1))
        w = g.param("w", (1, 1), ("constant", 1))
        g.loss(g.sum(g.log(x @ w)))
        with mn.Session(g, optimizer=mn.SGD(lr=0.1)) as s:
            with pytest.raises(mn.NonFiniteError, match="loss"):
                s.step(x=[[-1.0]])
            assert s.step_count == 0 and s.get_param("w")[0, 0] == 1
            s.step(x=[[2.0]])
            assert s.step_count == 1


def test_loss_scale_unscales_exactly_and_skips_overflows():
    def graph():
        g = mn.Graph()
        x = g.input("x", (4, 3))
        w = g.param("w", (3, 2), ("uniform", -0.5, 0.5))
        y = x @ w
        g.loss(g.sum(y * y))
        return g
    xs = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    with graph() as g, mn.Session(g, optimizer=mn.SGD(lr=0.1), seed=3) as a, \
            mn.Session(g, optimizer=mn.SGD(lr=0.1), seed=3, loss_scale={"init": 2.0 ** 64}) as b:
        assert a.loss_scale == (0.0, 0) and b.loss_scale == (2.0 ** 64, 0)
        b.step(x=xs)  # the scaled squares overflow: skipped, halved
        assert b.step_count == 0 and b.loss_scale == (2.0 ** 63, 1)
        while b.step_count < 2:
            b.step(x=xs)
        a.step(x=xs)
        a.step(x=xs)
        assert np.array_equal(a.get_param("w"), b.get_param("w"))
    with graph() as g:
        with pytest.raises(mn.Error, match="power of two"):
            mn.Session(g, optimizer=mn.SGD(lr=0.1), loss_scale=3)
        with pytest.raises(ValueError, match="no field"):
            mn.Session(g, optimizer=mn.SGD(lr=0.1), loss_scale={"scale": 2})
        with mn.Session(g, optimizer=mn.SGD(lr=0.1), precision="f16", loss_scale=1024) as s:
            s.step(x=xs)
            assert s.loss_scale == (1024.0, 0) and s.step_count == 1


def test_cast_and_16_bit_inputs_and_outputs():
    xs = np.array([1.0, 1.0 + 2.0 ** -11, 65519.0, 65520.0, 2.0 ** -25 * 1.5, -0.0, 0.1], dtype=np.float32)
    with np.errstate(over="ignore"):
        x16 = xs.astype(np.float16)  # 65520 -> inf, as the cast
    with mn.Graph() as g:
        x = g.input("x", (7,))
        h = g.output(g.cast(x, mn.F16), "h")
        g.output(g.cast(x, mn.BF16), "b")
        xh = g.input("xh", (7,), mn.F16)
        g.output(xh * 2.0, "y")
        assert h.dtype == mn.F16
        with mn.Session(g) as s:
            s.run(x=xs, xh=x16)
            assert s.output("h").dtype == np.float16
            assert np.array_equal(s.output("h"), x16)  # numpy rounds to nearest even too
            assert np.array_equal(s.output("y"), 2 * x16.astype(np.float32))
            assert np.array_equal(mn.bf16_decode(s.output("b")), mn.bf16_decode(mn.bf16_encode(xs)))
        with pytest.raises(mn.DtypeError, match="cast: to i32"):
            g.cast(x, mn.I32)


# ---- handles are freed deterministically and on collection ---------------------------------------

def test_handles_are_freed_once(monkeypatch):
    gc.collect()  # other tests' garbage first
    freed = []  # handle addresses, in order (malloc may reuse an address later)
    orig_g, orig_s = _lib.lib.mn_graph_destroy, _lib.lib.mn_session_destroy

    def count(fn):
        def f(h):
            freed.append(h.value if isinstance(h, ctypes.c_void_p) else h)
            fn(h)
        return f
    monkeypatch.setattr(_lib.lib, "mn_graph_destroy", count(orig_g))
    monkeypatch.setattr(_lib.lib, "mn_session_destroy", count(orig_s))
    g = mn.Graph()
    regression(g)
    gh = g.handle.value
    with mn.Session(g) as s:
        sh = s.handle.value
        assert not freed
    assert freed == [sh]                 # at the end of the with block
    s = mn.Session(g)
    sh = s.handle.value
    del s
    gc.collect()
    assert freed[1:] == [sh]             # collected
    g.close()
    g.close()
    assert freed[2:] == [gh]             # close twice frees once
    g2 = mn.Graph()
    gh = g2.handle.value
    del g2
    gc.collect()
    assert freed[3:] == [gh]


# ---- tokenizer and the MNIST reader ----------------------------------------------------------------

def test_tokenizer(root):
    path = os.path.join(root, "tests", "fixtures", "tokenizer", "js-smol.json")
    with mn.Tokenizer(path) as tk:
        ids = tk.encode("Hello world")
        assert ids.dtype == np.int32 and list(ids) == [403, 466]  # js-smol.cases.json
        assert tk.decode(ids) == "Hello world"
        assert tk.vocab_size > 466 and tk.id_to_token(466) is not None
    with pytest.raises(mn.Error, match="tokenizer|model|JSON|json"):
        mn.Tokenizer(json="{}")


def test_mnist_reader(tmp_path):
    n = 10 * 801
    labels = np.repeat(np.arange(10, dtype=np.uint8), 801)
    pixels = (np.arange(n * 784) % 251).astype(np.uint8)
    f = tmp_path / "m.bin"
    f.write_bytes(b"MNDS" + np.array([1, n, 28, 28], "<u4").tobytes() + pixels.tobytes() + labels.tobytes())
    tx, ty, vx, vy = mn.mnist.load(str(f))
    assert tx.shape == (8000, 784) and vx.shape == (10, 784) and list(vy) == list(range(10))
    assert tx.dtype == np.float32 and 0 <= tx.min() and tx.max() <= 1
    np.testing.assert_allclose(vx[0], pixels[800 * 784:801 * 784] / 255, rtol=1e-6)
    f.write_bytes(b"MNDX" + f.read_bytes()[4:])
    with pytest.raises(ValueError, match="MNDS"):
        mn.mnist.load(str(f))


# ---- Vulkan against the CPU ------------------------------------------------------------------------

def test_vulkan_training_matches_cpu(vulkan_device):
    x, y = regression_data()
    results = {}
    with mn.Graph() as g:
        regression(g)
        for backend, dev in (("cpu", None), ("vulkan", vulkan_device)):
            with mn.Session(g, backend=backend, device=dev, optimizer=mn.AdamW(lr=0.01), seed=5) as s:
                losses = [s.step(x=x, y=y) for _ in range(5)]
                s.run(x=x, y=y)
                results[backend] = (losses, s.output("pred"), s.get_param("w"))
    for a, b in zip(results["cpu"], results["vulkan"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
