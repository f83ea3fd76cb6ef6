/*
 * catalog.c — which snapshots exist (catalog.h).
 *
 * Design: listings are merged across regions (a region that missed a
 * snapshot does not hide it); each manifest is read once, from the first
 * region that has it intact (manifests_read).  The local listing is one
 * read transaction over the index's snapshot table, its region count the
 * committed bits of the configured regions' slots.  The remote one takes
 * the union of the healthy regions' listings and reads each manifest for
 * its details, then one lineage scan per run for the resume point.  The
 * newest snapshot of a run is the lineage's first candidate with a valid
 * manifest somewhere.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/ckptname.h"
#include "engine/lineage.h"
#include "engine/ref.h"
#include "service/catalog.h"
#include "service/runlineage.h"
#include "service/manifests.h"
#include "store/layout.h"

struct snaps {
    struct catalog_snap *v;
    size_t n, cap;
};

static int snaps_push(struct snaps *l, const char *run, const char *id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct catalog_snap *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    struct catalog_snap *c = &l->v[l->n];
    snprintf(c->run, sizeof(c->run), "%s", run);
    snprintf(c->id, sizeof(c->id), "%.*s", MANIFEST_ID_MAX, id); /* checked: fits */
    c->regions = 1;
    l->n++;
    return 0;
}

/* Manifests' keys (store/layout.h); anything else under the prefix is
 * not ours and is ignored. */
static int snaps_cb(void *ud, const char *key, uint64_t size)
{
    struct snaps *l = ud;
    struct layout_key k;
    (void)size;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_SNAPSHOT)
        return 0;
    return snaps_push(l, k.dir, k.name);
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
    REPO_FOR_HEALTHY(r, i)
        if (region_list(repo_region(r, i), prefix, forgets_cb, l) < 0)
            log_warn("%s", region_last_error(repo_region(r, i)));
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
    REPO_FOR_HEALTHY(r, i) {
        int e = region_list(repo_region(r, i), prefix, snaps_cb, &l);
        if (e == -ENOMEM) {
            free(l.v);
            return e;
        }
        if (e < 0 && e != -ENOENT) { /* a region that cannot list is left out of this run */
            log_warn("%s", region_last_error(repo_region(r, i)));
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
        /* A higher generation first (service/runlineage.h): an abandoned
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
        if (manifests_read(r, run, snaps[k].id, &m, NULL, &ferr) == 0) {
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

/* ---- listings (local and remote) ------------------------------------------ */

static struct catalog_row *list_add(struct catalog_rows *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        struct catalog_row *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        l->v = v;
        l->cap = cap;
    }
    memset(&l->v[l->n], 0, sizeof(l->v[0]));
    return &l->v[l->n++];
}

static int list_row_cmp(const void *a, const void *b)
{
    const struct catalog_row *x = a, *y = b;
    int c = strcmp(x->run, y->run);
    return c ? c : strcmp(x->id, y->id);
}

void catalog_rows_free(struct catalog_rows *l)
{
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* ---- local ------------------------------------------------------------- */

struct list_local {
    struct catalog_rows *l;
    uint32_t mask;
    unsigned quorum;
};

static int list_local_cb(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct list_local *lc = ud;
    struct catalog_row *w = list_add(lc->l);
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

static int list_local(struct repo *r, const char *run, struct catalog_rows *l)
{
    struct index_txn *t;
    struct list_local lc = {l, 0, repo_quorum(r)};
    for (size_t i = 0; i < repo_nregions(r); i++)
        lc.mask |= 1u << repo_region(r, i)->slot;
    int e = index_txn_begin(repo_index(r), false, &t);
    if (e < 0)
        return e;
    e = index_snap_foreach(t, run, list_local_cb, &lc);
    index_txn_abort(t);
    return e;
}

/* ---- remote ------------------------------------------------------------ */

/* A row's details from its manifest; logs why when it cannot be read. */
static void list_details(struct repo *r, struct catalog_row *w)
{
    struct manifest m;
    struct buf err = BUF_INIT;
    if (catalog_find(r, w->run, w->id, &m, NULL, &err) == 0) {
        w->step = m.step;
        w->time = m.time;
        w->gen = m.gen;
        w->files = manifest_regular_files(&m);
        for (size_t f = 0; f < m.nfiles; f++)
            w->bytes += m.files[f].size;
        manifest_free(&m);
    } else {
        log_warn("%s", buf_str(&err));
    }
    buf_free(&err);
}

/* The regions' snapshots (of run, or only id when given), with the
 * details from their manifests. */
static int list_remote(struct repo *r, const char *run, const char *id, struct catalog_rows *l)
{
    struct catalog_snap *snaps = NULL;
    size_t n = 0;
    int e = catalog_snapshots(r, run, &snaps, &n);
    if (e == -ENOENT)
        return 0;
    for (size_t k = 0; e == 0 && k < n; k++) {
        struct catalog_row *w;
        if (id && strcmp(snaps[k].id, id))
            continue;
        if (!(w = list_add(l))) {
            e = -ENOMEM;
            break;
        }
        snprintf(w->run, sizeof(w->run), "%s", snaps[k].run);
        snprintf(w->id, sizeof(w->id), "%s", snaps[k].id);
        w->regions = snaps[k].regions;
        w->durable = w->regions >= repo_quorum(r);
        list_details(r, w);
    }
    free(snaps);
    return e;
}

/* Marks each run's resume point (service/runlineage.h): what restore --latest
 * and migrate-in take.  Rows are sorted by run. */
static void list_mark_resume(struct repo *r, struct catalog_rows *l)
{
    for (size_t k = 0; k < l->n; k++) {
        struct runlineage_view v;
        struct buf err = BUF_INIT;
        const char *ids[1], *why[1];
        if (k && !strcmp(l->v[k - 1].run, l->v[k].run))
            continue; /* one scan per run */
        if (runlineage_scan(r, repo_regions(r), l->v[k].run, &v, &err) == 0) {
            if (runlineage_candidates(r, &v, ids, why, 1) == 1)
                for (size_t i = k; i < l->n && !strcmp(l->v[i].run, l->v[k].run); i++)
                    l->v[i].resume = !strcmp(l->v[i].id, ids[0]);
            runlineage_view_free(&v);
        }
        buf_free(&err);
    }
}

int catalog_list(struct repo *r, const char *run, unsigned flags, struct catalog_rows *l)
{
    bool remote = flags & CATALOG_REMOTE;
    int e = remote ? list_remote(r, run, NULL, l) : list_local(r, run, l);
    if (e < 0)
        return e;
    if (l->n) /* qsort(NULL, 0, ...) is undefined */
        qsort(l->v, l->n, sizeof(*l->v), list_row_cmp);
    if (remote)
        list_mark_resume(r, l);
    return 0;
}

int catalog_only_run(struct repo *r, char *ret_run, size_t cap, struct buf *err)
{
    struct catalog_rows l = {0};
    size_t runs = 0;
    int e = list_remote(r, NULL, NULL, &l);
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
    catalog_rows_free(&l);
    if (e == 0 && runs == 0) {
        buf_printf(err, "the repository holds no snapshot");
        e = -ENOENT;
    } else if (e == 0 && runs > 1) {
        e = -EEXIST;
    }
    return e;
}

/* ---- finding one snapshot -------------------------------------------------- */

/* The run's resume point (service/runlineage.h): the first candidate with a
 * valid manifest somewhere; one that has none is reported and passed. */
static int catalog_find_latest(struct repo *r, const char *run, struct manifest *ret,
                               size_t *ret_region, struct buf *err)
{
    struct runlineage_view v;
    const char *ids[64], *why[64];
    int e = runlineage_scan(r, repo_regions(r), run, &v, err);
    if (e < 0)
        return e;
    size_t n = runlineage_candidates(r, &v, ids, why, 64);
    for (size_t k = 0; k < n; k++) {
        struct buf ferr = BUF_INIT; /* each miss is logged below */
        int found = manifests_read(r, run, ids[k], ret, ret_region, &ferr);
        buf_free(&ferr);
        if (found == 0) {
            log_debug("run '%s': snapshot %s (%s)", run, ids[k], why[k]);
            runlineage_view_free(&v);
            return 0;
        }
        log_error("run '%s': snapshot %s (%s) has no valid manifest in any reachable region; "
                  "taking the next",
                  run, ids[k], why[k]);
    }
    runlineage_view_free(&v);
    buf_printf(err, "run '%s' has no committed snapshot in any reachable region", run);
    return -ENOENT;
}

int catalog_find(struct repo *r, const char *run, const char *id, struct manifest *ret,
                 size_t *ret_region, struct buf *err)
{
    if (manifest_run_check(run) < 0 || (id && manifest_id_check(id) < 0)) {
        buf_printf(err, "invalid run name or snapshot id");
        return -EINVAL;
    }
    if (!id)
        return catalog_find_latest(r, run, ret, ret_region, err);
    return manifests_read(r, run, id, ret, ret_region, err);
}

/* ---- a new snapshot: id, parent, publishing -------------------------------- */

int catalog_make_id(char *id, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    uint32_t rnd;
    char stamp[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return -EIO;
    snprintf(id, cap, "%s.%06ldZ-%08x", stamp, ts.tv_nsec / 1000, rnd);
    return 0;
}

/* The parent: this instance's newest snapshot of the run (the index
 * knows; informational, so no region is asked). */
struct parent_acc {
    struct index_snap best;
    char id[MANIFEST_ID_MAX + 1];
};

static int parent_cb(void *ud, const char *run, const char *id, const struct index_snap *rec)
{
    struct parent_acc *a = ud;
    (void)run;
    if (!a->id[0] || lineage_newer(rec->step, id, a->best.step, a->id)) {
        a->best = *rec;
        snprintf(a->id, sizeof(a->id), "%s", id);
    }
    return 0;
}

void catalog_parent(struct repo *r, const char *run, char **ret_parent)
{
    struct parent_acc a = {0};
    struct index_txn *t;
    if (index_txn_begin(repo_index(r), false, &t) < 0)
        return;
    index_snap_foreach(t, run, parent_cb, &a);
    index_txn_abort(t);
    if (a.id[0])
        manifest_set_str(ret_parent, a.id);
}

int catalog_publish(struct region *rg, const struct manifest *m, const uint8_t *man, size_t len)
{
    char key[REGION_KEY_MAX];
    int e = layout_snapshot(m->run, m->id, key);
    if (e == 0)
        e = region_put(rg, key, man, len);
    if (e == 0)
        e = runlineage_put_commit(rg, m, man, len);
    return e;
}

/* ---- a snapshot as a user names it ------------------------------------------ */

/* "latest": the run's resume point; the repository's one run when none
 * is named. */
static int resolve_latest(struct repo *r, const char *run, struct catalog_snap *ret,
                          struct buf *err)
{
    char only[MANIFEST_MAX_FIELD + 1];
    struct buf why = BUF_INIT;
    struct manifest m;
    int e = 0;
    if (!run) {
        e = catalog_only_run(r, only, sizeof(only), &why);
        if (e == -EEXIST)
            buf_printf(err, "latest: the repository holds several runs (%s): say which run",
                       buf_str(&why));
        else if (e == -ENOENT)
            buf_printf(err, "no such snapshot: latest (the repository holds none)");
        else if (e < 0)
            buf_printf(err, "latest: listing the snapshots: %s", err_str(e));
        run = only;
    }
    buf_free(&why);
    if (e == 0)
        e = catalog_find_latest(r, run, &m, NULL, err);
    if (e == 0) {
        snprintf(ret->run, sizeof(ret->run), "%s", m.run);
        snprintf(ret->id, sizeof(ret->id), "%s", m.id);
        ret->regions = 0;
        manifest_free(&m);
    }
    return e;
}

/* Sorts l and keeps each (run, id) once. */
static void snaps_unique(struct snaps *l)
{
    size_t out = 0;
    if (l->n > 1)
        qsort(l->v, l->n, sizeof(*l->v), snap_cmp);
    for (size_t k = 0; k < l->n; k++)
        if (!out || snap_cmp(&l->v[out - 1], &l->v[k]))
            l->v[out++] = l->v[k];
    l->n = out;
}

/* The snapshots whose id starts with name: the index's, then (unless the
 * index knows name as a whole id) the regions'. */
static int resolve_collect(struct repo *r, const char *run, const char *name, struct snaps *l)
{
    struct catalog_rows rows = {0};
    struct catalog_snap *v = NULL;
    size_t n = 0, len = strlen(name);
    int e = list_local(r, run, &rows);
    for (size_t k = 0; e == 0 && k < rows.n; k++)
        if (!strncmp(rows.v[k].id, name, len))
            e = snaps_push(l, rows.v[k].run, rows.v[k].id);
    catalog_rows_free(&rows);
    for (size_t k = 0; e == 0 && k < l->n; k++)
        if (!strcmp(l->v[k].id, name)) {
            l->v[0] = l->v[k];
            l->n = 1;
            return 0;
        }
    if (e == 0)
        e = catalog_snapshots(r, run, &v, &n);
    if (e == -ENOENT)
        e = 0;
    for (size_t k = 0; e == 0 && k < n; k++)
        if (!strncmp(v[k].id, name, len))
            e = snaps_push(l, v[k].run, v[k].id);
    free(v);
    snaps_unique(l);
    return e;
}

int catalog_resolve_id(struct repo *r, const char *run, const char *name, struct catalog_snap *ret,
                       struct buf *err)
{
    struct snaps l = {0};
    if (run && manifest_run_check(run) < 0) {
        buf_printf(err, "invalid run name '%s'", run);
        return -EINVAL;
    }
    if (!strcmp(name, "latest"))
        return resolve_latest(r, run, ret, err);
    if (manifest_id_check(name) < 0) {
        buf_printf(err, "no such snapshot: %s (not a snapshot id)", name);
        return -EINVAL;
    }
    int e = resolve_collect(r, run, name, &l);
    if (e < 0)
        buf_printf(err, "finding snapshot %s: %s", name, err_str(e));
    else if (l.n == 0)
        buf_printf(err, "no such snapshot: %s%s%s%s", name, run ? " in run '" : "", run ? run : "",
                   run ? "'" : "");
    else if (l.n > 1)
        buf_printf(err, "ambiguous: %s matches ", name);
    for (size_t k = 0; e == 0 && l.n > 1 && k < l.n && k < 8; k++)
        buf_printf(err, "%s%s", k ? ", " : "", l.v[k].id);
    if (e == 0 && l.n > 8)
        buf_printf(err, " and %zu more", l.n - 8);
    if (e == 0 && l.n == 1)
        *ret = l.v[0];
    free(l.v);
    return e < 0 ? e : l.n == 0 ? -ENOENT : l.n > 1 ? -EEXIST : 0;
}
