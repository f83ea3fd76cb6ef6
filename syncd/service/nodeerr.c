/*
 * nodeerr.c — a node's error on a step, as a write-once record in the
 * regions (see nodeerr.h).
 *
 * Design notes.
 * - The record is what a node knew when it failed, for people: bounded
 *   (one line, NODEERR_MSG_MAX bytes), never read by a decision.  So a
 *   record that does not parse is skipped, not an error of the listing.
 * - Write-once, under a name with a random tag: two nodes (or one node
 *   twice in a second) never write one key, and no record is rewritten.
 */
#include "service/nodeerr.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/gcrec.h"
#include "engine/lineage.h"

/* One line of printable bytes, at most cap - 1 of them. */
static void one_line(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; in && *in && n + 1 < cap; in++)
        out[n++] = (unsigned char)*in < 0x20 || *in == 0x7f ? ' ' : *in;
    out[n] = 0;
}

int nodeerr_encode(const struct nodeerr *n, struct buf *out)
{
    char msg[NODEERR_MSG_MAX + 1];
    one_line(n->msg, msg, sizeof(msg));
    return buf_printf(out, "%s 1\nnode %u %u\nstep %lld\ntime %lld\nhost %s\nerror %s\n",
                      NODEERR_MAGIC, n->k.rank, n->k.nodes, (long long)n->k.step,
                      (long long)n->k.time, n->host[0] ? n->host : "unknown", msg);
}

/* The value of the line "<name> <value>\n" at *p (advanced past it) into
 * out (cap bytes); false when the line is not that. */
static bool take_line(const char **p, const char *end, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    const char *s = *p, *eol = memchr(s, '\n', (size_t)(end - s));
    if (!eol || (size_t)(eol - s) <= nl || strncmp(s, name, nl) != 0 || s[nl] != ' ' ||
        (size_t)(eol - s - nl - 1) >= cap)
        return false;
    memcpy(out, s + nl + 1, (size_t)(eol - s - nl - 1));
    out[eol - s - nl - 1] = 0;
    *p = eol + 1;
    return true;
}

int nodeerr_decode(const char *key, const uint8_t *data, size_t len, struct nodeerr *ret)
{
    struct nodeerr n;
    char magic[32], node[32], step[32], t[32];
    const char *p = (const char *)data, *end = p + len;
    unsigned rank, nodes;
    long long st, tm;
    memset(&n, 0, sizeof(n));
    if (layout_nodeerr_parse(key, &n.k) < 0 || len > NODEERR_MAX_BYTES || memchr(data, 0, len) ||
        !take_line(&p, end, NODEERR_MAGIC, magic, sizeof(magic)) || strcmp(magic, "1") ||
        !take_line(&p, end, "node", node, sizeof(node)) ||
        !take_line(&p, end, "step", step, sizeof(step)) ||
        !take_line(&p, end, "time", t, sizeof(t)) ||
        !take_line(&p, end, "host", n.host, sizeof(n.host)) ||
        !take_line(&p, end, "error", n.msg, sizeof(n.msg)) || p != end ||
        sscanf(node, "%u %u", &rank, &nodes) != 2 || sscanf(step, "%lld", &st) != 1 ||
        sscanf(t, "%lld", &tm) != 1)
        return CKS_E_FORMAT;
    if (rank != n.k.rank || nodes != n.k.nodes || st != n.k.step || tm != n.k.time)
        return CKS_E_MISMATCH;
    *ret = n;
    return 0;
}

int nodeerr_put(struct region *rg, const char *run, int64_t step, unsigned rank, unsigned nodes,
                const char *msg)
{
    struct nodeerr n = {.k = {.step = step, .rank = rank, .nodes = nodes, .time = time(NULL)}};
    char key[LAYOUT_KEY_MAX], h[256] = "unknown";
    struct buf body = BUF_INIT;
    snprintf(n.k.run, sizeof(n.k.run), "%s", run);
    gethostname(h, sizeof(h) - 1);
    lineage_sanitise(h, n.host, sizeof(n.host));
    one_line(msg, n.msg, sizeof(n.msg));
    int e = gc_random_hex(n.k.tag);
    if (e == 0)
        e = layout_nodeerr(&n.k, key);
    if (e == 0)
        e = nodeerr_encode(&n, &body);
    if (e == 0)
        e = region_put(rg, key, body.data, body.len);
    buf_free(&body);
    return e;
}

/* ---- reading -------------------------------------------------------------- */

struct ne_list {
    const char *run;
    struct layout_nodeerr *v;
    size_t n, cap;
};

static int ne_list_cb(void *ud, const char *key, uint64_t size)
{
    struct ne_list *l = ud;
    struct layout_nodeerr k;
    (void)size;
    if (layout_nodeerr_parse(key, &k) < 0 || strcmp(k.run, l->run) != 0)
        return 0; /* not ours */
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct layout_nodeerr *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = k;
    return 0;
}

static bool ne_newer(const struct layout_nodeerr *a, const struct layout_nodeerr *b)
{
    return a->time != b->time ? a->time > b->time : strcmp(a->tag, b->tag) > 0;
}

/* The slot of (step, rank) in s (a new zeroed one when none). */
static struct nodeerr *ne_slot(struct nodeerrs *s, const struct layout_nodeerr *k)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].k.step == k->step && s->v[i].k.rank == k->rank)
            return &s->v[i];
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        struct nodeerr *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        s->v = v;
        s->cap = cap;
    }
    memset(&s->v[s->n], 0, sizeof(s->v[0]));
    s->v[s->n].k.time = -1;
    return &s->v[s->n++];
}

/* Reads, of region rg's listed records, each that is newer than what s
 * holds for its (step, node). */
static int ne_read(struct region *rg, const struct ne_list *l, struct nodeerrs *s)
{
    for (size_t i = 0; i < l->n; i++) {
        struct nodeerr *slot = ne_slot(s, &l->v[i]), n;
        char key[LAYOUT_KEY_MAX];
        struct buf b = BUF_INIT;
        if (!slot)
            return -ENOMEM;
        if (slot->k.time >= 0 && !ne_newer(&l->v[i], &slot->k))
            continue;
        if (layout_nodeerr(&l->v[i], key) == 0 && region_get(rg, key, NODEERR_MAX_BYTES, &b) == 0 &&
            nodeerr_decode(key, b.data, b.len, &n) == 0)
            *slot = n;
        else if (slot->k.time < 0)
            s->n--; /* unreadable (gone meanwhile, or not ours): the new slot goes */
        buf_free(&b);
    }
    return 0;
}

int nodeerr_collect(struct repo *r, const char *run, struct nodeerrs *ret)
{
    char prefix[LAYOUT_KEY_MAX];
    int e = layout_prefix(LAYOUT_NODEERR, run, prefix);
    if (e < 0)
        return e;
    REPO_FOR_HEALTHY(r, i) {
        struct region *rg = repo_region(r, i);
        struct ne_list l = {.run = run};
        e = region_list(rg, prefix, ne_list_cb, &l);
        if (e == -ENOENT)
            e = 0;
        if (e == 0)
            e = ne_read(rg, &l, ret);
        free(l.v);
        if (e == -ENOMEM)
            return e;
        if (e < 0) { /* a region that cannot list is left out */
            log_warn("node errors of run '%s': %s", run, region_last_error(rg));
            e = 0;
        }
    }
    return 0;
}

const struct nodeerr *nodeerr_find(const struct nodeerrs *s, int64_t step, unsigned rank)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].k.step == step && s->v[i].k.rank == rank)
            return &s->v[i];
    return NULL;
}

void nodeerrs_free(struct nodeerrs *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}
