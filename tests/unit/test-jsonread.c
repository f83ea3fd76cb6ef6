/*
 * test-jsonread.c — the JSON reader: values, lookups, a rejection table, and
 * the non-finite numbers Python's json.dumps writes (NaN, Infinity,
 * -Infinity), exactly as it spells them.
 */
#include <math.h>
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
        {"", CKS_E_FORMAT},
        {"{", CKS_E_FORMAT},
        {"{\"a\" 1}", CKS_E_FORMAT},
        {"{\"a\":1,}", CKS_E_FORMAT},
        {"[1,]", CKS_E_FORMAT},
        {"01", CKS_E_FORMAT},
        {"1.", CKS_E_FORMAT},
        {"-", CKS_E_FORMAT},
        {"tru", CKS_E_FORMAT},
        {"\"\\x\"", CKS_E_FORMAT},
        {"\"\\ud800\"", CKS_E_FORMAT},
        {"\"\\u0000\"", CKS_E_FORMAT},
        {"\"a\x01\"", CKS_E_FORMAT},
        {"1 2", CKS_E_FORMAT},
        {"{1:2}", CKS_E_FORMAT},
        /* non-finite numbers: Python's three spellings and nothing else */
        {"nan", CKS_E_FORMAT},
        {"NAN", CKS_E_FORMAT},
        {"Na", CKS_E_FORMAT},
        {"NaNa", CKS_E_FORMAT},
        {"-NaN", CKS_E_FORMAT},
        {"+NaN", CKS_E_FORMAT},
        {"inf", CKS_E_FORMAT},
        {"Inf", CKS_E_FORMAT},
        {"-Inf", CKS_E_FORMAT},
        {"Infinit", CKS_E_FORMAT},
        {"infinity", CKS_E_FORMAT},
        {"+Infinity", CKS_E_FORMAT},
        {"--Infinity", CKS_E_FORMAT},
        {"-infinity", CKS_E_FORMAT},
        {"Infinity1", CKS_E_FORMAT},
        {"[NaN,]", CKS_E_FORMAT},
        {"{NaN:1}", CKS_E_FORMAT},
        {"[-]", CKS_E_FORMAT},
        {"[NaN Infinity]", CKS_E_FORMAT},
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

struct nonfinite_case {
    const char *doc;
    int kind; /* 0: NaN, 1: +inf, -1: -inf */
};

static void test_nonfinite(void **state)
{
    static const struct nonfinite_case cases[] = {
        {"NaN", 0},   {"Infinity", 1},       {"-Infinity", -1},       {" NaN ", 0},
        {"[NaN]", 0}, {"[1,-Infinity]", -1}, {"{\"a\":Infinity}", 1}, {"\tInfinity\n", 1},
        {"1e999", 1}, {"-1e999", -1},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct jnode *root = NULL;
        struct buf err = BUF_INIT;
        if (jsonread_parse(cases[i].doc, strlen(cases[i].doc), &root, &err) != 0)
            fail_msg("'%s': %s", cases[i].doc, buf_str(&err));
        const struct jnode *n = root;
        while (n->type == J_ARR || n->type == J_OBJ)
            n = n->kids[n->nkids - 1];
        assert_int_equal(n->type, J_NUM);
        double v = jnode_num(n, 0);
        if (cases[i].kind == 0 ? !isnan(v) : !(isinf(v) && (v > 0) == (cases[i].kind > 0)))
            fail_msg("'%s': read %g", cases[i].doc, v);
        jsonread_free(root);
        buf_free(&err);
    }
}

/* What Hugging Face's Trainer writes (json.dumps, indent 2, sorted keys): a
 * NaN grad_norm does not hide the rest of the document. */
static void test_trainer_state(void **state)
{
    static const char doc[] = "{\n  \"best_metric\": 0.1,\n"
                              "  \"best_model_checkpoint\": \"out/checkpoint-20\",\n"
                              "  \"log_history\": [\n"
                              "    {\n      \"grad_norm\": NaN,\n      \"loss\": 2.0,\n"
                              "      \"step\": 10\n    },\n"
                              "    {\n      \"eval_loss\": NaN,\n      \"step\": 10\n    },\n"
                              "    {\n      \"grad_norm\": Infinity,\n      \"step\": 20\n    },\n"
                              "    {\n      \"eval_loss\": 0.1,\n      \"min\": -Infinity,\n"
                              "      \"step\": 20\n    }\n  ],\n  \"total_flos\": 1.5e12\n}\n";
    struct jnode *root;
    (void)state;
    assert_int_equal(jsonread_parse(doc, strlen(doc), &root, NULL), 0);
    const struct jnode *h = jnode_get(root, "log_history");
    assert_int_equal(jnode_len(h), 4);
    assert_true(isnan(jnode_num(jnode_get(jnode_at(h, 0), "grad_norm"), 0)));
    assert_true(isnan(jnode_num(jnode_get(jnode_at(h, 1), "eval_loss"), 0)));
    assert_true(jnode_num(jnode_get(jnode_at(h, 2), "grad_norm"), 0) == INFINITY);
    assert_true(jnode_num(jnode_get(jnode_at(h, 3), "eval_loss"), 0) == 0.1);
    assert_true(jnode_num(jnode_get(jnode_at(h, 3), "min"), 0) == -INFINITY);
    assert_true(jnode_num(jnode_get(jnode_at(h, 3), "step"), 0) == 20);
    assert_string_equal(jnode_str(jnode_get(root, "best_model_checkpoint"), ""),
                        "out/checkpoint-20");
    jsonread_free(root);
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
        cmocka_unit_test(test_values),    cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_nonfinite), cmocka_unit_test(test_trainer_state),
        cmocka_unit_test(test_depth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
