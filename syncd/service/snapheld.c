/*
 * snapheld.c — asking the regions whether a recorded snapshot is still
 * there (snapheld.h).
 *
 * Design: only a definite answer contradicts the record: a claimed region
 * that answers "absent" for the manifest, or any region that lists a
 * forget record.  Errors (a region down) prove nothing either way, but a
 * snapshot no claimed region confirms is not answered from the index:
 * taking an unchanged unit again costs a manifest (its files are known
 * and its chunks deduplicated), answering from a stale record costs a
 * checkpoint the user believes is stored.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "base/log.h"
#include "engine/lineage.h"
#include "service/snapheld.h"
#include "store/layout.h"

struct forgot_ctx {
    const char *id;
    bool found;
};

static int forgot_cb(void *ud, const char *key, uint64_t size)
{
    struct forgot_ctx *c = ud;
    struct lineage_rec rec;
    (void)size;
    if (layout_record_parse(key, &rec) == 0 && rec.kind == LINEAGE_FORGET && !strcmp(rec.id, c->id))
        c->found = true;
    return c->found ? 1 : 0;
}

/* The region of regions[0..n) that lists a forget record of run/id, or
 * NULL when none that answered does. */
static struct region *held_forgotten(struct region *const *regions, size_t n, const char *run,
                                     const char *id)
{
    char prefix[REGION_KEY_MAX];
    struct forgot_ctx c = {.id = id};
    if (layout_prefix(LAYOUT_FORGET, run, prefix) < 0)
        return NULL; /* no key names such a run */
    for (size_t i = 0; i < n; i++) {
        int e = region_list(regions[i], prefix, forgot_cb, &c);
        if (c.found)
            return regions[i];
        if (e < 0)
            log_debug("%s", region_last_error(regions[i]));
    }
    return NULL;
}

int snapheld_confirm(struct region *const *regions, size_t n, const char *run, const char *id,
                     uint32_t claimed, const char *unit)
{
    char key[REGION_KEY_MAX];
    struct region *gone = NULL;
    size_t confirmed = 0;
    if (claimed == 0)
        return 1; /* nothing claimed: in flight, its waiters wait for the workers */
    if (layout_snapshot(run, id, key) < 0)
        return 0;
    for (size_t i = 0; i < n && !gone; i++) {
        if (!(claimed & (1u << regions[i]->slot)))
            continue;
        int has = region_has(regions[i], key);
        if (has == 1)
            confirmed++;
        else if (has == 0 || has == -ENOENT)
            gone = regions[i];
        else
            log_debug("%s", region_last_error(regions[i]));
    }
    if (gone) {
        log_warn("\"%s\": its last snapshot %s of run '%s' is no longer in region '%s' (forgotten "
                 "or pruned elsewhere); taking it again",
                 unit ? unit : "?", id, run, gone->conf.name);
        return 0;
    }
    if (confirmed == 0) {
        log_warn("\"%s\": no region the index names could confirm its last snapshot %s of run "
                 "'%s'; taking it again",
                 unit ? unit : "?", id, run);
        return 0;
    }
    if ((gone = held_forgotten(regions, n, run, id))) {
        log_warn(
            "\"%s\": its last snapshot %s of run '%s' was forgotten (a forget record in region "
            "'%s'); taking it again",
            unit ? unit : "?", id, run, gone->conf.name);
        return 0;
    }
    return 1;
}
