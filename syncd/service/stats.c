/*
 * stats.c — chunk usage per region, run and snapshot (stats.h).
 *
 * Every region's object listing (chunks/ and recipes/ keys, sorted by
 * object: id, then plain before recipes, recipes by sig) and the (object,
 * snapshot) pairs of every retained manifest (manifest_each_object: its
 * plain chunks, k lines and recipes; sorted by object, then snapshot) are
 * walked together: an object's pairs are adjacent, so a snapshot's stored
 * bytes count each object once and an object named by one snapshot only
 * is that snapshot's unique bytes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/hash.h"
#include "service/catalog.h"
#include "service/stats.h"
#include "store/layout.h"

/* An object: a chunk id, 0 (chunks/) or 1 (recipes/), the recipe's sig
 * (zero for a chunk), compared with memcmp. */
#define ST_OBJ (HASH_LEN + 1 + MANIFEST_RECIPE_SIG)

static void st_obj(uint8_t obj[ST_OBJ], const uint8_t id[HASH_LEN], bool recipe, const uint8_t *sig)
{
    memcpy(obj, id, HASH_LEN);
    obj[HASH_LEN] = recipe;
    if (recipe)
        memcpy(obj + HASH_LEN + 1, sig, MANIFEST_RECIPE_SIG);
    else
        memset(obj + HASH_LEN + 1, 0, MANIFEST_RECIPE_SIG);
}

struct sized {
    uint8_t id[ST_OBJ];
    uint64_t size;
};

struct sized_list {
    struct sized *v;
    size_t n, cap;
};

static int sized_cb(void *ud, const char *key, uint64_t size)
{
    struct sized_list *l = ud;
    struct layout_key k;
    if (layout_parse(key, &k) < 0 || (k.kind != LAYOUT_CHUNK && k.kind != LAYOUT_RECIPE))
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        struct sized *p = realloc(l->v, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        l->v = p;
        l->cap = cap;
    }
    st_obj(l->v[l->n].id, k.id, k.kind == LAYOUT_RECIPE, k.sig);
    l->v[l->n++].size = size;
    return 0;
}

static int sized_cmp(const void *a, const void *b)
{
    return memcmp(a, b, ST_OBJ);
}

static const struct sized *sized_find(const struct sized_list *l, const uint8_t id[ST_OBJ])
{
    return l->n ? bsearch(id, l->v, l->n, sizeof(struct sized), sized_cmp) : NULL;
}

/* (object, snapshot) pairs of every retained manifest */
struct use {
    uint8_t id[ST_OBJ];
    uint32_t snap;
};

static int use_cmp(const void *a, const void *b)
{
    const struct use *x = a, *y = b;
    int c = memcmp(x->id, y->id, ST_OBJ);
    return c ? c : (x->snap > y->snap) - (x->snap < y->snap);
}

struct st {
    struct repo *r;
    struct stats_result *res;
    struct sized_list regions[CONFIG_MAX_REGIONS];
    struct use *uses;
    size_t nuse, ucap;
    uint32_t snap; /* the manifest st_use adds */
};

/* Every healthy region's chunks and recipes, sorted. */
static void st_list_regions(struct st *s)
{
    struct repo *r = s->r;
    static const enum layout_kind kinds[] = {LAYOUT_CHUNK, LAYOUT_RECIPE};
    char prefix[REGION_KEY_MAX];
    REPO_FOR_HEALTHY(r, i) {
        for (size_t k = 0; k < 2 && repo_region_ok(r, i); k++) {
            layout_prefix(kinds[k], NULL, prefix);
            int le = region_list(repo_region(r, i), prefix, sized_cb, &s->regions[i]);
            if (le < 0 && le != -ENOENT) {
                log_error("%s", region_last_error(repo_region(r, i)));
                repo_region_fail(r, i, le);
            }
        }
        if (s->regions[i].n > 1)
            qsort(s->regions[i].v, s->regions[i].n, sizeof(struct sized), sized_cmp);
    }
}

/* One object of manifest s->snap (manifest_each_object). */
static int st_use(void *arg, const uint8_t id[HASH_LEN], uint32_t len, bool recipe,
                  const uint8_t sig[MANIFEST_RECIPE_SIG])
{
    struct st *s = arg;
    (void)len;
    if (s->nuse == s->ucap) {
        size_t cap = s->ucap ? s->ucap * 2 : 4096;
        struct use *p = realloc(s->uses, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        s->uses = p;
        s->ucap = cap;
    }
    st_obj(s->uses[s->nuse].id, id, recipe, sig);
    s->uses[s->nuse++].snap = s->snap;
    return 0;
}

/* Every retained snapshot's logical bytes and step, and its objects'
 * (object, snapshot) pairs, sorted. */
static int st_read_manifests(struct st *s, struct buf *err)
{
    struct stats_result *res = s->res;
    struct catalog_snap *snaps = NULL;
    size_t nsnaps = 0;
    int e =
        catalog_snapshots(s->r, NULL, &snaps, &nsnaps); /* every run: garbage is repository-wide */
    if (e == -ENOENT)
        e = nsnaps = 0;
    if (e == 0 && !(res->snaps = calloc(nsnaps ? nsnaps : 1, sizeof(*res->snaps))))
        e = -ENOMEM;
    for (size_t k = 0; e == 0 && k < nsnaps; k++) {
        struct stats_snap *ss = &res->snaps[k];
        struct manifest m;
        struct buf ferr = BUF_INIT;
        if ((e = catalog_find(s->r, snaps[k].run, snaps[k].id, &m, NULL, &ferr)) < 0) {
            buf_printf(err, "%s; stats need every retained manifest", buf_str(&ferr));
            buf_free(&ferr);
            break;
        }
        buf_free(&ferr);
        res->nsnaps = k + 1;
        snprintf(ss->run, sizeof(ss->run), "%s", snaps[k].run);
        snprintf(ss->id, sizeof(ss->id), "%s", snaps[k].id);
        ss->step = m.step;
        for (size_t f = 0; f < m.nfiles; f++)
            ss->logical += m.files[f].size;
        s->snap = (uint32_t)k;
        e = manifest_each_object(&m, st_use, s); /* plain chunks, k lines, recipes */
        manifest_free(&m);
    }
    free(snaps);
    if (e == 0 && s->nuse > 1)
        qsort(s->uses, s->nuse, sizeof(*s->uses), use_cmp);
    return e;
}

/* Per region: referenced chunks (garbage is the rest); per snapshot: stored
 * and unique bytes. */
static void st_count_uses(struct st *s)
{
    struct stats_result *res = s->res;
    /* referenced chunks, then referenced recipes */
    uint64_t referenced[2 * CONFIG_MAX_REGIONS] = {0}, referenced_bytes[CONFIG_MAX_REGIONS] = {0};
    for (size_t a = 0; a < s->nuse;) {
        size_t b = a;
        while (b < s->nuse && !memcmp(s->uses[b].id, s->uses[a].id, ST_OBJ))
            b++;
        /* the stored size of an object: from the first region listing it */
        uint64_t size = 0;
        for (size_t i = 0; i < repo_nregions(s->r); i++) {
            const struct sized *hit = sized_find(&s->regions[i], s->uses[a].id);
            if (hit) {
                referenced[i + (s->uses[a].id[HASH_LEN] ? CONFIG_MAX_REGIONS : 0)]++;
                referenced_bytes[i] += hit->size;
                if (!size)
                    size = hit->size;
            }
        }
        bool one = true;
        for (size_t k = a; k < b; k++) {
            if (k == a || s->uses[k].snap != s->uses[k - 1].snap)
                res->snaps[s->uses[k].snap].stored += size;
            if (s->uses[k].snap != s->uses[a].snap)
                one = false;
        }
        if (one)
            res->snaps[s->uses[a].snap].unique += size;
        a = b;
    }
    for (size_t i = 0; i < repo_nregions(s->r); i++) {
        struct stats_region *rs = &res->region[i];
        uint64_t bytes = 0, recipes = 0;
        for (size_t k = 0; k < s->regions[i].n; k++) {
            bytes += s->regions[i].v[k].size;
            recipes += s->regions[i].v[k].id[HASH_LEN];
        }
        rs->name = repo_region(s->r, i)->conf.name;
        rs->healthy = repo_region_ok(s->r, i);
        rs->chunks = s->regions[i].n - recipes;
        rs->recipes = recipes;
        rs->stored_bytes = bytes;
        rs->garbage_chunks = rs->chunks - referenced[i];
        rs->garbage_recipes = recipes - referenced[i + CONFIG_MAX_REGIONS];
        rs->garbage_bytes = bytes - referenced_bytes[i];
    }
    res->nregions = repo_nregions(s->r);
}

/* The runs reported: their snapshots' logical bytes and their distinct
 * chunks' stored sizes. */
static int st_runs(struct st *s, const char *run)
{
    struct stats_result *res = s->res;
    if (!(res->runs = calloc(res->nsnaps ? res->nsnaps : 1, sizeof(*res->runs))))
        return -ENOMEM;
    for (size_t a = 0; a < res->nsnaps;) {
        size_t b = a;
        while (b < res->nsnaps && !strcmp(res->snaps[b].run, res->snaps[a].run))
            b++;
        if (run && strcmp(res->snaps[a].run, run)) {
            a = b;
            continue;
        }
        struct stats_run *rr = &res->runs[res->nruns++];
        rr->run = res->snaps[a].run;
        rr->first = a;
        rr->n = b - a;
        for (size_t k = a; k < b; k++)
            rr->logical += res->snaps[k].logical;
        for (size_t u = 0; u < s->nuse;) {
            size_t v = u;
            bool mine = false;
            while (v < s->nuse && !memcmp(s->uses[v].id, s->uses[u].id, ST_OBJ)) {
                mine |= s->uses[v].snap >= a && s->uses[v].snap < b;
                v++;
            }
            for (size_t i = 0; mine && i < repo_nregions(s->r); i++) {
                const struct sized *hit = sized_find(&s->regions[i], s->uses[u].id);
                if (hit) {
                    rr->stored += hit->size;
                    break;
                }
            }
            u = v;
        }
        a = b;
    }
    return 0;
}

int stats_compute(struct repo *r, const char *run, struct stats_result *res, struct buf *err)
{
    struct st s = {.r = r, .res = res};
    *res = (struct stats_result){0};
    st_list_regions(&s);
    int e = st_read_manifests(&s, err);
    if (e == 0) {
        st_count_uses(&s);
        e = st_runs(&s, run);
    }
    for (size_t i = 0; i < CONFIG_MAX_REGIONS; i++)
        free(s.regions[i].v);
    free(s.uses);
    return e;
}

void stats_free(struct stats_result *res)
{
    free(res->snaps);
    free(res->runs);
    *res = (struct stats_result){0};
}
