/*
 * test-ctlproto.c — the control protocol codec: tables of valid requests
 * of every verb (parsed fields, canonical re-encoding, round trip), a table
 * of every kind of rejection with its code, encoder refusals, and the
 * response side (OK/ERR encoding, splitting, lenient message decoding,
 * size bounds, error code mapping).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/ctlproto.h"

#define L(s) s, sizeof(s) - 1

struct valid_case {
    const char *line;
    enum ctl_verb verb;
    const char *path;
    int64_t step;
    enum ctl_wait wait;
    int64_t timeout;
    const char *region;
    const char *canon; /* NULL: the line itself is canonical */
};

static const struct valid_case valid[] = {
    {"CKPTSYNC/1 ping\n", CTL_PING, "", -1, CTL_WAIT_NONE, -1, "", NULL},
    {"CKPTSYNC/1 status\n", CTL_STATUS, "", -1, CTL_WAIT_NONE, -1, "", NULL},
    {"CKPTSYNC/1 commit path=/data/cloud_storage/r1/checkpoint-10\n", CTL_COMMIT,
     "/data/cloud_storage/r1/checkpoint-10", -1, CTL_WAIT_NONE, -1, "", NULL},
    {"CKPTSYNC/1 commit path=/d/r1/step_10.pt step=10 wait=durable timeout=600\n", CTL_COMMIT,
     "/d/r1/step_10.pt", 10, CTL_WAIT_DURABLE, 600, "", NULL},
    {"CKPTSYNC/1 commit timeout=0 wait=replicated step=0 path=/x\n", CTL_COMMIT, "/x", 0,
     CTL_WAIT_REPLICATED, 0, "", "CKPTSYNC/1 commit path=/x step=0 wait=replicated timeout=0\n"},
    {"CKPTSYNC/1 commit path=/a%20b/%25c%3Dd%0Ae%7f%C3%a9 step=9223372036854775807 "
     "timeout=604800\n",
     CTL_COMMIT, "/a b/%c=d\ne\x7f\xc3\xa9", INT64_MAX, CTL_WAIT_NONE, 604800, "",
     "CKPTSYNC/1 commit path=/a%20b/%25c%3Dd%0Ae%7F%C3%A9 step=9223372036854775807 "
     "timeout=604800\n"},
    {"CKPTSYNC/1 commit path=%2F%41 wait=none step=%31\n", CTL_COMMIT, "/A", 1, CTL_WAIT_NONE, -1,
     "", "CKPTSYNC/1 commit path=/A step=1\n"},
    {"CKPTSYNC/1 flush\n", CTL_FLUSH, "", -1, CTL_WAIT_NONE, -1, "", NULL},
    {"CKPTSYNC/1 flush wait=durable deadline=30\n", CTL_FLUSH, "", -1, CTL_WAIT_DURABLE, 30, "",
     NULL},
    {"CKPTSYNC/1 flush deadline=0 wait=replicated\n", CTL_FLUSH, "", -1, CTL_WAIT_REPLICATED, 0, "",
     "CKPTSYNC/1 flush wait=replicated deadline=0\n"},
    {"CKPTSYNC/1 retry region=eu-west_1\n", CTL_RETRY, "", -1, CTL_WAIT_NONE, -1, "eu-west_1",
     NULL},
};

/* restored: its own fields, every other one absent. */
struct restored_case {
    const char *line;
    int64_t bytes, files, usec;
    enum ctl_result result;
    const char *canon;
};

static const struct restored_case restored[] = {
    {"CKPTSYNC/1 restored bytes=3145728 files=2 usec=412345 result=ok\n", 3145728, 2, 412345,
     CTL_RESULT_OK, NULL},
    {"CKPTSYNC/1 restored bytes=0 files=0 usec=0 result=failed\n", 0, 0, 0, CTL_RESULT_FAILED,
     NULL},
    {"CKPTSYNC/1 restored result=ok usec=7 files=1 bytes=9223372036854775807\n", INT64_MAX, 1, 7,
     CTL_RESULT_OK, "CKPTSYNC/1 restored bytes=9223372036854775807 files=1 usec=7 result=ok\n"},
    {"CKPTSYNC/1 restored bytes=%31 files=1 usec=1 result=%6Fk\n", 1, 1, 1, CTL_RESULT_OK,
     "CKPTSYNC/1 restored bytes=1 files=1 usec=1 result=ok\n"},
};

static void check_round_trip(const struct ctl_request *r, const char *canon)
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    struct ctl_request back;

    assert_int_equal(ctl_request_encode(r, &out), 0);
    if (canon)
        assert_string_equal(buf_str(&out), canon);
    assert_int_equal(ctl_request_parse((const char *)out.data, out.len, &back, &err), 0);
    assert_true(ctl_request_equal(r, &back));
    buf_free(&out);
    buf_free(&err);
}

static void test_valid_requests(void **state)
{
    for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
        const struct valid_case *v = &valid[i];
        struct ctl_request r;
        struct buf err = BUF_INIT;
        int rc = ctl_request_parse(v->line, strlen(v->line), &r, &err);
        if (rc != 0)
            fail_msg("case %zu \"%s\": %s", i, v->line, buf_str(&err));
        assert_int_equal(r.verb, v->verb);
        assert_string_equal(r.path, v->path);
        assert_int_equal(r.step, v->step);
        assert_int_equal(r.wait, v->wait);
        assert_int_equal(r.timeout, v->timeout);
        assert_string_equal(r.region, v->region);
        check_round_trip(&r, v->canon ? v->canon : v->line);
        buf_free(&err);
    }
}

static void test_restored_requests(void **state)
{
    for (size_t i = 0; i < sizeof(restored) / sizeof(restored[0]); i++) {
        const struct restored_case *v = &restored[i];
        struct ctl_request r, want;
        struct buf err = BUF_INIT;
        int rc = ctl_request_parse(v->line, strlen(v->line), &r, &err);
        if (rc != 0)
            fail_msg("case %zu \"%s\": %s", i, v->line, buf_str(&err));
        ctl_request_init(&want, CTL_RESTORED);
        want.bytes = v->bytes;
        want.files = v->files;
        want.usec = v->usec;
        want.result = v->result;
        assert_true(ctl_request_equal(&r, &want));
        check_round_trip(&r, v->canon ? v->canon : v->line);
        buf_free(&err);
    }
    /* the other verbs leave the restored fields absent */
    struct ctl_request r;
    assert_int_equal(ctl_request_parse(L("CKPTSYNC/1 ping\n"), &r, NULL), 0);
    assert_int_equal(r.bytes, -1);
    assert_int_equal(r.files, -1);
    assert_int_equal(r.usec, -1);
    assert_int_equal(r.result, CTL_RESULT_NONE);
}

struct bad_case {
    const char *line;
    size_t len;
    int code;
};

static const struct bad_case bad[] = {
    {L(""), CKS_E_FORMAT},
    {L("\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 ping"), CKS_E_FORMAT},                    /* no newline */
    {L("CKPTSYNC/1 ping\r\n"), CKS_E_FORMAT},                /* CR */
    {L("CKPTSYNC/1 pi\0ng\n"), CKS_E_FORMAT},                /* NUL */
    {L("CKPTSYNC/1 ping\nCKPTSYNC/1 ping\n"), CKS_E_FORMAT}, /* two lines */
    {L("CKPTSYNC/1  ping\n"), CKS_E_FORMAT},                 /* double space */
    {L(" CKPTSYNC/1 ping\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 ping \n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1\tping\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1\n"), CKS_E_FORMAT}, /* no verb */
    {L("CKPTSYNC/1 \n"), CKS_E_FORMAT},
    {L("ckptsync/1 ping\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/ ping\n"), CKS_E_FORMAT},
    {L("GET / HTTP/1.1\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/2 ping\n"), CKS_E_VERSION},
    {L("CKPTSYNC/10 ping\n"), CKS_E_VERSION},
    {L("CKPTSYNC/1 PING\n"), CKS_E_FORMAT}, /* verbs are lower case */
    {L("CKPTSYNC/1 restore\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 ping x=1\n"), CKS_E_FORMAT}, /* key the verb does not take */
    {L("CKPTSYNC/1 status wait=none\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit\n"), CKS_E_FORMAT}, /* path required */
    {L("CKPTSYNC/1 commit step=1\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a path=/b\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a step=1 step=1\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a wait=none wait=none\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=relative/dir\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a%00b\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a%2\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a%zz\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a=b\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/\xc3\xa9\n"), CKS_E_FORMAT}, /* raw non-ASCII */
    {L("CKPTSYNC/1 commit path=/a\x7f\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit =x path=/a\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit Path=/a\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a step=-1\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a step=+1\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a step=01\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a step=9223372036854775808\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a step=99999999999999999999999999999999999\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a step=\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a step=1x\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a wait=Durable\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a wait=\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a wait=sometimes\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a timeout=604801\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a timeout=-1\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a timeout=1.5\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a deadline=5\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a region=x\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 flush timeout=5\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 flush deadline=604801\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 flush path=/a\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 retry\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 retry region=\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 retry region=eu%201\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 retry region=eu.1\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 retry region="
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"),
     CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored\n"), CKS_E_FORMAT}, /* all four keys required */
    {L("CKPTSYNC/1 restored files=1 usec=1 result=ok\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 usec=1 result=ok\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=1 result=ok\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=1 usec=1\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 bytes=1 files=1 usec=1 result=ok\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=-1 files=1 usec=1 result=ok\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=9223372036854775808 files=1 usec=1 result=ok\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=01 usec=1 result=ok\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=1 usec=1.5 result=ok\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=1 usec=1 result=OK\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=1 usec=1 result=none\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=1 usec=1 result=\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=1 usec=1 result=okokokokokokokokokokokokokokokokok\n"),
     CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=1 usec=1 result=ok%00\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 restored bytes=1 files=1 usec=1 result=ok step=1\n"), CKS_E_FORMAT},
    {L("CKPTSYNC/1 commit path=/a bytes=1\n"), CKS_E_FORMAT}, /* restored's keys only */
    {L("CKPTSYNC/1 status result=ok\n"), CKS_E_FORMAT},
};

static void test_rejections(void **state)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ctl_request r;
        struct buf err = BUF_INIT;
        int rc = ctl_request_parse(bad[i].line, bad[i].len, &r, &err);
        if (rc != bad[i].code)
            fail_msg("case %zu \"%.*s\": got %d, want %d", i, (int)bad[i].len, bad[i].line, rc,
                     bad[i].code);
        assert_true(err.len > 0);
        assert_null(memchr(err.data, '\n', err.len));
        assert_int_equal(ctl_request_parse(bad[i].line, bad[i].len, &r, NULL), bad[i].code);
        buf_free(&err);
    }
}

/* A commit line whose decoded path is n bytes ("/aaa..."), encoded as
 * given so that the line can be made long. */
static char *commit_line(size_t n, bool escaped, size_t *ret_len)
{
    struct buf b = BUF_INIT;
    assert_int_equal(buf_puts(&b, "CKPTSYNC/1 commit path=/"), 0);
    for (size_t i = 1; i < n; i++)
        assert_int_equal(buf_puts(&b, escaped ? "%61" : "a"), 0);
    assert_int_equal(buf_puts(&b, "\n"), 0);
    return (char *)buf_detach(&b, ret_len);
}

static void test_bounds(void **state)
{
    struct ctl_request r;
    size_t len;
    char *line = commit_line(CTL_PATH_MAX - 1, true, &len); /* longest path */
    assert_int_equal(ctl_request_parse(line, len, &r, NULL), 0);
    assert_int_equal(strlen(r.path), CTL_PATH_MAX - 1);
    check_round_trip(&r, NULL);
    free(line);

    line = commit_line(CTL_PATH_MAX, false, &len); /* one byte too many */
    assert_int_equal(ctl_request_parse(line, len, &r, NULL), CKS_E_FORMAT);
    free(line);

    /* Exactly CTL_MAX_REQUEST bytes is screened, one more is a limit. */
    struct buf b = BUF_INIT;
    assert_int_equal(buf_puts(&b, "CKPTSYNC/1 ping"), 0);
    while (b.len < CTL_MAX_REQUEST - 1)
        assert_int_equal(buf_puts(&b, " x=1"), 0);
    b.len = CTL_MAX_REQUEST - 1;
    assert_int_equal(buf_puts(&b, "\n"), 0);
    assert_int_equal(ctl_request_parse((char *)b.data, b.len, &r, NULL), CKS_E_FORMAT);
    b.len--;
    assert_int_equal(buf_puts(&b, "1\n"), 0);
    assert_int_equal(ctl_request_parse((char *)b.data, b.len, &r, NULL), CKS_E_LIMIT);
    buf_free(&b);
}

static void test_encode_refuses(void **state)
{
    struct ctl_request r;
    struct buf out = BUF_INIT;

    ctl_request_init(&r, CTL_COMMIT); /* no path */
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    memcpy(r.path, "rel", 4);
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    memset(r.path, 'a', sizeof(r.path)); /* not terminated */
    r.path[0] = '/';
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    memcpy(r.path, "/ok", 4);
    r.step = -2;
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    r.step = 1;
    r.timeout = CTL_MAX_TIMEOUT + 1;
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    r.timeout = 5;
    r.wait = (enum ctl_wait)7;
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    r.wait = CTL_WAIT_DURABLE;
    r.verb = (enum ctl_verb)99;
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    ctl_request_init(&r, CTL_RETRY);
    memcpy(r.region, "eu 1", 5);
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    ctl_request_init(&r, CTL_RESTORED); /* every field absent */
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    r.bytes = r.files = r.usec = 1;
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL); /* no result */
    r.result = (enum ctl_result)9;
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    r.result = CTL_RESULT_OK;
    r.usec = -1;
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    assert_int_equal(out.len, 0);
    buf_free(&out);
}

/* commit nodes= node_rank=: together, the rank below the count. */
static void test_commit_node(void **state)
{
    static const struct {
        const char *line;
        int code;
    } cases[] = {
        {"CKPTSYNC/1 commit path=/a nodes=1 node_rank=0\n", 0},
        {"CKPTSYNC/1 commit path=/a nodes=4096 node_rank=4095\n", 0},
        {"CKPTSYNC/1 commit path=/a nodes=4\n", CKS_E_FORMAT},
        {"CKPTSYNC/1 commit path=/a node_rank=0\n", CKS_E_FORMAT},
        {"CKPTSYNC/1 commit path=/a nodes=2 node_rank=2\n", CKS_E_FORMAT},
        {"CKPTSYNC/1 commit path=/a nodes=0 node_rank=0\n", CKS_E_FORMAT},
        {"CKPTSYNC/1 commit path=/a nodes=4097 node_rank=0\n", CKS_E_FORMAT},
        {"CKPTSYNC/1 commit path=/a nodes=2 node_rank=1 nodes=2\n", CKS_E_FORMAT},
        {"CKPTSYNC/1 flush nodes=2 node_rank=1\n", CKS_E_FORMAT},
    };
    struct ctl_request r;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (ctl_request_parse(cases[i].line, strlen(cases[i].line), &r, NULL) != cases[i].code)
            fail_msg("case %zu \"%s\": want %d", i, cases[i].line, cases[i].code);
    assert_int_equal(
        ctl_request_parse(L("CKPTSYNC/1 commit node_rank=2 path=/a nodes=4 step=7\n"), &r, NULL),
        0);
    assert_int_equal(r.nodes, 4);
    assert_int_equal(r.node_rank, 2);
    check_round_trip(&r, "CKPTSYNC/1 commit path=/a step=7 nodes=4 node_rank=2\n");
    assert_int_equal(ctl_request_parse(L("CKPTSYNC/1 commit path=/a\n"), &r, NULL), 0);
    assert_int_equal(r.nodes, -1); /* absent: the commit of before */
    assert_int_equal(r.node_rank, -1);

    struct buf out = BUF_INIT;
    r.nodes = 2; /* the encoder keeps the parser's rules */
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    r.node_rank = 2;
    assert_int_equal(ctl_request_encode(&r, &out), -EINVAL);
    assert_int_equal(out.len, 0);
    assert_int_equal(ctl_err_errno(CTL_ERR_WRONGNODE), -EINVAL);
    buf_free(&out);
}

static void test_response_encode(void **state)
{
    struct buf out = BUF_INIT;

    assert_int_equal(ctl_response_ok(&out, "{}"), 0);
    assert_int_equal(ctl_response_ok(&out, "{\"a\":\"\xc3\xa9\"}"), 0);
    assert_string_equal(buf_str(&out), "OK {}\nOK {\"a\":\"\xc3\xa9\"}\n");
    buf_reset(&out);
    static const char *const bad_json[] = {"", "[]", "{", "}", "{\n}", "{\t}", "x{}"};
    for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i++)
        assert_int_equal(ctl_response_ok(&out, bad_json[i]), -EINVAL);
    assert_int_equal(ctl_response_ok(&out, NULL), -EINVAL);

    assert_int_equal(ctl_response_err(&out, "notfound", "no such file: /a b%c=d"), 0);
    assert_string_equal(buf_str(&out), "ERR notfound no%20such%20file:%20/a%20b%25c%3Dd\n");
    buf_reset(&out);
    assert_int_equal(ctl_response_err(&out, "timeout", NULL), 0);
    assert_int_equal(ctl_response_err(&out, "x_1", ""), 0);
    assert_string_equal(buf_str(&out), "ERR timeout\nERR x_1\n");
    buf_reset(&out);
    static const char *const bad_codes[] = {"",    "NotFound", "1abc",
                                            "a b", "a-b",      "abcdefghijklmnopqrstuvwxyzabcdef"};
    for (size_t i = 0; i < sizeof(bad_codes) / sizeof(bad_codes[0]); i++)
        assert_int_equal(ctl_response_err(&out, bad_codes[i], "m"), -EINVAL);
    assert_int_equal(ctl_response_err(&out, NULL, "m"), -EINVAL);
    assert_int_equal(out.len, 0);
    buf_free(&out);
}

struct resp_case {
    const char *line;
    size_t len;
    int rc;
    bool ok;
    const char *body_or_code;
    const char *msg;
};

static const struct resp_case resp[] = {
    {L("OK {}\n"), 0, true, "{}", ""},
    {L("OK {\"runs\":[],\"x\":\"\xc3\xa9\"}\n"), 0, true, "{\"runs\":[],\"x\":\"\xc3\xa9\"}", ""},
    {L("ERR timeout\n"), 0, false, "timeout", ""},
    {L("ERR timeout \n"), 0, false, "timeout", ""},
    {L("ERR notfound no%20such%20region%20%22eu%22\n"), 0, false, "notfound",
     "no such region \"eu\""},
    {L("ERR internal 100%zz done%2\n"), 0, false, "internal", "100%zz done%2"},
    {L("ERR internal a%0Ab%1bc%7F\n"), 0, false, "internal", "a?b?c?"},
    {L("ERR x9_z raw text = fine\n"), 0, false, "x9_z", "raw text = fine"},
    {L("OK {}"), CKS_E_FORMAT, false, NULL, NULL},
    {L(""), CKS_E_FORMAT, false, NULL, NULL},
    {L("OK\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("OK \n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("OK []\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("OK {\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("OK {\0}\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("OK {\t}\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("OK {}\nERR x\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("ok {}\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("ERR\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("ERR \n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("ERR Bad msg\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("ERR  msg\n"), CKS_E_FORMAT, false, NULL, NULL},
    {L("FOO {}\n"), CKS_E_FORMAT, false, NULL, NULL},
};

static void test_response_parse(void **state)
{
    for (size_t i = 0; i < sizeof(resp) / sizeof(resp[0]); i++) {
        const struct resp_case *c = &resp[i];
        struct ctl_response r;
        struct buf msg = BUF_INIT;
        int rc = ctl_response_parse(c->line, c->len, &r, &msg);
        if (rc != c->rc)
            fail_msg("case %zu \"%.*s\": got %d, want %d", i, (int)c->len, c->line, rc, c->rc);
        if (rc == 0) {
            assert_int_equal(r.ok, c->ok);
            if (c->ok) {
                assert_int_equal(r.body_len, strlen(c->body_or_code));
                assert_memory_equal(r.body, c->body_or_code, r.body_len);
            } else {
                assert_string_equal(r.code, c->body_or_code);
            }
            assert_string_equal(buf_str(&msg), c->msg);
            assert_int_equal(ctl_response_parse(c->line, c->len, &r, NULL), 0);
        }
        buf_free(&msg);
    }
}

/* A message too long for one line is cut, and the line still parses. */
static void test_response_bounds(void **state)
{
    size_t n = CTL_MAX_RESPONSE + 100;
    char *big = malloc(n + 1);
    struct buf out = BUF_INIT, msg = BUF_INIT;
    struct ctl_response r;

    assert_non_null(big);
    memset(big, ' ', n); /* each becomes %20 */
    big[n] = 0;
    assert_int_equal(ctl_response_err(&out, "internal", big), 0);
    assert_true(out.len <= CTL_MAX_RESPONSE);
    assert_true(out.len > CTL_MAX_RESPONSE - 3);
    assert_int_equal(ctl_response_parse((char *)out.data, out.len, &r, &msg), 0);
    assert_false(r.ok);
    assert_int_equal(msg.len, (out.len - strlen("ERR internal \n")) / 3);

    memset(big, 'a', n);
    big[0] = '{';
    big[CTL_MAX_RESPONSE - 5] = '}';
    big[CTL_MAX_RESPONSE - 4] = 0; /* "OK " + 4 MiB - 4 + "\n" fits exactly */
    buf_reset(&out);
    assert_int_equal(ctl_response_ok(&out, big), 0);
    assert_int_equal(out.len, CTL_MAX_RESPONSE);
    assert_int_equal(ctl_response_parse((char *)out.data, out.len, &r, &msg), 0);
    assert_true(r.ok);
    big[CTL_MAX_RESPONSE - 4] = '}';
    big[CTL_MAX_RESPONSE - 3] = 0;
    buf_reset(&out);
    assert_int_equal(ctl_response_ok(&out, big), CKS_E_LIMIT);
    assert_int_equal(buf_puts(&out, "OK "), 0);
    assert_int_equal(buf_puts(&out, big), 0);
    assert_int_equal(buf_puts(&out, "\n"), 0);
    assert_int_equal(ctl_response_parse((char *)out.data, out.len, &r, &msg), CKS_E_LIMIT);
    free(big);
    buf_free(&out);
    buf_free(&msg);
}

static void test_error_codes(void **state)
{
    assert_int_equal(ctl_err_errno("timeout"), -ETIMEDOUT);
    assert_int_equal(ctl_err_errno("badrequest"), -EINVAL);
    assert_int_equal(ctl_err_errno("notfound"), -ENOENT);
    assert_int_equal(ctl_err_errno("degraded"), -EIO);
    assert_int_equal(ctl_err_errno("busy"), -EBUSY);
    assert_int_equal(ctl_err_errno("notwatched"), -EINVAL); /* not "Protocol error" (#26) */
    assert_int_equal(ctl_err_errno("internal"), -EPROTO);
    assert_int_equal(ctl_err_errno("somethingnew"), -EPROTO);
    assert_int_equal(ctl_err_errno(NULL), -EPROTO);

    assert_string_equal(ctl_err_code(-ETIMEDOUT), "timeout");
    assert_string_equal(ctl_err_code(CKS_E_FORMAT), "badrequest");
    assert_string_equal(ctl_err_code(CKS_E_LIMIT), "badrequest");
    assert_string_equal(ctl_err_code(CKS_E_VERSION), "badrequest");
    assert_string_equal(ctl_err_code(-EINVAL), "badrequest");
    assert_string_equal(ctl_err_code(-ENOENT), "notfound");
    assert_string_equal(ctl_err_code(CKS_E_FATAL), "degraded");
    assert_string_equal(ctl_err_code(-EIO), "internal");

    assert_string_equal(ctl_verb_name(CTL_RETRY), "retry");
    assert_null(ctl_verb_name((enum ctl_verb)42));
    assert_string_equal(ctl_wait_name(CTL_WAIT_REPLICATED), "replicated");
    assert_null(ctl_wait_name((enum ctl_wait)42));
    assert_string_equal(ctl_verb_name(CTL_RESTORED), "restored");
    assert_string_equal(ctl_result_name(CTL_RESULT_OK), "ok");
    assert_string_equal(ctl_result_name(CTL_RESULT_FAILED), "failed");
    assert_null(ctl_result_name(CTL_RESULT_NONE));
    assert_null(ctl_result_name((enum ctl_result)42));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_requests), cmocka_unit_test(test_restored_requests),
        cmocka_unit_test(test_rejections),     cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_encode_refuses), cmocka_unit_test(test_response_encode),
        cmocka_unit_test(test_response_parse), cmocka_unit_test(test_response_bounds),
        cmocka_unit_test(test_error_codes),    cmocka_unit_test(test_commit_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
