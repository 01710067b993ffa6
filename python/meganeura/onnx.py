"""onnx.py - importing ONNX models (include/meganeura_onnx.h) into a Graph.

    with mn.Graph() as g:
        m = mn.onnx.load(g, "model.onnx", dims={"batch": 2})
        with mn.Session(g) as s:
            m.init(s)                              # the initializers' values
            m.set_input(s, "input", x)             # in the model's ONNX type
            s.run()
            y = m.output(s, "logits")              # in the model's ONNX type

The model's initializers become parameters of the graph (fine-tune them with
a loss on m.tensor("logits"), a Tensor of the graph), its inputs and outputs
graph inputs and outputs; m.inputs and m.outputs describe them. Everything the
importer cannot honour is listed in one UnsupportedError.

Does not: parse anything itself (the library does, treating the file as
hostile), or exist when the library was built without MN_ONNX (available()
says so; load raises UnsupportedError).
"""
import ctypes
from ctypes import POINTER, Structure, byref, c_bool, c_char_p, c_int, c_int32, c_int64, c_size_t, c_void_p

import numpy as np

from ._lib import Handle, P, PT, ST, _dll, check, error, lib
from .graph import F32, Graph, Tensor

MAX_RANK = 8  # MN_ONNX_MAX_RANK

# mn_onnx_dtype (TensorProto.DataType) -> numpy
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
          9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
ONNX_OF = {np.dtype(v): k for k, v in DTYPES.items()}


class mn_onnx_dim(Structure):
    _fields_ = [("name", c_void_p), ("value", c_int64)]


class mn_onnx_input(Structure):
    _fields_ = [("name", c_void_p), ("position", c_int), ("rank", c_int), ("shape", c_void_p),
                ("value", c_void_p), ("bytes", c_size_t), ("hint", c_bool)]


class mn_onnx_options(Structure):
    _fields_ = [("dims", c_void_p), ("n_dims", c_int), ("inputs", c_void_p), ("n_inputs", c_int),
                ("default_dim", c_int64), ("freeze", c_bool), ("constants", c_bool), ("prefix", c_void_p)]


class mn_onnx_io(Structure):
    _fields_ = [("name", c_void_p), ("graph_name", c_void_p), ("position", c_int), ("onnx_dtype", c_int),
                ("dtype", c_int), ("rank", c_int), ("shape", c_int64 * MAX_RANK), ("tensor", c_int32)]


class mn_onnx_tensor(Structure):
    _fields_ = [("name", c_void_p), ("dtype", c_int), ("rank", c_int), ("shape", c_int64 * MAX_RANK),
                ("numel", c_int64), ("data", c_void_p), ("bytes", c_size_t)]


STRUCTS = [mn_onnx_dim, mn_onnx_input, mn_onnx_options, mn_onnx_io, mn_onnx_tensor]

_ERR = 1024
for _name, _sig in {
    "mn_onnx_default_options": (mn_onnx_options, []),
    "mn_onnx_load": (ST, [POINTER(P), P, c_char_p, POINTER(mn_onnx_options), c_char_p, c_size_t]),
    "mn_onnx_load_memory": (ST, [POINTER(P), P, c_char_p, c_size_t, POINTER(mn_onnx_options), c_char_p,
                                 c_size_t]),
    "mn_onnx_destroy": (None, [P]),
    "mn_onnx_error": (c_char_p, [P]),
    "mn_onnx_init_session": (ST, [P, P]),
    "mn_onnx_input_count": (c_int, [P]),
    "mn_onnx_input_at": (ST, [P, c_int, POINTER(mn_onnx_io)]),
    "mn_onnx_output_count": (c_int, [P]),
    "mn_onnx_output_at": (ST, [P, c_int, POINTER(mn_onnx_io)]),
    "mn_onnx_find": (ST, [P, c_char_p, PT]),
    "mn_onnx_set_input": (ST, [P, P, c_char_p, c_void_p, c_size_t]),
    "mn_onnx_get_output": (ST, [P, P, c_char_p, c_void_p, c_size_t]),
    "mn_onnx_tensor_read": (ST, [POINTER(mn_onnx_tensor), c_char_p, c_char_p, c_size_t]),
    "mn_onnx_tensor_free": (None, [POINTER(mn_onnx_tensor)]),
}.items():
    lib.declare(_name, *_sig)


def available():
    """True when the library was built with the ONNX importer (MN_ONNX)."""
    return hasattr(_dll, "mn_onnx_load")


def _need():
    if not available():
        raise error(-8, "this libmeganeura.so was built without the ONNX importer (MN_ONNX=OFF)")


def _io(st):
    return {"name": ctypes.string_at(st.name).decode(), "graph_name": ctypes.string_at(st.graph_name).decode(),
            "position": st.position, "onnx_dtype": st.onnx_dtype, "dtype": st.dtype,
            "shape": tuple(st.shape[:st.rank]), "tensor": st.tensor}


class Model(Handle):
    """An imported model (mn_onnx): .inputs and .outputs (lists of dicts:
    name, graph_name, position, onnx_dtype, dtype, shape, tensor), and the
    calls that move data between a session and the model's types."""

    _what = "ONNX model"
    _destroy = staticmethod(lambda h: lib.mn_onnx_destroy(h))

    def __init__(self, graph, handle):
        self.graph, self._h = graph, handle
        self.inputs, self.outputs = [], []
        for count, at, lst in ((lib.mn_onnx_input_count, lib.mn_onnx_input_at, self.inputs),
                               (lib.mn_onnx_output_count, lib.mn_onnx_output_at, self.outputs)):
            for i in range(count(handle)):
                st = mn_onnx_io()
                self._check(at(handle, i, byref(st)))
                lst.append(_io(st))
        # the Graph's own records, so that Session.set_input/output know the shapes
        for io in self.inputs:
            graph.inputs[io["graph_name"]] = (io["shape"], io["dtype"])
        for io in self.outputs:
            if io["tensor"] >= 0:
                graph.outputs[io["graph_name"]] = (io["shape"], io["dtype"])

    def _check(self, st):
        return check(st, lambda: lib.mn_onnx_error(self._h) if self._h else b"")

    def _find_io(self, lst, name, what):
        for io in lst:
            if io["name"] == name:
                return io
        raise error(-7, "the model has no %s '%s' (it has: %s)" % (what, name, ", ".join(i["name"] for i in lst)))

    def tensor(self, name):
        """The graph Tensor of an output or any value computed in the graph
        (to attach a loss); NotFoundError for values folded at import."""
        out = c_int32()
        self._check(lib.mn_onnx_find(self.handle, name.encode(), byref(out)))
        dt = next((o["dtype"] for o in self.inputs + self.outputs if o["name"] == name), F32)
        return Tensor(self.graph, out.value, dt)

    def init(self, session):
        """Writes the initializers' values into the session's parameters."""
        self._check(lib.mn_onnx_init_session(self.handle, session.handle))

    def set_input(self, session, name, data):
        """Feeds the input `name` (its ONNX name) from data, converted to the
        type the model declares (int64 ids, bool conditions, float)."""
        io = self._find_io(self.inputs, name, "input")
        a = np.ascontiguousarray(data, dtype=DTYPES.get(io["onnx_dtype"], np.float32))
        self._check(lib.mn_onnx_set_input(self.handle, session.handle, name.encode(), a.ctypes.data, a.nbytes))

    def output(self, session, name):
        """The output `name` in the type the model declares, of its shape."""
        io = self._find_io(self.outputs, name, "output")
        out = np.empty(io["shape"], dtype=DTYPES.get(io["onnx_dtype"], np.float32))
        self._check(lib.mn_onnx_get_output(self.handle, session.handle, name.encode(), out.ctypes.data,
                                           out.nbytes))
        return out


def load(graph, model, dims=None, default_dim=0, inputs=None, freeze=False, constants=False, prefix=None):
    """Imports model (a path, or the bytes of a ModelProto) into graph.
    dims: {symbolic dimension: size}; default_dim: the size of any other;
    inputs: {input name: shape tuple, or an array (made a constant of the
    graph), or ("hint", array) (a run-time input whose value the import may
    use; the value fed later must be the same)}; freeze: the initializers
    get no gradient; constants: they become constants (inference only);
    prefix: prepended to every name the graph declares."""
    _need()
    if not isinstance(graph, Graph):
        raise TypeError("meganeura: onnx.load needs a Graph, got %s" % type(graph).__name__)
    keep = []  # everything the options point at, alive until the call returns

    def cstr(s):
        b = ctypes.create_string_buffer(s.encode())
        keep.append(b)
        return ctypes.addressof(b)

    o = lib.mn_onnx_default_options()
    o.default_dim, o.freeze, o.constants = int(default_dim), bool(freeze), bool(constants)
    if prefix:
        o.prefix = cstr(prefix)
    if dims:
        arr = (mn_onnx_dim * len(dims))(*[mn_onnx_dim(cstr(k), int(v)) for k, v in dims.items()])
        keep.append(arr)
        o.dims, o.n_dims = ctypes.addressof(arr), len(dims)
    if inputs:
        arr = (mn_onnx_input * len(inputs))()
        for i, (name, spec) in enumerate(inputs.items()):
            e = arr[i]
            e.name = cstr(name)
            hint = isinstance(spec, tuple) and len(spec) == 2 and spec[0] == "hint"
            if hint:
                spec = spec[1]
            if isinstance(spec, (tuple, list)) and not hint:
                shape = (c_int64 * max(1, len(spec)))(*[int(d) for d in spec])
                keep.append(shape)
                e.rank, e.shape = len(spec), ctypes.addressof(shape)
                continue
            a = np.ascontiguousarray(spec)
            if a.dtype not in ONNX_OF:
                raise TypeError("meganeura: input '%s': no ONNX type for numpy %s" % (name, a.dtype))
            keep.append(a)
            shape = (c_int64 * max(1, a.ndim))(*a.shape)
            keep.append(shape)
            e.rank, e.shape = a.ndim, ctypes.addressof(shape)
            e.value, e.bytes, e.hint = a.ctypes.data, a.nbytes, hint
        keep.append(arr)
        o.inputs, o.n_inputs = ctypes.addressof(arr), len(inputs)
    h, err = P(), ctypes.create_string_buffer(_ERR)
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        st = lib.mn_onnx_load_memory(byref(h), graph.handle, data, len(data), byref(o), err, _ERR)
    else:
        st = lib.mn_onnx_load(byref(h), graph.handle, str(model).encode(), byref(o), err, _ERR)
    if st != 0:
        raise error(st, err.value.decode("utf-8", "replace"))
    return Model(graph, h)


def read_tensor(path):
    """A serialized TensorProto (.pb, as in the ONNX test data) as a numpy array."""
    _need()
    t, err = mn_onnx_tensor(), ctypes.create_string_buffer(_ERR)
    st = lib.mn_onnx_tensor_read(byref(t), str(path).encode(), err, _ERR)
    if st != 0:
        raise error(st, err.value.decode("utf-8", "replace"))
    try:
        dt = DTYPES.get(t.dtype)
        if dt is None:
            raise error(-8, "%s: tensor type %d has no numpy type here" % (path, t.dtype))
        raw = ctypes.string_at(t.data, t.bytes) if t.bytes else b""
        return np.frombuffer(raw, dtype=dt).reshape(tuple(t.shape[:t.rank])).copy()
    finally:
        lib.mn_onnx_tensor_free(byref(t))
