/*
 * mnextras.c — the merged step's extras (mnextras.h).
 */
#include "service/mnextras.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A part's extra, with the part's rank. */
struct pool_ent {
    const struct manifest *p;
    const struct mextra *x;
    size_t rank;
};

struct mx {
    struct manifest *m;
    uint8_t (*plain)[HASH_LEN];  /* the merged file chunks stored plain, sorted */
    uint8_t (*marked)[HASH_LEN]; /* ... stored as recipes, sorted */
    size_t nplain, nmarked;
    struct pool_ent *pool; /* one per id, sorted by id */
    size_t npool;
};

static int id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, HASH_LEN);
}

static int pool_cmp(const void *a, const void *b)
{
    const struct pool_ent *x = a, *y = b;
    int c = memcmp(x->x->id, y->x->id, HASH_LEN);
    return c ? c : x->rank < y->rank ? -1 : x->rank > y->rank;
}

static bool has(uint8_t (*v)[HASH_LEN], size_t n, const uint8_t id[HASH_LEN])
{
    return n && bsearch(id, v, n, HASH_LEN, id_cmp);
}

/* The ids the parts name as k lines (a base a part's publish confirmed
 * under chunks/ in the region), sorted, into *ret (malloc'ed), *ret_n of
 * them. */
static int mx_kids(const struct manifest *parts, size_t n, uint8_t (**ret)[HASH_LEN], size_t *ret_n)
{
    size_t total = 0;
    *ret_n = 0;
    for (size_t k = 0; k < n; k++)
        total += parts[k].nextras;
    if (!(*ret = malloc((total ? total : 1) * HASH_LEN)))
        return -ENOMEM;
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < parts[k].nextras; i++)
            if (!parts[k].extras[i].recipe)
                memcpy((*ret)[(*ret_n)++], parts[k].extras[i].id, HASH_LEN);
    if (*ret_n > 1)
        qsort(*ret, *ret_n, HASH_LEN, id_cmp);
    return 0;
}

/* plain and marked from m's chunks: a chunk plain in any part's files, or
 * a k line of any part (its chunks/ object confirmed by that part), is
 * plain everywhere. */
static int mx_chunks(struct mx *c, const struct manifest *parts, size_t n)
{
    struct manifest *m = c->m;
    uint8_t(*kids)[HASH_LEN] = NULL;
    size_t nkids, nfile;
    c->plain = malloc((m->nchunks ? m->nchunks : 1) * HASH_LEN);
    c->marked = malloc((m->nchunks ? m->nchunks : 1) * HASH_LEN);
    if (!c->plain || !c->marked || mx_kids(parts, n, &kids, &nkids) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < m->nchunks; i++)
        if (!manifest_chunk_recipe(m, i))
            memcpy(c->plain[c->nplain++], m->chunks[i].id, HASH_LEN);
    if (c->nplain > 1)
        qsort(c->plain, c->nplain, HASH_LEN, id_cmp);
    nfile = c->nplain;
    for (size_t i = 0; i < m->nchunks; i++) {
        if (!manifest_chunk_recipe(m, i))
            continue;
        const uint8_t *id = m->chunks[i].id;
        if (has(c->plain, nfile, id) || has(kids, nkids, id)) {
            manifest_mark_recipe(m, i, false); /* cannot fail: i < nchunks */
            memcpy(c->plain[c->nplain++], id, HASH_LEN);
        } else {
            memcpy(c->marked[c->nmarked++], id, HASH_LEN);
        }
    }
    free(kids);
    if (c->nplain > 1)
        qsort(c->plain, c->nplain, HASH_LEN, id_cmp);
    if (c->nmarked > 1)
        qsort(c->marked, c->nmarked, HASH_LEN, id_cmp);
    return 0;
}

/* The pool: every part's extras, one per id (the lowest rank's; a recipe
 * one where the merged manifest marks the id, else a k line where a part
 * has one). */
static int mx_pool(struct mx *c, const struct manifest *parts, size_t n)
{
    size_t total = 0, out = 0;
    for (size_t k = 0; k < n; k++)
        total += parts[k].nextras;
    c->pool = malloc((total ? total : 1) * sizeof(*c->pool));
    if (!c->pool)
        return -ENOMEM;
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < parts[k].nextras; i++)
            c->pool[c->npool++] = (struct pool_ent){&parts[k], &parts[k].extras[i], k};
    if (c->npool > 1)
        qsort(c->pool, c->npool, sizeof(*c->pool), pool_cmp);
    for (size_t i = 0; i < c->npool;) {
        size_t j = i, pick = i;
        bool want_recipe = has(c->marked, c->nmarked, c->pool[i].x->id);
        while (j < c->npool && !memcmp(c->pool[j].x->id, c->pool[i].x->id, HASH_LEN)) {
            if (want_recipe && c->pool[j].x->recipe && !c->pool[pick].x->recipe)
                pick = j;
            else if (!want_recipe && !c->pool[j].x->recipe && c->pool[pick].x->recipe)
                pick = j;
            j++;
        }
        c->pool[out++] = c->pool[pick];
        i = j;
    }
    c->npool = out;
    return 0;
}

static ssize_t pool_find(const struct mx *c, const uint8_t id[HASH_LEN])
{
    size_t lo = 0, hi = c->npool;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = memcmp(c->pool[mid].x->id, id, HASH_LEN);
        if (r == 0)
            return (ssize_t)mid;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Flags the pool entries the marked chunks need, transitively. */
static int mx_need(struct mx *c, uint8_t *need)
{
    size_t *stack = malloc((c->npool ? c->npool : 1) * sizeof(*stack)), top = 0;
    if (!stack)
        return -ENOMEM;
    for (size_t i = 0; i < c->nmarked; i++) {
        ssize_t j = pool_find(c, c->marked[i]);
        if (j >= 0 && !need[j]) {
            need[j] = 1;
            stack[top++] = (size_t)j;
        }
    }
    while (top) {
        const struct pool_ent *pe = &c->pool[stack[--top]];
        for (uint32_t b = 0; b < pe->x->nbases; b++) {
            const uint8_t *id = pe->p->bases[pe->x->first_base + b].id;
            ssize_t j = has(c->plain, c->nplain, id) ? -1 : pool_find(c, id);
            if (j >= 0 && !need[j]) {
                need[j] = 1;
                stack[top++] = (size_t)j;
            }
        }
    }
    free(stack);
    return 0;
}

static int mx_add(struct mx *c, const uint8_t *need)
{
    uint8_t bases[MANIFEST_MAX_BASES][HASH_LEN];
    int e = 0;
    for (size_t i = 0; e == 0 && i < c->npool; i++) {
        const struct pool_ent *pe = &c->pool[i];
        if (!need[i])
            continue;
        for (uint32_t b = 0; b < pe->x->nbases && b < MANIFEST_MAX_BASES; b++)
            memcpy(bases[b], pe->p->bases[pe->x->first_base + b].id, HASH_LEN);
        e = manifest_add_extra(c->m, pe->x->id, pe->x->len, (const uint8_t(*)[HASH_LEN])bases,
                               pe->x->recipe ? pe->x->nbases : 0);
    }
    if (e == 0)
        manifest_sort_extras(c->m);
    return e;
}

int mnextras_merge(struct manifest *m, const struct manifest *parts, size_t n)
{
    struct mx c = {.m = m};
    uint8_t *need = NULL;
    size_t total = 0;
    for (size_t k = 0; k < n; k++)
        total += parts[k].nextras;
    if (total == 0)
        return 0; /* no part of version 6: nothing changes */
    int e = mx_chunks(&c, parts, n);
    if (e == 0)
        e = mx_pool(&c, parts, n);
    if (e == 0 && !(need = calloc(c.npool ? c.npool : 1, 1)))
        e = -ENOMEM;
    if (e == 0)
        e = mx_need(&c, need);
    if (e == 0)
        e = mx_add(&c, need);
    free(need);
    free(c.plain);
    free(c.marked);
    free(c.pool);
    return e;
}
