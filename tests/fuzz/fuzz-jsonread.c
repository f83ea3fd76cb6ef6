/*
 * fuzz-jsonread.c — the CLI's JSON reader on arbitrary bytes: it must
 * never crash, leak or read out of bounds, and what it accepts must be
 * walkable.
 */
#include <stdint.h>
#include <stdlib.h>

#include "base/jsonread.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t walk(const struct jnode *n)
{
    size_t c = 1;
    for (size_t i = 0; i < n->nkids; i++)
        c += walk(n->kids[i]);
    if (n->type == J_OBJ && n->nkids && !n->kids[0]->key)
        abort();
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct jnode *root;
    struct buf err = BUF_INIT;
    if (jsonread_parse((const char *)data, size, &root, &err) == 0) {
        walk(root);
        (void)jnode_str(jnode_get(root, "id"), NULL);
        jsonread_free(root);
    } else if (!err.len) {
        abort(); /* every failure says where */
    }
    buf_free(&err);
    return 0;
}
