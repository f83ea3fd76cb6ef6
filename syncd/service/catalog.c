/*
 * catalog.c — a run's units from the regions' listings and manifests.
 * Listings are merged across regions (a region that missed a snapshot does
 * not hide it); each manifest is read once, from the first region that
 * has it intact (restore_find).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/ref.h"
#include "service/catalog.h"
#include "service/restore.h"

struct ids {
    char (*v)[MANIFEST_ID_MAX + 1];
    size_t n, cap;
    size_t plen;
};

static int ids_cb(void *ud, const char *key, uint64_t size)
{
    struct ids *l = ud;
    const char *id = key + l->plen;
    (void)size;
    if (strchr(id, '/') || manifest_id_check(id) < 0)
        return 0;
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i], id))
            return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        void *p = realloc(l->v, cap * sizeof(*l->v));
        if (!p)
            return -ENOMEM;
        l->v = p;
        l->cap = cap;
    }
    memcpy(l->v[l->n++], id, strlen(id) + 1);
    return 0;
}

static int units_add(struct catalog_unit **v, size_t *n, const struct manifest *m)
{
    struct ref cand = {.step = m->step}, cur;
    memcpy(cand.id, m->id, sizeof(cand.id));
    for (size_t i = 0; i < *n; i++) {
        struct catalog_unit *u = &(*v)[i];
        if (strcmp(u->root, m->root))
            continue;
        memcpy(cur.id, u->id, sizeof(cur.id));
        cur.step = u->step;
        u->snapshots++;
        if (ref_newer(&cand, &cur)) {
            memcpy(u->id, m->id, sizeof(u->id));
            u->step = m->step;
        }
        return 0;
    }
    struct catalog_unit *p = realloc(*v, (*n + 1) * sizeof(**v));
    if (!p)
        return -ENOMEM;
    *v = p;
    struct catalog_unit *u = &p[(*n)++];
    memset(u, 0, sizeof(*u));
    snprintf(u->root, sizeof(u->root), "%s", m->root);
    memcpy(u->id, m->id, sizeof(u->id));
    u->step = m->step;
    u->snapshots = 1;
    return 0;
}

int catalog_units(struct repo *r, const char *run, struct catalog_unit **ret, size_t *ret_n,
                  struct buf *err)
{
    char prefix[REGION_KEY_MAX];
    struct ids l = {0};
    struct catalog_unit *units = NULL;
    size_t n = 0;
    int e = 0;
    snprintf(prefix, sizeof(prefix), "snapshots/%s/", run);
    l.plen = strlen(prefix);
    for (size_t i = 0; i < r->nregions && e == 0; i++) {
        if (r->health[i])
            continue;
        int le = region_list(r->regions[i], prefix, ids_cb, &l);
        if (le == -ENOMEM)
            e = le;
        else if (le < 0 && le != -ENOENT)
            log_warn("%s", region_last_error(r->regions[i]));
    }
    for (size_t k = 0; k < l.n && e == 0; k++) {
        struct manifest m;
        struct buf ferr = BUF_INIT;
        if (restore_find(r, run, l.v[k], &m, NULL, &ferr) == 0) {
            e = units_add(&units, &n, &m);
            manifest_free(&m);
        } else {
            log_warn("%s", buf_str(&ferr));
        }
        buf_free(&ferr);
    }
    free(l.v);
    if (e == 0 && n == 0) {
        buf_printf(err, "run '%s' has no snapshot in any reachable region", run);
        e = -ENOENT;
    }
    if (e < 0) {
        free(units);
        return e;
    }
    *ret = units;
    *ret_n = n;
    return 0;
}
