/*
 * test-lineage.c — commit, claim and handoff records: keys both ways for
 * the three kinds, a table of keys that are not ours, bodies both ways and
 * their one spelling, a table of hostile bodies with the code each must
 * get, every truncation and altered byte, a body checked against the key
 * it was read from, the "newest" order, and the field charset.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/hash.h"
#include "engine/lineage.h"
#include "store/layout.h"

#define HX "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define TAG "0123456789abcdef"
#define ID "20261201T000701.123456Z-3f2a9c1b"
#define LONGID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* ---- helpers ------------------------------------------------------------ */

static struct lineage_rec rec_make(enum lineage_kind kind, const char *run, int64_t gen,
                                   int64_t step, const char *id_or_tag)
{
    struct lineage_rec r;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    snprintf(r.run, sizeof(r.run), "%s", run);
    r.gen = gen;
    r.step = step;
    if (kind == LINEAGE_CLAIM)
        snprintf(r.tag, sizeof(r.tag), "%s", id_or_tag);
    else
        snprintf(r.id, sizeof(r.id), "%s", id_or_tag);
    snprintf(r.host, sizeof(r.host), "%s", "gpu-17");
    r.time = 1796083621;
    if (kind == LINEAGE_COMMIT)
        hash_sha256("manifest", 8, r.manifest);
    return r;
}

static void assert_rec_equal(const struct lineage_rec *a, const struct lineage_rec *b)
{
    assert_int_equal(a->kind, b->kind);
    assert_string_equal(a->run, b->run);
    assert_int_equal(a->gen, b->gen);
    assert_string_equal(a->id, b->id);
    assert_int_equal(a->step, b->step);
    assert_string_equal(a->tag, b->tag);
    assert_string_equal(a->host, b->host);
    assert_string_equal(a->instance, b->instance);
    assert_int_equal(a->time, b->time);
    assert_memory_equal(a->manifest, b->manifest, HASH_LEN);
}

/* text + "end <sha256 of text>\n" */
static void append_end(struct buf *b, const char *text, size_t len)
{
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    assert_int_equal(buf_append(b, text, len), 0);
    hash_sha256(text, len, d);
    hex_encode(d, HASH_LEN, hex);
    assert_int_equal(buf_printf(b, "end %s\n", hex), 0);
}

/* ---- keys ----------------------------------------------------------------- */

struct key_case {
    enum lineage_kind kind;
    const char *run;
    int64_t gen;
    int64_t step;          /* commit, handoff */
    const char *id_or_tag; /* the tag for a claim */
    const char *key;
};

static const struct key_case key_cases[] = {
    {LINEAGE_COMMIT, "r1", 0, 1000, ID, "commits/r1/g0.s1000." ID},
    {LINEAGE_COMMIT, "r1", 3, -1, "s", "commits/r1/g3.s-1.s"},
    {LINEAGE_COMMIT, "run-1.x_y", 999999999999LL, INT64_MAX, "a.b-c.d",
     "commits/run-1.x_y/g999999999999.s9223372036854775807.a.b-c.d"},
    {LINEAGE_COMMIT, ".cache", 10, 0, "-x-", "commits/.cache/g10.s0.-x-"},
    {LINEAGE_COMMIT, "r", 1, 5, LONGID, "commits/r/g1.s5." LONGID},
    {LINEAGE_COMMIT, "r", 1, 5, "x.claim.y", "commits/r/g1.s5.x.claim.y"},
    {LINEAGE_CLAIM, "r1", 0, -1, TAG, "lineage/r1/g0.claim." TAG},
    {LINEAGE_CLAIM, "a-b.c", 123456789012LL, -1, "ffffffffffffffff",
     "lineage/a-b.c/g123456789012.claim.ffffffffffffffff"},
    {LINEAGE_HANDOFF, "r1", 2, 1000, ID, "lineage/r1/g2.handoff.s1000." ID},
    {LINEAGE_HANDOFF, "r1", 2, -1, "a..b", "lineage/r1/g2.handoff.s-1.a..b"},
    {LINEAGE_HANDOFF, "r1", 999999999999LL, 7, "x.handoff.s1.y",
     "lineage/r1/g999999999999.handoff.s7.x.handoff.s1.y"},
    /* an id that looks like a claim's tag is still a handoff's id */
    {LINEAGE_HANDOFF, "r", 1, 1, "claim." TAG, "lineage/r/g1.handoff.s1.claim." TAG},
};

static void test_key_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(key_cases) / sizeof(key_cases[0]); i++) {
        const struct key_case *c = &key_cases[i];
        struct lineage_rec r = rec_make(c->kind, c->run, c->gen, c->step, c->id_or_tag), back;
        char key[1024];
        int e = layout_record(&r, key, sizeof(key));
        if (e != 0 || strcmp(key, c->key))
            fail_msg("case %zu: layout_record gave %d \"%s\", want \"%s\"", i, e, e ? "" : key,
                     c->key);
        memset(&back, 0x5a, sizeof(back));
        e = layout_record_parse(c->key, &back);
        if (e != 0)
            fail_msg("case %zu: \"%s\" does not parse (%d)", i, c->key, e);
        assert_int_equal(back.kind, c->kind);
        assert_string_equal(back.run, c->run);
        assert_int_equal(back.gen, c->gen);
        if (c->kind == LINEAGE_CLAIM) {
            /* a claim's key names no snapshot */
            assert_string_equal(back.tag, c->id_or_tag);
            assert_string_equal(back.id, "");
            assert_int_equal(back.step, -1);
        } else {
            assert_string_equal(back.id, c->id_or_tag);
            assert_int_equal(back.step, c->step);
            assert_string_equal(back.tag, "");
        }
        /* and the parsed key forms the same key again */
        assert_int_equal(layout_record(&back, key, sizeof(key)), 0);
        assert_string_equal(key, c->key);
    }
}

static const char *const bad_keys[] = {
    "",
    "commits/",
    "commits/r1",
    "commits/r1/",
    "commits/r1/g1",
    "commits/r1/g1.",
    "commits/r1/g1.s1",
    "commits/r1/g1.s1.",   /* empty id */
    "commits/r1/g01.s1.x", /* leading zeros */
    "commits/r1/g00.s1.x",
    "commits/r1/g1.s01.x",
    "commits/r1/g1.s00.x",
    "commits/r1/g1.s-2.x", /* only -1 means unknown */
    "commits/r1/g1.s-0.x",
    "commits/r1/g1.s-01.x",
    "commits/r1/g1.s+1.x",
    "commits/r1/g-1.s1.x",
    "commits/r1/g+1.s1.x",
    "commits/r1/g.s1.x",
    "commits/r1/1.s1.x",
    "commits/r1/g1.1.x",
    "commits/r1/g1x.s1.x",
    "commits/r1/g1.s1x.x",
    "commits/r1/g1000000000000.s1.x", /* above LINEAGE_GEN_MAX */
    "commits/r1/g99999999999999999999.s1.x",
    "commits/r1/g1.s9223372036854775808.x", /* above INT64_MAX */
    "commits/r1/g1.s99999999999999999999.x",
    "commits/r1/g1.s1..x",  /* id starting with '.' */
    "commits/r1/g1.s1.a/b", /* extra slash */
    "commits/r1/x/g1.s1.x",
    "commits//g1.s1.x",   /* empty run */
    "commits/../g1.s1.x", /* bad runs */
    "commits/./g1.s1.x",
    "commits/a b/g1.s1.x",
    "commits/r1/g1.s1.a b", /* id charset */
    "commits/r1/g1.s1.\xc3\xa9",
    "commits/r1/g1.s1." LONGID "x", /* id too long */
    "commits/r1/g1.handoff.s1.x",   /* a handoff is not a commit */
    "commits/r1/g1.claim." TAG,
    "commit/r1/g1.s1.x",
    "Commits/r1/g1.s1.x",
    "/commits/r1/g1.s1.x",
    "snapshots/r1/x",
    "refs/r1/latest",
    "lineage/r1/g1.s1.x",  /* a commit key under lineage/ */
    "lineage/r1/g1.foo.x", /* unknown kind */
    "lineage/r1/g1.claims." TAG,
    "lineage/r1/g1.handof.s1.x",
    "lineage/r1/g1.handoff",
    "lineage/r1/g1.handoff.",
    "lineage/r1/g1.handoff.s1",
    "lineage/r1/g1.handoff.s1.",
    "lineage/r1/g1.handoff.1.x",
    "lineage/r1/g1.handoff.s01.x",
    "lineage/r1/g1.handoff.s-2.x",
    "lineage/r1/g01.handoff.s1.x",
    "lineage/r1/g1.handoff.s1..x",
    "lineage/r1/g1.handoff.s1.x/y",
    "lineage/../g1.handoff.s1.x",
    "lineage/r1/g1.claim.",
    "lineage/r1/g1.claim",
    "lineage/r1/g1.claim.0123456789ABCDEF",  /* upper-case tag */
    "lineage/r1/g1.claim.0123456789abcde",   /* 15 hex */
    "lineage/r1/g1.claim.0123456789abcdef0", /* 17 hex */
    "lineage/r1/g1.claim.0123456789abcdeg",
    "lineage/r1/g1.claim." TAG ".x",
    "lineage/r1/g1.claim." TAG "/",
    "lineage/r1/g01.claim." TAG,
    "lineage/r1/g1000000000000.claim." TAG,
    "lineage/r1/x/g1.claim." TAG,
    "lineage/r1/g1.claim.s1." TAG,
};

static void test_key_rejects(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++) {
        struct lineage_rec r;
        memset(&r, 0x5a, sizeof(r));
        int e = layout_record_parse(bad_keys[i], &r);
        if (e != CKS_E_FORMAT)
            fail_msg("key \"%s\": got %d, want CKS_E_FORMAT", bad_keys[i], e);
        assert_int_equal(((unsigned char *)&r)[0], 0x5a); /* left alone */
    }
}

static void test_key_long_fields(void **state)
{
    char run[MANIFEST_MAX_FIELD + 2], key[2048];
    struct lineage_rec r, back;
    (void)state;
    /* the longest run and id a key can carry */
    memset(run, 'r', sizeof(run));
    run[MANIFEST_MAX_FIELD] = 0;
    r = rec_make(LINEAGE_COMMIT, run, LINEAGE_GEN_MAX, INT64_MAX, LONGID);
    assert_int_equal(layout_record(&r, key, 1024), 0);
    assert_int_equal(layout_record_parse(key, &back), 0);
    assert_string_equal(back.run, run);
    assert_string_equal(back.id, LONGID);
    /* one byte more is not a run */
    int n = snprintf(key, sizeof(key), "commits/%.*sr/g1.s1.x", (int)MANIFEST_MAX_FIELD, run);
    assert_true(n > 0 && (size_t)n < sizeof(key));
    assert_int_equal(layout_record_parse(key, &back), CKS_E_FORMAT);
    n = snprintf(key, sizeof(key), "lineage/%.*sr/g1.claim." TAG, (int)MANIFEST_MAX_FIELD, run);
    assert_true(n > 0 && (size_t)n < sizeof(key));
    assert_int_equal(layout_record_parse(key, &back), CKS_E_FORMAT);
    /* a buffer too small for the key */
    r = rec_make(LINEAGE_COMMIT, "r1", 1, 1, "x");
    assert_int_equal(layout_record(&r, key, strlen("commits/r1/g1.s1.x")), -EINVAL);
    assert_int_equal(layout_record(&r, key, strlen("commits/r1/g1.s1.x") + 1), 0);
    assert_string_equal(key, "commits/r1/g1.s1.x");
}

/* Records no key can be formed for (and no body written). */
struct bad_rec {
    const char *name;
    struct lineage_rec r;
};

/* Forget records: the commit key's shape under forget/, body kind
 * "forget", and neither kind passes for the other. */
static void test_forget(void **state)
{
    struct lineage_rec r = rec_make(LINEAGE_FORGET, "run-1", 3, 500, ID), k, b;
    struct buf body = BUF_INIT;
    char key[1024];
    (void)state;
    r.time = 1796131090;
    snprintf(r.host, sizeof(r.host), "gpu-17");
    assert_int_equal(layout_record(&r, key, sizeof(key)), 0);
    assert_string_equal(key, "forget/run-1/g3.s500." ID);
    assert_int_equal(layout_record_parse(key, &k), 0);
    assert_int_equal(k.kind, LINEAGE_FORGET);
    assert_int_equal(k.gen, 3);
    assert_int_equal(k.step, 500);
    assert_string_equal(k.id, ID);
    assert_int_equal(lineage_encode(&r, &body), 0);
    assert_int_equal(strncmp((const char *)body.data, "ckptsync-forget 1\n", 18), 0);
    assert_int_equal(layout_record_read(key, body.data, body.len, &b), 0);
    assert_int_equal(b.kind, LINEAGE_FORGET);
    /* the same body under a commit key is a mismatch */
    assert_int_equal(layout_record_read("commits/run-1/g3.s500." ID, body.data, body.len, &b),
                     CKS_E_MISMATCH);
    assert_int_equal(layout_record_parse("forget/run-1/g3.claim.0123456789abcdef", &k),
                     CKS_E_FORMAT);
    assert_int_equal(layout_record_parse("forget/run-1/x", &k), CKS_E_FORMAT);
    buf_free(&body);
}

static void test_key_and_encode_refuse(void **state)
{
    struct bad_rec cases[] = {
        {"run ..", rec_make(LINEAGE_COMMIT, "..", 1, 1, "x")},
        {"run .", rec_make(LINEAGE_COMMIT, ".", 1, 1, "x")},
        {"empty run", rec_make(LINEAGE_COMMIT, "", 1, 1, "x")},
        {"run with slash", rec_make(LINEAGE_HANDOFF, "a/b", 1, 1, "x")},
        {"negative gen", rec_make(LINEAGE_COMMIT, "r", -1, 1, "x")},
        {"gen too big", rec_make(LINEAGE_CLAIM, "r", LINEAGE_GEN_MAX + 1, -1, TAG)},
        {"step -2", rec_make(LINEAGE_COMMIT, "r", 1, -2, "x")},
        {"commit without id", rec_make(LINEAGE_COMMIT, "r", 1, 1, "")},
        {"handoff without id", rec_make(LINEAGE_HANDOFF, "r", 1, 1, "")},
        {"id starts with .", rec_make(LINEAGE_COMMIT, "r", 1, 1, ".x")},
        {"id with space", rec_make(LINEAGE_HANDOFF, "r", 1, 1, "a b")},
        {"claim without tag", rec_make(LINEAGE_CLAIM, "r", 1, -1, "")},
        {"claim tag upper-case", rec_make(LINEAGE_CLAIM, "r", 1, -1, "0123456789ABCDEF")},
        {"claim tag short", rec_make(LINEAGE_CLAIM, "r", 1, -1, "0123456789abcde")},
        {"claim tag not hex", rec_make(LINEAGE_CLAIM, "r", 1, -1, "0123456789abcdez")},
        {"claim with a bad base", rec_make(LINEAGE_CLAIM, "r", 1, -1, TAG)},
        {"negative time", rec_make(LINEAGE_COMMIT, "r", 1, 1, "x")},
        {"kind out of range", rec_make(LINEAGE_COMMIT, "r", 1, 1, "x")},
    };
    (void)state;
    snprintf(cases[15].r.id, sizeof(cases[15].r.id), "%s", ".base");
    cases[16].r.time = -1;
    cases[17].r.kind = (enum lineage_kind)(LINEAGE_FORGET + 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char key[1024];
        struct buf b = BUF_INIT;
        assert_int_equal(buf_puts(&b, "keep"), 0);
        int e = layout_record(&cases[i].r, key, sizeof(key));
        if (e != -EINVAL)
            fail_msg("%s: layout_record gave %d, want -EINVAL", cases[i].name, e);
        e = lineage_encode(&cases[i].r, &b);
        if (e != -EINVAL)
            fail_msg("%s: lineage_encode gave %d, want -EINVAL", cases[i].name, e);
        assert_string_equal(buf_str(&b), "keep");
        buf_free(&b);
    }
}

/* ---- bodies --------------------------------------------------------------- */

static void test_body_round_trip(void **state)
{
    struct lineage_rec recs[] = {
        rec_make(LINEAGE_COMMIT, "r1", 0, 1000, ID),
        rec_make(LINEAGE_COMMIT, "r1", LINEAGE_GEN_MAX, -1, "a.b-c"),
        rec_make(LINEAGE_COMMIT, "r1", 5, INT64_MAX, LONGID),
        rec_make(LINEAGE_CLAIM, "r1", 1, -1, TAG), /* from nothing */
        rec_make(LINEAGE_CLAIM, "r1", 2, 1000, "ffffffffffffffff"),
        rec_make(LINEAGE_HANDOFF, "r1", 2, 1000, ID),
        rec_make(LINEAGE_HANDOFF, ".r", 0, -1, "x"),
    };
    (void)state;
    snprintf(recs[4].id, sizeof(recs[4].id), "%s", ID); /* resumed from ID */
    snprintf(recs[1].instance, sizeof(recs[1].instance), "%s", "p5.48xlarge");
    recs[2].time = INT64_MAX;
    recs[5].time = 0;
    for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++) {
        struct buf b = BUF_INIT, again = BUF_INIT;
        struct lineage_rec back;
        char key[1024];
        assert_int_equal(lineage_encode(&recs[i], &b), 0);
        int e = lineage_parse(b.data, b.len, &back);
        if (e != 0)
            fail_msg("record %zu does not parse back (%d):\n%s", i, e, buf_str(&b));
        assert_rec_equal(&recs[i], &back);
        /* one spelling */
        assert_int_equal(lineage_encode(&back, &again), 0);
        assert_int_equal(again.len, b.len);
        assert_memory_equal(again.data, b.data, b.len);
        /* and it agrees with its own key */
        assert_int_equal(layout_record(&recs[i], key, sizeof(key)), 0);
        memset(&back, 0, sizeof(back));
        assert_int_equal(layout_record_read(key, b.data, b.len, &back), 0);
        assert_rec_equal(&recs[i], &back);
        assert_true(b.len <= LINEAGE_MAX_BYTES);
        buf_free(&b);
        buf_free(&again);
    }
}

/* The exact bytes, so a change of format is a decision, not an accident. */
static void test_body_golden(void **state)
{
    struct lineage_rec r = rec_make(LINEAGE_COMMIT, "r1", 3, 1000, ID), back;
    struct buf b = BUF_INIT, want = BUF_INIT;
    (void)state;
    memset(r.manifest, 0xab, HASH_LEN);
    snprintf(r.host, sizeof(r.host), "%s", "gpu 17/x\n\xc3\xa9");
    static const char commit[] =
        "ckptsync-commit 1\nrun r1\ngen 3\nsnapshot " ID "\nstep 1000\ntag -\n"
        "host gpu_17_x___\ninstance -\ntime 1796083621\nmanifest "
        "abababababababababababababababababababababababababababababababab\n";
    append_end(&want, commit, strlen(commit));
    assert_int_equal(lineage_encode(&r, &b), 0);
    assert_string_equal(buf_str(&b), buf_str(&want));
    assert_int_equal(lineage_parse(b.data, b.len, &back), 0);
    assert_string_equal(back.host, "gpu_17_x___"); /* sanitised */
    assert_string_equal(back.instance, "");        /* unknown */
    buf_free(&b);
    buf_free(&want);

    /* a claim from nothing: no snapshot, no manifest; appended to what is there */
    r = rec_make(LINEAGE_CLAIM, "r1", 4, -1, TAG);
    snprintf(r.host, sizeof(r.host), "%s", "");
    snprintf(r.instance, sizeof(r.instance), "%s", "i/x");
    assert_int_equal(buf_puts(&b, "prefix"), 0);
    assert_int_equal(lineage_encode(&r, &b), 0);
    static const char claim[] = "ckptsync-claim 1\nrun r1\ngen 4\nsnapshot -\nstep -1\ntag " TAG
                                "\nhost -\ninstance i_x\ntime 1796083621\nmanifest -\n";
    assert_int_equal(buf_puts(&want, "prefix"), 0);
    append_end(&want, claim, strlen(claim));
    assert_string_equal(buf_str(&b), buf_str(&want));
    assert_int_equal(lineage_parse(b.data + 6, b.len - 6, &back), 0);
    assert_string_equal(back.host, "-");
    assert_string_equal(back.id, "");
    buf_free(&b);
    buf_free(&want);
}

/* Hostile bodies.  The lines of a valid one, to be varied: */
#define L_RUN "run r1\n"
#define L_GEN "gen 7\n"
#define L_SNAP "snapshot " ID "\n"
#define L_STEP "step 1000\n"
#define L_NOTAG "tag -\n"
#define L_TAG "tag " TAG "\n"
#define L_HOST "host gpu-17\n"
#define L_INST "instance p5.48xlarge\n"
#define L_TIME "time 1796083621\n"
#define L_MAN "manifest " HX "\n"
#define L_NOMAN "manifest -\n"
#define H_COMMIT "ckptsync-commit 1\n"
#define H_CLAIM "ckptsync-claim 1\n"
#define H_HANDOFF "ckptsync-handoff 1\n"
#define COMMIT H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN
#define CLAIM H_CLAIM L_RUN L_GEN L_SNAP L_STEP L_TAG L_HOST L_INST L_TIME L_NOMAN
#define HANDOFF H_HANDOFF L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_NOMAN

enum tail { AUTO_END, RAW, TRAILING, EXTRA_BYTE, NO_NEWLINE, BAD_DIGEST, UPPER_DIGEST };

/* The version line is matched on its "ckptsync-<kind> " prefix, and what
 * follows that is reported as an unknown version, even when it is not a
 * number; those rows only ask for a refusal. */
#define ANY_ERROR 1

struct body_case {
    const char *name;
    const char *text;
    int code; /* or ANY_ERROR */
    enum tail tail;
};

static const struct body_case body_cases[] = {
    /* the bases of the table parse */
    {"valid commit", COMMIT, 0, AUTO_END},
    {"valid claim", CLAIM, 0, AUTO_END},
    {"valid claim from nothing",
     H_CLAIM L_RUN L_GEN "snapshot -\nstep -1\n" L_TAG L_HOST "instance -\n" L_TIME L_NOMAN, 0,
     AUTO_END},
    {"valid handoff", HANDOFF, 0, AUTO_END},
    {"valid handoff, step unknown",
     H_HANDOFF L_RUN L_GEN L_SNAP "step -1\n" L_NOTAG L_HOST L_INST L_TIME L_NOMAN, 0, AUTO_END},
    /* version line */
    {"commit version 2", "ckptsync-commit 2\n" L_RUN, CKS_E_VERSION, AUTO_END},
    {"claim version 2", "ckptsync-claim 2\n" L_RUN, CKS_E_VERSION, AUTO_END},
    {"handoff version 2", "ckptsync-handoff 2\n" L_RUN, CKS_E_VERSION, AUTO_END},
    {"version 10", "ckptsync-commit 10\n" L_RUN, CKS_E_VERSION, AUTO_END},
    {"version 0", "ckptsync-commit 0\n" L_RUN, CKS_E_VERSION, AUTO_END},
    {"no version", "ckptsync-commit\n" L_RUN, CKS_E_FORMAT, AUTO_END},
    {"unknown kind", "ckptsync-foo 1\n" L_RUN, CKS_E_FORMAT, AUTO_END},
    {"manifest, not a record", "ckptsync-manifest 2\n" L_RUN, CKS_E_FORMAT, AUTO_END},
    {"upper-case magic", "CKPTSYNC-COMMIT 1\n" L_RUN, CKS_E_FORMAT, AUTO_END},
    {"leading space", " " COMMIT, CKS_E_FORMAT, AUTO_END},
    {"empty", "", CKS_E_FORMAT, RAW},
    {"only a newline", "\n", CKS_E_FORMAT, RAW},
    /* the end line */
    {"no end line", COMMIT, CKS_E_FORMAT, RAW},
    {"a byte after end", COMMIT, CKS_E_FORMAT, EXTRA_BYTE},
    {"end without newline", COMMIT, CKS_E_FORMAT, NO_NEWLINE},
    {"wrong digest", COMMIT, CKS_E_DIGEST, BAD_DIGEST},
    {"upper-case digest", COMMIT, CKS_E_FORMAT, UPPER_DIGEST},
    {"short end", COMMIT "end 0123\n", CKS_E_FORMAT, RAW},
    {"end twice", COMMIT, CKS_E_FORMAT, TRAILING},
    /* line syntax */
    {"CRLF", H_COMMIT L_RUN "gen 7\r\n" L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"CRLF everywhere",
     "ckptsync-commit 1\r\nrun r1\r\ngen 7\r\nsnapshot " ID "\r\nstep 1000\r\ntag -\r\n"
     "host h\r\ninstance -\r\ntime 1\r\nmanifest " HX "\r\n",
     ANY_ERROR, AUTO_END},
    {"version not a number", "ckptsync-commit one\n" L_RUN, ANY_ERROR, AUTO_END},
    {"version 1 and more", "ckptsync-commit 1 x\n" L_RUN, ANY_ERROR, AUTO_END},
    {"fields out of order", H_COMMIT L_GEN L_RUN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"host before tag", H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_HOST L_NOTAG L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"missing field", H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_TIME L_MAN, CKS_E_FORMAT,
     AUTO_END},
    {"duplicate field", H_COMMIT L_RUN L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"extra field", COMMIT "note x\n", CKS_E_FORMAT, AUTO_END},
    {"empty line", H_COMMIT "\n" L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"empty value", H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG "host \n" L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"no value", H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG "host\n" L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"double space", H_COMMIT L_RUN "gen  7\n" L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"tab separator", H_COMMIT L_RUN "gen\t7\n" L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"upper-case key", H_COMMIT "RUN r1\n" L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    /* field charset */
    {"host with a space",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG "host gpu 17\n" L_INST L_TIME L_MAN, CKS_E_FORMAT,
     AUTO_END},
    {"host with a slash",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG "host gpu/17\n" L_INST L_TIME L_MAN, CKS_E_FORMAT,
     AUTO_END},
    {"host with a percent escape",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG "host gpu%2017\n" L_INST L_TIME L_MAN, CKS_E_FORMAT,
     AUTO_END},
    {"host with a high byte",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG "host gpu\xc3\xa9\n" L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"host with a control byte",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG "host gpu\x01\n" L_INST L_TIME L_MAN, CKS_E_FORMAT,
     AUTO_END},
    {"host of 129 bytes",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG "host " LONGID LONGID "x\n" L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"host of 128 bytes",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG "host " LONGID LONGID "\n" L_INST L_TIME L_MAN, 0,
     AUTO_END},
    {"instance with a colon",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST "instance a:b\n" L_TIME L_MAN, CKS_E_FORMAT,
     AUTO_END},
    {"run ..", H_COMMIT "run ..\n" L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"run -", H_COMMIT "run -\n" L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN, 0,
     AUTO_END},
    {"snapshot .x", H_COMMIT L_RUN L_GEN "snapshot .x\n" L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"snapshot too long",
     H_COMMIT L_RUN L_GEN "snapshot " LONGID "x\n" L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    /* numbers */
    {"gen leading zero", H_COMMIT L_RUN "gen 07\n" L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"gen -1", H_COMMIT L_RUN "gen -1\n" L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"gen above max",
     H_COMMIT L_RUN "gen 1000000000000\n" L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"gen at max",
     H_COMMIT L_RUN "gen 999999999999\n" L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN, 0,
     AUTO_END},
    {"step -2", H_COMMIT L_RUN L_GEN L_SNAP "step -2\n" L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"step leading zero",
     H_COMMIT L_RUN L_GEN L_SNAP "step 01\n" L_NOTAG L_HOST L_INST L_TIME L_MAN, CKS_E_FORMAT,
     AUTO_END},
    {"step +1", H_COMMIT L_RUN L_GEN L_SNAP "step +1\n" L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"step overflow",
     H_COMMIT L_RUN L_GEN L_SNAP "step 9223372036854775808\n" L_NOTAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"step at INT64_MAX",
     H_COMMIT L_RUN L_GEN L_SNAP "step 9223372036854775807\n" L_NOTAG L_HOST L_INST L_TIME L_MAN, 0,
     AUTO_END},
    {"time negative", H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST "time -1\n" L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"time hex", H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST "time 0x10\n" L_MAN,
     CKS_E_FORMAT, AUTO_END},
    /* what each kind carries */
    {"claim with a manifest digest",
     H_CLAIM L_RUN L_GEN L_SNAP L_STEP L_TAG L_HOST L_INST L_TIME L_MAN, CKS_E_FORMAT, AUTO_END},
    {"handoff with a manifest digest",
     H_HANDOFF L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN, CKS_E_FORMAT,
     AUTO_END},
    {"commit without a manifest digest",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_NOMAN, CKS_E_FORMAT,
     AUTO_END},
    {"commit with a short digest",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME "manifest abcd\n",
     CKS_E_FORMAT, AUTO_END},
    {"commit with an upper-case digest",
     H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME
     "manifest 0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef\n",
     CKS_E_FORMAT, AUTO_END},
    {"tag on a commit", H_COMMIT L_RUN L_GEN L_SNAP L_STEP L_TAG L_HOST L_INST L_TIME L_MAN,
     CKS_E_FORMAT, AUTO_END},
    {"tag on a handoff", H_HANDOFF L_RUN L_GEN L_SNAP L_STEP L_TAG L_HOST L_INST L_TIME L_NOMAN,
     CKS_E_FORMAT, AUTO_END},
    {"claim without a tag", H_CLAIM L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_NOMAN,
     CKS_E_FORMAT, AUTO_END},
    {"claim tag upper-case",
     H_CLAIM L_RUN L_GEN L_SNAP L_STEP "tag 0123456789ABCDEF\n" L_HOST L_INST L_TIME L_NOMAN,
     CKS_E_FORMAT, AUTO_END},
    {"claim tag of 15 hex",
     H_CLAIM L_RUN L_GEN L_SNAP L_STEP "tag 0123456789abcde\n" L_HOST L_INST L_TIME L_NOMAN,
     CKS_E_FORMAT, AUTO_END},
    {"claim tag of 17 hex",
     H_CLAIM L_RUN L_GEN L_SNAP L_STEP "tag 0123456789abcdef0\n" L_HOST L_INST L_TIME L_NOMAN,
     CKS_E_FORMAT, AUTO_END},
    {"commit without a snapshot",
     H_COMMIT L_RUN L_GEN "snapshot -\n" L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN, CKS_E_FORMAT,
     AUTO_END},
    {"handoff without a snapshot",
     H_HANDOFF L_RUN L_GEN "snapshot -\n" L_STEP L_NOTAG L_HOST L_INST L_TIME L_NOMAN, CKS_E_FORMAT,
     AUTO_END},
    {"commit body under the claim head",
     H_CLAIM L_RUN L_GEN L_SNAP L_STEP L_NOTAG L_HOST L_INST L_TIME L_MAN, CKS_E_FORMAT, AUTO_END},
};

static void build_body(const struct body_case *c, struct buf *b)
{
    size_t n = strlen(c->text);
    switch (c->tail) {
    case RAW:
        assert_int_equal(buf_append(b, c->text, n), 0);
        break;
    case AUTO_END:
        append_end(b, c->text, n);
        break;
    case TRAILING:
        append_end(b, c->text, n);
        append_end(b, "", 0);
        break;
    case EXTRA_BYTE:
        append_end(b, c->text, n);
        assert_int_equal(buf_puts(b, "\n"), 0);
        break;
    case NO_NEWLINE:
        append_end(b, c->text, n);
        b->len--;
        break;
    case BAD_DIGEST:
        append_end(b, c->text, n);
        b->data[b->len - 2] = b->data[b->len - 2] == '0' ? '1' : '0';
        break;
    case UPPER_DIGEST:
        append_end(b, c->text, n);
        for (size_t i = b->len - 1 - HASH_HEX_LEN; i < b->len - 1; i++)
            if (b->data[i] >= 'a' && b->data[i] <= 'f')
                b->data[i] = (uint8_t)(b->data[i] - 'a' + 'A');
        break;
    }
}

static void test_body_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(body_cases) / sizeof(body_cases[0]); i++) {
        const struct body_case *c = &body_cases[i];
        struct buf b = BUF_INIT;
        struct lineage_rec r;
        build_body(c, &b);
        memset(&r, 0x5a, sizeof(r));
        int e = lineage_parse(b.data, b.len, &r);
        if (c->code == ANY_ERROR ? e >= 0 : e != c->code)
            fail_msg("%s: got %d (%s), want %d", c->name, e, err_str(e), c->code);
        if (e < 0)
            assert_int_equal(((unsigned char *)&r)[0], 0x5a); /* left alone */
        buf_free(&b);
    }
}

static void test_body_bytes(void **state)
{
    struct lineage_rec r = rec_make(LINEAGE_COMMIT, "r1", 7, 1000, ID), back;
    struct buf b = BUF_INIT;
    (void)state;
    assert_int_equal(lineage_encode(&r, &b), 0);

    /* every truncation and every altered byte is refused */
    for (size_t n = 0; n < b.len; n++)
        if (lineage_parse(b.data, n, &back) >= 0)
            fail_msg("prefix of %zu/%zu bytes accepted", n, b.len);
    for (size_t i = 0; i < b.len; i++) {
        uint8_t saved = b.data[i];
        for (int flip = 1; flip < 256; flip <<= 1) {
            b.data[i] = (uint8_t)(saved ^ flip);
            if (lineage_parse(b.data, b.len, &back) >= 0)
                fail_msg("byte %zu ^ 0x%02x accepted", i, flip);
        }
        b.data[i] = saved;
    }

    /* a byte damaged where the syntax still holds: the digest tells */
    char *host = strstr((char *)b.data, "host gpu-17\n");
    assert_non_null(host);
    host[5] = 'G';
    assert_int_equal(lineage_parse(b.data, b.len, &back), CKS_E_DIGEST);
    char *step = strstr((char *)b.data, "step 1000\n");
    host[5] = 'g';
    step[5] = '2';
    assert_int_equal(lineage_parse(b.data, b.len, &back), CKS_E_DIGEST);
    step[5] = '1';

    /* a NUL byte anywhere */
    host[5] = 0;
    assert_int_equal(lineage_parse(b.data, b.len, &back), CKS_E_FORMAT);
    host[5] = 'g';
    b.data[b.len - 1] = 0;
    assert_int_equal(lineage_parse(b.data, b.len, &back), CKS_E_FORMAT);
    b.data[b.len - 1] = '\n';
    assert_int_equal(lineage_parse(b.data, b.len, &back), 0);

    /* bigger than a record can be, even when it is otherwise fine */
    struct buf big = BUF_INIT;
    assert_int_equal(buf_append(&big, b.data, b.len), 0);
    while (big.len <= LINEAGE_MAX_BYTES)
        assert_int_equal(buf_puts(&big, "x"), 0);
    assert_int_equal(lineage_parse(big.data, big.len, &back), CKS_E_FORMAT);
    buf_free(&big);
    buf_free(&b);
}

/* ---- a body read from a key --------------------------------------------- */

struct at_case {
    const char *name;
    const char *key;
    int code;
};

static void test_parse_at(void **state)
{
    struct lineage_rec c = rec_make(LINEAGE_COMMIT, "r1", 7, 1000, ID);
    struct lineage_rec h = rec_make(LINEAGE_HANDOFF, "r1", 7, 1000, ID);
    struct lineage_rec cl = rec_make(LINEAGE_CLAIM, "r1", 7, 1000, TAG);
    struct buf bc = BUF_INIT, bh = BUF_INIT, bcl = BUF_INIT;
    (void)state;
    snprintf(cl.id, sizeof(cl.id), "%s", ID);
    assert_int_equal(lineage_encode(&c, &bc), 0);
    assert_int_equal(lineage_encode(&h, &bh), 0);
    assert_int_equal(lineage_encode(&cl, &bcl), 0);

    static const struct at_case commit_keys[] = {
        {"its own key", "commits/r1/g7.s1000." ID, 0},
        {"other id", "commits/r1/g7.s1000.other", CKS_E_MISMATCH},
        {"id one byte longer", "commits/r1/g7.s1000." ID "0", CKS_E_MISMATCH},
        {"other gen", "commits/r1/g8.s1000." ID, CKS_E_MISMATCH},
        {"gen 0", "commits/r1/g0.s1000." ID, CKS_E_MISMATCH},
        {"other step", "commits/r1/g7.s1001." ID, CKS_E_MISMATCH},
        {"step unknown", "commits/r1/g7.s-1." ID, CKS_E_MISMATCH},
        {"other run", "commits/r2/g7.s1000." ID, CKS_E_MISMATCH},
        {"other kind", "lineage/r1/g7.handoff.s1000." ID, CKS_E_MISMATCH},
        {"a claim's key", "lineage/r1/g7.claim." TAG, CKS_E_MISMATCH},
        {"not a key", "commits/r1/g07.s1000." ID, CKS_E_FORMAT},
    };
    static const struct at_case handoff_keys[] = {
        {"its own key", "lineage/r1/g7.handoff.s1000." ID, 0},
        {"other id", "lineage/r1/g7.handoff.s1000.x", CKS_E_MISMATCH},
        {"other gen", "lineage/r1/g6.handoff.s1000." ID, CKS_E_MISMATCH},
        {"other step", "lineage/r1/g7.handoff.s999." ID, CKS_E_MISMATCH},
        {"other kind", "commits/r1/g7.s1000." ID, CKS_E_MISMATCH},
        {"other run", "lineage/r/g7.handoff.s1000." ID, CKS_E_MISMATCH},
    };
    static const struct at_case claim_keys[] = {
        {"its own key", "lineage/r1/g7.claim." TAG, 0},
        {"other tag", "lineage/r1/g7.claim.0123456789abcdee", CKS_E_MISMATCH},
        {"other gen", "lineage/r1/g70.claim." TAG, CKS_E_MISMATCH},
        {"other run", "lineage/r10/g7.claim." TAG, CKS_E_MISMATCH},
        {"other kind (its base as a handoff)", "lineage/r1/g7.handoff.s1000." ID, CKS_E_MISMATCH},
        {"other kind (its base as a commit)", "commits/r1/g7.s1000." ID, CKS_E_MISMATCH},
    };
    const struct {
        const struct at_case *cases;
        size_t n;
        const struct buf *body;
        const struct lineage_rec *rec;
    } groups[] = {
        {commit_keys, sizeof(commit_keys) / sizeof(commit_keys[0]), &bc, &c},
        {handoff_keys, sizeof(handoff_keys) / sizeof(handoff_keys[0]), &bh, &h},
        {claim_keys, sizeof(claim_keys) / sizeof(claim_keys[0]), &bcl, &cl},
    };
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
        for (size_t i = 0; i < groups[g].n; i++) {
            const struct at_case *k = &groups[g].cases[i];
            struct lineage_rec back;
            memset(&back, 0x5a, sizeof(back));
            int e = layout_record_read(k->key, groups[g].body->data, groups[g].body->len, &back);
            if (e != k->code)
                fail_msg("group %zu, %s (\"%s\"): got %d, want %d", g, k->name, k->key, e, k->code);
            if (e == 0)
                assert_rec_equal(groups[g].rec, &back);
            else
                assert_int_equal(((unsigned char *)&back)[0], 0x5a);
        }
    }

    /* a damaged body under a good key keeps the body's own code */
    struct lineage_rec back;
    bc.data[bc.len - 2] ^= 1;
    assert_int_equal(layout_record_read("commits/r1/g7.s1000." ID, bc.data, bc.len, &back),
                     CKS_E_DIGEST);
    assert_int_equal(layout_record_read("commits/r1/g7.s1000." ID, bc.data, 10, &back),
                     CKS_E_FORMAT);
    buf_free(&bc);
    buf_free(&bh);
    buf_free(&bcl);
}

/* ---- order ---------------------------------------------------------------- */

struct snap {
    int64_t step;
    const char *id;
};

/* Oldest first: unknown steps (by id), then known steps (by step, then id). */
static const struct snap order[] = {
    {-1, ""}, {-1, "a"}, {-1, "b"}, {-1, "ba"}, {0, "z"},        {1, "a"},
    {1, "b"}, {2, "0"},  {10, "a"}, {10, "a0"}, {INT64_MAX, ""}, {INT64_MAX, "a"},
};

static void test_newer(void **state)
{
    size_t n = sizeof(order) / sizeof(order[0]);
    (void)state;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            int got = lineage_newer(order[i].step, order[i].id, order[j].step, order[j].id);
            if (got != (i > j))
                fail_msg("newer((%lld, \"%s\"), (%lld, \"%s\")) = %d, want %d",
                         (long long)order[i].step, order[i].id, (long long)order[j].step,
                         order[j].id, got, i > j);
        }
    }
    /* a known step beats an unknown one whatever the ids */
    assert_true(lineage_newer(0, "a", -1, "zzzz"));
    assert_false(lineage_newer(-1, "zzzz", 0, "a"));
    /* the same snapshot is not newer than itself */
    assert_false(lineage_newer(5, ID, 5, ID));
    assert_false(lineage_newer(-1, ID, -1, ID));
}

/* ---- the field charset ------------------------------------------------------ */

static void test_field_char(void **state)
{
    (void)state;
    for (int c = 0; c < 256; c++) {
        bool want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
        if (lineage_field_char((char)c) != want)
            fail_msg("lineage_field_char(0x%02x) = %d", c, !want);
    }
}

struct sanitise_case {
    const char *in;
    size_t cap;
    const char *out;
};

static void test_sanitise(void **state)
{
    static const struct sanitise_case cases[] = {
        {"gpu-17.local_x", 64, "gpu-17.local_x"},
        {"gpu 17/x", 64, "gpu_17_x"},
        {"a\nb\tc%d:e", 64, "a_b_c_d_e"},
        {"\xc3\xa9t\xc3\xa9", 64, "__t__"}, /* each byte of UTF-8 */
        {"", 64, "-"},
        {NULL, 64, "-"},
        {"-", 64, "-"},
        {"abcdef", 4, "abc"}, /* cut to fit */
        {"abcdef", 7, "abcdef"},
        {"a b", 2, "a"},
        {"x", 1, ""},
        {"", 2, "-"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[64];
        memset(out, 'Z', sizeof(out));
        lineage_sanitise(cases[i].in, out, cases[i].cap);
        if (strcmp(out, cases[i].out))
            fail_msg("case %zu: \"%s\", want \"%s\"", i, out, cases[i].out);
        assert_true(strlen(out) < cases[i].cap);
        for (const char *p = out; *p; p++)
            assert_true(lineage_field_char(*p));
    }
    /* a host longer than the field is cut to LINEAGE_FIELD_MAX in the body */
    struct lineage_rec r = rec_make(LINEAGE_COMMIT, "r1", 1, 1, "x"), back;
    struct buf b = BUF_INIT;
    memset(r.host, 'h', LINEAGE_FIELD_MAX);
    r.host[LINEAGE_FIELD_MAX] = 0;
    assert_int_equal(lineage_encode(&r, &b), 0);
    assert_int_equal(lineage_parse(b.data, b.len, &back), 0);
    assert_string_equal(back.host, r.host);
    buf_free(&b);
}

/* ---- encode never writes what parse refuses --------------------------------- */

/* Every run layout_record accepts, every id, must come back from the body
 * too: a record that is written but cannot be read is lost.  All
 * disagreements are collected, then reported at once. */
static void agree(struct buf *bad, const char *what, const struct lineage_rec *r)
{
    struct lineage_rec back;
    struct buf b = BUF_INIT;
    char key[1024];
    int e = layout_record(r, key, sizeof(key));
    int w = lineage_encode(r, &b);
    if (e == 0 && w < 0)
        buf_printf(bad, "\n  %s: key formed, body refused (%d)", what, w);
    else if (e == 0 && (e = layout_record_read(key, b.data, b.len, &back)) != 0)
        buf_printf(bad, "\n  %s: written, read back %d", what, e);
    else if (e == 0 && (strcmp(back.id, r->id) || strcmp(back.run, r->run)))
        buf_printf(bad, "\n  %s: read back as snapshot \"%s\"", what, back.id);
    buf_free(&b);
}

/* Fails with what was collected in bad (freed first: fail_msg does not
 * return). */
static void fail_if_bad(struct buf *bad, const char *what)
{
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", buf_str(bad));
    size_t n = bad->len;
    buf_free(bad);
    if (n)
        fail_msg("%s%s", what, msg);
}

/* A run layout_record accepts must also come back from the body. */
static void test_long_run_body(void **state)
{
    struct buf bad = BUF_INIT;
    char run[MANIFEST_MAX_FIELD + 1], what[64];
    (void)state;
    for (size_t len = 240; len <= MANIFEST_MAX_FIELD; len++) {
        memset(run, 'r', len);
        run[len] = 0;
        assert_int_equal(manifest_run_check(run), 0);
        static const enum lineage_kind kinds[] = {LINEAGE_COMMIT, LINEAGE_CLAIM, LINEAGE_HANDOFF};
        for (size_t k = 0; k < 3; k++) {
            struct lineage_rec r =
                rec_make(kinds[k], run, 1, 1, kinds[k] == LINEAGE_CLAIM ? TAG : "x");
            snprintf(what, sizeof(what), "k%d/%zu", (int)kinds[k], len);
            agree(&bad, what, &r);
        }
    }
    fail_if_bad(&bad, "runs of 240..256 bytes that do not come back:");
}

/* "-" is a valid snapshot id (manifest_id_check) and key part, so the body
 * must not read it back as "no snapshot". */
static void test_dash_snapshot_body(void **state)
{
    struct buf bad = BUF_INIT;
    (void)state;
    assert_int_equal(manifest_id_check("-"), 0);
    struct lineage_rec c = rec_make(LINEAGE_COMMIT, "r1", 1, 1, "-");
    struct lineage_rec h = rec_make(LINEAGE_HANDOFF, "r1", 1, 1, "-");
    struct lineage_rec cl = rec_make(LINEAGE_CLAIM, "r1", 1, 1, TAG);
    snprintf(cl.id, sizeof(cl.id), "%s", "-");
    agree(&bad, "commit", &c);
    agree(&bad, "handoff", &h);
    agree(&bad, "claim", &cl);
    fail_if_bad(&bad, "snapshot \"-\":");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_round_trip),
        cmocka_unit_test(test_key_rejects),
        cmocka_unit_test(test_key_long_fields),
        cmocka_unit_test(test_forget),
        cmocka_unit_test(test_key_and_encode_refuse),
        cmocka_unit_test(test_body_round_trip),
        cmocka_unit_test(test_body_golden),
        cmocka_unit_test(test_body_table),
        cmocka_unit_test(test_body_bytes),
        cmocka_unit_test(test_parse_at),
        cmocka_unit_test(test_newer),
        cmocka_unit_test(test_field_char),
        cmocka_unit_test(test_sanitise),
        cmocka_unit_test(test_long_run_body),
        cmocka_unit_test(test_dash_snapshot_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
