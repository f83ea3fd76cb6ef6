/*
 * cli.c — `ckptsync`: argument dispatch, configuration, output helpers.
 *
 * The engine runs in-process: snapshot, restore, verify, ls and show need
 * no daemon.  Every command takes --config FILE, --state DIR, --json and
 * -q, before or after the command name; only main() exits.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"
#include "ckptsync/protocol.h"
#include "cli.h"

#define DEFAULT_CONFIG "/etc/ckptsync/ckptsync.conf"

static const char usage_text[] =
    "usage: ckptsync [--config FILE] [--state DIR] [--json] [-q] COMMAND [ARGS]\n"
    "\n"
    "Commands (run in-process, no daemon needed):\n"
    "  snapshot PATH --run NAME [--step N]   store a checkpoint in every region\n"
    "  restore --run NAME (--latest | --snapshot ID | --all) --to DIR\n"
    "                                        bring a snapshot back, verified\n"
    "  verify [--run NAME] [--snapshot ID] [--repair]\n"
    "                                        check (and repair) every region\n"
    "  ls [--run NAME] [--remote]            list snapshots\n"
    "  show SNAPSHOT [--run NAME]            show one snapshot's files\n"
    "  chunks FILE [--min N --avg N --max N] print FastCDC cut points\n"
    "  fsck                                  check index refcounts, recipes against snapshots\n"
    "  reindex [--region NAME] [--force]     rebuild the local index from the regions\n"
    "  forget [--run NAME] [--keep-last N] [--keep-every K] [--keep-within D] [--keep-best M]\n"
    "         [--dry-run]                    remove snapshots a retention policy does not keep\n"
    "  prune [--grace D] [--dry-run]         delete chunks no retained snapshot uses\n"
    "  stats [--run NAME]                    stored, logical, unique and garbage bytes\n"
    "  migrate-in [--run NAME] --to DIR      new instance: restore, claim, print resume path\n"
    "  repo [adopt REGION]                   each region's repository; repair a split\n"
    "  key (list | add OPTION | remove ID | generate FILE)\n"
    "                                        an encrypted repository's key slots\n"
    "\n"
    "Commands that talk to a running ckptsyncd:\n"
    "  commit PATH [--step N] [--wait durable|replicated] [--timeout S]\n"
    "                                        a checkpoint is complete; wait for it\n"
    "  status                                runs, latest snapshots, region lag\n"
    "  flush [--wait durable|replicated] [--deadline S]\n"
    "                                        commit everything pending now and wait\n"
    "  retry REGION                          retry a failed region now\n"
    "  migrate-out [--run NAME] [--deadline S] [--quorum N]\n"
    "                                        old instance: make it durable, hand off\n"
    "\n"
    "Options:\n"
    "  --config FILE   configuration (default " DEFAULT_CONFIG " if it exists,\n"
    "                  else the embedded default; also $CKPTSYNC_CONFIG)\n"
    "  --state DIR     state directory (overrides [daemon] state; also $CKPTSYNC_STATE)\n"
    "  --json          machine-readable output on stdout\n"
    "  -q, --quiet     errors only\n"
    "  -h, --help      this text; `ckptsync COMMAND --help` for a command\n"
    "  --version       print the version\n"
    "\n"
    "The daemon's socket: $CKPTSYNC_SOCKET, else the configuration's [daemon] socket,\n"
    "else STATE/ckptsyncd.sock (the same order as the C library and the Python module).\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 usage error; `status` and `ls --remote`\n"
    "also 3 daemon degraded, 5 a region refused the credentials, 4 a region is\n"
    "failing, 6 daemon starting (see their --help).\n";

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cli_human(uint64_t bytes, char *out, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(out, cap, "%.1f %s", v, units[u]);
}

void cli_progress(void *ud, uint64_t done, uint64_t total)
{
    struct cli *c = ud;
    double now = cli_now();
    char d[32], t[32], rate[32];
    if (!c->progress || (now - c->last < 0.25 && done < total))
        return;
    c->last = now;
    double el = now - c->t0;
    double bps = el > 0 ? (double)done / el : 0;
    cli_human(done, d, sizeof(d));
    cli_human(total, t, sizeof(t));
    cli_human((uint64_t)bps, rate, sizeof(rate));
    double eta = bps > 0 && total > done ? (double)(total - done) / bps : 0;
    fprintf(stderr, "\r%11s / %-11s %3.0f%%  %s/s  ETA %.0fs   ", d, t,
            total ? 100.0 * (double)done / (double)total : 100.0, rate, eta);
    fflush(stderr);
}

void cli_progress_end(struct cli *c)
{
    if (c->progress && c->last > 0)
        fprintf(stderr, "\r%*s\r", 70, "");
}

void cli_print_json(struct buf *b)
{
    fwrite(buf_str(b), 1, b->len, stdout);
    fputc('\n', stdout);
}

int cli_parse_i64(const char *opt, const char *s, int64_t min, int64_t max, int64_t *ret)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "ckptsync: %s: '%s' is not a number in %lld..%lld\n", opt, s,
                (long long)min, (long long)max);
        return -1;
    }
    *ret = v;
    return 0;
}

/* --state DIR (or $CKPTSYNC_STATE) over the configuration's; a relative
 * DIR is taken from the current directory. */
static int cli_set_state(struct config *conf, const char *state, const char *what, struct buf *err)
{
    int e = fileio_abspath(state, conf->state, sizeof(conf->state));
    if (e == -ENAMETOOLONG)
        buf_printf(err, "%s: path too long", what);
    else if (e < 0)
        buf_printf(err, "%s: the current directory: %s", what, strerror(-e));
    return e < 0 ? e : config_finish(conf, err);
}

int cli_load_config(struct cli *c)
{
    struct buf err = BUF_INIT;
    const char *path = c->config_path ? c->config_path : getenv(CKS_PROTO_CONFIG_ENV);
    int e = 0;

    if (!path && access(DEFAULT_CONFIG, F_OK) == 0)
        path = DEFAULT_CONFIG;
    if (path)
        e = config_load(path, &c->conf, &err);
    else
        config_default(&c->conf);
    const char *state = c->state ? c->state : getenv(CKS_PROTO_STATE_ENV);
    if (e == 0 && state && *state)
        e = cli_set_state(&c->conf, state, c->state ? "--state" : "$" CKS_PROTO_STATE_ENV, &err);
    const char *sock = getenv(CKS_PROTO_SOCKET_ENV);
    if (e == 0 && sock && *sock &&
        snprintf(c->conf.socket, sizeof(c->conf.socket), "%s", sock) >=
            (int)sizeof(c->conf.socket)) {
        buf_printf(&err, "$%s: path too long", CKS_PROTO_SOCKET_ENV);
        e = -ENAMETOOLONG;
    }
    if (e < 0)
        fprintf(stderr, "ckptsync: configuration error: %s\n", buf_str(&err));
    else if (!c->warned) { /* once: a command may load it more than once */
        config_warn_insecure(&c->conf);
        c->warned = true;
    }
    buf_free(&err);
    return e;
}

int cli_open_repo(struct cli *c, unsigned flags, struct repo **ret)
{
    struct buf err = BUF_INIT;
    int e = cli_load_config(c);
    if (e < 0)
        return e;
    e = repo_open(&c->conf, flags, ret, &err);
    if (e < 0)
        log_error("%s", buf_str(&err));
    buf_free(&err);
    return e;
}

int cli_close_repo(struct repo *r, int rc)
{
    char why[INDEX_FATAL_WHY];
    if (r && index_fatal(repo_index(r), why, sizeof(why), NULL)) {
        log_error("%s; nothing more was written to it: fix the disk, then run the command again",
                  why);
        if (rc == 0)
            rc = 1;
    }
    repo_free(r);
    return rc;
}

/* Splits off common options wherever they stand; returns the index of
 * the command name in argv, or -1 after printing a usage error. */
static int cli_common(struct cli *c, int *argc, char **argv)
{
    int out = 1, cmd = -1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--config")  ? &c->config_path
                            : !strcmp(a, "--state") ? &c->state
                                                    : NULL;
        if (slot) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "ckptsync: %s needs a value\n", a);
                return -1;
            }
            *slot = argv[++i];
        } else if (!strncmp(a, "--config=", 9)) {
            c->config_path = a + 9;
        } else if (!strncmp(a, "--state=", 8)) {
            c->state = a + 8;
        } else if (!strcmp(a, "--json")) {
            c->json = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            c->quiet = true;
        } else if (!strcmp(a, "--")) {
            while (i < *argc)
                argv[out++] = argv[i++];
        } else {
            if (cmd < 0 && a[0] != '-')
                cmd = out;
            argv[out++] = argv[i];
        }
    }
    *argc = out;
    argv[out] = NULL;
    return cmd;
}

static const struct {
    const char *name;
    int (*fn)(struct cli *, int, char **);
} commands[] = {
    {"snapshot", cmd_snapshot},
    {"restore", cmd_restore},
    {"verify", cmd_verify},
    {"ls", cmd_ls},
    {"show", cmd_show},
    {"chunks", cmd_chunks},
    {"commit", cmd_commit},
    {"status", cmd_status},
    {"flush", cmd_flush},
    {"retry", cmd_retry},
    {"fsck", cmd_fsck},
    {"repo", cmd_repo},
    {"migrate-out", cmd_migrate_out},
    {"migrate-in", cmd_migrate_in},
    {"reindex", cmd_reindex},
    {"forget", cmd_forget},
    {"prune", cmd_prune},
    {"stats", cmd_stats},
    {"key", cmd_key},
};

int main(int argc, char **argv)
{
    struct cli c = {0};
    int cmd;

    log_init("ckptsync", LOG_LVL_INFO);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        printf("ckptsync %s\n", CKS_VERSION);
        return 0;
    }
    cmd = cli_common(&c, &argc, argv);
    if (cmd < 0 && argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage_text, stdout); /* after global options: ckptsync --config F --help */
        return 0;
    }
    if (cmd != 1) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    if (c.quiet)
        log_set_level(LOG_LVL_ERROR);
    c.progress = !c.json && !c.quiet && isatty(STDERR_FILENO);
    c.t0 = cli_now();
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(&c, argc - 1, argv + 1);
    fprintf(stderr, "ckptsync: '%s' is not a command (see ckptsync --help)\n", argv[1]);
    return EXIT_USAGE;
}
