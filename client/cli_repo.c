/*
 * cli_repo.c — `ckptsync repo [adopt REGION]`: each region's repository
 * object, and the repair of a split repository.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "cli.h"

static const char repo_usage[] =
    "usage: ckptsync repo [--json]\n"
    "       ckptsync repo adopt REGION\n"
    "Shows the repository object (id, chunker, encrypted or not) each region\n"
    "holds.  A split repository (regions holding different ones) is refused by\n"
    "every other command; `repo adopt REGION` repairs it by writing REGION's\n"
    "object into every other region.  Chunks are named by their content and each\n"
    "manifest names its own chunker, so every snapshot stays restorable; new snapshots\n"
    "cut with the adopted parameters.\n";

static int repo_show(struct cli *c, struct repo *r)
{
    struct buf out = BUF_INIT;
    struct json j;
    char first[REPOOBJ_ID_HEX + 1] = "";
    bool split = false;
    json_init(&j, &out);
    json_arr_begin(&j);
    for (size_t i = 0; i < repo_nregions(r); i++) {
        struct repoobj o;
        struct buf err = BUF_INIT;
        const char *name = repo_region(r, i)->conf.name;
        int e =
            repo_region_error(r, i) ? repo_region_error(r, i) : repo_region_params(r, i, &o, &err);
        const char *state = repo_region_error(r, i) == CKS_E_DENIED ? "access denied"
                            : repo_region_error(r, i)               ? "unreachable"
                            : e == -ENOENT                          ? "none"
                            : e < 0                                 ? "damaged"
                                                                    : "ok";
        if (e == 0 && first[0] && strcmp(first, o.id))
            split = true;
        if (e == 0 && !first[0])
            snprintf(first, sizeof(first), "%s", o.id);
        json_obj_begin(&j);
        json_key(&j, "region");
        json_str(&j, name);
        json_key(&j, "state");
        json_str(&j, state);
        json_key(&j, "id");
        e == 0 ? json_str(&j, o.id) : json_null(&j);
        json_key(&j, "encrypted");
        e == 0 ? json_bool(&j, o.encrypted) : json_null(&j);
        json_key(&j, "chunker");
        if (e == 0) {
            json_arr_begin(&j);
            json_u64(&j, o.chunk_min);
            json_u64(&j, o.chunk_avg);
            json_u64(&j, o.chunk_max);
            json_arr_end(&j);
        } else {
            json_null(&j);
        }
        json_obj_end(&j);
        if (!c->json && e == 0)
            printf("region %-12s repository %s chunker %llu/%llu/%llu %s\n", name, o.id,
                   (unsigned long long)o.chunk_min, (unsigned long long)o.chunk_avg,
                   (unsigned long long)o.chunk_max, o.encrypted ? "encrypted" : "not encrypted");
        else if (!c->json)
            printf("region %-12s %s%s%s\n", name, state, buf_str(&err)[0] ? ": " : "",
                   buf_str(&err));
        buf_free(&err);
    }
    json_arr_end(&j);
    if (c->json)
        cli_print_json(&out);
    else if (split)
        fprintf(stderr, "ckptsync: the repository is split: pick the region to keep and run "
                        "`ckptsync repo adopt REGION`\n");
    buf_free(&out);
    return split ? 1 : 0;
}

static int repo_adopt_cmd(struct cli *c, struct repo *r, const char *name)
{
    struct buf err = BUF_INIT;
    for (size_t i = 0; i < repo_nregions(r); i++) {
        if (strcmp(repo_region(r, i)->conf.name, name))
            continue;
        int n = repo_adopt(r, i, &err);
        if (n < 0)
            log_error("repo adopt %s: %s", name, buf_str(&err));
        else if (!c->quiet)
            fprintf(stderr,
                    "repo adopt: %d region(s) rewritten; every region holds region '%s''s "
                    "repository\n",
                    n, name);
        buf_free(&err);
        return n < 0 ? 1 : 0;
    }
    fprintf(stderr, "ckptsync: no region is named '%s'\n", name);
    return EXIT_USAGE;
}

int cmd_repo(struct cli *c, int argc, char **argv)
{
    struct repo *r;
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return fputs(repo_usage, stdout), 0;
    bool adopt = argc == 3 && !strcmp(argv[1], "adopt");
    if (argc != 1 && !adopt)
        return fputs(repo_usage, stderr), EXIT_USAGE;
    if (cli_open_repo(c, REPO_NO_AGREE, &r) < 0)
        return 1;
    int rc = adopt ? repo_adopt_cmd(c, r, argv[2]) : repo_show(c, r);
    return cli_close_repo(r, rc);
}
