"""_lib.py - loading libmeganeura.so, the C declarations (ctypes) and errors.

Where the library comes from, first match wins:
  1. $MEGANEURA_LIB, a path to libmeganeura.so (an error if it cannot load);
  2. the library `make install` put beside this package (_installed.py);
  3. a source checkout's build/release/libmeganeura.so (python/ is beside build/);
  4. libmeganeura.so.0 through the system's loader (LD_LIBRARY_PATH, ldconfig).

Structures mirror include/meganeura.h field for field (tests/test_python_api
checks the names against the header). Functions are declared lazily, on first
use, from the signatures below and those graph.py adds for the ops.

Does not: hold any state but the loaded library.
"""
import ctypes
import os
from ctypes import (POINTER, Structure, c_bool, c_char_p, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint64, c_void_p)

SOVERSION = 0


def _candidates():
    env = os.environ.get("MEGANEURA_LIB")
    if env:
        return [env], True
    paths = []
    try:
        from . import _installed  # written by `cmake --install`
        paths.append(_installed.LIBRARY)
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    paths.append(os.path.join(here, "..", "..", "build", "release", "libmeganeura.so.%d" % SOVERSION))
    paths.append("libmeganeura.so.%d" % SOVERSION)
    return paths, False


def _load():
    paths, strict = _candidates()
    errors = []
    for p in paths:
        if os.sep in p and not os.path.exists(p) and not strict:
            errors.append("%s: no such file" % p)
            continue
        try:
            return ctypes.CDLL(p)
        except OSError as e:
            if strict:
                raise ImportError("meganeura: cannot load MEGANEURA_LIB=%s: %s" % (p, e)) from None
            errors.append(str(e))
    raise ImportError("meganeura: libmeganeura.so not found (build it with `make`, install it with "
                      "`make install`, or set MEGANEURA_LIB to its path); tried:\n  " + "\n  ".join(errors))


_dll = _load()

# ---- structures (include/meganeura.h) ---------------------------------------


class mn_init(Structure):
    _fields_ = [("kind", c_int), ("a", c_float), ("b", c_float)]


class mn_optimizer(Structure):
    _fields_ = [("kind", c_int), ("lr", c_float), ("momentum", c_float), ("nesterov", c_bool),
                ("beta1", c_float), ("beta2", c_float), ("eps", c_float), ("weight_decay", c_float),
                ("clip_norm", c_float), ("schedule", c_int), ("warmup_steps", c_int64),
                ("total_steps", c_int64), ("min_lr", c_float)]


class mn_loss_scale(Structure):
    _fields_ = [("init", c_float), ("growth", c_float), ("backoff", c_float), ("interval", c_int)]


class mn_session_options(Structure):
    _fields_ = [("backend", c_int), ("mode", c_int), ("optim", mn_optimizer), ("seed", c_uint64),
                ("device", c_void_p), ("nonfinite", c_int), ("dist", c_void_p), ("precision", c_int),
                ("loss_scale", mn_loss_scale)]


class mn_conv2d_params(Structure):
    _fields_ = [("stride", c_int * 2), ("padding", c_int * 2), ("dilation", c_int * 2), ("groups", c_int)]


class mn_pool2d_params(Structure):
    _fields_ = [("kernel", c_int * 2), ("stride", c_int * 2), ("padding", c_int * 2)]


class mn_conv1d_params(Structure):
    _fields_ = [("stride", c_int), ("padding", c_int), ("dilation", c_int), ("groups", c_int)]


class mn_conv_transpose2d_params(Structure):
    _fields_ = [("stride", c_int * 2), ("padding", c_int * 2), ("output_padding", c_int * 2),
                ("dilation", c_int * 2), ("groups", c_int)]


class mn_attention_params(Structure):
    _fields_ = [("causal", c_bool), ("window", c_int64), ("scale", c_float)]


class mn_cross_entropy_params(Structure):
    _fields_ = [("use_ignore_index", c_bool), ("ignore_index", c_int32), ("label_smoothing", c_float)]


STRUCTS = [mn_init, mn_optimizer, mn_loss_scale, mn_session_options, mn_conv2d_params, mn_pool2d_params,
           mn_conv1d_params, mn_conv_transpose2d_params, mn_attention_params, mn_cross_entropy_params]

# ---- functions -----------------------------------------------------------------

P = c_void_p          # an opaque handle, a FILE *, or a buffer
T = c_int32           # mn_tensor
ST = c_int            # mn_status
PT = POINTER(c_int32)  # mn_tensor *out
I64P = POINTER(c_int64)
SIZEP = POINTER(c_size_t)

SIGNATURES = {
    "mn_status_str": (c_char_p, [ST]),
    "mn_graph_create": (ST, [POINTER(P)]),
    "mn_graph_destroy": (None, [P]),
    "mn_graph_error": (c_char_p, [P]),
    "mn_graph_input": (ST, [P, PT, c_char_p, c_int, c_int, I64P]),
    "mn_graph_param": (ST, [P, PT, c_char_p, c_int, I64P, mn_init]),
    "mn_graph_param_lr_mult": (ST, [P, T, c_float]),
    "mn_graph_param_freeze": (ST, [P, T, c_bool]),
    "mn_graph_constant": (ST, [P, PT, c_int, I64P, P]),
    "mn_graph_scalar": (ST, [P, PT, c_float]),
    "mn_graph_state": (ST, [P, PT, c_char_p, c_int, I64P]),
    "mn_graph_output": (ST, [P, T, c_char_p]),
    "mn_graph_loss": (ST, [P, T]),
    "mn_tensor_shape": (ST, [P, T, POINTER(c_int), I64P]),
    "mn_cast": (ST, [P, POINTER(c_int32), T, c_int]),
    "mn_graph_dump": (ST, [P, P]),
    "mn_optimizer_default": (mn_optimizer, [c_int]),
    "mn_session_default_options": (mn_session_options, []),
    "mn_device_open": (ST, [POINTER(P), c_int]),
    "mn_device_close": (None, [P]),
    "mn_device_error": (c_char_p, [P]),
    "mn_session_create": (ST, [POINTER(P), P, POINTER(mn_session_options)]),
    "mn_session_destroy": (None, [P]),
    "mn_session_error": (c_char_p, [P]),
    "mn_session_set_input": (ST, [P, c_char_p, P, c_size_t]),
    "mn_session_step": (ST, [P]),
    "mn_session_run": (ST, [P]),
    "mn_session_run_outputs": (ST, [P, POINTER(c_char_p), c_int]),
    "mn_session_loss": (ST, [P, POINTER(c_float)]),
    "mn_session_output": (ST, [P, c_char_p, P, c_size_t]),
    "mn_session_numel": (ST, [P, c_char_p, SIZEP]),
    "mn_session_get_param": (ST, [P, c_char_p, P, c_size_t]),
    "mn_session_set_param": (ST, [P, c_char_p, P, c_size_t]),
    "mn_session_step_count": (c_int64, [P]),
    "mn_session_lr": (c_float, [P]),
    "mn_session_loss_scale": (c_float, [P, POINTER(c_int64)]),
    "mn_session_save": (ST, [P, c_char_p]),
    "mn_session_load": (ST, [P, c_char_p]),
    "mn_session_set_meta": (ST, [P, c_char_p, c_char_p]),
    "mn_checkpoint_meta": (ST, [c_char_p, c_char_p, c_char_p, c_size_t, c_char_p, c_size_t]),
    "mn_checkpoint_check_path": (ST, [c_char_p, c_char_p, c_size_t]),
    "mn_session_memory": (ST, [P, SIZEP, SIZEP]),
    "mn_session_memory_arenas": (ST, [P, SIZEP]),
    "mn_session_dump": (ST, [P, c_char_p, P]),
    "mn_list_devices": (ST, [P]),
    "mn_fold_batch_norm": (ST, [P, P, P, P, c_int64, c_int64, P, P, P, P, c_float]),
    "mn_tokenizer_load": (ST, [POINTER(P), c_char_p, c_char_p, c_size_t]),
    "mn_tokenizer_load_json": (ST, [POINTER(P), c_char_p, c_size_t, c_char_p, c_size_t]),
    "mn_tokenizer_destroy": (None, [P]),
    "mn_tokenizer_error": (c_char_p, [P]),
    "mn_tokenizer_encode": (ST, [P, P, c_size_t, SIZEP, c_char_p, c_size_t, ctypes.c_uint]),
    "mn_tokenizer_decode": (ST, [P, P, c_size_t, SIZEP, P, c_size_t, ctypes.c_uint]),
    "mn_tokenizer_token_to_id": (ST, [P, POINTER(c_int32), c_char_p]),
    "mn_tokenizer_id_to_token": (c_char_p, [P, c_int32]),
    "mn_tokenizer_vocab_size": (c_int32, [P]),
    "mn_tokenizer_is_special": (c_bool, [P, c_int32]),
}


class _Lib:
    """The library's functions, each declared (restype, argtypes) on first use."""

    def __init__(self, dll):
        self._dll = dll

    def declare(self, name, restype, argtypes):
        SIGNATURES[name] = (restype, argtypes)

    def __getattr__(self, name):
        if name not in SIGNATURES:
            raise AttributeError("meganeura: no declaration for %s" % name)
        f = getattr(self._dll, name)
        f.restype, f.argtypes = SIGNATURES[name]
        setattr(self, name, f)
        return f


lib = _Lib(_dll)

# The C library (FILE * streams for the dump functions).
_libc = ctypes.CDLL(None)
_libc.open_memstream.restype = c_void_p
_libc.open_memstream.argtypes = [POINTER(c_void_p), POINTER(c_size_t)]
_libc.fclose.argtypes = [c_void_p]
_libc.free.argtypes = [c_void_p]


def capture(fn):
    """Calls fn(FILE *) on an in-memory stream; returns (status, text)."""
    buf, size = c_void_p(), c_size_t()
    f = _libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not f:
        raise MemoryError("meganeura: open_memstream failed")
    try:
        st = fn(f)
    finally:
        _libc.fclose(f)
    try:
        text = ctypes.string_at(buf, size.value).decode("utf-8", "replace") if buf else ""
    finally:
        _libc.free(buf)
    return st, text

# ---- errors ---------------------------------------------------------------------


def status_name(st):
    return lib.mn_status_str(st).decode()


class Error(Exception):
    """A failed call: .status (the mn_status, negative), .code ("MN_E_SHAPE")
    and the library's message (mn_graph_error, mn_session_error, ...)."""

    def __init__(self, status, message):
        self.status = status
        self.code = status_name(status)
        self.message = message or self.code
        super().__init__(self.message)


class InvalidArgumentError(Error, ValueError):
    pass


class ShapeError(Error, ValueError):
    pass


class DtypeError(Error, TypeError):
    pass


class OutOfMemoryError(Error, MemoryError):
    pass


class FileError(Error):
    pass


class FormatError(Error, ValueError):
    pass


class NotFoundError(Error, LookupError):
    def __str__(self):  # LookupError would quote the message like a key
        return self.message


class UnsupportedError(Error, NotImplementedError):
    pass


class BackendError(Error, RuntimeError):
    pass


class StateError(Error, RuntimeError):
    pass


class NonFiniteError(Error, ArithmeticError):
    pass


_ERRORS = {-1: InvalidArgumentError, -2: ShapeError, -3: DtypeError, -4: OutOfMemoryError, -5: FileError,
           -6: FormatError, -7: NotFoundError, -8: UnsupportedError, -9: BackendError, -10: StateError,
           -11: NonFiniteError}


def error(status, message):
    return _ERRORS.get(status, Error)(status, message)


def check(status, message_fn):
    """Raises the Error for a failed status, with message_fn()'s text."""
    if status != 0:
        msg = message_fn()
        if isinstance(msg, bytes):
            msg = msg.decode("utf-8", "replace")
        raise error(status, msg)
    return status


class Handle:
    """An object owning one C handle (self._h): close() frees it (idempotent),
    `with` closes it, garbage collection closes it too; `handle` is the live
    handle or ValueError naming the object (_what) once it is closed.
    Subclasses define _destroy (the C destructor)."""

    _what = "object"
    _h = None

    def close(self):
        h, self._h = self._h, None
        if h:
            type(self)._destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self):
        if not self._h:
            raise ValueError(f"meganeura: the {self._what} is closed")
        return self._h
