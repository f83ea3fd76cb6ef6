/*
 * presence.c — confirming chunks with a region: HEADs through the
 * region's asynchronous interface, or one listing, whichever is cheaper
 * (see presence.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "service/presence.h"
#include "store/layout.h"

/* A listing request returns up to this many keys on S3; on a dir region
 * every listed key costs about what a HEAD does. */
#define LIST_PAGE_KEYS 1000
#define WINDOW_MAX 64

int presence_item_cmp(const void *a, const void *b)
{
    const struct presence_item *x = a, *y = b;
    return manifest_object_cmp(x->id, x->recipe, x->sig, y->id, y->recipe, y->sig);
}

static void item_key(const struct presence_item *it, char *key)
{
    if (it->recipe)
        layout_recipe(it->id, it->sig, key);
    else
        layout_chunk(it->id, key);
}

struct objs {
    struct presence_item *v;
    size_t n, cap;
    bool plain_only;
};

static int objs_cb(void *arg, const uint8_t id[HASH_LEN], uint32_t len, bool recipe,
                   const uint8_t sig[MANIFEST_RECIPE_SIG])
{
    struct objs *o = arg;
    (void)len;
    if (recipe && o->plain_only)
        return 0;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        struct presence_item *p = realloc(o->v, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        o->v = p;
        o->cap = cap;
    }
    struct presence_item *it = &o->v[o->n++];
    memset(it, 0, sizeof(*it));
    memcpy(it->id, id, HASH_LEN);
    it->recipe = recipe;
    if (recipe)
        memcpy(it->sig, sig, MANIFEST_RECIPE_SIG);
    return 0;
}

/* The objects m names (plain_only: its plain chunks), sorted, each once,
 * with the index's stored sizes of the plain ones. */
static int pr_collect(struct index *ix, const struct manifest *m, bool plain_only,
                      struct presence_item **ret, size_t *ret_n, uint64_t *ret_estimate)
{
    struct objs o = {.plain_only = plain_only};
    struct index_txn *t;
    size_t n = 0;
    int e = manifest_each_object(m, objs_cb, &o);
    if (e == 0 && o.n > 1)
        qsort(o.v, o.n, sizeof(*o.v), presence_item_cmp);
    for (size_t i = 0; e == 0 && i < o.n; i++)
        if (!n || presence_item_cmp(&o.v[n - 1], &o.v[i]))
            o.v[n++] = o.v[i];
    if (e == 0 && (e = index_txn_begin(ix, false, &t)) == 0) {
        for (size_t i = 0; i < n; i++) {
            struct index_chunk c;
            if (!o.v[i].recipe && index_chunk_get(t, o.v[i].id, &c) == 0)
                o.v[i].size = c.stored_len;
        }
        *ret_estimate = 0;
        index_chunk_count(t, ret_estimate);
        index_txn_abort(t);
    }
    if (e < 0) {
        free(o.v);
        return e;
    }
    *ret = o.v ? o.v : calloc(1, sizeof(*o.v));
    *ret_n = n;
    return *ret ? 0 : -ENOMEM;
}

int presence_objects(struct index *ix, const struct manifest *m, struct presence_item **ret,
                     size_t *ret_n, uint64_t *ret_estimate)
{
    return pr_collect(ix, m, false, ret, ret_n, ret_estimate);
}

int presence_items(struct index *ix, const struct manifest *m, struct presence_item **ret,
                   size_t *ret_n, uint64_t *ret_estimate)
{
    return pr_collect(ix, m, true, ret, ret_n, ret_estimate);
}

/* ---- by listing ---------------------------------------------------------- */

struct list_ctx {
    struct presence_item *items;
    size_t n;
    uint64_t listed;
};

static int list_cb(void *ud, const char *key, uint64_t size)
{
    struct list_ctx *c = ud;
    struct presence_item probe;
    struct layout_key k;
    c->listed++;
    if (layout_parse(key, &k) < 0 || (k.kind != LAYOUT_CHUNK && k.kind != LAYOUT_RECIPE))
        return 0;
    memset(&probe, 0, sizeof(probe));
    memcpy(probe.id, k.id, HASH_LEN);
    probe.recipe = k.kind == LAYOUT_RECIPE;
    if (probe.recipe)
        memcpy(probe.sig, k.sig, MANIFEST_RECIPE_SIG);
    struct presence_item *it = bsearch(&probe, c->items, c->n, sizeof(probe), presence_item_cmp);
    if (it && (it->size == 0 || it->size == size))
        it->missing = 0;
    return 0;
}

static int confirm_by_list(struct region *rg, struct presence_item *items, size_t n,
                           struct presence_stats *st)
{
    struct list_ctx c = {.items = items, .n = n};
    char prefix[REGION_KEY_MAX];
    bool recipes = false;
    for (size_t i = 0; i < n; i++) {
        items[i].missing = 1;
        recipes |= items[i].recipe;
    }
    layout_prefix(LAYOUT_CHUNK, NULL, prefix);
    int e = region_list(rg, prefix, list_cb, &c);
    if ((e == 0 || e == -ENOENT) && recipes) {
        layout_prefix(LAYOUT_RECIPE, NULL, prefix);
        e = region_list(rg, prefix, list_cb, &c);
    }
    st->listed += c.listed;
    st->listings++;
    return e == -ENOENT ? 0 : e;
}

/* ---- by HEAD ------------------------------------------------------------- */

static int confirm_by_head(struct region *rg, struct presence_item *items, size_t n,
                           struct presence_stats *st)
{
    size_t win = region_parallelism(rg), next = 0, busy = 0;
    int err = 0;
    if (win > WINDOW_MAX)
        win = WINDOW_MAX;
    if (win == 0)
        win = 1;
    struct region_req *reqs = calloc(win, sizeof(*reqs));
    if (!reqs)
        return -ENOMEM;
    bool *used = calloc(win, sizeof(*used));
    if (!used) {
        free(reqs);
        return -ENOMEM;
    }
    while (next < n || busy) {
        for (size_t k = 0; k < win && next < n && !err; k++) {
            if (used[k])
                continue;
            struct region_req *q = &reqs[k];
            memset(q, 0, sizeof(*q));
            q->kind = RREQ_HAS;
            q->size = items[next].size;
            q->ud = &items[next];
            item_key(&items[next], q->key);
            next++;
            int e = region_submit(rg, q);
            if (e < 0) {
                err = e;
                break;
            }
            used[k] = true;
            busy++;
            st->heads++;
        }
        if (err && !busy)
            break;
        for (struct region_req *d = region_poll(rg, 1000), *nx; d; d = nx) {
            nx = d->next;
            used[d - reqs] = false;
            busy--;
            struct presence_item *it = d->ud;
            if (d->ret < 0 && !err) {
                err = d->ret;
                region_set_error(rg, "%s", d->errmsg[0] ? d->errmsg : err_str(d->ret));
            }
            it->missing = d->ret == 0;
        }
        if (err && next < n)
            next = n; /* stop starting new ones; drain */
    }
    free(used);
    free(reqs);
    return err;
}

int presence_confirm(struct region *rg, struct presence_item *items, size_t n, uint64_t estimate,
                     struct presence_stats *st)
{
    if (n == 0)
        return 0;
    /* A listing costs estimate/LIST_PAGE_KEYS requests on S3 and about
     * estimate stats on a dir; HEADs cost n either way.  Only listings
     * of an S3-like store can win, and only when many chunks are asked. */
    uint64_t pages = estimate / LIST_PAGE_KEYS + 1;
    bool list = region_list_cheap(rg) && (uint64_t)n > 4 * pages;
    int e = list ? confirm_by_list(rg, items, n, st) : confirm_by_head(rg, items, n, st);
    st->asked += n;
    for (size_t i = 0; e == 0 && i < n; i++)
        st->missing += items[i].missing;
    return e;
}
