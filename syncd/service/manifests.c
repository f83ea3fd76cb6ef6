/*
 * manifests.c — reading one manifest from the regions (manifests.h).  A
 * copy that does not parse, or names another snapshot, is reported with
 * its region and key and the next region tried: a damaged copy is never
 * used.
 */
#include "service/manifests.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "store/layout.h"

int manifests_read_in(struct repo *r, size_t i, const char *run, const char *id,
                      struct manifest *ret)
{
    char key[REGION_KEY_MAX];
    struct buf data = BUF_INIT, perr = BUF_INIT;
    struct region *rg = repo_region(r, i);
    int e = layout_snapshot(run, id, key);
    if (e < 0) {
        log_warn("region '%s': no manifest can be named by run \"%s\" and snapshot \"%s\"",
                 rg->conf.name, run, id);
        goto out;
    }
    e = region_get(rg, key, MANIFEST_MAX_BYTES, &data);
    if (e < 0) {
        if (e != -ENOENT)
            log_warn("%s", region_last_error(rg));
        goto out;
    }
    e = manifest_parse(data.data, data.len, ret, &perr);
    if (e < 0) {
        log_error("region '%s': manifest \"%s\" rejected: %s", rg->conf.name, key, buf_str(&perr));
        goto out;
    }
    if (strcmp(ret->id, id) != 0 || !ret->run || strcmp(ret->run, run) != 0 || !ret->root ||
        strchr(ret->root, '/') || manifest_path_check(ret->root) < 0) {
        log_error("region '%s': manifest \"%s\" names another snapshot", rg->conf.name, key);
        manifest_free(ret);
        e = CKS_E_FORMAT;
    }
out:
    buf_free(&data);
    buf_free(&perr);
    return e;
}

/* The first valid manifest of id among the healthy regions. */
static int manifests_find(struct repo *r, const char *run, const char *id, struct manifest *ret,
                          size_t *ret_region)
{
    int e = -ENOENT;
    REPO_FOR_HEALTHY(r, i) {
        e = manifests_read_in(r, i, run, id, ret);
        if (e == 0) {
            if (ret_region)
                *ret_region = i;
            return 0;
        }
    }
    return e == 0 ? -ENOENT : e;
}

int manifests_read(struct repo *r, const char *run, const char *id, struct manifest *ret,
                   size_t *ret_region, struct buf *err)
{
    int e = manifests_find(r, run, id, ret, ret_region);
    if (e < 0)
        buf_printf(err, "snapshot %s of run '%s': no reachable region holds a valid manifest", id,
                   run);
    return e;
}
