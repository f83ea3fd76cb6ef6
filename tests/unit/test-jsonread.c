/*
 * test-jsonread.c — the JSON reader: values, lookups, and a rejection table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "base/jsonread.h"

static void test_values(void **state)
{
    const char *doc = "{\"runs\":[{\"run\":\"r1\",\"step\":-12.5e1}],\"ok\":true,\"none\":null,"
                      "\"s\":\"a\\\"b\\u00e9\\ud83d\\ude00\"}";
    struct jnode *root;
    (void)state;
    assert_int_equal(jsonread_parse(doc, strlen(doc), &root, NULL), 0);
    assert_int_equal(jnode_len(jnode_get(root, "runs")), 1);
    const struct jnode *r0 = jnode_at(jnode_get(root, "runs"), 0);
    assert_string_equal(jnode_str(jnode_get(r0, "run"), ""), "r1");
    assert_true(jnode_num(jnode_get(r0, "step"), 0) == -125.0);
    assert_true(jnode_bool(jnode_get(root, "ok"), false));
    assert_int_equal(jnode_get(root, "none")->type, J_NULL);
    assert_string_equal(jnode_str(jnode_get(root, "s"), ""), "a\"b\xc3\xa9\xf0\x9f\x98\x80");
    /* lookups on missing or mistyped nodes fall back */
    assert_null(jnode_get(root, "missing"));
    assert_string_equal(jnode_str(jnode_get(root, "ok"), "dflt"), "dflt");
    assert_null(jnode_at(jnode_get(root, "ok"), 0));
    assert_int_equal(jnode_len(NULL), 0);
    jsonread_free(root);
    jsonread_free(NULL);
}

static void test_rejects(void **state)
{
    static const struct {
        const char *doc;
        int code;
    } cases[] = {
        {"", CKS_E_FORMAT},           {"{", CKS_E_FORMAT},           {"{\"a\" 1}", CKS_E_FORMAT},
        {"{\"a\":1,}", CKS_E_FORMAT}, {"[1,]", CKS_E_FORMAT},        {"01", CKS_E_FORMAT},
        {"1.", CKS_E_FORMAT},         {"-", CKS_E_FORMAT},           {"tru", CKS_E_FORMAT},
        {"\"\\x\"", CKS_E_FORMAT},    {"\"\\ud800\"", CKS_E_FORMAT}, {"\"\\u0000\"", CKS_E_FORMAT},
        {"\"a\x01\"", CKS_E_FORMAT},  {"1 2", CKS_E_FORMAT},         {"{1:2}", CKS_E_FORMAT},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct jnode *root = NULL;
        struct buf err = BUF_INIT;
        int e = jsonread_parse(cases[i].doc, strlen(cases[i].doc), &root, &err);
        if (e != cases[i].code)
            fail_msg("'%s': got %d, want %d", cases[i].doc, e, cases[i].code);
        assert_true(strstr(buf_str(&err), "offset ") != NULL);
        buf_free(&err);
    }
}

static void test_depth(void **state)
{
    char doc[300];
    struct jnode *root;
    (void)state;
    memset(doc, '[', 150);
    memset(doc + 150, ']', 150);
    assert_int_equal(jsonread_parse(doc, sizeof(doc), &root, NULL), CKS_E_LIMIT);
    assert_int_equal(jsonread_parse(doc + 100, 100, &root, NULL), 0);
    jsonread_free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_depth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
