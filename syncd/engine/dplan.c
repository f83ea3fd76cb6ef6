/*
 * dplan.c — the plan of a derived-bf16 recipe (see dplan.h).
 *
 * Design: one pass over the chunk's bytes in order; each pair's part in
 * the chunk is cut at element boundaries (a split element is literal) and
 * at the base file's chunk boundaries, as tests/bench/delta-ratio.c's
 * plan_chunk/add_ref cut it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/dplan.h"

void dplan_free(struct dplan *p)
{
    free(p->seg);
    *p = (struct dplan)DPLAN_INIT;
}

static int dplan_push(struct dplan *p, struct tdelta_seg s)
{
    if (s.kind == TDELTA_LITERAL && p->nseg && p->seg[p->nseg - 1].kind == TDELTA_LITERAL) {
        struct tdelta_seg *last = &p->seg[p->nseg - 1];
        if (last->width != s.width)
            last->width = 0;
        last->len += s.len;
        return 0;
    }
    if (p->nseg == TDELTA_MAX_SEGS)
        return CKS_E_LIMIT;
    if (p->nseg == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        struct tdelta_seg *v = realloc(p->seg, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        p->seg = v;
        p->cap = cap;
    }
    p->seg[p->nseg++] = s;
    if (s.kind == TDELTA_BF16 || s.kind == TDELTA_XOR)
        p->derived += s.len;
    return 0;
}

static int dplan_lit(struct dplan *p, uint64_t len, unsigned width)
{
    return len ? dplan_push(p, (struct tdelta_seg){TDELTA_LITERAL, (uint32_t)len, 0, 0, width}) : 0;
}

/* The cut holding byte at of a base file, or NULL. */
static const struct dplan_cut *dplan_cut_at(const struct dplan_pair *pr, uint64_t at)
{
    size_t lo = 0, hi = pr->ncuts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct dplan_cut *c = &pr->cuts[mid];
        if (at < c->off)
            hi = mid;
        else if (at - c->off >= c->len)
            lo = mid + 1;
        else
            return c;
    }
    return NULL;
}

/* The base slot of cut c (an existing one of the same id, or a new one),
 * or -1 when it may not be used or the slots are full. */
static int dplan_slot(struct dplan *p, const struct dplan_pair *pr, const struct dplan_cut *c,
                      dplan_usable_fn usable, void *ud)
{
    for (size_t k = 0; k < p->nbase; k++)
        if (!memcmp(p->base[k].cut->id, c->id, HASH_LEN))
            return (int)k;
    if (p->nbase == TDELTA_MAX_BASES || (usable && !usable(ud, c)))
        return -1;
    p->base[p->nbase] = (struct dplan_base){pr->file, c};
    return (int)p->nbase++;
}

/* n bytes of the chunk (whole bf16 elements) from the fp32 bytes at `at`
 * of pair pr's file. */
static int dplan_derive(struct dplan *p, const struct dplan_pair *pr, uint64_t n, uint64_t at,
                        dplan_usable_fn usable, void *ud)
{
    int e = 0;
    while (n && e == 0) {
        const struct dplan_cut *c = dplan_cut_at(pr, at);
        if (!c)
            return dplan_lit(p, n, 2);
        uint64_t fit = (c->off + c->len - at) / 4 * 2;
        uint64_t take = fit < n ? fit : n;
        if (take > UINT32_MAX / 2)
            take = UINT32_MAX / 4 * 2;
        int slot = take ? dplan_slot(p, pr, c, usable, ud) : -1;
        if (take == 0)
            take = 2; /* an fp32 element split by the base's cut */
        if (slot < 0)
            e = dplan_lit(p, take, 2);
        else
            e = dplan_push(p, (struct tdelta_seg){TDELTA_BF16, (uint32_t)take, (uint32_t)slot,
                                                  (uint32_t)(at - c->off), 2});
        n -= take;
        at += 2 * take;
    }
    return e;
}

/* n bytes of the chunk (whole elements of pr->xw bytes) against the
 * bytes at `at` of pair pr's file. */
static int dplan_delta(struct dplan *p, const struct dplan_pair *pr, uint64_t n, uint64_t at,
                       dplan_usable_fn usable, void *ud)
{
    unsigned w = pr->xw;
    int e = 0;
    while (n && e == 0) {
        const struct dplan_cut *c = dplan_cut_at(pr, at);
        if (!c)
            return dplan_lit(p, n, w);
        uint64_t take = (c->off + c->len - at) / w * w;
        if (take > n)
            take = n;
        if (take > UINT32_MAX / 2)
            take = UINT32_MAX / 2 / w * w;
        int slot = take ? dplan_slot(p, pr, c, usable, ud) : -1;
        if (take == 0)
            take = w; /* an element split by the base's cut */
        if (slot < 0)
            e = dplan_lit(p, take, w);
        else
            e = dplan_push(p, (struct tdelta_seg){TDELTA_XOR, (uint32_t)take, (uint32_t)slot,
                                                  (uint32_t)(at - c->off), w});
        n -= take;
        at += take;
    }
    return e;
}

/* Delta pair pr's bytes [s0, s1) of the chunk (inside its range): the
 * bytes of elements the chunk's cut split are literal. */
static int dplan_xpart(struct dplan *p, const struct dplan_pair *pr, uint64_t s0, uint64_t s1,
                       dplan_usable_fn usable, void *ud)
{
    unsigned w = pr->xw;
    uint64_t head = (w - (s0 - pr->b16) % w) % w;
    if (head > s1 - s0)
        head = s1 - s0;
    int e = dplan_lit(p, head, 0);
    s0 += head;
    uint64_t body = (s1 - s0) / w * w;
    if (e == 0 && body)
        e = dplan_delta(p, pr, body, pr->f32 + (s0 - pr->b16), usable, ud);
    if (e == 0)
        e = dplan_lit(p, s1 - s0 - body, 0);
    return e;
}

/* Pair pr's bytes [s0, s1) of the chunk (inside its bf16 range). */
static int dplan_part(struct dplan *p, const struct dplan_pair *pr, uint64_t s0, uint64_t s1,
                      dplan_usable_fn usable, void *ud)
{
    int e = 0;
    if (pr->xw)
        return dplan_xpart(p, pr, s0, s1, usable, ud);
    if ((s0 - pr->b16) % 2) { /* the second byte of an element the cut split */
        e = dplan_lit(p, 1, 0);
        s0++;
    }
    if (s0 >= s1)
        return e;
    uint64_t body = (s1 - s0) / 2 * 2;
    if (e == 0 && body)
        e = dplan_derive(p, pr, body, pr->f32 + 2 * (s0 - pr->b16), usable, ud);
    if (e == 0 && s1 - s0 > body)
        e = dplan_lit(p, 1, 0);
    return e;
}

/* The first pair whose bf16 range ends after off. */
static size_t dplan_first(const struct dplan_pair *pairs, size_t npairs, uint64_t off)
{
    size_t lo = 0, hi = npairs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pairs[mid].b16 + dplan_span(&pairs[mid]) <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool dplan_overlaps_b16(const struct dplan_pair *pairs, size_t npairs, uint64_t off, uint64_t len)
{
    size_t i = dplan_first(pairs, npairs, off);
    return i < npairs && pairs[i].b16 < off + len && pairs[i].n > 0;
}

int dplan_chunk(struct dplan *p, uint64_t off, uint32_t len, const struct dplan_pair *pairs,
                size_t npairs, dplan_usable_fn usable, void *ud)
{
    uint64_t pos = off, end = off + len;
    int e = 0;
    p->nseg = p->nbase = p->derived = 0;
    if (len == 0)
        return -EINVAL;
    for (size_t i = 0; i < npairs; i++)
        if (pairs[i].xw != 0 && pairs[i].xw != 2 && pairs[i].xw != 4)
            return -EINVAL;
    for (size_t i = 1; i < npairs; i++)
        if (pairs[i].b16 < pairs[i - 1].b16 + dplan_span(&pairs[i - 1]))
            return -EINVAL;
    for (size_t i = dplan_first(pairs, npairs, off); e == 0 && i < npairs && pairs[i].b16 < end;
         i++) {
        const struct dplan_pair *pr = &pairs[i];
        uint64_t s0 = pr->b16 > pos ? pr->b16 : pos;
        uint64_t s1 = pr->b16 + dplan_span(pr) < end ? pr->b16 + dplan_span(pr) : end;
        if (s0 >= s1)
            continue;
        if ((e = dplan_lit(p, s0 - pos, 0)) == 0)
            e = dplan_part(p, pr, s0, s1, usable, ud);
        pos = s1;
    }
    if (e == 0)
        e = dplan_lit(p, end - pos, 0);
    if (e < 0)
        p->nseg = p->nbase = p->derived = 0;
    return e;
}
