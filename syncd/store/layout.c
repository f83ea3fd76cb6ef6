/*
 * layout.c — keys from (kind, dir, name) and back, driven by one table:
 * a new kind of object adds a row here and a constant in format.h.
 *
 * The parser takes what a bucket lists, so it is strict: the folder must
 * be one of ours, every component one field (non-empty, no '/', not "."
 * or "..", bounded), and the kind's own rule (a run, a snapshot id, a
 * canonical chunk name) must hold; anything else is CKS_E_FORMAT, and the
 * listing callers skip it as "not ours".
 */
#include "store/layout.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "ckptsync/format.h"
#include "engine/gcrec.h"

enum layout_dir { DIR_NONE, DIR_RUN, DIR_MARK };

struct layout_row {
    const char *top; /* the folder (or, for repo, the whole key) */
    enum layout_dir dir;
    bool name;  /* has a last component after top (and dir) */
    bool plain; /* never sealed: read before an instance can unlock */
};

static const struct layout_row rows[LAYOUT_NKINDS] = {
    [LAYOUT_REPO] = {CKS_KEY_REPO, DIR_NONE, false, true},
    [LAYOUT_REPO_CAND] = {CKS_KEY_REPO_CANDIDATES, DIR_NONE, true, true},
    [LAYOUT_PROBE] = {CKS_KEY_PROBE, DIR_NONE, true, true},
    [LAYOUT_KEYSLOT] = {CKS_KEY_KEYSLOTS, DIR_NONE, true, true},
    [LAYOUT_RUNNAME] = {CKS_KEY_RUNS, DIR_NONE, true, false},
    [LAYOUT_CHUNK] = {CKS_KEY_CHUNKS, DIR_NONE, true, false},
    [LAYOUT_SNAPSHOT] = {CKS_KEY_SNAPSHOTS, DIR_RUN, true, false},
    [LAYOUT_COMMIT] = {CKS_KEY_COMMITS, DIR_RUN, true, false},
    [LAYOUT_LINEAGE] = {CKS_KEY_LINEAGE, DIR_RUN, true, false},
    [LAYOUT_FORGET] = {CKS_KEY_FORGET, DIR_RUN, true, false},
    [LAYOUT_PART] = {CKS_KEY_PARTS, DIR_RUN, true, false},
    [LAYOUT_NODEERR] = {CKS_KEY_NODEERR, DIR_RUN, true, false},
    [LAYOUT_HANDOFF_V1] = {CKS_KEY_HANDOFFS, DIR_RUN, false, false},
    [LAYOUT_REF_V1] = {CKS_KEY_REFS, DIR_RUN, true, false},
    [LAYOUT_INTENT] = {CKS_KEY_INTENTS, DIR_NONE, true, false},
    [LAYOUT_GC] = {CKS_KEY_GC, DIR_MARK, true, false},
    [LAYOUT_LEASE] = {CKS_KEY_LEASES, DIR_NONE, true, false},
    [LAYOUT_RECIPE] = {CKS_KEY_RECIPES, DIR_NONE, true, false},
};

/* One key component of at most max bytes. */
static bool field_ok(const char *s, size_t n, size_t max)
{
    return s && n > 0 && n <= max && !memchr(s, '/', n) && !memchr(s, 0, n) &&
           !(n == 1 && s[0] == '.') && !(n == 2 && s[0] == '.' && s[1] == '.');
}

/* The kind's own rule for its fields, past the generic one. */
static bool fields_ok(enum layout_kind kind, const char *dir, const char *name)
{
    if (rows[kind].dir == DIR_RUN && manifest_run_check(dir) < 0)
        return false;
    if (kind == LAYOUT_SNAPSHOT && manifest_id_check(name) < 0)
        return false;
    if (kind == LAYOUT_CHUNK) {
        uint8_t id[HASH_LEN];
        return strlen(name) == HASH_HEX_LEN && hex_decode(name, HASH_LEN, id) == 0;
    }
    if (kind == LAYOUT_RECIPE) {
        uint8_t id[HASH_LEN], sig[MANIFEST_RECIPE_SIG];
        return strlen(name) == HASH_HEX_LEN + 1 + 2 * MANIFEST_RECIPE_SIG &&
               name[HASH_HEX_LEN] == '.' && hex_decode(name, HASH_LEN, id) == 0 &&
               hex_decode(name + HASH_HEX_LEN + 1, MANIFEST_RECIPE_SIG, sig) == 0;
    }
    return true;
}

int layout_key(enum layout_kind kind, const char *dir, const char *name, char *out)
{
    const struct layout_row *w = (unsigned)kind < LAYOUT_NKINDS ? &rows[kind] : NULL;
    int n;
    out[0] = 0;
    if (!w || (w->dir && !field_ok(dir, dir ? strlen(dir) : 0, LAYOUT_DIR_MAX)) ||
        (w->name && !field_ok(name, name ? strlen(name) : 0, LAYOUT_NAME_MAX)) ||
        !fields_ok(kind, dir, name))
        return -EINVAL;
    if (kind == LAYOUT_CHUNK || kind == LAYOUT_RECIPE)
        n = snprintf(out, LAYOUT_KEY_MAX, "%s/%.2s/%s", w->top, name, name);
    else if (w->dir && w->name)
        n = snprintf(out, LAYOUT_KEY_MAX, "%s/%s/%s", w->top, dir, name);
    else if (w->dir || w->name)
        n = snprintf(out, LAYOUT_KEY_MAX, "%s/%s", w->top, w->dir ? dir : name);
    else
        n = snprintf(out, LAYOUT_KEY_MAX, "%s", w->top);
    if (n < 0 || n >= LAYOUT_KEY_MAX) {
        out[0] = 0;
        return -EINVAL;
    }
    return 0;
}

const char *layout_repo(void)
{
    return CKS_KEY_REPO;
}

void layout_chunk(const uint8_t id[HASH_LEN], char *out)
{
    char hex[HASH_HEX_LEN + 1];
    hex_encode(id, HASH_LEN, hex);
    snprintf(out, LAYOUT_KEY_MAX, "%s/%.2s/%s", CKS_KEY_CHUNKS, hex, hex);
}

void layout_recipe(const uint8_t id[HASH_LEN], const uint8_t sig[MANIFEST_RECIPE_SIG], char *out)
{
    char hex[HASH_HEX_LEN + 1], shex[2 * MANIFEST_RECIPE_SIG + 1];
    hex_encode(id, HASH_LEN, hex);
    hex_encode(sig, MANIFEST_RECIPE_SIG, shex);
    snprintf(out, LAYOUT_KEY_MAX, "%s/%.2s/%s.%s", CKS_KEY_RECIPES, hex, hex, shex);
}

int layout_snapshot(const char *run, const char *id, char *out)
{
    return layout_key(LAYOUT_SNAPSHOT, run, id, out);
}

int layout_prefix(enum layout_kind kind, const char *dir, char *out)
{
    const struct layout_row *w = (unsigned)kind < LAYOUT_NKINDS ? &rows[kind] : NULL;
    out[0] = 0;
    if (!w || kind == LAYOUT_REPO || (dir && !w->dir) ||
        (dir && !field_ok(dir, strlen(dir), LAYOUT_DIR_MAX)))
        return -EINVAL;
    if (!dir)
        snprintf(out, LAYOUT_KEY_MAX, "%s/", w->top);
    else
        snprintf(out, LAYOUT_KEY_MAX, "%s/%s%s", w->top, dir, w->name ? "/" : "");
    return 0;
}

/* The kind whose folder key starts with ("<top>/"), -1 for none; the
 * longest top wins, so that no top can shadow another. */
static int kind_of(const char *key, size_t *ret_top)
{
    int best = -1;
    size_t best_len = 0;
    for (int k = 0; k < LAYOUT_NKINDS; k++) {
        size_t n = strlen(rows[k].top);
        if (k != LAYOUT_REPO && n > best_len && !strncmp(key, rows[k].top, n) && key[n] == '/') {
            best = k;
            best_len = n;
        }
    }
    *ret_top = best_len + 1;
    return best;
}

/* The next component of *p, of at most max bytes, into out; advances past
 * it and its '/'.  last: it must end the key. */
static bool take(const char **p, bool last, size_t max, char *out)
{
    const char *s = *p, *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if ((last ? slash != NULL : slash == NULL) || !field_ok(s, n, max))
        return false;
    memcpy(out, s, n);
    out[n] = 0;
    *p = s + n + (slash ? 1 : 0);
    return true;
}

int layout_parse(const char *key, struct layout_key *ret)
{
    struct layout_key k;
    size_t top;
    memset(&k, 0, sizeof(k));
    if (!strcmp(key, CKS_KEY_REPO)) {
        k.kind = LAYOUT_REPO;
        *ret = k;
        return 0;
    }
    int kind = kind_of(key, &top);
    if (kind < 0)
        return CKS_E_FORMAT;
    k.kind = (enum layout_kind)kind;
    const struct layout_row *w = &rows[kind];
    const char *p = key + top;
    char two[3];
    if (w->dir && !take(&p, !w->name, LAYOUT_DIR_MAX, k.dir))
        return CKS_E_FORMAT;
    bool hexkey = kind == LAYOUT_CHUNK || kind == LAYOUT_RECIPE;
    if (hexkey && (!take(&p, false, 2, two) || strlen(two) != 2))
        return CKS_E_FORMAT;
    if (w->name && !take(&p, true, LAYOUT_NAME_MAX, k.name))
        return CKS_E_FORMAT;
    if (!fields_ok(k.kind, k.dir, k.name))
        return CKS_E_FORMAT;
    if (hexkey) { /* canonical: lower case, folder = first two */
        char canon[LAYOUT_KEY_MAX];
        hex_decode(k.name, HASH_LEN, k.id);
        if (kind == LAYOUT_RECIPE) {
            hex_decode(k.name + HASH_HEX_LEN + 1, MANIFEST_RECIPE_SIG, k.sig);
            layout_recipe(k.id, k.sig, canon);
        } else {
            layout_chunk(k.id, canon);
        }
        if (strcmp(canon, key))
            return CKS_E_FORMAT;
    }
    *ret = k;
    return 0;
}

static enum layout_kind record_folder(enum lineage_kind kind)
{
    return kind == LINEAGE_COMMIT   ? LAYOUT_COMMIT
           : kind == LINEAGE_FORGET ? LAYOUT_FORGET
                                    : LAYOUT_LINEAGE;
}

int layout_record(const struct lineage_rec *r, char *out, size_t cap)
{
    char name[LAYOUT_KEY_MAX], key[LAYOUT_KEY_MAX];
    if ((unsigned)r->kind > LINEAGE_FORGET || lineage_name(r, name, sizeof(name)) < 0 ||
        layout_key(record_folder(r->kind), r->run, name, key) < 0)
        return -EINVAL;
    int n = snprintf(out, cap, "%s", key);
    return n > 0 && (size_t)n < cap ? 0 : -EINVAL;
}

int layout_record_parse(const char *key, struct lineage_rec *ret)
{
    struct layout_key k;
    struct lineage_rec r;
    if (layout_parse(key, &k) < 0 ||
        (k.kind != LAYOUT_COMMIT && k.kind != LAYOUT_FORGET && k.kind != LAYOUT_LINEAGE))
        return CKS_E_FORMAT;
    memset(&r, 0, sizeof(r));
    r.step = -1;
    r.kind = k.kind == LAYOUT_COMMIT   ? LINEAGE_COMMIT
             : k.kind == LAYOUT_FORGET ? LINEAGE_FORGET
                                       : LINEAGE_HANDOFF; /* refined by the name */
    memcpy(r.run, k.dir, sizeof(r.run));
    int e = lineage_name_parse(k.name, &r);
    if (e < 0)
        return e;
    *ret = r;
    return 0;
}

int layout_record_read(const char *key, const uint8_t *data, size_t len, struct lineage_rec *ret)
{
    struct lineage_rec k;
    int e = layout_record_parse(key, &k);
    return e < 0 ? e : lineage_parse_for(&k, data, len, ret);
}

int layout_run_top(const char *key, size_t *ret_top)
{
    size_t top;
    int kind = kind_of(key, &top);
    if (kind < 0 || rows[kind].dir != DIR_RUN)
        return -1;
    *ret_top = top;
    return kind;
}

bool layout_prefix_has_runs(const char *prefix)
{
    size_t n = strlen(prefix);
    for (int k = 0; k < LAYOUT_NKINDS; k++) {
        char top[32];
        if (rows[k].dir != DIR_RUN)
            continue;
        size_t t = (size_t)snprintf(top, sizeof(top), "%s/", rows[k].top);
        if (!strncmp(prefix, top, n < t ? n : t))
            return true;
    }
    return false;
}

bool layout_sealed(const char *key)
{
    size_t top;
    int kind = kind_of(key, &top);
    return strcmp(key, CKS_KEY_REPO) != 0 && !(kind >= 0 && rows[kind].plain);
}

/* ---- parts of a multi-node step ------------------------------------------ */

int layout_part(const struct layout_part *p, char *out)
{
    char name[LAYOUT_NAME_MAX + 1];
    out[0] = 0;
    if (p->step < 0 || p->nodes == 0 || p->nodes > LAYOUT_NODES_MAX || p->rank >= p->nodes ||
        manifest_id_check(p->id) < 0)
        return -EINVAL;
    int n = snprintf(name, sizeof(name), "s%lld.%u-of-%u.%s", (long long)p->step, p->rank, p->nodes,
                     p->id);
    if (n < 0 || (size_t)n >= sizeof(name))
        return -EINVAL;
    return layout_key(LAYOUT_PART, p->run, name, out);
}

int layout_part_prefix(const char *run, int64_t step, char *out)
{
    char dir[LAYOUT_KEY_MAX];
    if (step < 0 || manifest_run_check(run) < 0 || layout_prefix(LAYOUT_PART, run, dir) < 0)
        return -EINVAL;
    int n = snprintf(out, LAYOUT_KEY_MAX, "%ss%lld.", dir, (long long)step);
    return n > 0 && n < LAYOUT_KEY_MAX ? 0 : -EINVAL;
}

/* A canonical decimal ("0" or no leading zero) of at most max, advancing *s. */
static bool take_dec(const char **s, unsigned long long max, unsigned long long *ret)
{
    const char *p = *s;
    unsigned long long v = 0;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (max - (unsigned)(*p - '0')) / 10)
            return false;
        v = v * 10 + (unsigned)(*p - '0');
    }
    *s = p;
    *ret = v;
    return true;
}

/* "s<step>.<K>-of-<N>." at *s (K may be >= N: the caller checks),
 * advancing past it. */
static bool take_node(const char **s, unsigned long long *step, unsigned long long *rank,
                      unsigned long long *nodes)
{
    const char *p = *s;
    if (*p++ != 's' || !take_dec(&p, (unsigned long long)INT64_MAX, step) || *p++ != '.' ||
        !take_dec(&p, LAYOUT_NODES_MAX, rank) || strncmp(p, "-of-", 4) != 0)
        return false;
    p += 4;
    if (!take_dec(&p, LAYOUT_NODES_MAX, nodes) || *nodes == 0 || *p++ != '.')
        return false;
    *s = p;
    return true;
}

int layout_part_parse(const char *key, struct layout_part *ret)
{
    struct layout_part p;
    if (layout_part_parse_any(key, &p) < 0 || p.rank >= p.nodes)
        return CKS_E_FORMAT;
    *ret = p;
    return 0;
}

int layout_part_parse_any(const char *key, struct layout_part *ret)
{
    struct layout_key k;
    struct layout_part p;
    unsigned long long step, rank, nodes;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_PART)
        return CKS_E_FORMAT;
    const char *s = k.name;
    if (!take_node(&s, &step, &rank, &nodes) || manifest_id_check(s) < 0 ||
        strlen(s) > MANIFEST_ID_MAX)
        return CKS_E_FORMAT;
    memset(&p, 0, sizeof(p));
    memcpy(p.run, k.dir, sizeof(p.run));
    p.step = (int64_t)step;
    p.rank = (unsigned)rank;
    p.nodes = (unsigned)nodes;
    memcpy(p.id, s, strlen(s) + 1);
    *ret = p;
    return 0;
}

/* ---- a node's error on a step --------------------------------------------- */

int layout_nodeerr(const struct layout_nodeerr *n, char *out)
{
    char name[LAYOUT_NAME_MAX + 1], utc[32];
    struct tm tm;
    time_t t = (time_t)n->time;
    out[0] = 0;
    if (n->step < 0 || n->nodes == 0 || n->nodes > LAYOUT_NODES_MAX || n->rank >= n->nodes ||
        n->time < 0 || strlen(n->tag) != 16 || strspn(n->tag, "0123456789abcdef") != 16 ||
        !gmtime_r(&t, &tm) || strftime(utc, sizeof(utc), "%Y%m%dT%H%M%SZ", &tm) != 16)
        return -EINVAL;
    int len = snprintf(name, sizeof(name), "s%lld.%u-of-%u.%s.%s", (long long)n->step, n->rank,
                       n->nodes, utc, n->tag);
    if (len < 0 || (size_t)len >= sizeof(name))
        return -EINVAL;
    return layout_key(LAYOUT_NODEERR, n->run, name, out);
}

int layout_nodeerr_parse(const char *key, struct layout_nodeerr *ret)
{
    struct layout_key k;
    struct layout_nodeerr n;
    unsigned long long step, rank, nodes;
    char canon[LAYOUT_KEY_MAX];
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_NODEERR)
        return CKS_E_FORMAT;
    const char *s = k.name;
    if (!take_node(&s, &step, &rank, &nodes) || rank >= nodes || strlen(s) != 16 + 1 + 16)
        return CKS_E_FORMAT;
    memset(&n, 0, sizeof(n));
    memcpy(n.run, k.dir, sizeof(n.run));
    n.step = (int64_t)step;
    n.rank = (unsigned)rank;
    n.nodes = (unsigned)nodes;
    n.time = gc_utc_parse(s);
    memcpy(n.tag, s + 17, 16);
    if (n.time < 0 || layout_nodeerr(&n, canon) < 0 || strcmp(canon, key) != 0)
        return CKS_E_FORMAT; /* one spelling per record */
    *ret = n;
    return 0;
}
