/*
 * layoutneed.c — the list of files a layout names.
 */
#include "engine/layoutneed.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

bool layout_need_path_ok(const char *path)
{
    size_t len = strlen(path);
    if (len == 0 || len > LAYOUT_NEED_PATH_MAX || path[0] == '/')
        return false;
    for (const char *c = path; *c;) {
        const char *slash = strchr(c, '/');
        size_t n = slash ? (size_t)(slash - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)c[i] < 0x20)
                return false;
        c += n + (slash != NULL);
        if (slash && !*c)
            return false; /* a trailing '/' */
    }
    return true;
}

int layout_needs_add(struct layout_needs *n, const char *path, uint64_t size)
{
    if (!layout_need_path_ok(path))
        return CKS_E_UNSAFE_PATH;
    if (n->n >= LAYOUT_NEEDS_MAX)
        return CKS_E_LIMIT;
    if (n->n == n->cap) {
        size_t cap = n->cap ? 2 * n->cap : 16;
        struct layout_need *v = realloc(n->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        n->v = v;
        n->cap = cap;
    }
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    n->v[n->n++] = (struct layout_need){p, size};
    return 0;
}

static int need_cmp(const void *a, const void *b)
{
    return strcmp(((const struct layout_need *)a)->path, ((const struct layout_need *)b)->path);
}

void layout_needs_fold(struct layout_needs *n)
{
    size_t out = 0;
    if (n->n > 1)
        qsort(n->v, n->n, sizeof(*n->v), need_cmp);
    for (size_t i = 0; i < n->n; i++) {
        if (out && !strcmp(n->v[out - 1].path, n->v[i].path)) {
            if (n->v[i].size > n->v[out - 1].size)
                n->v[out - 1].size = n->v[i].size;
            free(n->v[i].path);
            continue;
        }
        n->v[out++] = n->v[i];
    }
    n->n = out;
}

void layout_needs_free(struct layout_needs *n)
{
    for (size_t i = 0; i < n->n; i++)
        free(n->v[i].path);
    free(n->v);
    n->v = NULL;
    n->n = n->cap = 0;
}
