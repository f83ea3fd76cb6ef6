/*
 * ranknames.c — gaps in Megatron / DeepSpeed rank sequences.
 *
 * Every path component (with the directory above it) whose name has a
 * rank number becomes a member: its family key is the directory and the
 * name with each rank number replaced by a hole; its ranks are the
 * numbers.  Members are sorted by key, and each family's grid is filled
 * in a bitmap; the unset cells are the missing names, spelled with the
 * family's narrowest zero-padding.
 */
#include "engine/ranknames.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

#define HOLE '\x01'

struct member {
    char *key; /* directory, '\0'-free separator '/', the name with HOLEs */
    unsigned rank[RANKNAMES_MAX_DIMS];
    unsigned width[RANKNAMES_MAX_DIMS];
    unsigned dims;
};

struct members {
    struct member *v;
    size_t n, cap;
};

/* Digits at s: their value (capped) into *ret, their count returned. */
static size_t digits(const char *s, unsigned *ret)
{
    size_t n = 0;
    unsigned long v = 0;
    while (s[n] >= '0' && s[n] <= '9') {
        if (v <= RANKNAMES_MAX_GRID)
            v = v * 10 + (unsigned long)(s[n] - '0');
        n++;
    }
    *ret = v > RANKNAMES_MAX_GRID ? RANKNAMES_MAX_GRID + 1 : (unsigned)v;
    return n;
}

/* Appends a hole for the digits at *s (advanced past them) to m and key. */
static int hole(struct member *m, struct buf *key, const char **s)
{
    size_t n = digits(*s, &m->rank[m->dims]);
    m->width[m->dims++] = (unsigned)n;
    *s += n;
    return buf_append(key, (char[]){HOLE}, 1);
}

/* Parses one name into m (m->key: dir + '/' + shape).  0 with m->dims 0
 * when the name has no rank. */
static int member_parse(const char *dir, size_t dirlen, const char *name, size_t len,
                        struct member *m)
{
    struct buf key = BUF_INIT;
    char nm[256];
    const char *s = nm;
    int e = 0;
    memset(m, 0, sizeof(*m));
    if (len >= sizeof(nm) || memchr(name, HOLE, len))
        return 0; /* (a name holding the hole byte itself is not judged) */
    memcpy(nm, name, len);
    nm[len] = 0;
    if ((e = buf_append(&key, dir, dirlen)) == 0)
        e = buf_puts(&key, "/");
    while (e == 0 && *s) {
        bool mp = !strncmp(s, "mp_rank_", 8), pp = !strncmp(s, "pp_rank_", 8);
        if ((mp || pp) && s[8] >= '0' && s[8] <= '9' && m->dims < RANKNAMES_MAX_DIMS) {
            e = buf_append(&key, s, 8);
            s += 8;
            if (e == 0)
                e = hole(m, &key, &s);
            while (e == 0 && mp && s[0] == '_' && s[1] >= '0' && s[1] <= '9' &&
                   m->dims < RANKNAMES_MAX_DIMS) {
                e = buf_append(&key, s++, 1);
                if (e == 0)
                    e = hole(m, &key, &s);
            }
            continue;
        }
        e = buf_append(&key, s++, 1);
    }
    if (e == 0 && m->dims)
        m->key = (char *)buf_detach(&key, NULL);
    buf_free(&key);
    return e < 0 ? e : (m->dims && !m->key ? -ENOMEM : 0);
}

static int members_add(struct members *ms, const struct member *m)
{
    if (ms->n == ms->cap) {
        size_t cap = ms->cap ? 2 * ms->cap : 64;
        struct member *v = realloc(ms->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        ms->v = v;
        ms->cap = cap;
    }
    ms->v[ms->n++] = *m;
    return 0;
}

/* Every component of path with its directory, into ms. */
static int members_of(const char *path, struct members *ms)
{
    int e = 0;
    for (const char *c = path; e == 0 && *c;) {
        const char *slash = strchr(c, '/');
        size_t n = slash ? (size_t)(slash - c) : strlen(c);
        struct member m;
        size_t dirlen = c > path ? (size_t)(c - path - 1) : 0;
        if (memmem(c, n, "_rank_", 6) && (e = member_parse(path, dirlen, c, n, &m)) == 0 && m.dims)
            if ((e = members_add(ms, &m)) < 0)
                free(m.key);
        c += n + (slash != NULL);
    }
    return e;
}

static int member_cmp(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    for (unsigned d = 0; c == 0 && d < x->dims; d++)
        c = (x->rank[d] > y->rank[d]) - (x->rank[d] < y->rank[d]);
    return c;
}

/* The path of the cell (ranks r) of family key, with widths w. */
static int spell(const char *key, const unsigned *r, const unsigned *w, struct buf *out)
{
    const char *slash = strrchr(key, '/');
    unsigned d = 0;
    int e = 0;
    buf_reset(out);
    if (slash != key)
        e = buf_append(out, key, (size_t)(slash - key + 1));
    for (const char *s = slash + 1; e == 0 && *s; s++) {
        if (*s != HOLE) {
            e = buf_append(out, s, 1);
            continue;
        }
        if (d == RANKNAMES_MAX_DIMS)
            return -EINVAL; /* never: the key has one hole per rank */
        e = buf_printf(out, "%0*u", (int)w[d], r[d]);
        d++;
    }
    return e;
}

/* Appends family ms[0 .. n)'s unset cells to ret. */
static int family_gaps(const struct member *ms, size_t n, struct layout_needs *ret)
{
    unsigned dims = ms[0].dims, max[RANKNAMES_MAX_DIMS] = {0}, w[RANKNAMES_MAX_DIMS];
    size_t grid = 1;
    for (unsigned d = 0; d < dims; d++) {
        w[d] = ms[0].width[d];
        for (size_t i = 0; i < n; i++) {
            max[d] = ms[i].rank[d] > max[d] ? ms[i].rank[d] : max[d];
            w[d] = ms[i].width[d] < w[d] ? ms[i].width[d] : w[d];
        }
        if (max[d] >= RANKNAMES_MAX_GRID || (grid *= max[d] + 1) > RANKNAMES_MAX_GRID)
            return 0; /* not judged */
    }
    if (grid == n)
        return 0; /* full (members are distinct) */
    bool *set = calloc(grid, sizeof(*set));
    struct buf path = BUF_INIT;
    int e = set ? 0 : -ENOMEM;
    for (size_t i = 0; e == 0 && i < n; i++) {
        size_t cell = 0;
        for (unsigned d = 0; d < dims; d++)
            cell = cell * (max[d] + 1) + ms[i].rank[d];
        set[cell] = true;
    }
    for (size_t cell = 0; e == 0 && cell < grid; cell++) {
        unsigned r[RANKNAMES_MAX_DIMS];
        size_t c = cell;
        for (unsigned d = dims; d-- > 0; c /= max[d] + 1)
            r[d] = (unsigned)(c % (max[d] + 1));
        if (!set[cell] && (e = spell(ms[0].key, r, w, &path)) == 0)
            e = layout_needs_add(ret, buf_str(&path), 0);
    }
    free(set);
    buf_free(&path);
    return e == -ENOMEM ? e : 0; /* a name too odd to be a path is not judged */
}

int ranknames_gaps(const char *const *paths, size_t n, struct layout_needs *ret)
{
    struct members ms = {0};
    int e = 0;
    for (size_t i = 0; e == 0 && i < n; i++)
        e = members_of(paths[i], &ms);
    if (e == 0 && ms.n > 1)
        qsort(ms.v, ms.n, sizeof(*ms.v), member_cmp);
    size_t out = 0; /* drop duplicates (a directory named by each path below it) */
    for (size_t i = 0; i < ms.n; i++) {
        if (out && !member_cmp(&ms.v[out - 1], &ms.v[i]))
            free(ms.v[i].key);
        else
            ms.v[out++] = ms.v[i];
    }
    ms.n = out;
    for (size_t i = 0, j; e == 0 && i < ms.n; i = j) {
        for (j = i + 1; j < ms.n && !strcmp(ms.v[j].key, ms.v[i].key);)
            j++;
        e = family_gaps(&ms.v[i], j - i, ret);
    }
    for (size_t i = 0; i < ms.n; i++)
        free(ms.v[i].key);
    free(ms.v);
    if (e == 0)
        layout_needs_fold(ret);
    return e;
}
