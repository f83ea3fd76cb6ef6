/*
 * jobmigrate.c — the handoff and the claim of a job on several nodes
 * (jobmigrate.h).
 *
 * Design notes.
 * - What is committed comes from the regions (commit records), never from
 *   a node's index: a node's index knows its own parts, not the merged
 *   snapshot another node may have written.
 * - Every old node names the same step for the same facts, so their
 *   handoffs share one key; several handoffs of one generation can exist
 *   only when a later node saw a newer commit, and the resume rule takes
 *   the newest of them (runlineage.h rule 2).
 * - The claim's name is not random, as a single instance's is, but a hash
 *   of what every new node of the job knows alike: so "once per job" is a
 *   create-only put of one key, with no node chosen in advance.
 */
#include "service/jobmigrate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/hash.h"
#include "service/runlineage.h"
#include "store/layout.h"

static double jm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the newest committed step ---------------------------------------- */

/* The newest snapshot of generation g committed in quorum regions (none
 * forgotten); NULL when there is none. */
static const struct runlineage_snap *jm_newest_at(const struct runlineage_view *v, int64_t g,
                                                  unsigned quorum)
{
    const struct runlineage_snap *best = NULL;
    for (size_t i = 0; i < v->nsnaps; i++) {
        const struct runlineage_snap *s = &v->snaps[i];
        if (!s->known || s->gen != g || s->forgets ||
            (unsigned)__builtin_popcount(s->commits) < quorum)
            continue;
        if (!best || lineage_newer(s->step, s->id, best->step, best->id) > 0)
            best = s;
    }
    return best;
}

/* One look at the regions: the newest committed step at this node's
 * generation (or the highest below it that has one) into o. */
static int jm_look(struct repo *r, const char *run, unsigned quorum, struct jobmigrate_out *o)
{
    struct runlineage_view v;
    int e = runlineage_scan_all(r, run, &v);
    if (e < 0)
        return e;
    const struct runlineage_snap *s = NULL;
    for (int64_t g = o->gen; g >= 0 && !s; g--)
        s = jm_newest_at(&v, g, quorum);
    o->have_step = s != NULL;
    if (s) {
        snprintf(o->step.id, sizeof(o->step.id), "%s", s->id);
        o->step.step = s->step;
        o->step_regions = (unsigned)__builtin_popcount(s->commits);
    }
    o->committed = s && (o->own_step < 0 || (s->gen == o->gen && s->step >= o->own_step));
    runlineage_view_free(&v);
    return 0;
}

/* Which nodes have no part of own_step in the regions. */
static void jm_missing(struct repo *r, const char *run, struct jobmigrate_out *o)
{
    struct multinode_steps s = {0};
    const struct config *c = repo_conf(r);
    o->have_missing = false;
    if (multinode_incomplete(r, run, (int64_t)time(NULL), c->part_timeout, &s) < 0)
        return;
    for (size_t i = 0; i < s.n; i++)
        if (s.v[i].step == o->own_step) {
            o->missing = s.v[i];
            o->have_missing = true;
        }
    multinode_steps_free(&s);
}

int jobmigrate_out_wait(struct repo *r, const char *run, int64_t own_step, unsigned quorum,
                        int64_t deadline_s, struct jobmigrate_out *ret)
{
    struct buf err = BUF_INIT;
    double end = jm_now() + (double)deadline_s;
    memset(ret, 0, sizeof(*ret));
    ret->own_step = own_step;
    int e = runlineage_run_gen(r, repo_regions(r), run, &ret->gen, &err);
    if (e < 0) {
        log_error("migrate-out of run '%s': %s", run, buf_str(&err));
        buf_free(&err);
        return e;
    }
    buf_free(&err);
    for (;;) {
        if ((e = jm_look(r, run, quorum, ret)) < 0)
            return e;
        if (ret->committed || jm_now() >= end)
            break;
        usleep(200 * 1000);
    }
    ret->in_time = ret->committed;
    if (!ret->committed)
        jm_missing(r, run, ret);
    return 0;
}

/* ---- the handoff ------------------------------------------------------- */

/* A handoff of generation o->gen newer than o->step, already there: into
 * o->newer.  Whether there is one. */
static bool jm_newer_handoff(struct repo *r, const char *run, struct jobmigrate_out *o)
{
    struct runlineage_view v;
    struct buf err = BUF_INIT;
    bool found = false;
    int e = runlineage_scan(r, repo_regions(r), run, &v, &err);
    buf_free(&err);
    if (e < 0)
        return false;
    for (size_t i = 0; i < v.nrecs; i++) {
        const struct lineage_rec *h = &v.recs[i];
        if (h->kind != LINEAGE_HANDOFF || h->gen != o->gen ||
            lineage_newer(h->step, h->id, o->step.step, o->step.id) <= 0)
            continue;
        if (!found || lineage_newer(h->step, h->id, o->newer.step, o->newer.id) > 0) {
            snprintf(o->newer.id, sizeof(o->newer.id), "%s", h->id);
            o->newer.step = h->step;
        }
        found = true;
    }
    runlineage_view_free(&v);
    return found;
}

/* Writes rec to every healthy region create-only (a plain put where the
 * store cannot: the same key holds the same facts).  *ret_found: regions
 * that had it. */
static unsigned jm_put_once(struct repo *r, const struct lineage_rec *rec, unsigned *ret_found)
{
    char key[REGION_KEY_MAX];
    struct buf body = BUF_INIT;
    unsigned n = 0;
    *ret_found = 0;
    if (layout_record(rec, key, sizeof(key)) < 0 || lineage_encode(rec, &body) < 0) {
        buf_free(&body);
        return 0;
    }
    REPO_FOR_HEALTHY(r, i) {
        struct region *rg = repo_region(r, i);
        int e = region_put_new(rg, key, body.data, body.len);
        if (e == -ENOTSUP)
            e = region_put(rg, key, body.data, body.len);
        if (e == -EEXIST)
            (*ret_found)++;
        else if (e < 0)
            log_error("%s", region_last_error(rg));
        else
            n++;
    }
    buf_free(&body);
    return n;
}

unsigned jobmigrate_handoff(struct repo *r, const char *run, struct jobmigrate_out *o)
{
    struct lineage_rec rec;
    o->handoff_written = o->handoff_found = 0;
    o->newer_handoff = jm_newer_handoff(r, run, o);
    if (o->newer_handoff || !o->have_step)
        return 0;
    runlineage_rec_init(&rec, LINEAGE_HANDOFF, run, o->gen);
    snprintf(rec.id, sizeof(rec.id), "%s", o->step.id);
    rec.step = o->step.step;
    o->handoff_written = jm_put_once(r, &rec, &o->handoff_found);
    return o->handoff_written + o->handoff_found;
}

/* ---- the claim ---------------------------------------------------------- */

const char *jobmigrate_env_job(void)
{
    const char *j = getenv("CKPTSYNC_JOB_ID");
    if (!j || !*j)
        j = getenv("SLURM_JOB_ID");
    return j ? j : "";
}

/* The claim's name for generation gen of this job. */
static void jm_tag(const char *run, int64_t gen, const char *base, unsigned nodes, const char *job,
                   char out[LINEAGE_CLAIM_HEX + 1])
{
    struct buf b = BUF_INIT;
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    buf_printf(&b, "ckptsync-job-claim 1\n%s\n%lld\n%s\n%u\n%s\n", run, (long long)gen, base, nodes,
               job);
    hash_sha256(b.data, b.len, d);
    hex_encode(d, HASH_LEN, hex);
    snprintf(out, LINEAGE_CLAIM_HEX + 1, "%.*s", LINEAGE_CLAIM_HEX, hex);
    buf_free(&b);
}

/* Whether v holds a claim of generation g named tag; whether a handoff
 * of generation g - 1 names base. */
static bool jm_has_claim(const struct runlineage_view *v, int64_t g, const char *tag)
{
    for (size_t i = 0; i < v->nrecs; i++)
        if (v->recs[i].kind == LINEAGE_CLAIM && v->recs[i].gen == g && !strcmp(v->recs[i].tag, tag))
            return true;
    return false;
}

static bool jm_handed_off(const struct runlineage_view *v, int64_t g, const char *base)
{
    for (size_t i = 0; i < v->nrecs; i++)
        if (v->recs[i].kind == LINEAGE_HANDOFF && v->recs[i].gen == g &&
            !strcmp(v->recs[i].id, base))
            return true;
    return false;
}

int jobmigrate_claim(struct repo *r, const char *run, const char *base, int64_t base_step,
                     unsigned nodes, const char *job, struct jobmigrate_claim *ret)
{
    struct runlineage_view v;
    struct lineage_rec rec;
    char tag[LINEAGE_CLAIM_HEX + 1];
    int e = runlineage_scan_all(r, run, &v);
    if (e < 0)
        return e;
    memset(ret, 0, sizeof(*ret));
    jm_tag(run, v.gen, base, nodes, job, tag);
    ret->joined = v.gen > 0 && jm_has_claim(&v, v.gen, tag); /* scanned after it landed */
    ret->gen = ret->joined ? v.gen : v.gen + 1;
    ret->handed_off = jm_handed_off(&v, ret->gen - 1, base);
    runlineage_view_free(&v);
    if (!ret->joined) {
        unsigned found = 0, took;
        runlineage_rec_init(&rec, LINEAGE_CLAIM, run, ret->gen);
        jm_tag(run, ret->gen, base, nodes, job, rec.tag);
        snprintf(rec.id, sizeof(rec.id), "%s", base);
        rec.step = base_step;
        took = jm_put_once(r, &rec, &found);
        if (took + found == 0) {
            log_error("run '%s': no region took the job's claim of generation %lld", run,
                      (long long)ret->gen);
            return CKS_E_QUORUM;
        }
        ret->joined = took == 0; /* another node of the job was first everywhere */
    }
    return runlineage_gen_claimed(r, run, ret->gen);
}
