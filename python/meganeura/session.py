"""session.py - running a graph: Session, Device, optimizers, checkpoints.

    opt = mn.AdamW(lr=1e-3, weight_decay=0.01)
    with mn.Session(g, backend="vulkan", optimizer=opt, seed=1) as s:
        loss = s.step(x=images, y=labels)      # forward + backward + update
        s.save("model.safetensors")
        s.run(x=images)                        # forward only
        logits = s.output("logits")            # numpy, shaped as in the graph

Arrays go in without a copy when they are C-contiguous and of the input's
dtype (float32, or int32 for I32 inputs): the library reads them in place.
Results are numpy arrays the library writes into directly (pass out= to
reuse one). Errors raise meganeura.Error subclasses carrying
mn_session_error's message; a step whose loss or gradient is not finite
raises NonFiniteError (the session stays usable).

Does not: build graphs (graph.py), or keep the graph alive (the session
copied what it needs when it was created).
"""
import ctypes
import os
from ctypes import byref, c_char_p, c_float, c_int64, c_size_t

import numpy as np

from ._lib import Handle, P, capture, check, error, lib, mn_optimizer, mn_session_options
from .graph import BF16, F32, NUMPY, Graph

BACKENDS = {"cpu": 0, "vulkan": 1}
OPTIMIZERS = {"sgd": 0, "adam": 1, "adamw": 2}
SCHEDULES = {"constant": 0, "warmup_cosine": 1}
NONFINITE = {"skip": 0, "apply": 1, "unchecked": 2}
PRECISION = {"strict": 0, "bf16": 1, "f16": 2}
MEMORY_ARENAS = ("parameters", "optimizer", "io", "work")


def bf16_encode(x):
    """float values -> their bf16 encodings (uint16), rounded to nearest, ties to even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), r)


def bf16_decode(h):
    """bf16 encodings (uint16) -> float32 values (exact)."""
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _choice(table, v, what):
    if isinstance(v, int):
        return v
    if v not in table:
        raise ValueError("meganeura: %s must be one of %s, got %r" % (what, ", ".join(table), v))
    return table[v]


class Optimizer:
    """An optimizer: mn_optimizer_default(kind) with the given fields changed
    (lr, momentum, nesterov, beta1, beta2, eps, weight_decay, clip_norm,
    schedule "constant"/"warmup_cosine", warmup_steps, total_steps, min_lr)."""

    def __init__(self, kind="adamw", **fields):
        self.kind = kind
        self.fields = fields
        self.struct()  # checks the names now

    def struct(self):
        o = lib.mn_optimizer_default(_choice(OPTIMIZERS, self.kind, "optimizer"))
        names = {f for f, _ in mn_optimizer._fields_} - {"kind"}
        for k, v in self.fields.items():
            if k not in names:
                raise TypeError("meganeura: optimizer has no field %r (fields: %s)" % (k, ", ".join(sorted(names))))
            if k == "schedule":
                v = _choice(SCHEDULES, v, "schedule")
            setattr(o, k, v)
        return o

    def __repr__(self):
        return "Optimizer(%r, %s)" % (self.kind, ", ".join("%s=%r" % kv for kv in self.fields.items()))


def SGD(**fields):
    return Optimizer("sgd", **fields)


def Adam(**fields):
    return Optimizer("adam", **fields)


def AdamW(**fields):
    return Optimizer("adamw", **fields)


class Device(Handle):
    """A backend's device opened once and shared by sessions (mn_device)."""

    _what = "device"
    _destroy = staticmethod(lambda h: lib.mn_device_close(h))

    def __init__(self, backend="vulkan"):
        h = P()
        st = lib.mn_device_open(byref(h), _choice(BACKENDS, backend, "backend"))
        if st != 0:
            msg = lib.mn_device_error(h) if h else None
            lib.mn_device_close(h)
            raise error(st, (msg or b"").decode("utf-8", "replace"))
        self._h = h
        self.backend = backend


class Session(Handle):
    """A graph compiled for a backend (mn_session). training=None means
    training when an optimizer is given. Free it with close() or a with
    block; it is also freed when collected. precision: "strict", "bf16" or
    "f16" (the fast contract's matrix products); loss_scale: None, the
    first scale of dynamic loss scaling (a power of two, e.g. 65536), or a
    dict of mn_loss_scale's fields (init, growth, backoff, interval)."""

    def __init__(self, graph, backend="cpu", training=None, optimizer=None, seed=0, device=None,
                 nonfinite="skip", precision="strict", loss_scale=None):
        if not isinstance(graph, Graph):
            raise TypeError("meganeura: Session needs a Graph, got %s" % type(graph).__name__)
        if training is None:
            training = optimizer is not None
        o = lib.mn_session_default_options()
        o.backend = _choice(BACKENDS, backend, "backend")
        o.mode = 1 if training else 0
        if optimizer is not None:
            o.optim = optimizer.struct() if isinstance(optimizer, Optimizer) else Optimizer(optimizer).struct()
        o.seed = int(seed)
        o.device = device._h if device is not None else None
        o.nonfinite = _choice(NONFINITE, nonfinite, "nonfinite")
        o.precision = _choice(PRECISION, precision, "precision")
        if isinstance(loss_scale, dict):
            for k, v in loss_scale.items():
                if k not in ("init", "growth", "backoff", "interval"):
                    raise ValueError("meganeura: loss_scale has no field %r (init, growth, backoff, interval)" % k)
                setattr(o.loss_scale, k, v)
        elif loss_scale is not None:
            o.loss_scale.init = float(loss_scale)
        h = P()
        st = lib.mn_session_create(byref(h), graph.handle, byref(o))
        if st != 0:
            msg = lib.mn_session_error(h) if h else None
            lib.mn_session_destroy(h)
            raise error(st, (msg or b"").decode("utf-8", "replace"))
        self._h = h
        self._device = device  # kept alive with the session
        self.backend = backend
        self.training = bool(training)
        self.inputs = dict(graph.inputs)
        self.params = dict(graph.params)
        self.outputs = dict(graph.outputs)

    # -- lifetime --
    _what = "session"
    _destroy = staticmethod(lambda h: lib.mn_session_destroy(h))

    def close(self):
        super().close()
        self._device = None

    def _check(self, st):
        return check(st, lambda: lib.mn_session_error(self.handle))

    # -- data in --
    def set_input(self, name, data):
        """Copies data into the named input; a C-contiguous array of the
        input's dtype is read in place (no intermediate copy)."""
        shape, dt = self.inputs.get(name, (None, F32))
        if dt == BF16 and np.asarray(data).dtype != np.uint16:  # floats: their bf16 encodings
            data = bf16_encode(data)
        a = np.ascontiguousarray(data, dtype=NUMPY.get(dt, np.float32))
        if shape is not None and a.size != int(np.prod(shape)):
            raise error(-2, "input '%s' is %s (%d elements); got an array of shape %s (%d elements)" %
                        (name, list(shape), int(np.prod(shape)), list(a.shape), a.size))
        self._check(lib.mn_session_set_input(self.handle, name.encode(), a.ctypes.data, a.nbytes))

    def set_inputs(self, inputs=None, **kw):
        for k, v in dict(inputs or {}, **kw).items():
            self.set_input(k, v)

    # -- running --
    def step(self, inputs=None, **kw):
        """Sets the given inputs, runs forward + backward + the optimizer
        update, returns the loss (a float)."""
        self.set_inputs(inputs, **kw)
        self._check(lib.mn_session_step(self.handle))
        return self.loss

    def run(self, inputs=None, **kw):
        """Sets the given inputs and runs forward only."""
        self.set_inputs(inputs, **kw)
        self._check(lib.mn_session_run(self.handle))

    def run_outputs(self, names, inputs=None, **kw):
        """Forward, only what the named outputs need (mn_session_run_outputs)."""
        self.set_inputs(inputs, **kw)
        arr = (c_char_p * max(1, len(names)))(*[n.encode() for n in names])
        self._check(lib.mn_session_run_outputs(self.handle, arr, len(names)))

    # -- results --
    @property
    def loss(self):
        v = c_float()
        self._check(lib.mn_session_loss(self.handle, byref(v)))
        return v.value

    def output(self, name, out=None):
        """The named output as a numpy array of its graph shape (written
        into out when given: C-contiguous, right dtype and size)."""
        shape, dt = self.outputs.get(name, (None, F32))
        if shape is None:
            shape = (self.numel(name),)
        return self._read(lib.mn_session_output, name, shape, NUMPY.get(dt, np.float32), out, pass_bytes=True)

    def numel(self, name):
        n = c_size_t()
        self._check(lib.mn_session_numel(self.handle, name.encode(), byref(n)))
        return n.value

    def get_param(self, name, out=None):
        shape = self.params.get(name) or (self.numel(name),)
        return self._read(lib.mn_session_get_param, name, shape, np.float32, out, pass_bytes=False)

    def set_param(self, name, data):
        a = np.ascontiguousarray(data, dtype=np.float32)
        self._check(lib.mn_session_set_param(self.handle, name.encode(), a.ctypes.data, a.size))

    def _read(self, fn, name, shape, dtype, out, pass_bytes):
        if out is None:
            out = np.empty(shape, dtype=dtype)
        elif not (isinstance(out, np.ndarray) and out.dtype == dtype and out.flags.c_contiguous and
                  out.flags.writeable):
            raise TypeError("meganeura: out= must be a writeable C-contiguous %s array" % np.dtype(dtype).name)
        self._check(fn(self.handle, name.encode(), out.ctypes.data, out.nbytes if pass_bytes else out.size))
        return out

    @property
    def step_count(self):
        return lib.mn_session_step_count(self.handle)

    @property
    def loss_scale(self):
        """(scale of the next step or 0 without loss scaling, overflowed steps skipped)."""
        n = c_int64()
        return lib.mn_session_loss_scale(self.handle, byref(n)), n.value

    @property
    def lr(self):
        """The learning rate of the next step."""
        return lib.mn_session_lr(self.handle)

    # -- checkpoints --
    def save(self, path):
        """Saves parameters, optimizer state and step count (safetensors, atomic)."""
        self._check(lib.mn_session_save(self.handle, _path(path)))

    def load(self, path):
        self._check(lib.mn_session_load(self.handle, _path(path)))

    def set_meta(self, key, value):
        self._check(lib.mn_session_set_meta(self.handle, key.encode(), value.encode()))

    # -- introspection --
    def memory(self):
        """(peak bytes of the arenas, sum of all tensor sizes)."""
        peak, total = c_size_t(), c_size_t()
        self._check(lib.mn_session_memory(self.handle, byref(peak), byref(total)))
        return peak.value, total.value

    def memory_arenas(self):
        arr = (c_size_t * len(MEMORY_ARENAS))()
        self._check(lib.mn_session_memory_arenas(self.handle, arr))
        return dict(zip(MEMORY_ARENAS, list(arr)))

    def dump(self, what="graph"):
        """mn_session_dump: "graph", "schedule", "kernels" or "memplan"."""
        st, text = capture(lambda f: lib.mn_session_dump(self.handle, what.encode(), f))
        self._check(st)
        return text


def _path(p):
    return os.fsencode(p)


def checkpoint_meta(path, key):
    """One metadata value of a checkpoint file."""
    dst = ctypes.create_string_buffer(4096)
    err = ctypes.create_string_buffer(1024)
    check(lib.mn_checkpoint_meta(_path(path), key.encode(), dst, len(dst), err, len(err)), lambda: err.value)
    return dst.value.decode("utf-8", "replace")


def list_devices():
    """mn_list_devices's text (the Vulkan devices and their limits)."""
    st, text = capture(lambda f: lib.mn_list_devices(f))
    check(st, lambda: "listing the Vulkan devices failed: " + text.strip())
    return text

