/*
 * cli_cmds.c — the commands that run the engine in-process.
 *
 * Each command: parse its options (exit 2 on misuse, with the command's
 * usage), open the repository, run one service, print a human summary or
 * one JSON document on stdout.  Errors go to stderr, once, where handled.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/log.h"
#include "ckptsync/client.h"
#include "cli.h"
#include "engine/fastcdc.h"
#include "engine/hash.h"
#include "engine/ckptname.h"
#include "service/catalog.h"
#include "service/restore.h"
#include "service/scan.h"
#include "service/snapout.h"
#include "service/snapshot.h"
#include "service/unitrestore.h"
#include "service/verify.h"

static int usage(const char *text, int code)
{
    fputs(text, code ? stderr : stdout);
    return code;
}

/* ---- snapshot ---------------------------------------------------------- */

static const char snapshot_usage[] =
    "usage: ckptsync snapshot PATH --run NAME [--step N] [--instance TYPE] [--json]\n"
    "Cuts PATH (a checkpoint directory or file) into chunks, stores the chunks no\n"
    "region has, and commits the snapshot in every region.  Exit 0 when it is\n"
    "committed in every region, 1 otherwise (it may still be durable: see output).\n"
    "Without --step, the step is taken from PATH's name as the daemon does\n"
    "(checkpoint-N, iter_N, global_stepN, step_N, step=N).\n";

static void snapshot_json(const struct repo *r, const struct snapshot_result *s, int e)
{
    struct snapout o = {.id = s->id,
                        .res = s,
                        .repo = r,
                        .committed = s->committed,
                        .durable = s->durable,
                        .replicated = e == 0};
    struct buf b = BUF_INIT;
    struct json j;
    json_init(&j, &b);
    snapout_json(&j, &o, SNAPOUT_TAKE);
    cli_print_json(&b);
    buf_free(&b);
}

static void snapshot_human(const struct repo *r, const struct snapshot_result *s)
{
    char b1[32], b2[32], b3[32];
    cli_human(s->bytes, b1, sizeof(b1));
    cli_human(s->new_bytes, b2, sizeof(b2));
    cli_human(s->stored_bytes, b3, sizeof(b3));
    printf("snapshot %s (%s)\n", s->id, s->root);
    printf("  files %llu (%llu unchanged), %s; chunks %llu, new %llu (%s raw, %s stored)\n",
           (unsigned long long)s->files, (unsigned long long)s->files_unchanged, b1,
           (unsigned long long)s->chunks, (unsigned long long)s->new_chunks, b2, b3);
    printf("  dedup ratio %.2f\n", s->new_bytes ? (double)s->bytes / (double)s->new_bytes : 0.0);
    cli_human(s->bytes_sent, b1, sizeof(b1));
    printf("  sent %s from this instance (%.2fx the new stored bytes)\n", b1,
           s->stored_bytes ? (double)s->bytes_sent / (double)s->stored_bytes : 0.0);
    for (size_t i = 0; i < s->nregions; i++) {
        cli_human(s->region[i].bytes_put, b1, sizeof(b1));
        cli_human(s->region[i].bytes_copied, b2, sizeof(b2));
        if (s->region[i].err)
            printf("  region %-12s FAILED: %s\n", repo_region(r, i)->conf.name, s->region[i].msg);
        else
            printf("  region %-12s committed (%llu objects, %s written, %s copied)\n",
                   repo_region(r, i)->conf.name, (unsigned long long)s->region[i].objects_put, b1,
                   b2);
    }
    printf("  %s: committed in %u of %zu regions\n",
           s->committed == s->nregions ? "replicated"
           : s->durable                ? "durable"
                                       : "NOT durable",
           s->committed, s->nregions);
}

int cmd_snapshot(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"run", required_argument, NULL, 'r'},
                                         {"step", required_argument, NULL, 's'},
                                         {"instance", required_argument, NULL, 'i'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    struct snapshot_opts o = {.step = -1, .progress = cli_progress, .progress_ud = c};
    struct snapshot_result res;
    struct repo *r = NULL;
    struct buf err = BUF_INIT;
    int opt, e;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'r')
            o.run = optarg;
        else if (opt == 's' && cli_parse_i64("--step", optarg, 0, INT64_MAX, &o.step) < 0)
            return EXIT_USAGE;
        else if (opt == 'i')
            o.instance = optarg;
        else if (opt == 'h')
            return usage(snapshot_usage, 0);
        else if (opt != 's')
            return usage(snapshot_usage, EXIT_USAGE);
    }
    if (optind != argc - 1 || !o.run)
        return usage(snapshot_usage, EXIT_USAGE);
    o.path = argv[optind];
    if (o.step < 0) /* the daemon's rule, so both record the same step for one name */
        o.step = ckptname_step(o.path);
    if (cli_open_repo(c, REPO_CREATE, &r) < 0)
        return 1;
    e = snapshot_take(r, &o, &res, &err);
    cli_progress_end(c);
    if (e < 0 && e != CKS_E_QUORUM) {
        log_error("snapshot of \"%s\" failed: %s", o.path, buf_str(&err));
        buf_free(&err);
        return cli_close_repo(r, 1);
    }
    if (c->json)
        snapshot_json(r, &res, e);
    else if (!c->quiet)
        snapshot_human(r, &res);
    if (e != 0)
        log_error("snapshot %s is committed in %u of %zu regions%s", res.id, res.committed,
                  res.nregions, res.durable ? " (durable, not replicated)" : ": NOT durable");
    buf_free(&err);
    return cli_close_repo(r, e == 0 ? 0 : 1);
}

/* ---- restore ----------------------------------------------------------- */

static const char restore_usage[] =
    "usage: ckptsync restore [--run NAME] (--latest | --snapshot ID | --all) --to DIR\n"
    "                        [--seed DIR] [--force] [--keep-setid] [--progressive]\n"
    "                        [--exclude PATTERN]... [--exclude-optimizer] [--json]\n"
    "                        [--node K --of M [--allow-reshard]]\n"
    "--run may be left out when the repository holds one run (checkpoints written\n"
    "directly under the watch root are the run _root); with several, the error names them.\n"
    "--latest: the newest checkpoint, plus the run's newest files outside checkpoints\n"
    "(logs, configs); --all: the newest snapshot of every unit of the run.\n"
    "Restores a snapshot into DIR/<its root>: every chunk and every file verified,\n"
    "written under a staging name, fsynced, then renamed into place.  A chunk that\n"
    "is missing or corrupt in one region is fetched from another.  Chunks found in\n"
    "--seed DIR (e.g. an older checkpoint of the run) are copied, not downloaded,\n"
    "and so are the bases of chunks stored as recipes (deltas).\n"
    "Setuid and setgid bits are cleared (a warning counts the files) unless\n"
    "--keep-setid is given.  ID: a snapshot id, a prefix only one id starts\n"
    "with, or `latest`.\n"
    "--progressive: DIR/<root> is made at once and each file appears at its final\n"
    "path as soon as it is whole and verified, by priority: metadata, model weights,\n"
    "fp32 master weights, optimizer state (README); with --json one line per file\n"
    "placed.  A progressive restore that does not finish leaves whole verified files\n"
    "only; the next restore into DIR removes them.\n"
    "--exclude PATTERN leaves out the files whose path below the root, or name,\n"
    "matches the glob (a pattern that matches nothing is an error); --exclude-optimizer\n"
    "leaves out the optimizer state (for evaluation, or a fine-tune from the weights).\n"
    "--node K --of M: of a step a job on several nodes wrote, what node K (0..M-1) of\n"
    "a job on M nodes needs: its own node's files and the shared ones (M = the step's\n"
    "node count); on another count every DCP shard and unbound file, and the restore\n"
    "refuses (exit 7), naming them, when files bound to a rank would be dropped\n"
    "(per-rank RNG/dataloader state, mp_rank_XX, ZeRO partitions) unless\n"
    "--allow-reshard.  A snapshot one node wrote is restored whole (a note says so).\n";

/* --progressive --json: one line per file as it is placed, flushed at
 * once (a job waiting for its weights reads them). */
void cli_restore_placed(void *ud, const char *path, uint64_t bytes, const char *group)
{
    struct cli *c = ud;
    struct buf b = BUF_INIT;
    struct json j;
    if (!c->json)
        return;
    json_init(&j, &b);
    json_obj_begin(&j);
    json_key(&j, "placed");
    json_str(&j, path);
    json_key(&j, "bytes");
    json_u64(&j, bytes);
    json_key(&j, "group");
    json_str(&j, group);
    json_obj_end(&j);
    cli_print_json(&b);
    fflush(stdout);
    buf_free(&b);
}

static void restore_print_json(const struct repo *r, const struct restore_result *s, double secs)
{
    struct buf b = BUF_INIT;
    struct json j;
    json_init(&j, &b);
    json_obj_begin(&j);
    json_key(&j, "id");
    json_str(&j, s->id);
    json_key(&j, "root");
    json_str(&j, s->root);
    json_key(&j, "step");
    json_i64(&j, s->step);
    json_key(&j, "files");
    json_u64(&j, s->files);
    json_key(&j, "bytes");
    json_u64(&j, s->bytes);
    json_key(&j, "chunks");
    json_u64(&j, s->chunks);
    json_key(&j, "fetched_bytes");
    json_u64(&j, s->fetched_bytes);
    json_key(&j, "failovers");
    json_u64(&j, s->failovers);
    json_key(&j, "local_chunks");
    json_u64(&j, s->local_chunks);
    json_key(&j, "local_bytes");
    json_u64(&j, s->local_bytes);
    json_key(&j, "local_bases");
    json_u64(&j, s->local_bases);
    json_key(&j, "local_base_bytes");
    json_u64(&j, s->local_base_bytes);
    json_key(&j, "local_bases_stale");
    json_u64(&j, s->local_bases_stale);
    json_key(&j, "local_bases_refetched");
    json_u64(&j, s->local_bases_refetched);
    json_key(&j, "setid_cleared");
    json_u64(&j, s->setid_cleared);
    json_key(&j, "excluded");
    json_u64(&j, s->excluded);
    json_key(&j, "nodes");
    json_u64(&j, s->nodes);
    json_key(&j, "node_whole");
    json_bool(&j, s->node_whole);
    json_key(&j, "seconds");
    json_double(&j, secs);
    json_key(&j, "regions");
    json_obj_begin(&j);
    for (size_t i = 0; i < repo_nregions(r); i++) {
        json_key(&j, repo_region(r, i)->conf.name);
        json_u64(&j, s->region_chunks[i]);
    }
    json_obj_end(&j);
    json_obj_end(&j);
    cli_print_json(&b);
    buf_free(&b);
}

static void restore_print(struct cli *c, const struct repo *r, const struct restore_result *s,
                          double secs)
{
    char b1[32], b2[32];
    if (c->json) {
        restore_print_json(r, s, secs);
        return;
    }
    if (c->quiet)
        return;
    cli_human(s->bytes, b1, sizeof(b1));
    cli_human((uint64_t)((double)s->bytes / (secs > 0 ? secs : 1)), b2, sizeof(b2));
    printf("restored %s (%s) step %lld: %llu files, %s in %.1fs (%s/s), %llu chunks verified",
           s->id, s->root, (long long)s->step, (unsigned long long)s->files, b1, secs, b2,
           (unsigned long long)s->chunks);
    if (s->failovers)
        printf(", %llu fetched from another region after a failure",
               (unsigned long long)s->failovers);
    if (s->local_chunks)
        printf(", %llu copied from the seed", (unsigned long long)s->local_chunks);
    if (s->local_bases)
        printf(", %llu recipe bases read from the seed", (unsigned long long)s->local_bases);
    if (s->local_bases_stale)
        printf(", %llu recipe bases changed in the seed (downloaded)",
               (unsigned long long)s->local_bases_stale);
    if (s->local_bases_refetched)
        printf(", %llu recipe bases changed on disk behind their identity (downloaded)",
               (unsigned long long)s->local_bases_refetched);
    if (s->setid_cleared)
        printf(", setuid/setgid cleared on %llu", (unsigned long long)s->setid_cleared);
    if (s->excluded)
        printf(", %llu left out (--exclude)", (unsigned long long)s->excluded);
    printf("\n");
}

/* Tells a daemon listening on the configured socket about one restore,
 * for its metrics (restore, migrate-in).  Advisory: with no daemon nothing is sent, and no
 * failure is reported (the restore's own result is what counts). */
void cli_report_restore(const struct cli *c, const struct restore_result *res, double secs, int e)
{
    struct cks_client *cl;
    bool ok = e == 0;
    if (cks_client_open(c->conf.socket, &cl) < 0)
        return;
    int r = cks_report_restore(cl, ok ? res->bytes : 0, ok ? res->files : 0,
                               secs > 0 ? (uint64_t)(secs * 1e6 + 0.5) : 0, ok);
    if (r < 0)
        log_debug("reporting the restore to the daemon: %s", cks_client_error(cl));
    cks_client_close(cl);
}

void cli_unit_restored(void *ud, const struct unitrestore_item *it)
{
    struct cli *c = ud;
    if (it->err == 0 && !c->quiet && !c->json)
        fprintf(stderr, "restored %s (snapshot %s)\n", it->unit->root, it->unit->id);
    cli_report_restore(c, it->res, it->seconds, it->err);
}

/* Restores the units o selects; returns how many failed (1 when the
 * run's units could not be listed). */
static int restore_units(struct cli *c, struct repo *r, struct unitrestore_opts *o)
{
    struct unitrestore_result res;
    struct buf err = BUF_INIT;
    o->done = cli_unit_restored;
    o->ud = c;
    int e = unitrestore_run(r, o, &res, &err);
    if (e < 0)
        log_error("%s", buf_str(&err));
    buf_free(&err);
    return e < 0 ? 1 : (int)res.failed;
}

/* --snapshot: the whole id and its run (service/catalog.h: a prefix or
 * `latest` names one). */
static int restore_which_snapshot(struct repo *r, struct restore_opts *o, struct catalog_snap *s)
{
    struct buf err = BUF_INIT;
    int e = catalog_resolve_id(r, o->run, o->id, s, &err);
    if (e < 0) {
        log_error("restore: %s", buf_str(&err));
    } else {
        o->run = s->run;
        o->id = s->id;
    }
    buf_free(&err);
    return e;
}

/* restore --latest or --all without --run: the repository's one run. */
static int restore_which_run(struct repo *r, struct restore_opts *o, char *run, size_t cap)
{
    struct buf err = BUF_INIT;
    int e = catalog_only_run(r, run, cap, &err);
    if (e == -EEXIST)
        log_error("restore: the repository holds several runs (%s): say which with --run",
                  buf_str(&err));
    else if (e < 0)
        log_error("restore: which run: %s", err.len ? buf_str(&err) : strerror(-e));
    else
        o->run = run;
    buf_free(&err);
    return e;
}

/* The whole id and run of --snapshot, or the one run without --run. */
static int restore_which(struct repo *r, struct restore_opts *o, struct catalog_snap *s)
{
    if (o->id)
        return restore_which_snapshot(r, o, s);
    return o->run ? 0 : restore_which_run(r, o, s->run, sizeof(s->run));
}

/* One of --node K (n), --of M (o), --allow-reshard (R) into o; -1 when
 * its number is not one (said on stderr). */
static int restore_node_opt(int opt, const char *arg, struct restore_opts *o, bool *node_set)
{
    int64_t v;
    if (opt == 'R') {
        o->allow_reshard = true;
        return 0;
    }
    if (cli_parse_i64(opt == 'n' ? "--node" : "--of", arg, opt == 'n' ? 0 : 1, 4095, &v) < 0)
        return -1;
    *(opt == 'n' ? &o->node_rank : &o->node_count) = (int)v;
    *node_set |= opt == 'n';
    return 0;
}

/* --node K --of M [--allow-reshard]: all three or none of the first two,
 * K below M, not with --all.  -1 to go on, else EXIT_USAGE. */
static int restore_node_args(const struct restore_opts *o, bool node_set, bool all)
{
    const char *why = NULL;
    if (node_set != (o->node_count > 0))
        why = node_set ? "--node needs --of M (the job's node count now)" : "--of needs --node K";
    else if (o->node_count > 0 && o->node_rank >= o->node_count)
        why = "--node K must be below --of M (nodes are 0 .. M-1)";
    else if (o->allow_reshard && !node_set)
        why = "--allow-reshard goes with --node K --of M";
    else if (all && node_set)
        why = "--node restores one snapshot (--latest or --snapshot), not --all";
    if (!why)
        return -1;
    log_error("restore: %s", why);
    return usage(restore_usage, EXIT_USAGE);
}

/* restore's options into o, latest and all: -1 to go on, else the exit
 * code (usage, help). */
static int restore_args(int argc, char **argv, struct restore_opts *o, bool *latest, bool *all)
{
    static const struct option opts[] = {{"run", required_argument, NULL, 'r'},
                                         {"snapshot", required_argument, NULL, 's'},
                                         {"latest", no_argument, NULL, 'l'},
                                         {"to", required_argument, NULL, 't'},
                                         {"force", no_argument, NULL, 'f'},
                                         {"seed", required_argument, NULL, 'S'},
                                         {"all", no_argument, NULL, 'a'},
                                         {"keep-setid", no_argument, NULL, 'k'},
                                         {"progressive", no_argument, NULL, 'P'},
                                         {"exclude", required_argument, NULL, 'x'},
                                         {"exclude-optimizer", no_argument, NULL, 'X'},
                                         {"node", required_argument, NULL, 'n'},
                                         {"of", required_argument, NULL, 'o'},
                                         {"allow-reshard", no_argument, NULL, 'R'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    static const char *excl[64]; /* --exclude patterns (argv's) */
    int opt;
    bool node_set = false;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'r':
            o->run = optarg;
            break;
        case 's':
            o->id = optarg;
            break;
        case 'l':
            *latest = true;
            break;
        case 't':
            o->target = optarg;
            break;
        case 'f':
            o->force = true;
            break;
        case 'S':
            o->seed = optarg;
            break;
        case 'a':
            *all = true;
            break;
        case 'k':
            o->keep_setid = true;
            break;
        case 'P':
            o->progressive = true;
            break;
        case 'x':
            if (o->nexclude == sizeof(excl) / sizeof(*excl)) {
                log_error("restore: at most %zu --exclude patterns", o->nexclude);
                return EXIT_USAGE;
            }
            excl[o->nexclude++] = optarg;
            o->exclude = excl;
            break;
        case 'X':
            o->exclude_optimizer = true;
            break;
        case 'n':
        case 'o':
        case 'R':
            if (restore_node_opt(opt, optarg, o, &node_set) < 0)
                return EXIT_USAGE;
            break;
        case 'h':
            return usage(restore_usage, 0);
        default:
            return usage(restore_usage, EXIT_USAGE);
        }
    }
    if (optind != argc || !o->target || (int)*latest + (o->id != NULL) + (int)*all != 1 ||
        (*all && (o->progressive || o->nexclude || o->exclude_optimizer)))
        return usage(restore_usage, EXIT_USAGE);
    return restore_node_args(o, node_set, *all);
}

int cmd_restore(struct cli *c, int argc, char **argv)
{
    struct restore_opts o = {
        .progress = cli_progress, .progress_ud = c, .placed = cli_restore_placed, .placed_ud = c};
    struct restore_result res;
    struct repo *r = NULL;
    struct buf err = BUF_INIT;
    bool latest = false, all = false;
    int e = restore_args(argc, argv, &o, &latest, &all);

    if (e >= 0)
        return e;
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    struct catalog_snap snap; /* --snapshot's, or (run only) the one run */
    if (restore_which(r, &o, &snap) < 0)
        return cli_close_repo(r, 1);
    struct unitrestore_opts u = {
        .run = o.run, .target = o.target, .force = o.force, .keep_setid = o.keep_setid, .all = all};
    if (all) {
        e = restore_units(c, r, &u);
        return cli_close_repo(r, e ? 1 : 0);
    }
    double t0 = cli_now();
    e = restore_run(r, &o, &res, &err);
    double secs = cli_now() - t0;
    cli_progress_end(c);
    if (e < 0)
        log_error("restore of run '%s' into \"%s\" failed: %s", o.run, o.target, buf_str(&err));
    else
        restore_print(c, r, &res, secs);
    if (e == 0 && res.node_whole)
        fprintf(stderr,
                "note: snapshot %s was written by one node, not a job on several: --node %d "
                "--of %d restored the whole tree\n",
                res.id, o.node_rank, o.node_count);
    cli_report_restore(c, &res, secs, e);
    /* --latest of a checkpoint brings the run's files outside checkpoints
     * along (logs, configs), as a resumed job expects them. */
    u.skip_root = res.root;
    if (e == 0 && latest && res.step >= 0 && restore_units(c, r, &u))
        e = -EIO;
    buf_free(&err);
    return cli_close_repo(r, e == CKS_E_RESHARD ? EXIT_RESHARD : e < 0 ? 1 : 0);
}

/* ---- verify ------------------------------------------------------------ */

static const char verify_usage[] =
    "usage: ckptsync verify [--run NAME] [--snapshot ID] [--quick | --repair] [--json]\n"
    "Reads back every manifest copy, every commit, claim and handoff record, and\n"
    "every chunk of the selected snapshots (default: all; ID as restore takes it)\n"
    "from every region, and\n"
    "checks each against its digest.  One line per region; exit 0 only when every\n"
    "region is complete and intact.  --quick reads only each chunk's 12-byte\n"
    "header (a ranged GET) and checks presence and length.  --repair copies what\n"
    "a region lacks or holds damaged from a region whose copy checked out (after\n"
    "an outage, or a region replaced by an empty bucket) and counts it.\n";

static void verify_print(struct cli *c, const struct repo *r, const struct verify_result *v)
{
    struct buf b = BUF_INIT;
    struct json j;
    json_init(&j, &b);
    json_obj_begin(&j);
    json_key(&j, "snapshots");
    json_u64(&j, v->snapshots);
    json_key(&j, "uncommitted");
    json_u64(&j, v->uncommitted);
    json_key(&j, "chunks");
    json_u64(&j, v->chunks);
    json_key(&j, "bytes");
    json_u64(&j, v->bytes);
    json_key(&j, "regions");
    json_arr_begin(&j);
    for (size_t i = 0; i < v->nregions; i++) {
        const struct verify_region_result *g = &v->region[i];
        const char *name = repo_region(r, i)->conf.name;
        const char *state = g->err == CKS_E_DENIED ? "access denied"
                            : g->err               ? "unreachable"
                            : verify_region_ok(g)  ? "complete"
                                                   : "INCOMPLETE";
        if (!c->json && !c->quiet)
            printf(
                "region %-12s %s: %llu/%llu manifests (%llu damaged), %llu records (%llu damaged, "
                "%llu missing), %llu repaired, %llu chunks ok, %llu missing, %llu corrupt%s%s%s\n",
                name, state, (unsigned long long)g->manifests_ok, (unsigned long long)v->snapshots,
                (unsigned long long)g->manifests_bad,
                (unsigned long long)(g->records_ok + g->records_bad),
                (unsigned long long)g->records_bad, (unsigned long long)g->records_missing,
                (unsigned long long)g->repaired, (unsigned long long)g->chunks_ok,
                (unsigned long long)g->chunks_missing, (unsigned long long)g->chunks_corrupt,
                g->slots_missing ? ", lacks key slots" : "", g->err ? ": " : "",
                g->err ? region_last_error(repo_region(r, i)) : "");
        json_obj_begin(&j);
        json_key(&j, "name");
        json_str(&j, name);
        json_key(&j, "state");
        json_str(&j, state);
        json_key(&j, "manifests_ok");
        json_u64(&j, g->manifests_ok);
        json_key(&j, "manifests_missing");
        json_u64(&j, g->manifests_missing);
        json_key(&j, "manifests_damaged");
        json_u64(&j, g->manifests_bad);
        json_key(&j, "records_ok");
        json_u64(&j, g->records_ok);
        json_key(&j, "records_damaged");
        json_u64(&j, g->records_bad);
        json_key(&j, "records_missing");
        json_u64(&j, g->records_missing);
        json_key(&j, "repaired");
        json_u64(&j, g->repaired);
        json_key(&j, "chunks_ok");
        json_u64(&j, g->chunks_ok);
        json_key(&j, "chunks_missing");
        json_u64(&j, g->chunks_missing);
        json_key(&j, "chunks_corrupt");
        json_u64(&j, g->chunks_corrupt);
        json_key(&j, "key_slots_missing");
        json_u64(&j, g->slots_missing);
        json_key(&j, "error");
        if (g->err)
            json_str(&j, region_last_error(repo_region(r, i)));
        else
            json_null(&j);
        json_obj_end(&j);
    }
    json_arr_end(&j);
    json_obj_end(&j);
    if (c->json)
        cli_print_json(&b);
    else if (!c->quiet && v->uncommitted)
        printf("%llu snapshot(s) uncommitted (a writer in progress or one that died): not "
               "checked, not counted as damage\n",
               (unsigned long long)v->uncommitted);
    buf_free(&b);
}

int cmd_verify(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"run", required_argument, NULL, 'r'}, {"snapshot", required_argument, NULL, 's'},
        {"quick", no_argument, NULL, 'k'},     {"repair", no_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},      {0}};
    const char *run = NULL, *id = NULL;
    unsigned flags = 0;
    struct verify_result v;
    struct repo *r = NULL;
    struct buf err = BUF_INIT;
    int opt, e;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'r')
            run = optarg;
        else if (opt == 's')
            id = optarg;
        else if (opt == 'k')
            flags |= VERIFY_QUICK;
        else if (opt == 'R')
            flags |= VERIFY_REPAIR;
        else if (opt == 'h')
            return usage(verify_usage, 0);
        else
            return usage(verify_usage, EXIT_USAGE);
    }
    if (optind != argc || flags == (VERIFY_QUICK | VERIFY_REPAIR))
        return usage(verify_usage, EXIT_USAGE);
    /* repair: a region that lost its repo object gets the agreed one */
    if (cli_open_repo(c, (flags & VERIFY_REPAIR) ? REPO_CREATE : 0, &r) < 0)
        return 1;
    struct catalog_snap snap;
    if (id && (e = catalog_resolve_id(r, run, id, &snap, &err)) < 0) {
        log_error("verify: %s", buf_str(&err));
        buf_free(&err);
        return cli_close_repo(r, 1);
    }
    if (id) {
        run = snap.run;
        id = snap.id;
    }
    e = verify_run(r, run, id, flags, cli_progress, c, &v, &err);
    cli_progress_end(c);
    if (e < 0 && e != CKS_E_DIGEST)
        log_error("verify failed: %s", buf_str(&err));
    else
        verify_print(c, r, &v);
    buf_free(&err);
    return cli_close_repo(r, e < 0 ? 1 : 0);
}

/* ---- chunks ------------------------------------------------------------ */

static const char chunks_usage[] =
    "usage: ckptsync chunks FILE [--min N --avg N --max N] [--nc N]\n"
    "Prints one line per FastCDC chunk of FILE: offset length sha256.  Sizes\n"
    "default to the configuration's [chunker] and accept K/M/G suffixes.\n"
    "It cuts with the standard gear table and names chunks by their SHA-256: an\n"
    "encrypted repository keys both (its chunks are cut elsewhere and named by a\n"
    "keyed hash), so for one these are not the repository's chunks; it says so.\n";

static int chunks_line(void *ud, const uint8_t *data, size_t len, uint64_t off)
{
    uint8_t id[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    (void)ud;
    hash_sha256(data, len, id);
    hex_encode(id, HASH_LEN, hex);
    printf("%llu %zu %s\n", (unsigned long long)off, len, hex);
    return 0;
}

static int chunks_print(const struct fastcdc *cdc, int fd, const char *path)
{
    struct scan sc;
    uint64_t got;
    int e = scan_init(&sc, cdc);
    if (e == 0)
        e = scan_fd(&sc, fd, chunks_line, NULL, &got, NULL);
    if (e < 0)
        log_error("reading \"%s\": %s", path, err_str(e));
    scan_free(&sc);
    return e;
}

int cmd_chunks(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"min", required_argument, NULL, 'm'}, {"avg", required_argument, NULL, 'a'},
        {"max", required_argument, NULL, 'x'}, {"nc", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},      {0}};
    const char *smin = NULL, *savg = NULL, *smax = NULL, *snc = NULL;
    uint64_t v[3];
    int64_t nc;
    struct fastcdc cdc;
    int opt, fd, e;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm':
            smin = optarg;
            break;
        case 'a':
            savg = optarg;
            break;
        case 'x':
            smax = optarg;
            break;
        case 'n':
            snc = optarg;
            break;
        case 'h':
            return usage(chunks_usage, 0);
        default:
            return usage(chunks_usage, EXIT_USAGE);
        }
    }
    if (optind != argc - 1)
        return usage(chunks_usage, EXIT_USAGE);
    if (cli_load_config(c) < 0)
        return 1;
    v[0] = c->conf.chunk_min;
    v[1] = c->conf.chunk_avg;
    v[2] = c->conf.chunk_max;
    nc = c->conf.normalization;
    const char *given[3] = {smin, savg, smax}, *names[3] = {"--min", "--avg", "--max"};
    for (int i = 0; i < 3; i++)
        if (given[i] && config_parse_size(given[i], &v[i]) < 0) {
            fprintf(stderr, "ckptsync: %s: '%s' is not a size\n", names[i], given[i]);
            return EXIT_USAGE;
        }
    if (snc && cli_parse_i64("--nc", snc, 0, 3, &nc) < 0)
        return EXIT_USAGE;
    if (fastcdc_init(&cdc, (size_t)v[0], (size_t)v[1], (size_t)v[2], (unsigned)nc) < 0) {
        fprintf(stderr,
                "ckptsync: chunker sizes %llu/%llu/%llu/nc %lld are not valid "
                "(need %u <= min <= avg <= max <= %u)\n",
                (unsigned long long)v[0], (unsigned long long)v[1], (unsigned long long)v[2],
                (long long)nc, FASTCDC_MIN_SIZE, FASTCDC_MAX_SIZE);
        return EXIT_USAGE;
    }
    fd = open(argv[optind], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        log_error("opening \"%s\": %s", argv[optind], strerror(errno));
        return 1;
    }
    if (c->conf.encryption)
        log_warn("the repository is encrypted: its chunker and chunk names are keyed, so these "
                 "cut points and digests (the standard gear table, plain SHA-256) are not its "
                 "chunks");
    e = chunks_print(&cdc, fd, argv[optind]);
    close(fd);
    return e < 0 ? 1 : 0;
}
