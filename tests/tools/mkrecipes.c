/*
 * mkrecipes.c — TEST TOOL (built with the tests only): turns a published
 * snapshot into a manifest version 6 one, as the writer of issue 27 will
 * write it, so that the readers (restore, verify, prune, copy) can be
 * tested before the writer exists.
 *
 *   mkrecipes CONFIG RUN CHILD PARENT [MODE]
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
 * record.  Prints one line per recipe: "recipe <key> base <chunk key>..."
 * and per k line "k <chunk key>", so a test can damage what it names.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/err.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "engine/tdelta.h"
#include "service/catalog.h"
#include "service/recipe.h"
#include "service/repo.h"
#include "store/layout.h"

struct mk {
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

/* The chunk index of PARENT's file path at chunk number c, or SIZE_MAX. */
static size_t parent_chunk(const struct mk *k, const char *path, uint64_t c)
{
    for (size_t i = 0; i < k->parent.nfiles; i++) {
        const struct mfile *f = &k->parent.files[i];
        if (f->type == MFILE_REG && !strcmp(f->path, path))
            return c < f->nchunks ? (size_t)(f->first_chunk + c) : SIZE_MAX;
    }
    return SIZE_MAX;
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

/* Derived bf16: the master's chunks covering [2*off, 2*(off+len)) as
 * bases, one BF16 segment per base range.  Returns the plan's size. */
static size_t plan_bf16(struct mk *k, uint64_t off, uint32_t len, struct tdelta_seg *plan,
                        struct tdelta_base *bases, struct buf *bb, size_t *nb)
{
    const struct mfile *mf = file_named(&k->child, "master.bin");
    struct buf err = BUF_INIT;
    uint64_t lo = 2 * off, hi = 2 * (off + len), at = 0;
    size_t n = 0;
    if (!mf || hi > mf->size || (len & 1))
        return 0;
    for (uint64_t c = 0; c < mf->nchunks && at < hi; c++) {
        const struct mchunk *mc = &k->child.chunks[mf->first_chunk + c];
        uint64_t s = at > lo ? at : lo, e = at + mc->len < hi ? at + mc->len : hi;
        if (s < e) {
            if ((s - lo) % 4 || (e - s) % 4 || *nb == TDELTA_MAX_BASES)
                return 0; /* an fp32 cut by a chunk boundary: not this simple tool's case */
            int r = recipe_get(k->csrc, mc->id, mc->len, &bb[*nb], &err);
            if (r < 0)
                die("reading a master chunk", r, &err);
            memcpy(bases[*nb].id, mc->id, HASH_LEN);
            bases[*nb].data = bb[*nb].data;
            bases[*nb].len = bb[*nb].len;
            plan[n++] = (struct tdelta_seg){TDELTA_BF16, (uint32_t)((e - s) / 2), (uint32_t)*nb,
                                            (uint32_t)(s - at), 2};
            (*nb)++;
        }
        at += mc->len;
    }
    buf_free(&err);
    return n;
}

/* XOR against the parent's chunk at the same place. */
static size_t plan_xor(struct mk *k, const char *path, uint64_t c, uint32_t len,
                       struct tdelta_seg *plan, struct tdelta_base *bases, struct buf *bb,
                       size_t *nb)
{
    struct buf err = BUF_INIT;
    size_t pi = parent_chunk(k, path, c);
    if (pi == SIZE_MAX)
        return 0;
    const struct mchunk *pc = &k->parent.chunks[pi];
    int r = recipe_get(k->psrc, pc->id, pc->len, &bb[0], &err);
    if (r < 0)
        die("reading a parent chunk", r, &err);
    memcpy(bases[0].id, pc->id, HASH_LEN);
    bases[0].data = bb[0].data;
    bases[0].len = bb[0].len;
    *nb = 1;
    uint32_t x = pc->len < len ? pc->len : len;
    plan[0] = (struct tdelta_seg){TDELTA_XOR, x, 0, 0, 4};
    if (x < len)
        plan[1] = (struct tdelta_seg){TDELTA_LITERAL, len - x, 0, 0, 0};
    buf_free(&err);
    return x < len ? 2 : 1;
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

/* Records the recipe of chunk ci with bases[0..nb): uploads, marks, adds
 * the r line and k lines for bases the child does not hold. */
static void record(struct mk *k, size_t ci, const struct buf *obj, const struct tdelta_base *bases,
                   size_t nb, struct manifest *extra_k)
{
    uint8_t ids[TDELTA_MAX_BASES][HASH_LEN];
    char key[LAYOUT_KEY_MAX], bkey[LAYOUT_KEY_MAX];
    struct mchunk *c = &k->child.chunks[ci];
    for (size_t b = 0; b < nb; b++)
        memcpy(ids[b], bases[b].id, HASH_LEN);
    int e = manifest_add_extra(&k->child, c->id, c->len, (const uint8_t(*)[HASH_LEN])ids, nb);
    if (e < 0)
        die("adding an r line", e, NULL);
    const struct mextra *x = &k->child.extras[k->child.nextras - 1];
    layout_recipe(c->id, x->sig, key);
    put_all(k, key, obj);
    c->recipe = true;
    printf("recipe %s", key);
    for (size_t b = 0; b < nb; b++) {
        layout_chunk(ids[b], bkey);
        printf(" base %s", bkey);
        size_t f;
        uint64_t off;
        uint32_t len;
        if (manifest_chunk_at(&k->child, ids[b], &f, &off, &len) < 0 &&
            manifest_chunk_at(extra_k, ids[b], &f, &off, &len) < 0) {
            manifest_add_file(extra_k, MFILE_REG, "k", 0644, NULL);
            manifest_add_chunk(extra_k, ids[b], (uint32_t)bases[b].len);
        }
    }
    printf("\n");
}

/* Encodes chunk ci (of file f, its c-th, at offset off) if it pays. */
static void one_chunk(struct mk *k, const struct mfile *f, uint64_t c, uint64_t off, size_t ci,
                      struct manifest *extra_k)
{
    struct tdelta_seg plan[TDELTA_MAX_BASES + 1];
    struct tdelta_base bases[TDELTA_MAX_BASES];
    struct buf bb[TDELTA_MAX_BASES], raw = BUF_INIT, obj = BUF_INIT, err = BUF_INIT;
    struct mchunk *mc = &k->child.chunks[ci];
    size_t nb = 0, np = 0;
    for (size_t b = 0; b < TDELTA_MAX_BASES; b++)
        bb[b] = (struct buf)BUF_INIT;
    int e = recipe_get(k->csrc, mc->id, mc->len, &raw, &err);
    if (e < 0)
        die("reading a child chunk", e, &err);
    if (k->bf16 && ends_with(f->path, "weights.bin"))
        np = plan_bf16(k, off, mc->len, plan, bases, bb, &nb);
    if (!np && k->xor)
        np = plan_xor(k, f->path, c, mc->len, plan, bases, bb, &nb);
    struct tdelta_opts o = {.level = 3, .exact = true};
    struct tdelta_stats st;
    if (np && (e = tdelta_encode(&k->z, raw.data, raw.len, plan, np, bases, nb, &o, &obj, &st)) < 0)
        die("tdelta_encode", e, NULL);
    if (np && st.recipe) {
        struct buf back = BUF_INIT; /* the writer's check: it decodes to the id */
        if ((e = tdelta_decode(&k->z, obj.data, obj.len, mc->id, mc->len, bases, nb, &back)) < 0)
            die("tdelta_decode of what was encoded", e, NULL);
        buf_free(&back);
        record(k, ci, &obj, bases, nb, extra_k);
    }
    for (size_t b = 0; b < TDELTA_MAX_BASES; b++)
        buf_free(&bb[b]);
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
            if (!seen && !parent_holds(k, mc->id) && !ends_with(f->path, "master.bin"))
                one_chunk(k, f, c, off, ci, extra_k);
            off += mc->len;
        }
    }
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
            k->child.chunks[i].recipe = manifest_extra(&k->child, k->child.chunks[i].id)->recipe;
    struct buf man = BUF_INIT, err = BUF_INIT;
    int e = manifest_validate(&k->child, &err);
    if (e == 0)
        e = manifest_encode(&k->child, &man);
    if (e < 0)
        die("encoding the version 6 manifest", e, &err);
    REPO_FOR_HEALTHY(k->r, i) {
        if ((e = catalog_publish(repo_region(k->r, i), &k->child, man.data, man.len)) < 0)
            die("republishing the manifest", e, NULL);
    }
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
    if (e == 0)
        e = catalog_find(k.r, argv[2], argv[3], &k.child, NULL, &err);
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
