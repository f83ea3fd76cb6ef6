/*
 * libclient.c — the C client library (ckptsync/client.h).
 *
 * Design note: one connection per request.  The daemon may close after
 * each answer or keep serving; a fresh connection works with both, never
 * meets a connection the daemon dropped while the caller was idle, and
 * lets one client object outlive a daemon restart.  cks_client_open()
 * connects once only to report early that no daemon listens.
 *
 * All socket I/O is non-blocking behind poll() against one monotonic
 * deadline, so a slow or stuck daemon can delay a caller by at most the
 * request's own timeout plus CTL_CLIENT_SLACK, whatever the signals
 * (EINTR) or short reads and writes.  The request is not half-closed after
 * it is sent: a daemon may take EOF as "the client gave up" and cancel a
 * wait.  The response is read up to its '\n' and never past
 * CTL_MAX_RESPONSE bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "ckptsync/client.h"
#include "engine/ctlproto.h"

#define RECV_CHUNK 65536u

struct cks_client {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char code[CTL_CODE_MAX];
    struct buf msg; /* the last error, "" after a success */
};

/* "<what> \"<socket>\": <reason>" for a failure talking to the daemon. */
static void set_error(struct cks_client *c, const char *what, int err)
{
    buf_reset(&c->msg);
    c->code[0] = 0;
    if (buf_printf(&c->msg, "%s \"%s\": %s", what, c->path, strerror(-err)) < 0)
        buf_reset(&c->msg);
}

/* "<what>: <reason>" for a request refused before it is sent. */
static int set_arg_error(struct cks_client *c, const char *what, int err)
{
    buf_reset(&c->msg);
    c->code[0] = 0;
    if (buf_printf(&c->msg, "%s: %s", what, strerror(-err)) < 0)
        buf_reset(&c->msg);
    return err;
}

/* ---- socket I/O -------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Connects to the unix socket at path, giving up after
 * CKS_PROTO_CONNECT_TIMEOUT_MS: a non-blocking connect to a unix socket
 * whose listen backlog is full fails with EAGAIN at once (it does not
 * report progress), so it is retried on a short sleep until the deadline.
 * The descriptor comes back non-blocking. */
static int sock_connect(const char *path, int *ret_fd)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int64_t deadline = now_ms() + CKS_PROTO_CONNECT_TIMEOUT_MS;
    int fd, r;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    for (;;) {
        r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        if (r == 0 || errno == EISCONN)
            break;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN || now_ms() >= deadline) {
            r = errno == EAGAIN ? -ETIMEDOUT : -errno;
            close(fd);
            return r;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    *ret_fd = fd;
    return 0;
}

/* Waits for events on fd until deadline (ms on the monotonic clock, -1
 * for none).  0 or -ETIMEDOUT or a poll() error. */
static int sock_wait(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline < 0 ? -1 : deadline - now_ms();
        if (deadline >= 0 && left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

static int sock_send_all(int fd, const uint8_t *data, size_t len, int64_t deadline)
{
    size_t off = 0;
    while (off < len) {
        int r = sock_wait(fd, POLLOUT, deadline);
        if (r < 0)
            return r;
        ssize_t n = send(fd, data + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        if (n > 0)
            off += (size_t)n;
    }
    return 0;
}

/* Reads until the first '\n' into out (cut just after it).  -EPROTO on
 * EOF before it, -EMSGSIZE past CTL_MAX_RESPONSE. */
static int sock_recv_line(int fd, int64_t deadline, struct buf *out)
{
    for (;;) {
        size_t room = CTL_MAX_RESPONSE - out->len;
        if (room == 0)
            return -EMSGSIZE;
        size_t want = room < RECV_CHUNK ? room : RECV_CHUNK;
        int r = sock_wait(fd, POLLIN, deadline);
        if (r == 0)
            r = buf_reserve(out, want);
        if (r < 0)
            return r;
        ssize_t n = recv(fd, out->data + out->len, want, MSG_DONTWAIT);
        if (n == 0)
            return -EPROTO;
        if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        if (n < 0)
            continue;
        uint8_t *nl = memchr(out->data + out->len, '\n', (size_t)n);
        out->len += (size_t)n;
        out->data[out->len] = 0;
        if (nl) {
            out->len = (size_t)(nl - out->data) + 1;
            out->data[out->len] = 0;
            return 0;
        }
    }
}

/* One connection: send the line, read the answer line. */
static int exchange(struct cks_client *c, const struct buf *req, int64_t timeout_ms,
                    struct buf *ret_line)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    int fd = -1;
    int r = sock_connect(c->path, &fd);

    if (r < 0) {
        set_error(c, "connecting to", r);
        return r;
    }
    r = sock_send_all(fd, req->data, req->len, deadline);
    if (r < 0)
        set_error(c, "sending to", r);
    else if ((r = sock_recv_line(fd, deadline, ret_line)) < 0)
        set_error(c, r == -EPROTO ? "no complete answer from" : "receiving from", r);
    close(fd);
    return r;
}

/* ---- requests ---------------------------------------------------------- */

/* Maps a parsed answer to a return code, keeping an error's message. */
static int answer(struct cks_client *c, const struct ctl_response *resp, char **ret_json)
{
    if (!resp->ok) {
        memcpy(c->code, resp->code, sizeof(c->code));
        if (c->msg.len == 0 && buf_puts(&c->msg, c->code) < 0)
            return -ENOMEM;
        return ctl_err_errno(c->code);
    }
    buf_reset(&c->msg);
    if (!ret_json)
        return 0;
    *ret_json = strndup(resp->body, resp->body_len);
    return *ret_json ? 0 : -ENOMEM;
}

static int request(struct cks_client *c, const struct ctl_request *req, int64_t timeout_ms,
                   char **ret_json)
{
    struct buf line = BUF_INIT, resp_line = BUF_INIT;
    struct ctl_response resp;
    int r;

    if (ret_json)
        *ret_json = NULL;
    buf_reset(&c->msg);
    c->code[0] = 0;
    r = ctl_request_encode(req, &line);
    if (r < 0) {
        set_arg_error(c, "encoding the request", r);
        goto out;
    }
    r = exchange(c, &line, timeout_ms, &resp_line);
    if (r < 0)
        goto out;
    r = ctl_response_parse((const char *)resp_line.data, resp_line.len, &resp, &c->msg);
    if (r < 0) {
        r = r == -ENOMEM ? r : -EPROTO;
        set_error(c, "malformed answer from", r);
        goto out;
    }
    r = answer(c, &resp, ret_json);
out:
    buf_free(&line);
    buf_free(&resp_line);
    return r;
}

/* How long to wait for the answer: the request's own limit plus slack,
 * no limit for an unbounded wait, the slack alone when it does not wait. */
static int64_t answer_timeout_ms(const struct ctl_request *req)
{
    if (req->wait == CTL_WAIT_NONE)
        return (int64_t)CTL_CLIENT_SLACK * 1000;
    if (req->timeout < 0)
        return -1;
    return (req->timeout + CTL_CLIENT_SLACK) * 1000;
}

static int simple(struct cks_client *c, enum ctl_verb verb, char **ret_json)
{
    struct ctl_request req;
    ctl_request_init(&req, verb);
    return request(c, &req, answer_timeout_ms(&req), ret_json);
}

static int check_wait(int wait, int64_t timeout_s)
{
    if (wait < CKS_WAIT_NONE || wait > CKS_WAIT_REPLICATED)
        return -EINVAL;
    if (timeout_s < -1 || timeout_s > CTL_MAX_TIMEOUT)
        return -EINVAL;
    return 0;
}

/* path, made absolute against the current directory (not resolved: the
 * daemon decides what the path means under its watch root). */
static int absolute_path(const char *path, char *dst, size_t cap)
{
    char cwd[CTL_PATH_MAX];
    int n;

    if (!path || !*path)
        return -EINVAL;
    if (path[0] == '/')
        n = snprintf(dst, cap, "%s", path);
    else if (!getcwd(cwd, sizeof(cwd)))
        return errno == ERANGE ? -ENAMETOOLONG : -errno;
    else
        n = snprintf(dst, cap, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, path);
    return n < 0 ? -EINVAL : (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int cks_ping(struct cks_client *c)
{
    return simple(c, CTL_PING, NULL);
}

int cks_status(struct cks_client *c, char **ret_json)
{
    return simple(c, CTL_STATUS, ret_json);
}

int cks_commit(struct cks_client *c, const char *path, int64_t step, int wait, int64_t timeout_s,
               char **ret_json)
{
    return cks_commit_node(c, path, step, wait, timeout_s, -1, -1, ret_json);
}

/* nodes and node_rank both -1, or node_rank of 1..CKS_PROTO_MAX_NODES. */
static bool node_args_ok(int64_t node_rank, int64_t nodes)
{
    if (nodes == -1 || node_rank == -1)
        return nodes == node_rank;
    return nodes >= 1 && nodes <= CKS_PROTO_MAX_NODES && node_rank >= 0 && node_rank < nodes;
}

int cks_commit_node(struct cks_client *c, const char *path, int64_t step, int wait,
                    int64_t timeout_s, int64_t node_rank, int64_t nodes, char **ret_json)
{
    struct ctl_request req;
    int r = check_wait(wait, timeout_s);

    if (ret_json)
        *ret_json = NULL;
    ctl_request_init(&req, CTL_COMMIT);
    if (r == 0 && (step < -1 || !node_args_ok(node_rank, nodes)))
        r = -EINVAL;
    if (r == 0)
        r = absolute_path(path, req.path, sizeof(req.path));
    if (r < 0)
        return set_arg_error(c, "commit", r);
    req.step = step;
    req.wait = (enum ctl_wait)wait;
    req.timeout = timeout_s;
    req.nodes = nodes;
    req.node_rank = node_rank;
    return request(c, &req, answer_timeout_ms(&req), ret_json);
}

int cks_flush(struct cks_client *c, int wait, int64_t deadline_s, char **ret_json)
{
    struct ctl_request req;
    int r = check_wait(wait, deadline_s);

    if (ret_json)
        *ret_json = NULL;
    if (r < 0)
        return set_arg_error(c, "flush", r);
    ctl_request_init(&req, CTL_FLUSH);
    req.wait = (enum ctl_wait)wait;
    req.timeout = deadline_s;
    return request(c, &req, answer_timeout_ms(&req), ret_json);
}

int cks_retry(struct cks_client *c, const char *region)
{
    struct ctl_request req;
    size_t len = region ? strlen(region) : 0;

    ctl_request_init(&req, CTL_RETRY);
    if (len == 0 || len >= sizeof(req.region))
        return set_arg_error(c, "retry: region name", -EINVAL);
    memcpy(req.region, region, len + 1);
    return request(c, &req, answer_timeout_ms(&req), NULL);
}

int cks_report_restore(struct cks_client *c, uint64_t bytes, uint64_t files, uint64_t usec, int ok)
{
    struct ctl_request req;

    if (bytes > INT64_MAX || files > INT64_MAX || usec > INT64_MAX)
        return set_arg_error(c, "report_restore", -EINVAL);
    ctl_request_init(&req, CTL_RESTORED);
    req.bytes = (int64_t)bytes;
    req.files = (int64_t)files;
    req.usec = (int64_t)usec;
    req.result = ok ? CTL_RESULT_OK : CTL_RESULT_FAILED;
    return request(c, &req, CTL_REPORT_TIMEOUT_MS, NULL);
}

/* ---- finding the daemon ------------------------------------------------ */

/* The value of key in the [daemon] section of the INI file at path, into
 * out ("" when the file does not set it).  A deliberately small reader:
 * sections, "key = value", comments starting with ';' or '#' (also after
 * blanks at the end of a line), surrounding blanks; the daemon's own
 * parser has validated the file it runs with.  -EIO when unreadable. */
static int conf_daemon_value(const char *path, const char *key, char *out, size_t cap)
{
    char line[4096];
    bool in_daemon = false;
    FILE *f = fopen(path, "re");
    if (!f)
        return -EIO;
    out[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        char *s = line + strspn(line, " \t");
        char *end = s + strcspn(s, "\r\n");
        for (char *p = s; p < end; p++) /* an inline comment after a blank */
            if ((*p == ';' || *p == '#') && (p == s || p[-1] == ' ' || p[-1] == '\t'))
                end = p;
        while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        *end = '\0';
        if (*s == '[') {
            in_daemon = !strcmp(s, "[daemon]");
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in_daemon || !eq)
            continue;
        char *k_end = eq;
        while (k_end > s && (k_end[-1] == ' ' || k_end[-1] == '\t'))
            k_end--;
        if ((size_t)(k_end - s) != strlen(key) || strncmp(s, key, strlen(key)))
            continue;
        char *v = eq + 1 + strspn(eq + 1, " \t");
        snprintf(out, cap, "%s", v); /* the last setting wins, as in the daemon */
    }
    fclose(f);
    return 0;
}

int cks_socket_path(const char *config_path, const char *state_dir, char *buf, size_t cap)
{
    char sock[PATH_MAX] = "", state[PATH_MAX] = "";
    const char *env = getenv(CKS_PROTO_SOCKET_ENV);
    int n;

    if (env && *env) {
        n = snprintf(buf, cap, "%s", env);
        return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
    }
    if (!config_path && (env = getenv(CKS_PROTO_CONFIG_ENV)) && *env)
        config_path = env;
    if (!config_path && access(CKS_PROTO_DEFAULT_CONFIG, F_OK) == 0)
        config_path = CKS_PROTO_DEFAULT_CONFIG;
    if (config_path && (conf_daemon_value(config_path, "socket", sock, sizeof(sock)) < 0 ||
                        conf_daemon_value(config_path, "state", state, sizeof(state)) < 0))
        return -EIO;
    if (!state_dir && (env = getenv(CKS_PROTO_STATE_ENV)) && *env)
        state_dir = env;
    if (state_dir)
        snprintf(state, sizeof(state), "%s", state_dir);
    if (sock[0])
        n = snprintf(buf, cap, "%s", sock);
    else
        n = snprintf(buf, cap, "%s/%s", state[0] ? state : CKS_PROTO_DEFAULT_STATE,
                     CKS_PROTO_SOCKET_NAME);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* ---- lifetime ---------------------------------------------------------- */

int cks_client_open(const char *socket_path, struct cks_client **ret)
{
    const char *path = socket_path;
    struct cks_client *c;
    int fd = -1, r;

    char found[sizeof(c->path)];
    if (!path) {
        if ((r = cks_socket_path(NULL, NULL, found, sizeof(found))) < 0)
            return r;
        path = found;
    }
    if (!*path)
        return -EINVAL;
    if (strlen(path) >= sizeof(c->path))
        return -ENAMETOOLONG;
    r = sock_connect(path, &fd);
    if (r < 0)
        return r;
    close(fd);
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    memcpy(c->path, path, strlen(path) + 1);
    *ret = c;
    return 0;
}

void cks_client_close(struct cks_client *c)
{
    if (!c)
        return;
    buf_free(&c->msg);
    free(c);
}

const char *cks_client_error(const struct cks_client *c)
{
    return buf_str(&c->msg);
}

const char *cks_client_error_code(const struct cks_client *c)
{
    return c->code;
}
