/*
 * partgc.c — deleting the parts and node errors a multi-node step no
 * longer needs (see partgc.h).
 *
 * Design notes.
 * - A committed step's parts stay until the step is forgotten: they are
 *   no prune roots (the merged snapshot names their chunks), but they are
 *   what says which files were node K's (a node's own index counts its
 *   part as a snapshot it took: fsck reads it).  They are small (a
 *   manifest each) and go with the step, so nothing accumulates beyond
 *   what retention keeps.
 * - Prune reads its roots (service/multinode.h) before it comes here, and
 *   the listings here are newer: a step committed or forgotten meanwhile
 *   had its parts counted as roots this time.  A part that lands after
 *   its step was forgotten is deleted by the next prune; nothing can
 *   publish a snapshot with it (its step's merge in a region that never
 *   committed it refuses a part past part_expire, and a forgotten step's
 *   merged snapshot is gone for good).
 * - Deleting one of these objects removes no chunk: chunks go only
 *   through the mark and sweep of gc.c.
 */
#include "service/partgc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/gcrec.h"
#include "engine/lineage.h"
#include "store/layout.h"

struct pg_step {
    char run[LAYOUT_DIR_MAX + 1];
    int64_t step;
};

struct pg_steps {
    struct pg_step *v;
    size_t n, cap;
    enum lineage_kind kind; /* the records collected */
};

static int pg_steps_cb(void *ud, const char *key, uint64_t size)
{
    struct pg_steps *s = ud;
    struct lineage_rec r;
    (void)size;
    if (layout_record_parse(key, &r) < 0 || r.kind != s->kind || r.step < 0)
        return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 32;
        struct pg_step *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    snprintf(s->v[s->n].run, sizeof(s->v[0].run), "%s", r.run);
    s->v[s->n++].step = r.step;
    return 0;
}

static bool pg_has(const struct pg_steps *s, const char *run, int64_t step)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].step == step && !strcmp(s->v[i].run, run))
            return true;
    return false;
}

/* The steps region i committed, into committed, and those any healthy
 * region forgot, into forgot. */
static int pg_done_steps(struct repo *r, size_t i, struct pg_steps *committed,
                         struct pg_steps *forgot, struct buf *err)
{
    char prefix[LAYOUT_KEY_MAX];
    int e = layout_prefix(LAYOUT_COMMIT, NULL, prefix);
    committed->kind = LINEAGE_COMMIT;
    if (e == 0 && (e = region_list(repo_region(r, i), prefix, pg_steps_cb, committed)) == -ENOENT)
        e = 0;
    forgot->kind = LINEAGE_FORGET;
    if (e == 0)
        e = layout_prefix(LAYOUT_FORGET, NULL, prefix);
    for (size_t j = 0; e == 0 && j < repo_nregions(r); j++)
        if (!repo_region_error(r, j) &&
            (e = region_list(repo_region(r, j), prefix, pg_steps_cb, forgot)) == -ENOENT)
            e = 0;
    if (e < 0 && e != -ENOMEM)
        buf_printf(err, "listing commit and forget records: %s", err_str(e));
    return e;
}

struct pg_sweep {
    struct region *rg;
    const struct pg_steps *committed, *forgot;
    int64_t expired; /* objects stamped before this are expired */
    bool dry;
    uint64_t deleted;
    char (*keys)[LAYOUT_KEY_MAX]; /* to delete after the listing */
    size_t n, cap;
};

static int pg_due(struct pg_sweep *s, const char *key)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 32;
        char(*v)[LAYOUT_KEY_MAX] = realloc(s->keys, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->keys = v;
        s->cap = cap;
    }
    snprintf(s->keys[s->n++], LAYOUT_KEY_MAX, "%s", key);
    return 0;
}

static int pg_parts_cb(void *ud, const char *key, uint64_t size)
{
    struct pg_sweep *s = ud;
    struct layout_part p;
    (void)size;
    if (layout_part_parse_any(key, &p) < 0)
        return 0;
    int64_t t = gc_utc_parse(p.id);
    if (pg_has(s->forgot, p.run, p.step) ||
        (t < s->expired && !pg_has(s->committed, p.run, p.step))) /* unstamped (t < 0) too */
        return pg_due(s, key);
    return 0;
}

static int pg_errs_cb(void *ud, const char *key, uint64_t size)
{
    struct pg_sweep *s = ud;
    struct layout_nodeerr n;
    (void)size;
    if (layout_nodeerr_parse(key, &n) < 0)
        return 0;
    if (pg_has(s->committed, n.run, n.step) || pg_has(s->forgot, n.run, n.step) ||
        n.time < s->expired)
        return pg_due(s, key);
    return 0;
}

/* Lists kind's objects in s->rg and deletes those cb finds due. */
static int pg_sweep_kind(struct pg_sweep *s, enum layout_kind kind,
                         int (*cb)(void *, const char *, uint64_t), struct buf *err)
{
    char prefix[LAYOUT_KEY_MAX];
    int e = layout_prefix(kind, NULL, prefix);
    s->n = 0;
    if (e == 0 && (e = region_list(s->rg, prefix, cb, s)) == -ENOENT)
        e = 0;
    for (size_t k = 0; e == 0 && k < s->n; k++) {
        int d = s->dry ? 0 : region_del(s->rg, s->keys[k]);
        if (d == 0)
            s->deleted++;
        else if (d != -ENOENT)
            e = d;
    }
    if (e < 0 && e != -ENOMEM)
        buf_printf(err, "%s", region_last_error(s->rg));
    return e;
}

int partgc_region(struct repo *r, size_t i, int64_t now, bool dry, uint64_t *ret_deleted,
                  struct buf *err)
{
    struct pg_steps committed = {0}, forgot = {0};
    struct pg_sweep s = {.rg = repo_region(r, i), .committed = &committed, .forgot = &forgot};
    s.dry = dry;
    s.expired = now - (int64_t)repo_conf(r)->part_expire;
    int e = pg_done_steps(r, i, &committed, &forgot, err);
    if (e == 0)
        e = pg_sweep_kind(&s, LAYOUT_PART, pg_parts_cb, err);
    if (e == 0)
        e = pg_sweep_kind(&s, LAYOUT_NODEERR, pg_errs_cb, err);
    *ret_deleted += s.deleted;
    free(committed.v);
    free(forgot.v);
    free(s.keys);
    return e;
}
