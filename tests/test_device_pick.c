/* test_device_pick.c - the device a session opens (backend_pick_device) for
 * made-up device lists: one GPU per local rank on a host of several GPUs,
 * wrap-around with more ranks than GPUs, MEGANEURA_DEVICE by index and by
 * name overriding the rank, the best kind first (a CPU device is used only
 * when nothing better exists), errors; and backend_local_rank() from the
 * launcher's environment (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK,
 * MEGANEURA_LOCAL_RANK first).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"

int main(void) {
    char err[256];
    /* a host with 4 H200s and lavapipe */
    const backend_device_desc h[5] = {
        {"llvmpipe (LLVM 15.0.6, 256 bits)", 3}, {"NVIDIA H200", 0}, {"NVIDIA H200", 0}, {"NVIDIA H200", 0},
        {"NVIDIA H200", 0}};
    CHECK(backend_pick_device(h, 5, NULL, -1, err, sizeof err) == 1);
    for (int r = 0; r < 4; r++) CHECK_MSG(backend_pick_device(h, 5, NULL, r, err, sizeof err) == 1 + r, "rank %d", r);
    CHECK(backend_pick_device(h, 5, NULL, 5, err, sizeof err) == 2); /* 6 ranks on 4 GPUs: wraps */
    CHECK(backend_pick_device(h, 5, "", 2, err, sizeof err) == 3);   /* empty = unset */
    CHECK(backend_pick_device(h, 5, "0", 2, err, sizeof err) == 0);  /* MEGANEURA_DEVICE wins over the rank */
    CHECK(backend_pick_device(h, 5, "4", 0, err, sizeof err) == 4);
    CHECK(backend_pick_device(h, 5, "h200", 3, err, sizeof err) == 1);
    CHECK(backend_pick_device(h, 5, "LLVMPIPE", 3, err, sizeof err) == 0);
    CHECK(backend_pick_device(h, 5, "7", 0, err, sizeof err) == -1 && strstr(err, "MEGANEURA_DEVICE='7'") &&
          strstr(err, "5 devices"));
    CHECK(backend_pick_device(h, 5, "radeon", 0, err, sizeof err) == -1);
    /* mixed kinds: two discrete GPUs among an integrated one */
    const backend_device_desc m[3] = {{"Intel iGPU", 1}, {"GPU A", 0}, {"GPU B", 0}};
    CHECK(backend_pick_device(m, 3, NULL, 0, err, sizeof err) == 1);
    CHECK(backend_pick_device(m, 3, NULL, 1, err, sizeof err) == 2);
    CHECK(backend_pick_device(m, 3, NULL, 2, err, sizeof err) == 1);
    /* this machine: one CPU device shared by every rank */
    const backend_device_desc c[1] = {{"llvmpipe", 3}};
    for (int r = 0; r < 3; r++) CHECK(backend_pick_device(c, 1, NULL, r, err, sizeof err) == 0);
    CHECK(backend_pick_device(c, 0, NULL, 0, err, sizeof err) == -1);

    unsetenv("MEGANEURA_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    CHECK(backend_local_rank() == -1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    CHECK(backend_local_rank() == 3);
    setenv("MEGANEURA_LOCAL_RANK", "1", 1);
    CHECK(backend_local_rank() == 1);
    setenv("MEGANEURA_LOCAL_RANK", "x", 1); /* malformed: the next source */
    CHECK(backend_local_rank() == 3);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "-2", 1);
    CHECK(backend_local_rank() == -1);
    return th_finish("test_device_pick");
}
