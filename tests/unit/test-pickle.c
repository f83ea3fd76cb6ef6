/*
 * test-pickle.c — the restricted pickle reader: values as Python 3.11's
 * pickle writes them (protocols 2 and 4), objects and class references
 * that are never executed, and a table of malformed and hostile streams,
 * each refused with the offset and opcode in the message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/pickle.h"

/* pickle.dumps({'a': [1, -2, 3.5, None, True, b'xy', (1,2,3,4), {1},
 * frozenset([2]), 'café'], 'big': 2**70, 'neg': -300, 'n64': -2**63,
 * 'od': collections.OrderedDict([('k', 1)])}, protocol=4) */
static const char P4[] =
    "\x80\x04\x95\x9b\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b"
    "\x01\x4a\xfe\xff\xff\xff\x47\x40\x0c\x00\x00\x00\x00\x00\x00\x4e\x88\x43\x02\x78\x79\x94"
    "\x28\x4b\x01\x4b\x02\x4b\x03\x4b\x04\x74\x94\x8f\x94\x28\x4b\x01\x90\x28\x4b\x02\x91\x94"
    "\x8c\x05\x63\x61\x66\xc3\xa9\x94\x65\x8c\x03\x62\x69\x67\x94\x8a\x09\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x40\x8c\x03\x6e\x65\x67\x94\x4a\xd4\xfe\xff\xff\x8c\x03\x6e\x36\x34\x94\x8a"
    "\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8c\x02\x6f\x64\x94\x8c\x0b\x63\x6f\x6c\x6c\x65\x63"
    "\x74\x69\x6f\x6e\x73\x94\x8c\x0b\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x94\x93\x94"
    "\x29\x52\x94\x8c\x01\x6b\x94\x4b\x01\x73\x75\x2e";

/* The same value, protocol=2 (BINPUT memo, GLOBAL, sets by REDUCE). */
static const char P2[] =
    "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x4a\xfe"
    "\xff\xff\xff\x47\x40\x0c\x00\x00\x00\x00\x00\x00\x4e\x88\x63\x5f\x63\x6f\x64\x65\x63\x73"
    "\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x03\x58\x02\x00\x00\x00\x78\x79\x71\x04\x58\x06\x00"
    "\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x05\x86\x71\x06\x52\x71\x07\x28\x4b\x01\x4b\x02\x4b"
    "\x03\x4b\x04\x74\x71\x08\x63\x5f\x5f\x62\x75\x69\x6c\x74\x69\x6e\x5f\x5f\x0a\x73\x65\x74"
    "\x0a\x71\x09\x5d\x71\x0a\x4b\x01\x61\x85\x71\x0b\x52\x71\x0c\x63\x5f\x5f\x62\x75\x69\x6c"
    "\x74\x69\x6e\x5f\x5f\x0a\x66\x72\x6f\x7a\x65\x6e\x73\x65\x74\x0a\x71\x0d\x5d\x71\x0e\x4b"
    "\x02\x61\x85\x71\x0f\x52\x71\x10\x58\x05\x00\x00\x00\x63\x61\x66\xc3\xa9\x71\x11\x65\x58"
    "\x03\x00\x00\x00\x62\x69\x67\x71\x12\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x58\x03"
    "\x00\x00\x00\x6e\x65\x67\x71\x13\x4a\xd4\xfe\xff\xff\x58\x03\x00\x00\x00\x6e\x36\x34\x71"
    "\x14\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x58\x02\x00\x00\x00\x6f\x64\x71\x15\x63\x63"
    "\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74"
    "\x0a\x71\x16\x29\x52\x71\x17\x58\x01\x00\x00\x00\x6b\x71\x18\x4b\x01\x73\x75\x2e";

static void check_common(const struct pickle_node *root)
{
    assert_int_equal(root->kind, PICKLE_DICT);
    const struct pickle_node *a = pickle_dict_get(root, "a");
    assert_non_null(a);
    assert_int_equal(a->kind, PICKLE_LIST);
    assert_int_equal(a->n, 10);
    assert_int_equal(a->kids[0]->i, 1);
    assert_int_equal(a->kids[1]->i, -2);
    assert_true(a->kids[2]->kind == PICKLE_FLOAT && a->kids[2]->f == 3.5);
    assert_int_equal(a->kids[3]->kind, PICKLE_NONE);
    assert_true(a->kids[4]->kind == PICKLE_BOOL && a->kids[4]->b);
    assert_int_equal(a->kids[6]->kind, PICKLE_TUPLE);
    assert_int_equal(a->kids[6]->n, 4);
    assert_int_equal(a->kids[6]->kids[3]->i, 4);
    assert_string_equal(a->kids[9]->s, "caf\xc3\xa9");
    assert_int_equal(pickle_dict_get(root, "big")->kind, PICKLE_BIGINT);
    assert_int_equal(pickle_dict_get(root, "neg")->i, -300);
    assert_true(pickle_dict_get(root, "n64")->i == INT64_MIN);
    const struct pickle_node *od = pickle_dict_get(root, "od");
    assert_true(pickle_is_class(od, "collections", "OrderedDict"));
    const struct pickle_node *items = od->kids[PICKLE_OBJ_DICTITEMS];
    assert_non_null(items);
    assert_int_equal(pickle_dict_get(items, "k")->i, 1);
}

static void test_values(void **state)
{
    struct pickle *p;
    struct buf err = BUF_INIT;
    (void)state;
    assert_int_equal(pickle_parse((const uint8_t *)P4, sizeof(P4) - 1, NULL, &p, &err), 0);
    const struct pickle_node *root = pickle_root(p);
    check_common(root);
    const struct pickle_node *a = pickle_dict_get(root, "a");
    assert_true(a->kids[5]->kind == PICKLE_BYTES && a->kids[5]->len == 2);
    assert_int_equal(a->kids[7]->kind, PICKLE_SET);
    assert_int_equal(a->kids[8]->kind, PICKLE_FROZENSET);
    pickle_free(p);

    assert_int_equal(pickle_parse((const uint8_t *)P2, sizeof(P2) - 1, NULL, &p, &err), 0);
    root = pickle_root(p);
    check_common(root);
    a = pickle_dict_get(root, "a"); /* protocol 2: bytes and sets are REDUCEs, kept as objects */
    assert_true(pickle_is_class(a->kids[5], "_codecs", "encode"));
    assert_true(pickle_is_class(a->kids[7], "__builtin__", "set"));
    pickle_free(p);
    pickle_free(NULL);
    assert_int_equal(err.len, 0);
    buf_free(&err);
}

/* A class reference and a REDUCE of it are values: os.system is never
 * looked up, let alone called. */
static void test_never_executes(void **state)
{
    static const char s[] = "\x80\x02\x63os\nsystem\n\x58\x04\x00\x00\x00true\x85R.";
    struct pickle *p;
    (void)state;
    assert_int_equal(pickle_parse((const uint8_t *)s, sizeof(s) - 1, NULL, &p, NULL), 0);
    const struct pickle_node *o = pickle_root(p);
    assert_true(pickle_is_class(o, "os", "system"));
    assert_string_equal(o->kids[PICKLE_OBJ_ARGS]->kids[0]->s, "true");
    assert_null(pickle_attr(o, "x"));
    pickle_free(p);
}

struct bad {
    const char *data;
    size_t len;
    int code;
    const char *msg;
};

#define BAD(s, code, msg)                                                                          \
    {                                                                                              \
        s, sizeof(s) - 1, code, msg                                                                \
    }

static void test_refused(void **state)
{
    static const struct bad t[] = {
        BAD("", CKS_E_FORMAT, "offset 0: unknown opcode (0x00): not a pickle of protocol 2 to 5"),
        BAD("\x80\x01N.", CKS_E_FORMAT, "not a pickle of protocol 2 to 5"),
        BAD("(lp0\n.", CKS_E_FORMAT, "not a pickle of protocol 2 to 5"),
        BAD("\x80\x04N", CKS_E_FORMAT, "input ends before STOP"),
        BAD("\x80\x04N.x", CKS_E_FORMAT, "bytes follow STOP"),
        BAD("\x80\x04NN.", CKS_E_FORMAT, "not one value left"),
        BAD("\x80\x04(N.", CKS_E_FORMAT, "a MARK is still open"),
        BAD("\x80\x04\xff", CKS_E_FORMAT,
            "offset 2: unknown opcode (0xff): unknown or unsupported"),
        BAD("\x80\x04I1\n.", CKS_E_FORMAT, "offset 2: INT (0x49): unknown or unsupported"),
        BAD("\x80\x04P1\n.", CKS_E_FORMAT, "offset 2: PERSID (0x50)"),
        BAD("\x80\x04\x82\x01.", CKS_E_FORMAT, "offset 2: EXT1 (0x82)"),
        BAD("\x80\x05\x97.", CKS_E_FORMAT, "offset 2: NEXT_BUFFER (0x97)"),
        BAD("\x80\x04X\xff\xff\xff\x7f", CKS_E_FORMAT,
            "offset 2: BINUNICODE (0x58): argument runs past the end"),
        BAD("\x80\x04\x8c\x05"
            "abc",
            CKS_E_FORMAT, "SHORT_BINUNICODE (0x8c): argument runs past"),
        BAD("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N.", CKS_E_FORMAT,
            "offset 2: FRAME (0x95): argument runs past the end"),
        BAD("\x80\x04h\x05.", CKS_E_FORMAT, "offset 2: BINGET (0x68): memo index never set"),
        BAD("\x80\x04Nr\xff\xff\xff\x00.", CKS_E_LIMIT, "LONG_BINPUT (0x72): memo index too large"),
        BAD("\x80\x04\x94.", CKS_E_FORMAT, "MEMOIZE (0x94): stack underflow"),
        BAD("\x80\x04"
            "a.",
            CKS_E_FORMAT, "offset 2: APPEND (0x61): stack underflow"),
        BAD("\x80\x04}Na.", CKS_E_FORMAT, "offset 4: APPEND (0x61): target is not a list"),
        BAD("\x80\x04](Nu.", CKS_E_FORMAT, "SETITEMS (0x75): odd items"),
        BAD("\x80\x04]\x94h\x00"
            "a.",
            CKS_E_FORMAT, "STOP (0x2e): the value contains itself"),
        BAD("\x80\x04N}b.", CKS_E_FORMAT, "BUILD (0x62): BUILD on a value that is not an object"),
        BAD("\x80\x04N)\x81}b}b.", CKS_E_FORMAT, "a second BUILD on one object"),
        BAD("\x80\x04NNR.", CKS_E_FORMAT, "REDUCE (0x52): arguments are not a tuple"),
        BAD("\x80\x04(N\x93.", CKS_E_FORMAT, "STACK_GLOBAL (0x93): stack underflow"),
        BAD("\x80\x04NN\x93.", CKS_E_FORMAT, "module and name are not both str"),
        BAD("\x80\x02\x63os\n.", CKS_E_FORMAT, "GLOBAL (0x63): no newline"),
        BAD("\x80\x02\x63\nx\n.", CKS_E_FORMAT, "empty module or name"),
        BAD("\x80\x04\x8a\x02\x01", CKS_E_FORMAT, "LONG1 (0x8a): argument runs past the end"),
        BAD("\x80\x04\x31.", CKS_E_FORMAT, "POP_MARK (0x31): no MARK"),
        BAD("\x80\x04(\x30\x30.", CKS_E_FORMAT, "POP (0x30): no MARK"),
        BAD("\x80\x04t.", CKS_E_FORMAT, "TUPLE (0x74): no MARK"),
        BAD("\x80\x04N\x86.", CKS_E_FORMAT, "TUPLE2 (0x86): stack underflow"),
        BAD("\x80\x04N(\x86.", CKS_E_FORMAT, "TUPLE2 (0x86): stack underflow"),
        BAD("\x80\x04\x8f(N\x90N\x90.", CKS_E_FORMAT, "ADDITEMS (0x90): no MARK"),
        BAD("\x80\x04](N\x90.", CKS_E_FORMAT, "ADDITEMS (0x90): target is not a set"),
    };
    (void)state;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct pickle *p = (struct pickle *)1;
        struct buf err = BUF_INIT;
        int e = pickle_parse((const uint8_t *)t[i].data, t[i].len, NULL, &p, &err);
        if (e != t[i].code || !strstr(buf_str(&err), t[i].msg))
            fail_msg("case %zu: %d \"%s\", expected %d \"%s\"", i, e, buf_str(&err), t[i].code,
                     t[i].msg);
        assert_null(p);
        buf_free(&err);
    }
}

/* The limits: nodes, string length, input size, nesting, open MARKs. */
static void test_limits(void **state)
{
    struct pickle_limits lim = {1024, 3, 8, 4, false};
    struct pickle *p;
    struct buf err = BUF_INIT;
    uint8_t deep[64], marks[64];
    size_t n = 0;
    (void)state;
    assert_int_equal(pickle_parse((const uint8_t *)"\x80\x04]]]]", 6, &lim, &p, &err), CKS_E_LIMIT);
    assert_non_null(strstr(buf_str(&err), "offset 5: EMPTY_LIST (0x5d): too many values"));
    buf_reset(&err);
    assert_int_equal(pickle_parse((const uint8_t *)"\x80\x04\x8c\x05"
                                                   "abcde.",
                                  10, &lim, &p, &err),
                     CKS_E_LIMIT);
    assert_non_null(strstr(buf_str(&err), "string longer than the limit"));
    buf_reset(&err);
    lim = (struct pickle_limits){8, 100, 8, 100, false};
    assert_int_equal(pickle_parse((const uint8_t *)"\x80\x04NNNNNNN", 9, &lim, &p, &err),
                     CKS_E_LIMIT);
    assert_non_null(strstr(buf_str(&err), "input larger than the limit"));
    buf_reset(&err);
    /* ]]]]]]]]]aaaaaaaa. : lists nested 9 deep */
    lim = (struct pickle_limits){1024, 100, 8, 100, false};
    deep[n++] = 0x80, deep[n++] = 4;
    for (int i = 0; i < 9; i++)
        deep[n++] = ']';
    for (int i = 0; i < 8; i++)
        deep[n++] = 'a';
    deep[n++] = '.';
    assert_int_equal(pickle_parse(deep, n, &lim, &p, &err), CKS_E_LIMIT);
    assert_non_null(strstr(buf_str(&err), "nested deeper than the limit"));
    buf_reset(&err);
    lim.max_depth = 9;
    assert_int_equal(pickle_parse(deep, n, &lim, &p, &err), 0);
    pickle_free(p);
    n = 0;
    marks[n++] = 0x80, marks[n++] = 4;
    for (int i = 0; i < 10; i++)
        marks[n++] = '(';
    assert_int_equal(pickle_parse(marks, n, &lim, &p, &err), CKS_E_LIMIT);
    assert_non_null(strstr(buf_str(&err), "offset 11: MARK (0x28): too many open MARKs"));
    buf_free(&err);
}

/* A DAG (one memo'd value in two places) is fine, and walked once. */
static void test_shared(void **state)
{
    /* x = [1]; pickle.dumps((x, x), 4) */
    static const char s[] = "\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00]\x94K\x01"
                            "ah\x00\x86\x94.";
    struct pickle *p;
    (void)state;
    assert_int_equal(pickle_parse((const uint8_t *)s, sizeof(s) - 1, NULL, &p, NULL), 0);
    const struct pickle_node *t = pickle_root(p);
    assert_int_equal(t->kind, PICKLE_TUPLE);
    assert_ptr_equal(t->kids[0], t->kids[1]);
    assert_int_equal(pickle_nnodes(p), 3);
    pickle_free(p);
    /* None, bools and small ints are one node each, however often they come */
    assert_int_equal(
        pickle_parse((const uint8_t *)"\x80\x04(NNK\x07K\x07\x88\x88t.", 13, NULL, &p, NULL), 0);
    assert_int_equal(pickle_nnodes(p), 4);
    assert_ptr_equal(pickle_root(p)->kids[2], pickle_root(p)->kids[3]);
    pickle_free(p);
}

/* BINPERSID: refused by default (DCP), a PICKLE_PERSID node holding the
 * id where limits.persid allows it (torch.save's storages); the text
 * PERSID stays refused. */
static void test_persid(void **state)
{
    static const char s[] = "\x80\x02X\x01\x00\x00\x00"
                            "0\x85Q.";
    struct pickle_limits lim = PICKLE_LIMITS_DEFAULT;
    struct pickle *p;
    struct buf err = BUF_INIT;
    (void)state;
    assert_int_equal(pickle_parse((const uint8_t *)s, sizeof(s) - 1, NULL, &p, &err), CKS_E_FORMAT);
    assert_non_null(strstr(buf_str(&err), "BINPERSID (0x51)"));
    lim.persid = true;
    assert_int_equal(pickle_parse((const uint8_t *)s, sizeof(s) - 1, &lim, &p, NULL), 0);
    const struct pickle_node *n = pickle_root(p);
    assert_int_equal(n->kind, PICKLE_PERSID);
    assert_string_equal(pickle_kind_name(n), "persistent id");
    assert_int_equal(n->n, 1);
    assert_int_equal(n->kids[0]->kind, PICKLE_TUPLE);
    assert_string_equal(n->kids[0]->kids[0]->s, "0");
    pickle_free(p);
    assert_int_equal(pickle_parse((const uint8_t *)"\x80\x02Q.", 4, &lim, &p, NULL), CKS_E_FORMAT);
    assert_int_equal(pickle_parse((const uint8_t *)"\x80\x02P0\n.", 6, &lim, &p, NULL),
                     CKS_E_FORMAT);
    buf_free(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),  cmocka_unit_test(test_never_executes),
        cmocka_unit_test(test_refused), cmocka_unit_test(test_limits),
        cmocka_unit_test(test_shared),  cmocka_unit_test(test_persid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
