/*
 * catalog.c — a run's units from the regions' listings and manifests.
 * Listings are merged across regions (a region that missed a snapshot does
 * not hide it); each manifest is read once, from the first region that
 * has it intact (restore_find).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/lineage.h"
#include "engine/ref.h"
#include "service/catalog.h"
#include "engine/ckptname.h"
#include "service/restore.h"
#include "store/layout.h"

struct snaps {
    struct catalog_snap *v;
    size_t n, cap;
};

/* Manifests' keys (store/layout.h); anything else under the prefix is
 * not ours and is ignored. */
static int snaps_cb(void *ud, const char *key, uint64_t size)
{
    struct snaps *l = ud;
    struct layout_key k;
    (void)size;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_SNAPSHOT)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct catalog_snap *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    struct catalog_snap *c = &l->v[l->n];
    snprintf(c->run, sizeof(c->run), "%s", k.dir);
    snprintf(c->id, sizeof(c->id), "%.*s", MANIFEST_ID_MAX, k.name); /* checked: fits */
    c->regions = 1;
    l->n++;
    return 0;
}

static int snap_cmp(const void *a, const void *b)
{
    const struct catalog_snap *x = a, *y = b;
    int c = strcmp(x->run, y->run);
    return c ? c : strcmp(x->id, y->id);
}

/* forget/<run>/g<gen>.s<step>.<id>: the snapshot is removed; drop it. */
static int forgets_cb(void *ud, const char *key, uint64_t size)
{
    struct snaps *l = ud;
    struct lineage_rec rec;
    struct catalog_snap k;
    (void)size;
    if (layout_record_parse(key, &rec) < 0 || rec.kind != LINEAGE_FORGET)
        return 0;
    snprintf(k.run, sizeof(k.run), "%s", rec.run);
    snprintf(k.id, sizeof(k.id), "%s", rec.id);
    struct catalog_snap *c = l->n ? bsearch(&k, l->v, l->n, sizeof(k), snap_cmp) : NULL;
    if (c)
        c->regions = 0;
    return 0;
}

/* Removes the snapshots any region has a forget record for. */
static void catalog_drop_forgotten(struct repo *r, const char *run, struct snaps *l)
{
    char prefix[REGION_KEY_MAX];
    size_t out = 0;
    if (layout_prefix(LAYOUT_FORGET, run, prefix) < 0)
        return; /* no key names such a run: nothing to drop */
    for (size_t i = 0; i < r->nregions; i++)
        if (!r->health[i] && region_list(r->regions[i], prefix, forgets_cb, l) < 0)
            log_warn("%s", region_last_error(r->regions[i]));
    for (size_t k = 0; k < l->n; k++)
        if (l->v[k].regions)
            l->v[out++] = l->v[k];
    l->n = out;
}

int catalog_snapshots(struct repo *r, const char *run, struct catalog_snap **ret, size_t *ret_n)
{
    char prefix[REGION_KEY_MAX];
    struct snaps l = {0};
    size_t out = 0;
    if (layout_prefix(LAYOUT_SNAPSHOT, run, prefix) < 0)
        return -ENOENT; /* no key names such a run */
    for (size_t i = 0; i < r->nregions; i++) {
        if (r->health[i])
            continue;
        int e = region_list(r->regions[i], prefix, snaps_cb, &l);
        if (e == -ENOMEM) {
            free(l.v);
            return e;
        }
        if (e < 0 && e != -ENOENT) { /* a region that cannot list is left out of this run */
            log_error("%s", region_last_error(r->regions[i]));
            repo_region_fail(r, i, e);
        }
    }
    if (l.n > 1)
        qsort(l.v, l.n, sizeof(*l.v), snap_cmp);
    for (size_t k = 0; k < l.n; k++) { /* merge the regions' entries */
        if (out && !snap_cmp(&l.v[out - 1], &l.v[k]))
            l.v[out - 1].regions++;
        else
            l.v[out++] = l.v[k];
    }
    l.n = out;
    catalog_drop_forgotten(r, run, &l);
    out = l.n;
    if (out == 0) {
        free(l.v);
        return -ENOENT;
    }
    *ret = l.v;
    *ret_n = out;
    return 0;
}

static int units_add(struct catalog_unit **v, size_t *n, const struct manifest *m)
{
    struct ref cand = {.step = m->step}, cur;
    memcpy(cand.id, m->id, sizeof(cand.id));
    for (size_t i = 0; i < *n; i++) {
        struct catalog_unit *u = &(*v)[i];
        if (strcmp(u->root, m->root))
            continue;
        memcpy(cur.id, u->id, sizeof(cur.id));
        cur.step = u->step;
        u->snapshots++;
        /* A higher generation first (service/lineage.h): an abandoned
         * instance's late files never replace the adopter's. */
        if (m->gen > u->gen || (m->gen == u->gen && ref_newer(&cand, &cur))) {
            memcpy(u->id, m->id, sizeof(u->id));
            u->step = m->step;
            u->gen = m->gen;
        }
        return 0;
    }
    struct catalog_unit *p = realloc(*v, (*n + 1) * sizeof(**v));
    if (!p)
        return -ENOMEM;
    *v = p;
    struct catalog_unit *u = &p[(*n)++];
    memset(u, 0, sizeof(*u));
    snprintf(u->root, sizeof(u->root), "%s", m->root);
    memcpy(u->id, m->id, sizeof(u->id));
    u->step = m->step;
    u->gen = m->gen;
    u->snapshots = 1;
    return 0;
}

int catalog_units(struct repo *r, const char *run, struct catalog_unit **ret, size_t *ret_n,
                  struct buf *err)
{
    struct catalog_snap *snaps = NULL;
    struct catalog_unit *units = NULL;
    size_t nsnaps = 0, n = 0;
    int e = catalog_snapshots(r, run, &snaps, &nsnaps);
    for (size_t k = 0; k < nsnaps && e == 0; k++) {
        struct manifest m;
        struct buf ferr = BUF_INIT;
        if (restore_find(r, run, snaps[k].id, &m, NULL, &ferr) == 0) {
            /* a staging folder an older daemon took is never a unit to restore */
            if (!ckptname_transient(m.root, strlen(m.root)))
                e = units_add(&units, &n, &m);
            else
                log_debug("run '%s': snapshot %s of \"%s\" is of a temporary name; not a unit", run,
                          m.id, m.root);
            manifest_free(&m);
        } else {
            log_warn("%s", buf_str(&ferr));
        }
        buf_free(&ferr);
    }
    free(snaps);
    if ((e == 0 || e == -ENOENT) && n == 0) {
        buf_printf(err, "run '%s' has no snapshot in any reachable region", run);
        e = -ENOENT;
    }
    if (e < 0) {
        free(units);
        return e;
    }
    *ret = units;
    *ret_n = n;
    return 0;
}
