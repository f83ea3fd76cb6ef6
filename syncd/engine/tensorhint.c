/*
 * tensorhint.c — element widths from a safetensors header (format in
 * tensorhint.h).
 *
 * The header is parsed by base/jsonread (bounded depth and node count);
 * every tensor's data_offsets are checked to be integers, ordered, within
 * the file's data section, and the ranges that get a width must not
 * overlap.  Anything else drops the whole hint: a wrong width costs only
 * compression (the chunk decodes either way), but a hint that is half
 * believed is harder to reason about than none.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jsonread.h"
#include "engine/tensorhint.h"

void tensorhint_free(struct tensorhint *h)
{
    free(h->v);
    h->v = NULL;
    h->n = 0;
}

static uint64_t le64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

size_t tensorhint_need(const uint8_t *head, size_t len, uint64_t file_size)
{
    if (len < 8 || file_size < 10)
        return 0;
    uint64_t n = le64_get(head);
    if (n < 2 || n > TENSORHINT_MAX_HEADER || n > file_size - 8)
        return 0;
    return (size_t)(8 + n);
}

static unsigned dtype_width(const char *dtype)
{
    if (!strcmp(dtype, "BF16") || !strcmp(dtype, "F16"))
        return 2;
    if (!strcmp(dtype, "F32"))
        return 4;
    return 0;
}

/* An offset: a whole number within [0, max]. */
static int offset_of(const struct jnode *n, uint64_t max, uint64_t *ret)
{
    if (!n || n->type != J_NUM || !(n->num >= 0) || n->num > (double)max ||
        n->num != (double)(uint64_t)n->num)
        return CKS_E_FORMAT;
    *ret = (uint64_t)n->num;
    return 0;
}

static int range_cmp(const void *a, const void *b)
{
    const struct tensorhint_range *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

int tensorhint_parse(const uint8_t *head, size_t len, uint64_t file_size, struct tensorhint *h)
{
    tensorhint_free(h);
    size_t need = tensorhint_need(head, len, file_size);
    if (!need || len < need || head[8] != '{')
        return CKS_E_FORMAT;
    struct jnode *root = NULL;
    struct buf err = BUF_INIT;
    int e = jsonread_parse((const char *)head + 8, need - 8, &root, &err);
    buf_free(&err);
    if (e < 0)
        return e == -ENOMEM ? e : CKS_E_FORMAT;
    if (root->type != J_OBJ) {
        jsonread_free(root);
        return CKS_E_FORMAT;
    }
    uint64_t base = need, data = file_size - need;
    struct tensorhint_range *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; e == 0 && i < root->nkids; i++) {
        const struct jnode *t = root->kids[i];
        if (!strcmp(t->key, "__metadata__"))
            continue;
        const struct jnode *offs = jnode_get(t, "data_offsets");
        const char *dtype = jnode_str(jnode_get(t, "dtype"), NULL);
        uint64_t b, end;
        if (t->type != J_OBJ || !dtype || !offs || offs->type != J_ARR || jnode_len(offs) != 2 ||
            offset_of(jnode_at(offs, 0), data, &b) < 0 ||
            offset_of(jnode_at(offs, 1), data, &end) < 0 || end < b) {
            e = CKS_E_FORMAT;
            break;
        }
        unsigned w = dtype_width(dtype);
        if (!w || end == b)
            continue;
        if (n == TENSORHINT_MAX_RANGES) {
            e = CKS_E_LIMIT;
            break;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            struct tensorhint_range *p = realloc(v, nc * sizeof(*v));
            if (!p) {
                e = -ENOMEM;
                break;
            }
            v = p;
            cap = nc;
        }
        v[n++] = (struct tensorhint_range){.begin = base + b, .end = base + end, .width = w};
    }
    jsonread_free(root);
    if (e == 0 && n > 1) {
        qsort(v, n, sizeof(*v), range_cmp);
        for (size_t i = 1; i < n; i++)
            if (v[i].begin < v[i - 1].end)
                e = CKS_E_FORMAT;
    }
    if (e < 0) {
        free(v);
        return e == -ENOMEM ? e : CKS_E_FORMAT;
    }
    h->v = v;
    h->n = n;
    return 0;
}

unsigned tensorhint_width(const struct tensorhint *h, uint64_t off, uint64_t len)
{
    if (!h->n || !len || off > UINT64_MAX - len)
        return 0;
    uint64_t end = off + len, by[5] = {0};
    /* the first range that ends after off */
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->v[mid].end <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < h->n && h->v[i].begin < end; i++) {
        uint64_t b = h->v[i].begin > off ? h->v[i].begin : off;
        uint64_t e = h->v[i].end < end ? h->v[i].end : end;
        by[h->v[i].width] += e - b;
    }
    for (unsigned w = 2; w <= 4; w += 2)
        if (by[w] >= len - len / 4)
            return w;
    return 0;
}
