/*
 * test-snaprec.c — a snapshot's record in a real LMDB index: a new one
 * counts each chunk occurrence once (a chunk named twice in the manifest
 * twice); one a restore found gets the regions holding its manifest, and
 * a second find of it adds regions without clearing any or counting the
 * references again.
 */
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "service/snaprec.h"

struct fixture {
    char tmp[64];
    char dir[128];
    struct index *ix;
    struct manifest m;
    uint8_t a[HASH_LEN], b[HASH_LEN];
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* run r1, id S: file x (chunks a, b), file y (chunk a), a directory. */
static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    snprintf(f->tmp, sizeof(f->tmp), "/tmp/cks-test-snaprec-XXXXXX");
    assert_non_null(mkdtemp(f->tmp));
    snprintf(f->dir, sizeof(f->dir), "%s/index", f->tmp);
    assert_int_equal(index_open(f->dir, &f->ix), 0);
    memset(f->a, 0xaa, HASH_LEN);
    memset(f->b, 0xbb, HASH_LEN);
    manifest_init(&f->m);
    snprintf(f->m.id, sizeof(f->m.id), "20261205T000000.000000Z-0000000s");
    assert_int_equal(manifest_set_str(&f->m.run, "r1"), 0);
    f->m.step = 20;
    f->m.time = 1764892800;
    assert_int_equal(manifest_add_file(&f->m, MFILE_DIR, "d", 0755, NULL), 0);
    assert_int_equal(manifest_add_file(&f->m, MFILE_REG, "d/x", 0644, NULL), 0);
    assert_int_equal(manifest_add_chunk(&f->m, f->a, 100), 0);
    assert_int_equal(manifest_add_chunk(&f->m, f->b, 50), 0);
    assert_int_equal(manifest_add_file(&f->m, MFILE_REG, "d/y", 0644, NULL), 0);
    assert_int_equal(manifest_add_chunk(&f->m, f->a, 100), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    manifest_free(&f->m);
    index_free(f->ix);
    nftw(f->tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static int found(struct fixture *f, uint32_t holders)
{
    struct index_txn *t;
    assert_int_equal(index_txn_begin(f->ix, true, &t), 0);
    int e = snaprec_found(t, &f->m, holders);
    assert_int_equal(index_txn_commit(t), 0);
    return e;
}

static void expect(struct fixture *f, uint32_t committed, uint64_t ref_a, uint64_t ref_b)
{
    struct index_txn *t;
    struct index_snap s;
    struct index_chunk c;
    assert_int_equal(index_txn_begin(f->ix, false, &t), 0);
    assert_int_equal(index_snap_get(t, "r1", f->m.id, &s), 0);
    assert_int_equal(s.committed, committed);
    assert_int_equal(s.step, 20);
    assert_int_equal(s.time, 1764892800);
    assert_int_equal(s.nfiles, 2);
    assert_int_equal(s.bytes, 250);
    assert_int_equal(index_chunk_get(t, f->a, &c), 0);
    assert_int_equal(c.refcount, ref_a);
    assert_int_equal(c.raw_len, 100);
    assert_int_equal(index_chunk_get(t, f->b, &c), 0);
    assert_int_equal(c.refcount, ref_b);
    index_txn_abort(t);
}

static void test_found_new_then_again(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(found(f, 0x1), 1);
    expect(f, 0x1, 2, 1);
    assert_int_equal(found(f, 0x2), 0); /* a second region: added */
    expect(f, 0x3, 2, 1);
    assert_int_equal(found(f, 0x2), 0); /* nothing to add, nothing cleared */
    expect(f, 0x3, 2, 1);
}

static void test_found_nowhere(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(found(f, 0), 1);
    expect(f, 0, 2, 1);
}

static void test_add_then_found(void **state)
{
    struct fixture *f = *state;
    struct index_txn *t;
    assert_int_equal(index_txn_begin(f->ix, true, &t), 0);
    assert_int_equal(snaprec_add(t, &f->m, 250, 0), 0); /* taken here, no region yet */
    assert_int_equal(index_txn_commit(t), 0);
    expect(f, 0, 2, 1);
    assert_int_equal(found(f, 0x5), 0); /* then restored: its references are not counted again */
    expect(f, 0x5, 2, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_found_new_then_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_found_nowhere, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_then_found, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
