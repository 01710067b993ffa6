"""test_onnx.py - the ONNX import of the Python package (meganeura.onnx): its
structures against include/meganeura_onnx.h, a conformance model of Debian's
libonnx-testdata checked against its expected output on the CPU and on
Vulkan, symbolic dimensions, input hints, fine-tuning an imported model with
a loss on its output, and the library's messages for bad files."""
import ctypes
import os
import re

import numpy as np
import pytest

import meganeura as mn
from meganeura import onnx as mo

pytestmark = pytest.mark.skipif(not mo.available(), reason="libmeganeura.so built without MN_ONNX")

DATA = "/usr/share/libonnx-testdata/data"
CONV = os.path.join(DATA, "pytorch-converted", "test_Conv2d")
SIN = os.path.join(DATA, "node", "test_sin")
needs_data = pytest.mark.skipif(not os.path.isdir(CONV), reason="no libonnx-testdata")

CTYPE = {"int": ctypes.c_int, "bool": ctypes.c_bool, "int64_t": ctypes.c_int64, "size_t": ctypes.c_size_t,
         "int32_t": ctypes.c_int32}


def test_structures_match_the_header(root):
    with open(os.path.join(root, "include", "meganeura_onnx.h")) as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    assert int(re.search(r"#define MN_ONNX_MAX_RANK (\d+)", text).group(1)) == mo.MAX_RANK
    for st in mo.STRUCTS:
        m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (st.__name__, st.__name__), text, re.S)
        assert m, st.__name__
        fields = []
        for decl in m.group(1).split(";"):
            decl = " ".join(decl.split()).replace("const ", "")
            if not decl:
                continue
            ctype, _, names = decl.partition(" ")
            for d in names.split(","):
                mm = re.fullmatch(r"(\*?)(\w+)(?:\[(\w+)\])?", d.strip())
                assert mm, (st.__name__, d)
                if mm.group(1):
                    ty = ctypes.c_void_p
                elif ctype in CTYPE:
                    ty = CTYPE[ctype]
                else:  # mn_dtype, mn_tensor: enums and int32_t
                    ty = ctypes.c_int32 if ctype == "mn_tensor" else ctypes.c_int
                if mm.group(3):
                    ty = ty * (mo.MAX_RANK if mm.group(3) == "MN_ONNX_MAX_RANK" else int(mm.group(3)))
                fields.append((mm.group(2), ty))
        got = list(st._fields_)
        assert [n for n, _ in fields] == [n for n, _ in got], st.__name__
        for (n, want), (_, have) in zip(fields, got):
            assert ctypes.sizeof(want) == ctypes.sizeof(have), (st.__name__, n)
        # the same layout (padding included) as a structure of the header's fields
        assert ctypes.sizeof(st) == ctypes.sizeof(type("S", (ctypes.Structure,), {"_fields_": fields})), st.__name__


def close(got, want):
    return np.all(np.abs(got - want) <= 1e-7 + 1e-3 * np.abs(want))


def run_conformance(path, backend, device=None):
    x = mo.read_tensor(os.path.join(path, "test_data_set_0", "input_0.pb"))
    want = mo.read_tensor(os.path.join(path, "test_data_set_0", "output_0.pb"))
    with mn.Graph() as g:
        m = mo.load(g, os.path.join(path, "model.onnx"))
        assert len(m.inputs) == 1 and m.inputs[0]["shape"] == x.shape
        with mn.Session(g, backend=backend, device=device) as s:
            m.init(s)
            m.set_input(s, m.inputs[0]["name"], x)
            s.run()
            got = m.output(s, m.outputs[0]["name"])
        # the Graph knows the imported names: Session.output reads them too
        assert m.outputs[0]["graph_name"] in g.outputs
        m.close()
    assert got.shape == want.shape and got.dtype == want.dtype
    assert close(got, want)


@needs_data
@pytest.mark.parametrize("path", [CONV, SIN])
def test_conformance_cpu(path):
    run_conformance(path, "cpu")


@needs_data
@pytest.mark.parametrize("path", [CONV, SIN])
def test_conformance_vulkan(path, vulkan_device):
    run_conformance(path, "vulkan", vulkan_device)


@needs_data
def test_bytes_dims_hints_and_errors(tmp_path):
    with open(os.path.join(CONV, "model.onnx"), "rb") as f:
        blob = f.read()
    with mn.Graph() as g:
        m = mo.load(g, blob, prefix="enc.", freeze=True)
        assert m.inputs[0]["graph_name"].startswith("enc.")
    with mn.Graph() as g, pytest.raises(mn.FormatError):
        mo.load(g, blob[: len(blob) // 2])
    with mn.Graph() as g, pytest.raises(mn.Error, match="nope.onnx"):
        mo.load(g, tmp_path / "nope.onnx")
    with pytest.raises(mn.Error):
        mo.read_tensor(os.path.join(CONV, "model.onnx"))
    # a constant input: the model folds to its output
    x = mo.read_tensor(os.path.join(SIN, "test_data_set_0", "input_0.pb"))
    with mn.Graph() as g:
        m = mo.load(g, os.path.join(SIN, "model.onnx"), inputs={"x": ("hint", x)})
        assert m.inputs and m.inputs[0]["shape"] == x.shape
        with pytest.raises(mn.NotFoundError):
            m.set_input(None, "nope", x)


@needs_data
def test_fine_tune_the_imported_conv():
    """A loss on the imported output trains the initializers (named as in
    the file) and lowers the loss."""
    x = mo.read_tensor(os.path.join(CONV, "test_data_set_0", "input_0.pb"))
    with mn.Graph() as g:
        m = mo.load(g, os.path.join(CONV, "model.onnx"))
        y = m.tensor(m.outputs[0]["name"])
        g.loss(g.mse(y, g.constant(np.zeros(y.shape, np.float32))))
        with mn.Session(g, optimizer=mn.SGD(lr=0.01)) as s:
            m.init(s)
            m.set_input(s, m.inputs[0]["name"], x)
            losses = [s.step() for _ in range(3)]
        m.close()
    assert losses[2] < losses[0], losses
