/* fuzz_onnx.c - libFuzzer target for the ONNX importer (src/onnx): the
 * protobuf wire check and protobuf-c's parser, model validation, constant
 * folding and every operator handler, and the TensorProto reader.
 *
 * Does: mn_onnx_load_memory on the input (with a symbolic-dimension default,
 * so dynamic models import); when it succeeds on a small model, a CPU
 * inference session is built and run with zero inputs (set through
 * mn_onnx_set_input in each input's ONNX type) and every output is read back
 * through mn_onnx_get_output. The same bytes are also decoded as one
 * TensorProto. A failed import must leave a message; a sanitizer report or an
 * abort is a crash.
 *
 * Does not: touch the file system or run Vulkan.
 * Build: clang -fsanitize=fuzzer,address,undefined (cmake -DMN_FUZZ=ON);
 * run: tests/fuzz/run_fuzz.sh build/fuzz/tests/fuzz_onnx 60 (corpus
 * tests/fuzz/corpus_onnx, dictionary tests/fuzz/onnx.dict). test_onnx
 * replays the corpus in every build.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meganeura_onnx.h"
#include "onnx/onnx_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run_small(mn_onnx *m, mn_graph *g) {
    /* only models whose inputs and outputs are small */
    int64_t total = 0;
    for (int i = 0; i < mn_onnx_input_count(m); i++) {
        mn_onnx_io io;
        if (mn_onnx_input_at(m, i, &io)) abort();
        int64_t n = 1;
        for (int k = 0; k < io.rank; k++) n *= io.shape[k];
        total += n;
    }
    if (total > (1 << 16)) return;
    mn_session_options so = mn_session_default_options();
    mn_session *s = NULL;
    if (mn_session_create(&s, g, &so) != MN_OK) {
        if (s && !mn_session_error(s)[0]) abort();
        mn_session_destroy(s);
        return;
    }
    if (mn_onnx_init_session(m, s) == MN_OK) {
        for (int i = 0; i < mn_onnx_input_count(m); i++) {
            mn_onnx_io io;
            mn_onnx_input_at(m, i, &io);
            int64_t n = 1;
            for (int k = 0; k < io.rank; k++) n *= io.shape[k];
            size_t bytes = (size_t)n * mn_onnx_dtype_size(io.onnx_dtype);
            void *z = calloc(1, bytes ? bytes : 1);
            if (!z) abort();
            if (mn_onnx_set_input(m, s, io.name, z, bytes) != MN_OK) abort();
            free(z);
        }
        if (mn_session_run(s) == MN_OK)
            for (int i = 0; i < mn_onnx_output_count(m); i++) {
                mn_onnx_io io;
                mn_onnx_output_at(m, i, &io);
                int64_t n = 1;
                for (int k = 0; k < io.rank; k++) n *= io.shape[k];
                if (n > (1 << 20)) continue;
                size_t bytes = (size_t)n * mn_onnx_dtype_size(io.onnx_dtype);
                void *buf = malloc(bytes ? bytes : 1);
                if (!buf) abort();
                if (mn_onnx_get_output(m, s, io.name, buf, bytes) != MN_OK) abort();
                free(buf);
            }
    }
    mn_session_destroy(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[4096];
    mn_graph *g = NULL;
    if (mn_graph_create(&g) != MN_OK) return 0;
    mn_onnx_options o = mn_onnx_default_options();
    o.default_dim = 2;
    mn_onnx *m = NULL;
    err[0] = 0;
    mn_status st = mn_onnx_load_memory(&m, g, data, size, &o, err, sizeof err);
    if (st) {
        if (m || !err[0]) abort(); /* a failure leaves no handle and says why */
    } else {
        if (!m) abort();
        run_small(m, g);
    }
    mn_onnx_destroy(m);
    mn_graph_destroy(g);

    /* the same bytes as one TensorProto */
    ox_alloc a;
    ox_alloc_init(&a, ((size_t)64 << 20) + 16 * size);
    Onnx__TensorProto *t =
        (Onnx__TensorProto *)ox_unpack(&onnx__tensor_proto__descriptor, data, size, &a, err, sizeof err);
    if (t) {
        ox_host h;
        if (ox_tensor_decode(&h, t, "fuzz", err, sizeof err) == MN_OK) {
            if (h.numel < 0 || (h.numel && !h.f && !h.i)) abort();
            ox_host_free(&h);
        }
        protobuf_c_message_free_unpacked(&t->base, &a.base);
    }
    if (a.used != 0) abort(); /* every allocation was freed */
    return 0;
}
