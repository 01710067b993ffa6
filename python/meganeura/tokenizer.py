"""tokenizer.py - Hugging Face tokenizer.json through mn_tokenizer_*.

    tk = mn.Tokenizer("tokenizer.json")
    ids = tk.encode("Hello world", add_special=True)   # numpy int32
    text = tk.decode(ids, skip_special=True)

Does not: train tokenizers, pad or truncate.
"""
import ctypes
import os
from ctypes import byref, c_int32, c_size_t

import numpy as np

from ._lib import P, check, error, lib

ADD_SPECIAL, SPECIAL_AS_TEXT, SKIP_SPECIAL = 1, 2, 4


class Tokenizer:
    """A tokenizer.json (byte-level BPE); the same ids as the tokenizers library."""

    def __init__(self, path=None, json=None):
        if (path is None) == (json is None):
            raise TypeError("meganeura: Tokenizer needs a path or json= text, not both")
        h = P()
        err = ctypes.create_string_buffer(2048)
        if path is not None:
            st = lib.mn_tokenizer_load(byref(h), os.fsencode(path), err, len(err))
        else:
            data = json.encode() if isinstance(json, str) else bytes(json)
            st = lib.mn_tokenizer_load_json(byref(h), data, len(data), err, len(err))
        if st != 0:
            raise error(st, err.value.decode("utf-8", "replace"))
        self._h = h

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            lib.mn_tokenizer_destroy(h)

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
            raise ValueError("meganeura: the tokenizer is closed")
        return self._h

    def _check(self, st):
        return check(st, lambda: lib.mn_tokenizer_error(self.handle))

    def encode(self, text, add_special=False, special_as_text=False):
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        flags = (ADD_SPECIAL if add_special else 0) | (SPECIAL_AS_TEXT if special_as_text else 0)
        n = c_size_t()
        self._check(lib.mn_tokenizer_encode(self.handle, None, 0, byref(n), data, len(data), flags))
        ids = np.empty(n.value, dtype=np.int32)
        self._check(lib.mn_tokenizer_encode(self.handle, ids.ctypes.data, ids.size, byref(n), data, len(data), flags))
        return ids

    def decode(self, ids, skip_special=False):
        a = np.ascontiguousarray(ids, dtype=np.int32)
        flags = SKIP_SPECIAL if skip_special else 0
        n = c_size_t()
        self._check(lib.mn_tokenizer_decode(self.handle, None, 0, byref(n), a.ctypes.data, a.size, flags))
        buf = ctypes.create_string_buffer(n.value + 1)
        self._check(lib.mn_tokenizer_decode(self.handle, buf, len(buf), byref(n), a.ctypes.data, a.size, flags))
        return buf.raw[:n.value].decode("utf-8", "replace")

    def token_to_id(self, token):
        i = c_int32()
        self._check(lib.mn_tokenizer_token_to_id(self.handle, byref(i), token.encode()))
        return i.value

    def id_to_token(self, i):
        s = lib.mn_tokenizer_id_to_token(self.handle, int(i))
        return None if s is None else s.decode("utf-8", "replace")

    @property
    def vocab_size(self):
        return lib.mn_tokenizer_vocab_size(self.handle)

    def is_special(self, i):
        return bool(lib.mn_tokenizer_is_special(self.handle, int(i)))
