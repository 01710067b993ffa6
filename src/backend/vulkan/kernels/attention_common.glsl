// attention_common.glsl - what the two block kernels of attention share
// (attention_tile.glsl, f32 on the FMA units, and attention_coopmat.glsl,
// the fast contract's on cooperative matrices): the op codes, the index
// arithmetic, the mask and the range of items a block of rows visits. The
// generator (vk_gen_transformer.c) places it before either template
// (vk_kernel.lib), and before the row kernel (attention.glsl), which takes
// the op codes, constants and mask from it.
//
// Rows are what a workgroup's block holds (query rows of a query head; for
// AT_BWD_KV key rows of a kv head), items what it streams in tiles of AT_BN
// (keys of the query head's kv head; for AT_BWD_KV the (query head of the
// group, query row) pairs).
//
// Mask (identical to the CPU kernel): key j exists if j < kvlen; causal:
// j <= i + off, window W > 0: j > i + off - W. Without a position input
// off = Tk - Tq, kvlen = Tk; with one, off = pos (clamped to +-2^29),
// kvlen = clamp(pos + Tq, 0, Tk). Only tiles that can pass the mask for
// some row of the block are visited (at_items); at_full says whether one
// passes for all of them (then no per-score test).

#define AT_FWD 0
#define AT_LSE 1
#define AT_BWD_Q 2
#define AT_BWD_KV 3

// what each op reads, forms and sums: R1, R2 the rows' vectors (q and dout,
// or k and v), I1, I2 the items' (k and v, or q and dout); S = R1 . I1,
// dP = R2 . I2; P, dS the weights; AT_NACC output rows summed per row
#define AT_HAS_R2 (AT_OP == AT_BWD_Q || (AT_OP == AT_BWD_KV && AT_WRT_V != 1))
#define AT_HAS_I2 (AT_OP != AT_LSE)
#define AT_HAS_DP AT_HAS_R2 // the second product dP = R2 . I2
#define AT_HAS_P (AT_OP == AT_FWD || AT_OP == AT_BWD_Q || (AT_OP == AT_BWD_KV && AT_WRT_V != 0))
#define AT_HAS_DS (AT_OP == AT_BWD_KV && AT_WRT_V != 1) // dS^T beside P^T
#define AT_STATS (AT_OP == AT_FWD || AT_OP == AT_LSE)
#if AT_OP == AT_LSE
#define AT_NACC 0 // accumulated output rows per invocation row
#elif AT_OP == AT_BWD_KV && AT_WRT_V == 2
#define AT_NACC 2
#else
#define AT_NACC 1
#endif

#define MN_NEG_INF uintBitsToFloat(0xff800000u)
// AT_REF: in the fast contract the forward's softmax works in log2 units
// (AT_SC = scale log2(e), AT_EXP = exp2) against a reference that is an
// integer (the ceiling of the running maximum), so a rescale is an exact
// power of two and the weights 2^(s - m), rounded to 16 bits, are the same
// values whatever maximum a tile had seen: every kernel and the CPU round
// the same weights (kernels_transformer.h). Strict: natural units, the
// running maximum itself (AT_REF(x) = x), so lse = m + log(l) is built from
// the scores the backward recomputes bit for bit. The generator defines
// AT_SC, AT_EXP, AT_REF, AT_LSE_OF.
#define AT_L2E 1.44269504088896341
#define AT_LN2 0.693147180559945309

// ---- index arithmetic (element offsets, 32-bit: the generator checks the
// ---- sizes); every global index of the block kernels is formed here
uint at_qrow(uint qhead, int i) { return (qhead * uint(AT_TQ) + uint(i)) * AT_D; }   // qhead = b*Hq + h
uint at_kvrow(uint kvhead, int j) { return (kvhead * uint(AT_TK) + uint(j)) * AT_D; } // kvhead = b*Hkv + hk
// the output row: [B, Hq, Tq, D], or [B, Tq, Hq, D] with AT_OUT_BTHD (a
// folded permute after the forward, kir.h KIR_HEADS_OUT)
uint at_orow(uint qhead, int i) {
#if AT_OUT_BTHD
    return ((qhead / uint(AT_HQ) * uint(AT_TQ) + uint(i)) * uint(AT_HQ) + qhead % uint(AT_HQ)) * AT_D;
#else
    return at_qrow(qhead, i);
#endif
}
uint at_prep(uint qhead, int i) { return 2u * (qhead * uint(AT_TQ) + uint(i)); }
uint at_lse_out(uint qhead, int i) { return qhead * uint(AT_TQ) + uint(i); }

// ---- the mask ----------------------------------------------------------------
int g_off, g_kvlen;

void at_mask_init() {
#if AT_HAS_POS
    int pos = clamp(AT_POS, -(1 << 29), 1 << 29);
    g_off = pos;
    g_kvlen = clamp(pos + AT_TQ, 0, AT_TK);
#else
    g_off = AT_TK - AT_TQ;
    g_kvlen = AT_TK;
#endif
}

// query row i sees key j
bool at_valid(int i, int j) {
    if (j >= g_kvlen) return false;
#if AT_CAUSAL
    int last = i + g_off;
    if (j > last) return false;
#if AT_WINDOW > 0
    if (j <= last - AT_WINDOW) return false;
#endif
#endif
    return true;
}

#ifdef AT_BN // the block kernels (the row kernel, attention.glsl, has its own)
// ---- the items of the block of rows row0 .. row0 + rowc - 1 of head `head`:
// ---- item heads from ihead0, items ilo .. ihi - 1 of each, in ntiles
// ---- tiles (tph per item head)
void at_items(uint head, int row0, int rowc, out uint ihead0, out int ilo, out int ihi, out int tph, out int ntiles) {
#if AT_OP == AT_BWD_KV
    // rows are keys of kv head `head`; items are query rows i of the group's heads
    ihead0 = (head / AT_HKV) * AT_HQ + (head % AT_HKV) * AT_GRP;
    ilo = 0;
    ihi = row0 < g_kvlen ? AT_TQ : 0;
#if AT_CAUSAL
    ilo = max(0, row0 - g_off);
#if AT_WINDOW > 0
    ihi = min(ihi, row0 + rowc - 1 - g_off + AT_WINDOW);
#endif
#endif
    tph = (max(ihi - ilo, 0) + int(AT_BN) - 1) / int(AT_BN);
    ntiles = int(AT_GRP) * tph;
#else
    // rows are queries of query head `head`; items are keys of its kv head
    ihead0 = (head / AT_HQ) * AT_HKV + (head % AT_HQ) / AT_GRP;
    ilo = 0;
    ihi = g_kvlen;
#if AT_CAUSAL
    ihi = min(ihi, row0 + rowc - 1 + g_off + 1);
#if AT_WINDOW > 0
    ilo = max(0, row0 + g_off - AT_WINDOW + 1);
#endif
#endif
    tph = (max(ihi - ilo, 0) + int(AT_BN) - 1) / int(AT_BN);
    ntiles = tph;
#endif
}

// tile t: items ibase .. ibase + cnt - 1 of item head ihead
#define AT_TILE(t, ihead, ibase, cnt) \
    uint ihead = ihead0 + uint((t) / tph); \
    int ibase = ilo + ((t) % tph) * int(AT_BN); \
    int cnt = min(int(AT_BN), ihi - ibase)

// does every (row, item) pair of the tile pass the mask?
bool at_full(int row0, int rowc, int ibase, int cnt) {
#if AT_OP == AT_BWD_KV
    // items are query rows i of the tile, rows keys j of the block
    bool full = cnt == int(AT_BN) && row0 + rowc <= g_kvlen;
#if AT_CAUSAL
    full = full && row0 + rowc - 1 <= ibase + g_off;
#if AT_WINDOW > 0
    full = full && row0 > ibase + int(AT_BN) - 1 + g_off - AT_WINDOW;
#endif
#endif
#else
    bool full = cnt == int(AT_BN) && ibase + int(AT_BN) <= g_kvlen;
#if AT_CAUSAL
    full = full && ibase + int(AT_BN) - 1 <= row0 + g_off;
#if AT_WINDOW > 0
    full = full && ibase > row0 + rowc - 1 + g_off - AT_WINDOW;
#endif
#endif
#endif
    return full;
}

#endif

// the (row, item) pair passes the mask: row and item as the block sees them
bool at_pair_ok(int row, int item) {
#if AT_OP == AT_BWD_KV
    return at_valid(item, row);
#else
    return at_valid(row, item);
#endif
}
