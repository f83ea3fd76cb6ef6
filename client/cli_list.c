/*
 * cli_list.c — `ls` and `show`: what snapshots exist, and what one holds.
 *
 * `ls` reads the local index by default (fast, works offline); `--remote`
 * asks the regions themselves, which is what a fresh instance with an
 * empty index needs, and counts in how many regions each manifest stands
 * (service/catalog.h decides what is listed; this file prints it).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "cli.h"
#include "engine/filedigest.h"
#include "service/catalog.h"
#include "service/incomplete.h"

static void fmt_time(int64_t t, char *out, size_t cap)
{
    struct tm tm;
    time_t tt = (time_t)t;
    gmtime_r(&tt, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The incomplete steps of every run in rows (or of run), with the nodes'
 * errors (service/incomplete.h), into *ret: ls --remote shows them after
 * the snapshots. */
static int ls_incomplete(struct cli *c, struct repo *r, const char *run,
                         const struct catalog_rows *rows, struct incomplete **ret, size_t *ret_n)
{
    size_t n = 0, cap = rows->n + 1;
    struct incomplete *v = calloc(cap, sizeof(*v));
    int e = v ? 0 : -ENOMEM;
    for (size_t k = 0; e == 0 && k < (run ? 1 : rows->n); k++) {
        const char *name = run ? run : rows->v[k].run;
        if (n && !strcmp(v[n - 1].run, name))
            continue;
        e = incomplete_collect(r, name, (int64_t)time(NULL), c->conf.part_timeout, &v[n++]);
    }
    *ret = v;
    *ret_n = n;
    return e;
}

static void ls_print(struct cli *c, const struct repo *r, const struct catalog_rows *rows,
                     bool remote, const struct incomplete *parts, size_t nparts)
{
    if (c->json) {
        struct buf b = BUF_INIT;
        struct json j;
        json_init(&j, &b);
        json_arr_begin(&j);
        for (size_t k = 0; k < rows->n; k++) {
            const struct catalog_row *w = &rows->v[k];
            json_obj_begin(&j);
            json_key(&j, "run");
            json_str(&j, w->run);
            json_key(&j, "id");
            json_str(&j, w->id);
            json_key(&j, "step");
            json_i64(&j, w->step);
            json_key(&j, "time");
            json_i64(&j, w->time);
            json_key(&j, "files");
            json_u64(&j, w->files);
            json_key(&j, "bytes");
            json_u64(&j, w->bytes);
            json_key(&j, "regions");
            json_u64(&j, w->regions);
            json_key(&j, "durable");
            json_bool(&j, w->durable);
            if (remote) {
                json_key(&j, "generation");
                json_i64(&j, w->gen);
                json_key(&j, "resume");
                json_bool(&j, w->resume);
            }
            json_obj_end(&j);
        }
        for (size_t k = 0; k < nparts; k++)
            incomplete_json(&j, &parts[k]);
        json_arr_end(&j);
        cli_print_json(&b);
        buf_free(&b);
        return;
    }
    printf("%-16s %-34s %10s %-20s %7s %10s %-7s%s\n", "RUN", "SNAPSHOT", "STEP", "TIME", "FILES",
           "SIZE", "REGIONS", remote ? " GEN" : "");
    for (size_t k = 0; k < rows->n; k++) {
        const struct catalog_row *w = &rows->v[k];
        char t[32], sz[32], step[24];
        fmt_time(w->time, t, sizeof(t));
        cli_human(w->bytes, sz, sizeof(sz));
        if (w->step >= 0)
            snprintf(step, sizeof(step), "%lld", (long long)w->step);
        else
            snprintf(step, sizeof(step), "-");
        char regions[16];
        snprintf(regions, sizeof(regions), "%u/%zu", w->regions, repo_nregions(r));
        if (remote)
            printf("%-16s %-34s %10s %-20s %7llu %10s %-7s %3lld%s\n", w->run, w->id, step, t,
                   (unsigned long long)w->files, sz, regions, (long long)w->gen,
                   w->resume ? "  <- resume point" : "");
        else
            printf("%-16s %-34s %10s %-20s %7llu %10s %s\n", w->run, w->id, step, t,
                   (unsigned long long)w->files, sz, regions);
    }
    for (size_t k = 0; k < nparts; k++)
        incomplete_text(stdout, &parts[k]);
}

static const char ls_usage[] =
    "usage: ckptsync ls [--run NAME] [--remote] [--json]\n"
    "Lists snapshots known to the local index, or (--remote) stored in the regions,\n"
    "with the number of regions that committed each and their regular files;\n"
    "--remote also shows each snapshot's lineage generation and marks the run's\n"
    "resume point (what restore --latest and migrate-in take), and a multi-node\n"
    "job's steps whose parts are not all in (\"incomplete\", the nodes missing and\n"
    "the last error each node recorded).\n"
    "Exit status of --remote: 0 every region answered; 5 a region refused the\n"
    "credentials (access denied); 4 a region could not be read (the listing holds\n"
    "what the others hold); 1 no listing.\n";

/* ls --remote: 0 when every region answered, else EXIT_DENIED or
 * EXIT_REGION (cli.h), with a warning per region left out. */
static int ls_regions_rc(const struct repo *r)
{
    int rc = 0;
    for (size_t i = 0; i < repo_nregions(r); i++) {
        int e = repo_region_error(r, i);
        if (!e)
            continue;
        log_warn("region '%s' was left out of the listing: %s", repo_region(r, i)->conf.name,
                 e == CKS_E_DENIED ? "access denied (the region refused the credentials)"
                                   : err_str(e));
        if (e == CKS_E_DENIED)
            rc = EXIT_DENIED;
        else if (!rc)
            rc = EXIT_REGION;
    }
    return rc;
}

int cmd_ls(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"run", required_argument, NULL, 'r'},
                                         {"remote", no_argument, NULL, 'R'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    const char *run = NULL;
    bool remote = false;
    struct catalog_rows rows = {0};
    struct incomplete *parts = NULL;
    size_t nparts = 0;
    struct repo *r;
    int opt, e;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'r')
            run = optarg;
        else if (opt == 'R')
            remote = true;
        else if (opt == 'h')
            return fputs(ls_usage, stdout), 0;
        else
            return fputs(ls_usage, stderr), EXIT_USAGE;
    }
    if (optind != argc)
        return fputs(ls_usage, stderr), EXIT_USAGE;
    if (run && manifest_run_check(run) < 0) {
        fprintf(stderr, "ckptsync: invalid run name '%s'\n", run);
        return EXIT_USAGE;
    }
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    e = catalog_list(r, run, remote ? CATALOG_REMOTE : 0, &rows);
    if (e < 0)
        log_error("listing snapshots: %s", err_str(e));
    if (e == 0 && remote && (e = ls_incomplete(c, r, run, &rows, &parts, &nparts)) < 0)
        log_error("listing the parts of multi-node steps: %s", err_str(e));
    if (e == 0)
        ls_print(c, r, &rows, remote, parts, nparts);
    for (size_t k = 0; k < nparts; k++)
        incomplete_free(&parts[k]);
    free(parts);
    catalog_rows_free(&rows);
    return cli_close_repo(r, e < 0 ? 1 : remote ? ls_regions_rc(r) : 0);
}

/* ---- show -------------------------------------------------------------- */

static const char show_usage[] =
    "usage: ckptsync show SNAPSHOT [--run NAME] [--json]\n"
    "Prints one snapshot's metadata and files (from the regions).  SNAPSHOT is an\n"
    "id, a prefix only one id starts with, or `latest` (the run's resume point).\n";

/* One entry of `show`: type, mode, size, chunks, the digest's first
 * 16 characters (a tree digest marked "tree:": it is not the file's
 * SHA-256), path. */
static void show_entry(const struct mfile *f)
{
    char hex[HASH_HEX_LEN + 1] = "-", sz[32];
    bool tree = f->dkind == MDIGEST_TREE;
    if (f->type == MFILE_REG)
        hex_encode(f->digest, HASH_LEN, hex);
    cli_human(f->size, sz, sizeof(sz));
    printf("%c %04o %10s %6llu %s%.*s %s%s%s\n", (char)f->type, f->mode,
           f->type == MFILE_REG ? sz : "-", (unsigned long long)f->nchunks, tree ? "tree:" : "",
           tree ? 11 : 16, hex, f->path, f->link ? " -> " : "", f->link ? f->link : "");
}

static void show_print(struct cli *c, const struct manifest *m)
{
    char t[32];
    fmt_time(m->time, t, sizeof(t));
    if (!c->json) {
        printf("snapshot  %s\nrun       %s\nstep      %lld\ntime      %s\nhost      %s\n"
               "instance  %s\nparent    %s\nroot      %s\nchunker   fastcdc2020 %llu/%llu/%llu nc "
               "%u\n",
               m->id, m->run, (long long)m->step, t, m->host ? m->host : "-",
               m->instance ? m->instance : "-", m->parent ? m->parent : "-", m->root,
               (unsigned long long)m->chunk_min, (unsigned long long)m->chunk_avg,
               (unsigned long long)m->chunk_max, m->normalization);
        for (size_t k = 0; k < m->nfiles; k++)
            show_entry(&m->files[k]);
        return;
    }
    struct buf b = BUF_INIT;
    struct json j;
    json_init(&j, &b);
    json_obj_begin(&j);
    json_key(&j, "id");
    json_str(&j, m->id);
    json_key(&j, "run");
    json_str(&j, m->run);
    json_key(&j, "step");
    json_i64(&j, m->step);
    json_key(&j, "time");
    json_i64(&j, m->time);
    json_key(&j, "host");
    json_str(&j, m->host ? m->host : "");
    json_key(&j, "instance");
    m->instance ? json_str(&j, m->instance) : json_null(&j);
    json_key(&j, "parent");
    m->parent ? json_str(&j, m->parent) : json_null(&j);
    json_key(&j, "root");
    json_str(&j, m->root);
    json_key(&j, "files");
    json_arr_begin(&j);
    for (size_t k = 0; k < m->nfiles; k++) {
        const struct mfile *f = &m->files[k];
        char hex[HASH_HEX_LEN + 1];
        char type[2] = {(char)f->type, 0};
        json_obj_begin(&j);
        json_key(&j, "path");
        json_str(&j, f->path);
        json_key(&j, "type");
        json_str(&j, type);
        json_key(&j, "mode");
        json_u64(&j, f->mode);
        if (f->type == MFILE_REG) {
            hex_encode(f->digest, HASH_LEN, hex);
            json_key(&j, "size");
            json_u64(&j, f->size);
            /* "digest" of kind "digest_kind" (tree or sha256); "sha256"
             * only where it is the file's SHA-256 */
            json_key(&j, "digest_kind");
            json_str(&j, filedigest_kind_name(f->dkind));
            json_key(&j, "digest");
            json_str(&j, hex);
            if (f->dkind == MDIGEST_SHA256) {
                json_key(&j, "sha256");
                json_str(&j, hex);
            }
            json_key(&j, "chunks");
            json_u64(&j, f->nchunks);
        }
        if (f->link) {
            json_key(&j, "target");
            json_str(&j, f->link);
        }
        json_obj_end(&j);
    }
    json_arr_end(&j);
    json_obj_end(&j);
    cli_print_json(&b);
    buf_free(&b);
}

int cmd_show(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"run", required_argument, NULL, 'r'}, {"help", no_argument, NULL, 'h'}, {0}};
    char run[MANIFEST_MAX_FIELD + 1] = "";
    struct manifest m;
    struct buf err = BUF_INIT;
    struct repo *r;
    int opt, e;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'r')
            snprintf(run, sizeof(run), "%s", optarg);
        else if (opt == 'h')
            return fputs(show_usage, stdout), 0;
        else
            return fputs(show_usage, stderr), EXIT_USAGE;
    }
    if (optind != argc - 1)
        return fputs(show_usage, stderr), EXIT_USAGE;
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    struct catalog_snap s;
    e = catalog_resolve_id(r, run[0] ? run : NULL, argv[optind], &s, &err);
    if (e == 0)
        e = catalog_find(r, s.run, s.id, &m, NULL, &err);
    if (e < 0) {
        log_error("%s", buf_str(&err));
    } else {
        show_print(c, &m);
        manifest_free(&m);
    }
    buf_free(&err);
    return cli_close_repo(r, e < 0 ? 1 : 0);
}
