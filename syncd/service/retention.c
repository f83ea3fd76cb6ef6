/*
 * retention.c — policies over a run's snapshots (see retention.h).
 *
 * Design notes.
 * - The regions' listings decide (runlineage_scan): a snapshot some region
 *   has already forgotten is not considered, and the resume point is the
 *   one every restore would pick.
 * - Removing is a forget record, write-once, per snapshot: never a shared
 *   list that forgets would rewrite.
 * - A rule that cannot decide keeps: keep_best that cannot read the newest
 *   checkpoint's trainer_state.json keeps every checkpoint (a forget is
 *   for ever; a kept snapshot costs only space until the next pass).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jsonread.h"
#include "base/log.h"
#include "engine/gcrec.h"
#include "service/catalog.h"
#include "service/fetch.h"
#include "service/multinode.h"
#include "service/runlineage.h"
#include "service/retention.h"
#include "service/snapdrop.h"

#define TRAINER_STATE "trainer_state.json"
#define TRAINER_STATE_MAX (64u * 1024 * 1024)

int64_t retention_id_time(const char *id)
{
    return gc_utc_parse(id); /* ids start with the UTC time (catalog_make_id) */
}

void retention_plan_free(struct retention_plan *p)
{
    free(p->v);
    p->v = NULL;
    p->n = p->nforget = 0;
}

static int item_newer_cmp(const void *a, const void *b)
{
    const struct retention_item *x = a, *y = b;
    if (x->gen != y->gen)
        return x->gen > y->gen ? -1 : 1;
    if (!strcmp(x->id, y->id))
        return 0;
    return lineage_newer(x->step, x->id, y->step, y->id) ? -1 : 1;
}

static void keep(struct retention_item *it, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void keep(struct retention_item *it, const char *fmt, ...)
{
    va_list ap;
    if (it->keep)
        return; /* the first reason stands */
    it->keep = true;
    va_start(ap, fmt);
    vsnprintf(it->why, sizeof(it->why), fmt, ap);
    va_end(ap);
}

static struct retention_item *item_find(struct retention_plan *p, const char *id)
{
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->v[i].id, id))
            return &p->v[i];
    return NULL;
}

/* ---- keep_best: trainer_state.json ------------------------------------- */

struct tsbuf {
    uint8_t *data;
    const struct manifest *m;
    const struct mfile *f;
};

static int ts_chunk(void *ud, const struct fetch_job *j, const uint8_t *data, size_t len)
{
    struct tsbuf *b = ud;
    uint64_t off = 0;
    for (size_t k = b->f->first_chunk; k < j->tag; k++)
        off += b->m->chunks[k].len;
    if (off + len > b->f->size)
        return CKS_E_FORMAT;
    memcpy(b->data + off, data, len);
    return 0;
}

/* The trainer_state.json at the top of checkpoint m ("trainer_state.json"
 * or "checkpoint-N/trainer_state.json": paths start with the root's
 * name), or NULL. */
static const struct mfile *ts_entry(const struct manifest *m)
{
    for (size_t i = 0; i < m->nfiles; i++) {
        const char *p = m->files[i].path, *slash = strchr(p, '/');
        if (m->files[i].type == MFILE_REG &&
            (!strcmp(p, TRAINER_STATE) || (slash && !strcmp(slash + 1, TRAINER_STATE))))
            return &m->files[i];
    }
    return NULL;
}

/* Whether snapshot id has a trainer_state.json: 1, 0, or an error. */
static int ts_present(struct repo *r, const char *run, const char *id, struct buf *err)
{
    struct manifest m;
    int e = catalog_find(r, run, id, &m, NULL, err);
    if (e < 0)
        return e;
    e = ts_entry(&m) != NULL;
    manifest_free(&m);
    return e;
}

/* Fetches file f of m (at most TRAINER_STATE_MAX bytes) and parses it. */
static int ts_read(struct repo *r, const struct manifest *m, const struct mfile *f,
                   struct jnode **ret, struct buf *err)
{
    struct tsbuf b = {.data = malloc(f->size ? f->size : 1), .m = m, .f = f};
    struct fetch_job *jobs = calloc(f->nchunks ? f->nchunks : 1, sizeof(*jobs));
    struct fetch_stats st = {0};
    int e = b.data && jobs ? 0 : -ENOMEM;
    for (size_t k = 0; e == 0 && k < f->nchunks; k++) {
        jobs[k].id = m->chunks[f->first_chunk + k].id;
        jobs[k].len = m->chunks[f->first_chunk + k].len;
        jobs[k].tag = f->first_chunk + k;
    }
    if (e == 0)
        e = fetch_run(r, jobs, f->nchunks, 0, ts_chunk, &b, &st, err);
    if (e == 0) {
        struct buf why = BUF_INIT;
        e = jsonread_parse((const char *)b.data, f->size, ret, &why);
        if (e < 0)
            buf_printf(err, "not valid JSON (%s)", buf_str(&why));
        buf_free(&why);
    } else if (e == -ENOMEM)
        buf_printf(err, "out of memory for %llu bytes", (unsigned long long)f->size);
    free(jobs);
    free(b.data);
    return e;
}

/* The trainer_state.json of snapshot id, parsed.  -ENOENT when the
 * checkpoint has none (err empty); CKS_E_LIMIT when it is larger than
 * TRAINER_STATE_MAX; another error when it cannot be fetched or parsed.
 * err says why. */
static int trainer_state(struct repo *r, const char *run, const char *id, struct jnode **ret,
                         struct buf *err)
{
    struct manifest m;
    int e = catalog_find(r, run, id, &m, NULL, err);
    if (e < 0)
        return e;
    const struct mfile *f = ts_entry(&m);
    if (!f)
        e = -ENOENT;
    else if (f->size > TRAINER_STATE_MAX) {
        buf_printf(err, "%llu bytes, larger than the %u MiB keep_best reads",
                   (unsigned long long)f->size, TRAINER_STATE_MAX >> 20);
        e = CKS_E_LIMIT;
    } else {
        e = ts_read(r, &m, f, ret, err);
    }
    manifest_free(&m);
    return e;
}

static int64_t checkpoint_step(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "checkpoint-", 11) || !base[11])
        return -1;
    char *end;
    long long v = strtoll(base + 11, &end, 10);
    return *end || v < 0 ? -1 : (int64_t)v;
}

/* Best first; a NaN metric ranks last whichever way is better. */
static int metric_cmp(const void *a, const void *b, bool max)
{
    double x = (*(struct retention_item *const *)a)->metric,
           y = (*(struct retention_item *const *)b)->metric;
    if (isnan(x) || isnan(y))
        return isnan(x) - isnan(y);
    if (max) {
        double t = x;
        x = y;
        y = t;
    }
    return x < y ? -1 : x > y;
}

static int metric_cmp_min(const void *a, const void *b)
{
    return metric_cmp(a, b, false);
}

static int metric_cmp_max(const void *a, const void *b)
{
    return metric_cmp(a, b, true);
}

/* keep_best cannot rank the run's checkpoints (why): it keeps every one,
 * rather than let the other rules remove the best. */
static void best_keep_all(struct retention_plan *p, const struct retention_item *src,
                          const char *why)
{
    log_warn("keep_best: run '%s': %s of snapshot %s (step %lld): %s; keeping every checkpoint, "
             "since none can be ranked",
             p->run, TRAINER_STATE, src->id, (long long)src->step, why);
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].step >= 0)
            keep(&p->v[i], "keep-best cannot rank: %s of step %lld: %s", TRAINER_STATE,
                 (long long)src->step, why);
}

/* The newest checkpoint src has no trainer_state.json: if an older one
 * has (or may have), src should have had it too, and everything is kept;
 * if none has, keep_best has nothing to rank in this run. */
static void best_missing(struct repo *r, struct retention_plan *p, const struct retention_item *src)
{
    struct buf err = BUF_INIT, why = BUF_INIT;
    for (size_t i = 0; i < p->n && !why.len; i++) {
        if (p->v[i].step < 0 || &p->v[i] == src)
            continue;
        int e = ts_present(r, p->run, p->v[i].id, &err);
        if (e < 0)
            buf_printf(&why, "it has none, and whether older snapshot %s has one is unknown (%s)",
                       p->v[i].id, buf_str(&err));
        else if (e > 0)
            buf_printf(&why, "it has none, but older snapshot %s (step %lld) has one", p->v[i].id,
                       (long long)p->v[i].step);
        buf_reset(&err);
    }
    if (why.len)
        best_keep_all(p, src, buf_str(&why));
    else
        log_warn("keep_best: run '%s': no checkpoint has a %s; the rule has nothing to rank",
                 p->run, TRAINER_STATE);
    buf_free(&err);
    buf_free(&why);
}

/* A log_history step as an item step: a whole, non-negative number. */
static bool history_step(const struct jnode *h, int64_t *ret)
{
    double v = jnode_num(jnode_get(h, "step"), -1);
    if (!(v >= 0 && v < 9e18) || v != (double)(int64_t)v)
        return false;
    *ret = (int64_t)v;
    return true;
}

/* Ranks the run's checkpoints by best_metric in js (the state src wrote). */
static void best_rank(struct retention_plan *p, const struct retention_policy *pol,
                      const struct jnode *js, const struct retention_item *src)
{
    const struct jnode *hist = jnode_get(js, "log_history");
    for (size_t k = 0; k < jnode_len(hist); k++) {
        const struct jnode *h = jnode_at(hist, k), *mv = jnode_get(h, pol->best_metric);
        int64_t step;
        if (!mv || mv->type != J_NUM || !history_step(h, &step))
            continue;
        for (size_t i = 0; i < p->n; i++)
            if (p->v[i].step == step) {
                p->v[i].has_metric = true;
                p->v[i].metric = mv->num;
            }
    }
    const char *best = jnode_str(jnode_get(js, "best_model_checkpoint"), NULL);
    int64_t bstep = best ? checkpoint_step(best) : -1;
    for (size_t i = 0; bstep >= 0 && i < p->n; i++)
        if (p->v[i].step == bstep)
            keep(&p->v[i], "best_model_checkpoint of %s (%s)", TRAINER_STATE, src->id);
    struct retention_item **rank = calloc(p->n ? p->n : 1, sizeof(*rank));
    size_t nr = 0;
    if (!rank) {
        best_keep_all(p, src, "out of memory to rank them");
        return;
    }
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].has_metric)
            rank[nr++] = &p->v[i];
    if (nr)
        qsort(rank, nr, sizeof(*rank), pol->best_max ? metric_cmp_max : metric_cmp_min);
    for (size_t k = 0; k < nr && k < pol->keep_best; k++)
        keep(rank[k], "keep-best %u: %s = %g (#%zu)", pol->keep_best, pol->best_metric,
             rank[k]->metric, k + 1);
    free(rank);
}

/* keep_best reads the newest checkpoint's trainer_state.json only (an
 * older one knows nothing of the newer steps).  When that file cannot be
 * read, is too large, or is missing while an older checkpoint has one,
 * nothing can be ranked and every checkpoint is kept: a policy that
 * cannot decide must not let the other rules remove the best. */
static void rule_best(struct repo *r, struct retention_plan *p, const struct retention_policy *pol)
{
    struct jnode *js = NULL;
    struct buf err = BUF_INIT;
    const struct retention_item *src = NULL;
    for (size_t i = 0; i < p->n && !src; i++)
        if (p->v[i].step >= 0)
            src = &p->v[i];
    if (!src)
        return;
    int e = trainer_state(r, p->run, src->id, &js, &err);
    if (e == 0)
        best_rank(p, pol, js, src);
    else if (e == -ENOENT)
        best_missing(r, p, src);
    else
        best_keep_all(p, src, buf_str(&err)[0] ? buf_str(&err) : err_str(e));
    jsonread_free(js);
    buf_free(&err);
}

/* ---- the plan ----------------------------------------------------------- */

/* Snapshots without a step: the newest max(N, 1) of each root, and those
 * within D; roots come from their manifests. */
static void rule_units(struct repo *r, struct retention_plan *p, const struct retention_policy *pol,
                       int64_t newest)
{
    unsigned per_root = pol->keep_last ? pol->keep_last : 1;
    char(*roots)[MANIFEST_MAX_PATH + 1] = calloc(p->n ? p->n : 1, sizeof(*roots));
    if (!roots)
        return;
    for (size_t i = 0; i < p->n; i++) {
        struct manifest m;
        struct buf err = BUF_INIT;
        if (p->v[i].step >= 0 || p->v[i].keep)
            continue;
        if (catalog_find(r, p->run, p->v[i].id, &m, NULL, &err) < 0) {
            keep(&p->v[i], "its manifest could not be read (%s)", buf_str(&err));
            buf_free(&err);
            continue;
        }
        snprintf(roots[i], sizeof(roots[i]), "%s", m.root ? m.root : "-");
        manifest_free(&m);
        unsigned newer = 0;
        for (size_t j = 0; j < i; j++)
            newer += p->v[j].step < 0 && !strcmp(roots[j], roots[i]);
        if (newer < per_root)
            keep(&p->v[i], "newest %u of \"%s\" (not a checkpoint)", per_root, roots[i]);
        else if (pol->keep_within && p->v[i].time >= 0 &&
                 newest - p->v[i].time <= (int64_t)pol->keep_within)
            keep(&p->v[i], "keep-within %llus", (unsigned long long)pol->keep_within);
    }
    free(roots);
}

/* A multi-node job's newest committed checkpoint, while a newer step of
 * the run is incomplete (service/multinode.h): whatever the other rules
 * say, that step is what the job resumes from until the newer one
 * commits.  ret->v is newest first. */
static void plan_protect_incomplete(struct repo *r, struct retention_plan *ret,
                                    struct runlineage_view *v)
{
    struct multinode_steps s = {0};
    int64_t newest_incomplete = -1;
    if (multinode_incomplete(r, ret->run, 0, 0, &s) < 0) {
        for (size_t i = 0; i < ret->n; i++) /* cannot tell: every checkpoint stays */
            if (ret->v[i].step >= 0)
                keep(&ret->v[i], "the run's incomplete steps could not be listed");
    }
    for (size_t k = 0; k < s.n; k++)
        if (s.v[k].step > newest_incomplete)
            newest_incomplete = s.v[k].step;
    multinode_steps_free(&s);
    for (size_t i = 0; newest_incomplete >= 0 && i < ret->n; i++) {
        const struct runlineage_snap *sn = runlineage_find(v, ret->v[i].id);
        if (!sn || !sn->commits || ret->v[i].step < 0)
            continue;
        if (ret->v[i].step < newest_incomplete)
            keep(&ret->v[i], "the newest committed step while step %lld is incomplete",
                 (long long)newest_incomplete);
        break;
    }
}

/* What no policy lifts: the run's resume point, its newest checkpoint
 * committed in quorum regions, the snapshots a handoff names and those a
 * claim resumed from. */
static void plan_protect(struct repo *r, struct retention_plan *ret, struct runlineage_view *v)
{
    const char *ids[8], *whys[8];
    size_t nc = runlineage_candidates(r, v, ids, whys, 8);
    struct retention_item *it = nc ? item_find(ret, ids[0]) : NULL;
    plan_protect_incomplete(r, ret, v); /* first: its reason is the one that tells */
    if (it)
        keep(it, "the run's resume point (%s)", whys[0]);
    for (size_t i = 0; i < ret->n; i++) { /* newest committed in quorum regions */
        const struct runlineage_snap *s = runlineage_find(v, ret->v[i].id);
        if (s && (unsigned)__builtin_popcount(s->commits) >= repo_quorum(r) &&
            ret->v[i].step >= 0) {
            keep(&ret->v[i], "the newest durable snapshot");
            break;
        }
    }
    for (size_t k = 0; k < v->nrecs; k++)
        if (v->recs[k].kind == LINEAGE_HANDOFF && (it = item_find(ret, v->recs[k].id)))
            keep(it, "named by a handoff (generation %lld)", (long long)v->recs[k].gen);
    for (size_t k = 0; k < v->nbases; k++)
        if ((it = item_find(ret, v->bases[k])))
            keep(it, "a claim resumed from it");
}

/* The run's snapshots that some region lists and none has forgotten,
 * newest first, into ret->v; those not committed anywhere yet and those
 * plan_protect() names are kept.  0 or an error (err says). */
static int plan_snapshots(struct repo *r, struct retention_plan *ret, struct buf *err)
{
    struct runlineage_view v;
    int e = runlineage_scan(r, repo_regions(r), ret->run, &v, err);
    if (e < 0)
        return e;
    ret->v = calloc(v.nsnaps ? v.nsnaps : 1, sizeof(*ret->v));
    if (!ret->v) {
        runlineage_view_free(&v);
        return -ENOMEM;
    }
    for (size_t i = 0; i < v.nsnaps; i++) {
        const struct runlineage_snap *s = &v.snaps[i];
        if (!s->manifests || s->forgets)
            continue;
        struct retention_item *it = &ret->v[ret->n++];
        snprintf(it->id, sizeof(it->id), "%s", s->id);
        it->step = s->known ? s->step : -1;
        it->gen = s->gen;
        it->time = retention_id_time(s->id);
        if (!s->commits)
            keep(it, "not committed yet");
    }
    if (ret->n > 1)
        qsort(ret->v, ret->n, sizeof(*ret->v), item_newer_cmp);
    plan_protect(r, ret, &v);
    runlineage_view_free(&v);
    return 0;
}

/* keep_last, keep_every and keep_within over the checkpoints (snapshots
 * with a step); newest: the time of the run's newest snapshot. */
static void rule_checkpoints(struct retention_plan *p, const struct retention_policy *pol,
                             int64_t newest)
{
    unsigned nth = 0;
    for (size_t i = 0; i < p->n; i++) {
        struct retention_item *x = &p->v[i];
        if (x->step < 0)
            continue;
        nth++;
        if (pol->keep_last && nth <= pol->keep_last)
            keep(x, "keep-last %u (#%u)", pol->keep_last, nth);
        if (pol->keep_every && x->step % (int64_t)pol->keep_every == 0)
            keep(x, "keep-every %llu", (unsigned long long)pol->keep_every);
        if (pol->keep_within && x->time >= 0 && newest - x->time <= (int64_t)pol->keep_within)
            keep(x, "keep-within %llus", (unsigned long long)pol->keep_within);
    }
}

int retention_plan(struct repo *r, const char *run, const struct retention_policy *pol,
                   struct retention_plan *ret, struct buf *err)
{
    memset(ret, 0, sizeof(*ret));
    snprintf(ret->run, sizeof(ret->run), "%s", run);
    int e = plan_snapshots(r, ret, err);
    if (e < 0)
        return e;
    if (!retention_policy_active(pol)) {
        for (size_t i = 0; i < ret->n; i++)
            keep(&ret->v[i], "no retention policy (everything is kept)");
        return 0;
    }
    int64_t newest = -1;
    for (size_t i = 0; i < ret->n; i++)
        if (ret->v[i].time > newest)
            newest = ret->v[i].time;
    rule_checkpoints(ret, pol, newest);
    if (pol->keep_best)
        rule_best(r, ret, pol);
    rule_units(r, ret, pol, newest);
    for (size_t i = 0; i < ret->n; i++)
        if (!ret->v[i].keep) {
            snprintf(ret->v[i].why, sizeof(ret->v[i].why), "no rule keeps it");
            ret->nforget++;
        }
    return 0;
}

int retention_apply(struct repo *r, struct retention_plan *plan, struct buf *err)
{
    unsigned worst = (unsigned)repo_healthy(r);
    for (size_t i = 0; i < plan->n; i++) {
        const struct retention_item *it = &plan->v[i];
        struct lineage_rec rec;
        if (it->keep)
            continue;
        runlineage_rec_init(&rec, LINEAGE_FORGET, plan->run, it->gen);
        snprintf(rec.id, sizeof(rec.id), "%s", it->id);
        rec.step = it->step;
        unsigned took = runlineage_put(r, &rec);
        if (took < worst)
            worst = took;
        if (took > 0)
            snapdrop_forgotten(r, plan->run, it->id); /* the local index too */
    }
    plan->forgotten_regions = plan->nforget ? worst : (unsigned)repo_healthy(r);
    if (plan->nforget && worst == 0) {
        buf_printf(err, "run '%s': no region took the forget records", plan->run);
        return CKS_E_QUORUM;
    }
    return worst == repo_healthy(r) ? 0 : 1;
}

int retention_run(struct repo *r, const char *run, const struct retention_policy *p, bool dry,
                  struct retention_plan *ret, struct buf *err)
{
    int e = retention_plan(r, run, p, ret, err);
    if (e < 0) {
        retention_plan_free(ret);
        return e;
    }
    if (dry || !ret->nforget) {
        ret->forgotten_regions = (unsigned)repo_healthy(r);
        return 0;
    }
    return retention_apply(r, ret, err);
}
