/*
 * fuzz-dcpmeta.c — the restricted pickle reader and the DCP `.metadata`
 * reader on arbitrary bytes: they must never crash, leak, loop or read
 * out of bounds; every refusal says where; what the pickle reader accepts
 * must be acyclic and no deeper than its limit (walked with a budget, so
 * a shared node is never an exponential walk); what the DCP reader
 * accepts must be sorted, distinct, safe relative paths.  The same bytes
 * go to the Hugging Face index reader, and, split at newlines, to the
 * rank-name gap finder as a tree's paths (its gaps must be absent from
 * the input, sorted, safe).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/dcpmeta.h"
#include "engine/hfindex.h"
#include "engine/pickle.h"
#include "engine/ranknames.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Depth-first, at most *budget visits: the depth must stay below the limit. */
static void walk(const struct pickle_node *n, size_t depth, size_t *budget)
{
    if (!n || *budget == 0)
        return;
    (*budget)--;
    if (depth > 256)
        abort();
    if (n->kind == PICKLE_STR && strlen(n->s) > n->len)
        abort();
    (void)pickle_kind_name(n);
    (void)pickle_attr(n, "storage_data");
    for (size_t i = 0; i < n->n; i++)
        walk(n->kids[i], depth + 1, budget);
}

static void check_needs(const struct layout_needs *n)
{
    for (size_t i = 0; i < n->n; i++)
        if (!layout_need_path_ok(n->v[i].path) ||
            (i > 0 && strcmp(n->v[i - 1].path, n->v[i].path) >= 0))
            abort();
}

/* The input's lines as paths (NULs end a line too); their gaps. */
static void ranks(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    const char **paths = calloc(size + 1, sizeof(*paths));
    struct layout_needs g = LAYOUT_NEEDS_INIT;
    size_t n = 0;
    if (!text || !paths)
        abort();
    memcpy(text, data, size);
    text[size] = 0;
    for (char *line = text; line <= text + size;) {
        char *end = memchr(line, '\n', (size_t)(text + size - line));
        if (end)
            *end = 0;
        paths[n++] = line;
        line = end ? end + 1 : text + size + 1;
    }
    if (ranknames_gaps(paths, n, &g) != 0)
        abort();
    check_needs(&g);
    for (size_t i = 0; i < g.n && g.n * n < 1000000; i++)
        for (size_t k = 0; k < n; k++)
            if (!strcmp(g.v[i].path, paths[k]))
                abort(); /* a gap that is there */
    layout_needs_free(&g);
    free(paths);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pickle *p;
    struct buf err = BUF_INIT;
    size_t budget = 100000;
    if (pickle_parse(data, size, NULL, &p, &err) == 0) {
        walk(pickle_root(p), 0, &budget);
        pickle_free(p);
    } else if (!err.len || strncmp(buf_str(&err), "offset ", 7) != 0) {
        abort(); /* every failure says where */
    }
    buf_reset(&err);
    struct layout_needs n = LAYOUT_NEEDS_INIT;
    if (dcpmeta_parse(data, size, &n, &err) == 0)
        check_needs(&n);
    else if (!err.len || n.n)
        abort();
    buf_reset(&err);
    if (hfindex_parse((const char *)data, size, &n, &err) == 0)
        check_needs(&n);
    else if (!err.len || n.n)
        abort();
    layout_needs_free(&n);
    if (size < 65536)
        ranks(data, size);
    buf_free(&err);
    return 0;
}
