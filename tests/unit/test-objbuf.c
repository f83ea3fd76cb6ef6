/*
 * test-objbuf.c — the buffer of encoded objects between ingest and the
 * region workers: an entry lives until every region that needs it stored
 * it; a full buffer evicts what the quorum (or only lagging regions)
 * still wants, never an entry in use, and otherwise makes the producer
 * wait for a real consumer thread; stop wakes a waiting producer.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/hash.h"
#include "daemon/objbuf.h"

#define ALL 0x7u /* slots 0, 1, 2 */

static void id_of(int k, uint8_t id[HASH_LEN])
{
    hash_sha256(&k, sizeof(k), id);
}

static void put(struct objbuf *b, int k, size_t len, uint32_t needs, int want)
{
    uint8_t id[HASH_LEN], data[256];
    id_of(k, id);
    memset(data, k, sizeof(data));
    assert_int_equal(objbuf_put(b, id, 1, (uint32_t)len * 2, data, len, needs, false, 0), want);
}

static void test_lifecycle(void **state)
{
    struct objbuf *b;
    struct objbuf_stats st;
    uint8_t id[HASH_LEN];
    (void)state;
    assert_int_equal(objbuf_new(1 << 20, 2, ALL, &b), 0);
    put(b, 1, 100, ALL, 0);
    put(b, 1, 100, ALL, 1); /* already there */
    put(b, 2, 50, 0x1, 0);
    /* slot 0 takes the oldest first, then the next, then nothing */
    struct objbuf_ent *e1 = objbuf_take(b, 0), *e2 = objbuf_take(b, 0);
    assert_non_null(e1);
    assert_non_null(e2);
    assert_null(objbuf_take(b, 0));
    id_of(1, id);
    assert_memory_equal(e1->id, id, HASH_LEN);
    assert_int_equal(e1->len, 100);
    assert_int_equal(e1->raw_len, 200);
    assert_int_equal(e1->data[99], 1);
    /* a failed upload leaves the need: it can be taken again */
    objbuf_release(b, e1, 0, false);
    e1 = objbuf_take(b, 0);
    assert_non_null(e1);
    objbuf_release(b, e1, 0, true);
    objbuf_release(b, e2, 0, true); /* entry 2 was needed by slot 0 only: gone */
    id_of(2, id);
    assert_false(objbuf_has(b, id));
    /* the queue path finds entry 1 by id for slot 1, slot 2 takes it */
    id_of(1, id);
    struct objbuf_ent *g = objbuf_get(b, id, 1);
    assert_non_null(g);
    assert_null(objbuf_take(b, 1)); /* taken by the get */
    objbuf_release(b, g, 1, true);
    struct objbuf_ent *t = objbuf_take(b, 2);
    assert_non_null(t);
    objbuf_release(b, t, 2, true);
    assert_false(objbuf_has(b, id));
    objbuf_stats(b, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.puts, 2);
    assert_int_equal(st.hits, 1);
    objbuf_free(b);
}

/* Budget of 250 bytes, objects of 100: the third put must evict. */
static void test_evict_quorum(void **state)
{
    struct objbuf *b;
    struct objbuf_stats st;
    uint8_t id[HASH_LEN];
    (void)state;
    assert_int_equal(objbuf_new(250, 2, ALL, &b), 0);
    put(b, 1, 100, ALL, 0);
    put(b, 2, 100, ALL, 0);
    /* slots 0 and 1 store entry 1 (quorum 2), slot 2 has not */
    for (unsigned s = 0; s < 2; s++) {
        struct objbuf_ent *e = objbuf_take(b, s);
        id_of(1, id);
        assert_memory_equal(e->id, id, HASH_LEN);
        objbuf_release(b, e, s, true);
    }
    put(b, 3, 100, ALL, 0); /* evicts entry 1: the quorum holds it */
    id_of(1, id);
    assert_false(objbuf_has(b, id));
    objbuf_stats(b, &st);
    assert_int_equal(st.evicted, 1);
    assert_int_equal(st.waits, 0);
    /* slot 2, behind, continues with what is left: entry 2 */
    struct objbuf_ent *e = objbuf_take(b, 2);
    id_of(2, id);
    assert_memory_equal(e->id, id, HASH_LEN);
    objbuf_release(b, e, 2, true);
    objbuf_free(b);
}

/* Only lagging regions still need the oldest: it goes. */
static void test_evict_lagging(void **state)
{
    struct objbuf *b;
    uint8_t id[HASH_LEN];
    (void)state;
    assert_int_equal(objbuf_new(150, 2, ALL, &b), 0);
    put(b, 1, 100, ALL, 0);
    objbuf_lagging(b, 1, true);
    objbuf_lagging(b, 2, true);
    struct objbuf_ent *e = objbuf_take(b, 0);
    objbuf_release(b, e, 0, true);
    put(b, 2, 100, ALL, 0);
    id_of(1, id);
    assert_false(objbuf_has(b, id));
    objbuf_free(b);
}

struct consumer {
    struct objbuf *b;
    int taken;
};

static void *consume(void *arg)
{
    struct consumer *c = arg;
    for (int n = 0; n < 2; n++) {
        usleep(100000);
        for (unsigned s = 0; s < 2; s++) {
            struct objbuf_ent *e = objbuf_take(c->b, s);
            if (e) {
                objbuf_release(c->b, e, s, true);
                c->taken++;
            }
        }
    }
    return NULL;
}

/* Full of entries no region stored: the producer waits for a consumer,
 * and an entry in use is never evicted. */
static void test_wait_and_in_use(void **state)
{
    struct objbuf *b;
    struct objbuf_stats st;
    pthread_t th;
    (void)state;
    assert_int_equal(objbuf_new(150, 2, ALL, &b), 0);
    put(b, 1, 100, ALL, 0);
    struct consumer c = {b, 0};
    assert_int_equal(pthread_create(&th, NULL, consume, &c), 0);
    put(b, 2, 100, ALL, 0); /* returns once slots 0 and 1 stored entry 1 */
    objbuf_stats(b, &st);
    assert_true(st.waits >= 1);
    assert_int_equal(st.evicted, 1);
    pthread_join(th, NULL);
    assert_true(c.taken >= 2);
    objbuf_free(b);

    /* in use by slot 2 (a reference): never evicted, even held by the quorum */
    assert_int_equal(objbuf_new(150, 1, ALL, &b), 0);
    put(b, 1, 100, 0x4, 0);
    struct objbuf_ent *e = objbuf_take(b, 2);
    objbuf_stop(b);
    put(b, 2, 100, ALL, -ECANCELED); /* would wait forever: stop ends it */
    assert_int_equal(e->data[0], 1);
    objbuf_release(b, e, 2, false);
    objbuf_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lifecycle),
        cmocka_unit_test(test_evict_quorum),
        cmocka_unit_test(test_evict_lagging),
        cmocka_unit_test(test_wait_and_in_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
