/* test_ops_doc.c - docs/OPS.md cannot drift from the op table.
 *
 * Every op of ops.def has a row (first cell `name`); every row whose kind is
 * not "composite" names an op of the table; an op with a backward rule is a
 * "primitive", one without is a source, optimizer or backward helper.
 */
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff.h"
#include "graph/graph.h"
#include "harness.h"

typedef struct row {
    char name[64], kind[64];
} row;

static int parse(const char *path, row *rows, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        if (strncmp(line, "| `", 3) != 0) continue;
        const char *a = line + 3, *b = strchr(a, '`');
        const char *c1 = strchr(line + 1, '|');
        const char *c2 = c1 ? strchr(c1 + 1, '|') : NULL;
        if (!b || !c1 || !c2 || (size_t)(b - a) >= sizeof rows[n].name) continue;
        memcpy(rows[n].name, a, (size_t)(b - a));
        rows[n].name[b - a] = 0;
        const char *k = c1 + 1;
        while (*k == ' ') k++;
        size_t kl = (size_t)(c2 - k);
        while (kl && k[kl - 1] == ' ') kl--;
        if (kl >= sizeof rows[n].kind) kl = sizeof rows[n].kind - 1;
        memcpy(rows[n].kind, k, kl);
        rows[n].kind[kl] = 0;
        n++;
    }
    fclose(f);
    return n;
}

int main(void) {
    const char *docs = getenv("MN_DOCS");
    char path[1024];
    snprintf(path, sizeof path, "%s/OPS.md", docs ? docs : "docs");
    static row rows[512];
    int n = parse(path, rows, 512);
    CHECK_MSG(n > 0, "cannot read the op rows of %s", path);
    for (int op = 0; op < OP_COUNT; op++) {
        const row *r = NULL;
        for (int i = 0; i < n && !r; i++)
            if (strcmp(rows[i].name, op_table[op].name) == 0) r = &rows[i];
        CHECK_MSG(r != NULL, "op '%s' has no row in docs/OPS.md", op_table[op].name);
        if (!r) continue;
        bool diff = autodiff_has_rule((op_id)op), prim = strstr(r->kind, "primitive") != NULL;
        CHECK_MSG(diff == prim, "op '%s': kind '%s' but it %s a backward rule", op_table[op].name, r->kind,
                  diff ? "has" : "does not have");
    }
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
            CHECK_MSG(strcmp(rows[i].name, rows[j].name) != 0, "docs/OPS.md has two rows for '%s'", rows[i].name);
        if (strstr(rows[i].kind, "composite")) continue;
        bool known = false;
        for (int op = 0; op < OP_COUNT && !known; op++) known = strcmp(rows[i].name, op_table[op].name) == 0;
        CHECK_MSG(known, "docs/OPS.md row '%s' (%s) is not an op of the table", rows[i].name, rows[i].kind);
    }
    printf("docs/OPS.md: %d rows, %d ops in the table\n", n, OP_COUNT);
    return th_finish("test_ops_doc");
}
