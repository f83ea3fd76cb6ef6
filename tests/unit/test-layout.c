/*
 * test-layout.c — the repository's key layout (store/layout.h): every
 * kind builds the key format.h documents and parses back to the same
 * fields; listing prefixes; hostile keys a bucket may list ("..", slashes
 * in a field, overlong fields, foreign folders, non-canonical chunk names)
 * are refused, and so are fields that cannot form a key; the encryption
 * helpers (which keys name a run, which are sealed).
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
#include "engine/hash.h"
#include "store/layout.h"

#define ID "20261201T000701Z-3f2a9c1b7d0e"
#define HEX64 "ab00000000000000000000000000000000000000000000000000000000000001"

struct kcase {
    enum layout_kind kind;
    const char *dir, *name, *key;
};

static const struct kcase good[] = {
    {LAYOUT_REPO, NULL, NULL, "repo"},
    {LAYOUT_REPO_CAND, NULL, "0123456789abcdef0123456789abcdef",
     "repo.d/0123456789abcdef0123456789abcdef"},
    {LAYOUT_PROBE, NULL, "00000000deadbeef", "probe/00000000deadbeef"},
    {LAYOUT_KEYSLOT, NULL, "0123456789abcdef", "keys/0123456789abcdef"},
    {LAYOUT_RUNNAME, NULL, "k-0123456789abcdef0123456789abcdef",
     "runs/k-0123456789abcdef0123456789abcdef"},
    {LAYOUT_CHUNK, NULL, HEX64, "chunks/ab/" HEX64},
    {LAYOUT_SNAPSHOT, "run-1", ID, "snapshots/run-1/" ID},
    {LAYOUT_COMMIT, "r1", "g3.s500." ID, "commits/r1/g3.s500." ID},
    {LAYOUT_LINEAGE, "r1", "g1.claim.0123456789abcdef", "lineage/r1/g1.claim.0123456789abcdef"},
    {LAYOUT_FORGET, "r.x_y", "g0.s-1." ID, "forget/r.x_y/g0.s-1." ID},
    {LAYOUT_HANDOFF_V1, "r1", NULL, "handoff/r1"},
    {LAYOUT_REF_V1, "r1", "latest", "refs/r1/latest"},
    {LAYOUT_INTENT, NULL, "20261201T000701Z.600.0123456789abcdef",
     "intents/20261201T000701Z.600.0123456789abcdef"},
    {LAYOUT_GC, "20261201T000701Z-0123456789abcdef", "sweep.1796083621.0123456789abcdef",
     "gc/20261201T000701Z-0123456789abcdef/sweep.1796083621.0123456789abcdef"},
    {LAYOUT_LEASE, NULL, "000000000042", "locks/prune/000000000042"},
    {LAYOUT_RECIPE, NULL, HEX64 ".0123456789abcdef", "recipes/ab/" HEX64 ".0123456789abcdef"},
};

static void test_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        const struct kcase *c = &good[i];
        char key[LAYOUT_KEY_MAX];
        struct layout_key k;
        if (layout_key(c->kind, c->dir, c->name, key) != 0 || strcmp(key, c->key))
            fail_msg("case %zu: built \"%s\", want \"%s\"", i, key, c->key);
        memset(&k, 0x5a, sizeof(k));
        if (layout_parse(c->key, &k) != 0)
            fail_msg("case %zu: \"%s\" does not parse", i, c->key);
        assert_int_equal(k.kind, c->kind);
        assert_string_equal(k.dir, c->dir ? c->dir : "");
        assert_string_equal(k.name, c->name ? c->name : "");
    }
}

static void test_chunk_and_snapshot(void **state)
{
    (void)state;
    uint8_t id[HASH_LEN];
    char key[LAYOUT_KEY_MAX];
    struct layout_key k;
    assert_int_equal(hex_decode(HEX64, HASH_LEN, id), 0);
    layout_chunk(id, key);
    assert_string_equal(key, "chunks/ab/" HEX64);
    assert_int_equal(layout_parse(key, &k), 0);
    assert_memory_equal(k.id, id, HASH_LEN);
    uint8_t sig[MANIFEST_RECIPE_SIG] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
    layout_recipe(id, sig, key);
    assert_string_equal(key, "recipes/ab/" HEX64 ".0123456789abcdef");
    assert_int_equal(layout_parse(key, &k), 0);
    assert_int_equal(k.kind, LAYOUT_RECIPE);
    assert_memory_equal(k.id, id, HASH_LEN);
    assert_memory_equal(k.sig, sig, sizeof(sig));
    assert_int_equal(layout_snapshot("r1", ID, key), 0);
    assert_string_equal(key, "snapshots/r1/" ID);
    assert_string_equal(layout_repo(), "repo");
}

static void test_prefixes(void **state)
{
    (void)state;
    static const struct {
        enum layout_kind kind;
        const char *dir, *want;
    } cases[] = {
        {LAYOUT_SNAPSHOT, NULL, "snapshots/"},
        {LAYOUT_SNAPSHOT, "r1", "snapshots/r1/"},
        {LAYOUT_FORGET, "r1", "forget/r1/"},
        {LAYOUT_HANDOFF_V1, "r1", "handoff/r1"},
        {LAYOUT_GC, "m", "gc/m/"},
        {LAYOUT_GC, NULL, "gc/"},
        {LAYOUT_LEASE, NULL, "locks/prune/"},
        {LAYOUT_CHUNK, NULL, "chunks/"},
        {LAYOUT_KEYSLOT, NULL, "keys/"},
        {LAYOUT_REPO_CAND, NULL, "repo.d/"},
    };
    char out[LAYOUT_KEY_MAX];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(layout_prefix(cases[i].kind, cases[i].dir, out), 0);
        assert_string_equal(out, cases[i].want);
    }
    assert_int_equal(layout_prefix(LAYOUT_SNAPSHOT, "a/b", out), -EINVAL);
    assert_int_equal(layout_prefix(LAYOUT_SNAPSHOT, "..", out), -EINVAL);
    assert_int_equal(layout_prefix(LAYOUT_SNAPSHOT, "", out), -EINVAL);
    assert_int_equal(layout_prefix(LAYOUT_INTENT, "r1", out), -EINVAL); /* has no dir */
    assert_int_equal(layout_prefix(LAYOUT_REPO, NULL, out), -EINVAL);
    assert_int_equal(layout_prefix(LAYOUT_NKINDS, NULL, out), -EINVAL);
}

/* What a bucket may list that is not ours, or is an attack on the layout. */
static const char *const hostile[] = {
    "",
    "/",
    "repo/",
    "repox",
    "snapshots",
    "snapshots/",
    "snapshots/r1",
    "snapshots/r1/",
    "snapshots//" ID,
    "snapshots/../" ID,
    "snapshots/./" ID,
    "snapshots/r1/..",
    "snapshots/r1/.",
    "snapshots/r1/.hidden",
    "snapshots/r1/a/b",
    "snapshots/r1/" ID "/",
    "snapshots/r 1/" ID,
    "snapshots/r1/id%2F",
    "snapshots/r1/0123456789012345678901234567890123456789012345678901234567890123456789",
    "Snapshots/r1/" ID,
    "snapshotsx/r1/" ID,
    "chunks/ab/" HEX64 "0",
    "chunks/ab/" HEX64 "/",
    "chunks/AB/AB00000000000000000000000000000000000000000000000000000000000001",
    "chunks/cd/" HEX64,
    "chunks/" HEX64,
    "chunks/a/" HEX64,
    "recipes/ab/" HEX64,
    "recipes/ab/" HEX64 ".",
    "recipes/ab/" HEX64 ".0123456789abcde",
    "recipes/ab/" HEX64 ".0123456789abcdef0",
    "recipes/ab/" HEX64 ".0123456789ABCDEF",
    "recipes/ab/" HEX64 "x0123456789abcdef",
    "recipes/cd/" HEX64 ".0123456789abcdef",
    "recipes/" HEX64 ".0123456789abcdef",
    "chunks/ab/" HEX64 ".0123456789abcdef",
    "chunks/ab/ab0000000000000000000000000000000000000000000000000000000000000g",
    "handoff/",
    "handoff/r1/x",
    "handoff/..",
    "gc/m",
    "gc/m/",
    "gc/../mark",
    "gc/m/a/b",
    "intents/",
    "intents/a/b",
    "intents/..",
    "locks/prune",
    "locks/prune/",
    "locks/x/000000000001",
    "keys/",
    "keys/../repo",
    "repo.d/a/b",
    "probe/.",
    "elsewhere/x",
    "commits/r1/../x",
    "lineage/../g1.claim.0123456789abcdef",
};

static void test_hostile_keys(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
        struct layout_key k;
        memset(&k, 0x5a, sizeof(k));
        k.kind = LAYOUT_NKINDS;
        if (layout_parse(hostile[i], &k) != CKS_E_FORMAT)
            fail_msg("\"%s\" parsed (kind %d)", hostile[i], (int)k.kind);
        assert_int_equal(k.kind, LAYOUT_NKINDS); /* untouched */
    }
}

static void test_overlong(void **state)
{
    (void)state;
    char run[LAYOUT_DIR_MAX + 2], name[LAYOUT_NAME_MAX + 2], key[LAYOUT_KEY_MAX * 2];
    struct layout_key k;
    memset(run, 'r', sizeof(run) - 1);
    run[sizeof(run) - 1] = 0; /* one byte too long */
    assert_int_equal(layout_prefix(LAYOUT_SNAPSHOT, run, key), -EINVAL);
    assert_int_equal(layout_snapshot(run, ID, key), -EINVAL);
    assert_string_equal(key, "");
    snprintf(key, sizeof(key), "snapshots/%s/" ID, run);
    assert_int_equal(layout_parse(key, &k), CKS_E_FORMAT);
    run[sizeof(run) - 2] = 0; /* the longest run */
    assert_int_equal(layout_snapshot(run, ID, key), 0);
    assert_int_equal(layout_parse(key, &k), 0);
    assert_string_equal(k.dir, run);

    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = 0;
    assert_int_equal(layout_key(LAYOUT_INTENT, NULL, name, key), -EINVAL);
    snprintf(key, sizeof(key), "intents/%s", name);
    assert_int_equal(layout_parse(key, &k), CKS_E_FORMAT);
    name[sizeof(name) - 2] = 0;
    assert_int_equal(layout_key(LAYOUT_INTENT, NULL, name, key), 0);
    assert_int_equal(layout_parse(key, &k), 0);

    /* a gc key whose two fields are each at the limit still fits */
    assert_int_equal(layout_key(LAYOUT_GC, run, name, key), 0);
    assert_int_equal(layout_parse(key, &k), 0);
    assert_string_equal(k.name, name);
}

static void test_bad_fields(void **state)
{
    (void)state;
    char key[LAYOUT_KEY_MAX];
    assert_int_equal(layout_snapshot("a/b", ID, key), -EINVAL);
    assert_int_equal(layout_snapshot("..", ID, key), -EINVAL);
    assert_int_equal(layout_snapshot(".", ID, key), -EINVAL);
    assert_int_equal(layout_snapshot("r1", "../x", key), -EINVAL);
    assert_int_equal(layout_snapshot("r1", ".x", key), -EINVAL);
    assert_int_equal(layout_snapshot("r1", "", key), -EINVAL);
    assert_int_equal(layout_snapshot("r1", NULL, key), -EINVAL);
    assert_int_equal(layout_snapshot(NULL, ID, key), -EINVAL);
    assert_int_equal(layout_key(LAYOUT_INTENT, NULL, "a/b", key), -EINVAL);
    assert_int_equal(layout_key(LAYOUT_INTENT, NULL, "..", key), -EINVAL);
    assert_int_equal(layout_key(LAYOUT_GC, "..", "mark", key), -EINVAL);
    assert_int_equal(layout_key(LAYOUT_GC, "m", NULL, key), -EINVAL);
    assert_int_equal(layout_key(LAYOUT_CHUNK, NULL, "ab", key), -EINVAL);
    assert_int_equal(layout_key(LAYOUT_HANDOFF_V1, "r/1", NULL, key), -EINVAL);
    assert_int_equal(layout_key(LAYOUT_NKINDS, "r1", "x", key), -EINVAL);
    assert_string_equal(key, "");
}

static void test_records(void **state)
{
    (void)state;
    struct lineage_rec r, back;
    char key[LAYOUT_KEY_MAX];
    memset(&r, 0, sizeof(r));
    r.kind = LINEAGE_HANDOFF;
    snprintf(r.run, sizeof(r.run), "r1");
    r.gen = 7;
    r.step = 1000;
    snprintf(r.id, sizeof(r.id), ID);
    assert_int_equal(layout_record(&r, key, sizeof(key)), 0);
    assert_string_equal(key, "lineage/r1/g7.handoff.s1000." ID);
    assert_int_equal(layout_record_parse(key, &back), 0);
    assert_int_equal(back.kind, LINEAGE_HANDOFF);
    assert_int_equal(back.gen, 7);
    assert_int_equal(back.step, 1000);
    assert_string_equal(back.id, ID);
    /* a record key is only one in a record folder */
    assert_int_equal(layout_record_parse("snapshots/r1/g7.s1." ID, &back), CKS_E_FORMAT);
    assert_int_equal(layout_record_parse("commits/../g7.s1." ID, &back), CKS_E_FORMAT);
    assert_int_equal(layout_record(&r, key, strlen("lineage/r1/g7.handoff.s1000." ID)), -EINVAL);
}

static void test_runs_and_sealing(void **state)
{
    (void)state;
    size_t top = 0;
    assert_int_equal(layout_run_top("snapshots/r1/" ID, &top), LAYOUT_SNAPSHOT);
    assert_int_equal(top, strlen("snapshots/"));
    assert_int_equal(layout_run_top("handoff/r1", &top), LAYOUT_HANDOFF_V1);
    assert_int_equal(top, strlen("handoff/"));
    assert_int_equal(layout_run_top("refs/r1/latest", &top), LAYOUT_REF_V1);
    assert_int_equal(layout_run_top("chunks/ab/" HEX64, &top), -1);
    assert_int_equal(layout_run_top("gc/m/mark", &top), -1);
    assert_int_equal(layout_run_top("snapshots", &top), -1);
    assert_true(layout_prefix_has_runs(""));
    assert_true(layout_prefix_has_runs("snap"));
    assert_true(layout_prefix_has_runs("snapshots/r1/"));
    assert_true(layout_prefix_has_runs("handoff/"));
    assert_false(layout_prefix_has_runs("chunks/"));
    assert_false(layout_prefix_has_runs("gc/"));
    assert_false(layout_sealed("repo"));
    assert_false(layout_sealed("repo.d/0123"));
    assert_false(layout_sealed("keys/0123456789abcdef"));
    assert_false(layout_sealed("probe/0123"));
    assert_true(layout_sealed("repox"));
    assert_true(layout_sealed("runs/k-0123"));
    assert_true(layout_sealed("chunks/ab/" HEX64));
    assert_true(layout_sealed("snapshots/r1/" ID));
    assert_true(layout_sealed("locks/prune/000000000001"));
}

/* parts/<run>/s<step>.<K>-of-<N>.<id>: built and parsed back; keys a
 * bucket may list that are not canonical parts are refused. */
static void test_parts(void **state)
{
    (void)state;
    struct layout_part p = {.run = "job", .step = 1000, .rank = 3, .nodes = 4, .id = ID}, q;
    char key[LAYOUT_KEY_MAX];
    assert_int_equal(layout_part(&p, key), 0);
    assert_string_equal(key, "parts/job/s1000.3-of-4." ID);
    memset(&q, 0x5a, sizeof(q));
    assert_int_equal(layout_part_parse(key, &q), 0);
    assert_string_equal(q.run, "job");
    assert_int_equal(q.step, 1000);
    assert_int_equal(q.rank, 3);
    assert_int_equal(q.nodes, 4);
    assert_string_equal(q.id, ID);
    static const struct layout_part bad[] = {
        {.run = "job", .step = -1, .rank = 0, .nodes = 2, .id = ID},
        {.run = "job", .step = 1, .rank = 2, .nodes = 2, .id = ID},
        {.run = "job", .step = 1, .rank = 0, .nodes = 0, .id = ID},
        {.run = "job", .step = 1, .rank = 0, .nodes = LAYOUT_NODES_MAX + 1, .id = ID},
        {.run = "..", .step = 1, .rank = 0, .nodes = 2, .id = ID},
        {.run = "job", .step = 1, .rank = 0, .nodes = 2, .id = ".x"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (layout_part(&bad[i], key) != -EINVAL)
            fail_msg("bad part %zu built \"%s\"", i, key);
    static const char *const hostile_parts[] = {
        "parts/job/s1000.4-of-4." ID,
        "parts/job/s1000.0-of-0." ID,
        "parts/job/s01000.0-of-4." ID,
        "parts/job/s1000.00-of-4." ID,
        "parts/job/s1000.0-of-04." ID,
        "parts/job/s-1.0-of-4." ID,
        "parts/job/s1000.0-of-4.",
        "parts/job/s1000.0-of-4..x",
        "parts/job/1000.0-of-4." ID,
        "parts/job/s1000.0of4." ID,
        "parts/job/s99999999999999999999.0-of-4." ID,
        "parts/job/s1.0-of-4097." ID,
        "parts/../s1.0-of-2." ID,
        "parts/job/x/s1.0-of-2." ID,
        "snapshots/job/s1.0-of-2." ID,
    };
    for (size_t i = 0; i < sizeof(hostile_parts) / sizeof(hostile_parts[0]); i++)
        if (layout_part_parse(hostile_parts[i], &q) != CKS_E_FORMAT)
            fail_msg("\"%s\" parsed as a part", hostile_parts[i]);
    assert_int_equal(layout_run_top("parts/job/x", &(size_t){0}), LAYOUT_PART);
    assert_int_equal(layout_part_prefix("job", 1000, key), 0);
    assert_string_equal(key, "parts/job/s1000.");
    assert_int_equal(layout_part_prefix("job", -1, key), -EINVAL);
    assert_int_equal(layout_part_prefix("..", 1, key), -EINVAL);
    /* what a bad part claims is parsed, to be named */
    assert_int_equal(layout_part_parse_any("parts/job/s1000.5-of-4." ID, &q), 0);
    assert_int_equal(q.rank, 5);
    assert_int_equal(q.nodes, 4);
    assert_int_equal(layout_part_parse_any("parts/job/s1000.0-of-0." ID, &q), CKS_E_FORMAT);
}

/* nodeerr/<run>/s<step>.<K>-of-<N>.<UTC>.<16 hex>: built, parsed back,
 * one spelling only. */
static void test_nodeerr(void **state)
{
    (void)state;
    struct layout_nodeerr n = {.run = "job",
                               .step = 7,
                               .rank = 1,
                               .nodes = 2,
                               .time = 1764806400,
                               .tag = "0123456789abcdef"},
                          q;
    char key[LAYOUT_KEY_MAX];
    assert_int_equal(layout_nodeerr(&n, key), 0);
    assert_string_equal(key, "nodeerr/job/s7.1-of-2.20251204T000000Z.0123456789abcdef");
    assert_int_equal(layout_nodeerr_parse(key, &q), 0);
    assert_memory_equal(&n, &q, sizeof(n));
    assert_int_equal(layout_run_top(key, &(size_t){0}), LAYOUT_NODEERR);
    static const char *const hostile_ne[] = {
        "nodeerr/job/s7.2-of-2.20251204T000000Z.0123456789abcdef",
        "nodeerr/job/s7.1-of-2.20251204T000000.0123456789abcdef",
        "nodeerr/job/s7.1-of-2.20251204T000000Z.0123456789ABCDEF",
        "nodeerr/job/s7.1-of-2.20251304T000000Z.0123456789abcdef",
        "nodeerr/job/s7.1-of-2.20251204T000000Z.0123456789abcde",
        "nodeerr/job/s7.1-of-2.20251204T000000Z-0123456789abcdef",
        "nodeerr/../s7.1-of-2.20251204T000000Z.0123456789abcdef",
    };
    for (size_t i = 0; i < sizeof(hostile_ne) / sizeof(hostile_ne[0]); i++)
        if (layout_nodeerr_parse(hostile_ne[i], &q) != CKS_E_FORMAT)
            fail_msg("\"%s\" parsed as a node error", hostile_ne[i]);
    n.rank = 2;
    assert_int_equal(layout_nodeerr(&n, key), -EINVAL);
    n.rank = 1;
    snprintf(n.tag, sizeof(n.tag), "xyz");
    assert_int_equal(layout_nodeerr(&n, key), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip), cmocka_unit_test(test_chunk_and_snapshot),
        cmocka_unit_test(test_prefixes),   cmocka_unit_test(test_hostile_keys),
        cmocka_unit_test(test_overlong),   cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_records),    cmocka_unit_test(test_runs_and_sealing),
        cmocka_unit_test(test_parts),      cmocka_unit_test(test_nodeerr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
