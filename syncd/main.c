/*
 * main.c — ckptsyncd: arguments, configuration, then the event loop.
 * The only place in the daemon that exits.
 *
 * Exit status: 0 clean shutdown, 1 start-up failure (bad configuration,
 * missing watch root, unusable state directory, another daemon running),
 * 2 usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/config.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/log.h"
#include "ckptsync/protocol.h"
#include "daemon/daemon.h"
#include "service/preflight.h"
#include "service/repokeys.h"

#define DEFAULT_CONFIG "/etc/ckptsync/ckptsync.conf"

static const char usage_text[] =
    "usage: ckptsyncd [--config FILE] [--watch DIR] [--state DIR] [--foreground] [-v]\n"
    "\n"
    "Watches the watch root (default /data/cloud_storage), snapshots every\n"
    "completed checkpoint and replicates it to the configured regions.\n"
    "\n"
    "  --config FILE   configuration (default " DEFAULT_CONFIG " if it exists,\n"
    "                  else the embedded default: three dir regions under the state\n"
    "                  directory, which do NOT survive the instance)\n"
    "  --watch DIR     watch root (overrides [daemon] watch)\n"
    "  --state DIR     state directory (overrides [daemon] state; also $CKPTSYNC_STATE)\n"
    "  --foreground    stay in the foreground (the default; kept for scripts)\n"
    "  --check         validate the configuration and exit: the file, the watch\n"
    "                  root, the repository's secret and each region's credentials\n"
    "                  (files missing, unreadable or readable by others are named)\n"
    "  --connect       with --check: also contact each region (bucket or directory,\n"
    "                  the repo object, a key slot the secret opens) and say per\n"
    "                  region what works; changes nothing\n"
    "  --json          with --check: print the configuration's file, watch root,\n"
    "                  state directory, socket and regions, and each region's\n"
    "                  checks (\"preflight\"), as one JSON object\n"
    "  -v, --verbose   debug logging\n"
    "  -h, --help      this text\n"
    "\n"
    "Signals: SIGTERM/SIGINT stop (queues persist), SIGHUP reloads the configuration.\n";

struct opts {
    const char *config, *watch, *state;
    int check, verbose, json, connect;
};

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {{"config", required_argument, NULL, 'c'},
                                       {"watch", required_argument, NULL, 'w'},
                                       {"state", required_argument, NULL, 's'},
                                       {"foreground", no_argument, NULL, 'f'},
                                       {"check", no_argument, NULL, 'k'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"verbose", no_argument, NULL, 'v'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"version", no_argument, NULL, 'V'},
                                       {"connect", no_argument, NULL, 'C'},
                                       {0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "c:fhv", lo, NULL)) != -1) {
        switch (opt) {
        case 'c':
            o->config = optarg;
            break;
        case 'w':
            o->watch = optarg;
            break;
        case 's':
            o->state = optarg;
            break;
        case 'f':
            break;
        case 'k':
            o->check = 1;
            break;
        case 'j':
            o->json = 1;
            break;
        case 'C':
            o->connect = 1;
            break;
        case 'v':
            o->verbose = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            exit(0);
        case 'V':
            printf("ckptsyncd %s\n", CKS_VERSION);
            exit(0);
        default:
            fputs(usage_text, stderr);
            return -1;
        }
    }
    if ((o->json || o->connect) && !o->check) {
        fprintf(stderr, "ckptsyncd: --%s is for --check\n", o->json ? "json" : "connect");
        return -1;
    }
    if (optind != argc) {
        fprintf(stderr, "ckptsyncd: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* --watch or --state: a relative path is taken from the current directory. */
static int set_path(char *dst, size_t cap, const char *val, const char *what)
{
    int e = fileio_abspath(val, dst, cap);
    if (e == -ENAMETOOLONG)
        log_error("%s: path too long", what);
    else if (e < 0)
        log_error("%s: the current directory: %s", what, strerror(-e));
    return e < 0 ? -1 : 0;
}

static int load_config(const struct opts *o, struct config *c, const char **ret_path)
{
    struct buf err = BUF_INIT;
    const char *path = o->config ? o->config : getenv(CKS_PROTO_CONFIG_ENV);
    int e = 0;
    if (!path && access(DEFAULT_CONFIG, F_OK) == 0)
        path = DEFAULT_CONFIG;
    if (path)
        e = config_load(path, c, &err);
    else
        config_default(c);
    const char *state = o->state ? o->state : getenv(CKS_PROTO_STATE_ENV);
    if (state && !*state)
        state = NULL;
    if (e == 0 && (o->watch || state)) {
        if ((o->watch && set_path(c->watch, sizeof(c->watch), o->watch, "--watch") < 0) ||
            (state && set_path(c->state, sizeof(c->state), state,
                               o->state ? "--state" : "$" CKS_PROTO_STATE_ENV) < 0))
            e = -EINVAL;
        else
            e = config_finish(c, &err);
    }
    if (e == 0)
        e = config_nodes_env(c, getenv, &err);
    if (e < 0 && err.len)
        log_error("configuration: %s", buf_str(&err));
    buf_free(&err);
    *ret_path = path;
    return e;
}

/* A reload re-executes /proc/self/exe (the very binary running, even if
 * an upgrade replaced the file), which makes the kernel name the process
 * "exe".  pidof, pgrep, `ps -C` and the migration hooks look for the name
 * it was started under, so it is put back from argv[0]. */
static void keep_process_name(const char *argv0)
{
    const char *base = strrchr(argv0, '/');
    base = base ? base + 1 : argv0;
    if (*base)
        prctl(PR_SET_NAME, base, 0, 0, 0);
}

/* What must hold before the daemon starts (and what --check checks beyond
 * the file): the watch root is a directory, and the repository's secret
 * can be read.  Non-zero with the reason in why. */
static int check_start(const struct config *c, const char *path, struct buf *why)
{
    struct stat st;
    if (stat(c->watch, &st) < 0)
        return buf_printf(why, "watch root \"%s\": %s", c->watch, strerror(errno)), 1;
    if (!S_ISDIR(st.st_mode))
        return buf_printf(why, "watch root \"%s\": not a directory", c->watch), 1;
    if (c->encryption || c->key_file[0] || c->passphrase_file[0]) {
        /* The secret is read at every start: a key file with the wrong mode
         * or a missing passphrase should fail here, not at the first commit. */
        struct repo_secret sec;
        struct buf err = BUF_INIT;
        int e = repokeys_secret(c, &sec, &err);
        repokeys_secret_free(&sec);
        if (e < 0)
            buf_printf(why, "%s: [repository]: %s", path ? path : "(embedded default)",
                       buf_str(&err));
        buf_free(&err);
        return e < 0;
    }
    return 0;
}

/* --check --json: what scripts (deploy/hooks/migrate-in.sh) need to know
 * of the configuration without a running daemon. */
static int print_check_json(const struct config *c, const char *path, const char *error,
                            const struct preflight *pf)
{
    struct buf b = BUF_INIT;
    struct json j;
    json_init(&j, &b);
    json_obj_begin(&j);
    json_key(&j, "config");
    if (path)
        json_str(&j, path);
    else
        json_null(&j);
    json_key(&j, "valid");
    json_bool(&j, !error);
    if (error) {
        json_key(&j, "error");
        json_str(&j, error);
    }
    json_key(&j, "watch");
    json_str(&j, c->watch);
    json_key(&j, "state");
    json_str(&j, c->state);
    json_key(&j, "socket");
    json_str(&j, c->socket);
    json_key(&j, "regions");
    json_arr_begin(&j);
    for (size_t i = 0; i < c->nregions; i++)
        json_str(&j, c->regions[i].name);
    json_arr_end(&j);
    json_key(&j, "preflight");
    preflight_json(pf, &j);
    json_key(&j, "copies");
    preflight_copies_json(pf, &j);
    json_obj_end(&j);
    int ok = !j.err && printf("%s\n", buf_str(&b)) > 0;
    buf_free(&b);
    return ok ? 0 : 1;
}

/* --check [--connect] [--json]: the file's and the regions' checks
 * (service/preflight.h), said on stdout (JSON) or stdout and stderr; the
 * exit status of main.  error: check_start's, or NULL.  Frees why. */
static int check_report(const struct opts *o, const struct config *c, const char *path,
                        const char *error, struct buf *why)
{
    static struct preflight pf; /* large: not on the stack */
    const char *name = path ? path : "(embedded default)";
    unsigned bad = preflight_run(c, o->connect ? PREFLIGHT_CONNECT : 0, &pf);
    int rc = error || bad ? 1 : 0;
    if (o->json) {
        rc |= print_check_json(c, path, error, &pf);
    } else {
        if (error)
            log_error("%s", error);
        config_warn_insecure(c);
        preflight_print(&pf, stdout);
        if (bad)
            log_error("configuration %s: %u region(s) failed their check (above)", name, bad);
        else if (!error)
            printf("configuration %s is valid%s\n", name,
                   o->connect ? "; every region answered" : "");
    }
    buf_free(why);
    return rc;
}

int main(int argc, char **argv)
{
    static struct config conf; /* large: not on the stack */
    struct config *c = &conf;
    struct opts o = {0};
    const char *path = NULL;

    log_init("ckptsyncd", LOG_LVL_INFO);
    if (argc > 0)
        keep_process_name(argv[0]);
    if (parse_args(argc, argv, &o) < 0)
        return 2;
    if (o.verbose)
        log_set_level(LOG_LVL_DEBUG);
    if (load_config(&o, c, &path) < 0)
        return 1;
    struct buf why = BUF_INIT;
    int bad = check_start(c, path, &why);
    if (o.check)
        return check_report(&o, c, path, bad ? buf_str(&why) : NULL, &why);
    if (bad) {
        log_error("%s", buf_str(&why));
        buf_free(&why);
        return 1;
    }
    buf_free(&why);
    config_warn_insecure(c);
    if (c->default_regions) /* only without a file: config_load() refuses one naming none */
        log_warn("no configuration file: using the embedded default regions (three dir regions "
                 "under \"%s\"): fine for trying, but they do NOT survive the instance",
                 c->state);
    return daemon_run(c, path, argv) < 0 ? 1 : 0;
}
