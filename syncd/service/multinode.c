/*
 * multinode.c — parts of a multi-node step, and the one commit.
 *
 * Design notes.
 * - A part is written like a manifest (after its chunks are confirmed in
 *   the region, under the writer's intent), so a part that exists names
 *   only chunks its region held; prune reads parts as roots
 *   (service/gc.c), so they stay.  The merged snapshot names the same
 *   chunks, so it too is published only over chunks its region holds.
 * - Every node lists after its own put, so of two nodes that finish at
 *   once at least the later lister sees both parts: some node always sees
 *   the last one.  A node killed between its put and the listing repeats
 *   both on restart (its queue still holds the publish).
 * - Determinism: the merged snapshot's id and every byte of it come from
 *   the parts (each rank's newest part of the merging generation), so a
 *   second merger with the same listing writes the same object: its
 *   create-only put finds it (-EEXIST), and on a store without
 *   preconditions its plain put writes the same bytes.  The
 *   commit record is written by both: same key, same body.
 * - Coverage (service/layoutcov.h): the merged tree must also hold what
 *   its own layout names (a DCP .metadata, an HF index, rank names); the
 *   verdict is a function of the parts too.  A node that takes its unit
 *   again (a file was missing, e.g. DCP's .metadata written last) writes
 *   a newer part, and the newest parts are merged: the step commits again,
 *   as a retake does on one node, and the newest commit of a step is the
 *   one a job resumes from.  (Two nodes merging at the same moment while
 *   a node re-commits may thus commit the step twice, both whole.)
 */
#include "service/multinode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/filedigest.h"
#include "engine/hash.h"
#include "engine/gcrec.h"
#include "service/mnextras.h"
#include "service/nodeerr.h"
#include "service/partcheck.h"
#include "service/layoutcov.h"
#include "service/runlineage.h"
#include "store/layout.h"

#define PART_MAX (MANIFEST_MAX_BYTES + 64u)
#define PART_NOT_YET 1 /* a rank has no part of the merging node's generation yet */

bool multinode_wanted(const struct config *c, const struct manifest *m)
{
    return config_nodes(c) > 1 && m->step >= 0;
}

/* ---- the part object ------------------------------------------------------ */

int multinode_encode(unsigned rank, unsigned nodes, const uint8_t *man, size_t len, struct buf *out)
{
    char head[96];
    int n = snprintf(head, sizeof(head), "%s %d\nnode %u %u\n", MULTINODE_PART_MAGIC,
                     MULTINODE_PART_VERSION, rank, nodes);
    int e = buf_append(out, head, (size_t)n);
    return e < 0 ? e : buf_append(out, man, len);
}

/* The header's two lines: rank and node count into ret_*, the offset of
 * the manifest into *ret_off.  CKS_E_FORMAT when they are not exactly
 * those of multinode_encode. */
static int part_header(const uint8_t *data, size_t len, unsigned *ret_rank, unsigned *ret_nodes,
                       size_t *ret_off)
{
    char head[96], want[96];
    size_t lim = len < sizeof(head) - 1 ? len : sizeof(head) - 1;
    unsigned rank, nodes;
    const uint8_t *nl = memchr(data, '\n', lim);
    nl = nl ? memchr(nl + 1, '\n', lim - (size_t)(nl + 1 - data)) : NULL;
    if (!nl)
        return CKS_E_FORMAT;
    size_t n = (size_t)(nl + 1 - data);
    memcpy(head, data, n);
    head[n] = 0;
    if (sscanf(head, MULTINODE_PART_MAGIC " 1\nnode %u %u\n", &rank, &nodes) != 2)
        return CKS_E_FORMAT;
    snprintf(want, sizeof(want), "%s %d\nnode %u %u\n", MULTINODE_PART_MAGIC,
             MULTINODE_PART_VERSION, rank, nodes);
    if (strcmp(head, want) != 0) /* canonical only: no sign, no leading zero */
        return CKS_E_FORMAT;
    *ret_rank = rank;
    *ret_nodes = nodes;
    *ret_off = n;
    return 0;
}

int multinode_decode(const char *key, const uint8_t *data, size_t len, struct manifest *ret,
                     struct buf *err)
{
    struct layout_part p;
    unsigned rank, nodes;
    size_t off;
    if (layout_part_parse(key, &p) < 0 || part_header(data, len, &rank, &nodes, &off) < 0) {
        buf_printf(err, "part \"%s\": not a part object", key);
        return CKS_E_FORMAT;
    }
    struct buf perr = BUF_INIT;
    int e = manifest_parse(data + off, len - off, ret, &perr);
    if (e < 0)
        buf_printf(err, "part \"%s\" (node %u of %u): manifest %s", key, rank, nodes,
                   buf_str(&perr));
    buf_free(&perr);
    if (e < 0)
        return e;
    if (rank != p.rank || nodes != p.nodes || strcmp(ret->id, p.id) != 0 ||
        strcmp(ret->run, p.run) != 0 || ret->step != p.step) {
        buf_printf(err,
                   "part \"%s\": its body (node %u of %u, snapshot %s, step %lld) disagrees "
                   "with its key",
                   key, rank, nodes, ret->id, (long long)ret->step);
        manifest_free(ret);
        return CKS_E_MISMATCH;
    }
    return 0;
}

/* ---- merging -------------------------------------------------------------- */

struct entry_ref {
    const char *path;
    unsigned rank;
    size_t file;
};

static int ref_cmp(const void *a, const void *b)
{
    const struct entry_ref *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

/* Two nodes' entries at one path hold the same thing: the same kind, and
 * for a file the same bytes (the same digest, of the same kind: nodes that
 * differ in [snapshot] file_digest disagree), for a link the same target.  A directory's
 * mode and time are the first node's. */
static bool same_entry(const struct mfile *x, const struct mfile *y)
{
    if (x->type != y->type)
        return false;
    if (x->type == MFILE_REG)
        return x->size == y->size && x->dkind == y->dkind &&
               !memcmp(x->digest, y->digest, HASH_LEN);
    if (x->type == MFILE_LINK || x->type == MFILE_HARDLINK)
        return !strcmp(x->link, y->link);
    return true;
}

static bool opt_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

/* <newest part's time stamp>-m<12 hex of SHA-256 of the sorted ids>. */
static int id_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int merge_id(const struct manifest *parts, size_t n, char *out, size_t cap)
{
    const char **ids = calloc(n, sizeof(*ids));
    struct buf all = BUF_INIT;
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    int e = ids ? 0 : -ENOMEM;
    for (size_t k = 0; e == 0 && k < n; k++)
        ids[k] = parts[k].id;
    if (e == 0)
        qsort(ids, n, sizeof(*ids), id_cmp);
    for (size_t k = 0; e == 0 && k < n; k++)
        if ((e = buf_puts(&all, ids[k])) == 0)
            e = buf_puts(&all, "\n");
    if (e == 0) {
        const char *newest = ids[n - 1], *dash = strrchr(newest, '-');
        int stamp = dash ? (int)(dash - newest) : (int)strlen(newest);
        hash_sha256(all.data, all.len, d);
        hex_encode(d, HASH_LEN, hex);
        snprintf(out, cap, "%.*s-m%.12s", stamp > 40 ? 40 : stamp, newest, hex);
    }
    free(ids);
    buf_free(&all);
    return e;
}

/* The merged snapshot's header: see format.h section 9. */
static int merge_header(const struct manifest *parts, size_t n, struct manifest *m, struct buf *err)
{
    const struct manifest *p0 = &parts[0];
    m->time = p0->time;
    m->gen = p0->gen;
    for (size_t k = 1; k < n; k++) {
        const struct manifest *p = &parts[k];
        if (p->step != p0->step || !opt_eq(p->root, p0->root) || p->chunk_min != p0->chunk_min ||
            p->chunk_avg != p0->chunk_avg || p->chunk_max != p0->chunk_max ||
            p->normalization != p0->normalization || strcmp(p->run, p0->run) != 0) {
            buf_printf(err,
                       "node %zu's part (snapshot %s, root \"%s\") and node 0's (snapshot %s, "
                       "root \"%s\") differ in run, step, root or chunker",
                       k, p->id, p->root ? p->root : "-", p0->id, p0->root ? p0->root : "-");
            return CKS_E_MISMATCH;
        }
        if (p->time > m->time)
            m->time = p->time;
        if (p->gen > m->gen)
            m->gen = p->gen;
    }
    m->step = p0->step;
    m->chunk_min = p0->chunk_min;
    m->chunk_avg = p0->chunk_avg;
    m->chunk_max = p0->chunk_max;
    m->normalization = p0->normalization;
    int e = merge_id(parts, n, m->id, sizeof(m->id));
    if (e == 0)
        e = manifest_set_str(&m->run, p0->run);
    if (e == 0)
        e = manifest_set_str(&m->host, p0->host);
    if (e == 0 && p0->instance)
        e = manifest_set_str(&m->instance, p0->instance);
    if (e == 0 && p0->root)
        e = manifest_set_str(&m->root, p0->root);
    return e;
}

/* What merge_dups() says of an entry of a part. */
enum { MERGE_KEEP, MERGE_SKIP, MERGE_SEVERAL };

/* Marks in skip[] (one mark per entry of every part, part by part) the
 * entries a lower rank already holds (MERGE_SKIP), and that lower rank's
 * entry MERGE_SEVERAL; CKS_E_MISMATCH when two hold one path differently. */
static int merge_dups(const struct manifest *parts, size_t n, const size_t *base, uint8_t *skip,
                      struct buf *err)
{
    size_t total = base[n], k = 0;
    struct entry_ref *v = calloc(total ? total : 1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (size_t p = 0; p < n; p++)
        for (size_t f = 0; f < parts[p].nfiles; f++)
            v[k++] = (struct entry_ref){parts[p].files[f].path, (unsigned)p, f};
    qsort(v, total, sizeof(*v), ref_cmp);
    int e = 0;
    for (size_t i = 1; e == 0 && i < total; i++) {
        size_t first = i - 1;
        while (first > 0 && !strcmp(v[first - 1].path, v[i].path))
            first--;
        if (strcmp(v[first].path, v[i].path) != 0)
            continue;
        const struct mfile *a = &parts[v[first].rank].files[v[first].file];
        const struct mfile *b = &parts[v[i].rank].files[v[i].file];
        if (a->type == MFILE_REG && b->type == MFILE_REG && a->dkind != b->dkind) {
            buf_printf(err,
                       "\"%s\" has a %s digest on node %u and a %s digest on node %u: set one "
                       "[snapshot] file_digest on every node",
                       a->path, filedigest_kind_name(a->dkind), v[first].rank,
                       filedigest_kind_name(b->dkind), v[i].rank);
            e = CKS_E_MISMATCH;
        } else if (!same_entry(a, b)) {
            buf_printf(err, "\"%s\" is held by node %u and node %u with different contents",
                       a->path, v[first].rank, v[i].rank);
            e = CKS_E_MISMATCH;
        }
        skip[base[v[i].rank] + v[i].file] = MERGE_SKIP;
        skip[base[v[first].rank] + v[first].file] = MERGE_SEVERAL;
    }
    free(v);
    return e;
}

/* Appends part p's (node rank's) entries that skip does not mark to m,
 * each with its node field (format.h section 3, version 4). */
static int merge_entries(struct manifest *m, const struct manifest *p, unsigned rank,
                         const uint8_t *skip)
{
    int e = 0;
    for (size_t f = 0; e == 0 && f < p->nfiles; f++) {
        const struct mfile *x = &p->files[f];
        if (skip[f] == MERGE_SKIP)
            continue;
        e = manifest_add_file(m, x->type, x->path, x->mode, x->link);
        for (uint64_t c = 0; e == 0 && x->type == MFILE_REG && c < x->nchunks; c++) {
            e = manifest_add_chunk(m, p->chunks[x->first_chunk + c].id,
                                   p->chunks[x->first_chunk + c].len);
            if (e == 0 && manifest_chunk_recipe(p, x->first_chunk + c)) /* version 6 */
                e = manifest_mark_recipe(m, m->nchunks - 1, true);
        }
        if (e == 0) {
            m->files[m->nfiles - 1].mtime_ns = x->mtime_ns;
            m->files[m->nfiles - 1].node =
                skip[f] == MERGE_SEVERAL ? MANIFEST_NODE_SEVERAL : (int32_t)rank;
            memcpy(m->files[m->nfiles - 1].digest, x->digest, HASH_LEN);
            m->files[m->nfiles - 1].dkind = x->dkind;
        }
    }
    return e;
}

int multinode_merge(const struct manifest *parts, size_t n, struct manifest *ret, struct buf *err)
{
    size_t *base = calloc(n + 1, sizeof(*base));
    uint8_t *skip = NULL;
    manifest_init(ret);
    if (!base || n == 0) {
        free(base);
        return n == 0 ? -EINVAL : -ENOMEM;
    }
    for (size_t p = 0; p < n; p++)
        base[p + 1] = base[p] + parts[p].nfiles;
    skip = calloc(base[n] ? base[n] : 1, sizeof(*skip));
    int e = skip ? merge_header(parts, n, ret, err) : -ENOMEM;
    ret->nodes = (unsigned)n; /* a version 4 manifest: each entry says whose it is */
    if (e == 0)
        e = merge_dups(parts, n, base, skip, err);
    for (size_t p = 0; e == 0 && p < n; p++)
        e = merge_entries(ret, &parts[p], (unsigned)p, skip + base[p]);
    if (e == 0) /* version 6 parts: the recipes the merged chunks need */
        e = mnextras_merge(ret, parts, n);
    if (e == 0 && manifest_validate(ret, err) < 0) /* e.g. a file one node has where another */
        e = CKS_E_MISMATCH;                        /* has a directory of that name */
    free(base);
    free(skip);
    if (e < 0)
        manifest_free(ret);
    return e;
}

/* ---- publishing ----------------------------------------------------------- */

struct multinode_committed {
    const char *run; /* NULL: every run */
    int64_t expired; /* prune's roots: parts stamped before this are no roots (part_expire) */
    struct committed_step {
        char run[MANIFEST_MAX_FIELD + 1];
        int64_t step;
    } * v;
    size_t n, cap;
};

static int committed_list(struct region *rg, struct multinode_committed *c);
static bool committed_has(const struct multinode_committed *c, const char *run, int64_t step);

struct part_list {
    const char *run; /* NULL: every run */
    int64_t step;    /* -1: every step */
    struct layout_part *v;
    size_t n, cap;
};

static int part_list_cb(void *ud, const char *key, uint64_t size)
{
    struct part_list *l = ud;
    struct layout_part p;
    (void)size;
    if (layout_part_parse(key, &p) < 0 || (l->run && strcmp(p.run, l->run) != 0) ||
        (l->step >= 0 && p.step != l->step))
        return 0; /* not ours, or another step */
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct layout_part *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = p;
    return 0;
}

static int part_list(struct region *rg, struct part_list *l)
{
    char prefix[LAYOUT_KEY_MAX];
    int e = l->step >= 0 ? layout_part_prefix(l->run, l->step, prefix)
                         : layout_prefix(LAYOUT_PART, l->run, prefix);
    if (e == 0)
        e = region_list(rg, prefix, part_list_cb, l);
    return e == -ENOENT ? 0 : e;
}

/* Of the listed parts of a step on `nodes` nodes, each rank's newest (the
 * largest id where a rank has several: a node that took its unit again
 * supersedes its earlier part, as a retake does on one node; the earlier
 * one may lack a file, e.g. DCP's .metadata written last) into
 * pick[0 .. nodes); how many ranks have one. */
static unsigned part_pick(const struct part_list *l, unsigned nodes,
                          const struct layout_part **pick)
{
    unsigned have = 0;
    for (size_t i = 0; i < l->n; i++) {
        const struct layout_part *p = &l->v[i];
        if (p->nodes != nodes) {
            log_error("run '%s' step %lld: part \"%s\" is node %u of %u, but this node's job has "
                      "%u nodes (a node count changed mid-run?); it is not merged",
                      p->run, (long long)p->step, p->id, p->rank, p->nodes, nodes);
            continue;
        }
        if (!pick[p->rank])
            have++;
        if (!pick[p->rank] || strcmp(p->id, pick[p->rank]->id) > 0)
            pick[p->rank] = p;
    }
    return have;
}

/* The listed part of rank k on `nodes` nodes whose id precedes before's
 * (the next largest); NULL when there is none. */
static const struct layout_part *part_prev(const struct part_list *l, unsigned nodes, unsigned k,
                                           const char *before)
{
    const struct layout_part *best = NULL;
    for (size_t i = 0; i < l->n; i++) {
        const struct layout_part *p = &l->v[i];
        if (p->nodes == nodes && p->rank == k && strcmp(p->id, before) < 0 &&
            (!best || strcmp(p->id, best->id) > 0))
            best = p;
    }
    return best;
}

/* Reads rank k's part of generation gen into *ret: the picked one, else
 * the next older by id (a migrated job's step may have parts of an abandoned
 * generation too: docs/multinode.md "Migration and preemption").
 * PART_NOT_YET when rank k has no part of gen yet. */
static int part_read_gen(struct region *rg, const struct part_list *l, const struct layout_part *p,
                         unsigned nodes, int64_t gen, struct manifest *ret, struct buf *err)
{
    struct buf body = BUF_INIT;
    char key[LAYOUT_KEY_MAX];
    int e = 0;
    while (p && e == 0) {
        if ((e = layout_part(p, key)) == 0 && (e = region_get(rg, key, PART_MAX, &body)) < 0)
            buf_printf(err, "part \"%s\": %s", key, region_last_error(rg));
        if (e == 0)
            e = multinode_decode(key, body.data, body.len, ret, err);
        if (e == 0 && ret->gen == gen)
            break;
        if (e == 0)
            manifest_free(ret);
        if (e == 0)
            p = part_prev(l, nodes, p->rank, p->id);
    }
    buf_free(&body);
    return e == 0 && !p ? PART_NOT_YET : e;
}

/* Reads the picked parts (of generation gen) into parts[0 .. nodes); on
 * failure none is left to free. */
static int part_read_all(struct region *rg, const struct part_list *l,
                         const struct layout_part **pick, unsigned nodes, int64_t gen,
                         struct manifest *parts, struct buf *err)
{
    unsigned k = 0;
    int e = 0;
    for (; e == 0 && k < nodes; k++)
        e = part_read_gen(rg, l, pick[k], nodes, gen, &parts[k], err);
    if (e != 0)
        for (unsigned j = 0; j + 1 < k; j++)
            manifest_free(&parts[j]);
    if (e == PART_NOT_YET)
        log_info("run '%s' step %lld: node %u's part in region '%s' is of another generation "
                 "than %lld (an abandoned job's); the step commits when this generation's is in",
                 pick[0]->run, (long long)pick[0]->step, k - 1, rg->conf.name, (long long)gen);
    return e;
}

/* Publishes the merged snapshot m (its bytes man) in rg: create-only
 * where rg enforces it, else a plain put of the same bytes; then its
 * commit record.  1 when another node had published it. */
static int part_put_merged(struct region *rg, const struct manifest *m, const struct buf *man)
{
    char key[LAYOUT_KEY_MAX];
    int e = layout_snapshot(m->run, m->id, key), other = 0;
    if (e == 0) {
        e = region_put_new(rg, key, man->data, man->len);
        if (e == -ENOTSUP)
            e = region_put(rg, key, man->data, man->len);
        else if (e == -EEXIST)
            e = other = 1; /* another node merged first: same bytes; its commit record may */
    }                      /* not be written yet, so write it (same key, same body) */
    if (e >= 0)
        e = runlineage_put_commit(rg, m, man->data, man->len);
    return e < 0 ? e : other;
}

static void part_committed(struct region *rg, const struct manifest *m, unsigned nodes, int other)
{
    char f[512];
    snprintf(f, sizeof(f), "event=step_committed run=%s step=%lld snapshot=%s nodes=%u region=%s",
             m->run, (long long)m->step, m->id, nodes, rg->conf.name);
    log_event(LOG_LVL_INFO, f,
              "run '%s' step %lld: every node's part is in; snapshot %s %s in "
              "region '%s'",
              m->run, (long long)m->step, m->id, other ? "was already committed" : "is committed",
              rg->conf.name);
}

/* Whether e says the parts themselves are bad (damaged, hostile, or not
 * one tree): retrying cannot help.  Anything else (a region that did not
 * answer, a part not readable yet, memory) is tried again. */
static bool part_bad(int e)
{
    return e == CKS_E_FORMAT || e == CKS_E_VERSION || e == CKS_E_DIGEST || e == CKS_E_LIMIT ||
           e == CKS_E_UNSAFE_PATH || e == CKS_E_MISMATCH || e == CKS_E_AUTH;
}

/* The lowest rank whose part holds path (for a message). */
static unsigned part_holder(const struct manifest *parts, unsigned nodes, const char *path)
{
    for (unsigned k = 0; k < nodes; k++)
        for (size_t f = 0; f < parts[k].nfiles; f++)
            if (!strcmp(parts[k].files[f].path, path))
                return k;
    return 0;
}

/* Whether merged m holds every file its layout names (service/layoutcov.h):
 * 0 yes; 1 no, or a layout file is bad (logged: retrying cannot help until
 * another part arrives); negative: a region error (try again). */
static int part_covered(struct region *rg, const struct manifest *m, const struct manifest *parts,
                        unsigned nodes)
{
    struct buf missing = BUF_INIT, bad = BUF_INIT, err = BUF_INIT;
    char f[512];
    int e = layoutcov_check(m, layoutcov_region_read, rg, &missing, &bad, &err);
    if (e == 1) {
        snprintf(f, sizeof(f), "event=step_uncovered run=%s step=%lld region=%s", m->run,
                 (long long)m->step, rg->conf.name);
        log_event(LOG_LVL_ERROR, f,
                  "run '%s' step %lld: every node's part is in region '%s', but its layout names "
                  "files the step lacks: %s; the step is not committed (it commits when a part "
                  "brings them)",
                  m->run, (long long)m->step, rg->conf.name, buf_str(&missing));
    } else if (e < 0 && bad.len) {
        log_error("run '%s' step %lld: node %u's %s; the step is not committed in region '%s'",
                  m->run, (long long)m->step, part_holder(parts, nodes, buf_str(&bad)),
                  buf_str(&err), rg->conf.name);
        e = part_bad(e) ? 1 : e;
    } else if (e < 0) {
        log_warn("run '%s' step %lld: the layout's files cannot be read from region '%s': %s",
                 m->run, (long long)m->step, rg->conf.name, buf_str(&err));
    }
    buf_free(&missing);
    buf_free(&bad);
    buf_free(&err);
    return e;
}

/* The step cannot commit from these parts: logged, and written into rg
 * as this node's error on the step (service/nodeerr.h). */
static void part_refused(struct region *rg, const struct layout_part *self, const char *why)
{
    char msg[NODEERR_MSG_MAX + 1];
    snprintf(msg, sizeof(msg), "step %lld cannot commit in region '%s': %s", (long long)self->step,
             rg->conf.name, why);
    log_error("run '%s' step %lld (node %u of %u): %s; the step is not committed", self->run,
              (long long)self->step, self->rank, self->nodes, msg);
    if (nodeerr_put(rg, self->run, self->step, self->rank, self->nodes, msg) < 0)
        log_warn("run '%s' step %lld: this node's error could not be written in region '%s': %s",
                 self->run, (long long)self->step, rg->conf.name, region_last_error(rg));
}

/* Merges the picked parts and publishes the step when its layout is
 * covered.  0 also when the parts cannot be merged (logged: retrying
 * cannot help) and when the layout is not covered (logged). */
static int part_commit(struct region *rg, const struct layout_part *self, const struct part_list *l,
                       const struct layout_part **pick, unsigned nodes, int64_t gen)
{
    struct manifest *parts = calloc(nodes, sizeof(*parts)), m;
    struct buf err = BUF_INIT, man = BUF_INIT;
    if (!parts)
        return -ENOMEM;
    int e = part_read_all(rg, l, pick, nodes, gen, parts, &err);
    if (e == 0) {
        if ((e = multinode_merge(parts, nodes, &m, &err)) == 0 &&
            (e = part_covered(rg, &m, parts, nodes)) != 0)
            manifest_free(&m);
        for (unsigned k = 0; k < nodes; k++)
            manifest_free(&parts[k]);
    }
    bool uncovered = e == 1; /* (part_put_merged's 1 below means another node published) */
    if (e == 0) {
        if ((e = manifest_encode(&m, &man)) == 0 && (e = part_put_merged(rg, &m, &man)) >= 0)
            part_committed(rg, &m, nodes, e);
        manifest_free(&m);
    }
    if (uncovered) /* logged by part_covered */
        part_refused(rg, self,
                     "every node's part is in, but the step's layout names files it "
                     "lacks (the merging node's log names them)");
    if (part_bad(e)) {
        log_error("run '%s' step %lld: the parts of %u nodes in region '%s' cannot be one "
                  "snapshot: %s; the step is not committed",
                  pick[0]->run, (long long)pick[0]->step, nodes, rg->conf.name,
                  err.len ? buf_str(&err) : err_str(e));
        part_refused(rg, self, err.len ? buf_str(&err) : err_str(e));
        e = 0;
    }
    free(parts); /* PART_NOT_YET: logged; the last part of this generation commits it */
    buf_free(&err);
    buf_free(&man);
    return e < 0 ? e : 0;
}

/* Bad input among the step's parts (service/partcheck.h): 0 when they
 * may merge, 1 when refused (logged and recorded), or a region's error. */
static int part_check(struct region *rg, const struct config *c, const struct layout_part *self,
                      int64_t gen)
{
    struct buf err = BUF_INIT;
    int e = partcheck_step(rg, c, self, gen, multinode_decode, &err);
    if (e == CKS_E_MISMATCH)
        part_refused(rg, self, buf_str(&err));
    else if (e < 0)
        log_warn("run '%s' step %lld: checking the parts in region '%s': %s", self->run,
                 (long long)self->step, rg->conf.name, err.len ? buf_str(&err) : err_str(e));
    buf_free(&err);
    return e == CKS_E_MISMATCH ? 1 : e;
}

/* With have of the step's ranks listed (odd: a part of another node
 * count among them), checks the parts and commits the step when every
 * rank's is in. */
static int part_when_listed(struct region *rg, const struct config *c,
                            const struct layout_part *self, int64_t gen, const struct part_list *l,
                            const struct layout_part **pick, unsigned have, bool odd)
{
    int e = 0;
    if (have == self->nodes || odd) /* a part of another node count is refused at once */
        e = part_check(rg, c, self, gen);
    if (e == 1)
        return 0; /* refused (logged and recorded): retrying cannot help */
    if (e == 0 && have == self->nodes)
        return part_commit(rg, self, l, pick, self->nodes, gen);
    if (e == 0)
        log_info("run '%s' step %lld: %u of %u nodes' parts are in region '%s'; the step "
                 "commits when the last one is",
                 self->run, (long long)self->step, have, self->nodes, rg->conf.name);
    return e;
}

/* Lists the step's parts in rg and commits it when every rank's is in. */
static int part_try_commit(struct region *rg, const struct config *c,
                           const struct layout_part *self, int64_t gen)
{
    struct part_list l = {.run = self->run, .step = self->step};
    const struct layout_part **pick = calloc(self->nodes, sizeof(*pick));
    int e = pick ? part_list(rg, &l) : -ENOMEM;
    if (e == 0) {
        bool odd = false;
        for (size_t i = 0; i < l.n; i++)
            odd |= l.v[i].nodes != self->nodes;
        e = part_when_listed(rg, c, self, gen, &l, pick, part_pick(&l, self->nodes, pick), odd);
    }
    free(pick);
    free(l.v);
    return e;
}

int multinode_publish(struct region *rg, const struct config *c, const struct manifest *m,
                      const uint8_t *man, size_t len)
{
    struct layout_part self = {.step = m->step, .rank = c->node_rank, .nodes = config_nodes(c)};
    struct buf body = BUF_INIT;
    char key[LAYOUT_KEY_MAX];
    snprintf(self.run, sizeof(self.run), "%s", m->run);
    snprintf(self.id, sizeof(self.id), "%s", m->id);
    int e = layout_part(&self, key);
    if (e == 0)
        e = multinode_encode(self.rank, self.nodes, man, len, &body);
    if (e == 0)
        e = region_put(rg, key, body.data, body.len);
    buf_free(&body);
    return e < 0 ? e : part_try_commit(rg, c, &self, m->gen);
}

/* ---- incomplete steps ----------------------------------------------------- */

static int committed_cb(void *ud, const char *key, uint64_t size)
{
    struct multinode_committed *c = ud;
    struct lineage_rec r;
    (void)size;
    if (layout_record_parse(key, &r) < 0 ||
        (r.kind != LINEAGE_COMMIT && r.kind != LINEAGE_FORGET) || (c->run && strcmp(r.run, c->run)))
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        struct committed_step *v = realloc(c->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        c->v = v;
        c->cap = cap;
    }
    snprintf(c->v[c->n].run, sizeof(c->v[c->n].run), "%s", r.run);
    c->v[c->n++].step = r.step;
    return 0;
}

static bool committed_has(const struct multinode_committed *c, const char *run, int64_t step)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->v[i].step == step && !strcmp(c->v[i].run, run))
            return true;
    return false;
}

/* Lists region rg's commit (and forget) records of c->run, or of every run, into c. */
static int committed_list(struct region *rg, struct multinode_committed *c)
{
    char prefix[LAYOUT_KEY_MAX];
    int e = layout_prefix(LAYOUT_COMMIT, c->run, prefix);
    if (e == 0)
        e = region_list(rg, prefix, committed_cb, c);
    if (e == 0 || e == -ENOENT)
        e = layout_prefix(LAYOUT_FORGET, c->run, prefix);
    if (e == 0)
        e = region_list(rg, prefix, committed_cb, c);
    return e == -ENOENT ? 0 : e;
}

bool multinode_step_missing(const struct multinode_step *s, unsigned k)
{
    return k < s->nodes && k < 8 * sizeof(s->missing) && (s->missing[k / 8] >> (k % 8) & 1);
}

static struct multinode_step *steps_get(struct multinode_steps *s, const struct layout_part *p)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].step == p->step)
            return &s->v[i];
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        struct multinode_step *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        s->v = v;
        s->cap = cap;
    }
    struct multinode_step *st = &s->v[s->n++];
    memset(st, 0, sizeof(*st));
    st->step = p->step;
    st->nodes = p->nodes;
    st->first = INT64_MAX;
    memset(st->missing, 0xff, sizeof(st->missing));
    return st;
}

static int step_cmp(const void *a, const void *b)
{
    const struct multinode_step *x = a, *y = b;
    return (x->step > y->step) - (x->step < y->step);
}

/* Folds the listed parts of steps no region committed into ret. */
static int steps_fold(const struct part_list *l, const struct multinode_committed *c, int64_t now,
                      uint64_t timeout, struct multinode_steps *ret)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct layout_part *p = &l->v[i];
        if (committed_has(c, p->run, p->step))
            continue;
        struct multinode_step *st = steps_get(ret, p);
        if (!st)
            return -ENOMEM;
        if (p->nodes != st->nodes || !multinode_step_missing(st, p->rank))
            continue; /* another node count (logged at commit), or a rank seen already */
        st->missing[p->rank / 8] &= (uint8_t) ~(1u << (p->rank % 8));
        st->have++;
        int64_t t = gc_utc_parse(p->id);
        if (t > 0 && t < st->first)
            st->first = t;
    }
    for (size_t i = 0; i < ret->n; i++)
        ret->v[i].timed_out =
            ret->v[i].first != INT64_MAX && (uint64_t)(now - ret->v[i].first) >= timeout;
    if (ret->n > 1)
        qsort(ret->v, ret->n, sizeof(*ret->v), step_cmp);
    return 0;
}

int multinode_incomplete(struct repo *r, const char *run, int64_t now, uint64_t part_timeout,
                         struct multinode_steps *ret)
{
    struct part_list l = {.run = run, .step = -1};
    struct multinode_committed c = {.run = run};
    int e = 0;
    REPO_FOR_HEALTHY(r, i) {
        struct region *rg = repo_region(r, i);
        e = committed_list(rg, &c); /* before the parts: a step committed in between is */
        if (e == 0)                 /* then shown incomplete, never the reverse */
            e = part_list(rg, &l);
        if (e == -ENOMEM)
            break;
        if (e < 0) { /* a region that cannot list is left out */
            log_error("%s", region_last_error(rg));
            repo_region_fail(r, i, e);
            e = 0;
        }
    }
    if (e == 0)
        e = steps_fold(&l, &c, now, part_timeout, ret);
    free(l.v);
    free(c.v);
    return e;
}

void multinode_steps_free(struct multinode_steps *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* ---- one node's part, by id ------------------------------------------------ */

int multinode_find(struct repo *r, const char *run, int64_t step, const char *id,
                   struct manifest *ret, struct buf *err)
{
    int e = -ENOENT;
    REPO_FOR_HEALTHY(r, i) {
        struct part_list l = {.run = run, .step = step};
        struct region *rg = repo_region(r, i);
        int le = step >= 0 ? part_list(rg, &l) : 0;
        for (size_t k = 0; le == 0 && k < l.n; k++) {
            char key[LAYOUT_KEY_MAX];
            struct buf body = BUF_INIT;
            if (strcmp(l.v[k].id, id) != 0 || layout_part(&l.v[k], key) < 0)
                continue;
            if ((e = region_get(rg, key, PART_MAX, &body)) == 0)
                e = multinode_decode(key, body.data, body.len, ret, err);
            buf_free(&body);
            break;
        }
        free(l.v);
        if (e == 0)
            return 0;
    }
    if (e == -ENOENT)
        buf_printf(err, "; no part of step %lld of run '%s' has id %s", (long long)step, run, id);
    return e;
}

/* ---- prune's roots -------------------------------------------------------- */

int multinode_roots_begin(struct repo *r, struct multinode_roots *ret)
{
    struct multinode_committed *c = calloc(1, sizeof(*c));
    int e = c ? 0 : -ENOMEM;
    if (c) /* service/partgc.h deletes them */
        c->expired = (int64_t)time(NULL) - (int64_t)repo_conf(r)->part_expire;
    for (size_t i = 0; e == 0 && i < repo_nregions(r); i++)
        if (!repo_region_error(r, i))
            e = committed_list(repo_region(r, i), c);
    ret->committed = c;
    return e;
}

/* Reads the part l->v[k] from region i and hands its manifest to cb. */
static int roots_one(struct region *rg, const struct layout_part *p,
                     int (*cb)(void *ud, const struct manifest *m), void *ud, struct buf *err)
{
    char key[LAYOUT_KEY_MAX];
    struct buf body = BUF_INIT;
    struct manifest m;
    int e = layout_part(p, key);
    if (e == 0 && (e = region_get(rg, key, PART_MAX, &body)) < 0)
        buf_printf(err, "part \"%s\": %s", key, region_last_error(rg));
    if (e == 0 && (e = multinode_decode(key, body.data, body.len, &m, err)) == 0) {
        e = cb(ud, &m);
        manifest_free(&m);
    }
    buf_free(&body);
    return e;
}

static int part_key_cmp(const void *a, const void *b)
{
    const struct layout_part *x = a, *y = b;
    int c = strcmp(x->run, y->run);
    if (!c)
        c = (x->step > y->step) - (x->step < y->step);
    if (!c)
        c = strcmp(x->id, y->id);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

int multinode_roots_read(struct repo *r, struct multinode_roots *pr,
                         int (*cb)(void *ud, const struct manifest *m), void *ud, struct buf *err)
{
    int e = 0;
    for (size_t i = 0; e == 0 && i < repo_nregions(r); i++) {
        struct part_list l = {.run = NULL, .step = -1};
        if (repo_region_error(r, i))
            continue;
        struct region *rg = repo_region(r, i);
        if ((e = part_list(rg, &l)) < 0)
            buf_printf(err, "%s", region_last_error(rg));
        if (l.n > 1)
            qsort(l.v, l.n, sizeof(*l.v), part_key_cmp);
        for (size_t k = 0; e == 0 && k < l.n; k++)
            if (!committed_has(pr->committed, l.v[k].run, l.v[k].step) &&
                gc_utc_parse(l.v[k].id) >= pr->committed->expired) /* unstamped: expired */
                e = roots_one(rg, &l.v[k], cb, ud, err);
        free(l.v);
    }
    return e;
}

void multinode_roots_free(struct multinode_roots *pr)
{
    if (pr->committed)
        free(pr->committed->v);
    free(pr->committed);
    pr->committed = NULL;
}
