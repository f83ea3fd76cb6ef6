/*
 * test-metrics.c — the Prometheus text format (label and HELP escaping,
 * numbers: table-driven, the shortest text that reads back), the counters
 * (exact under concurrent updates, NULL-safe), the histograms (bucket
 * edges, cumulative and monotone, _count equal to +Inf, _sum in seconds),
 * the text a reload carries counters in (a round trip, regions matched by
 * name, malformed lines refused), the process_* families (checked against
 * the test process), and the /metrics endpoint driven through a real epoll set:
 * 200 with the exposition, HEAD, 404, 405, a malformed and an oversized
 * request, and an idle connection left alone until it talks; 40 idle
 * connections held open do not lock scrapes out (the ones idle longest
 * make room).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/metrics.h"

struct label_case {
    const char *value, *want;
};

static const struct label_case label_cases[] = {
    {"a", "x{region=\"a\"} 1\n"},
    {"", "x{region=\"\"} 1\n"},
    {"quote \" here", "x{region=\"quote \\\" here\"} 1\n"},
    {"back\\slash", "x{region=\"back\\\\slash\"} 1\n"},
    {"new\nline", "x{region=\"new\\nline\"} 1\n"},
    {"\\\"\n", "x{region=\"\\\\\\\"\\n\"} 1\n"},
    {"tab\tand utf-8 \xc3\xa9", "x{region=\"tab\tand utf-8 \xc3\xa9\"} 1\n"},
};

static void test_labels(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(label_cases) / sizeof(label_cases[0]); i++) {
        struct buf b = BUF_INIT;
        struct metrics_label l = {"region", label_cases[i].value};
        metrics_sample(&b, "x", &l, 1, 1);
        if (strcmp(buf_str(&b), label_cases[i].want))
            fail_msg("case %zu: got '%s', want '%s'", i, buf_str(&b), label_cases[i].want);
        buf_free(&b);
    }
    struct buf b = BUF_INIT;
    metrics_sample(&b, "y", (struct metrics_label[]){{"region", "a"}, {"result", "ok"}}, 2, 2);
    metrics_sample(&b, "z", NULL, 0, 3);
    assert_string_equal(buf_str(&b), "y{region=\"a\",result=\"ok\"} 2\nz 3\n");
    buf_free(&b);
}

struct value_case {
    double v;
    const char *want;
};

static const struct value_case value_cases[] = {
    {0, "v 0\n"},
    {-0.0, "v 0\n"},
    {42, "v 42\n"},
    {-7, "v -7\n"},
    {1.5, "v 1.5\n"},
    {0.1, "v 0.1\n"}, /* the shortest text that reads back (base/numfmt.h) */
    {9.564, "v 9.564\n"},
    {0.1 + 0.2, "v 0.30000000000000004\n"},
    {1e300, "v 1e+300\n"},
    {1.5e-7, "v 1.5e-07\n"},
    {-2.25, "v -2.25\n"},
    {1e20, "v 1e+20\n"},
    {9007199254740991.0, "v 9007199254740991\n"},
    {1.0 / 0.0, "v +Inf\n"},
    {-1.0 / 0.0, "v -Inf\n"},
    {0.0 / 0.0, "v NaN\n"},
};

static void test_values(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(value_cases) / sizeof(value_cases[0]); i++) {
        struct buf b = BUF_INIT;
        metrics_sample(&b, "v", NULL, 0, value_cases[i].v);
        if (strcmp(buf_str(&b), value_cases[i].want))
            fail_msg("case %zu: got '%s', want '%s'", i, buf_str(&b), value_cases[i].want);
        buf_free(&b);
    }
    struct buf b = BUF_INIT;
    metrics_sample_u64(&b, "u", NULL, 0, UINT64_MAX); /* exact, not rounded through a double */
    assert_string_equal(buf_str(&b), "u 18446744073709551615\n");
    buf_free(&b);
}

static void test_family(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    metrics_family(&b, "ckptsync_x_total", "counter", "Line one\nback\\slash \"quotes\" stay");
    assert_string_equal(buf_str(&b),
                        "# HELP ckptsync_x_total Line one\\nback\\\\slash \"quotes\" stay\n"
                        "# TYPE ckptsync_x_total counter\n");
    buf_free(&b);
}

static struct config *fake_conf(void)
{
    static const char *const names[] = {"a", "b\"q", "c"};
    struct config *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->nregions = 3;
    for (size_t i = 0; i < 3; i++)
        snprintf(c->regions[i].name, sizeof(c->regions[i].name), "%s", names[i]);
    return c;
}

#define THREADS 4
#define ROUNDS 20000

static void *hammer(void *arg)
{
    struct metrics *m = arg;
    for (int i = 0; i < ROUNDS; i++) {
        metrics_request(m, 1, METRICS_OP_PUT, true, 10, 3000);
        metrics_snapshot(m, METRICS_SNAP_TAKEN, 100, 30, 4, 1);
    }
    return NULL;
}

static void expect_line(const char *text, const char *line)
{
    if (!strstr(text, line))
        fail_msg("no line '%s' in:\n%s", line, text);
}

static void test_counters(void **state)
{
    (void)state;
    struct config *conf = fake_conf();
    struct metrics *m;
    pthread_t th[THREADS];
    assert_int_equal(metrics_new(conf, &m), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hammer, m), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    metrics_request(m, 0, METRICS_OP_HAS, false, 0, 70000);
    metrics_request(m, 7, METRICS_OP_HAS, false, 0, 1); /* no such region: ignored */
    metrics_retry(m, 2, METRICS_RETRY_MISSING, 5);
    metrics_reread(m);
    metrics_snapshot(m, METRICS_SNAP_FAILED, 0, 0, 0, 0);
    metrics_snapshot(m, METRICS_SNAP_TAKEN, 10, 50, 2, 9); /* new above total is clamped */
    /* NULL is a no-op everywhere */
    metrics_request(NULL, 0, METRICS_OP_PUT, true, 1, 1);
    metrics_retry(NULL, 0, METRICS_RETRY_ERROR, 1);
    metrics_reread(NULL);
    metrics_snapshot(NULL, METRICS_SNAP_TAKEN, 1, 1, 1, 1);

    struct buf b = BUF_INIT;
    metrics_counters(m, &b);
    const char *t = buf_str(&b);
    expect_line(t, "ckptsync_info{version=\"" CKS_VERSION "\"} 1\n");
    expect_line(t, "ckptsync_snapshots_total{result=\"taken\"} 80001\n");
    expect_line(t, "ckptsync_snapshots_total{result=\"failed\"} 1\n");
    expect_line(t, "ckptsync_ingest_bytes_total{result=\"new\"} 2400010\n");
    expect_line(t, "ckptsync_ingest_bytes_total{result=\"dedup\"} 5600000\n");
    expect_line(t, "ckptsync_ingest_chunks_total{result=\"new\"} 80002\n");
    expect_line(t, "ckptsync_ingest_chunks_total{result=\"dedup\"} 240000\n");
    expect_line(t, "ckptsync_region_requests_total{region=\"b\\\"q\",operation=\"put\",result="
                   "\"ok\"} 80000\n");
    expect_line(
        t,
        "ckptsync_region_bytes_total{region=\"b\\\"q\",operation=\"put\",result=\"ok\"} 800000\n");
    expect_line(
        t, "ckptsync_region_requests_total{region=\"a\",operation=\"has\",result=\"error\"} 1\n");
    expect_line(t,
                "ckptsync_retries_total{region=\"c\",operation=\"upload\",result=\"missing\"} 5\n");
    expect_line(t, "ckptsync_retries_total{operation=\"read\",result=\"changed\"} 1\n");
    /* one TYPE line per family, before its samples */
    const char *type = strstr(t, "# TYPE ckptsync_region_requests_total counter\n");
    assert_non_null(type);
    assert_null(strstr(type + 1, "# TYPE ckptsync_region_requests_total"));
    assert_true(strstr(t, "ckptsync_region_requests_total{") > type);
    buf_free(&b);
    metrics_free(m);
    metrics_free(NULL);
    free(conf);
}

/* The value of the one sample line that starts with series ("name{...}"
 * exactly as rendered); fails when there is none. */
static double sample_of(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, series, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    fail_msg("no sample '%s' in:\n%s", series, text);
    return -1;
}

/* Every _bucket series of name: le ascending, counts never decreasing, the
 * last le="+Inf" and equal to _count.  Returns how many bucket lines. */
static size_t check_buckets(const char *text, const char *name, const char *labels)
{
    char prefix[256], count[256];
    double last = -1, prev_le = -1;
    size_t n = 0;
    snprintf(prefix, sizeof(prefix), "%s_bucket{%s%sle=\"", name, labels, labels[0] ? "," : "");
    for (const char *p = strstr(text, prefix); p; p = strstr(p + 1, prefix)) {
        const char *le = p + strlen(prefix);
        double bound = !strncmp(le, "+Inf", 4) ? 1.0 / 0.0 : strtod(le, NULL);
        double v = strtod(strchr(le, ' ') + 1, NULL);
        if (bound <= prev_le || v < last)
            fail_msg("%s: bucket %zu not ascending or decreasing", prefix, n);
        prev_le = bound;
        last = v;
        n++;
    }
    assert_true(prev_le == 1.0 / 0.0);
    snprintf(count, sizeof(count), "%s_count%s%s%s", name, labels[0] ? "{" : "", labels,
             labels[0] ? "}" : "");
    assert_true(sample_of(text, count) == last);
    return n;
}

/* Observations land in the bucket whose bound is the first at or above
 * them; the render cumulates; _sum is in seconds. */
static void test_histograms(void **state)
{
    (void)state;
    struct config *conf = fake_conf();
    struct metrics *m;
    assert_int_equal(metrics_new(conf, &m), 0);
    metrics_request(m, 0, METRICS_OP_PUT, true, 1, 5000);     /* exactly 0.005 */
    metrics_request(m, 0, METRICS_OP_PUT, true, 1, 5001);     /* just above */
    metrics_request(m, 0, METRICS_OP_PUT, false, 0, 2000000); /* failed ones count too */
    metrics_request(m, 0, METRICS_OP_PUT, true, 1, 90000000); /* past every bound */
    metrics_durable(m, 7000000);
    metrics_durable(NULL, 1);
    metrics_restore(m, true, 10, 1, 9564000);
    metrics_restore(m, false, 10, 1, 1000000); /* a failed restore: not timed */
    struct buf b = BUF_INIT;
    metrics_counters(m, &b);
    const char *t = buf_str(&b);
    expect_line(t, "# TYPE ckptsync_region_request_duration_seconds histogram\n");
    const char *l = "region=\"a\",operation=\"put\"";
    expect_line(t, "ckptsync_region_request_duration_seconds_bucket{region=\"a\",operation=\"put\","
                   "le=\"0.005\"} 1\n");
    expect_line(t, "ckptsync_region_request_duration_seconds_bucket{region=\"a\",operation=\"put\","
                   "le=\"0.01\"} 2\n");
    expect_line(t, "ckptsync_region_request_duration_seconds_bucket{region=\"a\",operation=\"put\","
                   "le=\"2.5\"} 3\n");
    expect_line(t, "ckptsync_region_request_duration_seconds_bucket{region=\"a\",operation=\"put\","
                   "le=\"60\"} 3\n");
    expect_line(t, "ckptsync_region_request_duration_seconds_bucket{region=\"a\",operation=\"put\","
                   "le=\"+Inf\"} 4\n");
    expect_line(t, "ckptsync_region_request_duration_seconds_sum{region=\"a\",operation=\"put\"} "
                   "92.010001\n");
    assert_int_equal(check_buckets(t, "ckptsync_region_request_duration_seconds", l), 14);
    check_buckets(t, "ckptsync_region_request_duration_seconds",
                  "region=\"c\",operation=\"publish\"");
    expect_line(t, "ckptsync_region_request_duration_seconds_count{region=\"b\\\"q\",operation="
                   "\"has\"} 0\n");
    expect_line(t, "ckptsync_commit_to_durable_seconds_bucket{le=\"5\"} 0\n");
    expect_line(t, "ckptsync_commit_to_durable_seconds_bucket{le=\"10\"} 1\n");
    expect_line(t, "ckptsync_commit_to_durable_seconds_sum 7\n");
    assert_int_equal(check_buckets(t, "ckptsync_commit_to_durable_seconds", ""), 14);
    expect_line(t, "ckptsync_restore_duration_seconds_bucket{le=\"5\"} 0\n");
    expect_line(t, "ckptsync_restore_duration_seconds_bucket{le=\"10\"} 1\n");
    expect_line(t, "ckptsync_restore_duration_seconds_sum 9.564\n"); /* not 9.5640000000000001 */
    expect_line(t, "ckptsync_restore_seconds_total 9.564\n");
    assert_int_equal(check_buckets(t, "ckptsync_restore_duration_seconds", ""), 14);
    buf_free(&b);
    metrics_free(m);
    free(conf);
}

/* The exposition without the process_* families (they move by themselves). */
static void without_process(const struct metrics *m, struct buf *out)
{
    struct buf all = BUF_INIT;
    metrics_counters(m, &all);
    buf_reset(out);
    for (char *p = (char *)all.data, *e; p && *p; p = e ? e + 1 : NULL) {
        e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p + 1) : strlen(p);
        if (strncmp(p, "process_", 8) && strncmp(p, "# HELP process_", 15) &&
            strncmp(p, "# TYPE process_", 15))
            buf_append(out, p, n);
    }
    buf_free(&all);
}

/* A reload's round trip: every counter and histogram comes back, by
 * region name (the new configuration reorders, drops and adds regions);
 * what does not fit is left out, not misplaced. */
static void test_carry(void **state)
{
    (void)state;
    struct config *conf = fake_conf(), *conf2 = fake_conf();
    struct metrics *m, *m2, *m3;
    pthread_t th[THREADS];
    assert_int_equal(metrics_new(conf, &m), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hammer, m), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    metrics_request(m, 2, METRICS_OP_PUBLISH, false, 0, 123456);
    metrics_retry(m, 0, METRICS_RETRY_ERROR, 3);
    metrics_reread(m);
    metrics_durable(m, 42000000);
    metrics_restore(m, true, 5, 2, 1500000);
    metrics_restore(m, false, 0, 0, 0);
    struct buf text = BUF_INIT, before = BUF_INIT, after = BUF_INIT;
    metrics_carry_out(m, &text);
    without_process(m, &before);

    assert_int_equal(metrics_new(conf, &m2), 0); /* the same configuration: all of it */
    assert_int_equal(metrics_carry_in(m2, buf_str(&text)), 12 + 3 * 4);
    without_process(m2, &after);
    assert_string_equal(buf_str(&after), buf_str(&before));

    /* regions c, a, new: b"q's counters are gone, c's and a's kept */
    snprintf(conf2->regions[0].name, sizeof(conf2->regions[0].name), "c");
    snprintf(conf2->regions[1].name, sizeof(conf2->regions[1].name), "a");
    snprintf(conf2->regions[2].name, sizeof(conf2->regions[2].name), "new");
    assert_int_equal(metrics_new(conf2, &m3), 0);
    assert_int_equal(metrics_carry_in(m3, buf_str(&text)), 12 + 2 * 4);
    without_process(m3, &after);
    expect_line(buf_str(&after), "ckptsync_region_requests_total{region=\"c\",operation="
                                 "\"publish\",result=\"error\"} 1\n");
    expect_line(buf_str(&after), "ckptsync_retries_total{region=\"a\",operation=\"upload\","
                                 "result=\"error\"} 3\n");
    expect_line(buf_str(&after), "ckptsync_region_request_duration_seconds_count{region=\"new\","
                                 "operation=\"put\"} 0\n");
    assert_null(strstr(buf_str(&after), "b\\\"q"));
    expect_line(buf_str(&after), "ckptsync_snapshots_total{result=\"taken\"} 80000\n");
    expect_line(buf_str(&after), "ckptsync_commit_to_durable_seconds_count 1\n");
    expect_line(buf_str(&after), "ckptsync_restores_total{result=\"failed\"} 1\n");
    metrics_free(m3);

    /* not the format, or lines that do not fit: nothing is taken from them */
    assert_int_equal(metrics_new(conf, &m3), 0);
    assert_int_equal(metrics_carry_in(m3, "ckptsync-counters 2\ng rereads 1\n"), -EINVAL);
    assert_int_equal(metrics_carry_in(m3, ""), -EINVAL);
    assert_int_equal(metrics_carry_in(m3, METRICS_CARRY_MAGIC
                                      "\n"
                                      "g rereads 1 2\n"         /* too many words */
                                      "g restores 1\n"          /* too few */
                                      "g rereads -1\n"          /* not a count */
                                      "g rereads 1x\n"          /* nor this */
                                      "g nosuch 1\n"            /* a counter not known */
                                      "g durable_seconds 1 2\n" /* no bounds hash */
                                      "g durable_seconds@0000000000000000 1 2 3 4 5 6 7 8 9 "
                                      "10 11 12 13 14 15 16 17 18\n" /* other bounds */
                                      "r zz requests 1 1 1 1 1 1\n"  /* no such region */
                                      "x y z\n\n"
                                      "g rereads 7\n"),
                     1);
    without_process(m3, &after);
    expect_line(buf_str(&after),
                "ckptsync_retries_total{operation=\"read\",result=\"changed\"} 7\n");
    expect_line(buf_str(&after), "ckptsync_commit_to_durable_seconds_count 0\n");
    expect_line(buf_str(&after), "ckptsync_restores_total{result=\"ok\"} 0\n");
    metrics_free(m3);
    buf_reset(&text);
    metrics_carry_out(NULL, &text);
    assert_string_equal(buf_str(&text), METRICS_CARRY_MAGIC "\n");
    buf_free(&text);
    buf_free(&before);
    buf_free(&after);
    metrics_free(m);
    metrics_free(m2);
    free(conf);
    free(conf2);
}

/* process_* as the client libraries write them, checked against what the
 * test process itself can see. */
static void test_process(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    struct rlimit rl;
    metrics_counters(NULL, &b);
    const char *t = buf_str(&b);
    expect_line(t, "# TYPE process_cpu_seconds_total counter\n");
    expect_line(t, "# TYPE process_start_time_seconds gauge\n");
    double fds = sample_of(t, "process_open_fds");
    assert_true(sample_of(t, "process_cpu_seconds_total") >= 0);
    assert_true(sample_of(t, "process_resident_memory_bytes") > 1e5);
    assert_true(sample_of(t, "process_virtual_memory_bytes") >=
                sample_of(t, "process_resident_memory_bytes"));
    double start = sample_of(t, "process_start_time_seconds");
    double now = (double)time(NULL);
    assert_true(start <= now + 1 && start > now - 3600);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_true(sample_of(t, "process_max_fds") == (double)rl.rlim_cur);
    /* one more descriptor open: one more counted */
    int fd = dup(0);
    assert_true(fd >= 0);
    buf_reset(&b);
    metrics_counters(NULL, &b);
    assert_true(sample_of(buf_str(&b), "process_open_fds") == fds + 1);
    assert_true(sample_of(buf_str(&b), "process_start_time_seconds") == start);
    close(fd);
    buf_free(&b);
}

/* ---- the endpoint ----------------------------------------------------- */

static int render_calls;

static int render(void *ud, struct buf *out)
{
    (void)ud;
    render_calls++;
    metrics_family(out, "ckptsync_test", "gauge", "test");
    metrics_sample(out, "ckptsync_test", NULL, 0, 7);
    return 0;
}

static unsigned free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Runs the server's side until the client's socket has an answer (or
 * EOF); returns what came back. */
static void exchange(struct metrics_server *s, int ep, unsigned port, const char *req, size_t len,
                     struct buf *ret)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    size_t off = 0;
    buf_reset(ret);
    for (int spins = 0; spins < 2000; spins++) {
        struct epoll_event evs[8];
        if (off < len) {
            ssize_t n = send(fd, req + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0)
                off += (size_t)n;
        }
        int n = epoll_wait(ep, evs, 8, 5);
        for (int k = 0; k < n; k++)
            assert_true(metrics_server_event(s, evs[k].data.ptr));
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) == 1) {
            char tmp[4096];
            ssize_t got = recv(fd, tmp, sizeof(tmp), 0);
            if (got <= 0)
                break; /* the server closed: the whole answer is in */
            buf_append(ret, tmp, (size_t)got);
        }
    }
    close(fd);
}

static void test_server(void **state)
{
    (void)state;
    struct metrics_server *s;
    struct buf err = BUF_INIT, out = BUF_INIT;
    char addr[32];
    unsigned port = free_port();
    int ep = epoll_create1(EPOLL_CLOEXEC);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    assert_int_equal(metrics_server_new(addr, ep, render, NULL, &s, &err), 0);
    assert_int_equal(metrics_server_port(s), port);
    int other = 1;
    assert_false(metrics_server_event(s, &other));

    static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n";
    exchange(s, ep, port, get, strlen(get), &out);
    assert_non_null(strstr(buf_str(&out), "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(buf_str(&out), "Content-Type: " METRICS_CONTENT_TYPE "\r\n"));
    assert_non_null(strstr(buf_str(&out), "Content-Length: 69\r\n"));
    assert_non_null(strstr(buf_str(&out), "\r\n\r\n# HELP ckptsync_test test\n# TYPE ckptsync_test "
                                          "gauge\nckptsync_test 7\n"));
    assert_int_equal(render_calls, 1);

    static const char query[] = "GET /metrics?x=1 HTTP/1.0\n\n"; /* bare LFs, a query */
    exchange(s, ep, port, query, strlen(query), &out);
    assert_non_null(strstr(buf_str(&out), "200 OK"));

    /* "/": a page that links /metrics, rendered without the exposition */
    static const char root[] = "GET / HTTP/1.1\r\n\r\n";
    exchange(s, ep, port, root, strlen(root), &out);
    assert_non_null(strstr(buf_str(&out), "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(buf_str(&out), "Content-Type: text/html; charset=utf-8\r\n"));
    assert_non_null(strstr(buf_str(&out), "<a href=\"metrics\">"));
    assert_non_null(strstr(buf_str(&out), CKS_VERSION));
    assert_int_equal(render_calls, 2);
    static const char root_head[] = "HEAD /?x HTTP/1.1\r\n\r\n";
    exchange(s, ep, port, root_head, strlen(root_head), &out);
    assert_non_null(strstr(buf_str(&out), "text/html"));
    assert_null(strstr(buf_str(&out), "<html>"));

    static const char head[] = "HEAD /metrics HTTP/1.1\r\n\r\n";
    exchange(s, ep, port, head, strlen(head), &out);
    assert_non_null(strstr(buf_str(&out), "200 OK"));
    assert_null(strstr(buf_str(&out), "ckptsync_test 7"));

    static const struct {
        const char *req, *status;
    } bad[] = {
        {"GET /index.html HTTP/1.1\r\n\r\n", "404 Not Found"},
        {"GET /metricsx HTTP/1.1\r\n\r\n", "404 Not Found"},
        {"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "405 Method Not Allowed"},
        {"GET /metrics\r\n\r\n", "400 Bad Request"},
        {"GET /metrics SPDY/3\r\n\r\n", "400 Bad Request"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        exchange(s, ep, port, bad[i].req, strlen(bad[i].req), &out);
        if (!strstr(buf_str(&out), bad[i].status))
            fail_msg("case %zu: '%s' got '%s'", i, bad[i].req, buf_str(&out));
    }
    /* a head that never ends is cut at METRICS_REQUEST_MAX */
    char *big = malloc(METRICS_REQUEST_MAX * 2);
    memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
    memset(big + 26, 'a', METRICS_REQUEST_MAX * 2 - 26);
    exchange(s, ep, port, big, METRICS_REQUEST_MAX * 2, &out);
    assert_non_null(strstr(buf_str(&out), "400 Bad Request"));
    free(big);
    assert_int_equal(render_calls, 3);

    metrics_server_tick(s); /* nothing idle long enough: nothing closed, nothing breaks */
    metrics_server_free(s);
    metrics_server_free(NULL);
    assert_false(metrics_server_event(NULL, &other));

    /* a taken port is reported, not fatal to the caller */
    struct metrics_server *s2;
    assert_int_equal(metrics_server_new(addr, ep, render, NULL, &s, &err), 0);
    buf_reset(&err);
    assert_true(metrics_server_new(addr, ep, render, NULL, &s2, &err) < 0);
    assert_non_null(strstr(buf_str(&err), "Address already in use"));
    metrics_server_free(s);
    close(ep);
    buf_free(&err);
    buf_free(&out);
}

static int loopback_connect(unsigned port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* Handles the server's pending events until there are none. */
static void pump(struct metrics_server *s, int ep)
{
    struct epoll_event evs[8];
    int n;
    while ((n = epoll_wait(ep, evs, 8, 0)) > 0)
        for (int k = 0; k < n; k++)
            assert_true(metrics_server_event(s, evs[k].data.ptr));
}

/* true when the server has closed fd (EOF), false while it is open. */
static bool closed_by_server(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Any local user can open the endpoint: 40 connections that never send a
 * byte, then 5 scrapes.  Every scrape is answered; each new connection
 * beyond METRICS_MAX_CONNS closed the one idle the longest. */
static void test_server_crowded(void **state)
{
    enum { IDLE = 40, SCRAPES = 5 };
    struct metrics_server *s;
    struct buf err = BUF_INIT, out = BUF_INIT;
    char addr[32];
    int idle[IDLE];
    unsigned port = free_port();
    int ep = epoll_create1(EPOLL_CLOEXEC);
    (void)state;
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    assert_int_equal(metrics_server_new(addr, ep, render, NULL, &s, &err), 0);
    for (int i = 0; i < IDLE; i++) {
        idle[i] = loopback_connect(port);
        pump(s, ep);
    }
    static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    for (int k = 0; k < SCRAPES; k++) {
        exchange(s, ep, port, get, strlen(get), &out);
        if (!strstr(buf_str(&out), "HTTP/1.1 200 OK\r\n") ||
            !strstr(buf_str(&out), "ckptsync_test 7"))
            fail_msg("scrape %d behind %d idle connections: got '%s'", k + 1, IDLE, buf_str(&out));
    }
    /* the oldest went first: the first scrape closed one more, the others
     * took the slot the one before them left (a scrape closes when done) */
    int first_open = IDLE - METRICS_MAX_CONNS + 1;
    for (int i = 0; i < IDLE; i++) {
        if (closed_by_server(idle[i]) != (i < first_open))
            fail_msg("idle connection %d of %d: %s", i + 1, IDLE,
                     i < first_open ? "still open" : "closed, though newer ones were idle longer");
        close(idle[i]);
    }
    metrics_server_free(s);
    close(ep);
    buf_free(&err);
    buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_labels),         cmocka_unit_test(test_values),
        cmocka_unit_test(test_family),         cmocka_unit_test(test_counters),
        cmocka_unit_test(test_histograms),     cmocka_unit_test(test_carry),
        cmocka_unit_test(test_process),        cmocka_unit_test(test_server),
        cmocka_unit_test(test_server_crowded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
