"""graph.py - building a graph: Graph, Tensor, the op constructors.

    with mn.Graph() as g:
        x = g.input("x", (64, 784))
        y = g.input("y", (64,), mn.I32)
        w = g.param("fc.weight", (784, 10), init="kaiming_uniform")
        b = g.param("fc.bias", (10,))
        logits = g.output(x @ w + b, "logits")
        g.loss(g.cross_entropy(logits, y))

Every op of include/meganeura.h that records a node (mn_<op>(g, &out, ...))
is a method of Graph, named without the prefix: most are generated from the
one-line signatures in OPS below, the few that take a parameter struct or
several tensors are written out. A Tensor is a handle into its graph; its
arithmetic operators (+ - * / @ ** unary -) and its methods (x.relu(),
x.reshape(...), any op whose first argument is a tensor) record ops too. A
Python number or a numpy array where a tensor is expected becomes a
constant. A failed call raises the library's error (meganeura.Error and its
subclasses) with mn_graph_error's message; the graph is left unchanged.

Does not: run anything (session.py), or check shapes itself (the library
does, naming the op and the shapes).
"""
from ctypes import POINTER, byref, c_bool, c_float, c_int, c_int32, c_int64, c_uint64

import numpy as np

from ._lib import (Handle, PT, ST, P, check, lib, mn_attention_params, mn_conv1d_params,
                   mn_conv2d_params, mn_conv_transpose2d_params, mn_cross_entropy_params, mn_init,
                   mn_pool2d_params, capture)

# dtypes (mn_dtype): the numpy type of each
F32, F16, BF16, I32 = 0, 1, 2, 3
DTYPE_NAMES = {F32: "f32", F16: "f16", BF16: "bf16", I32: "i32"}
NUMPY = {F32: np.float32, F16: np.float16, BF16: np.uint16, I32: np.int32}  # bf16: the raw 16-bit encodings
NONE = -1        # MN_NONE
ALL_AXES = 127   # MN_ALL_AXES
MAX_RANK = 4

INIT_KINDS = {"zeros": 0, "constant": 1, "uniform": 2, "normal": 3, "xavier_uniform": 4,
              "xavier_normal": 5, "kaiming_uniform": 6, "kaiming_normal": 7}


def Init(kind="zeros", a=0.0, b=0.0):
    """A parameter initialiser (mn_init): Init("normal", 0, 0.02), Init("constant", 1)..."""
    if kind not in INIT_KINDS:
        raise ValueError("meganeura: unknown init %r (one of %s)" % (kind, ", ".join(INIT_KINDS)))
    return mn_init(INIT_KINDS[kind], a, b)


def _init(v):
    if isinstance(v, mn_init):
        return v
    if isinstance(v, str):
        return Init(v)
    if isinstance(v, (tuple, list)):
        return Init(*v)
    raise TypeError("meganeura: init must be a name, a (name, a, b) tuple or Init(...), got %r" % (v,))


def _shape(shape):
    shape = tuple(int(d) for d in shape)
    return len(shape), (c_int64 * max(1, len(shape)))(*shape)


def _pair(v, name):
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) != 2:
        raise ValueError("meganeura: %s must be an int or a pair, got %r" % (name, v))
    return v


class Tensor:
    """A node of a graph: .graph, .handle (the mn_tensor), .dtype, .shape."""
    __slots__ = ("graph", "handle", "dtype")
    __array_ufunc__ = None  # numpy_array + tensor defers to Tensor.__radd__ (a constant)

    def __init__(self, graph, handle, dtype=F32):
        self.graph, self.handle, self.dtype = graph, handle, dtype

    @property
    def shape(self):
        return self.graph.shape(self)

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        try:
            return "Tensor(%d, shape=%s, %s)" % (self.handle, self.shape, DTYPE_NAMES.get(self.dtype, "?"))
        except Exception:
            return "Tensor(%d)" % self.handle

    # arithmetic records ops; a number on either side becomes a constant (scale for *)
    def __add__(self, o): return self.graph.add(self, o)
    def __radd__(self, o): return self.graph.add(o, self)
    def __sub__(self, o): return self.graph.sub(self, o)
    def __rsub__(self, o): return self.graph.sub(o, self)
    def __truediv__(self, o): return self.graph.div(self, o)
    def __rtruediv__(self, o): return self.graph.div(o, self)
    def __matmul__(self, o): return self.graph.matmul(self, o)
    def __rmatmul__(self, o): return self.graph.matmul(o, self)
    def __neg__(self): return self.graph.neg(self)
    def __pow__(self, p): return self.graph.pow(self, float(p))

    def __mul__(self, o):
        if isinstance(o, (int, float)):
            return self.graph.scale(self, float(o))
        return self.graph.mul(self, o)

    __rmul__ = __mul__

    def __getattr__(self, name):
        # x.relu(), x.reshape((2, -1)), x.softmax(): ops with x first
        if name in Graph._TENSOR_FIRST:
            op = getattr(self.graph, name)
            return lambda *a, **k: op(self, *a, **k)
        raise AttributeError("'Tensor' object has no attribute %r" % name)

    def __bool__(self):
        raise TypeError("meganeura: a Tensor has no truth value (it is a node of a graph, not data)")


# ---- op signatures ---------------------------------------------------------------
# After (g, &out): name:kind[=default] per argument. Kinds: t tensor, t? optional
# tensor (None: MN_NONE), f float, i int, b bool, u uint64, l int64, S shape
# (rank + int64 array), P permutation (int array of x's rank), L int64 array of
# x's rank. Layout ops (LAYOUT) keep their first input's dtype; the rest give f32.
OPS = {
    "matmul": "a:t b:t",
    "matmul_ex": "a:t b:t trans_a:b=False trans_b:b=False",
    "add": "a:t b:t", "sub": "a:t b:t", "mul": "a:t b:t", "div": "a:t b:t",
    "scale": "x:t s:f",
    "neg": "x:t", "exp": "x:t", "log": "x:t", "sqrt": "x:t", "rsqrt": "x:t", "relu": "x:t",
    "sigmoid": "x:t", "tanh": "x:t", "gelu": "x:t", "gelu_tanh": "x:t", "silu": "x:t", "sin": "x:t", "cos": "x:t",
    "abs": "x:t", "softmax": "x:t", "log_softmax": "x:t", "stop_gradient": "x:t",
    "global_avg_pool": "x:t", "upsample_nearest2x": "x:t",
    "sum": "x:t axis:i=127 keepdim:b=False",
    "mean": "x:t axis:i=127 keepdim:b=False",
    "max": "x:t axis:i=127 keepdim:b=False",
    "reshape": "x:t shape:S",
    "permute": "x:t perm:P",
    "transpose": "x:t axis0:i axis1:i",
    "broadcast_to": "x:t shape:S",
    "slice": "x:t axis:i start:l length:l",
    "pad": "x:t before:L after:L",
    "cross_entropy_dense": "logits:t targets:t",
    "mse": "a:t b:t", "l1_loss": "a:t b:t", "bce_with_logits": "logits:t targets:t",
    "clamp": "x:t min:f=-inf max:f=inf",
    "pow": "x:t p:f",
    "where": "cond:t a:t b:t",
    "dropout": "x:t p:f seed:u=0",
    "dropout_ex": "x:t p:f seed:u counter:t",
    "rms_norm": "x:t weight:t?=None eps:f=1e-6",
    "layer_norm": "x:t weight:t?=None bias:t?=None eps:f=1e-5",
    "group_norm": "x:t groups:i weight:t?=None bias:t?=None eps:f=1e-5",
    "swiglu": "a:t b:t", "geglu": "a:t b:t",
    "upsample_nearest2d": "x:t scale_h:i scale_w:i",
    "batch_norm2d": "x:t weight:t? bias:t? running_mean:t running_var:t momentum:f=0.1 eps:f=1e-5 training:b",
    "embedding": "table:t ids:t",
    "rope": "x:t pos:t?=None theta:f=0 offset:l=0",
    "kv_append": "cache:t x:t pos:t",
}
LAYOUT = {"reshape", "permute", "transpose", "broadcast_to", "slice", "pad", "stop_gradient", "concat",
          "split"}
_CTYPES = {"t": [c_int32], "t?": [c_int32], "f": [c_float], "i": [c_int], "b": [c_bool], "u": [c_uint64],
           "l": [c_int64], "S": [c_int, POINTER(c_int64)], "P": [POINTER(c_int)], "L": [POINTER(c_int64)]}
_REQUIRED = object()


def _parse(spec):
    out = []
    for tok in spec.split():
        name, kind = tok.split(":")
        default = _REQUIRED
        if "=" in kind:
            kind, d = kind.split("=")
            default = None if d == "None" else {"False": False, "True": True}.get(d, None)
            if default is None and d != "None":
                default = float(d) if kind == "f" else int(d)
        elif kind == "t?":
            default = _REQUIRED
        out.append((name, kind, default))
    return out


def _make_op(opname, spec):
    params = _parse(spec)
    argtypes = [P, PT]
    for _, kind, _ in params:
        argtypes += _CTYPES[kind]
    cname = "mn_" + opname
    lib.declare(cname, ST, argtypes)
    dtype_follows = opname in LAYOUT

    def op(self, *args, **kwargs):
        if len(args) > len(params):
            raise TypeError("%s() takes %d arguments, got %d" % (opname, len(params), len(args)))
        vals = list(args) + [_REQUIRED] * (len(params) - len(args))
        for k, v in kwargs.items():
            idx = next((i for i, p in enumerate(params) if p[0] == k), None)
            if idx is None:
                raise TypeError("%s() has no argument %r" % (opname, k))
            if vals[idx] is not _REQUIRED:
                raise TypeError("%s() got %r twice" % (opname, k))
            vals[idx] = v
        cargs, keep, first = [], [], None
        for (name, kind, default), v in zip(params, vals):
            if v is _REQUIRED:
                v = default
                if v is _REQUIRED:
                    raise TypeError("%s() needs %r" % (opname, name))
            if kind in ("t", "t?"):
                t = self._tensor(v, optional=kind == "t?", what="%s(%s)" % (opname, name))
                if first is None:
                    first = t
                cargs.append(t.handle if t is not None else NONE)
            elif kind == "S":
                rank, arr = _shape(v)
                keep.append(arr)
                cargs += [rank, arr]
            elif kind in ("P", "L"):
                vals_ = [int(e) for e in v]
                arr = ((c_int if kind == "P" else c_int64) * max(1, len(vals_)))(*vals_)
                keep.append(arr)
                cargs.append(arr)
            elif kind == "f":
                cargs.append(float(v))
            elif kind == "b":
                cargs.append(bool(v))
            else:
                cargs.append(int(v))
        out = c_int32()
        self._check(getattr(lib, cname)(self._h, byref(out), *cargs))
        return Tensor(self, out.value, first.dtype if dtype_follows and first is not None else F32)

    op.__name__ = opname
    op.__qualname__ = "Graph." + opname
    op.__doc__ = "%s(%s): records %s (include/meganeura.h)." % (
        opname, ", ".join(n + ("" if d is _REQUIRED else "=%r" % (d,)) for n, _, d in params), cname)
    return op


class Graph(Handle):
    """A graph under construction (mn_graph). Use as a context manager, or
    call close(); the handle is also freed when the object is collected. A
    session copies what it needs, so the graph may be closed once sessions
    exist."""

    _what = "graph"
    _destroy = staticmethod(lambda h: lib.mn_graph_destroy(h))

    def __init__(self):
        h = P()
        check(lib.mn_graph_create(byref(h)), lambda: "cannot create a graph")
        self._h = h
        self.inputs = {}   # name -> (shape, dtype)
        self.params = {}   # name -> shape
        self.states = {}   # name -> shape
        self.outputs = {}  # name -> (shape, dtype)
        self.loss_tensor = None

    def _check(self, st):
        return check(st, lambda: lib.mn_graph_error(self.handle))

    def _tensor(self, v, optional=False, what="argument"):
        if isinstance(v, Tensor):
            return v
        if v is None:
            if optional:
                return None
            raise TypeError("meganeura: %s: a tensor is required, got None" % what)
        if isinstance(v, (bool, int, float, np.floating, np.integer)):
            return self.scalar(float(v))
        if isinstance(v, np.ndarray):
            return self.constant(v)
        raise TypeError("meganeura: %s: expected a Tensor, a number or an array, got %s" % (what, type(v).__name__))

    # -- leaves --
    def input(self, name, shape, dtype=F32):
        """A named input fed before each step/run: f32 (default) or I32."""
        out = c_int32()
        rank, arr = _shape(shape)
        self._check(lib.mn_graph_input(self.handle, byref(out), name.encode(), dtype, rank, arr))
        self.inputs[name] = (tuple(int(d) for d in shape), dtype)
        return Tensor(self, out.value, dtype)

    def param(self, name, shape, init="zeros", lr_mult=None, frozen=False):
        """A trainable f32 parameter. init: "kaiming_uniform", ("normal", mean, std), Init(...)."""
        out = c_int32()
        rank, arr = _shape(shape)
        self._check(lib.mn_graph_param(self.handle, byref(out), name.encode(), rank, arr, _init(init)))
        t = Tensor(self, out.value)
        self.params[name] = tuple(int(d) for d in shape)
        if lr_mult is not None:
            self.param_lr_mult(t, lr_mult)
        if frozen:
            self.param_freeze(t, True)
        return t

    def param_lr_mult(self, param, mult):
        self._check(lib.mn_graph_param_lr_mult(self.handle, param.handle, float(mult)))

    def param_freeze(self, param, frozen=True):
        self._check(lib.mn_graph_param_freeze(self.handle, param.handle, bool(frozen)))

    def constant(self, data):
        """An f32 constant holding a copy of data (any array-like)."""
        a = np.ascontiguousarray(data, dtype=np.float32)
        if a.ndim == 0:
            return self.scalar(float(a))
        out = c_int32()
        rank, arr = _shape(a.shape)
        self._check(lib.mn_graph_constant(self.handle, byref(out), rank, arr, a.ctypes.data))
        return Tensor(self, out.value)

    def scalar(self, value):
        out = c_int32()
        self._check(lib.mn_graph_scalar(self.handle, byref(out), float(value)))
        return Tensor(self, out.value)

    def state(self, name, shape):
        """A persistent f32 tensor (a KV cache), zero at session start."""
        out = c_int32()
        rank, arr = _shape(shape)
        self._check(lib.mn_graph_state(self.handle, byref(out), name.encode(), rank, arr))
        self.states[name] = tuple(int(d) for d in shape)
        return Tensor(self, out.value)

    def cast(self, x, dtype):
        """x rounded to dtype (F32, F16, BF16: to nearest, ties to even); the
        result has that dtype (outputs of F16: numpy float16, BF16: uint16
        encodings)."""
        out = c_int32()
        self._check(lib.mn_cast(self.handle, byref(out), self._tensor(x).handle, int(dtype)))
        return Tensor(self, out.value, int(dtype))

    def output(self, t, name):
        """Marks t as the output `name`; returns t."""
        self._check(lib.mn_graph_output(self.handle, t.handle, name.encode()))
        self.outputs[name] = (self.shape(t), t.dtype)
        return t

    def loss(self, t):
        """Marks the scalar t as the loss minimised by Session.step; returns t."""
        self._check(lib.mn_graph_loss(self.handle, t.handle))
        self.loss_tensor = t
        return t

    def shape(self, t):
        rank = c_int()
        dims = (c_int64 * MAX_RANK)()
        self._check(lib.mn_tensor_shape(self.handle, t.handle, byref(rank), dims))
        return tuple(dims[i] for i in range(rank.value))

    def dump(self):
        """mn_graph_dump's text."""
        st, text = capture(lambda f: lib.mn_graph_dump(self.handle, f))
        self._check(st)
        return text

    # -- ops with parameter structs or several tensors --
    def conv2d(self, x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
        p = mn_conv2d_params(_pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation"),
                             groups)
        return self._op("mn_conv2d", [P, PT, c_int32, c_int32, c_int32, POINTER(mn_conv2d_params)],
                        self._th(x), self._th(w), self._opt(bias), byref(p))

    def conv1d(self, x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
        p = mn_conv1d_params(stride, padding, dilation, groups)
        return self._op("mn_conv1d", [P, PT, c_int32, c_int32, c_int32, POINTER(mn_conv1d_params)],
                        self._th(x), self._th(w), self._opt(bias), byref(p))

    def conv_transpose2d(self, x, w, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
        p = mn_conv_transpose2d_params(_pair(stride, "stride"), _pair(padding, "padding"),
                                       _pair(output_padding, "output_padding"), _pair(dilation, "dilation"), groups)
        return self._op("mn_conv_transpose2d",
                        [P, PT, c_int32, c_int32, c_int32, POINTER(mn_conv_transpose2d_params)],
                        self._th(x), self._th(w), self._opt(bias), byref(p))

    def max_pool2d(self, x, kernel, stride=0, padding=0):
        p = mn_pool2d_params(_pair(kernel, "kernel"), _pair(stride, "stride"), _pair(padding, "padding"))
        return self._op("mn_max_pool2d", [P, PT, c_int32, POINTER(mn_pool2d_params)], self._th(x), byref(p))

    def avg_pool2d(self, x, kernel, stride=0, padding=0, count_include_pad=True):
        p = mn_pool2d_params(_pair(kernel, "kernel"), _pair(stride, "stride"), _pair(padding, "padding"))
        return self._op("mn_avg_pool2d", [P, PT, c_int32, POINTER(mn_pool2d_params), c_bool], self._th(x), byref(p),
                        bool(count_include_pad))

    def attention(self, q, k, v, pos=None, causal=False, window=0, scale=0.0):
        p = mn_attention_params(causal, window, scale)
        return self._op("mn_attention", [P, PT, c_int32, c_int32, c_int32, c_int32, POINTER(mn_attention_params)],
                        self._th(q), self._th(k), self._th(v), self._opt(pos), byref(p))

    def cross_entropy(self, logits, labels, ignore_index=None, label_smoothing=0.0):
        """Mean cross-entropy of logits [B,C] against i32 labels [B]; with
        ignore_index or label_smoothing it is mn_cross_entropy_ex."""
        if ignore_index is None and not label_smoothing:
            return self._op("mn_cross_entropy", [P, PT, c_int32, c_int32], self._th(logits), self._th(labels))
        return self.cross_entropy_ex(logits, labels, ignore_index, label_smoothing)

    def cross_entropy_ex(self, logits, labels, ignore_index=None, label_smoothing=0.0):
        p = mn_cross_entropy_params(ignore_index is not None, ignore_index if ignore_index is not None else 0,
                                    label_smoothing)
        return self._op("mn_cross_entropy_ex", [P, PT, c_int32, c_int32, POINTER(mn_cross_entropy_params)],
                        self._th(logits), self._th(labels), byref(p))

    def concat(self, xs, axis):
        xs = [self._tensor(x) for x in xs]
        arr = (c_int32 * max(1, len(xs)))(*[x.handle for x in xs])
        lib.declare("mn_concat", ST, [P, PT, POINTER(c_int32), c_int, c_int])
        out = c_int32()
        self._check(lib.mn_concat(self.handle, byref(out), arr, len(xs), axis))
        return Tensor(self, out.value, xs[0].dtype if xs else F32)

    def split(self, x, axis, n=None, sizes=None):
        """Cuts axis into n equal parts, or into parts of the given sizes; a list of tensors."""
        if sizes is not None:
            sizes = [int(s) for s in sizes]
            n = len(sizes) if n is None else n
        if n is None:
            raise TypeError("split() needs n or sizes")
        outs = (c_int32 * max(1, n))()
        sz = (c_int64 * max(1, n))(*sizes) if sizes is not None else None
        lib.declare("mn_split", ST, [P, POINTER(c_int32), c_int32, c_int, c_int, POINTER(c_int64)])
        self._check(lib.mn_split(self.handle, outs, self._th(x), axis, n, sz))
        return [Tensor(self, outs[i], getattr(x, "dtype", F32)) for i in range(n)]

    def _opt(self, t):
        return NONE if t is None else self._tensor(t).handle

    def _th(self, t):
        return self._tensor(t).handle

    def _op(self, cname, argtypes, *args):
        """Calls cname(g, &out, *args); tensor arguments are handles already."""
        lib.declare(cname, ST, argtypes)
        out = c_int32()
        self._check(getattr(lib, cname)(self.handle, byref(out), *args))
        return Tensor(self, out.value)

for _name, _spec in OPS.items():
    setattr(Graph, _name, _make_op(_name, _spec))

# ops whose first argument is a tensor, offered as Tensor methods
Graph._TENSOR_FIRST = frozenset(
    [n for n, s in OPS.items() if s.split()[0].endswith(":t")] +
    ["conv2d", "conv1d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "attention", "cross_entropy",
     "cross_entropy_ex", "split"])


def fold_batch_norm(w, b, gamma, beta, mean, var, eps):
    """mn_fold_batch_norm: a convolution's weight w [O, ...] and bias b [O]
    (or None) with an inference batch norm after it folded in; returns
    (w_out, b_out) as new f32 arrays. gamma/beta None mean 1/0."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    O = w.shape[0]
    per = int(np.prod(w.shape[1:])) if w.ndim > 1 else 1
    vec = lambda a: None if a is None else np.ascontiguousarray(a, dtype=np.float32).reshape(O)  # noqa: E731
    b, gamma, beta, mean, var = vec(b), vec(gamma), vec(beta), vec(mean), vec(var)
    w_out = np.empty_like(w)
    b_out = np.empty(O, dtype=np.float32)
    ptr = lambda a: None if a is None else a.ctypes.data  # noqa: E731
    check(lib.mn_fold_batch_norm(w_out.ctypes.data, b_out.ctypes.data, w.ctypes.data, ptr(b), O, per, ptr(gamma),
                                 ptr(beta), ptr(mean), ptr(var), float(eps)),
          lambda: "mn_fold_batch_norm: invalid arguments (%d channels of %d values, eps %g)" % (O, per, eps))
    return w_out, b_out

