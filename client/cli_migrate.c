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
#include "service/jobmigrate.h"
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

/* ---- migrate-out of one node of a job ---------------------------------- */

/* The job's node count and this node's rank, as the daemon's status says
 * (README "Multi-node jobs"); nodes 1: a single-node daemon. */
static unsigned mo_nodes(const struct jnode *status, unsigned *ret_rank)
{
    const struct jnode *conf = jnode_get(status, "config");
    double nodes = jnode_num(jnode_get(conf, "nodes"), 1);
    *ret_rank = (unsigned)jnode_num(jnode_get(conf, "node_rank"), 0);
    return nodes > 1 ? (unsigned)nodes : 1;
}

static void mo_job_json(struct json *j, const char *run, const struct jobmigrate_out *o)
{
    json_obj_begin(j);
    json_key(j, "run");
    json_str(j, run);
    json_key(j, "node_step");
    json_i64(j, o->own_step);
    json_key(j, "committed");
    json_bool(j, o->committed);
    json_key(j, "handoff");
    o->committed && o->have_step && !o->newer_handoff ? json_str(j, o->step.id) : json_null(j);
    json_key(j, "handoff_step");
    json_i64(j, o->committed && o->have_step ? o->step.step : -1);
    json_key(j, "handoff_written");
    json_u64(j, o->handoff_written);
    json_key(j, "handoff_found");
    json_u64(j, o->handoff_found);
    json_key(j, "newer_handoff");
    o->newer_handoff ? json_str(j, o->newer.id) : json_null(j);
    json_key(j, "missing");
    json_arr_begin(j);
    for (unsigned k = 0; o->have_missing && k < o->missing.nodes; k++)
        if (multinode_step_missing(&o->missing, k))
            json_u64(j, k);
    json_arr_end(j);
    json_obj_end(j);
}

/* What was found and written, said in words. */
static void mo_job_say(const char *run, unsigned rank, const struct jobmigrate_out *o)
{
    if (o->committed && o->newer_handoff)
        fprintf(stderr, "run %s: node %u: a handoff of the newer step %lld (%s) is there already\n",
                run, rank, (long long)o->newer.step, o->newer.id);
    else if (o->committed)
        fprintf(stderr,
                "run %s: node %u: the job's newest committed step %lld (snapshot %s) is handed "
                "off: written to %u region(s), already there (another node's) in %u\n",
                run, rank, (long long)o->step.step, o->step.id, o->handoff_written,
                o->handoff_found);
    if (o->committed)
        return;
    fprintf(stderr,
            "run %s: node %u: its part of step %lld is durable, but the step is NOT "
            "committed: ",
            run, rank, (long long)o->own_step);
    if (o->have_missing && o->missing.have < o->missing.nodes) {
        fprintf(stderr, "node(s)");
        for (unsigned k = 0; k < o->missing.nodes; k++)
            if (multinode_step_missing(&o->missing, k))
                fprintf(stderr, " %u", k);
        fprintf(stderr, " of %u have no part in the regions", o->missing.nodes);
    } else if (o->have_missing) {
        fprintf(stderr, "every node's part is in, but no region committed it (the daemons' "
                        "logs say why, e.g. parts that cannot be one snapshot)");
    } else {
        fprintf(stderr, "its commit is not in enough regions yet");
    }
    if (o->have_step)
        fprintf(stderr,
                "; no handoff written: the job resumes from step %lld (%s) unless "
                "the step commits\n",
                (long long)o->step.step, o->step.id);
    else
        fprintf(stderr, "; no handoff written: no step of the job is committed\n");
}

/* For each selected run of status: waits (until the deadline) for the
 * node's newest step to commit, and hands off the job's newest committed
 * step.  0 all handed off; EXIT_INCOMPLETE some run's step is not
 * committed; 1 a handoff is in fewer than quorum regions. */
static int mo_job(struct mo *m, struct repo *r, const struct jnode *status, unsigned rank,
                  int64_t left_s, struct json *j)
{
    const struct jnode *runs = jnode_get(status, "runs");
    int rc = 0;
    json_arr_begin(j);
    for (size_t i = 0; i < jnode_len(runs); i++) {
        const struct jnode *rn = jnode_at(runs, i);
        const char *run = jnode_str(jnode_get(rn, "run"), "");
        int64_t own = (int64_t)jnode_num(jnode_get(jnode_get(rn, "latest"), "step"), -1);
        struct jobmigrate_out o;
        if (m->run && strcmp(m->run, run) != 0)
            continue;
        if (jobmigrate_out_wait(r, run, own, m->quorum, left_s, &o) < 0) {
            rc = 1;
            continue;
        }
        if (o.committed && jobmigrate_handoff(r, run, &o) < m->quorum && !o.newer_handoff)
            rc = 1;
        if (!o.committed && rc == 0)
            rc = EXIT_INCOMPLETE;
        mo_job_json(j, run, &o);
        if (!m->c->json && !m->c->quiet)
            mo_job_say(run, rank, &o);
    }
    json_arr_end(j);
    return rc;
}

/* migrate-out on node rank of a job: its parts are durable (or the
 * deadline passed); now the job's handoff. */
static int mo_job_out(struct mo *m, const struct jnode *status, unsigned rank, unsigned nodes,
                      double t0)
{
    struct repo *r = NULL;
    struct buf out = BUF_INIT;
    struct json j;
    int64_t left = m->deadline_s - (int64_t)(cli_now() - t0);
    if (cli_open_repo(m->c, 0, &r) < 0)
        return 1;
    json_init(&j, &out);
    json_obj_begin(&j);
    json_key(&j, "in_time");
    json_bool(&j, m->in_time);
    json_key(&j, "quorum");
    json_u64(&j, m->quorum);
    json_key(&j, "node_rank");
    json_u64(&j, rank);
    json_key(&j, "nodes");
    json_u64(&j, nodes);
    json_key(&j, "runs");
    int rc = mo_job(m, r, status, rank, m->in_time && left > 0 ? left : 0, &j);
    json_obj_end(&j);
    if (m->c->json)
        cli_print_json(&out);
    buf_free(&out);
    if (!m->in_time && !m->c->json && !m->c->quiet)
        fprintf(stderr, "node %u: its parts are NOT all durable (deadline passed)\n", rank);
    return cli_close_repo(r, m->in_time ? rc : 1);
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
    unsigned rank, nodes;
    double t0 = cli_now();
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
    if (e == 0 && (nodes = mo_nodes(status, &rank)) > 1) {
        e = mo_job_out(&m, status, rank, nodes, t0);
        jsonread_free(status);
        return e;
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
    "                           [--json] [--node K --of M [--allow-reshard] [--job ID]]\n"
    "On the new instance (no daemon needed): restore the snapshot the old\n"
    "instance handed off (or the newest of the run's current lineage) into DIR,\n"
    "verified, claim the run for this instance, and print the\n"
    "path to resume from.  A job on M > 1 new nodes: each node runs it with\n"
    "--node K --of M (default: the configuration's nodes and node_rank, then\n"
    "$CKPTSYNC_NODES/$CKPTSYNC_NODE_RANK, then Slurm's); the first node claims\n"
    "the job's generation and the others join it.  --job ID (default\n"
    "$CKPTSYNC_JOB_ID, then $SLURM_JOB_ID) tells one job's nodes from another's.\n"
    "E.g.\n"
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

static void mi_print(struct cli *c, const char *run, const struct migrate_in_opts *o,
                     const struct migrate_in_result *mr, double secs)
{
    const struct restore_result *res = &mr->res;
    const char *target = o->target;
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
        json_key(&j, "node_rank");
        json_i64(&j, o->node_rank);
        json_key(&j, "nodes");
        json_i64(&j, o->node_count);
        json_key(&j, "joined");
        json_bool(&j, mr->joined);
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
    if (!c->quiet && o->node_count > 1)
        fprintf(stderr, "migrate-in: node %d of %d: generation %lld %s\n", o->node_rank,
                o->node_count, (long long)mr->gen,
                mr->joined ? "was claimed for the job by another node: joined it"
                           : "claimed for the job");
    printf("%s/%s\n", dir, res->root);
}

/* This node's identity in the new job: --node/--of, else the
 * configuration's and the environment's as the daemon reads them
 * (node_count 0 where neither names a job on several nodes: the whole
 * tree is restored, as on one node). */
static int mi_node(struct cli *c, struct migrate_in_opts *o, int64_t node, int64_t of)
{
    struct buf err = BUF_INIT;
    if ((node < 0) != (of < 0) || (of > 0 && node >= of)) {
        fprintf(stderr, "ckptsync: migrate-in: --node K and --of M go together, K below M\n");
        return -1;
    }
    if (of < 0) {
        struct config *conf = &c->conf;
        if (config_nodes_env(conf, getenv, &err) < 0) {
            fprintf(stderr, "ckptsync: migrate-in: %s\n", buf_str(&err));
            buf_free(&err);
            return -1;
        }
        node = conf->node_rank;
        of = config_nodes(conf) > 1 ? config_nodes(conf) : 0; /* 0: one node, as before */
    }
    o->node_rank = (int)node;
    o->node_count = (int)of;
    if (!o->job)
        o->job = jobmigrate_env_job();
    return 0;
}

int cmd_migrate_in(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"run", required_argument, NULL, 'r'},
                                         {"to", required_argument, NULL, 't'},
                                         {"force", no_argument, NULL, 'f'},
                                         {"seed", required_argument, NULL, 'S'},
                                         {"node", required_argument, NULL, 'n'},
                                         {"of", required_argument, NULL, 'o'},
                                         {"allow-reshard", no_argument, NULL, 'a'},
                                         {"job", required_argument, NULL, 'j'},
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
    int64_t node = -1, of = -1;
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
        else if (opt == 'n' && cli_parse_i64("--node", optarg, 0, 4095, &node) < 0)
            return EXIT_USAGE;
        else if (opt == 'o' && cli_parse_i64("--of", optarg, 1, 4096, &of) < 0)
            return EXIT_USAGE;
        else if (opt == 'a')
            o.allow_reshard = true;
        else if (opt == 'j')
            o.job = optarg;
        else if (opt == 'P')
            o.progressive = true;
        else if (opt == 'h')
            return fputs(in_usage, stdout), 0;
        else if (opt == '?')
            return fputs(in_usage, stderr), EXIT_USAGE;
    }
    if (optind != argc || !o.target)
        return fputs(in_usage, stderr), EXIT_USAGE;
    if (cli_load_config(c) < 0)
        return 1;
    if (mi_node(c, &o, node, of) < 0)
        return EXIT_USAGE;
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
        mi_print(c, run, &o, &res, cli_now() - t0);
    buf_free(&err);
    return cli_close_repo(r, e < 0 ? 1 : 0);
}
