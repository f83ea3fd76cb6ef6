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
 * What is waited for, chosen and written is service/migrate.h's; this file
 * reaches the daemon (the control socket) and prints.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "base/jsonread.h"
#include "base/log.h"
#include "ckptsync/client.h"
#include "cli.h"
#include "service/migrate.h"

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
    struct cks_client *cl;
    bool in_time;   /* everything was safe before the deadline */
    struct json *j; /* the "runs" array being written */
};

static void mo_flush(void *ud, int64_t deadline_s)
{
    struct mo *m = ud;
    cks_flush(m->cl, CKS_WAIT_NONE, deadline_s, NULL);
}

/* Asks the daemon for status, parsed. */
static int mo_status(void *ud, struct jnode **ret)
{
    struct mo *m = ud;
    char *json = NULL;
    int e = cks_status(m->cl, &json);
    if (e == 0)
        e = jsonread_parse(json, strlen(json), ret, NULL);
    free(json);
    return e;
}

/* One run's outcome: a JSON object, and (human output) what is safe. */
static void mo_report(void *ud, const struct migrate_out_run *o)
{
    struct mo *m = ud;
    struct json *j = m->j;
    json_obj_begin(j);
    json_key(j, "run");
    json_str(j, o->run);
    json_key(j, "latest");
    json_str(j, o->latest ? o->latest : "");
    json_key(j, "latest_step");
    json_i64(j, o->latest_step);
    json_key(j, "latest_regions");
    json_u64(j, o->latest_regions);
    json_key(j, "latest_safe");
    json_bool(j, o->latest_safe);
    json_key(j, "handoff");
    o->have_handoff ? json_str(j, o->handoff.id) : json_null(j);
    json_key(j, "handoff_regions");
    json_u64(j, o->handoff_regions);
    json_obj_end(j);
    if (m->c->json || m->c->quiet)
        return;
    const char *latest = o->latest ? o->latest : "?";
    if (o->latest_safe)
        fprintf(stderr, "run %s: snapshot %s (step %lld) is in %u regions: safe\n", o->run, latest,
                (long long)o->latest_step, o->latest_regions);
    else
        fprintf(stderr,
                "run %s: newest snapshot %s (step %lld) is in only %u region(s): NOT safe%s\n",
                o->run, latest, (long long)o->latest_step, o->latest_regions,
                m->in_time ? "" : " (deadline passed)");
    if (o->have_handoff)
        fprintf(stderr, "run %s: handoff names %s (step %lld), written to %u region(s)%s\n", o->run,
                o->handoff.id, (long long)o->handoff.step, o->handoff_regions,
                o->handoff_regions < m->quorum ? ": NOT enough" : "");
    else
        fprintf(stderr, "run %s: no snapshot of it is in %u regions: nothing safe to hand off\n",
                o->run, m->quorum);
}

static int mo_parse(struct mo *m, int argc, char **argv)
{
    static const struct option opts[] = {{"run", required_argument, NULL, 'r'},
                                         {"deadline", required_argument, NULL, 'd'},
                                         {"quorum", required_argument, NULL, 'q'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
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

/* A daemon that is one node of a job on several nodes (its status says,
 * README "Multi-node jobs"): its parts are durable by now (flushed and
 * waited for), but a handoff would name this node's part, which is no
 * snapshot; handing off a job is not done yet, so none is written. */
static bool mo_multinode(const struct jnode *status)
{
    const struct jnode *conf = jnode_get(status, "config");
    double nodes = jnode_num(jnode_get(conf, "nodes"), 1);
    if (nodes <= 1)
        return false;
    fprintf(stderr,
            "ckptsync: migrate-out: this daemon is node %.0f of a job on %.0f nodes; its parts "
            "are durable, but handing off a multi-node job is not supported yet: no handoff is "
            "written (the job resumes from its newest committed step)\n",
            jnode_num(jnode_get(conf, "node_rank"), 0), nodes);
    return true;
}

int cmd_migrate_out(struct cli *c, int argc, char **argv)
{
    struct mo m = {.c = c, .deadline_s = 60};
    struct migrate_daemon d = {mo_flush, mo_status, &m};
    struct jnode *status = NULL;
    struct repo *r = NULL;
    struct buf out = BUF_INIT;
    struct json j;
    bool ok = true;
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
    e = cks_client_open(c->conf.socket, &m.cl);
    if (e < 0) {
        fprintf(stderr, "ckptsync: no daemon is running (nothing listens on \"%s\")\n",
                c->conf.socket);
        return 1;
    }
    e = migrate_out_wait(&d, m.run, m.quorum, m.deadline_s, &status, &m.in_time);
    cks_client_close(m.cl);
    if (e == 0 && mo_multinode(status)) {
        jsonread_free(status);
        return 1;
    }
    if (e < 0 || cli_open_repo(c, 0, &r) < 0) {
        if (e < 0)
            fprintf(stderr, "ckptsync: migrate-out: the daemon's status: %s\n", strerror(-e));
        jsonread_free(status);
        return 1;
    }
    json_init(&j, &out);
    json_obj_begin(&j);
    json_key(&j, "in_time");
    json_bool(&j, m.in_time);
    json_key(&j, "quorum");
    json_u64(&j, m.quorum);
    json_key(&j, "runs");
    m.j = &j;
    json_arr_begin(&j);
    migrate_out_handoff(r, status, m.run, m.quorum, m.in_time, mo_report, &m, &ok);
    json_arr_end(&j);
    json_obj_end(&j);
    if (c->json)
        cli_print_json(&out);
    buf_free(&out);
    jsonread_free(status);
    return cli_close_repo(r, ok && m.in_time ? 0 : 1);
}

/* ---- migrate-in -------------------------------------------------------- */

static const char in_usage[] =
    "usage: ckptsync migrate-in [--run NAME] --to DIR [--seed DIR] [--force] [--progressive]\n"
    "                           [--json]\n"
    "On the new instance (no daemon needed): restore the snapshot the old\n"
    "instance handed off (or the newest of the run's current lineage) into DIR,\n"
    "verified, claim the run for this instance, and print the\n"
    "path to resume from, e.g.\n"
    "  train.py --resume_from_checkpoint \"$(ckptsync migrate-in --run r1 --to "
    "/data/cloud_storage/r1)\"\n"
    "--progressive: as restore --progressive (each file at its final path once\n"
    "whole and verified, by priority group; with --json one line per placed file);\n"
    "the run is claimed, and the path printed, when every file is placed.\n";

/* The run to migrate when none is named: the only one there is. */
static int mi_pick_run(struct repo *r, char *run, size_t cap)
{
    char names[16][MANIFEST_MAX_FIELD + 1];
    size_t n = 0;
    int e = migrate_pick_run(r, run, cap, names, 16, &n);
    if (e == -ENOENT) {
        fprintf(stderr, "ckptsync: no run has a snapshot in any reachable region\n");
    } else if (e < 0) {
        fprintf(stderr, "ckptsync: several runs to choose from (");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", names[i]);
        fprintf(stderr, "%s): name one with --run\n", n == 16 ? ", ..." : "");
    }
    return e;
}

/* After the resume point's restore: the progress line ends, the daemon
 * hears of it. */
static void mi_restored(void *ud, const struct restore_result *res, double secs, int e)
{
    struct cli *c = ud;
    cli_progress_end(c);
    cli_report_restore(c, res, secs, e);
}

static void mi_print(struct cli *c, const char *run, const char *target,
                     const struct migrate_in_result *mr, double secs)
{
    const struct restore_result *res = &mr->res;
    char dir[PATH_MAX];
    if (!realpath(target, dir))
        snprintf(dir, sizeof(dir), "%s", target);
    if (c->json) {
        struct buf b = BUF_INIT;
        struct json j;
        json_init(&j, &b);
        json_obj_begin(&j);
        char path[PATH_MAX + MANIFEST_MAX_PATH + 2];
        snprintf(path, sizeof(path), "%s/%s", dir, res->root);
        json_key(&j, "path");
        json_strn(&j, path, strlen(path)); /* what the plain output prints */
        json_key(&j, "dir");
        json_strn(&j, dir, strlen(dir));
        json_key(&j, "root");
        json_str(&j, res->root);
        json_key(&j, "id");
        json_str(&j, res->id);
        json_key(&j, "step");
        json_i64(&j, res->step);
        json_key(&j, "handoff");
        json_bool(&j, mr->handed_off);
        json_key(&j, "generation");
        json_i64(&j, mr->gen);
        json_key(&j, "files");
        json_u64(&j, res->files);
        json_key(&j, "bytes");
        json_u64(&j, res->bytes);
        json_key(&j, "seconds");
        json_double(&j, secs);
        json_obj_end(&j);
        cli_print_json(&b);
        buf_free(&b);
        return;
    }
    if (!c->quiet)
        fprintf(stderr,
                "migrate-in: %s snapshot %s (step %lld) of run '%s': %llu files, "
                "verified, in %.1fs; this instance now owns generation %lld\n",
                mr->handed_off ? "handed-off" : "newest", res->id, (long long)res->step, run,
                (unsigned long long)res->files, secs, (long long)mr->gen);
    printf("%s/%s\n", dir, res->root);
}

int cmd_migrate_in(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"run", required_argument, NULL, 'r'},
                                         {"to", required_argument, NULL, 't'},
                                         {"force", no_argument, NULL, 'f'},
                                         {"seed", required_argument, NULL, 'S'},
                                         {"progressive", no_argument, NULL, 'P'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    char run[MANIFEST_MAX_FIELD + 1] = "";
    struct migrate_in_opts o = {.progress = cli_progress,
                                .progress_ud = c,
                                .restored = mi_restored,
                                .unit_done = cli_unit_restored,
                                .placed = cli_restore_placed,
                                .ud = c};
    struct migrate_in_result res;
    struct repo *r;
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
        else if (opt == 'P')
            o.progressive = true;
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
        return cli_close_repo(r, 1);
    }
    o.run = run;
    double t0 = cli_now();
    e = migrate_in_run(r, &o, &res, &err);
    if (e < 0)
        log_error("migrate-in of run '%s' into \"%s\" failed: %s", run, o.target, buf_str(&err));
    else
        mi_print(c, run, o.target, &res, cli_now() - t0);
    buf_free(&err);
    return cli_close_repo(r, e < 0 ? 1 : 0);
}
