/*
 * testrepo.h — a real repository for unit tests of service modules: a
 * scratch directory holding the state (the LMDB index) and dir regions,
 * opened with repo_open; tmp/watch is the watch root (made, empty).  Header-only like testutil.h;
 * include it after <cmocka.h>.
 *
 *   struct test_repo tr;
 *   test_repo_open(&tr, "ingcore", 3, 2, "[chunker]\nmin = 1K\n...");
 *   ... tr.r, tr.tmp (the scratch directory) ...
 *   test_repo_close(&tr);          // repo_free, then rm -rf of tr.tmp
 */
#ifndef CKS_TESTREPO_H
#define CKS_TESTREPO_H

#include <stdio.h>
#include <stdlib.h>

#include "base/buf.h"
#include "base/config.h"
#include "service/repo.h"
#include "testutil.h"

struct test_repo {
    char tmp[64];
    struct config conf;
    struct repo *r;
};

/* nregions dir regions r0, r1, ... under tmp/regions; quorum; extra is
 * appended to the configuration (sections of its own, e.g. [chunker]). */
static inline void test_repo_open(struct test_repo *tr, const char *name, unsigned nregions,
                                  unsigned quorum, const char *extra)
{
    struct buf text = BUF_INIT, err = BUF_INIT;
    snprintf(tr->tmp, sizeof(tr->tmp), "/tmp/cks-test-%s-XXXXXX", name);
    assert_non_null(mkdtemp(tr->tmp));
    char watch[96];
    snprintf(watch, sizeof(watch), "%s/watch", tr->tmp);
    assert_int_equal(mkdir(watch, 0700), 0);
    assert_int_equal(buf_printf(&text,
                                "[daemon]\nwatch = %s/watch\nstate = %s/state\nquorum = %u\n"
                                "workers = 2\n",
                                tr->tmp, tr->tmp, quorum),
                     0);
    for (unsigned i = 0; i < nregions; i++) {
        char dir[128];
        snprintf(dir, sizeof(dir), "%s/regions", tr->tmp);
        mkdir(dir, 0700);
        snprintf(dir, sizeof(dir), "%s/regions/r%u", tr->tmp, i);
        assert_int_equal(mkdir(dir, 0700), 0);
        assert_int_equal(buf_printf(&text, "[region.r%u]\nkind = dir\npath = %s\n", i, dir), 0);
    }
    if (extra)
        assert_int_equal(buf_puts(&text, extra), 0);
    if (config_parse("test.conf", buf_str(&text), text.len, &tr->conf, &err) < 0)
        fail_msg("configuration: %s", buf_str(&err));
    if (repo_open(&tr->conf, REPO_CREATE, &tr->r, &err) < 0)
        fail_msg("repo_open: %s", buf_str(&err));
    buf_free(&text);
    buf_free(&err);
}

static inline void test_repo_close(struct test_repo *tr)
{
    repo_free(tr->r);
    tr->r = NULL;
    test_rm_rf(tr->tmp);
}

/* Writes len bytes of a deterministic pseudo-random stream (seed) to
 * dir/name, creating or replacing it. */
static inline void test_write_file(const char *dir, const char *name, size_t len, unsigned seed)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        fputc((int)(x >> 16) & 0xff, f);
    }
    assert_int_equal(fclose(f), 0);
}

#endif
