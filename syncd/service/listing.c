/*
 * listing.c — snapshot listings, local and remote (listing.h).
 *
 * Design: the local listing is one read transaction over the index's
 * snapshot table, its region count the committed bits of the configured
 * regions' slots.  The remote one takes the catalog's union of the
 * healthy regions' listings and reads each manifest for its details, then
 * one lineage scan per run for the resume point.
 */
#include "service/listing.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "service/catalog.h"
#include "service/lineage.h"
#include "service/restore.h"

static struct listing_row *listing_add(struct listing *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        struct listing_row *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        l->v = v;
        l->cap = cap;
    }
    memset(&l->v[l->n], 0, sizeof(l->v[0]));
    return &l->v[l->n++];
}

static int listing_row_cmp(const void *a, const void *b)
{
    const struct listing_row *x = a, *y = b;
    int c = strcmp(x->run, y->run);
    return c ? c : strcmp(x->id, y->id);
}

void listing_free(struct listing *l)
{
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* ---- local ------------------------------------------------------------- */

struct listing_local {
    struct listing *l;
    uint32_t mask;
    unsigned quorum;
};

static int listing_local_cb(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct listing_local *lc = ud;
    struct listing_row *w = listing_add(lc->l);
    if (!w)
        return -ENOMEM;
    snprintf(w->run, sizeof(w->run), "%s", run);
    snprintf(w->id, sizeof(w->id), "%s", id);
    w->step = s->step;
    w->time = s->time;
    w->files = s->nfiles;
    w->bytes = s->bytes;
    w->regions = (unsigned)__builtin_popcount(s->committed & lc->mask);
    w->durable = w->regions >= lc->quorum;
    return 0;
}

static int listing_local(struct repo *r, const char *run, struct listing *l)
{
    struct index_txn *t;
    struct listing_local lc = {l, 0, r->conf.quorum};
    for (size_t i = 0; i < r->nregions; i++)
        lc.mask |= 1u << r->regions[i]->slot;
    int e = index_txn_begin(r->ix, false, &t);
    if (e < 0)
        return e;
    e = index_snap_foreach(t, run, listing_local_cb, &lc);
    index_txn_abort(t);
    return e;
}

/* ---- remote ------------------------------------------------------------ */

/* A row's details from its manifest; logs why when it cannot be read. */
static void listing_details(struct repo *r, struct listing_row *w)
{
    struct manifest m;
    struct buf err = BUF_INIT;
    if (restore_find(r, w->run, w->id, &m, NULL, &err) == 0) {
        w->step = m.step;
        w->time = m.time;
        w->gen = m.gen;
        for (size_t f = 0; f < m.nfiles; f++) {
            w->files += m.files[f].type == MFILE_REG;
            w->bytes += m.files[f].size;
        }
        manifest_free(&m);
    } else {
        log_warn("%s", buf_str(&err));
    }
    buf_free(&err);
}

/* The regions' snapshots (of run, or only id when given), with the
 * details from their manifests. */
static int listing_remote(struct repo *r, const char *run, const char *id, struct listing *l)
{
    struct catalog_snap *snaps = NULL;
    size_t n = 0;
    int e = catalog_snapshots(r, run, &snaps, &n);
    if (e == -ENOENT)
        return 0;
    for (size_t k = 0; e == 0 && k < n; k++) {
        struct listing_row *w;
        if (id && strcmp(snaps[k].id, id))
            continue;
        if (!(w = listing_add(l))) {
            e = -ENOMEM;
            break;
        }
        snprintf(w->run, sizeof(w->run), "%s", snaps[k].run);
        snprintf(w->id, sizeof(w->id), "%s", snaps[k].id);
        w->regions = snaps[k].regions;
        w->durable = w->regions >= r->conf.quorum;
        listing_details(r, w);
    }
    free(snaps);
    return e;
}

/* Marks each run's resume point (service/lineage.h): what restore --latest
 * and migrate-in take.  Rows are sorted by run. */
static void listing_mark_resume(struct repo *r, struct listing *l)
{
    for (size_t k = 0; k < l->n; k++) {
        struct lineage_view v;
        struct buf err = BUF_INIT;
        const char *ids[1], *why[1];
        if (k && !strcmp(l->v[k - 1].run, l->v[k].run))
            continue; /* one scan per run */
        if (lineage_scan(r, r->regions, l->v[k].run, &v, &err) == 0) {
            if (lineage_candidates(r, &v, ids, why, 1) == 1)
                for (size_t i = k; i < l->n && !strcmp(l->v[i].run, l->v[k].run); i++)
                    l->v[i].resume = !strcmp(l->v[i].id, ids[0]);
            lineage_view_free(&v);
        }
        buf_free(&err);
    }
}

int listing_snapshots(struct repo *r, const char *run, unsigned flags, struct listing *l)
{
    bool remote = flags & LISTING_REMOTE;
    int e = remote ? listing_remote(r, run, NULL, l) : listing_local(r, run, l);
    if (e < 0)
        return e;
    if (l->n) /* qsort(NULL, 0, ...) is undefined */
        qsort(l->v, l->n, sizeof(*l->v), listing_row_cmp);
    if (remote)
        listing_mark_resume(r, l);
    return 0;
}

int listing_find_run(struct repo *r, const char *id, char *ret_run, size_t cap)
{
    struct listing l = {0};
    int e = listing_local(r, NULL, &l);
    for (size_t k = 0; e == 0 && k < l.n; k++)
        if (!strcmp(l.v[k].id, id)) {
            snprintf(ret_run, cap, "%s", l.v[k].run);
            listing_free(&l);
            return 0;
        }
    l.n = 0;
    e = listing_remote(r, NULL, id, &l);
    if (e == 0 && l.n > 0)
        snprintf(ret_run, cap, "%s", l.v[0].run);
    else if (e == 0)
        e = -ENOENT;
    listing_free(&l);
    return e;
}

int listing_only_run(struct repo *r, char *ret_run, size_t cap, struct buf *err)
{
    struct listing l = {0};
    size_t runs = 0;
    int e = listing_remote(r, NULL, NULL, &l);
    for (size_t k = 0; e == 0 && k < l.n; k++) {
        size_t seen = 0;
        while (seen < k && strcmp(l.v[seen].run, l.v[k].run))
            seen++;
        if (seen < k)
            continue;
        buf_printf(err, "%s\"%s\"", runs ? ", " : "", l.v[k].run);
        if (runs++ == 0)
            snprintf(ret_run, cap, "%s", l.v[k].run);
    }
    listing_free(&l);
    if (e == 0 && runs == 0) {
        buf_printf(err, "the repository holds no snapshot");
        e = -ENOENT;
    } else if (e == 0 && runs > 1) {
        e = -EEXIST;
    }
    return e;
}
