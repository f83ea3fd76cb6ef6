/*
 * recipar.c — rebuilding a snapshot's recipes in parallel (recipar.h).
 *
 * Design.  The recipes are rebuilt in batches, each a few fetch runs, so
 * every download goes through fetch.c (striped over the healthy regions,
 * `connections` in flight per region, a thread per part, failover per
 * object) and every decode runs on a fetch part's thread:
 *
 *   1. the targets are ordered by depth (recipes over plain chunks first:
 *      a file chunk rebuilt at depth d is seeded into the cache for the
 *      recipes of depth d+1 that name it), within a depth those whose
 *      bases are all in the cache first (the plain fetch leaves there the
 *      last bases it delivered), else in job (file) order;
 *   2. a batch is the next targets of one depth whose bases' bytes stay
 *      within the level budget (at least one target), the depth's
 *      targets cut into batches of about even size (a fetch run gives a
 *      part to every 4 jobs per region only, so a small last batch would
 *      run on one core);
 *   3. its bases, each once, are taken out of the cache, else read from
 *      the local source when one is set (recipe_src_set_local: restore's
 *      seed, each checked against its id there, or lent unchecked from a
 *      file the index knows; on `workers` threads);
 *      the missing recipe ones (a chain) are rebuilt first by this same
 *      procedure one level down, delivering into the batch; the missing
 *      plain ones (k lines, file chunks evicted or not seeded) are
 *      fetched in one fetch_run;
 *   4. the batch's recipe objects are fetched in one fetch_run_dec whose
 *      decoder (rp_decode) checks that the object names the manifest's
 *      bases, decodes it against the batch's bases (read-only while the
 *      run lasts, so no lock) and checks the id (tdelta_decode); a bad
 *      copy is asked of the next region like a bad chunk, unless a base
 *      the local source lent unchecked (a file the index knows) proves
 *      wrong: then the recipe is put off (FETCH_DEC_LATER), that base is
 *      fetched from the regions and the recipe decoded again (rp_redo);
 *   5. the bases go back into the cache while a target not yet rebuilt
 *      still names them, else are freed.
 *
 * A target whose base no region holds intact is lost: it is left out of
 * the decode run, named (stats->lost_tag; err names the object), and
 * stops the run unless FETCH_KEEP_GOING.
 *
 * Memory: the cache holds at most cache_bytes (recipe_src_open); a batch
 * holds bases of at most cache_bytes / the deepest target's depth per
 * level (a chain holds one batch per level while its lower levels are
 * rebuilt), so at most cache_bytes in all, past one oversize target per
 * level; the fetches' windows are fetch.c's (bounded by `memory`).  One
 * fetch run at a time: batches are sequential, the parallelism is inside
 * each run.  A base evicted before its last use is downloaded again.
 */
#include "service/recipar.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/tdelta.h"

/* A base's bytes: checked against its id (fetched, rebuilt, from the
 * cache, or read from the seed and checked there), or read unchecked from
 * a file the index vouches for (RECIPE_LOCAL_TRUSTED), checked only when a
 * recipe built on it fails its id (rp_trust_check). */
enum rp_trust { RPB_CHECKED, RPB_TRUSTED, RPB_TRUSTED_GOOD, RPB_TRUSTED_WRONG };

struct rp_base {
    uint8_t id[HASH_LEN]; /* first: sorted and searched by id */
    uint32_t len;
    const struct mextra *x; /* its k or r line; NULL: a file chunk */
    struct buf data;
    bool have;
    int trust; /* enum rp_trust; changed by decoders at once (atomic) */
};

struct rp_use {
    uint8_t id[HASH_LEN]; /* first: sorted and searched by id */
    uint32_t left;        /* targets not yet rebuilt that name it */
};

struct rp_lost {
    bool lost;
    size_t tag; /* the first job lost */
};

struct rp {
    struct recipe_src *src;
    struct repo *r;
    const struct manifest *m;
    bool keep_going;
    uint8_t *depth;  /* per extra; 0: not computed */
    uint8_t *later;  /* per extra: its decode was put off (atomic; rp_redo) */
    uint64_t budget; /* base bytes one batch holds */
    struct rp_use *uses;
    size_t nuses;
    bool named; /* err names the first object lost */
    struct fetch_stats *st;
    struct buf *err;
    int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t);
    void *ud;
};

struct rp_batch {
    struct rp *p;
    struct rp_base *b; /* sorted by id, each once */
    size_t nb;
    bool lost_base; /* b[lost_idx] was intact in no region */
    size_t lost_idx;
    bool no_local; /* the local source is not asked (rp_redo's fetch) */
};

/* A job of the level with its sort keys. */
struct rp_order {
    struct fetch_job j;
    const struct mextra *x;
    unsigned depth;
    bool cached;
    size_t idx;
};

static int id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, HASH_LEN);
}

static unsigned rp_depth(struct rp *p, const struct mextra *x)
{
    if (!x || !x->recipe)
        return 0;
    size_t i = (size_t)(x - p->m->extras);
    if (p->depth[i])
        return p->depth[i];
    unsigned d = 0;
    for (uint32_t k = 0; k < x->nbases; k++) {
        unsigned bd = rp_depth(p, manifest_extra(p->m, p->m->bases[x->first_base + k].id));
        d = bd > d ? bd : d;
    }
    p->depth[i] = (uint8_t)(d + 1); /* at most MANIFEST_MAX_DEPTH (manifest check) */
    return d + 1;
}

static const struct mbase *rp_bid(const struct rp *p, const struct mextra *x, uint32_t k)
{
    return &p->m->bases[x->first_base + k];
}

static struct rp_use *rp_use(struct rp *p, const uint8_t id[HASH_LEN])
{
    return p->nuses ? bsearch(id, p->uses, p->nuses, sizeof(*p->uses), id_cmp) : NULL;
}

/* The distinct bases of the targets o[0..n), with how many name each. */
static int rp_uses_build(struct rp *p, const struct rp_order *o, size_t n)
{
    size_t cap = 0, u = 0;
    for (size_t i = 0; i < n; i++)
        cap += o[i].x->nbases;
    if (!(p->uses = calloc(cap ? cap : 1, sizeof(*p->uses))))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < o[i].x->nbases; k++)
            memcpy(p->uses[p->nuses++].id, rp_bid(p, o[i].x, k)->id, HASH_LEN);
    qsort(p->uses, p->nuses, sizeof(*p->uses), id_cmp);
    for (size_t i = 0; i < p->nuses; i++) {
        if (!u || memcmp(p->uses[u - 1].id, p->uses[i].id, HASH_LEN))
            p->uses[u++] = p->uses[i];
        p->uses[u - 1].left++;
    }
    p->nuses = u;
    return 0;
}

static int rp_order_cmp(const void *a, const void *b)
{
    const struct rp_order *x = a, *y = b;
    if (x->depth != y->depth)
        return x->depth < y->depth ? -1 : 1;
    if (x->cached != y->cached)
        return x->cached ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* jobs[0..n) as sortable entries, in build order; CKS_E_FORMAT when a job
 * is no recipe of the manifest. */
static int rp_order_build(struct rp *p, const struct fetch_job *jobs, size_t n,
                          struct rp_order **ret)
{
    struct rp_order *o = calloc(n ? n : 1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const struct mextra *x = manifest_extra(p->m, jobs[i].id);
        if (!x || !x->recipe || x->nbases > TDELTA_MAX_BASES) {
            free(o);
            return CKS_E_FORMAT;
        }
        o[i] = (struct rp_order){.j = jobs[i], .x = x, .depth = rp_depth(p, x), .idx = i};
        o[i].j.sig = x->sig;
        o[i].j.group = 0;
        o[i].j.tried = 0;
        o[i].cached = true;
        for (uint32_t k = 0; k < x->nbases && o[i].cached; k++)
            o[i].cached = recipe_src_cached(p->src, rp_bid(p, x, k)->id);
    }
    qsort(o, n, sizeof(*o), rp_order_cmp);
    *ret = o;
    return 0;
}

static uint64_t rp_bases_bytes(const struct rp *p, const struct rp_order *o)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < o->x->nbases; i++)
        b += recipe_base_len(p->src, rp_bid(p, o->x, i)->id);
    return b;
}

/* How many of o[0..n) make the next batch: of o[0]'s depth, within the
 * budget, and the depth's rest cut into batches of even size (a last
 * batch of a few recipes would fetch them on one part). */
static size_t rp_cut(const struct rp *p, const struct rp_order *o, size_t n)
{
    uint64_t bytes = 0, rest = 0, budget = p->budget ? p->budget : 1;
    size_t k = 0;
    for (size_t i = 0; i < n && o[i].depth == o[0].depth; i++)
        rest += rp_bases_bytes(p, &o[i]);
    uint64_t batches = (rest + budget - 1) / budget;
    uint64_t even = batches > 1 ? (rest + batches - 1) / batches : budget;
    for (; k < n && o[k].depth == o[0].depth && bytes < even; k++) {
        uint64_t b = rp_bases_bytes(p, &o[k]);
        if (k && bytes + b > budget)
            break;
        bytes += b;
    }
    return k;
}

/* The distinct bases of o[0..n) into bt, each taken out of the cache when
 * there. */
static int rp_bases(struct rp_batch *bt, const struct rp_order *o, size_t n)
{
    struct rp *p = bt->p;
    size_t cap = 0, u = 0;
    for (size_t i = 0; i < n; i++)
        cap += o[i].x->nbases;
    if (!(bt->b = calloc(cap ? cap : 1, sizeof(*bt->b))))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < o[i].x->nbases; k++)
            memcpy(bt->b[bt->nb++].id, rp_bid(p, o[i].x, k)->id, HASH_LEN);
    qsort(bt->b, bt->nb, sizeof(*bt->b), id_cmp);
    for (size_t i = 0; i < bt->nb; i++)
        if (!u || memcmp(bt->b[u - 1].id, bt->b[i].id, HASH_LEN))
            bt->b[u++] = bt->b[i];
    bt->nb = u;
    for (size_t i = 0; i < bt->nb; i++) {
        struct rp_base *b = &bt->b[i];
        b->data = (struct buf)BUF_INIT;
        b->x = manifest_extra(p->m, b->id);
        b->len = recipe_base_len(p->src, b->id);
        b->have = recipe_src_take(p->src, b->id, &b->data);
    }
    return 0;
}

/* The bases back into the cache while a target still names them; not a
 * trusted one never checked (the cache holds checked bytes only: a later
 * batch reads it from the local source again, trusted). */
static void rp_release(struct rp_batch *bt)
{
    for (size_t i = 0; i < bt->nb; i++) {
        struct rp_use *u = rp_use(bt->p, bt->b[i].id);
        bool checked = bt->b[i].trust == RPB_CHECKED || bt->b[i].trust == RPB_TRUSTED_GOOD;
        if (bt->b[i].have && checked && u && u->left)
            recipe_src_keep(bt->p->src, bt->b[i].id, &bt->b[i].data);
        buf_free(&bt->b[i].data);
    }
    free(bt->b);
}

static void rp_stats_add(struct rp *p, const struct fetch_stats *st)
{
    p->st->fetched_bytes += st->fetched_bytes;
    p->st->failovers += st->failovers;
    for (size_t i = 0; i < CONFIG_MAX_REGIONS; i++)
        p->st->region_chunks[i] += st->region_chunks[i];
}

/* A fetch's result: its counts added, the first object lost named in
 * p->err.  Returns e when it is no loss (a failure that stops the run),
 * else 0 (the loss is the caller's to attribute: st->lost_tag). */
static int rp_fetched(struct rp *p, int e, const struct fetch_stats *st, struct buf *ferr,
                      const char *what)
{
    rp_stats_add(p, st);
    if (e < 0 && st->lost && !p->named) {
        buf_printf(p->err, "%s%s", what, buf_str(ferr));
        p->named = true;
    } else if (e < 0 && !st->lost && !p->err->len) { /* else on_chunk wrote it */
        buf_printf(p->err, "%s", buf_str(ferr));
    }
    buf_free(ferr);
    return e < 0 && !st->lost ? e : 0;
}

/* A batch's base delivered (fetch_run's or a lower level's on_chunk). */
static int rp_store(void *ud, const struct fetch_job *j, const uint8_t *data, size_t len)
{
    struct rp_base *b = &((struct rp_batch *)ud)->b[j->tag];
    buf_reset(&b->data);
    if (buf_append(&b->data, data, len) < 0)
        return -ENOMEM;
    b->have = true;
    return 0;
}

static int rp_level(struct rp *p, const struct fetch_job *jobs, size_t n, bool top,
                    int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t),
                    void *ud, struct rp_lost *lost);

#define RP_LOCAL_THREADS 64

struct rp_lwork {
    struct rp_batch *bt;
    size_t next; /* the next base to look at (atomic) */
    int err;     /* the first failure (atomic) */
};

/* A thread of rp_local_bases: takes the next base not in hand, asks the
 * local source; each base is written by one thread only. */
static void *rp_local_main(void *arg)
{
    struct rp_lwork *w = arg;
    struct rp_batch *bt = w->bt;
    for (;;) {
        size_t i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
        if (i >= bt->nb || __atomic_load_n(&w->err, __ATOMIC_RELAXED))
            break;
        struct rp_base *b = &bt->b[i];
        if (b->have)
            continue;
        int c = recipe_src_local(bt->p->src, b->id, b->len, &b->data), none = 0;
        if (c < 0)
            __atomic_compare_exchange_n(&w->err, &none, c, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED);
        b->have = c > 0;
        b->trust = c == RECIPE_LOCAL_TRUSTED ? RPB_TRUSTED : RPB_CHECKED;
    }
    return NULL;
}

/* The batch's bases not in the cache that the local source (restore's
 * seed) holds intact, plain or recipe: read from it (each checked there
 * against its id, or trusted: RECIPE_LOCAL_TRUSTED), not fetched; on up
 * to `workers` threads at once. */
static int rp_local_bases(struct rp_batch *bt)
{
    pthread_t th[RP_LOCAL_THREADS];
    struct rp_lwork w = {.bt = bt};
    size_t want = 0, n = repo_workers(bt->p->r), started = 0;
    if (!recipe_src_has_local(bt->p->src) || bt->no_local)
        return 0;
    for (size_t i = 0; i < bt->nb; i++)
        want += !bt->b[i].have;
    n = n < want ? n : want;
    n = n < RP_LOCAL_THREADS ? n : RP_LOCAL_THREADS;
    while (started + 1 < n && pthread_create(&th[started], NULL, rp_local_main, &w) == 0)
        started++;
    rp_local_main(&w); /* this thread too (a failed create leaves fewer) */
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    return w.err;
}

/* The batch's bases not taken from the cache: read from the local source
 * when it has them, else recipes rebuilt one level down, plain chunks
 * fetched.  0 (a base lost is left without data and noted in bt), or a
 * failure that stops the run. */
static int rp_fetch_bases(struct rp_batch *bt)
{
    struct rp *p = bt->p;
    struct fetch_job *fj = calloc(bt->nb ? bt->nb : 1, sizeof(*fj));
    struct fetch_stats st = {0};
    struct buf ferr = BUF_INIT;
    struct rp_lost cl = {0};
    size_t n = 0;
    int e = fj ? rp_local_bases(bt) : -ENOMEM;
    for (size_t i = 0; e == 0 && i < bt->nb; i++)
        if (!bt->b[i].have && bt->b[i].x && bt->b[i].x->recipe)
            fj[n++] = (struct fetch_job){.id = bt->b[i].id, .len = bt->b[i].len, .tag = i};
    if (e == 0 && n)
        e = rp_level(p, fj, n, false, rp_store, bt, &cl);
    if (cl.lost) { /* CKS_E_DIGEST without FETCH_KEEP_GOING: no failure of its own */
        bt->lost_base = true;
        bt->lost_idx = cl.tag;
        e = e == CKS_E_DIGEST ? 0 : e;
    }
    n = 0;
    for (size_t i = 0; e == 0 && !(bt->lost_base && !p->keep_going) && i < bt->nb; i++)
        if (!bt->b[i].have && !(bt->b[i].x && bt->b[i].x->recipe))
            fj[n++] = (struct fetch_job){.id = bt->b[i].id, .len = bt->b[i].len, .tag = i};
    if (e == 0 && n) {
        unsigned fl = FETCH_CONCURRENT | (p->keep_going ? FETCH_KEEP_GOING : 0);
        e = fetch_run(p->r, fj, n, fl, rp_store, bt, &st, &ferr);
        e = rp_fetched(p, e, &st, &ferr, "base ");
        if (st.lost && !bt->lost_base) {
            bt->lost_base = true;
            bt->lost_idx = st.lost_tag;
        }
    }
    free(fj);
    return e;
}

/* After recipe x failed its id: checks its trusted bases not checked yet
 * (several decoders may check one at once: they agree).  Whether one is
 * wrong (then x is decoded again once it is fetched: rp_redo). */
static bool rp_trust_check(struct rp_batch *bt, const struct mextra *x)
{
    bool wrong = false;
    for (uint32_t k = 0; k < x->nbases; k++) {
        struct rp_base *b = bsearch(rp_bid(bt->p, x, k)->id, bt->b, bt->nb, sizeof(*bt->b), id_cmp);
        int t = __atomic_load_n(&b->trust, __ATOMIC_ACQUIRE);
        if (t == RPB_TRUSTED) {
            uint8_t got[HASH_LEN];
            repo_chunk_id(bt->p->r, b->data.data, b->data.len, got);
            t = memcmp(got, b->id, HASH_LEN) ? RPB_TRUSTED_WRONG : RPB_TRUSTED_GOOD;
            __atomic_store_n(&b->trust, t, __ATOMIC_RELEASE);
        }
        wrong = wrong || t == RPB_TRUSTED_WRONG;
    }
    return wrong;
}

/* Decodes a recipe object of the batch (fetch_run_dec's decoder; on the
 * fetch parts' threads: the batch is only read, but for its bases' trust).
 * A recipe that fails its id because a trusted base proved wrong is put
 * off (FETCH_DEC_LATER, p->later): its object is not at fault. */
static int rp_decode(void *ud, struct chunkobj_ctx *z, const struct fetch_job *j,
                     const uint8_t *obj, size_t len, struct buf *out)
{
    struct rp_batch *bt = ud;
    const struct manifest *m = bt->p->m;
    const struct mextra *x = manifest_extra(m, j->id);
    struct tdelta_base tb[TDELTA_MAX_BASES];
    if (!x || !x->recipe || x->nbases > TDELTA_MAX_BASES)
        return CKS_E_FORMAT;
    int e = recipe_refs_match(m, x, obj, len);
    for (uint32_t k = 0; e == 0 && k < x->nbases; k++) {
        const struct rp_base *b =
            bsearch(rp_bid(bt->p, x, k)->id, bt->b, bt->nb, sizeof(*bt->b), id_cmp);
        if (!b || !b->have)
            return -ENOENT; /* never: rp_ready left it out */
        memcpy(tb[k].id, b->id, HASH_LEN);
        tb[k].data = b->data.data;
        tb[k].len = b->data.len;
    }
    if (e == 0)
        e = tdelta_decode(z, obj, len, x->id, x->len, tb, x->nbases, out);
    if (e == 0 && out->len != x->len)
        e = CKS_E_FORMAT;
    if (e == CKS_E_DIGEST && rp_trust_check(bt, x)) {
        __atomic_store_n(&bt->p->later[x - m->extras], 1, __ATOMIC_RELAXED);
        return FETCH_DEC_LATER;
    }
    return e;
}

/* Whether every base of x is in hand; *names_lost: one is the lost one. */
static bool rp_has_bases(const struct rp_batch *bt, const struct mextra *x, bool *names_lost)
{
    bool all = true;
    *names_lost = false;
    for (uint32_t k = 0; k < x->nbases; k++) {
        const struct rp_base *b =
            bsearch(rp_bid(bt->p, x, k)->id, bt->b, bt->nb, sizeof(*bt->b), id_cmp);
        all = all && b && b->have;
        *names_lost = *names_lost || (b && bt->lost_base && b == &bt->b[bt->lost_idx]);
    }
    return all;
}

/* The targets o[0..n) whose bases are all in hand into run (*nrun); the
 * first that names the lost base (else the first left out) is noted in
 * lost.  Returns how many were left out. */
static size_t rp_ready(const struct rp_batch *bt, const struct rp_order *o, size_t n,
                       struct fetch_job *run, size_t *nrun, struct rp_lost *lost)
{
    size_t out = 0, first_out = SIZE_MAX, named = SIZE_MAX;
    *nrun = 0;
    for (size_t i = 0; i < n; i++) {
        bool nl;
        if (rp_has_bases(bt, o[i].x, &nl)) {
            run[(*nrun)++] = o[i].j;
            continue;
        }
        out++;
        first_out = first_out == SIZE_MAX ? i : first_out;
        named = named == SIZE_MAX && nl ? i : named;
    }
    if (out && !lost->lost) {
        lost->lost = true;
        lost->tag = o[named != SIZE_MAX ? named : first_out].j.tag;
    }
    return out;
}

/* The batch's targets o[0..n) whose bases are in hand fetched, decoded
 * and handed to on_chunk. */
static int rp_decode_run(struct rp_batch *bt, const struct rp_order *o, size_t n, bool top,
                         int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t),
                         void *ud, struct rp_lost *lost)
{
    struct rp *p = bt->p;
    struct fetch_job *run = calloc(n ? n : 1, sizeof(*run));
    struct fetch_stats st = {0};
    struct buf ferr = BUF_INIT;
    size_t nrun = 0;
    int e = run ? 0 : -ENOMEM;
    if (e == 0 && rp_ready(bt, o, n, run, &nrun, lost) && !p->keep_going)
        e = CKS_E_DIGEST;
    if (e == 0 && nrun) {
        struct fetch_decoder dec = {.decode = rp_decode, .ud = bt};
        unsigned fl = FETCH_CONCURRENT | (p->keep_going ? FETCH_KEEP_GOING : 0);
        e = fetch_run_dec(p->r, run, nrun, fl, &dec, on_chunk, ud, &st, &ferr);
        if (e < 0 && st.lost && !lost->lost) {
            lost->lost = true;
            lost->tag = st.lost_tag;
        }
        int fe = rp_fetched(p, e, &st, &ferr, top ? "" : "base ");
        e = fe < 0 ? fe : e < 0 && !p->keep_going ? e : 0;
    }
    free(run);
    return e;
}

/* The targets of o[0..n) put off by rp_decode (a trusted local base
 * proved wrong): those bases dropped and fetched from the regions (or
 * rebuilt), checked, then the targets fetched and decoded again (a base
 * is trusted no more, so none is put off twice).  The fallback that keeps
 * a seed changed behind its identity from failing the restore. */
static int rp_redo(struct rp_batch *bt, const struct rp_order *o, size_t n, bool top,
                   int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t),
                   void *ud, struct rp_lost *lost)
{
    struct rp *p = bt->p;
    struct rp_order *redo = calloc(n ? n : 1, sizeof(*redo));
    size_t nredo = 0, wrong = 0;
    if (!redo)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (__atomic_load_n(&p->later[o[i].x - p->m->extras], __ATOMIC_RELAXED))
            redo[nredo++] = o[i];
    for (size_t i = 0; i < nredo; i++)
        p->later[redo[i].x - p->m->extras] = 0;
    for (size_t i = 0; i < bt->nb; i++) {
        if (bt->b[i].trust != RPB_TRUSTED_WRONG)
            continue;
        buf_reset(&bt->b[i].data);
        bt->b[i].have = false;
        bt->b[i].trust = RPB_CHECKED;
        wrong++;
    }
    int e = 0;
    if (nredo) {
        log_warn("seed: %zu recipe base(s) read from local files the index knows did not match "
                 "their ids (changed on disk); fetched from the regions",
                 wrong);
        recipe_src_add_refetched(p->src, wrong);
        bt->no_local = true;
        e = rp_fetch_bases(bt);
        bt->no_local = false;
    }
    if (e == 0 && nredo)
        e = rp_decode_run(bt, redo, nredo, top, on_chunk, ud, lost);
    free(redo);
    return e;
}

/* One batch: bases, then the recipes decoded and handed to on_chunk. */
static int rp_batch(struct rp *p, const struct rp_order *o, size_t n, bool top,
                    int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t),
                    void *ud, struct rp_lost *lost)
{
    struct rp_batch bt = {.p = p};
    int e = rp_bases(&bt, o, n);
    if (e == 0)
        e = rp_fetch_bases(&bt);
    if (e == 0)
        e = rp_decode_run(&bt, o, n, top, on_chunk, ud, lost);
    if (e == 0)
        e = rp_redo(&bt, o, n, top, on_chunk, ud, lost);
    for (size_t i = 0; top && i < n; i++)
        for (uint32_t k = 0; k < o[i].x->nbases; k++) {
            struct rp_use *u = rp_use(p, rp_bid(p, o[i].x, k)->id);
            if (u && u->left)
                u->left--;
        }
    if (bt.b)
        rp_release(&bt);
    return e;
}

/* Rebuilds jobs[0..n) (recipes of the manifest) batch by batch; top: the
 * targets (their bases' uses counted), else a lower level of a chain.
 * Returns 0 (losses with FETCH_KEEP_GOING noted in lost), CKS_E_DIGEST
 * with lost set, or another failure. */
static int rp_level(struct rp *p, const struct fetch_job *jobs, size_t n, bool top,
                    int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t),
                    void *ud, struct rp_lost *lost)
{
    struct rp_order *o = NULL;
    int e = rp_order_build(p, jobs, n, &o);
    if (e == 0 && top) {
        unsigned deepest = n ? o[n - 1].depth : 1;
        p->budget = recipe_src_budget(p->src) / (deepest ? deepest : 1);
        e = rp_uses_build(p, o, n);
    }
    for (size_t i = 0; e == 0 && i < n;) {
        size_t k = rp_cut(p, o + i, n - i);
        e = rp_batch(p, o + i, k, top, on_chunk, ud, lost);
        i += k;
    }
    free(o);
    return e;
}

/* The targets' on_chunk: a file chunk that is a base is seeded first. */
static int rp_deliver(void *ud, const struct fetch_job *j, const uint8_t *data, size_t len)
{
    struct rp *p = ud;
    recipe_src_seed(p->src, j->id, data, len);
    return p->on_chunk(p->ud, j, data, len);
}

int recipar_run(struct recipe_src *src, struct fetch_job *jobs, size_t n, unsigned flags,
                int (*on_chunk)(void *ud, const struct fetch_job *j, const uint8_t *data,
                                size_t len),
                void *ud, struct fetch_stats *stats, struct buf *err)
{
    const struct manifest *m = recipe_src_manifest(src);
    struct rp p = {.src = src,
                   .r = recipe_src_repo(src),
                   .m = m,
                   .keep_going = (flags & FETCH_KEEP_GOING) != 0,
                   .st = stats,
                   .err = err,
                   .on_chunk = on_chunk,
                   .ud = ud};
    struct rp_lost lost = {0};
    memset(stats, 0, sizeof(*stats));
    p.depth = calloc(m->nextras ? m->nextras : 1, 1);
    p.later = calloc(m->nextras ? m->nextras : 1, 1);
    if (!p.depth || !p.later) {
        free(p.depth);
        free(p.later);
        return -ENOMEM;
    }
    int e = rp_level(&p, jobs, n, true, rp_deliver, &p, &lost);
    if (e == 0 && lost.lost)
        e = CKS_E_DIGEST; /* FETCH_KEEP_GOING: the others were rebuilt */
    stats->lost = lost.lost;
    stats->lost_tag = lost.tag;
    if (e < 0 && !err->len)
        buf_printf(err, "%s", err_str(e));
    free(p.uses);
    free(p.depth);
    free(p.later);
    return e;
}
