/*
 * msubset.c — a narrowed manifest's recipes and bases (msubset.h).
 */
#include "engine/msubset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A plain file chunk of from: its id and length. */
struct plainc {
    uint8_t id[HASH_LEN];
    uint32_t len;
};

struct ms {
    struct manifest *sub;
    const struct manifest *from;
    uint8_t (*subplain)[HASH_LEN]; /* sub's plain file chunks, sorted */
    size_t nsubplain;
    struct plainc *fplain; /* from's plain file chunks, sorted */
    size_t nfplain;
    bool *xdone, *pdone; /* per from extra, per fplain: already added */
    size_t *stack;       /* from extras (recipes) whose bases are to see */
    size_t top;
};

static int id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, HASH_LEN);
}

/* sub's plain chunk ids and from's plain chunks, sorted (after the marks). */
static int ms_plain(struct ms *c)
{
    const struct manifest *s = c->sub, *f = c->from;
    c->subplain = malloc((s->nchunks ? s->nchunks : 1) * HASH_LEN);
    c->fplain = malloc((f->nchunks ? f->nchunks : 1) * sizeof(*c->fplain));
    if (!c->subplain || !c->fplain)
        return -ENOMEM;
    for (size_t i = 0; i < s->nchunks; i++)
        if (!manifest_chunk_recipe(s, i))
            memcpy(c->subplain[c->nsubplain++], s->chunks[i].id, HASH_LEN);
    for (size_t i = 0; i < f->nchunks; i++)
        if (!manifest_chunk_recipe(f, i)) {
            memcpy(c->fplain[c->nfplain].id, f->chunks[i].id, HASH_LEN);
            c->fplain[c->nfplain++].len = f->chunks[i].len;
        }
    qsort(c->subplain, c->nsubplain, HASH_LEN, id_cmp);
    qsort(c->fplain, c->nfplain, sizeof(*c->fplain), id_cmp);
    return 0;
}

/* Adds from's extra x (an r line with its bases, or a k line) to sub once;
 * a recipe's bases are looked at later (c->stack). */
static int ms_take(struct ms *c, const struct mextra *x)
{
    uint8_t bases[MANIFEST_MAX_BASES][HASH_LEN];
    size_t j = (size_t)(x - c->from->extras);
    if (c->xdone[j])
        return 0;
    c->xdone[j] = true;
    if (x->recipe)
        c->stack[c->top++] = j;
    for (uint32_t b = 0; b < x->nbases && b < MANIFEST_MAX_BASES; b++)
        memcpy(bases[b], c->from->bases[x->first_base + b].id, HASH_LEN);
    return manifest_add_extra(c->sub, x->id, x->len, (const uint8_t(*)[HASH_LEN])bases,
                              x->recipe ? x->nbases : 0);
}

/* A base of a recipe sub keeps: nothing when sub holds it plain, from's r
 * or k line, else a k line when from holds it as a plain file chunk. */
static int ms_base(struct ms *c, const uint8_t id[HASH_LEN])
{
    if (c->nsubplain && bsearch(id, c->subplain, c->nsubplain, HASH_LEN, id_cmp))
        return 0;
    const struct mextra *x = manifest_extra(c->from, id);
    if (x)
        return ms_take(c, x);
    struct plainc *p =
        c->nfplain ? bsearch(id, c->fplain, c->nfplain, sizeof(*c->fplain), id_cmp) : NULL;
    if (!p || c->pdone[p - c->fplain])
        return 0; /* not in from: sub's closure check refuses it */
    c->pdone[p - c->fplain] = true;
    return manifest_add_extra(c->sub, id, p->len, NULL, 0);
}

static int ms_walk(struct ms *c)
{
    struct manifest *s = c->sub;
    int e = 0;
    for (size_t i = 0; e == 0 && i < s->nchunks; i++) {
        const struct mextra *x = manifest_extra(c->from, s->chunks[i].id);
        if (x && x->recipe && (e = manifest_mark_recipe(s, i, true)) == 0)
            e = ms_take(c, x);
    }
    if (e == 0)
        e = ms_plain(c);
    while (e == 0 && c->top) {
        const struct mextra *x = &c->from->extras[c->stack[--c->top]];
        for (uint32_t b = 0; e == 0 && b < x->nbases; b++)
            e = ms_base(c, c->from->bases[x->first_base + b].id);
    }
    return e;
}

int msubset_extras(struct manifest *sub, const struct manifest *from)
{
    size_t n = from->nextras;
    if (n == 0)
        return 0;
    struct ms c = {.sub = sub, .from = from};
    c.xdone = calloc(n, sizeof(*c.xdone));
    c.pdone = calloc(from->nchunks ? from->nchunks : 1, sizeof(*c.pdone));
    c.stack = malloc(n * sizeof(*c.stack));
    int e = c.xdone && c.pdone && c.stack ? ms_walk(&c) : -ENOMEM;
    if (e == 0)
        manifest_sort_extras(sub);
    free(c.xdone);
    free(c.pdone);
    free(c.stack);
    free(c.subplain);
    free(c.fplain);
    return e;
}
