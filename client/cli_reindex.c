/*
 * cli_reindex.c — `ckptsync reindex`: rebuild the local index from what the
 * regions hold (service/reindex.h), and say what was found.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "cli.h"
#include "service/reindex.h"

static const char reindex_usage[] =
    "usage: ckptsync reindex [--region NAME] [--force] [--json]\n"
    "Rebuilds the local index from the regions, so that a fresh instance dedups\n"
    "against the repository: every chunk a region lists (presence per region,\n"
    "sizes from NAME, default the first healthy region), refcounts and snapshot\n"
    "records from the committed manifests.  The regions decide: records they do\n"
    "not confirm are dropped.  Refuses while the daemon has pending work, and\n"
    "stops at a committed manifest no region can give, unless --force.\n";

/* One line on stderr, rewritten in place (a terminal only, 4 times a second). */
static void reindex_progress(void *ud, const char *what, uint64_t done, uint64_t total)
{
    struct cli *c = ud;
    double now = cli_now();
    if (!c->progress || (now - c->last < 0.25 && (total == 0 || done < total)))
        return;
    c->last = now;
    if (total)
        fprintf(stderr, "\r%s: %llu / %llu   ", what, (unsigned long long)done,
                (unsigned long long)total);
    else
        fprintf(stderr, "\r%s: %llu   ", what, (unsigned long long)done);
    fflush(stderr);
}

static void reindex_json(const struct repo *r, const struct reindex_stats *s)
{
    struct buf b = BUF_INIT;
    struct json j;
    json_init(&j, &b);
    json_obj_begin(&j);
    json_key(&j, "source");
    json_str(&j, repo_region(r, s->source)->conf.name);
    json_key(&j, "chunks");
    json_u64(&j, s->chunks);
    json_key(&j, "bytes");
    json_u64(&j, s->bytes);
    json_key(&j, "referenced_chunks");
    json_u64(&j, s->referenced);
    json_key(&j, "unreferenced_chunks");
    json_u64(&j, s->unreferenced);
    json_key(&j, "missing_chunks");
    json_u64(&j, s->missing);
    json_key(&j, "references");
    json_u64(&j, s->references);
    json_key(&j, "snapshots");
    json_u64(&j, s->snapshots);
    json_key(&j, "runs");
    json_u64(&j, s->runs);
    json_key(&j, "skipped_snapshots");
    json_u64(&j, s->skipped);
    json_key(&j, "pending_kept");
    json_u64(&j, s->pending_kept);
    json_key(&j, "dropped_chunks");
    json_u64(&j, s->dropped_chunks);
    json_key(&j, "dropped_snapshots");
    json_u64(&j, s->dropped_snapshots);
    json_key(&j, "seconds");
    json_double(&j, s->seconds);
    json_key(&j, "regions");
    json_arr_begin(&j);
    for (size_t i = 0; i < repo_nregions(r); i++) {
        const struct reindex_region_stats *g = &s->region[i];
        json_obj_begin(&j);
        json_key(&j, "name");
        json_str(&j, repo_region(r, i)->conf.name);
        json_key(&j, "listed");
        json_bool(&j, g->listed);
        json_key(&j, "chunks");
        json_u64(&j, g->chunks);
        json_key(&j, "bytes");
        json_u64(&j, g->bytes);
        json_key(&j, "snapshots");
        json_u64(&j, g->snapshots);
        json_key(&j, "error");
        if (g->error[0])
            json_str(&j, g->error);
        else
            json_null(&j);
        json_obj_end(&j);
    }
    json_arr_end(&j);
    json_obj_end(&j);
    cli_print_json(&b);
    buf_free(&b);
}

static void reindex_human(const struct repo *r, const struct reindex_stats *s)
{
    char sz[32];
    cli_human(s->bytes, sz, sizeof(sz));
    printf("reindex from region '%s': %llu chunks (%s stored), %llu snapshots in %llu runs, "
           "%.1f s\n",
           repo_region(r, s->source)->conf.name, (unsigned long long)s->chunks, sz,
           (unsigned long long)s->snapshots, (unsigned long long)s->runs, s->seconds);
    for (size_t i = 0; i < repo_nregions(r); i++) {
        const struct reindex_region_stats *g = &s->region[i];
        cli_human(g->bytes, sz, sizeof(sz));
        if (g->listed)
            printf("  region %-12s %10llu chunks %12s  %llu snapshots committed\n",
                   repo_region(r, i)->conf.name, (unsigned long long)g->chunks, sz,
                   (unsigned long long)g->snapshots);
        else
            printf("  region %-12s not listed: %s\n", repo_region(r, i)->conf.name,
                   g->error[0] ? g->error : "unknown error");
    }
    printf("  references %llu to %llu chunks; %llu chunks unreferenced, %llu referenced but in no "
           "region\n",
           (unsigned long long)s->references, (unsigned long long)s->referenced,
           (unsigned long long)s->unreferenced, (unsigned long long)s->missing);
    if (s->dropped_chunks || s->dropped_snapshots)
        printf("  dropped from the old index: %llu chunks no region lists, %llu snapshot records\n",
               (unsigned long long)s->dropped_chunks, (unsigned long long)s->dropped_snapshots);
    if (s->skipped || s->pending_kept)
        printf("  --force: %llu snapshots left out (no valid manifest), %llu pending kept\n",
               (unsigned long long)s->skipped, (unsigned long long)s->pending_kept);
}

int cmd_reindex(struct cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"region", required_argument, NULL, 'r'},
                                         {"force", no_argument, NULL, 'f'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    struct reindex_opts o = {.progress = reindex_progress, .progress_ud = c};
    struct reindex_stats st;
    struct buf err = BUF_INIT;
    struct repo *r;
    int opt;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'r')
            o.region = optarg;
        else if (opt == 'f')
            o.force = true;
        else if (opt == 'h')
            return fputs(reindex_usage, stdout), 0;
        else
            return fputs(reindex_usage, stderr), EXIT_USAGE;
    }
    if (optind != argc)
        return fputs(reindex_usage, stderr), EXIT_USAGE;
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    int e = reindex_run(r, &o, &st, &err);
    cli_progress_end(c);
    if (e < 0)
        log_error("reindex: %s", buf_str(&err)[0] ? buf_str(&err) : err_str(e));
    else if (c->json)
        reindex_json(r, &st);
    else if (!c->quiet)
        reindex_human(r, &st);
    buf_free(&err);
    return cli_close_repo(r, e < 0 ? 1 : 0);
}
