/*
 * test-multinode.c — parts of a multi-node step (service/multinode.h): the part
 * object round-trips and is checked against its key; merging N nodes'
 * manifests gives one tree whose id and bytes depend on the parts alone;
 * an entry two nodes share must be identical, and a path one node holds
 * as a file and another as a directory, a root or step that differs, are
 * refused, naming what disagrees.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "service/multinode.h"
#include "store/layout.h"

/* Node k's part of step 1000: checkpoint-1000/__k_0.distcp (one chunk of
 * 100 + k bytes), the directory checkpoint-1000, and, on node 0, .metadata. */
static void part_make(struct manifest *m, unsigned k, const char *id, int64_t time)
{
    char path[64];
    uint8_t c[HASH_LEN];
    manifest_init(m);
    snprintf(m->id, sizeof(m->id), "%s", id);
    assert_int_equal(manifest_set_str(&m->run, "job"), 0);
    snprintf(path, sizeof(path), "gpu-%u", k);
    assert_int_equal(manifest_set_str(&m->host, path), 0);
    assert_int_equal(manifest_set_str(&m->root, "checkpoint-1000"), 0);
    m->step = 1000;
    m->time = time;
    m->gen = k == 2 ? 1 : 0;
    m->chunk_min = 64;
    m->chunk_avg = 256;
    m->chunk_max = 1024;
    m->normalization = 1;
    assert_int_equal(manifest_add_file(m, MFILE_DIR, "checkpoint-1000", 0755, NULL), 0);
    snprintf(path, sizeof(path), "checkpoint-1000/__%u_0.distcp", k);
    memset(c, (int)k + 1, sizeof(c));
    assert_int_equal(manifest_add_file(m, MFILE_REG, path, 0644, NULL), 0);
    assert_int_equal(manifest_add_chunk(m, c, 100 + k), 0);
    manifest_set_digest(m, c);
    if (k == 0) {
        memset(c, 0xee, sizeof(c));
        assert_int_equal(manifest_add_file(m, MFILE_REG, "checkpoint-1000/.metadata", 0644, NULL),
                         0);
        assert_int_equal(manifest_add_chunk(m, c, 7), 0);
        manifest_set_digest(m, c);
    }
}

static const char *const ids[] = {
    "20261201T000701.000001Z-00000001",
    "20261201T000702.000001Z-00000002",
    "20261201T000709.000001Z-00000003",
    "20261201T000703.000001Z-00000004",
};

static void parts_make(struct manifest *v, size_t n)
{
    for (size_t k = 0; k < n; k++)
        part_make(&v[k], (unsigned)k, ids[k], 1796083600 + (int64_t)k);
}

static void parts_free(struct manifest *v, size_t n)
{
    for (size_t k = 0; k < n; k++)
        manifest_free(&v[k]);
}

static void test_merge(void **state)
{
    (void)state;
    struct manifest p[4], m, again;
    struct buf err = BUF_INIT, a = BUF_INIT, b = BUF_INIT;
    parts_make(p, 4);
    assert_int_equal(multinode_merge(p, 4, &m, &err), 0);
    /* one tree: the shared directory once, every node's file, .metadata */
    assert_int_equal(m.nfiles, 6);
    assert_int_equal(m.nchunks, 5);
    assert_string_equal(m.files[0].path, "checkpoint-1000");
    assert_string_equal(m.files[2].path, "checkpoint-1000/.metadata");
    assert_string_equal(m.files[5].path, "checkpoint-1000/__3_0.distcp");
    assert_int_equal(m.files[5].size, 103);
    assert_int_equal(m.step, 1000);
    assert_string_equal(m.root, "checkpoint-1000");
    assert_string_equal(m.host, "gpu-0");
    assert_int_equal(m.time, 1796083603);
    assert_int_equal(m.gen, 1);
    assert_null(m.parent);
    /* each entry says whose part it came from (manifest version 4): the
     * directory every node has is "several", the rest their node's */
    assert_int_equal(m.nodes, 4);
    assert_int_equal(m.files[0].node, MANIFEST_NODE_SEVERAL);
    assert_int_equal(m.files[2].node, 0);
    assert_int_equal(m.files[5].node, 3);
    /* the newest part's time stamp, then "-m" and 12 hex */
    assert_int_equal(strncmp(m.id, "20261201T000709.000001Z-m", 25), 0);
    assert_int_equal(strlen(m.id), 25 + 12);
    /* deterministic: a second merger writes the same bytes */
    assert_int_equal(multinode_merge(p, 4, &again, &err), 0);
    assert_int_equal(manifest_encode(&m, &a), 0);
    assert_int_equal(manifest_encode(&again, &b), 0);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    manifest_free(&again);
    /* another part id (a retake of one node) is another snapshot */
    snprintf(p[1].id, sizeof(p[1].id), "%s", "20261201T000702.000001Z-00000009");
    assert_int_equal(multinode_merge(p, 4, &again, &err), 0);
    assert_string_not_equal(again.id, m.id);
    manifest_free(&again);
    manifest_free(&m);
    parts_free(p, 4);
    buf_free(&a);
    buf_free(&b);
    buf_free(&err);
}

/* Marks part p's file chunk of id c (its only place) as a recipe. */
static void mark_chunk(struct manifest *p, uint8_t c)
{
    for (size_t i = 0; i < p->nchunks; i++)
        if (p->chunks[i].id[0] == c)
            assert_int_equal(manifest_mark_recipe(p, i, true), 0);
}

/* Chunk ids of part_make: node k's is all k + 1; K a base outside any file. */
static void id_fill(uint8_t id[HASH_LEN], uint8_t c)
{
    memset(id, c, HASH_LEN);
}

/* Version 6 parts: node 0 stores its chunk (1) as a recipe over K (a k
 * line); node 1 its chunk (2) over node 0's (a chain: 1's r line and K
 * copied into its closure); node 2 its chunk (3) over node 3's (4, a k
 * line there).  Parts 0 and 1 merge with the union of their extras, each
 * once; with 2 and 3, node 3's file chunk 4 makes node 2's k line go, and
 * node 3 also storing chunk 1 plain (shared.bin) makes 1 plain everywhere:
 * its r line and K go, 2's recipe over 1 stays. */
static void test_merge_recipes(void **state)
{
    (void)state;
    struct manifest p[4], m, back;
    struct buf err = BUF_INIT, a = BUF_INIT;
    uint8_t id[HASH_LEN], b1[1][HASH_LEN], k[1][HASH_LEN], b4[1][HASH_LEN];
    parts_make(p, 4);
    memset(k[0], 0x55, HASH_LEN);
    id_fill(b1[0], 1);
    id_fill(b4[0], 4);
    id_fill(id, 1);
    mark_chunk(&p[0], 1);
    assert_int_equal(manifest_add_extra(&p[0], id, 100, (const uint8_t(*)[HASH_LEN])k, 1), 0);
    assert_int_equal(manifest_add_extra(&p[0], k[0], 50, NULL, 0), 0);
    mark_chunk(&p[1], 2);
    id_fill(id, 2);
    assert_int_equal(manifest_add_extra(&p[1], id, 101, (const uint8_t(*)[HASH_LEN])b1, 1), 0);
    assert_int_equal(manifest_add_extra(&p[1], b1[0], 100, (const uint8_t(*)[HASH_LEN])k, 1), 0);
    assert_int_equal(manifest_add_extra(&p[1], k[0], 50, NULL, 0), 0);
    mark_chunk(&p[2], 3);
    id_fill(id, 3);
    assert_int_equal(manifest_add_extra(&p[2], id, 102, (const uint8_t(*)[HASH_LEN])b4, 1), 0);
    assert_int_equal(manifest_add_extra(&p[2], b4[0], 103, NULL, 0), 0);
    for (int i = 0; i < 3; i++) {
        manifest_sort_extras(&p[i]);
        assert_int_equal(manifest_validate(&p[i], &err), 0); /* each part is closed */
    }
    assert_int_equal(multinode_merge(p, 2, &m, &err), 0);
    assert_int_equal(m.nextras, 3); /* r 1, r 2, k K: each once */
    assert_true(manifest_extra(&m, b1[0])->recipe);
    assert_false(manifest_extra(&m, k[0])->recipe);
    assert_int_equal(manifest_encode(&m, &a), 0); /* closed: the check passes */
    assert_int_equal(manifest_parse(a.data, a.len, &back, &err), 0);
    assert_true(manifest_equal(&m, &back));
    manifest_free(&back);
    manifest_free(&m);
    /* node 3 holds chunk 1 plain too */
    assert_int_equal(manifest_add_file(&p[3], MFILE_REG, "checkpoint-1000/shared.bin", 0644, NULL),
                     0);
    assert_int_equal(manifest_add_chunk(&p[3], b1[0], 100), 0);
    manifest_set_digest(&p[3], b1[0]);
    assert_int_equal(multinode_merge(p, 4, &m, &err), 0);
    assert_int_equal(m.nextras, 2); /* r 2 (over plain 1), r 3 (over file chunk 4) */
    id_fill(id, 2);
    assert_true(manifest_extra(&m, id) && manifest_extra(&m, id)->recipe);
    id_fill(id, 3);
    assert_true(manifest_extra(&m, id) && manifest_extra(&m, id)->recipe);
    assert_null(manifest_extra(&m, b1[0]));
    assert_null(manifest_extra(&m, k[0]));
    assert_null(manifest_extra(&m, b4[0]));
    for (size_t i = 0; i < m.nchunks; i++) /* 1 and 4 plain, 2 and 3 recipes */
        assert_int_equal(manifest_chunk_recipe(&m, i),
                         m.chunks[i].id[0] == 2 || m.chunks[i].id[0] == 3);
    buf_reset(&a);
    assert_int_equal(manifest_encode(&m, &a), 0);
    manifest_free(&m);
    parts_free(p, 4);
    buf_free(&a);
    buf_free(&err);
}

/* Deltas of two nodes against one keyframe (docs/deltas.md "Multi-node
 * parts"): a k line is a chunks/ object its part confirmed, so a chunk
 * another part stores as a recipe is plain in the merged step.  Node 0
 * stores its chunk 1 over the keyframe's 2 (a k line), node 1 its chunk 2
 * over the keyframe's 1: taking both recipes would be a cycle (refused);
 * both are plain, no extras.  Node 2 stores 3 over X, an r line over
 * X's base Y (a k line); node 3 stores 4 over X, a k line there: X is
 * named by its k line (plain, confirmed), not by node 2's recipe. */
static void test_merge_klines(void **state)
{
    (void)state;
    struct manifest p[4], m;
    struct buf err = BUF_INIT, a = BUF_INIT;
    uint8_t id[HASH_LEN], b[1][HASH_LEN], x[1][HASH_LEN], y[1][HASH_LEN];
    parts_make(p, 4);
    memset(x[0], 0x77, HASH_LEN);
    memset(y[0], 0x78, HASH_LEN);
    for (uint8_t k = 0; k < 2; k++) { /* node k: chunk k + 1 over chunk 2 - k */
        mark_chunk(&p[k], k + 1);
        id_fill(id, k + 1);
        id_fill(b[0], 2 - k);
        assert_int_equal(manifest_add_extra(&p[k], id, 100 + k, (const uint8_t(*)[HASH_LEN])b, 1),
                         0);
        assert_int_equal(manifest_add_extra(&p[k], b[0], 101 - k, NULL, 0), 0);
    }
    mark_chunk(&p[2], 3);
    id_fill(id, 3);
    assert_int_equal(manifest_add_extra(&p[2], id, 102, (const uint8_t(*)[HASH_LEN])x, 1), 0);
    assert_int_equal(manifest_add_extra(&p[2], x[0], 60, (const uint8_t(*)[HASH_LEN])y, 1), 0);
    assert_int_equal(manifest_add_extra(&p[2], y[0], 61, NULL, 0), 0);
    mark_chunk(&p[3], 4);
    id_fill(id, 4);
    assert_int_equal(manifest_add_extra(&p[3], id, 103, (const uint8_t(*)[HASH_LEN])x, 1), 0);
    assert_int_equal(manifest_add_extra(&p[3], x[0], 60, NULL, 0), 0);
    for (int i = 0; i < 4; i++) {
        manifest_sort_extras(&p[i]);
        assert_int_equal(manifest_validate(&p[i], &err), 0); /* each part is closed */
    }
    assert_int_equal(multinode_merge(p, 2, &m, &err), 0);
    assert_int_equal(m.nextras, 0);
    for (size_t i = 0; i < m.nchunks; i++)
        assert_false(manifest_chunk_recipe(&m, i));
    assert_int_equal(manifest_encode(&m, &a), 0);
    manifest_free(&m);
    assert_int_equal(multinode_merge(p, 4, &m, &err), 0);
    assert_int_equal(m.nextras, 3); /* r 3, r 4 (over X), k X */
    assert_non_null(manifest_extra(&m, x[0]));
    assert_false(manifest_extra(&m, x[0])->recipe);
    assert_null(manifest_extra(&m, y[0]));
    for (size_t i = 0; i < m.nchunks; i++) /* 1 and 2 plain, 3 and 4 recipes */
        assert_int_equal(manifest_chunk_recipe(&m, i),
                         m.chunks[i].id[0] == 3 || m.chunks[i].id[0] == 4);
    buf_reset(&a);
    assert_int_equal(manifest_encode(&m, &a), 0);
    manifest_free(&m);
    parts_free(p, 4);
    buf_free(&a);
    buf_free(&err);
}

/* The same bytes at one path on two nodes: merged once; other bytes: refused. */
static void test_conflict(void **state)
{
    (void)state;
    struct manifest p[2], m;
    struct buf err = BUF_INIT;
    uint8_t c[HASH_LEN];
    parts_make(p, 2);
    memset(c, 0xee, sizeof(c));
    assert_int_equal(manifest_add_file(&p[1], MFILE_REG, "checkpoint-1000/.metadata", 0600, NULL),
                     0);
    assert_int_equal(manifest_add_chunk(&p[1], c, 7), 0);
    manifest_set_digest(&p[1], c);
    assert_int_equal(multinode_merge(p, 2, &m, &err), 0);
    assert_int_equal(m.nfiles, 4);
    assert_string_equal(m.files[2].path, "checkpoint-1000/.metadata"); /* held by both */
    assert_int_equal(m.files[2].node, MANIFEST_NODE_SEVERAL);
    manifest_free(&m);
    p[1].files[p[1].nfiles - 1].digest[0] ^= 1;
    assert_int_equal(multinode_merge(p, 2, &m, &err), CKS_E_MISMATCH);
    assert_non_null(strstr(buf_str(&err),
                           "\"checkpoint-1000/.metadata\" is held by node 0 and node 1 with "
                           "different contents"));
    parts_free(p, 2);
    buf_free(&err);
}

/* Tree digests (manifest version 5) are carried through the merge with
 * their kind: the merged step encodes as version 5 with node fields and
 * parses back equal; one path held with digests of two kinds (nodes that
 * differ in [snapshot] file_digest) is refused, naming both kinds. */
static void test_digest_kinds(void **state)
{
    (void)state;
    struct manifest p[2], m, back;
    struct buf err = BUF_INIT, out = BUF_INIT;
    uint8_t c[HASH_LEN];
    parts_make(p, 2);
    p[1].files[1].dkind = MDIGEST_TREE; /* __1_0.distcp */
    memset(c, 0xee, sizeof(c));
    assert_int_equal(manifest_add_file(&p[1], MFILE_REG, "checkpoint-1000/.metadata", 0644, NULL),
                     0);
    assert_int_equal(manifest_add_chunk(&p[1], c, 7), 0);
    manifest_set_digest(&p[1], c);
    manifest_set_digest_kind(&p[1], MDIGEST_TREE);
    p[0].files[2].dkind = MDIGEST_TREE; /* node 0's .metadata: the same, as a tree */
    assert_int_equal(multinode_merge(p, 2, &m, &err), 0);
    assert_string_equal(m.files[3].path, "checkpoint-1000/__1_0.distcp");
    assert_int_equal(m.files[3].dkind, MDIGEST_TREE);
    assert_int_equal(m.files[2].dkind, MDIGEST_TREE);
    assert_int_equal(m.files[2].node, MANIFEST_NODE_SEVERAL);
    assert_int_equal(m.files[1].dkind, MDIGEST_SHA256); /* __0_0.distcp */
    assert_int_equal(manifest_encode(&m, &out), 0);
    assert_int_equal(strncmp(buf_str(&out), "ckptsync-manifest 5\n", 20), 0);
    assert_int_equal(manifest_parse(out.data, out.len, &back, &err), 0);
    assert_true(manifest_equal(&m, &back));
    manifest_free(&back);
    manifest_free(&m);
    p[0].files[2].dkind = MDIGEST_SHA256;
    assert_int_equal(multinode_merge(p, 2, &m, &err), CKS_E_MISMATCH);
    assert_non_null(strstr(buf_str(&err), "\"checkpoint-1000/.metadata\" has a sha256 digest on "
                                          "node 0 and a tree digest on node 1"));
    parts_free(p, 2);
    buf_free(&out);
    buf_free(&err);
}

/* A file on one node where another has a directory of that name; a root
 * or step that differs. */
static void test_refused(void **state)
{
    (void)state;
    struct manifest p[2], m;
    struct buf err = BUF_INIT;
    parts_make(p, 2);
    assert_int_equal(manifest_add_file(&p[1], MFILE_DIR, "checkpoint-1000/.metadata/x", 0755, NULL),
                     0);
    assert_int_equal(multinode_merge(p, 2, &m, &err), CKS_E_MISMATCH);
    parts_free(p, 2);
    buf_reset(&err);
    parts_make(p, 2);
    p[1].step = 999;
    assert_int_equal(multinode_merge(p, 2, &m, &err), CKS_E_MISMATCH);
    assert_non_null(strstr(buf_str(&err), "node 1's part"));
    p[1].step = 1000;
    assert_int_equal(manifest_set_str(&p[1].root, "checkpoint-2000"), 0);
    assert_int_equal(multinode_merge(p, 2, &m, &err), CKS_E_MISMATCH);
    parts_free(p, 2);
    buf_free(&err);
}

/* The part object: encoded, decoded, checked against its key. */
static void test_object(void **state)
{
    (void)state;
    struct manifest p, back;
    struct buf man = BUF_INIT, body = BUF_INIT, err = BUF_INIT;
    char key[LAYOUT_KEY_MAX];
    struct layout_part lp = {.run = "job", .step = 1000, .rank = 2, .nodes = 4};
    part_make(&p, 2, ids[2], 1796083600);
    snprintf(lp.id, sizeof(lp.id), "%s", ids[2]);
    assert_int_equal(manifest_encode(&p, &man), 0);
    assert_int_equal(multinode_encode(2, 4, man.data, man.len, &body), 0);
    assert_int_equal(layout_part(&lp, key), 0);
    assert_int_equal(multinode_decode(key, body.data, body.len, &back, &err), 0);
    assert_true(manifest_equal(&p, &back));
    manifest_free(&back);
    /* the key says another rank, node count, step or id */
    static const struct layout_part other[] = {
        {.run = "job", .step = 1000, .rank = 1, .nodes = 4},
        {.run = "job", .step = 1000, .rank = 2, .nodes = 3},
        {.run = "job", .step = 1001, .rank = 2, .nodes = 4},
        {.run = "job2", .step = 1000, .rank = 2, .nodes = 4},
    };
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        struct layout_part o = other[i];
        snprintf(o.id, sizeof(o.id), "%s", ids[2]);
        assert_int_equal(layout_part(&o, key), 0);
        if (multinode_decode(key, body.data, body.len, &back, &err) != CKS_E_MISMATCH)
            fail_msg("case %zu: \"%s\" accepted", i, key);
    }
    /* headers that are not exactly multinode_encode's */
    static const char *const heads[] = {"",
                                        "ckptsync-part 1\n",
                                        "ckptsync-part 2\nnode 2 4\n",
                                        "ckptsync-part 1\nnode 02 4\n",
                                        "ckptsync-part 1\nnode 2 4 \n",
                                        "ckptsync-part 1 node 2 4\n"};
    assert_int_equal(layout_part(&lp, key), 0);
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        struct buf bad = BUF_INIT;
        assert_int_equal(buf_puts(&bad, heads[i]), 0);
        assert_int_equal(buf_append(&bad, man.data, man.len), 0);
        if (multinode_decode(key, bad.data, bad.len, &back, &err) >= 0)
            fail_msg("header %zu accepted", i);
        buf_free(&bad);
    }
    /* a truncated body */
    assert_true(multinode_decode(key, body.data, body.len - 5, &back, &err) < 0);
    manifest_free(&p);
    buf_free(&man);
    buf_free(&body);
    buf_free(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge),        cmocka_unit_test(test_conflict),
        cmocka_unit_test(test_digest_kinds), cmocka_unit_test(test_refused),
        cmocka_unit_test(test_object),       cmocka_unit_test(test_merge_recipes),
        cmocka_unit_test(test_merge_klines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
