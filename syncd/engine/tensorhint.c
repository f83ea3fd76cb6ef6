/*
 * tensorhint.c — element widths from a safetensors header (format in
 * tensorhint.h).
 *
 * The header is parsed by engine/tensorview (base/jsonread underneath:
 * bounded depth and node count); every tensor's data_offsets are checked
 * there to be integers, ordered, within the file's data section, and here
 * the ranges that get a width (every entry's, whatever its shape) must
 * not overlap.  A torch.save zip's widths come the same way, from its
 * view's storages (tensorhint_from_view).  Anything else drops the whole hint: a wrong width costs
 * only compression (the chunk decodes either way), but a hint that is half believed is harder to
 * reason about than none.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/tensorhint.h"
#include "engine/tensorview.h"

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

static int range_cmp(const void *a, const void *b)
{
    const struct tensorhint_range *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

int tensorhint_from_view(const struct tensorview *v, struct tensorhint *h)
{
    tensorhint_free(h);
    struct tensorhint_range *r = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < v->ns; i++) {
        const struct tensorview_storage *s = &v->s[i];
        unsigned w = s->dtype == TENSORVIEW_F32                                  ? 4
                     : s->dtype == TENSORVIEW_BF16 || s->dtype == TENSORVIEW_F16 ? 2
                                                                                 : 0;
        if (!w || s->end == s->begin)
            continue;
        if (n == TENSORHINT_MAX_RANGES) {
            free(r);
            return CKS_E_FORMAT;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            struct tensorhint_range *p = realloc(r, nc * sizeof(*r));
            if (!p) {
                free(r);
                return -ENOMEM;
            }
            r = p;
            cap = nc;
        }
        r[n++] = (struct tensorhint_range){.begin = s->begin, .end = s->end, .width = w};
    }
    if (n > 1)
        qsort(r, n, sizeof(*r), range_cmp);
    for (size_t i = 1; i < n; i++)
        if (r[i].begin < r[i - 1].end) {
            free(r);
            return CKS_E_FORMAT;
        }
    h->v = r;
    h->n = n;
    return 0;
}

int tensorhint_parse(const uint8_t *head, size_t len, uint64_t file_size, struct tensorhint *h)
{
    struct tensorview v = TENSORVIEW_INIT;
    tensorhint_free(h);
    size_t need = tensorhint_need(head, len, file_size);
    if (!need || len < need)
        return CKS_E_FORMAT;
    int e = tensorview_safetensors(head, need, file_size, &v, NULL);
    if (e == 0)
        e = tensorhint_from_view(&v, h);
    tensorview_free(&v);
    return e == -ENOMEM ? e : e < 0 ? CKS_E_FORMAT : 0;
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
