/*
 * mrecipe.c — manifest version 6: the extras (recipes and base-only
 * chunks) a snapshot needs besides its files' plain chunks, and the
 * checks that keep that list closed, minimal and acyclic.
 *
 * Design note.  The checks run on the struct, after the parser filled it
 * (or before the encoder writes it), in O((chunks + extras + bases) log):
 * the extras must be sorted by id, so one is found by binary search; the
 * file chunks are found through a sorted array of their ids built here
 * (only for a manifest that has extras).  Depth is computed by a
 * recursion bounded by MANIFEST_MAX_DEPTH + 1 levels (a deeper chain or a
 * cycle fails before the stack grows further), memoized per extra.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/manifest.h"

void manifest_recipe_sig(const struct mbase *ids, size_t n, uint8_t out[MANIFEST_RECIPE_SIG])
{
    uint8_t h[HASH_LEN];
    hash_sha256(ids, n * sizeof(*ids), h);
    memcpy(out, h, MANIFEST_RECIPE_SIG);
}

static int base_cmp(const void *a, const void *b)
{
    return memcmp(a, b, HASH_LEN);
}

static int extra_cmp(const void *a, const void *b)
{
    return memcmp(((const struct mextra *)a)->id, ((const struct mextra *)b)->id, HASH_LEN);
}

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    if (c < need)
        c = need;
    void *q = reallocarray(*p, c, size);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int manifest_add_extra(struct manifest *m, const uint8_t id[HASH_LEN], uint32_t len,
                       const uint8_t (*bases)[HASH_LEN], size_t nbases)
{
    if (nbases > MANIFEST_MAX_BASES)
        return -EINVAL;
    if (m->nextras >= MANIFEST_MAX_CHUNKS)
        return CKS_E_LIMIT;
    int r = grow((void **)&m->extras, &m->extras_cap, m->nextras + 1, sizeof(struct mextra));
    if (r == 0)
        r = grow((void **)&m->bases, &m->bases_cap, m->nbases + nbases, sizeof(struct mbase));
    if (r < 0)
        return r;
    struct mextra *x = &m->extras[m->nextras++];
    memset(x, 0, sizeof(*x));
    memcpy(x->id, id, HASH_LEN);
    x->len = len;
    x->recipe = nbases > 0;
    x->nbases = (uint32_t)nbases;
    x->first_base = m->nbases;
    struct mbase *b = &m->bases[m->nbases];
    for (size_t i = 0; i < nbases; i++)
        memcpy(b[i].id, bases[i], HASH_LEN);
    qsort(b, nbases, sizeof(*b), base_cmp);
    m->nbases += nbases;
    if (nbases)
        manifest_recipe_sig(b, nbases, x->sig);
    return 0;
}

bool manifest_chunk_recipe(const struct manifest *m, size_t i)
{
    return i < m->nmarks && m->marks[i];
}

int manifest_mark_recipe(struct manifest *m, size_t i, bool recipe)
{
    if (i >= m->nchunks)
        return -EINVAL;
    if (i >= m->nmarks) {
        if (!recipe)
            return 0;
        bool *v = reallocarray(m->marks, m->nchunks, sizeof(*v));
        if (!v)
            return -ENOMEM;
        memset(v + m->nmarks, 0, (m->nchunks - m->nmarks) * sizeof(*v));
        m->marks = v;
        m->nmarks = m->nchunks;
    }
    m->marks[i] = recipe;
    return 0;
}

void manifest_sort_extras(struct manifest *m)
{
    if (m->nextras)
        qsort(m->extras, m->nextras, sizeof(*m->extras), extra_cmp);
}

const struct mextra *manifest_extra(const struct manifest *m, const uint8_t id[HASH_LEN])
{
    size_t lo = 0, hi = m->nextras;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(m->extras[mid].id, id, HASH_LEN);
        if (c == 0)
            return &m->extras[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- closure ---------------------------------------------------------- */

/* A file chunk's id, and whether any of its places is marked recipe /
 * unmarked (a chunk id must be stored one way in one snapshot). */
struct fchunk {
    uint8_t id[HASH_LEN];
    bool marked, plain;
};

struct xcheck {
    const struct manifest *m;
    struct fchunk *fc; /* sorted, one per distinct id */
    size_t nfc;
    uint8_t *state; /* per extra: 0 new, 1 on the path, 2 done */
    uint8_t *depth; /* per extra, once done */
    bool *used;     /* per extra: some recipe names it as a base */
    size_t idx;     /* where the failure is */
    bool chunk;
    const char *what;
};

static int xfail(struct xcheck *c, size_t idx, bool chunk, int code, const char *what)
{
    c->idx = idx;
    c->chunk = chunk;
    c->what = what;
    return code;
}

static const struct fchunk *fc_find(const struct xcheck *c, const uint8_t id[HASH_LEN])
{
    struct fchunk key;
    memcpy(key.id, id, HASH_LEN);
    return bsearch(&key, c->fc, c->nfc, sizeof(key), base_cmp);
}

/* The distinct file chunk ids, sorted, with how their places are marked. */
static int fc_build(struct xcheck *c)
{
    const struct manifest *m = c->m;
    if (m->nchunks && !(c->fc = calloc(m->nchunks, sizeof(*c->fc))))
        return -ENOMEM;
    for (size_t i = 0; i < m->nchunks; i++) {
        memcpy(c->fc[i].id, m->chunks[i].id, HASH_LEN);
        c->fc[i].marked = manifest_chunk_recipe(m, i);
        c->fc[i].plain = !manifest_chunk_recipe(m, i);
    }
    qsort(c->fc, m->nchunks, sizeof(*c->fc), base_cmp);
    size_t n = 0;
    for (size_t i = 0; i < m->nchunks; i++) {
        if (n && !memcmp(c->fc[n - 1].id, c->fc[i].id, HASH_LEN)) {
            c->fc[n - 1].marked |= c->fc[i].marked;
            c->fc[n - 1].plain |= c->fc[i].plain;
        } else {
            c->fc[n++] = c->fc[i];
        }
    }
    c->nfc = n;
    return 0;
}

/* One extra on its own: order, bases sorted and distinct, sig, kinds. */
static int check_one(struct xcheck *c, size_t i)
{
    const struct manifest *m = c->m;
    const struct mextra *x = &m->extras[i];
    if (i && memcmp(m->extras[i - 1].id, x->id, HASH_LEN) >= 0)
        return xfail(c, i, false, CKS_E_FORMAT, "extras not sorted by chunk id, or listed twice");
    if (x->len == 0 || x->len > m->chunk_max)
        return xfail(c, i, false, CKS_E_FORMAT, "extra: length 0 or above chunk_max");
    const struct fchunk *f = fc_find(c, x->id);
    if (!x->recipe) {
        if (x->nbases)
            return xfail(c, i, false, CKS_E_FORMAT, "k line with bases");
        if (f)
            return xfail(c, i, false, CKS_E_FORMAT, "k line for a file chunk");
        return 0;
    }
    if (x->nbases == 0 || x->nbases > MANIFEST_MAX_BASES || x->first_base > m->nbases ||
        x->nbases > m->nbases - x->first_base)
        return xfail(c, i, false, CKS_E_FORMAT, "recipe: base count out of range");
    if (f && (f->plain || !f->marked))
        return xfail(c, i, false, CKS_E_FORMAT,
                     "r line for a file chunk whose c line is not marked recipe");
    const struct mbase *b = &m->bases[x->first_base];
    for (uint32_t k = 1; k < x->nbases; k++)
        if (memcmp(b[k - 1].id, b[k].id, HASH_LEN) >= 0)
            return xfail(c, i, false, CKS_E_FORMAT, "recipe: bases not ascending and distinct");
    uint8_t sig[MANIFEST_RECIPE_SIG];
    manifest_recipe_sig(b, x->nbases, sig);
    if (memcmp(sig, x->sig, sizeof(sig)))
        return xfail(c, i, false, CKS_E_FORMAT, "recipe: signature is not that of its bases");
    return 0;
}

/* Depth of extra i (recursively its bases'); level counts the recursion. */
static int depth_of(struct xcheck *c, size_t i, unsigned level)
{
    const struct manifest *m = c->m;
    const struct mextra *x = &m->extras[i];
    if (c->state[i] == 2)
        return c->depth[i];
    if (c->state[i] == 1)
        return xfail(c, i, false, CKS_E_FORMAT, "recipe chain has a cycle");
    if (level > MANIFEST_MAX_DEPTH)
        return xfail(c, i, false, CKS_E_LIMIT, "recipe chain deeper than MANIFEST_MAX_DEPTH");
    c->state[i] = 1;
    int d = x->recipe ? 1 : 0; /* a recipe over plain chunks only: 1 */
    for (uint32_t k = 0; x->recipe && k < x->nbases; k++) {
        const uint8_t *bid = m->bases[x->first_base + k].id;
        const struct mextra *y = manifest_extra(m, bid);
        if (!y && !fc_find(c, bid))
            return xfail(c, i, false, CKS_E_FORMAT,
                         "recipe base is neither a file chunk nor an r or k line");
        if (!y)
            continue; /* a plain file chunk: depth 0 */
        size_t j = (size_t)(y - m->extras);
        c->used[j] = true;
        int bd = depth_of(c, j, level + 1);
        if (bd < 0)
            return bd;
        if (bd + 1 > d)
            d = bd + 1;
    }
    if (d > (int)MANIFEST_MAX_DEPTH)
        return xfail(c, i, false, CKS_E_LIMIT, "recipe chain deeper than MANIFEST_MAX_DEPTH");
    c->state[i] = 2;
    c->depth[i] = (uint8_t)d;
    return d;
}

/* Every chunk marked recipe has its r line; every extra not a file chunk
 * is some recipe's base. */
static int check_cover(struct xcheck *c)
{
    const struct manifest *m = c->m;
    for (size_t i = 0; i < m->nchunks; i++) {
        bool marked = manifest_chunk_recipe(m, i);
        const struct mextra *x = marked ? manifest_extra(m, m->chunks[i].id) : NULL;
        if (marked && (!x || !x->recipe))
            return xfail(c, i, true, CKS_E_FORMAT, "chunk marked recipe has no r line");
        if (x && x->len != m->chunks[i].len)
            return xfail(c, i, true, CKS_E_FORMAT, "chunk length differs from its r line's");
    }
    for (size_t i = 0; i < m->nextras; i++)
        if (!c->used[i] && !fc_find(c, m->extras[i].id))
            return xfail(c, i, false, CKS_E_FORMAT, "extra that no recipe needs");
    return 0;
}

static int check_all(struct xcheck *c)
{
    int r = fc_build(c);
    for (size_t i = 0; r == 0 && i < c->m->nextras; i++)
        r = check_one(c, i);
    for (size_t i = 0; r >= 0 && i < c->m->nextras; i++)
        r = depth_of(c, i, 0);
    if (r >= 0)
        r = check_cover(c);
    return r < 0 ? r : 0;
}

int manifest_check_extras(const struct manifest *m, size_t *ret_idx, bool *ret_chunk,
                          const char **ret_what)
{
    struct xcheck c = {.m = m, .what = "out of memory"};
    bool any = m->nextras > 0;
    for (size_t i = 0; !any && i < m->nchunks; i++)
        any = manifest_chunk_recipe(m, i);
    if (!any)
        return 0;
    int r = -ENOMEM;
    size_t n = m->nextras ? m->nextras : 1;
    c.state = calloc(n, 1);
    c.depth = calloc(n, 1);
    c.used = calloc(n, sizeof(bool));
    if (c.state && c.depth && c.used)
        r = check_all(&c);
    free(c.fc);
    free(c.state);
    free(c.depth);
    free(c.used);
    *ret_idx = c.idx;
    *ret_chunk = c.chunk;
    *ret_what = c.what;
    return r;
}

int manifest_each_object(const struct manifest *m, manifest_object_fn fn, void *arg)
{
    static const uint8_t none[MANIFEST_RECIPE_SIG];
    for (size_t i = 0; i < m->nchunks; i++) {
        const struct mchunk *ch = &m->chunks[i];
        int r = manifest_chunk_recipe(m, i) ? 0 : fn(arg, ch->id, ch->len, false, none);
        if (r)
            return r;
    }
    for (size_t i = 0; i < m->nextras; i++) {
        const struct mextra *x = &m->extras[i];
        int r = fn(arg, x->id, x->len, x->recipe, x->recipe ? x->sig : none);
        if (r)
            return r;
    }
    return 0;
}
