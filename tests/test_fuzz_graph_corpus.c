/* test_fuzz_graph_corpus.c - replays the graph fuzzer's corpus in normal
 * builds, so that what the fuzzer once found stays fixed.
 *
 * Covers: every file of $MN_FUZZ_GRAPH_CORPUS (tests/fuzz/corpus_graph:
 * handwritten seeds and past crashes) fed to the fuzzer's entry point
 * (tests/fuzz/fuzz_graph.c, linked in), then a fixed number of inputs from a
 * seeded generator (a small deterministic fuzz run, no libFuzzer needed).
 * An input that breaks an API promise aborts inside the entry point, so the
 * test fails by crashing; under ASan/UBSan any memory error or leak fails it.
 * Prints the name of each file before running it (the last one printed is
 * the culprit of a crash).
 *
 * Does not: mutate or grow the corpus (run tests/fuzz/run_fuzz.sh for that).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RANDOM_INPUTS 200

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open MN_FUZZ_GRAPH_CORPUS=%s", dir);
    if (!d) return 0;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn) abort();
            names = nn;
        }
        if (!(names[n++] = strdup(de->d_name))) abort();
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names); /* a stable order */
    int files = 0;
    for (int i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        struct stat sb;
        FILE *f = NULL;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) f = fopen(p, "rb");
        if (f) {
            uint8_t *buf = malloc((size_t)sb.st_size + 1);
            if (!buf) abort();
            size_t got = fread(buf, 1, (size_t)sb.st_size, f);
            fclose(f);
            CHECK_MSG(got == (size_t)sb.st_size, "%s: short read", p);
            printf("test_fuzz_graph_corpus: %s\n", names[i]);
            fflush(stdout);
            LLVMFuzzerTestOneInput(buf, got);
            free(buf);
            files++;
        }
        free(names[i]);
    }
    free(names);
    return files;
}

/* Inputs from a fixed generator: random bytes, with the session bit set in
 * half of them (the header's first byte) so that sessions run too. */
static void random_inputs(void) {
    uint64_t x = 0x243F6A8885A308D3ull;
    uint8_t buf[512];
    for (int k = 0; k < RANDOM_INPUTS; k++) {
        size_t len = 16 + (size_t)(k * 37 % 400);
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = (uint8_t)(x >> 24);
        }
        if (k % 2) buf[0] |= 1;
        LLVMFuzzerTestOneInput(buf, len);
    }
    th_passed++;
}

int main(void) {
    const char *dir = getenv("MN_FUZZ_GRAPH_CORPUS");
    if (!dir || !*dir) {
        printf("test_fuzz_graph_corpus: MN_FUZZ_GRAPH_CORPUS not set, corpus skipped\n");
    } else {
        int files = replay_dir(dir);
        CHECK_MSG(files > 0, "corpus %s is empty", dir);
        printf("test_fuzz_graph_corpus: %d corpus files replayed\n", files);
    }
    random_inputs();
    printf("test_fuzz_graph_corpus: %d generated inputs\n", RANDOM_INPUTS);
    return th_finish("test_fuzz_graph_corpus");
}
