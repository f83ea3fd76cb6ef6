/*
 * cli_daemon.c — the commands that talk to a running ckptsyncd through the
 * C client library: commit, status, flush, retry.
 *
 * When no daemon listens, each says so in one line and exits 1 (never a
 * hang, never a stack of errors).  --json prints the daemon's answer as it
 * came; the human form is rendered from it.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>

#include "base/jsonread.h"
#include "base/log.h"
#include "ckptsync/client.h"
#include "ckptsync/protocol.h"
#include "cli.h"

/* A daemon that holds the state directory but does not listen yet: its
 * lock file says "PID starting" (daemon/daemon.c writes it; a first start
 * waits [daemon] create_settle there).  Its pid, or 0. */
static long daemon_starting(const struct cli *c)
{
    char phase[16] = "";
    long pid = 0;
    struct buf path = BUF_INIT;
    buf_printf(&path, "%s/ckptsyncd.lock", c->conf.state);
    FILE *f = fopen(buf_str(&path), "re");
    buf_free(&path);
    if (!f)
        return 0;
    if (fscanf(f, "%ld %15s", &pid, phase) != 2 || strcmp(phase, "starting") || pid <= 0)
        pid = 0;
    fclose(f);
    if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno != EPERM)
        pid = 0; /* it died while starting */
    return pid;
}

/* 0, or -1 after saying why (-EXIT_STARTING when the daemon is starting). */
static int open_client(struct cli *c, struct cks_client **ret)
{
    if (cli_load_config(c) < 0)
        return -1;
    int e = cks_client_open(c->conf.socket, ret);
    long pid = e == -ENOENT || e == -ECONNREFUSED ? daemon_starting(c) : 0;
    if (pid > 0) {
        fprintf(stderr,
                "ckptsync: ckptsyncd (pid %ld) is starting: opening the repository (a first "
                "start waits [daemon] create_settle for the regions to agree); not answering "
                "on \"%s\" yet\n",
                pid, c->conf.socket);
        return -EXIT_STARTING;
    }
    if (e == -ENOENT || e == -ECONNREFUSED) {
        fprintf(stderr, "ckptsync: no daemon is running (nothing listens on \"%s\")\n",
                c->conf.socket);
        return -1;
    }
    if (e < 0) {
        fprintf(stderr, "ckptsync: control socket \"%s\": %s\n", c->conf.socket, strerror(-e));
        return -1;
    }
    return 0;
}

static int parse_wait(const char *s, int *ret)
{
    if (!strcmp(s, "none"))
        *ret = CKS_WAIT_NONE;
    else if (!strcmp(s, "durable"))
        *ret = CKS_WAIT_DURABLE;
    else if (!strcmp(s, "replicated"))
        *ret = CKS_WAIT_REPLICATED;
    else {
        fprintf(stderr, "ckptsync: --wait: '%s' is not none, durable or replicated\n", s);
        return -1;
    }
    return 0;
}

static int request_failed(struct cks_client *cl, const char *what, int e)
{
    const char *msg = cks_client_error(cl);
    fprintf(stderr, "ckptsync: %s: %s\n", what, msg && msg[0] ? msg : strerror(-e));
    return 1;
}

/* ---- commit ------------------------------------------------------------ */

static const char commit_usage[] =
    "usage: ckptsync commit PATH [--step N] [--wait none|durable|replicated] [--timeout S] "
    "[--node K --of N] [--json]\n"
    "Tells the daemon that the checkpoint at PATH (under the watch root) is complete.\n"
    "Exit 0 only when the wait is satisfied: durable = committed in `quorum`\n"
    "regions, replicated = in all of them.  Default --wait none.\n"
    "--node K --of N: this is node K (0-based) of a job on N nodes; the daemon\n"
    "refuses the commit unless its own [daemon] node_rank and nodes say the same.\n";

int cmd_commit(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"step", required_argument, NULL, 's'},
                                         {"wait", required_argument, NULL, 'w'},
                                         {"timeout", required_argument, NULL, 't'},
                                         {"node", required_argument, NULL, 'k'},
                                         {"of", required_argument, NULL, 'n'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    int64_t step = -1, timeout = -1, rank = -1, nodes = -1;
    int wait = CKS_WAIT_NONE, opt, e;
    struct cks_client *cl;
    char *json = NULL;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 's' && cli_parse_i64("--step", optarg, 0, INT64_MAX, &step) < 0)
            return EXIT_USAGE;
        if (opt == 'w' && parse_wait(optarg, &wait) < 0)
            return EXIT_USAGE;
        if (opt == 't' && cli_parse_i64("--timeout", optarg, 0, 604800, &timeout) < 0)
            return EXIT_USAGE;
        if (opt == 'k' && cli_parse_i64("--node", optarg, 0, CKS_PROTO_MAX_NODES - 1, &rank) < 0)
            return EXIT_USAGE;
        if (opt == 'n' && cli_parse_i64("--of", optarg, 1, CKS_PROTO_MAX_NODES, &nodes) < 0)
            return EXIT_USAGE;
        if (opt == 'h')
            return fputs(commit_usage, stdout), 0;
        if (opt == '?')
            return fputs(commit_usage, stderr), EXIT_USAGE;
    }
    if (optind != argc - 1)
        return fputs(commit_usage, stderr), EXIT_USAGE;
    if ((rank < 0) != (nodes < 0) || (nodes > 0 && rank >= nodes)) {
        fprintf(stderr, "ckptsync: commit: --node K and --of N go together, K below N\n");
        return EXIT_USAGE;
    }
    if (open_client(c, &cl) < 0)
        return 1;
    e = cks_commit_node(cl, argv[optind], step, wait, timeout, rank, nodes, &json);
    if (e < 0) {
        request_failed(cl, "commit", e);
    } else if (c->json) {
        printf("%s\n", json);
    } else if (!c->quiet) {
        struct jnode *root = NULL;
        if (jsonread_parse(json, strlen(json), &root, NULL) == 0)
            printf("snapshot %s of run '%s': committed in %.0f region(s)%s\n",
                   jnode_str(jnode_get(root, "id"), "?"), jnode_str(jnode_get(root, "run"), "?"),
                   jnode_num(jnode_get(root, "regions_committed"), 0),
                   jnode_bool(jnode_get(root, "replicated"), false) ? ", replicated"
                   : jnode_bool(jnode_get(root, "durable"), false)  ? ", durable"
                                                                    : "");
        jsonread_free(root);
    }
    free(json);
    cks_client_close(cl);
    return e < 0 ? 1 : 0;
}

/* ---- status ------------------------------------------------------------ */

static const char status_usage[] =
    "usage: ckptsync status [--json]\n"
    "Per run: the latest snapshot, its step and state, and the newest durable one;\n"
    "per region: the chunks and bytes it still has to upload, lag, and the last\n"
    "error.  --json prints the whole document (README, \"ckptsync status --json\"),\n"
    "configuration included.  Exit status: 0 all is well; 1 no daemon answered;\n"
    "3 the daemon is degraded (takes no new work); 5 a region refused the\n"
    "credentials (access denied); 4 a region is failing; 6 the daemon is\n"
    "starting (not answering yet).  The first that applies, in that order.\n";

/* The regions the daemon runs with tls_verify = false (config.regions[]). */
static void status_print_insecure(const struct jnode *regions)
{
    for (size_t i = 0; i < jnode_len(regions); i++) {
        const struct jnode *g = jnode_at(regions, i);
        if (!jnode_bool(jnode_get(g, "tls_verify"), true))
            printf("region %s: tls_verify = false (the server's certificate is not checked)\n",
                   jnode_str(jnode_get(g, "name"), "?"));
    }
}

/* A step for a column: "-" for a snapshot without one (step -1). */
static const char *status_step(const struct jnode *snap, char *out, size_t cap)
{
    double step = jnode_num(jnode_get(snap, "step"), -1);
    if (step < 0)
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.0f", step);
    return out;
}

/* Upload once: the latest snapshot's bytes sent against its new stored
 * bytes, when the daemon knows them. */
static void status_print_sent(const struct jnode *l)
{
    const struct jnode *sent = jnode_get(l, "bytes_sent");
    double stored = jnode_num(jnode_get(l, "stored_bytes"), 0);
    char b1[32], b2[32], b3[32];
    if (!sent || sent->type != J_NUM)
        return;
    cli_human((uint64_t)jnode_num(sent, 0), b1, sizeof(b1));
    cli_human((uint64_t)stored, b2, sizeof(b2));
    cli_human((uint64_t)jnode_num(jnode_get(l, "bytes_copied"), 0), b3, sizeof(b3));
    printf("%-20s sent %s from this instance for %s new stored (%.2fx), %s copied by the "
           "regions\n",
           "", b1, b2, stored > 0 ? jnode_num(sent, 0) / stored : 0.0, b3);
}

static void status_print_runs(const struct jnode *runs)
{
    char step[32];
    printf("\n%-20s %-34s %10s %-11s\n", "RUN", "LATEST", "STEP", "STATE");
    for (size_t i = 0; i < jnode_len(runs); i++) {
        const struct jnode *r = jnode_at(runs, i), *l = jnode_get(r, "latest");
        const char *state = jnode_str(jnode_get(l, "state"), "?");
        char detail[64];
        if (!strcmp(state, "uploading") || !strcmp(state, "queued"))
            snprintf(detail, sizeof(detail), "%.0f%%",
                     jnode_num(jnode_get(l, "uploaded_percent"), 0));
        else
            snprintf(detail, sizeof(detail), "%.0f/%.0f",
                     jnode_num(jnode_get(l, "regions_committed"), 0),
                     jnode_num(jnode_get(l, "regions"), 0));
        printf("%-20s %-34s %10s %s %s\n", jnode_str(jnode_get(r, "run"), "?"),
               jnode_str(jnode_get(l, "id"), "?"), status_step(l, step, sizeof(step)), state,
               detail);
        status_print_sent(l);
        const struct jnode *dl = jnode_get(r, "durable_latest");
        if (strcmp(state, "replicated") && strcmp(state, "durable") && jnode_get(dl, "id"))
            printf("%-20s %-34s %10s durable (newest safe)\n", "",
                   jnode_str(jnode_get(dl, "id"), "?"), status_step(dl, step, sizeof(step)));
    }
}

/* The regions: what each still has to upload (pending work), its lag and
 * its current error. */
static void status_print_regions(const struct jnode *regions)
{
    printf("\n%-12s %-8s %14s %13s %9s  %s\n", "REGION", "STATE", "PENDING CHUNKS", "PENDING BYTES",
           "LAG", "LAST ERROR");
    for (size_t i = 0; i < jnode_len(regions); i++) {
        const struct jnode *g = jnode_at(regions, i);
        char bytes[32];
        cli_human((uint64_t)jnode_num(jnode_get(g, "pending_bytes"), 0), bytes, sizeof(bytes));
        printf("%-12s %-8s %14.0f %13s %8.0fs  %s\n", jnode_str(jnode_get(g, "name"), "?"),
               jnode_bool(jnode_get(g, "access_denied"), false)
                   ? "denied"
                   : jnode_str(jnode_get(g, "state"), "?"),
               jnode_num(jnode_get(g, "pending_chunks"), 0), bytes,
               jnode_num(jnode_get(g, "lag_seconds"), 0),
               jnode_str(jnode_get(g, "last_error"), "-"));
    }
}

static void status_print(const struct jnode *root)
{
    bool degraded = jnode_bool(jnode_get(root, "degraded"), false);
    printf("ckptsyncd %s, watching %s, repository %s%s\n",
           jnode_str(jnode_get(root, "version"), "?"), jnode_str(jnode_get(root, "watch"), "?"),
           jnode_bool(jnode_get(root, "encrypted"), false) ? "encrypted" : "not encrypted",
           degraded ? "  ** DEGRADED **" : "");
    if (degraded)
        printf("degraded: %s; taking no new work\n",
               jnode_str(jnode_get(root, "degraded_reason"), "?"));
    printf("units waiting to settle: %.0f, being read: %.0f\n",
           jnode_num(jnode_get(root, "units_pending"), 0),
           jnode_num(jnode_get(root, "ingest_busy"), 0));
    status_print_runs(jnode_get(root, "runs"));
    status_print_regions(jnode_get(root, "regions"));
    status_print_insecure(jnode_get(jnode_get(root, "config"), "regions"));
}

/* The exit status a status document calls for (cli.h): degraded, then a
 * region that refused the credentials, then one failing; 0 when all is well. */
static int status_exit(const struct jnode *root)
{
    const struct jnode *regions = jnode_get(root, "regions");
    int rc = 0;
    if (jnode_bool(jnode_get(root, "degraded"), false))
        return EXIT_DEGRADED;
    for (size_t i = 0; i < jnode_len(regions); i++) {
        const struct jnode *g = jnode_at(regions, i);
        if (jnode_bool(jnode_get(g, "access_denied"), false))
            return EXIT_DENIED;
        if (strcmp(jnode_str(jnode_get(g, "state"), "ok"), "ok"))
            rc = EXIT_REGION;
    }
    return rc;
}

int cmd_status(struct cli *c, int argc, char **argv)
{
    struct cks_client *cl;
    char *json = NULL;
    int rc = 1;
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return fputs(status_usage, stdout), 0;
    if (argc != 1)
        return fputs(status_usage, stderr), EXIT_USAGE;
    int o = open_client(c, &cl);
    if (o < 0)
        return o == -EXIT_STARTING ? EXIT_STARTING : 1;
    int e = cks_status(cl, &json);
    struct jnode *root = NULL;
    struct buf err = BUF_INIT;
    if (e < 0)
        request_failed(cl, "status", e);
    else if (jsonread_parse(json, strlen(json), &root, &err) < 0)
        fprintf(stderr, "ckptsync: status: malformed answer: %s\n", buf_str(&err));
    else
        rc = status_exit(root);
    if (e == 0 && c->json)
        printf("%s\n", json);
    else if (root)
        status_print(root);
    jsonread_free(root);
    buf_free(&err);
    free(json);
    cks_client_close(cl);
    return rc;
}

/* ---- flush and retry --------------------------------------------------- */

static const char flush_usage[] =
    "usage: ckptsync flush [--wait none|durable|replicated] [--deadline S] [--json]\n"
    "Commits everything pending now (without waiting for quiescence) and waits.\n"
    "Exit 0 only when every pending snapshot reached the wait level in time.\n";

int cmd_flush(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"wait", required_argument, NULL, 'w'},
                                         {"deadline", required_argument, NULL, 'd'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    int64_t deadline = -1;
    int wait = CKS_WAIT_DURABLE, opt;
    struct cks_client *cl;
    char *json = NULL;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'w' && parse_wait(optarg, &wait) < 0)
            return EXIT_USAGE;
        if (opt == 'd' && cli_parse_i64("--deadline", optarg, 0, 604800, &deadline) < 0)
            return EXIT_USAGE;
        if (opt == 'h')
            return fputs(flush_usage, stdout), 0;
        if (opt == '?')
            return fputs(flush_usage, stderr), EXIT_USAGE;
    }
    if (optind != argc)
        return fputs(flush_usage, stderr), EXIT_USAGE;
    if (open_client(c, &cl) < 0)
        return 1;
    int e = cks_flush(cl, wait, deadline, &json);
    if (e < 0)
        request_failed(cl, "flush", e);
    else if (c->json)
        printf("%s\n", json);
    else if (!c->quiet)
        printf("flushed: everything pending is %s\n", wait == CKS_WAIT_REPLICATED ? "replicated"
                                                      : wait == CKS_WAIT_DURABLE  ? "durable"
                                                                                  : "queued");
    free(json);
    cks_client_close(cl);
    return e < 0 ? 1 : 0;
}

int cmd_retry(struct cli *c, int argc, char **argv)
{
    struct cks_client *cl;
    if (argc != 2 || argv[1][0] == '-') {
        fputs("usage: ckptsync retry REGION\nRetries a failed or backed-off region now.\n",
              argc == 2 && !strcmp(argv[1], "--help") ? stdout : stderr);
        return argc == 2 && !strcmp(argv[1], "--help") ? 0 : EXIT_USAGE;
    }
    if (open_client(c, &cl) < 0)
        return 1;
    int e = cks_retry(cl, argv[1]);
    if (e < 0)
        request_failed(cl, "retry", e);
    cks_client_close(cl);
    return e < 0 ? 1 : 0;
}
