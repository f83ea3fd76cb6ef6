/*
 * test-layoutcov.c — a step's coverage from its layout, over trees built
 * in memory and layout files handed over by a reader: files missing or
 * too short for the DCP ranges, hard links standing for their targets, an
 * HF index at the top, a rank gap listed with "and N more", a truncated
 * .metadata (an error naming the file), a reader's own error, and the
 * region reader's size bound.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "engine/tdelta.h"
#include "service/layoutcov.h"
#include "store/layout.h"
#include "store/region.h"

struct files {
    const char *path;
    const uint8_t *data;
    size_t len;
    int fail; /* the reader's error for this path */
};

static int reader(void *ud, const struct manifest *m, const struct mfile *f, struct buf *out,
                  struct buf *err)
{
    const struct files *v = ud;
    (void)m;
    buf_reset(out);
    for (; v->path; v++)
        if (!strcmp(v->path, f->path)) {
            if (v->fail)
                buf_puts(err, "the reader failed");
            return v->fail ? v->fail : buf_append(out, v->data, v->len);
        }
    fail_msg("read of \"%s\", not a layout file", f->path);
    return -EINVAL;
}

/* A regular file of size bytes (one fake chunk per MiB or part of it). */
static void add_reg(struct manifest *m, const char *path, uint64_t size)
{
    uint8_t id[HASH_LEN] = {0};
    assert_int_equal(manifest_add_file(m, MFILE_REG, path, 0644, NULL), 0);
    while (size > 0) {
        uint32_t n = size > (1u << 20) ? 1u << 20 : (uint32_t)size;
        assert_int_equal(manifest_add_chunk(m, id, n), 0);
        size -= n;
    }
}

static uint8_t *fixture(const char *name, size_t *len)
{
    char path[4096];
    uint8_t *data = NULL;
    snprintf(path, sizeof(path), "%s/dcp/%s", CKS_FIXTURES, name);
    assert_int_equal(fileio_read_all(path, 1 << 20, &data, len), 0);
    return data;
}

static int check(const struct manifest *m, const struct files *f, struct buf *missing,
                 struct buf *bad, struct buf *err)
{
    buf_reset(missing);
    buf_reset(bad);
    buf_reset(err);
    return layoutcov_check(m, reader, (void *)f, missing, bad, err);
}

static void test_dcp(void **state)
{
    size_t len;
    uint8_t *meta = fixture("p4.metadata", &len); /* __0_0 100, __1_0 120, __3_0 30 */
    struct files f[] = {{"ck/.metadata", meta, len, 0}, {NULL, NULL, 0, 0}};
    struct buf missing = BUF_INIT, bad = BUF_INIT, err = BUF_INIT;
    struct manifest m;
    (void)state;
    manifest_init(&m);
    assert_int_equal(manifest_add_file(&m, MFILE_DIR, "ck", 0755, NULL), 0);
    add_reg(&m, "ck/.metadata", len);
    add_reg(&m, "ck/__0_0.distcp", 100);
    add_reg(&m, "ck/__1_0.distcp", 119);
    assert_int_equal(check(&m, f, &missing, &bad, &err), 1);
    assert_string_equal(buf_str(&missing),
                        "\"ck/__1_0.distcp\" is 119 bytes, but the layout names bytes up to 120 "
                        "(named by the DCP metadata \"ck/.metadata\"), \"ck/__3_0.distcp\" (named "
                        "by the DCP metadata \"ck/.metadata\")");
    manifest_free(&m);

    /* covered: long enough, __3_0 a hard link to a regular file of 30 bytes */
    manifest_init(&m);
    add_reg(&m, "ck/.metadata", len);
    add_reg(&m, "ck/__0_0.distcp", 100);
    add_reg(&m, "ck/__1_0.distcp", 4000);
    add_reg(&m, "ck/other", 30);
    assert_int_equal(manifest_add_file(&m, MFILE_HARDLINK, "ck/__3_0.distcp", 0644, "ck/other"), 0);
    assert_int_equal(check(&m, f, &missing, &bad, &err), 0);
    assert_int_equal(missing.len, 0);

    /* truncated: an error naming the file and the offset; a reader's error */
    f[0].len = len - 1;
    assert_int_equal(check(&m, f, &missing, &bad, &err), CKS_E_FORMAT);
    assert_string_equal(buf_str(&bad), "ck/.metadata");
    assert_non_null(strstr(buf_str(&err), "DCP metadata \"ck/.metadata\": not a readable pickle: "
                                          "offset "));
    f[0].fail = -EIO;
    assert_int_equal(check(&m, f, &missing, &bad, &err), -EIO);
    assert_string_equal(buf_str(&err), "DCP metadata \"ck/.metadata\": the reader failed");
    manifest_free(&m);
    buf_free(&missing);
    buf_free(&bad);
    buf_free(&err);
    free(meta);
}

static void test_hf_and_ranks(void **state)
{
    static const char idx[] = "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2\"}}";
    struct files f[] = {{"model.safetensors.index.json", (const uint8_t *)idx, sizeof(idx) - 1, 0},
                        {NULL, NULL, 0, 0}};
    struct buf missing = BUF_INIT, bad = BUF_INIT, err = BUF_INIT;
    struct manifest m;
    (void)state;
    manifest_init(&m);
    add_reg(&m, "model.safetensors.index.json", sizeof(idx) - 1);
    add_reg(&m, "s1.safetensors", 0);
    assert_int_equal(manifest_add_file(&m, MFILE_DIR, "s2", 0755, NULL), 0); /* not a file */
    add_reg(&m, "it/mp_rank_00/m.pt", 5);
    add_reg(&m, "it/mp_rank_20/m.pt", 5);
    assert_int_equal(check(&m, f, &missing, &bad, &err), 1);
    assert_string_equal(
        buf_str(&missing),
        "\"s2\" (named by the Hugging Face index \"model.safetensors.index.json\"), "
        "\"it/mp_rank_01\" (named by the rank sequence of the names in \"it\"), "
        "\"it/mp_rank_02\" (named by the rank sequence of the names in \"it\"), "
        "\"it/mp_rank_03\" (named by the rank sequence of the names in \"it\"), "
        "\"it/mp_rank_04\" (named by the rank sequence of the names in \"it\"), "
        "\"it/mp_rank_05\" (named by the rank sequence of the names in \"it\"), "
        "\"it/mp_rank_06\" (named by the rank sequence of the names in \"it\"), "
        "\"it/mp_rank_07\" (named by the rank sequence of the names in \"it\"), "
        "\"it/mp_rank_08\" (named by the rank sequence of the names in \"it\"), "
        "\"it/mp_rank_09\" (named by the rank sequence of the names in \"it\") "
        "and 10 more");
    manifest_free(&m);
    buf_free(&missing);
    buf_free(&bad);
    buf_free(&err);
}

/* A layout file above the bound is refused before any request. */
static void test_region_bound(void **state)
{
    struct region rg;
    struct manifest m;
    struct mfile f = {.path = "ck/.metadata", .type = MFILE_REG, .size = LAYOUTCOV_MAX_FILE + 1};
    struct buf out = BUF_INIT, err = BUF_INIT;
    (void)state;
    memset(&rg, 0, sizeof(rg));
    manifest_init(&m);
    assert_int_equal(layoutcov_region_read(&rg, &m, &f, &out, &err), CKS_E_LIMIT);
    assert_string_equal(buf_str(&err),
                        "it is 268435457 bytes, more than the 256 MiB a layout file may have");
    buf_free(&out);
    buf_free(&err);
}

/* A dir region in a fresh folder (removed by region_gone). */
static struct region *region_here(char root[64])
{
    struct region_conf conf;
    struct region *rg;
    struct buf err = BUF_INIT;
    memset(&conf, 0, sizeof(conf));
    snprintf(root, 64, "/tmp/cks-test-layoutcov-XXXXXX");
    assert_non_null(mkdtemp(root));
    snprintf(conf.name, sizeof(conf.name), "a");
    conf.kind = REGION_KIND_DIR;
    snprintf(conf.path, sizeof(conf.path), "%s", root);
    assert_int_equal(region_new(&conf, &rg, &err), 0);
    buf_free(&err);
    return rg;
}

static void region_gone(struct region *rg, const char *root)
{
    char cmd[128];
    region_free(rg);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/* A Hugging Face index stored as a recipe (version 6: XOR against a base
 * that is a k line) in a dir region is read through the recipe; with the
 * recipe object gone, the check fails naming the file and the recipe's
 * key, not a chunks/ key. */
static void test_region_recipe(void **state)
{
    static const char head[] = "{\"weight_map\": {\"a\": \"s1.safetensors\"}, \"n\": \"";
    uint8_t x[4096], b[4096], xid[HASH_LEN], bid[HASH_LEN], bases[1][HASH_LEN];
    struct chunkobj_ctx z = CHUNKOBJ_CTX_INIT;
    struct tdelta_opts o = {.level = 3};
    struct tdelta_base tb;
    struct tdelta_seg seg = {.kind = TDELTA_XOR, .len = sizeof(x), .width = 4};
    struct tdelta_stats st;
    struct buf obj = BUF_INIT, missing = BUF_INIT, bad = BUF_INIT, err = BUF_INIT;
    enum chunkobj_codec codec;
    struct chunkobj_opts co = {.level = 3};
    struct manifest m;
    char root[64], key[LAYOUT_KEY_MAX];
    (void)state;
    uint32_t r = 12345; /* a long string of letters: a file the plain codec cannot shrink much */
    for (size_t i = 0; i < sizeof(x); i++, r = r * 1103515245u + 12345u)
        x[i] = (uint8_t)('a' + (r >> 16) % 26);
    memcpy(x, head, sizeof(head) - 1);
    memcpy(x + sizeof(x) - 2, "\"}", 2);
    memcpy(b, x, sizeof(b));
    for (size_t i = 100; i < sizeof(b) - 2; i += 613)
        b[i] = 'z';
    hash_sha256(x, sizeof(x), xid);
    hash_sha256(b, sizeof(b), bid);
    struct region *rg = region_here(root);
    assert_int_equal(chunkobj_encode(&z, b, sizeof(b), &co, &obj, &codec), 0);
    layout_chunk(bid, key);
    assert_int_equal(region_put(rg, key, obj.data, obj.len), 0);
    memcpy(tb.id, bid, HASH_LEN);
    tb.data = b;
    tb.len = sizeof(b);
    assert_int_equal(tdelta_encode(&z, x, sizeof(x), &seg, 1, &tb, 1, &o, &obj, &st), 0);
    assert_true(st.recipe);
    manifest_init(&m);
    assert_int_equal(manifest_add_file(&m, MFILE_REG, "model.safetensors.index.json", 0644, NULL),
                     0);
    assert_int_equal(manifest_add_chunk(&m, xid, sizeof(x)), 0);
    add_reg(&m, "s1.safetensors", 0);
    assert_int_equal(manifest_mark_recipe(&m, 0, true), 0);
    memcpy(bases[0], bid, HASH_LEN);
    assert_int_equal(manifest_add_extra(&m, xid, sizeof(x), (const uint8_t(*)[HASH_LEN])bases, 1),
                     0);
    assert_int_equal(manifest_add_extra(&m, bid, sizeof(b), NULL, 0), 0);
    manifest_sort_extras(&m);
    layout_recipe(xid, manifest_extra(&m, xid)->sig, key);
    assert_int_equal(region_put(rg, key, obj.data, obj.len), 0);
    /* read through the recipe: covered */
    assert_int_equal(layoutcov_check(&m, layoutcov_region_read, rg, &missing, &bad, &err), 0);
    /* the recipe object gone: the file and the recipe's key are named */
    assert_int_equal(region_del(rg, key), 0);
    assert_true(layoutcov_check(&m, layoutcov_region_read, rg, &missing, &bad, &err) < 0);
    assert_string_equal(buf_str(&bad), "model.safetensors.index.json");
    assert_non_null(strstr(buf_str(&err), key));
    manifest_free(&m);
    chunkobj_ctx_free(&z);
    buf_free(&obj);
    buf_free(&missing);
    buf_free(&bad);
    buf_free(&err);
    region_gone(rg, root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dcp),
        cmocka_unit_test(test_hf_and_ranks),
        cmocka_unit_test(test_region_bound),
        cmocka_unit_test(test_region_recipe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
