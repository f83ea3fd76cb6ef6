/*
 * recipe.c — resolving a version 6 snapshot's recipes (see recipe.h).
 *
 * Design note.  A recipe's bases are the ones its r line names (the
 * manifest is the authority, so prune, copy and verify agree with
 * restore); the object must name exactly those (tdelta_refs), or that
 * region's copy counts as damaged.  Bases are resolved before the recipe
 * object is read, once for all regions: a base failing everywhere fails
 * the recipe whichever region holds it.  Restore seeds the cache with the
 * plain file chunks that are bases as the parallel fetch delivers them
 * (recipe_src_seed), so a derived bf16's master chunks are not downloaded
 * twice.  The recursion is bounded by the
 * manifest's depth check (MANIFEST_MAX_DEPTH); the cache is a short array
 * searched linearly (a few dozen entries of chunk size).
 */
#include "service/recipe.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "engine/tdelta.h"
#include "store/layout.h"

#define RECIPE_CACHE_MAX 256 /* entries */

struct rc_entry {
    uint8_t id[HASH_LEN];
    struct buf data;
    uint64_t tick;
};

struct flen {
    uint8_t id[HASH_LEN];
    uint32_t len;
};

struct recipe_src {
    struct repo *r;
    const struct manifest *m;
    struct chunkobj_ctx z;
    struct flen *fl; /* the file chunks' ids and lengths, sorted */
    size_t nfl;
    struct rc_entry c[RECIPE_CACHE_MAX];
    size_t nc;
    uint64_t bytes, max_bytes, tick;
    uint64_t fetched;   /* object bytes downloaded */
    struct mbase *want; /* plain file chunks some recipe names as a base, sorted */
    size_t nwant;
    pthread_mutex_t mu;    /* the cache, for recipe_src_seed's threads */
    recipe_local_fn local; /* restore's seed: bases read from local files */
    void *local_ud;
    uint64_t refetched; /* trusted local bases that proved wrong */
};

static int flen_cmp(const void *a, const void *b)
{
    return memcmp(a, b, HASH_LEN);
}

/* The file chunks that some r line names as a base (plain, or rebuilt
 * from their own recipe): what recipe_src_seed keeps. */
static int want_build(struct recipe_src *s)
{
    const struct manifest *m = s->m;
    if (m->nbases && !(s->want = calloc(m->nbases, sizeof(*s->want))))
        return -ENOMEM;
    for (size_t i = 0; i < m->nbases; i++)
        if (bsearch(m->bases[i].id, s->fl, s->nfl, sizeof(*s->fl), flen_cmp))
            s->want[s->nwant++] = m->bases[i];
    if (s->nwant)
        qsort(s->want, s->nwant, sizeof(*s->want), flen_cmp);
    size_t u = 0; /* each id once */
    for (size_t i = 0; i < s->nwant; i++)
        if (!u || memcmp(s->want[u - 1].id, s->want[i].id, HASH_LEN))
            s->want[u++] = s->want[i];
    s->nwant = u;
    return 0;
}

int recipe_src_open(struct repo *r, const struct manifest *m, size_t cache_bytes,
                    struct recipe_src **ret)
{
    struct recipe_src *s = calloc(1, sizeof(*s));
    if (!s || (m->nchunks && !(s->fl = calloc(m->nchunks, sizeof(*s->fl))))) {
        free(s);
        return -ENOMEM;
    }
    s->r = r;
    s->m = m;
    s->z = repo_chunkobj_ctx(r);
    s->max_bytes = cache_bytes;
    for (size_t i = 0; i < m->nchunks; i++) {
        memcpy(s->fl[i].id, m->chunks[i].id, HASH_LEN);
        s->fl[i].len = m->chunks[i].len;
    }
    s->nfl = m->nchunks;
    qsort(s->fl, s->nfl, sizeof(*s->fl), flen_cmp);
    pthread_mutex_init(&s->mu, NULL);
    int e = want_build(s);
    if (e < 0) {
        recipe_src_close(s);
        return e;
    }
    *ret = s;
    return 0;
}

void recipe_src_close(struct recipe_src *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nc; i++)
        buf_free(&s->c[i].data);
    chunkobj_ctx_free(&s->z);
    pthread_mutex_destroy(&s->mu);
    free(s->fl);
    free(s->want);
    free(s);
}

/* ---- the cache ---------------------------------------------------------- */

static struct rc_entry *rc_find(struct recipe_src *s, const uint8_t id[HASH_LEN])
{
    for (size_t i = 0; i < s->nc; i++)
        if (!memcmp(s->c[i].id, id, HASH_LEN)) {
            s->c[i].tick = ++s->tick;
            return &s->c[i];
        }
    return NULL;
}

static void rc_evict(struct recipe_src *s)
{
    size_t old = 0;
    for (size_t i = 1; i < s->nc; i++)
        if (s->c[i].tick < s->c[old].tick)
            old = i;
    s->bytes -= s->c[old].data.len;
    buf_free(&s->c[old].data);
    s->c[old] = s->c[--s->nc];
}

static void rc_put(struct recipe_src *s, const uint8_t id[HASH_LEN], const struct buf *data)
{
    if (data->len > s->max_bytes)
        return;
    while (s->nc && (s->nc == RECIPE_CACHE_MAX || s->bytes + data->len > s->max_bytes))
        rc_evict(s);
    struct rc_entry *e = &s->c[s->nc];
    memset(e, 0, sizeof(*e));
    if (buf_append(&e->data, data->data, data->len) < 0) {
        buf_free(&e->data);
        return; /* a cache miss later, not an error */
    }
    memcpy(e->id, id, HASH_LEN);
    e->tick = ++s->tick;
    s->bytes += data->len;
    s->nc++;
}

/* ---- one object from the regions ------------------------------------------ */

static const char *rg_name(const struct recipe_src *s, size_t i)
{
    return repo_region(s->r, i)->conf.name;
}

/* Notes region i's failure for the final message. */
static void why_add(struct buf *why, const char *region, int e)
{
    buf_printf(why, "%sregion '%s': %s", why->len ? "; " : "", region,
               e == -ENOENT ? "missing" : err_str(e));
}

static int plain_get(struct recipe_src *s, const uint8_t id[HASH_LEN], uint32_t len,
                     struct buf *out, struct buf *err)
{
    char key[LAYOUT_KEY_MAX];
    struct buf obj = BUF_INIT, why = BUF_INIT;
    int e = -ENOENT, all_missing = 1;
    layout_chunk(id, key);
    REPO_FOR_HEALTHY(s->r, i) {
        e = region_get(repo_region(s->r, i), key,
                       CHUNKOBJ_HEADER_LEN + (size_t)len + len / 8 + 1024, &obj);
        s->fetched += e == 0 ? obj.len : 0;
        if (e == 0)
            e = chunkobj_decode(&s->z, obj.data, obj.len, id, len, out);
        if (e == 0 && out->len != len)
            e = CKS_E_FORMAT;
        if (e == 0)
            break;
        all_missing &= e == -ENOENT;
        why_add(&why, rg_name(s, i), e);
    }
    if (e < 0) {
        buf_printf(err, "base \"%s\": intact in no region (%s)", key, buf_str(&why));
        e = all_missing ? -ENOENT : CKS_E_DIGEST;
    }
    buf_free(&obj);
    buf_free(&why);
    return e;
}

int recipe_refs_match(const struct manifest *m, const struct mextra *x, const uint8_t *obj,
                      size_t len)
{
    struct tdelta_ref refs[TDELTA_MAX_BASES];
    size_t n = 0;
    int e = tdelta_refs(obj, len, refs, TDELTA_MAX_BASES, &n);
    if (e < 0)
        return e;
    if (n != x->nbases)
        return CKS_E_FORMAT;
    for (size_t k = 0; k < n; k++) {
        bool found = false;
        for (uint32_t b = 0; b < x->nbases && !found; b++)
            found = !memcmp(refs[k].id, m->bases[x->first_base + b].id, HASH_LEN);
        if (!found)
            return CKS_E_FORMAT;
    }
    return 0;
}

uint32_t recipe_base_len(const struct recipe_src *s, const uint8_t id[HASH_LEN])
{
    const struct mextra *x = manifest_extra(s->m, id);
    if (x)
        return x->len;
    const struct flen *f = bsearch(id, s->fl, s->nfl, sizeof(*s->fl), flen_cmp);
    return f ? f->len : 0;
}

/* x's bases' plaintext into bb[0..x->nbases), resolved (recursively). */
static int bases_get(struct recipe_src *s, const struct mextra *x, struct buf *bb,
                     struct tdelta_base *tb, struct buf *err)
{
    for (uint32_t k = 0; k < x->nbases; k++) {
        const uint8_t *id = s->m->bases[x->first_base + k].id;
        int e = recipe_get(s, id, recipe_base_len(s, id), &bb[k], err);
        if (e < 0)
            return e;
        memcpy(tb[k].id, id, HASH_LEN);
        tb[k].data = bb[k].data;
        tb[k].len = bb[k].len;
    }
    return 0;
}

/* Region i's copy of x's recipe object, decoded with bases tb into out. */
static int recipe_in(struct recipe_src *s, size_t i, const struct mextra *x,
                     const struct tdelta_base *tb, bool quick, struct buf *obj, struct buf *out)
{
    char key[LAYOUT_KEY_MAX];
    layout_recipe(x->id, x->sig, key);
    size_t max = CHUNKOBJ_HEADER_LEN + (size_t)x->len + x->len / 8 + 1024 + TDELTA_HEAD +
                 TDELTA_BASE_REC * TDELTA_MAX_BASES + (size_t)TDELTA_SEG_REC * TDELTA_MAX_SEGS;
    int e = region_get(repo_region(s->r, i), key, max, obj);
    s->fetched += e == 0 ? obj->len : 0;
    if (e == 0)
        e = recipe_refs_match(s->m, x, obj->data, obj->len);
    if (e == 0 && !quick)
        e = tdelta_decode(&s->z, obj->data, obj->len, x->id, x->len, tb, x->nbases, out);
    if (e == 0 && !quick && out->len != x->len)
        e = CKS_E_FORMAT;
    return e;
}

static int recipe_fetch(struct recipe_src *s, const struct mextra *x, struct buf *out,
                        struct buf *err)
{
    struct buf bb[TDELTA_MAX_BASES], obj = BUF_INIT, why = BUF_INIT;
    struct tdelta_base tb[TDELTA_MAX_BASES];
    char key[LAYOUT_KEY_MAX];
    int e, all_missing = 1;
    for (size_t k = 0; k < TDELTA_MAX_BASES; k++)
        bb[k] = (struct buf)BUF_INIT;
    e = bases_get(s, x, bb, tb, err);
    if (e == 0) {
        e = -ENOENT;
        REPO_FOR_HEALTHY(s->r, i) {
            if ((e = recipe_in(s, i, x, tb, false, &obj, out)) == 0)
                break;
            all_missing &= e == -ENOENT;
            why_add(&why, rg_name(s, i), e);
        }
        if (e < 0) {
            layout_recipe(x->id, x->sig, key);
            buf_printf(err, "recipe \"%s\": intact in no region (%s)", key, buf_str(&why));
            e = all_missing ? -ENOENT : CKS_E_DIGEST;
        }
    }
    for (size_t k = 0; k < TDELTA_MAX_BASES; k++)
        buf_free(&bb[k]);
    buf_free(&obj);
    buf_free(&why);
    return e;
}

int recipe_get(struct recipe_src *s, const uint8_t id[HASH_LEN], uint32_t len, struct buf *out,
               struct buf *err)
{
    buf_reset(out);
    pthread_mutex_lock(&s->mu);
    struct rc_entry *c = rc_find(s, id);
    int e = c ? buf_append(out, c->data.data, c->data.len) : 1;
    pthread_mutex_unlock(&s->mu);
    if (e <= 0)
        return e;
    const struct mextra *x = manifest_extra(s->m, id);
    e = x && x->recipe ? recipe_fetch(s, x, out, err) : plain_get(s, id, len, out, err);
    if (e == 0) {
        pthread_mutex_lock(&s->mu);
        rc_put(s, id, out);
        pthread_mutex_unlock(&s->mu);
    }
    return e;
}

void recipe_src_seed(struct recipe_src *s, const uint8_t id[HASH_LEN], const uint8_t *data,
                     size_t len)
{
    if (!s->nwant || !bsearch(id, s->want, s->nwant, sizeof(*s->want), flen_cmp))
        return;
    struct buf b = {.data = (uint8_t *)data, .len = len};
    pthread_mutex_lock(&s->mu);
    if (!rc_find(s, id))
        rc_put(s, id, &b);
    pthread_mutex_unlock(&s->mu);
}

bool recipe_src_take(struct recipe_src *s, const uint8_t id[HASH_LEN], struct buf *out)
{
    pthread_mutex_lock(&s->mu);
    struct rc_entry *c = rc_find(s, id);
    if (c) {
        buf_free(out);
        *out = c->data;
        s->bytes -= c->data.len;
        *c = s->c[--s->nc];
    }
    pthread_mutex_unlock(&s->mu);
    return c != NULL;
}

bool recipe_src_cached(struct recipe_src *s, const uint8_t id[HASH_LEN])
{
    pthread_mutex_lock(&s->mu);
    bool yes = false;
    for (size_t i = 0; i < s->nc && !yes; i++)
        yes = !memcmp(s->c[i].id, id, HASH_LEN);
    pthread_mutex_unlock(&s->mu);
    return yes;
}

void recipe_src_keep(struct recipe_src *s, const uint8_t id[HASH_LEN], struct buf *data)
{
    pthread_mutex_lock(&s->mu);
    if (!rc_find(s, id) && data->len <= s->max_bytes) {
        while (s->nc && (s->nc == RECIPE_CACHE_MAX || s->bytes + data->len > s->max_bytes))
            rc_evict(s);
        struct rc_entry *c = &s->c[s->nc++];
        memcpy(c->id, id, HASH_LEN);
        c->data = *data;
        c->tick = ++s->tick;
        s->bytes += data->len;
        *data = (struct buf)BUF_INIT;
    }
    pthread_mutex_unlock(&s->mu);
    buf_free(data);
}

struct repo *recipe_src_repo(const struct recipe_src *s)
{
    return s->r;
}

const struct manifest *recipe_src_manifest(const struct recipe_src *s)
{
    return s->m;
}

uint64_t recipe_src_budget(const struct recipe_src *s)
{
    return s->max_bytes;
}

uint64_t recipe_src_fetched(const struct recipe_src *s)
{
    return s->fetched;
}

void recipe_src_set_local(struct recipe_src *s, recipe_local_fn fn, void *ud)
{
    s->local = fn;
    s->local_ud = ud;
}

bool recipe_src_has_local(const struct recipe_src *s)
{
    return s->local != NULL;
}

int recipe_src_local(struct recipe_src *s, const uint8_t id[HASH_LEN], uint32_t len,
                     struct buf *out)
{
    return s->local ? s->local(s->local_ud, id, len, out) : 0;
}

int recipe_check_in(struct recipe_src *s, size_t i, const struct mextra *x, bool quick,
                    struct buf *err)
{
    struct buf bb[TDELTA_MAX_BASES], obj = BUF_INIT, out = BUF_INIT;
    struct tdelta_base tb[TDELTA_MAX_BASES];
    int e = 0;
    for (size_t k = 0; k < TDELTA_MAX_BASES; k++)
        bb[k] = (struct buf)BUF_INIT;
    if (!quick)
        e = bases_get(s, x, bb, tb, err);
    if (e == 0)
        e = recipe_in(s, i, x, tb, quick, &obj, &out);
    else if (e != -ENOMEM)
        e = 1; /* a base, not this object */
    for (size_t k = 0; k < TDELTA_MAX_BASES; k++)
        buf_free(&bb[k]);
    buf_free(&obj);
    buf_free(&out);
    return e;
}

void recipe_src_add_refetched(struct recipe_src *s, uint64_t n)
{
    __atomic_add_fetch(&s->refetched, n, __ATOMIC_RELAXED);
}

uint64_t recipe_src_refetched(const struct recipe_src *s)
{
    return __atomic_load_n(&s->refetched, __ATOMIC_RELAXED);
}
