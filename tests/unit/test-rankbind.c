/*
 * test-rankbind.c — a node's share of a merged step (engine/rankbind.h):
 * the kind of a path by the frameworks' names, what node K of M gets
 * (M = N: its own files and the shared ones; M != N: every DCP shard,
 * every unbound file), the refusal naming every rank-bound file a smaller
 * world would drop and the ranks, --allow-reshard, ZeRO with and without
 * a universal checkpoint, and the directories and hard-link targets a
 * selected entry needs; of a version 6 step, the recipes and bases the
 * selected chunks need (engine/msubset.h).
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
#include "engine/rankbind.h"

static void test_kinds(void **state)
{
    static const struct {
        const char *path;
        enum rankbind_kind kind;
    } cases[] = {
        {"global_step1000/zero_pp_rank_3_mp_rank_00_optim_states.pt", RANKBIND_ZERO},
        {"global_step1000/bf16_zero_pp_rank_0_mp_rank_01_optim_states.pt", RANKBIND_ZERO},
        {"global_step1000/mp_rank_01_model_states.pt", RANKBIND_MP},
        {"iter_0001000/mp_rank_02/model_optim_rng.pt", RANKBIND_MP},
        {"iter_0001000/mp_rank_02_001/distrib_optim.pt", RANKBIND_MP},
        {"iter_0001000/mp_rank_02", RANKBIND_MP},
        {"iter_0001000/MP_RANK_02", RANKBIND_MP},
        {"checkpoint-1000/__3_0.distcp", RANKBIND_DCP},
        {"checkpoint-1000/__12_7.distcp", RANKBIND_DCP},
        {"checkpoint-1000/__x_0.distcp", RANKBIND_NONE},
        {"checkpoint-1000/__3_.distcp", RANKBIND_NONE},
        {"checkpoint-1000/.metadata", RANKBIND_NONE},
        {"checkpoint-1000/rng_state_5.pth", RANKBIND_STATE},
        {"checkpoint-1000/random_states_2.pkl", RANKBIND_STATE},
        {"checkpoint-1000/rng_state.pth", RANKBIND_NONE},
        {"iter_0001000/train_dataloader_rank3.pt", RANKBIND_STATE},
        {"iter_0001000/Sampler_state_rank_1.pt", RANKBIND_STATE},
        {"iter_0001000/dataloader_config.json", RANKBIND_NONE},
        {"latest_checkpointed_iteration.txt", RANKBIND_NONE},
        {"latest", RANKBIND_NONE},
        {"bump_mp_rank_00", RANKBIND_NONE},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (rankbind_kind(cases[i].path) != cases[i].kind)
            fail_msg("\"%s\": kind %d, want %d", cases[i].path, rankbind_kind(cases[i].path),
                     cases[i].kind);
}

/* A merged step of 4 nodes, Megatron-like: node k wrote
 * iter/mp_rank_0k/model_optim_rng.pt and iter/rng_state_k.pth, node 0
 * the tracker file and a config; the directory iter was on every node. */
static void step_make(struct manifest *m, bool dcp)
{
    uint8_t c[HASH_LEN];
    char path[96];
    manifest_init(m);
    snprintf(m->id, sizeof(m->id), "%s", "20261201T000709.000001Z-m0123456789ab");
    assert_int_equal(manifest_set_str(&m->run, "job"), 0);
    assert_int_equal(manifest_set_str(&m->host, "gpu-0"), 0);
    m->step = 1000;
    m->chunk_min = 64;
    m->chunk_avg = 256;
    m->chunk_max = 1024;
    m->normalization = 1;
    m->nodes = 4;
    assert_int_equal(manifest_add_file(m, MFILE_DIR, "iter", 0755, NULL), 0);
    m->files[m->nfiles - 1].node = MANIFEST_NODE_SEVERAL;
    for (int k = 0; k < 4; k++) {
        memset(c, k + 1, sizeof(c));
        if (!dcp) {
            snprintf(path, sizeof(path), "iter/mp_rank_0%d", k);
            assert_int_equal(manifest_add_file(m, MFILE_DIR, path, 0755, NULL), 0);
            m->files[m->nfiles - 1].node = k;
            snprintf(path, sizeof(path), "iter/mp_rank_0%d/model_optim_rng.pt", k);
        } else {
            snprintf(path, sizeof(path), "iter/__%d_0.distcp", k);
        }
        assert_int_equal(manifest_add_file(m, MFILE_REG, path, 0644, NULL), 0);
        assert_int_equal(manifest_add_chunk(m, c, 100 + (uint32_t)k), 0);
        manifest_set_digest(m, c);
        manifest_set_digest_kind(m, k % 2 ? MDIGEST_TREE : MDIGEST_SHA256); /* either kind */
        m->files[m->nfiles - 1].node = k;
        snprintf(path, sizeof(path), "iter/rng_state_%d.pth", k);
        assert_int_equal(manifest_add_file(m, MFILE_REG, path, 0644, NULL), 0);
        m->files[m->nfiles - 1].node = k;
        if (k == 0) {
            assert_int_equal(manifest_add_file(m, MFILE_REG, "iter/.metadata", 0644, NULL), 0);
            assert_int_equal(manifest_add_file(m, MFILE_REG, "iter/config.json", 0644, NULL), 0);
        }
        if (k == 2) /* a per-node file the rules do not bind */
            assert_int_equal(manifest_add_file(m, MFILE_REG, "iter/node2.log", 0644, NULL), 0);
        if (k == 2)
            m->files[m->nfiles - 1].node = 2;
    }
    assert_int_equal(manifest_validate(m, NULL), 0);
}

/* The selected paths, joined by spaces. */
static void paths(const struct manifest *m, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < m->nfiles && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? " " : "", m->files[i].path);
}

static void check_select(const struct manifest *m, unsigned k, unsigned count, bool allow,
                         int want_e, const char *want)
{
    struct manifest sub;
    struct buf err = BUF_INIT;
    char got[1024];
    int e = rankbind_select(m, k, count, allow, &sub, &err);
    if (e != want_e)
        fail_msg("node %u of %u: %d (%s), want %d", k, count, e, buf_str(&err), want_e);
    if (e == 0) {
        paths(&sub, got, sizeof(got));
        if (strcmp(got, want) != 0)
            fail_msg("node %u of %u:\n  got  %s\n  want %s", k, count, got, want);
        assert_int_equal(manifest_validate(&sub, NULL), 0);
        assert_string_equal(sub.id, m->id);
        for (size_t i = 0; i < sub.nfiles; i++) /* each file's digest and its kind kept */
            for (size_t j = 0; j < m->nfiles; j++)
                if (!strcmp(sub.files[i].path, m->files[j].path)) {
                    assert_int_equal(sub.files[i].dkind, m->files[j].dkind);
                    assert_memory_equal(sub.files[i].digest, m->files[j].digest, HASH_LEN);
                }
        manifest_free(&sub);
    }
    buf_free(&err);
}

static void test_same_count(void **state)
{
    struct manifest m;
    (void)state;
    step_make(&m, false);
    check_select(&m, 0, 4, false, 0,
                 "iter iter/mp_rank_00 iter/mp_rank_00/model_optim_rng.pt iter/rng_state_0.pth "
                 "iter/.metadata iter/config.json");
    check_select(&m, 2, 4, false, 0,
                 "iter iter/.metadata iter/config.json iter/mp_rank_02 "
                 "iter/mp_rank_02/model_optim_rng.pt iter/rng_state_2.pth iter/node2.log");
    check_select(&m, 3, 4, false, 0,
                 "iter iter/.metadata iter/config.json iter/mp_rank_03 "
                 "iter/mp_rank_03/model_optim_rng.pt iter/rng_state_3.pth");
    manifest_free(&m);
}

static void test_fewer_nodes(void **state)
{
    struct manifest m, sub;
    struct buf err = BUF_INIT;
    (void)state;
    step_make(&m, false);
    assert_int_equal(rankbind_select(&m, 0, 2, false, &sub, &err), CKS_E_RESHARD);
    const char *e = buf_str(&err);
    assert_non_null(strstr(e, "written by 4 nodes; a world of 2 nodes"));
    assert_non_null(
        strstr(e, "\"iter/mp_rank_02/model_optim_rng.pt\" (node 2, model-parallel rank)"));
    assert_non_null(strstr(e, "\"iter/mp_rank_02\" (node 2, model-parallel rank)"));
    assert_non_null(strstr(e, "\"iter/rng_state_2.pth\" (node 2, per-rank RNG/dataloader state)"));
    assert_non_null(strstr(e, "\"iter/rng_state_3.pth\" (node 3"));
    assert_non_null(strstr(e, "ranks that would be dropped: 2, 3\n"));
    assert_non_null(strstr(e, "--allow-reshard"));
    assert_null(strstr(e, "rng_state_0")); /* rank 0 and 1's state is kept */
    assert_null(strstr(e, "node2.log"));   /* not bound: goes to every node */
    buf_free(&err);
    /* allowed: node 1 gets its own, the shared and the unbound files of all */
    check_select(&m, 1, 2, true, 0,
                 "iter iter/.metadata iter/config.json iter/mp_rank_01 "
                 "iter/mp_rank_01/model_optim_rng.pt iter/rng_state_1.pth iter/node2.log");
    /* more nodes: nothing dropped, a new node gets the shared files */
    check_select(&m, 5, 6, false, 0, "iter iter/.metadata iter/config.json iter/node2.log");
    check_select(&m, 4, 4, false, -EINVAL, "");
    check_select(&m, 0, 0, false, -EINVAL, "");
    manifest_free(&m);
}

static void test_dcp(void **state)
{
    struct manifest m;
    struct buf err = BUF_INIT;
    (void)state;
    step_make(&m, true);
    /* same count: node 1's shard; two nodes: every shard, but rank 2 and
     * 3's RNG state would be dropped */
    check_select(&m, 1, 4, false, 0,
                 "iter iter/.metadata iter/config.json iter/__1_0.distcp iter/rng_state_1.pth");
    check_select(&m, 1, 2, false, CKS_E_RESHARD, "");
    check_select(&m, 1, 2, true, 0,
                 "iter iter/__0_0.distcp iter/.metadata iter/config.json iter/__1_0.distcp "
                 "iter/rng_state_1.pth iter/__2_0.distcp iter/node2.log iter/__3_0.distcp");
    buf_free(&err);
    manifest_free(&m);
}

/* ZeRO partitions: any other world size is refused (their partitioning is
 * the old world's) unless a universal checkpoint is in the step; a hard
 * link brings its file, a file its directories. */
/* An empty merged step of two nodes, id `id`. */
static void two_nodes(struct manifest *m, const char *id)
{
    manifest_init(m);
    snprintf(m->id, sizeof(m->id), "%s", id);
    assert_int_equal(manifest_set_str(&m->run, "job"), 0);
    assert_int_equal(manifest_set_str(&m->host, "h"), 0);
    m->chunk_min = 64, m->chunk_avg = 256, m->chunk_max = 1024, m->normalization = 1;
    m->nodes = 2;
}

static void test_zero(void **state)
{
    struct manifest m, sub;
    struct buf err = BUF_INIT;
    (void)state;
    two_nodes(&m, "s1");
    assert_int_equal(manifest_add_file(&m, MFILE_DIR, "gs/a", 0755, NULL), 0);
    assert_int_equal(
        manifest_add_file(&m, MFILE_REG, "gs/a/zero_pp_rank_0_mp_rank_00.pt", 0644, NULL), 0);
    assert_int_equal(
        manifest_add_file(&m, MFILE_REG, "gs/zero_pp_rank_1_mp_rank_00.pt", 0644, NULL), 0);
    m.files[2].node = 1;
    assert_int_equal(
        manifest_add_file(&m, MFILE_HARDLINK, "gs/b", 0644, "gs/a/zero_pp_rank_0_mp_rank_00.pt"),
        0);
    m.files[3].node = 1;
    assert_int_equal(manifest_validate(&m, NULL), 0);
    /* more nodes: still refused, and no rank is dropped */
    assert_int_equal(rankbind_select(&m, 0, 3, false, &sub, &err), CKS_E_RESHARD);
    assert_non_null(strstr(buf_str(&err), "(node 0, ZeRO partition, no universal checkpoint)"));
    assert_non_null(strstr(buf_str(&err), "ranks that would be dropped: none"));
    /* node 1 of 2 (same count): its partition, and the hard link's file with its directory */
    check_select(&m, 1, 2, false, 0,
                 "gs/a gs/a/zero_pp_rank_0_mp_rank_00.pt gs/zero_pp_rank_1_mp_rank_00.pt gs/b");
    assert_false(rankbind_universal(&m));
    assert_int_equal(manifest_add_file(&m, MFILE_DIR, "gs_universal", 0755, NULL), 0);
    assert_true(rankbind_universal(&m));
    check_select(&m, 0, 3, false, 0, "gs/a gs/a/zero_pp_rank_0_mp_rank_00.pt gs/b gs_universal");
    /* not a merged step: the caller restores it whole */
    m.nodes = 0;
    for (size_t i = 0; i < m.nfiles; i++)
        m.files[i].node = 0;
    assert_int_equal(rankbind_select(&m, 0, 3, false, &sub, &err), 1);
    buf_free(&err);
    manifest_free(&m);
}

/* A file of node `node` with chunks of the given fill bytes. */
static void rb_file(struct manifest *m, const char *path, int node, const int *fills, size_t n)
{
    uint8_t c[HASH_LEN];
    assert_int_equal(manifest_add_file(m, MFILE_REG, path, 0644, NULL), 0);
    m->files[m->nfiles - 1].node = node;
    for (size_t i = 0; i < n; i++) {
        memset(c, fills[i], sizeof(c));
        assert_int_equal(manifest_add_chunk(m, c, 100 + (uint32_t)fills[i]), 0);
    }
}

/* An r line (bases: fill bytes) or, with nbases 0, a k line; marks the id's c lines. */
static void rb_extra(struct manifest *m, int fill, const int *bases, size_t nbases)
{
    uint8_t id[HASH_LEN], b[MANIFEST_MAX_BASES][HASH_LEN];
    memset(id, fill, sizeof(id));
    for (size_t i = 0; i < nbases; i++)
        memset(b[i], bases[i], HASH_LEN);
    assert_int_equal(
        manifest_add_extra(m, id, 100 + (uint32_t)fill, (const uint8_t(*)[HASH_LEN])b, nbases), 0);
    for (size_t i = 0; nbases && i < m->nchunks; i++)
        if (m->chunks[i].id[0] == fill)
            assert_int_equal(manifest_mark_recipe(m, i, true), 0);
}

/* "r <fill> <nbases>" or "k <fill>" for each extra of m, and "*" after a
 * marked chunk's fill, joined by spaces. */
static void rb_extras(const struct manifest *m, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < m->nchunks; i++)
        n += (size_t)snprintf(out + n, cap - n, "%d%s ", m->chunks[i].id[0],
                              manifest_chunk_recipe(m, i) ? "*" : "");
    for (size_t i = 0; i < m->nextras; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%c %d %u", i ? " " : "| ",
                              m->extras[i].recipe ? 'r' : 'k', m->extras[i].id[0],
                              m->extras[i].nbases);
}

/* A version 6 merged step: node K's files keep their recipes, with the r
 * and k lines they need, a base in a file the node does not get as a k
 * line; a recipe of a file not selected is left out. */
static void test_recipes(void **state)
{
    struct manifest m, sub;
    struct buf err = BUF_INIT;
    char got[512];
    (void)state;
    two_nodes(&m, "s6");
    for (int k = 0; k < 2; k++) {
        assert_int_equal(
            manifest_add_file(&m, MFILE_DIR, k ? "mp_rank_01" : "mp_rank_00", 0755, NULL), 0);
        m.files[m.nfiles - 1].node = k;
    }
    rb_file(&m, "mp_rank_00/a.pt", 0, (int[]){1, 2}, 2);    /* 2 = r over 1 */
    rb_file(&m, "mp_rank_00/c.pt", 0, (int[]){3}, 1);       /* a base of 5 */
    rb_file(&m, "mp_rank_01/b.pt", 1, (int[]){4, 5, 6}, 3); /* 5 over 4, 3, 9; 6 over 5 */
    rb_extra(&m, 2, (int[]){1}, 1);
    rb_extra(&m, 5, (int[]){3, 4, 9}, 3);
    rb_extra(&m, 6, (int[]){5}, 1);
    rb_extra(&m, 9, NULL, 0); /* a plain chunk needed only as a base */
    manifest_sort_extras(&m);
    assert_int_equal(manifest_validate(&m, &err), 0);
    check_select(&m, 0, 2, false, 0, "mp_rank_00 mp_rank_00/a.pt mp_rank_00/c.pt");
    assert_int_equal(rankbind_select(&m, 0, 2, false, &sub, &err), 0);
    rb_extras(&sub, got, sizeof(got));
    assert_string_equal(got, "1 2* 3 | r 2 1");
    manifest_free(&sub);
    check_select(&m, 1, 2, false, 0, "mp_rank_01 mp_rank_01/b.pt");
    assert_int_equal(rankbind_select(&m, 1, 2, false, &sub, &err), 0);
    rb_extras(&sub, got, sizeof(got));
    assert_string_equal(got, "4 5* 6* | k 3 0 r 5 3 r 6 1 k 9 0");
    manifest_free(&sub);
    buf_free(&err);
    manifest_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),       cmocka_unit_test(test_same_count),
        cmocka_unit_test(test_fewer_nodes), cmocka_unit_test(test_dcp),
        cmocka_unit_test(test_zero),        cmocka_unit_test(test_recipes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
