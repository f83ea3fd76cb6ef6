/*
 * mkrecipes.c — TEST TOOL (built with the tests only): turns a published
 * snapshot into a manifest version 6 one, as the writer of issue 27 will
 * write it, so that the readers (restore, verify, prune, copy) can be
 * tested before the writer exists.
 *
 *   mkrecipes CONFIG RUN CHILD PARENT [MODE]
 *
 * CHILD may be a multi-node part's key (parts/<run>/s<step>.<K>-of-<N>.<id>):
 * the part is rewritten in place as version 6 instead (before the step's
 * last part is in, so that the merge reads it).
 *
 * For every file chunk of CHILD that PARENT does not hold, it encodes the
 * chunk against a base (engine/tdelta.h):
 *   - bf16 (MODE bf16 or both): a file of CHILD whose path ends in
 *     "weights.bin" holding bf16 that is the round to nearest even of the
 *     same offset range (×2) of a "master.bin" file of CHILD: BF16
 *     segments against master's chunks (derived bf16, bases in the same
 *     snapshot);
 *   - xor (MODE xor or both, the default): XOR against the chunk at the
 *     same index of the same path in PARENT (a k line when CHILD does not
 *     hold it).
 * A chunk whose encoding is a recipe is uploaded to recipes/ in every
 * region, its chunks/ object DELETED everywhere (so a reader must use the
 * recipe), and the manifest republished as version 6 with its commit
 * record (as a writer publishes: intents, the check against prune's
 * marks, see publish_as_writer).  Prints one line per recipe: "recipe <key> file <path> base
 * <chunk key>..." and per k line "k <chunk key>", so a test can damage
 * what it names.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/err.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "engine/tdelta.h"
#include "service/catalog.h"
#include "service/gc.h"
#include "service/multinode.h"
#include "service/presence.h"
#include "service/recipe.h"
#include "service/repo.h"
#include "store/layout.h"

struct mk {
    const char *part; /* CHILD is a multi-node part's key: rewrite the part */
    struct repo *r;
    struct manifest child, parent;
    struct recipe_src *csrc, *psrc;
    struct chunkobj_ctx z;
    int bf16, xor;
};

static void die(const char *what, int e, const struct buf *err)
{
    fprintf(stderr, "mkrecipes: %s: %s %s\n", what, err_str(e), err ? buf_str(err) : "");
    exit(2);
}

static bool ends_with(const char *s, const char *t)
{
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}

static bool parent_holds(const struct mk *k, const uint8_t id[HASH_LEN])
{
    size_t f;
    uint64_t off;
    uint32_t len;
    return manifest_chunk_at(&k->parent, id, &f, &off, &len) == 0;
}

static const struct mfile *file_named(const struct manifest *m, const char *suffix)
{
    for (size_t i = 0; i < m->nfiles; i++)
        if (m->files[i].type == MFILE_REG && ends_with(m->files[i].path, suffix))
            return &m->files[i];
    return NULL;
}

/* A plan under construction: segments and their bases (plaintext read
 * through a recipe source). */
struct plan {
    struct tdelta_seg seg[TDELTA_MAX_SEGS > 4096 ? 4096 : TDELTA_MAX_SEGS];
    size_t nseg;
    struct tdelta_base bases[TDELTA_MAX_BASES];
    struct buf bb[TDELTA_MAX_BASES];
    size_t nb;
};

/* Index of base id in p, read through src when new; -1 when full. */
static int plan_base(struct plan *p, struct recipe_src *src, const struct mchunk *c)
{
    struct buf err = BUF_INIT;
    for (size_t b = 0; b < p->nb; b++)
        if (!memcmp(p->bases[b].id, c->id, HASH_LEN))
            return (int)b;
    if (p->nb == TDELTA_MAX_BASES)
        return -1;
    int r = recipe_get(src, c->id, c->len, &p->bb[p->nb], &err);
    if (r < 0)
        die("reading a base chunk", r, &err);
    memcpy(p->bases[p->nb].id, c->id, HASH_LEN);
    p->bases[p->nb].data = p->bb[p->nb].data;
    p->bases[p->nb].len = p->bb[p->nb].len;
    buf_free(&err);
    return (int)p->nb++;
}

/* Appends len bytes of kind (merging with the previous segment when it
 * continues it); false when the plan is full. */
static bool plan_add(struct plan *p, enum tdelta_kind kind, uint32_t len, uint32_t base,
                     uint32_t off, unsigned width)
{
    struct tdelta_seg *l = p->nseg ? &p->seg[p->nseg - 1] : NULL;
    if (l && l->kind == kind && kind == TDELTA_LITERAL) {
        l->len += len;
        return true;
    }
    if (l && l->kind == kind && l->base == base &&
        ((kind == TDELTA_XOR && l->off + l->len == off) ||
         (kind == TDELTA_BF16 && l->off + 2 * l->len == off))) {
        l->len += len;
        return true;
    }
    if (p->nseg == sizeof(p->seg) / sizeof(p->seg[0]))
        return false;
    p->seg[p->nseg++] = (struct tdelta_seg){kind, len, base, off, width};
    return true;
}

/* The chunk of file f holding byte pos, its index and start, or false. */
static bool chunk_of(const struct manifest *m, const struct mfile *f, uint64_t pos, size_t *ret_i,
                     uint64_t *ret_start)
{
    uint64_t at = 0;
    for (uint64_t c = 0; c < f->nchunks; c++) {
        const struct mchunk *mc = &m->chunks[f->first_chunk + c];
        if (pos < at + mc->len) {
            *ret_i = (size_t)(f->first_chunk + c);
            *ret_start = at;
            return true;
        }
        at += mc->len;
    }
    return false;
}

/* Derived bf16: each bf16 element of [off, off+len) of the weights from
 * the fp32 at twice its offset in master.bin, where that fp32 lies in one
 * master chunk; a byte of an element cut by the chunk's edges, or an fp32
 * cut by a master chunk's, is LITERAL.  0 when no BF16 segment results. */
static size_t plan_bf16(struct mk *k, uint64_t off, uint32_t len, struct plan *p)
{
    const struct mfile *mf = file_named(&k->child, "master.bin");
    size_t nbf = 0;
    for (uint64_t pos = off; pos < off + len;) {
        size_t ci;
        uint64_t cs;
        bool whole = pos % 2 == 0 && pos + 2 <= off + len;
        bool in = whole && mf && 2 * pos + 4 <= mf->size &&
                  chunk_of(&k->child, mf, 2 * pos, &ci, &cs) &&
                  2 * pos + 4 <= cs + k->child.chunks[ci].len;
        int b = in ? plan_base(p, k->csrc, &k->child.chunks[ci]) : -1;
        bool ok = b >= 0 ? plan_add(p, TDELTA_BF16, 2, (uint32_t)b, (uint32_t)(2 * pos - cs), 2)
                         : plan_add(p, TDELTA_LITERAL, whole ? 2 : 1, 0, 0, 2);
        if (!ok)
            return 0;
        nbf += b >= 0;
        pos += whole ? 2 : 1;
    }
    return nbf ? p->nseg : 0;
}

/* XOR against the parent's file of the same path at the same offsets,
 * chunk by chunk of the parent; past its end LITERAL. */
static size_t plan_xor(struct mk *k, const char *path, uint64_t off, uint32_t len, struct plan *p)
{
    const struct mfile *pf = NULL;
    for (size_t i = 0; i < k->parent.nfiles && !pf; i++)
        if (k->parent.files[i].type == MFILE_REG && !strcmp(k->parent.files[i].path, path))
            pf = &k->parent.files[i];
    if (!pf)
        return 0;
    for (uint64_t pos = off; pos < off + len;) {
        size_t ci;
        uint64_t cs;
        if (pos >= pf->size || !chunk_of(&k->parent, pf, pos, &ci, &cs)) {
            if (!plan_add(p, TDELTA_LITERAL, (uint32_t)(off + len - pos), 0, 0, 4))
                return 0;
            break;
        }
        const struct mchunk *pc = &k->parent.chunks[ci];
        uint64_t end = cs + pc->len < off + len ? cs + pc->len : off + len;
        int b = plan_base(p, k->psrc, pc);
        if (b < 0 ||
            !plan_add(p, TDELTA_XOR, (uint32_t)(end - pos), (uint32_t)b, (uint32_t)(pos - cs), 4))
            return 0;
        pos = end;
    }
    return p->nseg;
}

static void put_all(struct mk *k, const char *key, const struct buf *obj)
{
    REPO_FOR_HEALTHY(k->r, i) {
        int e = region_put(repo_region(k->r, i), key, obj->data, obj->len);
        if (e < 0)
            die(key, e, NULL);
    }
}

static void del_all(struct mk *k, const char *key)
{
    REPO_FOR_HEALTHY(k->r, i) {
        int e = region_del(repo_region(k->r, i), key);
        if (e < 0 && e != -ENOENT)
            die(key, e, NULL);
    }
}

/* The child's extra with this id while it is being built (unsorted). */
static const struct mextra *child_extra(const struct mk *k, const uint8_t id[HASH_LEN])
{
    for (size_t i = 0; i < k->child.nextras; i++)
        if (!memcmp(k->child.extras[i].id, id, HASH_LEN))
            return &k->child.extras[i];
    return NULL;
}

/* A base the child needs: nothing when it is a child file chunk or already
 * listed; the parent's r line and, recursively, its bases when the parent
 * stores it as a recipe (a chain); else a k line (collected in extra_k). */
static void add_base(struct mk *k, const uint8_t id[HASH_LEN], uint32_t len,
                     struct manifest *extra_k, int depth, bool file_chunk)
{
    size_t f;
    uint64_t off;
    uint32_t l;
    const struct mextra *px = manifest_extra(&k->parent, id);
    if (depth > MANIFEST_MAX_DEPTH ||
        (!file_chunk && manifest_chunk_at(&k->child, id, &f, &off, &l) == 0) ||
        child_extra(k, id) || manifest_chunk_at(extra_k, id, &f, &off, &l) == 0)
        return;
    if (px && px->recipe) {
        uint8_t ids[TDELTA_MAX_BASES][HASH_LEN];
        uint64_t first = px->first_base;
        uint32_t n = px->nbases;
        for (uint32_t b = 0; b < n; b++)
            memcpy(ids[b], k->parent.bases[first + b].id, HASH_LEN);
        int e = manifest_add_extra(&k->child, id, px->len, (const uint8_t(*)[HASH_LEN])ids, n);
        if (e < 0)
            die("copying the parent's r line", e, NULL);
        for (uint32_t b = 0; b < n; b++) {
            const struct mextra *bx = manifest_extra(&k->parent, ids[b]);
            size_t bf;
            uint64_t bo;
            uint32_t bl = 0;
            if (!bx && manifest_chunk_at(&k->parent, ids[b], &bf, &bo, &bl) < 0)
                die("a parent recipe's base is not in the parent", -EINVAL, NULL);
            add_base(k, ids[b], bx ? bx->len : bl, extra_k, depth + 1, false);
        }
        return;
    }
    manifest_add_file(extra_k, MFILE_REG, "k", 0644, NULL);
    manifest_add_chunk(extra_k, id, len);
}

/* Records the recipe obj of chunk ci (its bases: the ones obj names,
 * tdelta_refs): uploads, marks, adds the r line and, for bases the child
 * does not hold, k lines (collected in extra_k). */
static void record(struct mk *k, size_t ci, const char *path, const struct buf *obj,
                   struct manifest *extra_k)
{
    struct tdelta_ref refs[TDELTA_MAX_BASES];
    uint8_t ids[TDELTA_MAX_BASES][HASH_LEN];
    char key[LAYOUT_KEY_MAX], bkey[LAYOUT_KEY_MAX];
    struct mchunk *c = &k->child.chunks[ci];
    size_t nb = 0;
    int e = tdelta_refs(obj->data, obj->len, refs, TDELTA_MAX_BASES, &nb);
    if (e < 0)
        die("tdelta_refs", e, NULL);
    for (size_t b = 0; b < nb; b++)
        memcpy(ids[b], refs[b].id, HASH_LEN);
    if ((e = manifest_add_extra(&k->child, c->id, c->len, (const uint8_t(*)[HASH_LEN])ids, nb)) < 0)
        die("adding an r line", e, NULL);
    const struct mextra *x = &k->child.extras[k->child.nextras - 1];
    layout_recipe(c->id, x->sig, key);
    put_all(k, key, obj);
    if ((e = manifest_mark_recipe(&k->child, ci, true)) < 0)
        die("marking a recipe chunk", e, NULL);
    printf("recipe %s file %s", key, path);
    for (size_t b = 0; b < nb; b++) {
        layout_chunk(ids[b], bkey);
        printf(" base %s", bkey);
        add_base(k, ids[b], refs[b].len, extra_k, 0, false);
    }
    printf("\n");
}

static void plan_reset(struct plan *p)
{
    for (size_t b = 0; b < p->nb; b++)
        buf_free(&p->bb[b]);
    p->nb = p->nseg = 0;
}

/* Encodes chunk ci (of file f, at offset off) if it pays. */
static void one_chunk(struct mk *k, const struct mfile *f, uint64_t off, size_t ci,
                      struct manifest *extra_k)
{
    static struct plan p;
    struct buf raw = BUF_INIT, obj = BUF_INIT, err = BUF_INIT;
    struct mchunk *mc = &k->child.chunks[ci];
    size_t np = 0;
    int e = recipe_get(k->csrc, mc->id, mc->len, &raw, &err);
    if (e < 0)
        die("reading a child chunk", e, &err);
    if (k->bf16 && ends_with(f->path, "weights.bin"))
        np = plan_bf16(k, off, mc->len, &p);
    if (!np) {
        plan_reset(&p);
        if (k->xor)
            np = plan_xor(k, f->path, off, mc->len, &p);
    }
    struct tdelta_opts o = {.level = 3, .exact = true};
    struct tdelta_stats st = {0};
    if (np &&
        (e = tdelta_encode(&k->z, raw.data, raw.len, p.seg, np, p.bases, p.nb, &o, &obj, &st)) < 0)
        die("tdelta_encode", e, NULL);
    if (np && st.recipe) {
        struct buf back = BUF_INIT; /* the writer's check: it decodes to the id */
        if ((e = tdelta_decode(&k->z, obj.data, obj.len, mc->id, mc->len, p.bases, p.nb, &back)) <
            0)
            die("tdelta_decode of what was encoded", e, NULL);
        buf_free(&back);
        record(k, ci, f->path, &obj, extra_k);
    }
    plan_reset(&p);
    buf_free(&raw);
    buf_free(&obj);
    buf_free(&err);
}

static void encode_all(struct mk *k, struct manifest *extra_k)
{
    for (size_t i = 0; i < k->child.nfiles; i++) {
        const struct mfile *f = &k->child.files[i];
        uint64_t off = 0;
        for (uint64_t c = 0; f->type == MFILE_REG && c < f->nchunks; c++) {
            size_t ci = (size_t)(f->first_chunk + c);
            const struct mchunk *mc = &k->child.chunks[ci];
            bool seen = false; /* one storage per id: the first place decides */
            for (size_t j = 0; j < ci && !seen; j++)
                seen = !memcmp(k->child.chunks[j].id, mc->id, HASH_LEN);
            /* master chunks stay plain: they are the bf16 files' bases */
            const struct mextra *px = manifest_extra(&k->parent, mc->id);
            if (!seen && px && px->recipe) /* unchanged, and the parent has no chunks/ object */
                add_base(k, mc->id, mc->len, extra_k, 0, true);
            else if (!seen && !parent_holds(k, mc->id) && !ends_with(f->path, "master.bin"))
                one_chunk(k, f, off, ci, extra_k);
            off += mc->len;
        }
    }
}

/* W0-W1 of service/gc.h in region i, as a writer does before publishing:
 * an intent, then the check against prune's marks with every object the
 * manifest names (a keep record naming the recipes a mark not done holds
 * as candidates).  The objects were uploaded before the intent, and the
 * tool does not confirm objects again: a mark done that names some of
 * them stops it (a test runs it with no such mark). */
static int writer_check(struct mk *k, size_t i, struct gc_intent *in)
{
    struct region *rg = repo_region(k->r, i);
    struct gc_cache gcc = {0};
    struct presence_item *items = NULL;
    size_t n = 0;
    uint64_t est;
    char waiting[GC_MARK_LEN + 1];
    int e = gc_intent_begin(rg, repo_conf(k->r), in);
    if (e == 0)
        e = presence_objects(repo_index(k->r), &k->child, &items, &n, &est);
    uint8_t *recheck = e == 0 ? calloc(n ? n : 1, 1) : NULL;
    if (e == 0 && !recheck)
        e = -ENOMEM;
    while (e == 0 && (e = gc_writer_check(rg, &gcc, repo_conf(k->r), items, n, k->child.run,
                                          k->child.id, recheck, waiting)) == -EAGAIN) {
        e = 0; /* a sweep under way: ask again */
        sleep(1);
    }
    for (size_t j = 0; e == 0 && j < n; j++)
        if (recheck[j])
            e = -EAGAIN;
    gc_cache_free(&gcc);
    free(items);
    free(recheck);
    return e;
}

/* Publishes the version 6 manifest as a writer does (service/gc.h
 * W0-W2): writer_check in every region, then in each region
 * gc_intent_publishable (its test hook, CKPTSYNC_TEST_STOP_BEFORE_PUBLISH=1,
 * stops the tool there, every keep record written), the manifest and
 * commit record, and the intent's end. */
static void publish_as_writer(struct mk *k, const struct buf *man)
{
    struct gc_intent in[CONFIG_MAX_REGIONS];
    int e = 0;
    memset(in, 0, sizeof(in));
    REPO_FOR_HEALTHY(k->r, i) {
        if ((e = writer_check(k, i, &in[i])) < 0)
            die("checking prune's marks", e, NULL);
    }
    REPO_FOR_HEALTHY(k->r, i) {
        if (!gc_intent_publishable(&in[i]))
            die("publishing", -ETIMEDOUT, NULL);
        if ((e = catalog_publish(repo_region(k->r, i), &k->child, man->data, man->len)) < 0)
            die("republishing the manifest", e, NULL);
        gc_intent_end(repo_region(k->r, i), &in[i]);
    }
}

/* A part (CHILD "parts/..."): its manifest, from the first healthy region. */
static int part_read(struct mk *k, struct buf *err)
{
    struct buf b = BUF_INIT;
    int e = -ENOENT;
    REPO_FOR_HEALTHY(k->r, i) {
        if ((e = region_get(repo_region(k->r, i), k->part, 64u << 20, &b)) == 0)
            break;
    }
    if (e == 0)
        e = multinode_decode(k->part, b.data, b.len, &k->child, err);
    buf_free(&b);
    return e;
}

/* Rewrites the part (version 6 manifest man) in every region, as a node
 * re-publishing its part does (the same key: the merge reads it when the
 * last part is in; run the tool before that). */
static void part_put(struct mk *k, const struct buf *man)
{
    struct layout_part lp;
    struct buf body = BUF_INIT;
    int e = layout_part_parse(k->part, &lp);
    if (e == 0)
        e = multinode_encode(lp.rank, lp.nodes, man->data, man->len, &body);
    REPO_FOR_HEALTHY(k->r, i) {
        if (e == 0)
            e = region_put(repo_region(k->r, i), k->part, body.data, body.len);
    }
    if (e < 0)
        die("rewriting the part", e, NULL);
    buf_free(&body);
}

/* Marks every place of a recipe id, adds the k lines, deletes the plain
 * objects, republishes. */
static void finish(struct mk *k, struct manifest *extra_k)
{
    char key[LAYOUT_KEY_MAX];
    for (size_t i = 0; i < extra_k->nchunks; i++) {
        int e =
            manifest_add_extra(&k->child, extra_k->chunks[i].id, extra_k->chunks[i].len, NULL, 0);
        if (e < 0)
            die("adding a k line", e, NULL);
        layout_chunk(extra_k->chunks[i].id, key);
        printf("k %s\n", key);
    }
    manifest_sort_extras(&k->child);
    for (size_t i = 0; i < k->child.nchunks; i++) /* a duplicate place of a recipe id */
        if (manifest_extra(&k->child, k->child.chunks[i].id))
            manifest_mark_recipe(&k->child, i,
                                 manifest_extra(&k->child, k->child.chunks[i].id)->recipe);
    struct buf man = BUF_INIT, err = BUF_INIT;
    int e = manifest_validate(&k->child, &err);
    if (e == 0)
        e = manifest_encode(&k->child, &man);
    if (e < 0)
        die("encoding the version 6 manifest", e, &err);
    if (k->part)
        part_put(k, &man);
    else
        publish_as_writer(k, &man);
    for (size_t i = 0; i < k->child.nextras; i++)
        if (k->child.extras[i].recipe) {
            layout_chunk(k->child.extras[i].id, key);
            del_all(k, key);
        }
    buf_free(&man);
    buf_free(&err);
}

int main(int argc, char **argv)
{
    struct config conf;
    struct buf err = BUF_INIT;
    struct mk k = {.z = CHUNKOBJ_CTX_INIT};
    struct manifest extra_k;
    if (argc < 5) {
        fprintf(stderr, "usage: mkrecipes CONFIG RUN CHILD PARENT [xor|bf16|both]\n");
        return 2;
    }
    const char *mode = argc > 5 ? argv[5] : "xor";
    k.bf16 = !strcmp(mode, "bf16") || !strcmp(mode, "both");
    k.xor = !strcmp(mode, "xor") || !strcmp(mode, "both");
    config_default(&conf);
    int e = config_load(argv[1], &conf, &err);
    if (e == 0)
        e = repo_open(&conf, 0, &k.r, &err);
    if (e == 0 && !strncmp(argv[3], "parts/", 6)) {
        k.part = argv[3];
        e = part_read(&k, &err);
    } else if (e == 0) {
        e = catalog_find(k.r, argv[2], argv[3], &k.child, NULL, &err);
    }
    if (e == 0)
        e = catalog_find(k.r, argv[2], argv[4], &k.parent, NULL, &err);
    if (e == 0)
        e = recipe_src_open(k.r, &k.child, 64u << 20, &k.csrc);
    if (e == 0)
        e = recipe_src_open(k.r, &k.parent, 64u << 20, &k.psrc);
    if (e < 0)
        die("opening", e, &err);
    k.z = repo_chunkobj_ctx(k.r);
    manifest_init(&extra_k);
    encode_all(&k, &extra_k);
    if (k.child.nextras == 0)
        die("no chunk paid as a recipe", -EINVAL, NULL);
    finish(&k, &extra_k);
    manifest_free(&extra_k);
    recipe_src_close(k.csrc);
    recipe_src_close(k.psrc);
    chunkobj_ctx_free(&k.z);
    manifest_free(&k.child);
    manifest_free(&k.parent);
    repo_free(k.r);
    buf_free(&err);
    return 0;
}
