/*
 * test-dcpmeta.c — the layout readers: DCP `.metadata` pickled by Python
 * (protocols 2 to 5, from stand-in classes with DCP's module and class
 * names: tests/integration/dcpmeta.py wrote tests/fixtures/dcp/), refused
 * when damaged, truncated at any byte, or hostile; the Hugging Face index;
 * Megatron / DeepSpeed rank-name gaps; the layout-need list itself.
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
#include "engine/dcpmeta.h"
#include "engine/hfindex.h"
#include "engine/ranknames.h"

static uint8_t *fixture(const char *name, size_t *len)
{
    char path[4096];
    uint8_t *data = NULL;
    snprintf(path, sizeof(path), "%s/dcp/%s", CKS_FIXTURES, name);
    assert_int_equal(fileio_read_all(path, 1 << 20, &data, len), 0);
    return data;
}

static void test_protocols(void **state)
{
    static const char *const files[] = {"p2.metadata", "p3.metadata", "p4.metadata", "p5.metadata"};
    (void)state;
    for (size_t f = 0; f < 4; f++) {
        size_t len;
        uint8_t *data = fixture(files[f], &len);
        struct layout_needs n = LAYOUT_NEEDS_INIT;
        struct buf err = BUF_INIT;
        assert_int_equal(dcpmeta_parse(data, len, &n, &err), 0);
        /* __0_0 [0, 100); __1_0 [0, 50) and [50, 120); __3_0 [10, 30) */
        assert_int_equal(n.n, 3);
        assert_string_equal(n.v[0].path, "__0_0.distcp");
        assert_int_equal(n.v[0].size, 100);
        assert_string_equal(n.v[1].path, "__1_0.distcp");
        assert_int_equal(n.v[1].size, 120);
        assert_string_equal(n.v[2].path, "__3_0.distcp");
        assert_int_equal(n.v[2].size, 30);
        layout_needs_free(&n);
        buf_free(&err);
        free(data);
    }
}

/* Every proper prefix of a real .metadata is refused, naming an offset. */
static void test_truncated(void **state)
{
    size_t len;
    uint8_t *data = fixture("p4.metadata", &len);
    (void)state;
    for (size_t cut = 0; cut < len; cut++) {
        struct layout_needs n = LAYOUT_NEEDS_INIT;
        struct buf err = BUF_INIT;
        int e = dcpmeta_parse(data, cut, &n, &err);
        if (e >= 0 || !strstr(buf_str(&err), "not a readable pickle: offset "))
            fail_msg("cut at %zu: %d \"%s\"", cut, e, buf_str(&err));
        assert_int_equal(n.n, 0);
        buf_free(&err);
    }
    free(data);
}

static void test_refused(void **state)
{
    static const struct {
        const char *file;
        int code;
        const char *msg;
    } t[] = {
        {"escape.metadata", CKS_E_UNSAFE_PATH,
         "relative_path \"../outside.distcp\" leaves the directory"},
        {"negative.metadata", CKS_E_FORMAT,
         "storage_data[\"extra_state.0\"]: relative_path is not "
         "a str, or offset or length not an int"},
        {"notmeta.metadata", CKS_E_FORMAT, "not a DCP Metadata: the pickle's value is a dict"},
        {"nostorage.metadata", CKS_E_FORMAT, "Metadata.storage_data is None, not a dict"},
        {"wrongclass.metadata", CKS_E_FORMAT,
         "storage_data[\"extra_state.0\"] is a tuple, not a _StorageInfo"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        size_t len;
        uint8_t *data = fixture(t[i].file, &len);
        struct layout_needs n = LAYOUT_NEEDS_INIT;
        struct buf err = BUF_INIT;
        int e = dcpmeta_parse(data, len, &n, &err);
        if (e != t[i].code || !strstr(buf_str(&err), t[i].msg))
            fail_msg("%s: %d \"%s\"", t[i].file, e, buf_str(&err));
        assert_int_equal(n.n, 0);
        buf_free(&err);
        free(data);
    }
}

static void test_hfindex(void **state)
{
    static const char ok[] = "{\"metadata\": {\"total_size\": 10}, \"weight_map\": {"
                             "\"a\": \"model-00001-of-00002.safetensors\", "
                             "\"b\": \"model-00002-of-00002.safetensors\", "
                             "\"c\": \"model-00001-of-00002.safetensors\"}}";
    static const struct {
        const char *doc, *msg;
        int code;
    } bad[] = {
        {"{\"weight_map\": {\"a\": \"../x\"}}", "weight_map[\"a\"]: \"../x\" leaves the directory",
         CKS_E_UNSAFE_PATH},
        {"{\"weight_map\": {\"a\": 3}}", "weight_map[\"a\"] is not a file name", CKS_E_FORMAT},
        {"{\"metadata\": {}}", "no \"weight_map\" object", CKS_E_FORMAT},
        {"{\"weight_map\": {\"a\": \"x\"", "not JSON: offset", CKS_E_FORMAT},
    };
    struct layout_needs n = LAYOUT_NEEDS_INIT;
    struct buf err = BUF_INIT;
    (void)state;
    assert_true(hfindex_name("model.safetensors.index.json"));
    assert_false(hfindex_name(".index.json"));
    assert_false(hfindex_name("index.json"));
    assert_int_equal(hfindex_parse(ok, strlen(ok), &n, &err), 0);
    assert_int_equal(n.n, 2);
    assert_string_equal(n.v[1].path, "model-00002-of-00002.safetensors");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        buf_reset(&err);
        int e = hfindex_parse(bad[i].doc, strlen(bad[i].doc), &n, &err);
        if (e != bad[i].code || !strstr(buf_str(&err), bad[i].msg))
            fail_msg("case %zu: %d \"%s\"", i, e, buf_str(&err));
        assert_int_equal(n.n, 0);
    }
    layout_needs_free(&n);
    buf_free(&err);
}

static void gaps(const char *const *paths, size_t n, const char *want)
{
    struct layout_needs g = LAYOUT_NEEDS_INIT;
    struct buf got = BUF_INIT;
    assert_int_equal(ranknames_gaps(paths, n, &g), 0);
    for (size_t i = 0; i < g.n; i++)
        buf_printf(&got, "%s%s", i ? " " : "", g.v[i].path);
    if (strcmp(buf_str(&got), want) != 0)
        fail_msg("gaps \"%s\", expected \"%s\"", buf_str(&got), want);
    layout_needs_free(&g);
    buf_free(&got);
}

static void test_ranknames(void **state)
{
    static const char *const megatron[] = {
        "iter_0002000", "iter_0002000/mp_rank_00", "iter_0002000/mp_rank_00/model_optim_rng.pt",
        "iter_0002000/mp_rank_01/model_optim_rng.pt", "iter_0002000/mp_rank_03/model_optim_rng.pt"};
    static const char *const full[] = {"i/mp_rank_00/m.pt", "i/mp_rank_01/m.pt"};
    static const char *const pp[] = {"i/mp_rank_00_000/m.pt", "i/mp_rank_01_000/m.pt",
                                     "i/mp_rank_00_001/m.pt"};
    static const char *const ds[] = {
        "global_step10/mp_rank_00_model_states.pt",
        "global_step10/mp_rank_01_model_states.pt",
        "global_step10/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "global_step10/zero_pp_rank_0_mp_rank_01_optim_states.pt",
        "global_step10/zero_pp_rank_1_mp_rank_00_optim_states.pt",
        "global_step10/zero_pp_rank_2_mp_rank_01_optim_states.pt",
        "global_step10/zero_pp_rank_2_mp_rank_00_optim_states.pt",
        "global_step10/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
    };
    static const char *const huge[] = {"i/mp_rank_99999999/m.pt", "mp_rank_7"};
    (void)state;
    gaps(megatron, 5, "iter_0002000/mp_rank_02");
    gaps(full, 2, "");
    gaps(pp, 3, "i/mp_rank_01_001");
    gaps(ds, 8,
         "global_step10/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt "
         "global_step10/zero_pp_rank_1_mp_rank_01_optim_states.pt");
    gaps(huge, 2, "mp_rank_0 mp_rank_1 mp_rank_2 mp_rank_3 mp_rank_4 mp_rank_5 mp_rank_6");
    gaps(NULL, 0, "");
}

static void test_needs(void **state)
{
    static const char *const bad[] = {"", "/abs", "a/../b", "a//b", "./a", "a/", "..", "a\nb"};
    struct layout_needs n = LAYOUT_NEEDS_INIT;
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(layout_needs_add(&n, bad[i], 0), CKS_E_UNSAFE_PATH);
    assert_int_equal(layout_needs_add(&n, "b", 5), 0);
    assert_int_equal(layout_needs_add(&n, "a/x.distcp", 1), 0);
    assert_int_equal(layout_needs_add(&n, "b", 9), 0);
    assert_int_equal(layout_needs_add(&n, "b", 2), 0);
    layout_needs_fold(&n);
    assert_int_equal(n.n, 2);
    assert_string_equal(n.v[0].path, "a/x.distcp");
    assert_int_equal(n.v[1].size, 9);
    layout_needs_free(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_protocols), cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_refused),   cmocka_unit_test(test_hfindex),
        cmocka_unit_test(test_ranknames), cmocka_unit_test(test_needs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
