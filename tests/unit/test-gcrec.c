/*
 * test-gcrec.c — prune's records: every kind both ways and its one
 * spelling, a table of hostile bodies with the code each must get, every
 * truncation, the names (marks, intents, sweeps) both ways, and who counts
 * as a dead owner.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/gcrec.h"
#include "engine/hash.h"

#define MARK "20261201T130310Z-70020ed42e6e199c"

static void id_of(int k, uint8_t id[HASH_LEN])
{
    hash_sha256(&k, sizeof(k), id);
}

static struct gcrec make(enum gc_kind kind)
{
    struct gcrec g;
    gcrec_init(&g, kind);
    if (kind != GC_LEASE && kind != GC_INTENT)
        snprintf(g.mark, sizeof(g.mark), "%s", MARK);
    snprintf(g.host, sizeof(g.host), "gpu-17");
    snprintf(g.boot, sizeof(g.boot), "0123456789abcdef0123456789abcdef");
    g.time = 1796131090;
    return g;
}

static void encode(const struct gcrec *g, struct buf *out)
{
    buf_reset(out);
    assert_int_equal(gcrec_encode(g, out), 0);
}

static void test_roundtrip(void **state)
{
    (void)state;
    struct buf a = BUF_INIT, b = BUF_INIT;
    for (int kind = GC_MARK; kind <= GC_INTENT; kind++) {
        struct gcrec g = make((enum gc_kind)kind), back;
        uint8_t id[HASH_LEN];
        if (kind == GC_MARK || kind == GC_KEEP)
            for (int k = 0; k < 50; k++) {
                id_of(k, id);
                assert_int_equal(gcrec_add_chunk(&g, id, kind == GC_MARK ? (uint64_t)k * 1000 : 0),
                                 0);
            }
        if (kind == GC_MARK)
            assert_int_equal(gcrec_add_snap(&g, "run-1", "20261201T000701.123456Z-3f2a9c1b"), 0);
        if (kind == GC_INTENTS || kind == GC_DONE)
            assert_int_equal(gcrec_add_intent(&g, "20261201T130310Z.21600.0123456789abcdef"), 0);
        if (kind == GC_KEEP) {
            snprintf(g.snap.run, sizeof(g.snap.run), "r1");
            snprintf(g.snap.id, sizeof(g.snap.id), "20261201T000701.123456Z-3f2a9c1b");
        }
        if (kind == GC_SWEEP || kind == GC_LEASE || kind == GC_INTENT)
            g.expires = g.time + 900;
        if (kind == GC_LEASE || kind == GC_INTENT)
            g.seq = 4242;
        gcrec_sort_chunks(&g);
        encode(&g, &a);
        assert_int_equal(gcrec_parse(a.data, a.len, &back), 0);
        assert_int_equal(back.kind, kind);
        assert_int_equal(back.nchunks, g.nchunks);
        assert_int_equal(back.nsnaps, g.nsnaps);
        assert_int_equal(back.nintents, g.nintents);
        assert_int_equal(back.expires, g.expires);
        assert_int_equal(back.seq, g.seq);
        assert_string_equal(back.mark, g.mark);
        assert_string_equal(back.boot, g.boot);
        for (size_t i = 0; i < g.nchunks; i++) {
            assert_true(gcrec_has_chunk(&back, g.chunks[i].id));
            assert_int_equal(back.chunks[i].size, g.chunks[i].size);
        }
        id_of(999, id);
        assert_false(gcrec_has_chunk(&back, id));
        encode(&back, &b); /* one spelling */
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.data, b.data, a.len);
        /* every truncation is refused */
        for (size_t n = 0; n < a.len; n++) {
            struct gcrec t;
            assert_true(gcrec_parse(a.data, n, &t) < 0);
            gcrec_free(&t);
        }
        gcrec_free(&back);
        gcrec_free(&g);
    }
    buf_free(&a);
    buf_free(&b);
}

static void test_sort_dedup(void **state)
{
    (void)state;
    struct gcrec g = make(GC_MARK);
    uint8_t id[HASH_LEN];
    for (int k = 0; k < 300; k++) {
        id_of(k % 100, id);
        assert_int_equal(gcrec_add_chunk(&g, id, 1), 0);
    }
    gcrec_sort_chunks(&g);
    assert_int_equal(g.nchunks, 100);
    for (size_t i = 1; i < g.nchunks; i++)
        assert_true(memcmp(g.chunks[i - 1].id, g.chunks[i].id, HASH_LEN) < 0);
    gcrec_free(&g);
}

/* A body with its digest made right, so the check under test is reached. */
static int parse_text(const char *body)
{
    struct buf b = BUF_INIT;
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    struct gcrec g;
    buf_printf(&b, "%s", body);
    hash_sha256(b.data, b.len, d);
    hex_encode(d, HASH_LEN, hex);
    buf_printf(&b, "end %s\n", hex);
    int e = gcrec_parse(b.data, b.len, &g);
    gcrec_free(&g);
    buf_free(&b);
    return e;
}

#define HEAD(kind, mark) "ckptsync-gc 1\nkind " kind "\nmark " mark "\nhost h\nboot -\ntime 5\n"
#define C1 "c 0000000000000000000000000000000000000000000000000000000000000001 5\n"
#define C2 "c 0000000000000000000000000000000000000000000000000000000000000002 5\n"
#define HEAD2(kind, mark) "ckptsync-gc 2\nkind " kind "\nmark " mark "\nhost h\nboot -\ntime 5\n"
#define R1A                                                                                        \
    "r 0000000000000000000000000000000000000000000000000000000000000001.00000000000000aa 5\n"
#define R1B                                                                                        \
    "r 0000000000000000000000000000000000000000000000000000000000000001.00000000000000ab 5\n"
#define TAIL(n) "expires -\nseq -\nsnapshot -\nitems " #n "\n"

static void test_hostile(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int want;
    } cases[] = {
        {HEAD("mark", MARK) "expires -\nseq -\nsnapshot -\nitems 2\n" C1 C2, 0},
        {HEAD("mark", MARK) "expires -\nseq -\nsnapshot -\nitems 2\n" C2 C1,
         CKS_E_FORMAT}, /* unsorted */
        {HEAD("mark", MARK) "expires -\nseq -\nsnapshot -\nitems 2\n" C1 C1,
         CKS_E_FORMAT}, /* twice */
        {HEAD("mark", MARK) "expires -\nseq -\nsnapshot -\nitems 3\n" C1 C2,
         CKS_E_FORMAT}, /* count lies */
        {HEAD("mark", MARK) "expires -\nseq -\nsnapshot -\nitems 1\n" C1 C2,
         CKS_E_FORMAT}, /* extra line */
        {HEAD("mark", MARK) "expires -\nseq -\nsnapshot -\nitems 99999999\n" C1, CKS_E_FORMAT},
        {HEAD("mark",
              MARK) "expires -\nseq -\nsnapshot -\nitems 1\n"
                    "c 000000000000000000000000000000000000000000000000000000000000000A 5\n",
         CKS_E_FORMAT},
        {HEAD("mark",
              MARK) "expires -\nseq -\nsnapshot -\nitems 1\n"
                    "c 0000000000000000000000000000000000000000000000000000000000000001 05\n",
         CKS_E_FORMAT},
        {HEAD("mark", MARK) "expires -\nseq -\nsnapshot -\nitems 01\n" C1, CKS_E_FORMAT},
        {HEAD("mark", MARK) "expires 5\nseq -\nsnapshot -\nitems 0\n",
         CKS_E_FORMAT}, /* expires on a mark */
        {HEAD("sweep", MARK) "expires -\nseq -\nsnapshot -\nitems 0\n",
         CKS_E_FORMAT}, /* sweep without */
        {HEAD("sweep", MARK) "expires 9\nseq -\nsnapshot -\nitems 0\n", 0},
        {HEAD("keep", MARK) "expires -\nseq -\nsnapshot -\nitems 1\n" C1,
         CKS_E_FORMAT}, /* keep of nothing */
        {HEAD("keep", MARK) "expires -\nseq -\nsnapshot r/x\nitems 1\n" C1, 0},
        {HEAD("keep", MARK) "expires -\nseq -\nsnapshot r/../x\nitems 0\n", CKS_E_FORMAT},
        {HEAD("intents", MARK) "expires -\nseq -\nsnapshot -\nitems 1\ni nope\n", CKS_E_FORMAT},
        {HEAD("intents", MARK) "expires -\nseq -\nsnapshot -\nitems 1\n" C1,
         CKS_E_FORMAT}, /* wrong item */
        {HEAD("lease", "-") "expires -\nseq -\nsnapshot -\nitems 0\n",
         CKS_E_FORMAT},                                                    /* lease without pid */
        {HEAD("lease", "-") "expires -\nseq 7\nsnapshot -\nitems 0\n", 0}, /* released */
        {HEAD("lease", MARK) "expires -\nseq 7\nsnapshot -\nitems 0\n", CKS_E_FORMAT},
        {HEAD("mark", "-") "expires -\nseq -\nsnapshot -\nitems 0\n", CKS_E_FORMAT},
        {HEAD("intent", "-") "expires 9\nseq 7\nsnapshot -\nitems 0\n", 0},
        {HEAD("frob", MARK) "expires -\nseq -\nsnapshot -\nitems 0\n", CKS_E_FORMAT},
        {"ckptsync-gc 3\nkind mark\n", CKS_E_VERSION},
        {"ckptsync-gc 2\nkind mark\n", CKS_E_FORMAT}, /* version 2 is known: truncated */
        /* version 2: recipe items, one order with the chunks */
        {HEAD2("mark", MARK) TAIL(4) C1 R1A R1B C2, 0},
        {HEAD2("mark", MARK) TAIL(1) C1, CKS_E_FORMAT}, /* 2 without r: one spelling, 1 */
        {HEAD2("keep", MARK) "expires -\nseq -\nsnapshot r/x\nitems 2\n" C1 R1A, 0},
        {HEAD("mark", MARK) TAIL(2) C1 R1A, CKS_E_FORMAT},   /* r in version 1 */
        {HEAD2("mark", MARK) TAIL(2) R1A C1, CKS_E_FORMAT},  /* r before c of its id */
        {HEAD2("mark", MARK) TAIL(2) R1B R1A, CKS_E_FORMAT}, /* sigs unsorted */
        {HEAD2("mark", MARK) TAIL(2) R1A R1A, CKS_E_FORMAT}, /* twice */
        {HEAD2("mark", MARK) TAIL(1) "r "
                                     "0000000000000000000000000000000000000000000000000000000000000"
                                     "001.00000000000000a 5\n",
         CKS_E_FORMAT}, /* short sig */
        {HEAD2("mark", MARK) TAIL(1) "r "
                                     "0000000000000000000000000000000000000000000000000000000000000"
                                     "001.00000000000000AA 5\n",
         CKS_E_FORMAT}, /* upper case */
        {HEAD2("mark", MARK)
             TAIL(1) "r 0000000000000000000000000000000000000000000000000000000000000001 "
                     "00000000000000aa 5\n",
         CKS_E_FORMAT}, /* no dot */
        {HEAD2("mark", MARK) TAIL(1) "r "
                                     "0000000000000000000000000000000000000000000000000000000000000"
                                     "001.00000000000000aa\n",
         CKS_E_FORMAT},                                     /* no size */
        {HEAD2("intents", MARK) TAIL(1) R1A, CKS_E_FORMAT}, /* wrong item */
        {"ckptsync-gc 1\r\nkind mark\n", CKS_E_FORMAT},
        {"ckptsync-gc 1\nkind mark\nmark " MARK "\nhost h h\n", CKS_E_FORMAT},
        {"ckptsync-gc 1\nkind mark\nmark " MARK "\nhost h\nboot 12\n", CKS_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int e = parse_text(cases[i].body);
        if (e != cases[i].want)
            fail_msg("case %zu: got %d, want %d:\n%s", i, e, cases[i].want, cases[i].body);
    }
    /* a wrong digest */
    struct buf b = BUF_INIT;
    struct gcrec g = make(GC_SWEEP), back;
    g.expires = 10;
    encode(&g, &b);
    b.data[b.len - 3] ^= 1;
    assert_true(gcrec_parse(b.data, b.len, &back) < 0);
    gcrec_free(&back);
    b.data[b.len - 3] ^= 1;
    buf_printf(&b, "x");
    assert_int_equal(gcrec_parse(b.data, b.len, &back), CKS_E_FORMAT); /* trailing bytes */
    gcrec_free(&back);
    buf_free(&b);
}

/* Recipe items: a record with one is version 2, one without is written
 * as version 1 byte for byte (what an older build reads), and both kinds
 * of item are found by (id, recipe, sig). */
static void test_recipes(void **state)
{
    (void)state;
    struct buf a = BUF_INIT;
    struct gcrec g = make(GC_MARK), back;
    uint8_t id[HASH_LEN], other[HASH_LEN], s1[MANIFEST_RECIPE_SIG] = {1},
                                           s2[MANIFEST_RECIPE_SIG] = {2};
    id_of(1, id);
    id_of(2, other);
    assert_int_equal(gcrec_add_chunk(&g, other, 7), 0);
    encode(&g, &a);
    assert_int_equal(memcmp(a.data, "ckptsync-gc 1\n", 14), 0); /* no recipe: version 1 */
    assert_int_equal(gcrec_add_recipe(&g, id, s2, 9), 0);
    assert_int_equal(gcrec_add_recipe(&g, id, s1, 8), 0);
    assert_int_equal(gcrec_add_chunk(&g, id, 5), 0);
    assert_int_equal(gcrec_add_recipe(&g, id, s1, 8), 0); /* a duplicate */
    gcrec_sort_chunks(&g);
    assert_int_equal(g.nchunks, 4);
    encode(&g, &a);
    assert_int_equal(memcmp(a.data, "ckptsync-gc 2\n", 14), 0);
    assert_int_equal(gcrec_parse(a.data, a.len, &back), 0);
    assert_int_equal(back.version, 2);
    assert_int_equal(back.nchunks, 4);
    assert_true(gcrec_has_chunk(&back, id));
    assert_true(gcrec_has_chunk(&back, other));
    assert_true(gcrec_has_object(&back, id, true, s1));
    assert_true(gcrec_has_object(&back, id, true, s2));
    assert_false(gcrec_has_object(&back, other, true, s1)); /* only its plain chunk */
    for (size_t i = 0; i < back.nchunks; i++) {
        assert_int_equal(back.chunks[i].recipe, g.chunks[i].recipe);
        assert_int_equal(back.chunks[i].size, g.chunks[i].size);
        assert_memory_equal(back.chunks[i].sig, g.chunks[i].sig, MANIFEST_RECIPE_SIG);
    }
    for (size_t n = 0; n < a.len; n++) { /* every truncation is refused */
        struct gcrec t;
        assert_true(gcrec_parse(a.data, n, &t) < 0);
        gcrec_free(&t);
    }
    gcrec_free(&back);
    gcrec_free(&g);
    buf_free(&a);
}

/* A keep record as the build before recipes wrote it (version 1, text
 * fixed here) is still read. */
static void test_old_record(void **state)
{
    (void)state;
    assert_int_equal(
        parse_text(HEAD("keep", MARK) "expires -\nseq -\nsnapshot r/x\nitems 2\n" C1 C2), 0);
    struct buf b = BUF_INIT;
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    struct gcrec g;
    buf_printf(&b, "%s", HEAD("mark", MARK) TAIL(2) C1 C2);
    hash_sha256(b.data, b.len, d);
    hex_encode(d, HASH_LEN, hex);
    buf_printf(&b, "end %s\n", hex);
    assert_int_equal(gcrec_parse(b.data, b.len, &g), 0);
    assert_int_equal(g.version, 1);
    assert_int_equal(g.nchunks, 2);
    assert_false(g.chunks[0].recipe || g.chunks[1].recipe);
    struct buf again = BUF_INIT; /* and written back the same */
    encode(&g, &again);
    assert_int_equal(again.len, b.len);
    assert_memory_equal(again.data, b.data, b.len);
    gcrec_free(&g);
    buf_free(&b);
    buf_free(&again);
}

static void test_names(void **state)
{
    (void)state;
    char m[GC_MARK_LEN + 1], in[GC_INTENT_MAX + 1];
    int64_t t, e;
    uint64_t ttl;
    assert_int_equal(gc_mark_make(m), 0);
    assert_true(gc_mark_check(m));
    assert_true(gc_mark_time(m) > 1700000000);
    assert_true(gc_mark_check(MARK));
    assert_int_equal(gc_mark_time(MARK), 1796130190);
    assert_false(gc_mark_check("20261201T130310Z-70020ED42E6E199C"));
    assert_false(gc_mark_check("20261301T130310Z-70020ed42e6e199c")); /* month 13 */
    assert_false(gc_mark_check("20260230T130310Z-70020ed42e6e199c")); /* February 30 */
    assert_false(gc_mark_check("20261201T130310Z-70020ed42e6e199"));
    assert_int_equal(gc_intent_make(1796131090, 21600, in), 0);
    assert_int_equal(gc_intent_parse(in, &t, &ttl), 0);
    assert_int_equal(t, 1796131090);
    assert_int_equal(ttl, 21600);
    assert_int_equal(strncmp(in, "20261201T131810Z.21600.", 23), 0);
    assert_int_equal(gc_intent_parse("20261201T125810Z.021600.0123456789abcdef", &t, &ttl),
                     CKS_E_FORMAT);
    assert_int_equal(gc_intent_parse("20261201T125810Z.21600.0123456789abcde", &t, &ttl),
                     CKS_E_FORMAT);
    assert_int_equal(gc_intent_parse("20261201T125810Z..0123456789abcdef", &t, &ttl), CKS_E_FORMAT);
    assert_int_equal(gc_sweep_parse("sweep.1796131090.0fb6d63884d0368c", &e), 0);
    assert_int_equal(e, 1796131090);
    assert_int_equal(gc_sweep_parse("sweep.-1.0fb6d63884d0368c", &e), CKS_E_FORMAT);
    assert_int_equal(gc_sweep_parse("keep.0fb6d63884d0368c", &e), CKS_E_FORMAT);
}

static void test_owner_dead(void **state)
{
    (void)state;
    struct gcrec g = make(GC_INTENT);
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    snprintf(g.host, sizeof(g.host), "%.128s", host);
    gc_boot_id(g.boot);
    if (!g.boot[0])
        skip();
    g.time = time(NULL);
    g.seq = getpid();
    assert_false(gc_owner_dead(&g, 5)); /* we run */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    g.seq = child;
    assert_true(gc_owner_dead(&g, 5)); /* reaped: gone */
    /* A pid given out again: the process under it started after the
     * record was written (by more than the skew), so it is not the writer. */
    child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    g.seq = child;
    assert_false(gc_owner_dead(&g, 5)); /* written now: it may be the writer */
    g.time = time(NULL) - 100;
    assert_true(gc_owner_dead(&g, 5));    /* written 100 s before it started */
    assert_false(gc_owner_dead(&g, 300)); /* within the skew: cannot tell */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    g.seq = getpid();
    snprintf(g.boot, sizeof(g.boot), "00000000000000000000000000000000");
    assert_false(gc_owner_dead(&g, 5)); /* another boot (or host): cannot tell */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),  cmocka_unit_test(test_sort_dedup),
        cmocka_unit_test(test_hostile),    cmocka_unit_test(test_names),
        cmocka_unit_test(test_owner_dead), cmocka_unit_test(test_recipes),
        cmocka_unit_test(test_old_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
