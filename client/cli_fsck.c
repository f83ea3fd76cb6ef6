/*
 * cli_fsck.c — `ckptsync fsck`: check the local index against the
 * snapshots it records (service/fsck.h) and print the summary.
 */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "cli.h"
#include "service/fsck.h"

int cmd_fsck(struct cli *c, int argc, char **argv)
{
    struct fsck_result res;
    struct repo *r = NULL;
    if (argc != 1) {
        bool help = argc == 2 && !strcmp(argv[1], "--help");
        fputs("usage: ckptsync fsck\nChecks the local index: every chunk's refcount against "
              "the snapshots that reference it, and its recipe records against their r lines.\n",
              help ? stdout : stderr);
        return help ? 0 : EXIT_USAGE;
    }
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    int e = fsck_run(r, &res);
    if (e < 0)
        log_error("fsck: %s", err_str(e));
    else if (!c->quiet)
        printf("fsck: %llu snapshots, %llu chunk references, %llu recipe references, %llu recipe "
               "records, %llu problems\n",
               (unsigned long long)res.snapshots, (unsigned long long)res.refs,
               (unsigned long long)res.recipe_refs, (unsigned long long)res.recipes,
               (unsigned long long)res.problems);
    return cli_close_repo(r, e < 0 || res.problems ? 1 : 0);
}
