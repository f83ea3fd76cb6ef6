/*
 * test-region-s3.c — create-only puts (region_put_new) and the
 * precondition probe of the s3 region backend.
 *
 * Without a server: the setting's defaults (s3 starts "unknown", so
 * put_new says -ENOTSUP until the caller decides), `preconditions = none`
 * (the probe answers 0 without a request: the endpoint here refuses every
 * connection, so any request would show as an error), the multipart
 * threshold (-E2BIG, no request either), and an unreachable store (the
 * probe fails, naming region and request).  The region's clock
 * (region_clock) against a canned HTTP answer on loopback: the Date of a
 * 403 or 404, and an answer without one.
 *
 * Against a server, when CKS_S3_TEST_ENDPOINT is set (else those tests are
 * skipped; tests/integration/test-s3-precond.sh starts one and sets it):
 *   CKS_S3_TEST_ENDPOINT     http://127.0.0.1:PORT
 *   CKS_S3_TEST_BUCKET       default "ckpt"
 *   CKS_S3_TEST_PREFIX       default "precond"
 *   CKS_S3_TEST_CREDENTIALS  an AWS CLI credentials file (else AWS_* variables)
 *   CKS_S3_TEST_ENFORCES     1 or 0: what the server really does with
 *                            "If-None-Match: *", found out by the caller with
 *                            another client; the probe must say the same.
 *   CKS_S3_TEST_ONLY         a cmocka test name pattern (e.g. "*probe*")
 * The probe's answer is printed as "probe: enforced=N".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "base/err.h"
#include "store/region.h"

/* A failing multi handle on demand (tests/CMakeLists.txt links this test
 * with ld --wrap for both): 0 = libcurl's own, else the code returned. */
static CURLMcode fail_perform, fail_poll;
static unsigned perform_calls;

CURLMcode __real_curl_multi_perform(CURLM *m, int *running);
CURLMcode __real_curl_multi_poll(CURLM *m, struct curl_waitfd extra[], unsigned n, int ms,
                                 int *ret);
CURLMcode __wrap_curl_multi_perform(CURLM *m, int *running);
CURLMcode __wrap_curl_multi_poll(CURLM *m, struct curl_waitfd extra[], unsigned n, int ms,
                                 int *ret);

CURLMcode __wrap_curl_multi_perform(CURLM *m, int *running)
{
    perform_calls++;
    if (fail_perform) {
        *running = 1; /* a dead handle claims nothing finished */
        return fail_perform;
    }
    return __real_curl_multi_perform(m, running);
}

CURLMcode __wrap_curl_multi_poll(CURLM *m, struct curl_waitfd extra[], unsigned n, int ms, int *ret)
{
    if (fail_poll)
        return fail_poll;
    return __real_curl_multi_poll(m, extra, n, ms, ret);
}

/* Nothing listens on port 1 of loopback: every connection is refused. */
#define NOWHERE "http://127.0.0.1:1"

static struct region *s3_at(const char *endpoint, bool none)
{
    struct region_conf conf = {.kind = REGION_KIND_S3, .tls_verify = true, .connections = 4};
    const char *bucket = getenv("CKS_S3_TEST_BUCKET"), *prefix = getenv("CKS_S3_TEST_PREFIX");
    const char *cred = getenv("CKS_S3_TEST_CREDENTIALS");
    struct region *r = NULL;
    struct buf err = BUF_INIT;
    snprintf(conf.name, sizeof(conf.name), "s");
    snprintf(conf.endpoint, sizeof(conf.endpoint), "%s", endpoint);
    snprintf(conf.bucket, sizeof(conf.bucket), "%s", bucket ? bucket : "ckpt");
    snprintf(conf.prefix, sizeof(conf.prefix), "%s", prefix ? prefix : "precond");
    snprintf(conf.signing_region, sizeof(conf.signing_region), "us-east-1");
    snprintf(conf.credentials, sizeof(conf.credentials), "%s", cred ? cred : "");
    conf.no_preconditions = none;
    int rc = region_new(&conf, &r, &err);
    if (rc != 0)
        print_error("%s\n", buf_str(&err));
    assert_int_equal(rc, 0);
    buf_free(&err);
    return r;
}

static void expect_error_has(struct region *r, const char *needle)
{
    const char *msg = region_last_error(r);
    if (!strstr(msg, needle))
        print_error("message \"%s\" lacks \"%s\"\n", msg, needle);
    assert_non_null(strstr(msg, needle));
}

/* ---- without a server -------------------------------------------------- */

static void test_default_unknown(void **state)
{
    struct region *r = s3_at(NOWHERE, false);
    assert_int_equal(region_preconditions(r), -1);
    assert_int_equal(region_put_new(r, "refs/r1/x", "x", 1), -ENOTSUP);
    expect_error_has(r, "region 's'");
    expect_error_has(r, "refs/r1/x");
    expect_error_has(r, "not probed yet");
    assert_int_equal(region_put_new(r, "../x", "x", 1), -EINVAL);
    region_set_preconditions(r, 0);
    assert_int_equal(region_preconditions(r), 0);
    assert_int_equal(region_put_new(r, "refs/r1/x", "x", 1), -ENOTSUP);
    expect_error_has(r, "not enforced");
    region_set_preconditions(r, 1);
    assert_int_equal(region_preconditions(r), 1);
    region_free(r);
}

static void test_none(void **state)
{
    struct region *r = s3_at(NOWHERE, true);
    assert_int_equal(region_preconditions(r), 0);
    assert_int_equal(region_probe_preconditions(r), 0); /* a request would have failed */
    region_set_preconditions(r, 1);
    assert_int_equal(region_preconditions(r), 0);
    assert_int_equal(region_put_new(r, "refs/r1/x", "x", 1), -ENOTSUP);
    region_free(r);
}

static void test_unreachable(void **state)
{
    struct region *r = s3_at(NOWHERE, false);
    assert_int_equal(region_probe_preconditions(r), CKS_E_REMOTE);
    expect_error_has(r, "region 's'");
    expect_error_has(r, "PUT s3://ckpt/");
    expect_error_has(r, "probe/");
    assert_int_equal(region_preconditions(r), -1); /* the probe only reports */
    region_set_preconditions(r, 1);
    assert_int_equal(region_put_new(r, "refs/r1/x", "x", 1), CKS_E_REMOTE);
    expect_error_has(r, "refs/r1/x");
    region_free(r);
}

/* A multi handle that fails ends every transfer in flight with an error
 * naming the region, at once: a synchronous op returns, async requests
 * come back from one poll; the next transfer works on a fresh handle.
 * Before, the pump ignored the codes and callers waited forever (the
 * alarm turns that into a failure). */
static void test_multi_failure(void **state)
{
    static const CURLMcode codes[][2] = {{CURLM_OUT_OF_MEMORY, 0}, {0, CURLM_INTERNAL_ERROR}};
    (void)state;
    for (size_t c = 0; c < sizeof(codes) / sizeof(codes[0]); c++) {
        struct region *r = s3_at(NOWHERE, true);
        struct region_req reqs[3];
        memset(reqs, 0, sizeof(reqs));
        alarm(20);
        fail_perform = codes[c][0];
        fail_poll = codes[c][1];
        perform_calls = 0;
        assert_int_equal(region_has(r, "chunks/ab/abcd"), CKS_E_REMOTE);
        expect_error_has(r, "region 's'");
        expect_error_has(r, "HEAD s3://ckpt/precond/chunks/ab/abcd");
        expect_error_has(r, "curl multi handle failed");
        expect_error_has(r, curl_multi_strerror(codes[c][0] ? codes[c][0] : codes[c][1]));
        /* one round per try (region reads retry a transient failure), not a spin */
        assert_true(perform_calls <= 2 * (REGION_READ_RETRIES + 1));

        for (size_t i = 0; i < 3; i++) {
            reqs[i].kind = RREQ_HAS;
            snprintf(reqs[i].key, sizeof(reqs[i].key), "chunks/0%zu/x", i);
            assert_int_equal(region_submit(r, &reqs[i]), 0);
        }
        size_t back = 0;
        for (struct region_req *q = region_poll(r, 1000); q; q = q->next, back++) {
            assert_int_equal(q->ret, CKS_E_REMOTE);
            assert_non_null(strstr(q->errmsg, "region 's'"));
            assert_non_null(strstr(q->errmsg, "curl multi handle failed"));
        }
        assert_int_equal(back, 3);

        /* the handle is replaced: the next request reaches the network
         * (nothing listens there: refused, an ordinary error) */
        fail_perform = fail_poll = 0;
        assert_int_equal(region_has(r, "chunks/ab/abcd"), CKS_E_REMOTE);
        expect_error_has(r, "region 's'");
        if (strstr(region_last_error(r), "curl multi handle failed"))
            fail_msg("still the failed handle: %s", region_last_error(r));
        alarm(0);
        region_free(r);
    }
}

static void test_multipart_refused(void **state)
{
    const size_t min = 5u << 20; /* the smallest threshold the backend accepts */
    char env[32];
    snprintf(env, sizeof(env), "%zu", min);
    setenv("CKPTSYNC_S3_MULTIPART_MIN", env, 1);
    struct region *r = s3_at(NOWHERE, false);
    unsetenv("CKPTSYNC_S3_MULTIPART_MIN");
    uint8_t *big = calloc(1, min);
    assert_non_null(big);
    region_set_preconditions(r, 1);
    assert_int_equal(region_put_new(r, "big", big, min), -E2BIG); /* no request */
    expect_error_has(r, "multipart threshold");
    assert_int_equal(region_put_new(r, "big", big, min - 1), CKS_E_REMOTE); /* a request */
    free(big);
    region_free(r);
}

/* ---- the clock: a canned HTTP server on loopback ------------------------ */

/* Answers every request (one per connection) with `reply`, until told to
 * stop; counts them. */
struct canned {
    int fd;
    int port;
    const char *reply;
    unsigned served;
    pthread_t th;
};

static void *canned_main(void *arg)
{
    struct canned *c = arg;
    for (;;) {
        int conn = accept(c->fd, NULL, NULL);
        if (conn < 0)
            return NULL;
        char req[8192];
        size_t got = 0;
        ssize_t n;
        while (got < sizeof(req) - 1 && (n = read(conn, req + got, sizeof(req) - 1 - got)) > 0) {
            got += (size_t)n;
            req[got] = 0;
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        if (got && write(conn, c->reply, strlen(c->reply)) > 0)
            c->served++;
        close(conn);
    }
}

static void canned_start(struct canned *c, const char *reply)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    memset(c, 0, sizeof(*c));
    c->reply = reply;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(c->fd >= 0);
    assert_int_equal(bind(c->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(c->fd, 8), 0);
    assert_int_equal(getsockname(c->fd, (struct sockaddr *)&a, &len), 0);
    c->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&c->th, NULL, canned_main, c), 0);
}

static void canned_stop(struct canned *c)
{
    shutdown(c->fd, SHUT_RDWR); /* accept() returns */
    pthread_join(c->th, NULL);
    close(c->fd);
}

static struct region *s3_canned(const struct canned *c)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", c->port);
    return s3_at(url, true);
}

/* Any answer carries the store's Date, a refusal included (403
 * RequestTimeTooSkewed is the answer a far-off clock gets): the region's
 * time is that Date, to within half a second plus half the round trip. */
static void test_clock_date(void **state)
{
    static const char *const replies[] = {
        "HTTP/1.1 403 Forbidden\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        "Content-Type: application/xml\r\nContent-Length: 61\r\nConnection: close\r\n\r\n"
        "<Error><Code>RequestTimeTooSkewed</Code><Message/></Error>\n\n\n\n",
        "HTTP/1.1 404 Not Found\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n",
    };
    (void)state;
    for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
        struct canned c;
        struct region_clock t;
        canned_start(&c, replies[i]);
        struct region *r = s3_canned(&c);
        alarm(20);
        int rc = region_clock(r, &t);
        alarm(0);
        if (rc != 0)
            print_error("%s\n", region_last_error(r));
        assert_int_equal(rc, 0);
        assert_true(t.store == 784111777.5);
        assert_true(t.error >= 0.5 && t.error < 5);
        assert_true(t.local > (double)time(NULL) - 5 && t.local < (double)time(NULL) + 5);
        region_free(r);
        canned_stop(&c);            /* joins the server thread, which counts */
        assert_true(c.served >= 1); /* a reply after writing it: read it after */
    }
}

/* An answer without a Date cannot tell the time: an error naming the
 * region and the request; no answer at all: the transfer's error. */
static void test_clock_no_date(void **state)
{
    struct canned c;
    struct region_clock t;
    (void)state;
    canned_start(&c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    struct region *r = s3_canned(&c);
    alarm(20);
    assert_int_equal(region_clock(r, &t), CKS_E_REMOTE);
    alarm(0);
    expect_error_has(r, "region 's'");
    expect_error_has(r, "HEAD s3://ckpt/precond/probe/clock");
    expect_error_has(r, "without a usable Date");
    region_free(r);
    canned_stop(&c);

    r = s3_at(NOWHERE, true);
    assert_int_equal(region_clock(r, &t), CKS_E_REMOTE);
    expect_error_has(r, "region 's'");
    expect_error_has(r, "probe/clock");
    region_free(r);
}

/* ---- against a server -------------------------------------------------- */

static const char *server(void)
{
    const char *e = getenv("CKS_S3_TEST_ENDPOINT");
    if (!e || !e[0]) {
        print_message("skipped: CKS_S3_TEST_ENDPOINT is not set "
                      "(tests/integration/test-s3-precond.sh sets it)\n");
        skip();
    }
    return e;
}

/* What the server really does, as the caller found out; -1 if not said. */
static int server_enforces(void)
{
    const char *e = getenv("CKS_S3_TEST_ENFORCES");
    return e && (e[0] == '0' || e[0] == '1') ? e[0] - '0' : -1;
}

static int count_key(void *ud, const char *key, uint64_t size)
{
    (*(unsigned *)ud)++;
    return 0;
}

static unsigned count_under(struct region *r, const char *prefix)
{
    unsigned n = 0;
    int rc = region_list(r, prefix, count_key, &n);
    if (rc != 0)
        print_error("%s\n", region_last_error(r));
    assert_int_equal(rc, 0);
    return n;
}

static void expect_content(struct region *r, const char *key, const char *want)
{
    struct buf b = BUF_INIT;
    int rc = region_get(r, key, 1 << 20, &b);
    if (rc != 0)
        print_error("%s\n", region_last_error(r));
    assert_int_equal(rc, 0);
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.data, want, b.len);
    buf_free(&b);
}

static void test_server_probe(void **state)
{
    struct region *r = s3_at(server(), false);
    int rc = region_probe_preconditions(r);
    if (rc < 0)
        print_error("%s\n", region_last_error(r));
    assert_true(rc == 0 || rc == 1);
    print_message("probe: enforced=%d\n", rc);
    if (server_enforces() >= 0)
        assert_int_equal(rc, server_enforces());
    assert_int_equal(region_preconditions(r), -1);
    assert_int_equal(count_under(r, "probe/"), 0); /* the probe object is gone */
    region_free(r);
}

/* put_new with the precondition sent whatever the probe says: the signed
 * header is accepted, and the second create is refused exactly when the
 * server enforces it (else it overwrote, which is why the probe says 0). */
static void test_server_put_new(void **state)
{
    struct region *r = s3_at(server(), false);
    int enforced = server_enforces();
    char key[64];
    if (enforced < 0)
        enforced = region_probe_preconditions(r);
    assert_true(enforced == 0 || enforced == 1);
    snprintf(key, sizeof(key), "refs/r1/new-%ld-%ld", (long)getpid(), (long)time(NULL));
    region_set_preconditions(r, 1);
    int rc = region_put_new(r, key, "first", 5);
    if (rc != 0)
        print_error("%s\n", region_last_error(r));
    assert_int_equal(rc, 0);
    expect_content(r, key, "first");
    rc = region_put_new(r, key, "second", 6);
    if (enforced) {
        assert_int_equal(rc, -EEXIST);
        print_message("refused: %s\n", region_last_error(r));
        expect_error_has(r, "HTTP 412");
        expect_error_has(r, key);
        expect_content(r, key, "first");
    } else {
        assert_int_equal(rc, 0);
        expect_content(r, key, "second");
    }
    assert_int_equal(region_del(r, key), 0);
    region_free(r);
}

#define RACERS 8

struct racer {
    struct region *r;
    pthread_barrier_t *start;
    const char *key;
    char body[32];
    int rc;
};

static void *race_thread(void *arg)
{
    struct racer *c = arg;
    pthread_barrier_wait(c->start);
    c->rc = region_put_new(c->r, c->key, c->body, strlen(c->body));
    return NULL;
}

/* Eight instances create one key at once, each with its own region.  A
 * store that enforces the precondition lets exactly one win; the others
 * get -EEXIST, or CKS_E_REMOTE where it says 409 ConditionalRequestConflict
 * (AWS: a conditional write of the same key in flight).  A store that
 * ignores it lets every one "create", the last overwriting the others. */
static void test_server_race(void **state)
{
    const char *ep = server();
    struct racer c[RACERS];
    pthread_t th[RACERS];
    pthread_barrier_t start;
    char key[64];
    int won = -1, enforced = server_enforces();

    snprintf(key, sizeof(key), "refs/r1/race-%ld-%ld", (long)getpid(), (long)time(NULL));
    assert_int_equal(pthread_barrier_init(&start, NULL, RACERS), 0);
    for (int i = 0; i < RACERS; i++) {
        c[i] = (struct racer){.r = s3_at(ep, false), .start = &start, .key = key};
        snprintf(c[i].body, sizeof(c[i].body), "racer %d", i);
        region_set_preconditions(c[i].r, 1);
    }
    if (enforced < 0)
        enforced = region_probe_preconditions(c[0].r);
    for (int i = 0; i < RACERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, race_thread, &c[i]), 0);
    for (int i = 0; i < RACERS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    unsigned created = 0;
    for (int i = 0; i < RACERS; i++) {
        if (c[i].rc == 0)
            created++, won = i;
        else if (c[i].rc != -EEXIST && c[i].rc != CKS_E_REMOTE)
            print_error("racer %d: %s\n", i, region_last_error(c[i].r));
        if (c[i].rc == CKS_E_REMOTE)
            expect_error_has(c[i].r, "ConditionalRequestConflict");
        assert_true(c[i].rc == 0 || c[i].rc == -EEXIST || c[i].rc == CKS_E_REMOTE);
    }
    print_message("race: %u of %d created\n", created, RACERS);
    assert_int_equal(created, enforced ? 1 : RACERS);
    if (enforced)
        expect_content(c[0].r, key, c[won].body);
    assert_int_equal(region_del(c[0].r, key), 0);
    for (int i = 0; i < RACERS; i++)
        region_free(c[i].r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_unknown),   cmocka_unit_test(test_none),
        cmocka_unit_test(test_unreachable),       cmocka_unit_test(test_multi_failure),
        cmocka_unit_test(test_multipart_refused), cmocka_unit_test(test_server_probe),
        cmocka_unit_test(test_server_put_new),    cmocka_unit_test(test_server_race),
        cmocka_unit_test(test_clock_date),        cmocka_unit_test(test_clock_no_date),
    };
    const char *only = getenv("CKS_S3_TEST_ONLY");
    if (only && only[0])
        cmocka_set_test_filter(only);
    if (!getenv("AWS_ACCESS_KEY_ID") && !getenv("CKS_S3_TEST_CREDENTIALS")) {
        setenv("AWS_ACCESS_KEY_ID", "test-key", 1); /* the offline tests need some */
        setenv("AWS_SECRET_ACCESS_KEY", "test-secret", 1);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
