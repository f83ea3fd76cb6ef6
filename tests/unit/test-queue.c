/*
 * test-queue.c — the daemon's persistent queue (store/queue.c) over a
 * real LMDB index in a scratch directory: key order is the work order
 * (per region, newest snapshot first, its chunk entries before its
 * publish entry), entries round-trip, a walk stops where its callback
 * says, queue_drop_seq removes one snapshot from every region and nothing
 * else, queue_has_seq / queue_seq_bytes / queue_stats count what is
 * there, queue_next_seq allocates and refuses a damaged counter, pending
 * records round-trip and survive a reopen, a recipe entry (issue 27)
 * round-trips and sorts with the chunk entries, before the publish entry,
 * and a corrupt record of either table reads as CKS_E_FORMAT.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "store/queue.h"
#include "testutil.h"

struct fixture {
    char tmp[64];
    char dir[128];
    struct index *ix;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    snprintf(f->tmp, sizeof(f->tmp), "/tmp/cks-test-queue-XXXXXX");
    assert_non_null(mkdtemp(f->tmp));
    snprintf(f->dir, sizeof(f->dir), "%s/index", f->tmp);
    assert_int_equal(index_open(f->dir, &f->ix), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    index_free(f->ix);
    test_rm_rf(f->tmp);
    free(f);
    return 0;
}

static struct index_txn *txn(struct fixture *f, bool write)
{
    struct index_txn *t = NULL;
    assert_int_equal(index_txn_begin(f->ix, write, &t), 0);
    return t;
}

static struct qentry chunk(unsigned slot, uint64_t seq, uint8_t idbyte, uint32_t len)
{
    struct qentry q = {.slot = slot, .seq = seq, .kind = QUEUE_CHUNK, .len = len};
    memset(q.id, idbyte, HASH_LEN);
    q.file = idbyte;
    q.off = (uint64_t)idbyte << 33; /* past 32 bits */
    return q;
}

static struct qentry publish(unsigned slot, uint64_t seq)
{
    return (struct qentry){.slot = slot, .seq = seq, .kind = QUEUE_PUBLISH};
}

/* A recipe entry (QUEUE_RECIPE): file is its sealed flag, off the
 * chunk's raw length, len the object's. */
static struct qentry recipe(unsigned slot, uint64_t seq, uint8_t idbyte, uint32_t len)
{
    struct qentry q = {.slot = slot, .seq = seq, .kind = QUEUE_RECIPE, .len = len};
    memset(q.id, idbyte, HASH_LEN);
    q.file = idbyte & 1;
    q.off = 65536;
    return q;
}

static void put_all(struct fixture *f, const struct qentry *v, size_t n)
{
    struct index_txn *t = txn(f, true);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(queue_put(t, &v[i]), 0);
    assert_int_equal(index_txn_commit(t), 0);
}

struct seen {
    struct qentry v[32];
    size_t n;
    size_t stop_after; /* 0: never */
};

static int seen_cb(void *ud, const struct qentry *q)
{
    struct seen *s = ud;
    assert_true(s->n < 32);
    s->v[s->n++] = *q;
    return s->stop_after && s->n == s->stop_after ? 42 : 0;
}

static void assert_entry(const struct qentry *got, const struct qentry *want)
{
    assert_int_equal(got->slot, want->slot);
    assert_int_equal(got->seq, want->seq);
    assert_int_equal(got->kind, want->kind);
    assert_memory_equal(got->id, want->id, HASH_LEN);
    assert_int_equal(got->file, want->file);
    assert_int_equal(got->off, want->off);
    assert_int_equal(got->len, want->len);
}

/* Two snapshots in two regions, written out of order: each region's walk
 * is newest first, chunks (by id) before the publish entry. */
static void test_work_order(void **state)
{
    struct fixture *f = *state;
    const struct qentry in[] = {
        publish(0, 1), chunk(0, 1, 0x20, 100), chunk(1, 2, 0x05, 7),  chunk(0, 2, 0x90, 30),
        publish(0, 2), chunk(0, 1, 0x10, 200), chunk(0, 2, 0x01, 40), publish(1, 2),
    };
    put_all(f, in, sizeof(in) / sizeof(in[0]));
    const struct qentry want0[] = {
        chunk(0, 2, 0x01, 40),  chunk(0, 2, 0x90, 30),  publish(0, 2),
        chunk(0, 1, 0x10, 200), chunk(0, 1, 0x20, 100), publish(0, 1),
    };
    struct seen s = {0};
    struct index_txn *t = txn(f, false);
    assert_int_equal(queue_walk(t, 0, seen_cb, &s), 0);
    assert_int_equal(s.n, 6);
    for (size_t i = 0; i < 6; i++)
        assert_entry(&s.v[i], &want0[i]);
    struct qentry first;
    assert_int_equal(queue_first(t, 0, &first), 0);
    assert_entry(&first, &want0[0]);
    assert_int_equal(queue_first(t, 1, &first), 0);
    struct qentry w1 = chunk(1, 2, 0x05, 7);
    assert_entry(&first, &w1);
    assert_int_equal(queue_first(t, 2, &first), -ENOENT);
    /* a walk stops where its callback says, and returns what it said */
    struct seen stop = {.stop_after = 2};
    assert_int_equal(queue_walk(t, 0, seen_cb, &stop), 42);
    assert_int_equal(stop.n, 2);
    index_txn_abort(t);
}

/* A newer snapshot's work comes first even when its seq needs more bytes
 * (the inverted big-endian seq, not a string compare). */
static void test_order_wide_seqs(void **state)
{
    struct fixture *f = *state;
    const uint64_t seqs[] = {1, 255, 256, 65536, (uint64_t)1 << 40, UINT64_MAX - 1};
    for (size_t i = 0; i < 6; i++) {
        struct qentry p = publish(3, seqs[i]);
        put_all(f, &p, 1);
    }
    struct seen s = {0};
    struct index_txn *t = txn(f, false);
    assert_int_equal(queue_walk(t, 3, seen_cb, &s), 0);
    index_txn_abort(t);
    assert_int_equal(s.n, 6);
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(s.v[i].seq, seqs[5 - i]);
}

static void test_del_drop_and_counts(void **state)
{
    struct fixture *f = *state;
    const struct qentry in[] = {
        chunk(0, 5, 0xa1, 1000), chunk(0, 5, 0xa2, 24), publish(0, 5),
        chunk(1, 5, 0xa1, 1000), publish(1, 5),         chunk(0, 4, 0xb0, 5),
        publish(0, 4),           chunk(2, 5, 0xa3, 9), /* slot 2: beyond nslots below */
    };
    put_all(f, in, sizeof(in) / sizeof(in[0]));
    uint64_t chunks, bytes, oldest, sb;
    struct index_txn *t = txn(f, false);
    assert_int_equal(queue_has_seq(t, 5, 2), 1);
    assert_int_equal(queue_has_seq(t, 6, 3), 0);
    assert_int_equal(queue_seq_bytes(t, 5, 2, &sb), 0);
    assert_int_equal(sb, 2024); /* chunk entries of seq 5 in slots 0 and 1 */
    assert_int_equal(queue_stats(t, 0, &chunks, &bytes, &oldest), 0);
    assert_int_equal(chunks, 3); /* publish entries are not chunks */
    assert_int_equal(bytes, 1029);
    assert_int_equal(oldest, 4);
    assert_int_equal(queue_stats(t, 7, &chunks, &bytes, &oldest), 0);
    assert_int_equal(chunks + bytes + oldest, 0);
    index_txn_abort(t);

    /* queue_del: one entry, by its key */
    struct qentry gone = chunk(0, 5, 0xa2, 24);
    t = txn(f, true);
    assert_int_equal(queue_del(t, &gone), 0);
    assert_int_equal(index_txn_commit(t), 0);

    /* queue_drop_seq: seq 5 in slots 0..1, nothing else */
    t = txn(f, true);
    assert_int_equal(queue_drop_seq(t, 5, 2), 0);
    assert_int_equal(index_txn_commit(t), 0);
    t = txn(f, false);
    assert_int_equal(queue_has_seq(t, 5, 2), 0);
    assert_int_equal(queue_has_seq(t, 5, 3), 1); /* slot 2 was not asked */
    assert_int_equal(queue_has_seq(t, 4, 2), 1);
    struct seen s = {0};
    assert_int_equal(queue_walk(t, 0, seen_cb, &s), 0);
    assert_int_equal(s.n, 2);
    struct qentry w0 = chunk(0, 4, 0xb0, 5), w1 = publish(0, 4);
    assert_entry(&s.v[0], &w0);
    assert_entry(&s.v[1], &w1);
    struct qentry q;
    assert_int_equal(queue_first(t, 1, &q), -ENOENT);
    index_txn_abort(t);
}

static void test_next_seq(void **state)
{
    struct fixture *f = *state;
    uint64_t seq;
    for (uint64_t want = 1; want <= 3; want++) {
        struct index_txn *t = txn(f, true);
        assert_int_equal(queue_next_seq(t, &seq), 0);
        assert_int_equal(seq, want);
        assert_int_equal(index_txn_commit(t), 0);
    }
    struct index_txn *t = txn(f, true); /* an aborted allocation is not spent */
    assert_int_equal(queue_next_seq(t, &seq), 0);
    index_txn_abort(t);
    t = txn(f, true);
    assert_int_equal(queue_next_seq(t, &seq), 0);
    assert_int_equal(seq, 4);
    static const char *bad[] = {"abc", "0", "12x", "99999999999999999999999"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(index_meta_put(t, "queue_seq", bad[i]), 0);
        if (queue_next_seq(t, &seq) != CKS_E_FORMAT)
            fail_msg("queue_seq \"%s\" was not refused", bad[i]);
    }
    index_txn_abort(t);
}

static struct pending mkpending(uint64_t seq, const char *id, const uint8_t *man, size_t len)
{
    struct pending p;
    memset(&p, 0, sizeof(p));
    p.seq = seq;
    p.step = -1 - (int64_t)seq;
    p.created_ms = 1764547200123;
    p.pinned = seq % 2;
    p.queued_bytes = (uint64_t)seq << 36;
    snprintf(p.id, sizeof(p.id), "%s", id);
    snprintf(p.run, sizeof(p.run), "run-%llu", (unsigned long long)seq);
    snprintf(p.unit, sizeof(p.unit), "ckpt/checkpoint-%llu", (unsigned long long)seq);
    snprintf(p.pin, sizeof(p.pin), "/w/.ckptsync-pin/%s", id);
    p.manifest = man;
    p.manifest_len = len;
    return p;
}

static void assert_pending(const struct pending *got, const struct pending *want)
{
    assert_int_equal(got->seq, want->seq);
    assert_int_equal(got->step, want->step);
    assert_int_equal(got->created_ms, want->created_ms);
    assert_int_equal(got->pinned, want->pinned);
    assert_int_equal(got->queued_bytes, want->queued_bytes);
    assert_string_equal(got->id, want->id);
    assert_string_equal(got->run, want->run);
    assert_string_equal(got->unit, want->unit);
    assert_string_equal(got->pin, want->pin);
    assert_int_equal(got->manifest_len, want->manifest_len);
    assert_memory_equal(got->manifest, want->manifest, want->manifest_len);
}

struct pacc {
    uint64_t seqs[8];
    size_t n;
};

static int pacc_cb(void *ud, const struct pending *p)
{
    struct pacc *a = ud;
    a->seqs[a->n++] = p->seq;
    return 0;
}

static void test_pending(void **state)
{
    struct fixture *f = *state;
    static const uint8_t man[] = {'{', 0, 1, 2, 0xff, '}'}; /* bytes, NULs included */
    struct pending a = mkpending(300, "20261201T000701.123456Z-3f2a9c1b", man, sizeof(man)),
                   b = mkpending(7, "20261201T000702.000001Z-00000001", man, 0);
    struct index_txn *t = txn(f, true);
    assert_int_equal(queue_pending_put(t, &a), 0);
    assert_int_equal(queue_pending_put(t, &b), 0);
    assert_int_equal(index_txn_commit(t), 0);
    index_free(f->ix); /* durable: a restart finds them */
    f->ix = NULL;
    assert_int_equal(index_open(f->dir, &f->ix), 0);

    struct pending got;
    struct pacc acc = {0};
    t = txn(f, false);
    assert_int_equal(queue_pending_get(t, 300, &got), 0);
    assert_pending(&got, &a);
    assert_int_equal(queue_pending_get(t, 7, &got), 0);
    assert_pending(&got, &b);
    assert_int_equal(queue_pending_get(t, 8, &got), -ENOENT);
    assert_int_equal(queue_pending_foreach(t, pacc_cb, &acc), 0);
    assert_int_equal(acc.n, 2);
    assert_int_equal(acc.seqs[0], 7); /* in seq order (big-endian keys) */
    assert_int_equal(acc.seqs[1], 300);
    index_txn_abort(t);

    t = txn(f, true);
    assert_int_equal(queue_pending_del(t, 7), 0);
    assert_int_equal(index_txn_commit(t), 0);
    t = txn(f, false);
    assert_int_equal(queue_pending_get(t, 7, &got), -ENOENT);
    assert_int_equal(queue_pending_get(t, 300, &got), 0);
    index_txn_abort(t);
}

/* The raw key of the only record of a table (to damage its value). */
struct rawkey {
    uint8_t k[512];
    size_t len, n;
};

static int rawkey_cb(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
    struct rawkey *r = ud;
    (void)val;
    (void)vlen;
    memcpy(r->k, key, klen);
    r->len = klen;
    r->n++;
    return 0;
}

static int count_cb(void *ud, const struct qentry *q)
{
    (void)q;
    ++*(size_t *)ud;
    return 0;
}

static void test_corrupt_queue_record(void **state)
{
    struct fixture *f = *state;
    struct qentry q = chunk(0, 9, 0x42, 10), got;
    put_all(f, &q, 1);
    struct rawkey rk = {0};
    struct index_txn *t = txn(f, true);
    assert_int_equal(index_raw_foreach(t, INDEX_QUEUE, NULL, 0, rawkey_cb, &rk), 0);
    assert_int_equal(rk.n, 1);
    /* a value of another version, one too short, and a key of a kind
     * that does not exist (and one of another length) in the same slot */
    uint8_t v2[17] = {3}, shortv[16] = {1}, val[17] = {1};
    assert_int_equal(index_raw_put(t, INDEX_QUEUE, rk.k, rk.len, v2, sizeof(v2)), 0);
    assert_int_equal(index_txn_commit(t), 0);
    t = txn(f, false);
    size_t n = 0;
    uint64_t c, b, o;
    assert_int_equal(queue_first(t, 0, &got), CKS_E_FORMAT);
    assert_int_equal(queue_walk(t, 0, count_cb, &n), CKS_E_FORMAT);
    assert_int_equal(queue_stats(t, 0, &c, &b, &o), CKS_E_FORMAT);
    assert_int_equal(queue_seq_bytes(t, 9, 1, &c), CKS_E_FORMAT);
    index_txn_abort(t);

    t = txn(f, true);
    assert_int_equal(index_raw_put(t, INDEX_QUEUE, rk.k, rk.len, shortv, sizeof(shortv)), 0);
    assert_int_equal(index_txn_commit(t), 0);
    t = txn(f, false);
    assert_int_equal(queue_first(t, 0, &got), CKS_E_FORMAT);
    index_txn_abort(t);

    uint8_t badkind[512];
    memcpy(badkind, rk.k, rk.len);
    badkind[9] = 7; /* after slot and seq: the kind */
    t = txn(f, true);
    assert_int_equal(queue_del(t, &q), 0);
    assert_int_equal(index_raw_put(t, INDEX_QUEUE, badkind, rk.len, val, sizeof(val)), 0);
    assert_int_equal(index_txn_commit(t), 0);
    t = txn(f, false);
    assert_int_equal(queue_first(t, 0, &got), CKS_E_FORMAT);
    index_txn_abort(t);

    t = txn(f, true);
    assert_int_equal(index_raw_del(t, INDEX_QUEUE, badkind, rk.len), 0);
    assert_int_equal(index_raw_put(t, INDEX_QUEUE, rk.k, rk.len - 1, val, sizeof(val)), 0);
    assert_int_equal(index_txn_commit(t), 0);
    t = txn(f, true);
    assert_int_equal(queue_first(t, 0, &got), CKS_E_FORMAT);
    assert_int_equal(queue_drop_seq(t, 9, 1), CKS_E_FORMAT); /* a key it cannot name */
    index_txn_abort(t);
}

/* Recipe entries round-trip, sort with the chunk entries by id (before
 * the publish entry, which waits for them), count in the stats, and go
 * with queue_del and queue_drop_seq; a recipe record under a publish key
 * is CKS_E_FORMAT. */
static void test_recipe_entries(void **state)
{
    struct fixture *f = *state;
    const struct qentry in[] = {publish(0, 4),         recipe(0, 4, 0xc0, 300),
                                chunk(0, 4, 0x80, 50), recipe(0, 4, 0x11, 200),
                                recipe(0, 3, 0x22, 9), publish(0, 3)};
    put_all(f, in, sizeof(in) / sizeof(in[0]));
    const struct qentry want[] = {recipe(0, 4, 0x11, 200), chunk(0, 4, 0x80, 50),
                                  recipe(0, 4, 0xc0, 300), publish(0, 4),
                                  recipe(0, 3, 0x22, 9),   publish(0, 3)};
    struct seen s = {0};
    struct index_txn *t = txn(f, false);
    assert_int_equal(queue_walk(t, 0, seen_cb, &s), 0);
    assert_int_equal(s.n, 6);
    for (size_t i = 0; i < 6; i++)
        assert_entry(&s.v[i], &want[i]);
    uint64_t c, b, o;
    assert_int_equal(queue_stats(t, 0, &c, &b, &o), 0);
    assert_int_equal(c, 4);
    assert_int_equal(b, 200 + 50 + 300 + 9);
    index_txn_abort(t);
    t = txn(f, true);
    assert_int_equal(queue_del(t, &want[0]), 0);
    assert_int_equal(queue_drop_seq(t, 3, 1), 0);
    assert_int_equal(index_txn_commit(t), 0);
    struct seen s2 = {0};
    t = txn(f, false);
    assert_int_equal(queue_walk(t, 0, seen_cb, &s2), 0);
    index_txn_abort(t);
    assert_int_equal(s2.n, 3);
    for (size_t i = 0; i < 3; i++)
        assert_entry(&s2.v[i], &want[i + 1]);
    /* a recipe record (version byte 2) under a publish entry's key */
    struct rawkey rk = {0};
    uint8_t v2[17] = {2};
    t = txn(f, true);
    assert_int_equal(index_raw_foreach(t, INDEX_QUEUE, NULL, 0, rawkey_cb, &rk), 0);
    assert_int_equal(rk.k[9], QUEUE_PUBLISH); /* the last one seen: seq 4's publish */
    assert_int_equal(index_raw_put(t, INDEX_QUEUE, rk.k, rk.len, v2, sizeof(v2)), 0);
    assert_int_equal(index_txn_commit(t), 0);
    size_t n = 0;
    t = txn(f, false);
    assert_int_equal(queue_walk(t, 0, count_cb, &n), CKS_E_FORMAT);
    index_txn_abort(t);
}

static void test_corrupt_pending_record(void **state)
{
    struct fixture *f = *state;
    static const uint8_t man[] = "manifest";
    struct pending p = mkpending(11, "20261201T000701.123456Z-3f2a9c1b", man, sizeof(man));
    struct index_txn *t = txn(f, true);
    assert_int_equal(queue_pending_put(t, &p), 0);
    assert_int_equal(index_txn_commit(t), 0);
    struct rawkey rk = {0};
    const void *v;
    size_t vlen;
    t = txn(f, false);
    assert_int_equal(index_raw_foreach(t, INDEX_PENDING, NULL, 0, rawkey_cb, &rk), 0);
    assert_int_equal(index_raw_get(t, INDEX_PENDING, rk.k, rk.len, &v, &vlen), 0);
    uint8_t *copy = malloc(vlen);
    assert_non_null(copy);
    memcpy(copy, v, vlen);
    index_txn_abort(t);

    /* cut inside the strings (the id's length promises more than is
     * there), a wrong version, and a header cut short */
    const struct {
        size_t len;
        uint8_t version;
    } cases[] = {{26 + 2 + 5, 1}, {vlen, 9}, {20, 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pending got;
        struct pacc acc = {0};
        copy[0] = cases[i].version;
        t = txn(f, true);
        assert_int_equal(index_raw_put(t, INDEX_PENDING, rk.k, rk.len, copy, cases[i].len), 0);
        assert_int_equal(index_txn_commit(t), 0);
        t = txn(f, false);
        if (queue_pending_get(t, 11, &got) != CKS_E_FORMAT)
            fail_msg("case %zu: a damaged pending record was read", i);
        assert_int_equal(queue_pending_foreach(t, pacc_cb, &acc), CKS_E_FORMAT);
        index_txn_abort(t);
    }
    free(copy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_work_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_wide_seqs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recipe_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_del_drop_and_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_seq, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_queue_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_pending_record, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
