/*
 * test-libclient.c — the C client library against a scripted daemon: a
 * thread listening on a unix socket in a temp directory answers each
 * request with a canned line (or misbehaves: closes, answers in pieces
 * with a signal in between, floods without a newline).  Checks the exact
 * request lines, the OK bodies, the ERR code → errno mapping with the
 * daemon's message, refused arguments, and that a missing daemon is
 * reported at once as -ENOENT or -ECONNREFUSED.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/buf.h"
#include "ckptsync/client.h"
#include "ckptsync/protocol.h"

enum how { REPLY, CLOSE, SPLIT_SIGNAL, FLOOD };

struct step {
    const char *want;  /* expected request line */
    const char *reply; /* canned answer, sent as is */
    enum how how;
};

#define MAX_STEPS 16

struct server {
    char dir[64];
    char path[96];
    int lfd;
    pthread_t thread;
    pthread_t client_thread;
    const struct step *steps;
    size_t nsteps;
    char got[MAX_STEPS][8192];
};

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void send_str(int fd, const char *s, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
        if (n <= 0)
            return; /* the client gave up; that is what some steps test */
        s += n;
        len -= (size_t)n;
    }
}

/* Reads one request line into dst; 0 bytes means a probe connection. */
static size_t read_request(int fd, char *dst, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, dst + n, 1);
        if (r <= 0)
            break;
        n++;
        if (dst[n - 1] == '\n')
            break;
    }
    dst[n] = 0;
    return n;
}

static void flood(int fd)
{
    static char block[65536];
    memset(block, 'a', sizeof(block));
    for (size_t sent = 0; sent <= CKS_PROTO_MAX_RESPONSE; sent += sizeof(block))
        send_str(fd, block, sizeof(block));
}

static void act(struct server *s, int fd, const struct step *st)
{
    size_t len = strlen(st->reply);
    switch (st->how) {
    case REPLY:
        send_str(fd, st->reply, len);
        break;
    case CLOSE:
        break;
    case SPLIT_SIGNAL:
        sleep_ms(50);
        pthread_kill(s->client_thread, SIGUSR1);
        sleep_ms(50);
        send_str(fd, st->reply, len / 2);
        sleep_ms(50);
        pthread_kill(s->client_thread, SIGUSR1);
        send_str(fd, st->reply + len / 2, len - len / 2);
        break;
    case FLOOD:
        flood(fd);
        break;
    }
}

static void *serve(void *arg)
{
    struct server *s = arg;
    for (size_t i = 0; i < s->nsteps;) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            break;
        if (read_request(fd, s->got[i], sizeof(s->got[i])) > 0)
            act(s, fd, &s->steps[i++]);
        close(fd);
    }
    return NULL;
}

static void server_start(struct server *s, const struct step *steps, size_t nsteps)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    assert_true(nsteps <= MAX_STEPS);
    memset(s, 0, sizeof(*s));
    memcpy(s->dir, "/tmp/cks-libclient-XXXXXX", 26);
    assert_non_null(mkdtemp(s->dir));
    snprintf(s->path, sizeof(s->path), "%s/d.sock", s->dir);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->path);
    s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s->lfd >= 0);
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(s->lfd, 8), 0);
    s->steps = steps;
    s->nsteps = nsteps;
    s->client_thread = pthread_self();
    assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
}

/* Joins the script and checks every request line it received. */
static void server_finish(struct server *s)
{
    assert_int_equal(pthread_join(s->thread, NULL), 0);
    close(s->lfd);
    unlink(s->path);
    rmdir(s->dir);
    for (size_t i = 0; i < s->nsteps; i++)
        assert_string_equal(s->got[i], s->steps[i].want);
}

/* ---- tests ------------------------------------------------------------- */

static double elapsed_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void test_no_daemon(void **state)
{
    struct cks_client *c = NULL;
    struct timespec t0;
    char dir[] = "/tmp/cks-libclient-XXXXXX", path[96];

    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(cks_client_open("/nonexistent-ckptsync/d.sock", &c), -ENOENT);
    assert_null(c);

    /* A socket file nobody listens on: a daemon that died. */
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/d.sock", dir);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(fd);
    assert_int_equal(cks_client_open(path, &c), -ECONNREFUSED);

    setenv(CKS_PROTO_SOCKET_ENV, path, 1);
    assert_int_equal(cks_client_open(NULL, &c), -ECONNREFUSED);
    unsetenv(CKS_PROTO_SOCKET_ENV);
    unlink(path);
    rmdir(dir);
    assert_true(elapsed_since(&t0) < 1.0);

    char longp[200];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = 0;
    assert_int_equal(cks_client_open(longp, &c), -ENAMETOOLONG);
    cks_client_close(NULL);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* The order protocol.h states: $CKPTSYNC_SOCKET; the configuration's
 * socket; STATE/ckptsyncd.sock with STATE the argument, $CKPTSYNC_STATE,
 * the configuration's state, the default. */
static void test_socket_path(void **state)
{
    char dir[] = "/tmp/cks-sockpath-XXXXXX", conf[96], conf2[96], got[256];
    assert_non_null(mkdtemp(dir));
    snprintf(conf, sizeof(conf), "%s/a.conf", dir);
    snprintf(conf2, sizeof(conf2), "%s/b.conf", dir);
    write_text(conf, "[region.a]\nstate = /not/this\n[daemon]\n  state = /srv/st  ; comment\n"
                     "watch = /w\n");
    write_text(conf2, "[daemon]\nstate=/srv/st\nsocket = /run/x.sock # the socket\n[other]\n"
                      "socket = /not/this\n");
    unsetenv(CKS_PROTO_SOCKET_ENV);
    unsetenv(CKS_PROTO_STATE_ENV);
    setenv(CKS_PROTO_CONFIG_ENV, conf, 1);

    assert_int_equal(cks_socket_path(NULL, NULL, got, sizeof(got)), 0);
    assert_string_equal(got, "/srv/st/ckptsyncd.sock");
    assert_int_equal(cks_socket_path(conf2, NULL, got, sizeof(got)), 0);
    assert_string_equal(got, "/run/x.sock");
    setenv(CKS_PROTO_STATE_ENV, "/env/st", 1);
    assert_int_equal(cks_socket_path(NULL, NULL, got, sizeof(got)), 0);
    assert_string_equal(got, "/env/st/ckptsyncd.sock");
    assert_int_equal(cks_socket_path(NULL, "/arg/st", got, sizeof(got)), 0);
    assert_string_equal(got, "/arg/st/ckptsyncd.sock");
    assert_int_equal(cks_socket_path(conf2, "/arg/st", got, sizeof(got)), 0);
    assert_string_equal(got, "/run/x.sock"); /* as the daemon: an explicit socket stays */
    setenv(CKS_PROTO_SOCKET_ENV, "/env/d.sock", 1);
    assert_int_equal(cks_socket_path(conf2, "/arg/st", got, sizeof(got)), 0);
    assert_string_equal(got, "/env/d.sock");
    unsetenv(CKS_PROTO_SOCKET_ENV);
    unsetenv(CKS_PROTO_STATE_ENV);

    assert_int_equal(cks_socket_path("/nonexistent/ckptsync.conf", NULL, got, sizeof(got)), -EIO);
    assert_int_equal(cks_socket_path(NULL, "/arg/st", got, 10), -ENAMETOOLONG);
    unsetenv(CKS_PROTO_CONFIG_ENV);
    unlink(conf);
    unlink(conf2);
    rmdir(dir);
}

static void test_requests(void **state)
{
    char cwd[4096], want_rel[8300];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    snprintf(want_rel, sizeof(want_rel), "CKPTSYNC/1 commit path=%s/rel/ckpt-1\n",
             strcmp(cwd, "/") == 0 ? "" : cwd);
    const struct step steps[] = {
        {"CKPTSYNC/1 ping\n", "OK {}\n", REPLY},
        {"CKPTSYNC/1 commit path=/data/r1/checkpoint%2010 step=10 wait=durable timeout=600\n",
         "OK {\"snapshot\":\"s1\",\"state\":\"durable\"}\n", REPLY},
        {want_rel, "OK {\"snapshot\":\"s2\"}\nGARBAGE AFTER", REPLY},
        {"CKPTSYNC/1 status\n", "OK {\"runs\":[],\"regions\":[]}\n", REPLY},
        {"CKPTSYNC/1 flush wait=replicated deadline=30\n", "OK {\"pending\":0}\n", REPLY},
        {"CKPTSYNC/1 flush\n", "OK {}\n", REPLY},
        {"CKPTSYNC/1 retry region=eu-1\n", "OK {}\n", REPLY},
        {"CKPTSYNC/1 commit path=/d/r/c-5 step=5 nodes=4 node_rank=3\n", "OK {}\n", REPLY},
        {"CKPTSYNC/1 commit path=/d/r/c-6\n", "OK {}\n", REPLY},
    };
    struct server s;
    struct cks_client *c = NULL;
    char *json = (char *)"untouched";

    server_start(&s, steps, sizeof(steps) / sizeof(steps[0]));
    assert_int_equal(cks_client_open(s.path, &c), 0);
    assert_int_equal(cks_ping(c), 0);
    assert_string_equal(cks_client_error(c), "");
    assert_int_equal(cks_commit(c, "/data/r1/checkpoint 10", 10, CKS_WAIT_DURABLE, 600, &json), 0);
    assert_string_equal(json, "{\"snapshot\":\"s1\",\"state\":\"durable\"}");
    free(json);
    assert_int_equal(cks_commit(c, "rel/ckpt-1", -1, CKS_WAIT_NONE, -1, NULL), 0);
    assert_int_equal(cks_status(c, &json), 0);
    assert_string_equal(json, "{\"runs\":[],\"regions\":[]}");
    free(json);
    assert_int_equal(cks_flush(c, CKS_WAIT_REPLICATED, 30, &json), 0);
    assert_string_equal(json, "{\"pending\":0}");
    free(json);
    assert_int_equal(cks_flush(c, CKS_WAIT_NONE, -1, NULL), 0);
    assert_int_equal(cks_retry(c, "eu-1"), 0);
    assert_int_equal(cks_commit_node(c, "/d/r/c-5", 5, CKS_WAIT_NONE, -1, 3, 4, NULL), 0);
    assert_int_equal(cks_commit_node(c, "/d/r/c-6", -1, CKS_WAIT_NONE, -1, -1, -1, NULL), 0);
    server_finish(&s);

    /* The daemon went away: the same client says so. */
    int r = cks_ping(c);
    assert_true(r == -ENOENT || r == -ECONNREFUSED);
    assert_non_null(strstr(cks_client_error(c), s.path));
    cks_client_close(c);
}

struct err_case {
    const char *reply;
    int want;
    const char *code;
    const char *msg;
};

static const struct err_case errs[] = {
    {"ERR timeout not%20durable%20after%20600%20s\n", -ETIMEDOUT, "timeout",
     "not durable after 600 s"},
    {"ERR badrequest step:%20expected%20a%20number\n", -EINVAL, "badrequest",
     "step: expected a number"},
    {"ERR notfound no%20such%20file\n", -ENOENT, "notfound", "no such file"},
    {"ERR degraded fsync%20failed\n", -EIO, "degraded", "fsync failed"},
    {"ERR notwatched /tmp/x%20is%20not%20under%20/data\n", -EINVAL, "notwatched",
     "/tmp/x is not under /data"},
    {"ERR wrongnode this%20daemon%20is%20node%200%20of%201\n", -EINVAL, "wrongnode",
     "this daemon is node 0 of 1"},
    {"ERR brandnew\n", -EPROTO, "brandnew", "brandnew"},
};

static void test_errors(void **state)
{
    struct step steps[sizeof(errs) / sizeof(errs[0])];
    struct server s;
    struct cks_client *c = NULL;

    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
        steps[i] = (struct step){"CKPTSYNC/1 commit path=/d/x wait=durable timeout=5\n",
                                 errs[i].reply, REPLY};
    server_start(&s, steps, sizeof(steps) / sizeof(steps[0]));
    assert_int_equal(cks_client_open(s.path, &c), 0);
    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
        char *json = (char *)"untouched";
        assert_int_equal(cks_commit(c, "/d/x", -1, CKS_WAIT_DURABLE, 5, &json), errs[i].want);
        assert_null(json);
        assert_string_equal(cks_client_error_code(c), errs[i].code);
        assert_string_equal(cks_client_error(c), errs[i].msg);
    }
    server_finish(&s);
    cks_client_close(c);
}

static void on_usr1(int sig)
{
    (void)sig;
}

static void test_bad_answers(void **state)
{
    const struct step steps[] = {
        {"CKPTSYNC/1 ping\n", "", CLOSE},
        {"CKPTSYNC/1 ping\n", "HELLO\n", REPLY},
        {"CKPTSYNC/1 ping\n", "OK []\n", REPLY},
        {"CKPTSYNC/1 status\n", "", FLOOD},
        {"CKPTSYNC/1 status\n", "OK {\"runs\":[{\"run\":\"r1\"}]}\n", SPLIT_SIGNAL},
    };
    struct sigaction sa = {.sa_handler = on_usr1}, old;
    struct server s;
    struct cks_client *c = NULL;
    char *json = NULL;

    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0); /* no SA_RESTART: EINTR */
    server_start(&s, steps, sizeof(steps) / sizeof(steps[0]));
    assert_int_equal(cks_client_open(s.path, &c), 0);
    assert_int_equal(cks_ping(c), -EPROTO);
    assert_int_equal(cks_ping(c), -EPROTO);
    assert_string_equal(cks_client_error_code(c), "");
    assert_true(strlen(cks_client_error(c)) > 0);
    assert_int_equal(cks_ping(c), -EPROTO);
    assert_int_equal(cks_status(c, &json), -EMSGSIZE);
    assert_null(json);
    assert_int_equal(cks_status(c, &json), 0);
    assert_string_equal(json, "{\"runs\":[{\"run\":\"r1\"}]}");
    free(json);
    server_finish(&s);
    sigaction(SIGUSR1, &old, NULL);
    cks_client_close(c);
}

/* Arguments the library refuses before it talks to the daemon. */
static void test_bad_args(void **state)
{
    struct server s;
    struct cks_client *c = NULL;
    char *json = (char *)"untouched";
    const struct step steps[] = {{"CKPTSYNC/1 ping\n", "OK {}\n", REPLY}};

    server_start(&s, steps, 1);
    assert_int_equal(cks_client_open(s.path, &c), 0);
    assert_int_equal(cks_commit(c, "/x", -2, CKS_WAIT_NONE, -1, &json), -EINVAL);
    assert_null(json);
    assert_true(strlen(cks_client_error(c)) > 0);
    assert_int_equal(cks_commit(c, "/x", 1, 3, -1, NULL), -EINVAL);
    assert_int_equal(cks_commit(c, "/x", 1, CKS_WAIT_DURABLE, 604801, NULL), -EINVAL);
    assert_int_equal(cks_commit(c, "/x", 1, CKS_WAIT_DURABLE, -2, NULL), -EINVAL);
    assert_int_equal(cks_commit(c, "", 1, CKS_WAIT_NONE, -1, NULL), -EINVAL);
    assert_int_equal(cks_commit(c, NULL, 1, CKS_WAIT_NONE, -1, NULL), -EINVAL);
    assert_int_equal(cks_flush(c, -1, -1, NULL), -EINVAL);
    static const int64_t bad_nodes[][2] = {{1, -1}, {-1, 2}, {2, 2}, {0, 0}, {0, 4097}, {-2, 2}};
    for (size_t i = 0; i < sizeof(bad_nodes) / sizeof(bad_nodes[0]); i++)
        assert_int_equal(
            cks_commit_node(c, "/x", 1, CKS_WAIT_NONE, -1, bad_nodes[i][0], bad_nodes[i][1], NULL),
            -EINVAL);
    assert_int_equal(cks_retry(c, ""), -EINVAL);
    assert_int_equal(cks_retry(c, NULL), -EINVAL);
    assert_int_equal(cks_retry(c, "eu 1"), -EINVAL);
    char longpath[5000];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[0] = '/';
    longpath[sizeof(longpath) - 1] = 0;
    assert_int_equal(cks_commit(c, longpath, 1, CKS_WAIT_NONE, -1, NULL), -ENAMETOOLONG);
    assert_int_equal(cks_ping(c), 0); /* the only request that reached the daemon */
    server_finish(&s);
    cks_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_daemon),   cmocka_unit_test(test_socket_path),
        cmocka_unit_test(test_requests),    cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bad_answers), cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
