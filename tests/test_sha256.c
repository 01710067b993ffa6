/* test_sha256.c - SHA-256 (src/core/sha256.c) against the examples of FIPS
 * 180-4 / NIST (empty, "abc", the 448- and 896-bit messages, a million 'a'),
 * digests at the padding boundaries (55, 56, 63, 64, 65, 119, 120 bytes,
 * computed with Python's hashlib), and the same digest whatever the split of
 * the input into update calls. */
#include <string.h>

#include "core/sha256.h"
#include "harness.h"

static void check_hex(const void *msg, size_t n, const char *want, const char *what) {
    unsigned char d[MN_SHA256_BYTES];
    char hex[2 * MN_SHA256_BYTES + 1];
    mn_sha256_digest(d, msg, n);
    mn_sha256_hex(hex, d);
    CHECK_MSG(strcmp(hex, want) == 0, "%s: got %s, want %s", what, hex, want);
}

int main(void) {
    check_hex("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "empty");
    check_hex("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "abc");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_hex(m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", "448 bits");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
                       "lmnopqrsmnopqrstnopqrstu";
    check_hex(m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1", "896 bits");

    static char a[1000000];
    memset(a, 'a', sizeof a);
    check_hex(a, sizeof a, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", "a million a");
    static const struct {
        size_t n;
        const char *hex;
    } edges[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "%zu x 'a'", edges[i].n);
        check_hex(a, edges[i].n, edges[i].hex, what);
    }

    /* the million 'a' in uneven pieces, crossing block edges every way */
    unsigned char one[MN_SHA256_BYTES], parts[MN_SHA256_BYTES];
    mn_sha256_digest(one, a, sizeof a);
    mn_sha256_ctx c;
    mn_sha256_init(&c);
    size_t at = 0, step = 0;
    while (at < sizeof a) {
        size_t n = (step++ * 37) % 131; /* 0, 37, 74, 111, 17, ... including empty updates */
        if (n > sizeof a - at) n = sizeof a - at;
        mn_sha256_update(&c, a + at, n);
        at += n;
    }
    mn_sha256_final(&c, parts);
    CHECK(memcmp(one, parts, sizeof one) == 0);
    return th_finish("test_sha256");
}
