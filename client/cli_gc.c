/*
 * cli_gc.c — `ckptsync forget`, `ckptsync prune`, `ckptsync stats`:
 * retention (service/retention.h), garbage collection (service/gc.h) and
 * chunk usage (service/stats.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "cli.h"
#include "service/gc.h"
#include "service/runlineage.h"
#include "service/retention.h"
#include "service/stats.h"

#define RUNS_MAX 4096

static int parse_duration_opt(const char *opt, const char *s, uint64_t *ret)
{
    if (config_parse_duration(s, ret) < 0) {
        fprintf(stderr, "ckptsync: %s: '%s' is not a duration (like 90s, 15m, 6h, 7d)\n", opt, s);
        return -1;
    }
    return 0;
}

/* The runs to work on: one, or every run the regions list. */
static int runs_of(struct repo *r, const char *run, char (**ret)[MANIFEST_MAX_FIELD + 1],
                   size_t *ret_n)
{
    *ret = calloc(RUNS_MAX, sizeof(**ret));
    if (!*ret)
        return -ENOMEM;
    if (run) {
        snprintf((*ret)[0], sizeof((*ret)[0]), "%s", run);
        *ret_n = 1;
        return 0;
    }
    return runlineage_runs(r, *ret, RUNS_MAX, ret_n);
}

/* ---- forget ------------------------------------------------------------ */

static const char forget_usage[] =
    "usage: ckptsync forget [--run NAME] [--keep-last N] [--keep-every K] [--keep-within "
    "DURATION]\n"
    "                       [--keep-best M [--best-metric KEY] [--best-mode min|max]]\n"
    "                       [--dry-run] [--json]\n"
    "Removes the snapshots a retention policy does not keep, in every region (a forget\n"
    "record each; `ckptsync prune` later deletes what only they used).  With no --keep-*\n"
    "option, each run's policy from the configuration ([retention], [retention.RUN]).\n"
    "Never removed: a run's resume point and newest durable snapshot, snapshots a handoff\n"
    "names, snapshots not committed yet.  Prints every snapshot with the rule that keeps it.\n";

static void forget_print(struct cli *c, struct json *j, const struct retention_plan *p, bool dry)
{
    if (c->json) {
        json_obj_begin(j);
        json_key(j, "run");
        json_str(j, p->run);
        json_key(j, "forget");
        json_u64(j, p->nforget);
        json_key(j, "keep");
        json_u64(j, p->n - p->nforget);
        json_key(j, "regions");
        json_u64(j, p->forgotten_regions);
        json_key(j, "snapshots");
        json_arr_begin(j);
        for (size_t i = 0; i < p->n; i++) {
            const struct retention_item *it = &p->v[i];
            json_obj_begin(j);
            json_key(j, "id");
            json_str(j, it->id);
            json_key(j, "step");
            json_i64(j, it->step);
            json_key(j, "generation");
            json_i64(j, it->gen);
            json_key(j, "action");
            json_str(j, it->keep ? "keep" : "forget");
            json_key(j, "why");
            json_str(j, it->why);
            if (it->has_metric) {
                json_key(j, "metric");
                json_double(j, it->metric);
            }
            json_obj_end(j);
        }
        json_arr_end(j);
        json_obj_end(j);
        return;
    }
    if (c->quiet)
        return;
    printf("run %s: %zu snapshot(s), %s %zu, keep %zu\n", p->run, p->n,
           dry ? "would forget" : "forget", p->nforget, p->n - p->nforget);
    for (size_t i = 0; i < p->n; i++) {
        const struct retention_item *it = &p->v[i];
        printf("  %-6s %-40s step %-8lld %s\n", it->keep ? "keep" : "forget", it->id,
               (long long)it->step, it->why);
    }
}

/* What the command line asks of forget. */
struct forget_args {
    const char *run; /* NULL: every run */
    struct retention_policy pol;
    bool own; /* pol came from --keep-* options, not the configuration */
    bool dry;
};

/* One option of forget's: 0, or EXIT_USAGE after saying what is wrong. */
static int forget_option(int opt, const char *arg, struct forget_args *a)
{
    struct retention_policy *p = &a->pol;
    int64_t v;
    switch (opt) {
    case 'r':
        a->run = arg;
        return 0;
    case 'l':
        if (cli_parse_i64("--keep-last", arg, 1, 1000000, &v) < 0)
            return EXIT_USAGE;
        p->keep_last = (unsigned)v;
        break;
    case 'e':
        if (cli_parse_i64("--keep-every", arg, 1, 1000000000000LL, &v) < 0)
            return EXIT_USAGE;
        p->keep_every = (uint64_t)v;
        break;
    case 'w':
        if (parse_duration_opt("--keep-within", arg, &p->keep_within) < 0 || !p->keep_within) {
            if (!p->keep_within)
                fprintf(stderr, "ckptsync: --keep-within: must be more than 0\n");
            return EXIT_USAGE;
        }
        break;
    case 'b':
        if (cli_parse_i64("--keep-best", arg, 1, 1000000, &v) < 0)
            return EXIT_USAGE;
        p->keep_best = (unsigned)v;
        break;
    case 'm':
        if (!arg[0] || strlen(arg) >= sizeof(p->best_metric)) {
            fprintf(stderr, "ckptsync: --best-metric: 1-%zu characters\n",
                    sizeof(p->best_metric) - 1);
            return EXIT_USAGE;
        }
        snprintf(p->best_metric, sizeof(p->best_metric), "%s", arg);
        return 0;
    case 'M':
        if (strcmp(arg, "min") && strcmp(arg, "max")) {
            fprintf(stderr, "ckptsync: --best-mode: min or max, not '%s'\n", arg);
            return EXIT_USAGE;
        }
        p->best_max = !strcmp(arg, "max");
        return 0;
    case 'n':
        a->dry = true;
        return 0;
    default:
        return fputs(forget_usage, stderr), EXIT_USAGE;
    }
    a->own = true; /* a --keep-* rule */
    return 0;
}

/* Parses forget's command line into *a: 0, -1 after --help (printed), or
 * EXIT_USAGE. */
static int forget_parse(int argc, char **argv, struct forget_args *a)
{
    static const struct option opts[] = {{"run", required_argument, NULL, 'r'},
                                         {"keep-last", required_argument, NULL, 'l'},
                                         {"keep-every", required_argument, NULL, 'e'},
                                         {"keep-within", required_argument, NULL, 'w'},
                                         {"keep-best", required_argument, NULL, 'b'},
                                         {"best-metric", required_argument, NULL, 'm'},
                                         {"best-mode", required_argument, NULL, 'M'},
                                         {"dry-run", no_argument, NULL, 'n'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    int opt;
    *a = (struct forget_args){.pol = {.best_metric = "eval_loss"}};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'h')
            return fputs(forget_usage, stdout), -1;
        if (forget_option(opt, optarg, a))
            return EXIT_USAGE;
    }
    if (optind != argc)
        return fputs(forget_usage, stderr), EXIT_USAGE;
    if (a->run && manifest_run_check(a->run) < 0) {
        fprintf(stderr, "ckptsync: invalid run name '%s'\n", a->run);
        return EXIT_USAGE;
    }
    return 0;
}

/* Forgets (or, dry, plans) one run and prints its plan; adds what it
 * forgets to *total.  0, or 1 after an error (logged). */
static int forget_one(struct cli *c, struct json *j, struct repo *r, const struct forget_args *a,
                      const char *run, size_t *total)
{
    const struct retention_policy *pol = a->own ? &a->pol : config_policy(repo_conf(r), run);
    struct retention_plan plan;
    struct buf err = BUF_INIT;
    int rc = 0, e = retention_run(r, run, pol, a->dry, &plan, &err);
    if (e < 0 && !plan.v) {
        log_error("run '%s': %s", run, buf_str(&err));
        buf_free(&err);
        return 1;
    }
    if (e < 0) {
        log_error("%s", buf_str(&err));
        rc = 1;
    } else if (e > 0) {
        log_warn("run '%s': some regions missed forget records (unreachable); readers still "
                 "treat the snapshots as removed, and the next forget writes them again",
                 run);
    }
    *total += plan.nforget;
    forget_print(c, j, &plan, a->dry);
    retention_plan_free(&plan);
    buf_free(&err);
    return rc;
}

int cmd_forget(struct cli *c, int argc, char **argv)
{
    struct forget_args a;
    int rc = forget_parse(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    struct repo *r;
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    char(*runs)[MANIFEST_MAX_FIELD + 1] = NULL;
    size_t nruns = 0, total = 0;
    struct buf out = BUF_INIT;
    struct json j;
    json_init(&j, &out);
    json_obj_begin(&j);
    json_key(&j, "dry_run");
    json_bool(&j, a.dry);
    json_key(&j, "runs");
    json_arr_begin(&j);
    int e = runs_of(r, a.run, &runs, &nruns);
    if (e < 0) {
        log_error("listing runs: %s", err_str(e));
        rc = 1;
    }
    for (size_t k = 0; e == 0 && k < nruns; k++)
        rc |= forget_one(c, &j, r, &a, runs[k], &total);
    json_arr_end(&j);
    json_key(&j, "forgotten");
    json_u64(&j, total);
    json_obj_end(&j);
    if (c->json)
        cli_print_json(&out);
    else if (!c->quiet && !nruns)
        printf("no runs\n");
    free(runs);
    buf_free(&out);
    return cli_close_repo(r, rc);
}

/* ---- prune ------------------------------------------------------------- */

static const char prune_usage[] =
    "usage: ckptsync prune [--grace DURATION] [--dry-run] [--json]\n"
    "Deletes, in every region, the chunks no retained snapshot names, and the manifests\n"
    "of forgotten snapshots.  Two phases: a mark lists the candidates; a later prune\n"
    "(after --grace, default [prune] grace, and once every writer active at the mark has\n"
    "published or expired) deletes those still unused.  With --grace 0 and no other\n"
    "writer active, both phases run now.  Safe while other instances upload and restore;\n"
    "one prune at a time per repository (a lease).  Refuses to run (exit 1, nothing\n"
    "deleted) while this host's clock and a region's disagree by more than [prune]\n"
    "clock_skew.  README: Retention and pruning.\n";

struct gc_progress {
    struct cli *c;
    const char *what;
};

static void prune_progress(void *ud, const char *what, uint64_t done, uint64_t total)
{
    struct gc_progress *p = ud;
    double now = cli_now();
    if (!p->c->progress || (now - p->c->last < 0.25 && done < total))
        return;
    p->c->last = now;
    fprintf(stderr, "\r%s: %llu / %llu   ", what, (unsigned long long)done,
            (unsigned long long)total);
    fflush(stderr);
}

static void prune_json(struct json *j, struct repo *r, const struct gc_result *res, bool dry, int e)
{
    json_obj_begin(j);
    json_key(j, "ok");
    json_bool(j, e == 0);
    json_key(j, "dry_run");
    json_bool(j, dry);
    json_key(j, "seconds");
    json_double(j, res->seconds);
    json_key(j, "manifests");
    json_u64(j, res->manifests);
    json_key(j, "referenced_chunks");
    json_u64(j, res->referenced);
    json_key(j, "forgotten_snapshots");
    json_u64(j, res->forgotten);
    json_key(j, "uncommitted_manifests");
    json_u64(j, res->uncommitted);
    if (res->lease_holder[0]) {
        json_key(j, "lease_holder");
        json_str(j, res->lease_holder);
    }
    json_key(j, "regions");
    json_arr_begin(j);
    for (size_t i = 0; i < res->nregions; i++) {
        const struct gc_region_result *g = &res->region[i];
        json_obj_begin(j);
        json_key(j, "name");
        json_str(j, repo_region(r, i)->conf.name);
        json_key(j, "state");
        json_str(j, g->state ? g->state : "skipped");
        json_key(j, "mark");
        json_str(j, g->mark);
        json_key(j, "waiting");
        json_str(j, g->waiting);
        json_key(j, "chunks");
        json_u64(j, g->chunks);
        json_key(j, "chunk_bytes");
        json_u64(j, g->chunk_bytes);
        json_key(j, "marked");
        json_u64(j, g->marked);
        json_key(j, "marked_bytes");
        json_u64(j, g->marked_bytes);
        json_key(j, "deleted");
        json_u64(j, g->deleted);
        json_key(j, "deleted_bytes");
        json_u64(j, g->deleted_bytes);
        json_key(j, "kept");
        json_u64(j, g->kept);
        json_key(j, "snapshots_deleted");
        json_u64(j, g->snapshots_deleted);
        json_key(j, "records_deleted");
        json_u64(j, g->records_deleted);
        json_key(j, "parts_deleted");
        json_u64(j, g->parts_deleted);
        json_key(j, "litter_deleted");
        json_u64(j, g->litter_deleted);
        json_key(j, "requests");
        json_u64(j, g->requests);
        json_key(j, "error");
        json_str(j, g->err ? g->msg : "");
        json_obj_end(j);
    }
    json_arr_end(j);
    json_obj_end(j);
}

int cmd_prune(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"grace", required_argument, NULL, 'g'},
                                         {"dry-run", no_argument, NULL, 'n'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    struct gc_opts o = {.grace = -1};
    struct gc_progress pp = {.c = c};
    uint64_t grace;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'g') {
            if (parse_duration_opt("--grace", optarg, &grace) < 0)
                return EXIT_USAGE;
            o.grace = (int64_t)grace;
        } else if (opt == 'n') {
            o.dry_run = true;
        } else if (opt == 'h') {
            return fputs(prune_usage, stdout), 0;
        } else {
            return fputs(prune_usage, stderr), EXIT_USAGE;
        }
    }
    if (optind != argc)
        return fputs(prune_usage, stderr), EXIT_USAGE;
    struct repo *r;
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    o.progress = prune_progress;
    o.progress_ud = &pp;
    struct gc_result *res = calloc(1, sizeof(*res));
    struct buf err = BUF_INIT, out = BUF_INIT;
    int e = res ? gc_prune(r, &o, res, &err) : -ENOMEM;
    if (c->progress && c->last > 0)
        fprintf(stderr, "\r%*s\r", 70, "");
    if (e < 0)
        log_error("prune: %s", buf_str(&err)[0] ? buf_str(&err) : err_str(e));
    if (res && c->json) {
        struct json j;
        json_init(&j, &out);
        prune_json(&j, r, res, o.dry_run, e);
        cli_print_json(&out);
    } else if (res && !c->quiet) {
        char a[32], b[32];
        printf("prune%s: %llu manifests read, %llu chunks referenced, %llu forgotten snapshot(s), "
               "%.1fs\n",
               o.dry_run ? " (dry run)" : "", (unsigned long long)res->manifests,
               (unsigned long long)res->referenced, (unsigned long long)res->forgotten,
               res->seconds);
        for (size_t i = 0; i < res->nregions; i++) {
            const struct gc_region_result *g = &res->region[i];
            cli_human(g->marked_bytes, a, sizeof(a));
            cli_human(g->deleted_bytes, b, sizeof(b));
            printf("  region %-12s %-10s %llu chunks; %s %llu (%s); deleted %llu (%s), kept %llu; "
                   "%llu manifests, %llu records and %llu parts removed; %llu requests%s%s%s%s\n",
                   repo_region(r, i)->conf.name, g->state ? g->state : "skipped",
                   (unsigned long long)g->chunks, o.dry_run ? "unused" : "marked",
                   (unsigned long long)g->marked, a, (unsigned long long)g->deleted, b,
                   (unsigned long long)g->kept, (unsigned long long)g->snapshots_deleted,
                   (unsigned long long)g->records_deleted, (unsigned long long)g->parts_deleted,
                   (unsigned long long)g->requests, g->waiting[0] ? "; waiting for " : "",
                   g->waiting, g->err ? "; " : "", g->err ? g->msg : "");
        }
    }
    free(res);
    buf_free(&err);
    buf_free(&out);
    return cli_close_repo(r, e < 0 ? 1 : 0);
}

/* ---- stats ------------------------------------------------------------- */

static const char stats_usage[] =
    "usage: ckptsync stats [--run NAME] [--json]\n"
    "Per region: chunks, recipes, stored bytes, bytes no retained snapshot uses (garbage\n"
    "awaiting prune).  Per run: snapshots, logical bytes, stored bytes, and each\n"
    "snapshot's unique bytes (what deleting it alone would free).  Reads every retained\n"
    "manifest.\n";

/* One region: its object in the "regions" array, or its line. */
static void stats_region_print(struct cli *c, struct json *j, const struct stats_region *rs)
{
    if (c->json) {
        json_obj_begin(j);
        json_key(j, "name");
        json_str(j, rs->name);
        json_key(j, "healthy");
        json_bool(j, rs->healthy);
        json_key(j, "chunks");
        json_u64(j, rs->chunks);
        json_key(j, "recipes");
        json_u64(j, rs->recipes);
        json_key(j, "stored_bytes");
        json_u64(j, rs->stored_bytes);
        json_key(j, "garbage_chunks");
        json_u64(j, rs->garbage_chunks);
        json_key(j, "garbage_recipes");
        json_u64(j, rs->garbage_recipes);
        json_key(j, "garbage_bytes");
        json_u64(j, rs->garbage_bytes);
        json_obj_end(j);
    } else if (!c->quiet) {
        char hb[32], hg[32];
        cli_human(rs->stored_bytes, hb, sizeof(hb));
        cli_human(rs->garbage_bytes, hg, sizeof(hg));
        char rc[64] = "", gr[64] = "";
        if (rs->recipes || rs->garbage_recipes) { /* a repository with deltas */
            snprintf(rc, sizeof(rc), ", %llu recipes", (unsigned long long)rs->recipes);
            snprintf(gr, sizeof(gr), " + %llu recipes", (unsigned long long)rs->garbage_recipes);
        }
        printf("region %-12s %s%llu chunks%s, %s stored, %llu unused%s (%s) awaiting prune\n",
               rs->name, rs->healthy ? "" : "(unreachable) ", (unsigned long long)rs->chunks, rc,
               hb, (unsigned long long)rs->garbage_chunks, gr, hg);
    }
}

/* One snapshot of a run: its object in "snapshot_list", or its line. */
static void stats_snap_print(struct cli *c, struct json *j, const struct stats_snap *ss)
{
    if (c->json) {
        json_obj_begin(j);
        json_key(j, "id");
        json_str(j, ss->id);
        json_key(j, "step");
        json_i64(j, ss->step);
        json_key(j, "logical_bytes");
        json_u64(j, ss->logical);
        json_key(j, "stored_bytes");
        json_u64(j, ss->stored);
        json_key(j, "unique_bytes");
        json_u64(j, ss->unique);
        json_obj_end(j);
    } else if (!c->quiet) {
        char x[32], y[32], z[32];
        cli_human(ss->logical, x, sizeof(x));
        cli_human(ss->stored, y, sizeof(y));
        cli_human(ss->unique, z, sizeof(z));
        printf("  %-40s step %-8lld %10s logical %10s stored %10s unique\n", ss->id,
               (long long)ss->step, x, y, z);
    }
}

/* One run and its snapshots: its object in "runs", or its lines. */
static void stats_run_print(struct cli *c, struct json *j, const struct stats_result *res,
                            const struct stats_run *rr)
{
    if (c->json) {
        json_obj_begin(j);
        json_key(j, "run");
        json_str(j, rr->run);
        json_key(j, "snapshots");
        json_u64(j, rr->n);
        json_key(j, "logical_bytes");
        json_u64(j, rr->logical);
        json_key(j, "stored_bytes");
        json_u64(j, rr->stored);
        json_key(j, "snapshot_list");
        json_arr_begin(j);
    } else if (!c->quiet) {
        char hl[32], hs[32];
        cli_human(rr->logical, hl, sizeof(hl));
        cli_human(rr->stored, hs, sizeof(hs));
        printf("run %s: %zu snapshot(s), %s logical, %s stored (one region)\n", rr->run, rr->n, hl,
               hs);
    }
    for (size_t k = rr->first; k < rr->first + rr->n; k++)
        stats_snap_print(c, j, &res->snaps[k]);
    if (c->json) {
        json_arr_end(j);
        json_obj_end(j);
    }
}

/* The whole report: one JSON document (printed here), or the lines. */
static void stats_print(struct cli *c, const struct stats_result *res)
{
    struct buf out = BUF_INIT;
    struct json j;
    json_init(&j, &out);
    json_obj_begin(&j);
    json_key(&j, "regions");
    json_arr_begin(&j);
    for (size_t i = 0; i < res->nregions; i++)
        stats_region_print(c, &j, &res->region[i]);
    json_arr_end(&j);
    json_key(&j, "runs");
    json_arr_begin(&j);
    for (size_t n = 0; n < res->nruns; n++)
        stats_run_print(c, &j, res, &res->runs[n]);
    json_arr_end(&j);
    json_obj_end(&j);
    if (c->json)
        cli_print_json(&out);
    buf_free(&out);
}

int cmd_stats(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"run", required_argument, NULL, 'r'}, {"help", no_argument, NULL, 'h'}, {0}};
    const char *run = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'r')
            run = optarg;
        else if (opt == 'h')
            return fputs(stats_usage, stdout), 0;
        else
            return fputs(stats_usage, stderr), EXIT_USAGE;
    }
    if (optind != argc || (run && manifest_run_check(run) < 0))
        return fputs(stats_usage, stderr), EXIT_USAGE;
    struct repo *r;
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    struct stats_result res;
    struct buf err = BUF_INIT;
    int e = stats_compute(r, run, &res, &err);
    if (e < 0 && buf_str(&err)[0])
        log_error("%s", buf_str(&err));
    else if (e < 0 && e != -ENOENT)
        log_error("stats: %s", err_str(e));
    else if (e >= 0)
        stats_print(c, &res);
    stats_free(&res);
    buf_free(&err);
    return cli_close_repo(r, e < 0 ? 1 : 0);
}
