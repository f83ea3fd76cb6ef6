/*
 * rankbind.c — a node's share of a merged multi-node step (rankbind.h).
 *
 * Design note.  Selection is one pass over the entries deciding each by
 * its node field and its kind, then a closure over what was chosen: the
 * directories above a selected entry and the file a selected hard link
 * names, found by binary search in a sorted array of entry indexes (the
 * manifest's order is kept in the result; only membership changes).  The
 * entries a new world cannot consume are collected in the same pass, so
 * a refusal names every one of them, grouped by the node that wrote it.
 */
#include "engine/rankbind.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/msubset.h"

/* ---- kinds ---------------------------------------------------------------- */

/* The lower-cased last component of path into out (cap bytes). */
static void base_lower(const char *path, char *out, size_t cap)
{
    const char *b = strrchr(path, '/');
    size_t i = 0;
    for (b = b ? b + 1 : path; *b && i + 1 < cap; b++)
        out[i++] = (char)tolower((unsigned char)*b);
    out[i] = 0;
}

static bool starts_digit(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncasecmp(s, prefix, n) == 0 && isdigit((unsigned char)s[n]);
}

/* Some component of path starts "mp_rank_<digit>". */
static bool has_mp_rank(const char *path)
{
    for (const char *c = path; c; c = strchr(c, '/')) {
        c += *c == '/';
        if (starts_digit(c, "mp_rank_"))
            return true;
    }
    return false;
}

static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return n > 0;
}

/* "__<digits>_<digits>.distcp" */
static bool dcp_shard(const char *b)
{
    size_t n = strlen(b), ext = strlen(".distcp");
    if (n <= 2 + ext || strncmp(b, "__", 2) != 0 || strcmp(b + n - ext, ".distcp") != 0)
        return false;
    const char *mid = memchr(b + 2, '_', n - 2 - ext);
    return mid && all_digits(b + 2, (size_t)(mid - b - 2)) &&
           all_digits(mid + 1, (size_t)(b + n - ext - mid - 1));
}

enum rankbind_kind rankbind_kind(const char *path)
{
    char b[MANIFEST_MAX_COMPONENT + 1];
    base_lower(path, b, sizeof(b));
    if (strstr(b, "zero_pp_rank_"))
        return RANKBIND_ZERO;
    if (has_mp_rank(path))
        return RANKBIND_MP;
    if (dcp_shard(b))
        return RANKBIND_DCP;
    if (starts_digit(b, "rng_state_") || starts_digit(b, "random_states_") ||
        (strstr(b, "rank") &&
         (strstr(b, "dataloader") || strstr(b, "data_loader") || strstr(b, "sampler"))))
        return RANKBIND_STATE;
    return RANKBIND_NONE;
}

const char *rankbind_kind_name(enum rankbind_kind k)
{
    switch (k) {
    case RANKBIND_ZERO:
        return "ZeRO partition, no universal checkpoint";
    case RANKBIND_MP:
        return "model-parallel rank";
    case RANKBIND_DCP:
        return "DCP shard";
    case RANKBIND_STATE:
        return "per-rank RNG/dataloader state";
    case RANKBIND_NONE:
        break;
    }
    return "not bound to a rank";
}

bool rankbind_universal(const struct manifest *m)
{
    static const char tail[] = "_universal";
    for (size_t i = 0; i < m->nfiles; i++) {
        const char *p = m->files[i].path, *b = strrchr(p, '/');
        if (!strcmp(b ? b + 1 : p, "latest_universal"))
            return true;
        for (const char *c = p, *end; *c; c = *end ? end + 1 : end) {
            end = strchrnul(c, '/');
            size_t n = (size_t)(end - c);
            if (n >= sizeof(tail) - 1 && !memcmp(end - (sizeof(tail) - 1), tail, sizeof(tail) - 1))
                return true;
        }
    }
    return false;
}

/* ---- selecting -------------------------------------------------------------- */

struct sel {
    const struct manifest *m;
    unsigned node, count;
    bool universal;
    bool *take;    /* per entry */
    size_t *bound; /* entries the new world cannot consume */
    size_t nbound;
    struct byname {
        const char *path;
        size_t i;
    } * sorted; /* every entry, by path */
};

/* Whether entry f (of kind k) is bound to a rank the new world cannot consume. */
static bool sel_unconsumable(const struct sel *s, const struct mfile *f, enum rankbind_kind k)
{
    if (s->count == s->m->nodes || f->node == MANIFEST_NODE_SEVERAL)
        return false;
    if (k == RANKBIND_STATE || k == RANKBIND_MP)
        return (unsigned)f->node >= s->count;
    return k == RANKBIND_ZERO && !s->universal;
}

/* Whether node s->node takes entry f (of kind k) by the rules. */
static bool sel_takes(const struct sel *s, const struct mfile *f, enum rankbind_kind k)
{
    bool reshard = s->count != s->m->nodes;
    if (f->node == MANIFEST_NODE_SEVERAL || (unsigned)f->node == s->node)
        return true;
    if (k == RANKBIND_NONE)
        return f->node == 0 || reshard;
    return k == RANKBIND_DCP && reshard;
}

static int byname_cmp(const void *a, const void *b)
{
    return strcmp(((const struct byname *)a)->path, ((const struct byname *)b)->path);
}

/* The index of the entry at path (its first len bytes), or SIZE_MAX. */
static size_t sel_find(const struct sel *s, const char *path, size_t len)
{
    size_t lo = 0, hi = s->m->nfiles;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *p = s->sorted[mid].path;
        int c = strncmp(p, path, len);
        if (c == 0)
            c = p[len] ? 1 : 0;
        if (c == 0)
            return s->sorted[mid].i;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

/* Selects the directories above entry i, and a hard link's file. */
static void sel_close(struct sel *s, size_t i)
{
    const struct mfile *f = &s->m->files[i];
    if (f->type == MFILE_HARDLINK) {
        size_t t = sel_find(s, f->link, strlen(f->link));
        if (t != SIZE_MAX && !s->take[t]) {
            s->take[t] = true;
            sel_close(s, t);
        }
    }
    for (const char *sl = strchr(f->path, '/'); sl; sl = strchr(sl + 1, '/')) {
        size_t d = sel_find(s, f->path, (size_t)(sl - f->path));
        if (d != SIZE_MAX && s->m->files[d].type == MFILE_DIR)
            s->take[d] = true;
    }
}

static int sel_pass(struct sel *s)
{
    const struct manifest *m = s->m;
    s->take = calloc(m->nfiles ? m->nfiles : 1, sizeof(*s->take));
    s->bound = calloc(m->nfiles ? m->nfiles : 1, sizeof(*s->bound));
    s->sorted = calloc(m->nfiles ? m->nfiles : 1, sizeof(*s->sorted));
    if (!s->take || !s->bound || !s->sorted)
        return -ENOMEM;
    for (size_t i = 0; i < m->nfiles; i++) {
        enum rankbind_kind k = rankbind_kind(m->files[i].path);
        s->sorted[i] = (struct byname){m->files[i].path, i};
        if (sel_unconsumable(s, &m->files[i], k))
            s->bound[s->nbound++] = i;
        s->take[i] = sel_takes(s, &m->files[i], k);
    }
    qsort(s->sorted, m->nfiles, sizeof(*s->sorted), byname_cmp);
    for (size_t i = 0; i < m->nfiles; i++)
        if (s->take[i])
            sel_close(s, i);
    return 0;
}

/* ---- the refusal (or, with allow, the note) --------------------------------- */

static int bound_cmp(const void *a, const void *b, void *ud)
{
    const struct manifest *m = ud;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int32_t nx = m->files[x].node, ny = m->files[y].node;
    return nx != ny ? (nx > ny) - (nx < ny) : (x > y) - (x < y);
}

/* "2, 3": the nodes >= count that wrote a bound entry (sorted by node). */
static void sel_dropped_ranks(const struct sel *s, struct buf *err)
{
    int32_t last = -1;
    for (size_t j = 0; j < s->nbound; j++) {
        int32_t n = s->m->files[s->bound[j]].node;
        if ((unsigned)n >= s->count && n != last)
            buf_printf(err, "%s%d", last >= 0 ? ", " : "", (int)n);
        if ((unsigned)n >= s->count)
            last = n;
    }
    if (last < 0)
        buf_puts(err, "none (the files above cannot be consumed by any new rank)");
}

static void sel_explain(struct sel *s, bool allow, struct buf *err)
{
    const struct manifest *m = s->m;
    qsort_r(s->bound, s->nbound, sizeof(*s->bound), bound_cmp, (void *)m);
    buf_printf(err,
               "snapshot %s (step %lld) was written by %u nodes; a world of %u nodes cannot "
               "consume these %zu paths bound to a rank:",
               m->id, (long long)m->step, m->nodes, s->count, s->nbound);
    for (size_t j = 0; j < s->nbound; j++) {
        const struct mfile *f = &m->files[s->bound[j]];
        buf_printf(err, "\n  \"%s\" (node %d, %s)", f->path, (int)f->node,
                   rankbind_kind_name(rankbind_kind(f->path)));
    }
    buf_puts(err, "\nranks that would be dropped: ");
    sel_dropped_ranks(s, err);
    if (allow)
        buf_printf(err,
                   "\nrestoring node %u of %u anyway (--allow-reshard): the framework must "
                   "rebuild that state",
                   s->node, s->count);
    else
        buf_puts(err, "\nrestore with --allow-reshard to go on without them (the framework must "
                      "then rebuild that state), or on the step's own node count");
}

/* ---- the subset ------------------------------------------------------------- */

static int sel_header(const struct manifest *m, struct manifest *r)
{
    memcpy(r->id, m->id, sizeof(r->id));
    r->step = m->step;
    r->time = m->time;
    r->gen = m->gen;
    r->chunk_min = m->chunk_min;
    r->chunk_avg = m->chunk_avg;
    r->chunk_max = m->chunk_max;
    r->normalization = m->normalization;
    r->nodes = m->nodes;
    int e = manifest_set_str(&r->run, m->run);
    if (e == 0)
        e = manifest_set_str(&r->host, m->host);
    if (e == 0 && m->instance)
        e = manifest_set_str(&r->instance, m->instance);
    if (e == 0 && m->parent)
        e = manifest_set_str(&r->parent, m->parent);
    if (e == 0 && m->root)
        e = manifest_set_str(&r->root, m->root);
    return e;
}

static int sel_build(const struct sel *s, struct manifest *r)
{
    const struct manifest *m = s->m;
    int e = sel_header(m, r);
    for (size_t i = 0; e == 0 && i < m->nfiles; i++) {
        const struct mfile *x = &m->files[i];
        if (!s->take[i])
            continue;
        e = manifest_add_file(r, x->type, x->path, x->mode, x->link);
        for (uint64_t c = 0; e == 0 && c < x->nchunks; c++)
            e = manifest_add_chunk(r, m->chunks[x->first_chunk + c].id,
                                   m->chunks[x->first_chunk + c].len);
        if (e == 0) {
            struct mfile *y = &r->files[r->nfiles - 1];
            y->mtime_ns = x->mtime_ns;
            y->node = x->node;
            memcpy(y->digest, x->digest, HASH_LEN);
            y->dkind = x->dkind;
        }
    }
    return e == 0 ? msubset_extras(r, m) : e; /* its recipes and their bases */
}

int rankbind_select(const struct manifest *m, unsigned node, unsigned count, bool allow,
                    struct manifest *ret, struct buf *err)
{
    struct sel s = {.m = m, .node = node, .count = count};
    if (count == 0 || node >= count)
        return -EINVAL;
    if (m->nodes == 0)
        return 1;
    s.universal = rankbind_universal(m);
    int e = sel_pass(&s);
    if (e == 0 && s.nbound)
        sel_explain(&s, allow, err);
    if (e == 0 && s.nbound && !allow)
        e = CKS_E_RESHARD;
    manifest_init(ret);
    if (e == 0 && (e = sel_build(&s, ret)) < 0)
        manifest_free(ret);
    free(s.take);
    free(s.bound);
    free(s.sorted);
    return e;
}
