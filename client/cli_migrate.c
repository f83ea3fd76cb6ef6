/*
 * cli_migrate.c — moving training from one instance to another.
 *
 *   old instance:  ckptsync migrate-out [--run R] [--deadline S] [--quorum N]
 *   new instance:  ckptsync migrate-in [--run R] --to DIR
 *
 * migrate-out asks the daemon to commit everything pending now, waits
 * until each run's newest snapshot is in N regions, and leaves a handoff
 * record (handoff/<run>) in the regions naming it.  On the deadline it
 * says which snapshot is safe and which is not, and still hands off the
 * newest safe one.  migrate-in needs no daemon: it restores the handoff's
 * snapshot (or the newest) and prints the one path a launcher resumes from.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/json.h"
#include "base/jsonread.h"
#include "base/log.h"
#include "ckptsync/client.h"
#include "cli.h"
#include "engine/handoff.h"
#include "engine/ref.h"
#include "service/lineage.h"
#include "service/restore.h"
#include "service/unitrestore.h"

/* ---- migrate-out ------------------------------------------------------- */

static const char out_usage[] =
    "usage: ckptsync migrate-out [--run NAME] [--deadline S] [--quorum N] [--json]\n"
    "On the instance being released: commit everything pending now, wait until\n"
    "the newest snapshot of each run (or of NAME) is in N regions (default: the\n"
    "configured quorum), then write a handoff record to the regions.  Exit 0 only\n"
    "when that holds within the deadline (default 60 s); otherwise say what is\n"
    "safe and what is not, and exit 1.\n";

struct mo {
    struct cli *c;
    const char *run;
    int64_t deadline_s;
    unsigned quorum;
    struct jnode *status;
};

/* Asks the daemon for status; keeps the parsed document in m->status. */
static int mo_status(struct mo *m, struct cks_client *cl)
{
    char *json = NULL;
    jsonread_free(m->status);
    m->status = NULL;
    int e = cks_status(cl, &json);
    if (e == 0)
        e = jsonread_parse(json, strlen(json), &m->status, NULL);
    free(json);
    return e;
}

static bool mo_run_selected(const struct mo *m, const char *run)
{
    return !m->run || !strcmp(m->run, run);
}

/* Every selected run's latest snapshot is in quorum regions, and nothing
 * is left to take. */
static bool mo_done(const struct mo *m)
{
    const struct jnode *runs = jnode_get(m->status, "runs");
    bool found = false;
    if (jnode_num(jnode_get(m->status, "units_pending"), 1) > 0 ||
        jnode_num(jnode_get(m->status, "ingest_busy"), 1) > 0)
        return false;
    for (size_t i = 0; i < jnode_len(runs); i++) {
        const struct jnode *r = jnode_at(runs, i), *l = jnode_get(r, "latest");
        if (!mo_run_selected(m, jnode_str(jnode_get(r, "run"), "")))
            continue;
        found = true;
        if (jnode_num(jnode_get(l, "regions_committed"), 0) < m->quorum)
            return false;
    }
    return found || !m->run;
}

struct safe_acc {
    const char *run;
    uint32_t mask;
    unsigned quorum;
    struct ref best;
    bool have;
};

static int safe_cb(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct safe_acc *a = ud;
    struct ref cand;
    if (strcmp(run, a->run) || (unsigned)__builtin_popcount(s->committed & a->mask) < a->quorum)
        return 0;
    snprintf(cand.id, sizeof(cand.id), "%s", id);
    cand.step = s->step;
    if (!a->have || ref_newer(&cand, &a->best)) {
        a->best = cand;
        a->have = true;
    }
    return 0;
}

/* The newest snapshot of run in at least quorum regions, by the index. */
static int mo_newest_safe(struct repo *r, const char *run, unsigned quorum, struct ref *ret)
{
    struct index_txn *t;
    struct safe_acc a = {.run = run, .quorum = quorum};
    for (size_t i = 0; i < r->nregions; i++)
        a.mask |= 1u << r->regions[i]->slot;
    int e = index_txn_begin(r->ix, false, &t);
    if (e < 0)
        return e;
    e = index_snap_foreach(t, run, safe_cb, &a);
    index_txn_abort(t);
    if (e == 0 && !a.have)
        e = -ENOENT;
    if (e == 0)
        *ret = a.best;
    return e;
}

static void mo_report(struct mo *m, struct repo *r, bool in_time, struct json *j, bool *ret_ok)
{
    const struct jnode *runs = jnode_get(m->status, "runs");
    json_arr_begin(j);
    for (size_t i = 0; i < jnode_len(runs); i++) {
        const struct jnode *rn = jnode_at(runs, i), *l = jnode_get(rn, "latest");
        const char *run = jnode_str(jnode_get(rn, "run"), "");
        unsigned k = (unsigned)jnode_num(jnode_get(l, "regions_committed"), 0);
        struct ref safe;
        if (!mo_run_selected(m, run))
            continue;
        int se = mo_newest_safe(r, run, m->quorum, &safe);
        unsigned written = se == 0 ? lineage_handoff(r, run, safe.id, safe.step) : 0;
        bool latest_safe = k >= m->quorum && in_time;
        if (written < m->quorum || !latest_safe)
            *ret_ok = false;
        json_obj_begin(j);
        json_key(j, "run"); json_str(j, run);
        json_key(j, "latest"); json_str(j, jnode_str(jnode_get(l, "id"), ""));
        json_key(j, "latest_step"); json_i64(j, (int64_t)jnode_num(jnode_get(l, "step"), -1));
        json_key(j, "latest_regions"); json_u64(j, k);
        json_key(j, "latest_safe"); json_bool(j, latest_safe);
        json_key(j, "handoff"); se == 0 ? json_str(j, safe.id) : json_null(j);
        json_key(j, "handoff_regions"); json_u64(j, written);
        json_obj_end(j);
        if (m->c->json || m->c->quiet)
            continue;
        if (latest_safe)
            fprintf(stderr, "run %s: snapshot %s (step %lld) is in %u regions: safe\n", run,
                    jnode_str(jnode_get(l, "id"), "?"), (long long)jnode_num(jnode_get(l, "step"), -1), k);
        else
            fprintf(stderr, "run %s: newest snapshot %s (step %lld) is in only %u region(s): NOT safe%s\n",
                    run, jnode_str(jnode_get(l, "id"), "?"), (long long)jnode_num(jnode_get(l, "step"), -1),
                    k, in_time ? "" : " (deadline passed)");
        if (se == 0)
            fprintf(stderr, "run %s: handoff names %s (step %lld), written to %u region(s)%s\n", run,
                    safe.id, (long long)safe.step, written, written < m->quorum ? ": NOT enough" : "");
        else
            fprintf(stderr, "run %s: no snapshot of it is in %u regions: nothing safe to hand off\n",
                    run, m->quorum);
    }
    json_arr_end(j);
}

static int mo_parse(struct mo *m, int argc, char **argv)
{
    static const struct option opts[] = {
        {"run", required_argument, NULL, 'r'}, {"deadline", required_argument, NULL, 'd'},
        {"quorum", required_argument, NULL, 'q'}, {"help", no_argument, NULL, 'h'}, {0}};
    int64_t q = 0;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'r')
            m->run = optarg;
        else if (opt == 'd' && cli_parse_i64("--deadline", optarg, 0, 604800, &m->deadline_s) < 0)
            return EXIT_USAGE;
        else if (opt == 'q' && cli_parse_i64("--quorum", optarg, 1, CONFIG_MAX_REGIONS, &q) < 0)
            return EXIT_USAGE;
        else if (opt == 'h')
            return fputs(out_usage, stdout), -1;
        else if (opt == '?')
            return fputs(out_usage, stderr), EXIT_USAGE;
    }
    if (optind != argc)
        return fputs(out_usage, stderr), EXIT_USAGE;
    m->quorum = (unsigned)q;
    return 0;
}

int cmd_migrate_out(struct cli *c, int argc, char **argv)
{
    struct mo m = {.c = c, .deadline_s = 60};
    struct cks_client *cl;
    struct repo *r = NULL;
    struct buf out = BUF_INIT;
    struct json j;
    bool ok = true, in_time = false;
    int e = mo_parse(&m, argc, argv);
    if (e)
        return e < 0 ? 0 : e;
    if (cli_load_config(c) < 0)
        return 1;
    if (!m.quorum)
        m.quorum = c->conf.quorum;
    if (m.quorum > c->conf.nregions) {
        fprintf(stderr, "ckptsync: --quorum %u: only %zu regions are configured\n", m.quorum,
                c->conf.nregions);
        return EXIT_USAGE;
    }
    e = cks_client_open(c->conf.socket, &cl);
    if (e < 0) {
        fprintf(stderr, "ckptsync: no daemon is running (nothing listens on \"%s\")\n", c->conf.socket);
        return 1;
    }
    double end = cli_now() + (double)m.deadline_s;
    cks_flush(cl, CKS_WAIT_NONE, m.deadline_s, NULL);
    while ((e = mo_status(&m, cl)) == 0 && !(in_time = mo_done(&m)) && cli_now() < end)
        usleep(200 * 1000);
    cks_client_close(cl);
    if (e < 0 || cli_open_repo(c, 0, &r) < 0) {
        if (e < 0)
            fprintf(stderr, "ckptsync: migrate-out: the daemon's status: %s\n", strerror(-e));
        jsonread_free(m.status);
        return 1;
    }
    json_init(&j, &out);
    json_obj_begin(&j);
    json_key(&j, "in_time"); json_bool(&j, in_time);
    json_key(&j, "quorum"); json_u64(&j, m.quorum);
    json_key(&j, "runs");
    mo_report(&m, r, in_time, &j, &ok);
    json_obj_end(&j);
    if (c->json)
        cli_print_json(&out);
    buf_free(&out);
    jsonread_free(m.status);
    repo_free(r);
    return ok && in_time ? 0 : 1;
}

/* ---- migrate-in -------------------------------------------------------- */

static const char in_usage[] =
    "usage: ckptsync migrate-in [--run NAME] --to DIR [--seed DIR] [--force] [--json]\n"
    "On the new instance (no daemon needed): restore the snapshot the old\n"
    "instance handed off (or the newest of the run's current lineage) into DIR,\n"
    "verified, claim the run for this instance, and print the\n"
    "path to resume from, e.g.\n"
    "  train.py --resume_from_checkpoint \"$(ckptsync migrate-in --run r1 --to /data/cloud_storage/r1)\"\n";

/* The run to migrate when none is named: the only one there is. */
static int mi_pick_run(struct repo *r, char *run, size_t cap)
{
    char names[16][MANIFEST_MAX_FIELD + 1];
    size_t n = 0;
    lineage_runs(r, names, 16, &n);
    if (n == 1) {
        snprintf(run, cap, "%s", names[0]);
        return 0;
    }
    if (n == 0) {
        fprintf(stderr, "ckptsync: no run has a snapshot in any reachable region\n");
        return -ENOENT;
    }
    fprintf(stderr, "ckptsync: several runs to choose from (");
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "%s%s", i ? ", " : "", names[i]);
    fprintf(stderr, "%s): name one with --run\n", n == 16 ? ", ..." : "");
    return -EINVAL;
}

int cmd_migrate_in(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"run", required_argument, NULL, 'r'}, {"to", required_argument, NULL, 't'},
        {"force", no_argument, NULL, 'f'}, {"seed", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'}, {0}};
    char run[MANIFEST_MAX_FIELD + 1] = "", dir[PATH_MAX];
    struct restore_opts o = {.progress = cli_progress, .progress_ud = c};
    struct restore_result res;
    struct repo *r;
    int64_t gen = 0;
    bool handed = false;
    struct buf err = BUF_INIT;
    int opt, e;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'r')
            snprintf(run, sizeof(run), "%s", optarg);
        else if (opt == 't')
            o.target = optarg;
        else if (opt == 'f')
            o.force = true;
        else if (opt == 'S')
            o.seed = optarg;
        else if (opt == 'h')
            return fputs(in_usage, stdout), 0;
        else
            return fputs(in_usage, stderr), EXIT_USAGE;
    }
    if (optind != argc || !o.target)
        return fputs(in_usage, stderr), EXIT_USAGE;
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    if (!run[0] && mi_pick_run(r, run, sizeof(run)) < 0) {
        repo_free(r);
        return 1;
    }
    o.run = run;
    double t0 = cli_now();
    e = restore_run(r, &o, &res, &err);
    cli_progress_end(c);
    cli_report_restore(c, &res, cli_now() - t0, e);
    /* Only a verified restore adopts the run: from now on this instance
     * writes it at a new generation, which outranks the old owner's. */
    if (e == 0 && (e = lineage_adopt(r, run, res.id, res.step, &gen, &handed)) < 0)
        buf_printf(&err, "restored, but could not claim the run in any region");
    struct unitrestore_opts u = {.run = run, .target = o.target, .force = o.force,
                                 .skip_root = res.root};
    if (e == 0 && res.step >= 0 && cli_restore_units(c, r, &u))
        log_warn("some of the run's files outside checkpoints could not be restored (see above)");
    if (e < 0) {
        log_error("migrate-in of run '%s' into \"%s\" failed: %s", run, o.target, buf_str(&err));
    } else {
        if (!realpath(o.target, dir))
            snprintf(dir, sizeof(dir), "%s", o.target);
        if (c->json) {
            struct buf b = BUF_INIT;
            struct json j;
            json_init(&j, &b);
            json_obj_begin(&j);
            char path[PATH_MAX + MANIFEST_MAX_PATH + 2];
            snprintf(path, sizeof(path), "%s/%s", dir, res.root);
            json_key(&j, "path"); json_strn(&j, path, strlen(path)); /* what the plain output prints */
            json_key(&j, "dir"); json_strn(&j, dir, strlen(dir));
            json_key(&j, "root"); json_str(&j, res.root);
            json_key(&j, "id"); json_str(&j, res.id);
            json_key(&j, "step"); json_i64(&j, res.step);
            json_key(&j, "handoff"); json_bool(&j, handed);
            json_key(&j, "generation"); json_i64(&j, gen);
            json_key(&j, "files"); json_u64(&j, res.files);
            json_key(&j, "bytes"); json_u64(&j, res.bytes);
            json_key(&j, "seconds"); json_double(&j, cli_now() - t0);
            json_obj_end(&j);
            cli_print_json(&b);
            buf_free(&b);
        } else {
            if (!c->quiet)
                fprintf(stderr, "migrate-in: %s snapshot %s (step %lld) of run '%s': %llu files, "
                        "verified, in %.1fs; this instance now owns generation %lld\n",
                        handed ? "handed-off" : "newest", res.id, (long long)res.step, run,
                        (unsigned long long)res.files, cli_now() - t0, (long long)gen);
            printf("%s/%s\n", dir, res.root);
        }
    }
    buf_free(&err);
    repo_free(r);
    return e < 0 ? 1 : 0;
}
