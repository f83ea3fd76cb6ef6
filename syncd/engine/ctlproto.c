/*
 * ctlproto.c — control protocol codec.
 *
 * Design note: the request parser is the daemon's first contact with
 * whatever a local user writes on the socket, so it is strict and bounded:
 * the whole line is screened once for length, the final '\n' and bytes
 * outside 0x20..0x7e (a NUL or a raw control byte can never reach a
 * value); tokens are split on exactly one space; each key is looked up in
 * one table that says which verbs take it and how its value is checked.
 * Values are decoded into fixed buffers, so parsing allocates nothing
 * except the error message.
 *
 * The encoder is canonical (keys in table order, absent values and
 * wait=none omitted, upper-case %XX), and it checks a request with the
 * same rules as the parser, so whatever parses survives a round trip.
 *
 * Response parsing is strict about the frame (OK/ERR, code, one line) and
 * lenient about the human message: a daemon's clumsy message must never
 * hide its error code.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "engine/ctlproto.h"
#include "engine/hash.h"

#define TOKEN_ECHO_MAX 32 /* bytes of a bad token quoted back in a message */

static const char *const verb_names[] = {
    [CTL_PING] = "ping",   [CTL_COMMIT] = "commit", [CTL_STATUS] = "status",
    [CTL_FLUSH] = "flush", [CTL_RETRY] = "retry",   [CTL_RESTORED] = "restored",
};
static const char *const wait_names[] = {
    [CTL_WAIT_NONE] = "none",
    [CTL_WAIT_DURABLE] = "durable",
    [CTL_WAIT_REPLICATED] = "replicated",
};
static const char *const result_names[] = {
    [CTL_RESULT_OK] = "ok",
    [CTL_RESULT_FAILED] = "failed",
};
#define NVERBS (sizeof(verb_names) / sizeof(verb_names[0]))
#define NWAITS (sizeof(wait_names) / sizeof(wait_names[0]))
#define NRESULTS (sizeof(result_names) / sizeof(result_names[0]))

static int fail(struct buf *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct buf *err, int code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    if (!err)
        return code;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    buf_reset(err);
    if (buf_puts(err, msg) < 0)
        return -ENOMEM;
    return code;
}

/* ---- small helpers ----------------------------------------------------- */

const char *ctl_verb_name(enum ctl_verb verb)
{
    return (unsigned)verb < NVERBS ? verb_names[verb] : NULL;
}

const char *ctl_wait_name(enum ctl_wait wait)
{
    return (unsigned)wait < NWAITS ? wait_names[wait] : NULL;
}

const char *ctl_result_name(enum ctl_result result)
{
    return (unsigned)result < NRESULTS ? result_names[result] : NULL;
}

void ctl_request_init(struct ctl_request *r, enum ctl_verb verb)
{
    memset(r, 0, sizeof(*r));
    r->verb = verb;
    r->step = -1;
    r->wait = CTL_WAIT_NONE;
    r->timeout = -1;
    r->bytes = r->files = r->usec = -1;
    r->result = CTL_RESULT_NONE;
    r->nodes = r->node_rank = -1;
}

bool ctl_request_equal(const struct ctl_request *a, const struct ctl_request *b)
{
    return a->verb == b->verb && a->step == b->step && a->wait == b->wait &&
           a->timeout == b->timeout && strcmp(a->path, b->path) == 0 &&
           strcmp(a->region, b->region) == 0 && a->bytes == b->bytes && a->files == b->files &&
           a->usec == b->usec && a->result == b->result && a->nodes == b->nodes &&
           a->node_rank == b->node_rank;
}

static bool must_escape(uint8_t c)
{
    return c <= 0x20 || c >= 0x7f || c == '%' || c == '=';
}

static int pct_encode(struct buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    int r = len ? buf_reserve(out, len * 3) : 0;
    if (r < 0)
        return r;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        if (must_escape(c)) {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            buf_append(out, e, 3);
        } else {
            buf_append(out, &s[i], 1);
        }
    }
    return 0;
}

/* Strict decoding of a request value into dst[cap] (NUL-terminated).
 * -1 on a bad escape, a raw '=', a decoded NUL, or overflow. */
static int pct_decode(const char *s, size_t len, char *dst, size_t cap, size_t *ret_len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int c = (uint8_t)s[i];
        if (c == '=')
            return -1;
        if (c == '%') {
            int hi = i + 2 < len ? hex_digit(s[i + 1]) : -1;
            int lo = hi >= 0 ? hex_digit(s[i + 2]) : -1;
            if (lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
            if (c == 0)
                return -1;
        }
        if (n + 1 >= cap)
            return -1;
        dst[n++] = (char)c;
    }
    dst[n] = 0;
    *ret_len = n;
    return 0;
}

/* "0" or [1-9][0-9]*, at most max. */
static int parse_dec(const char *s, size_t len, int64_t max, int64_t *ret)
{
    int64_t v = 0;
    if (len == 0 || (s[0] == '0' && len > 1))
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        int d = s[i] - '0';
        if (v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *ret = v;
    return 0;
}

static bool region_ok(const char *s, size_t len)
{
    if (len == 0 || len >= CTL_REGION_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool path_ok(const char *s, size_t len)
{
    return len > 0 && len < CTL_PATH_MAX && s[0] == '/';
}

/* ---- request keys ------------------------------------------------------ */

#define VB(v) (1u << (v))

enum key_id {
    KEY_PATH,
    KEY_STEP,
    KEY_WAIT,
    KEY_TIMEOUT,
    KEY_DEADLINE,
    KEY_REGION,
    KEY_BYTES,
    KEY_FILES,
    KEY_USEC,
    KEY_RESULT,
    KEY_NODES,
    KEY_NODE_RANK,
    NKEYS
};

struct key_def {
    const char *name;
    unsigned verbs;    /* VB() of the verbs that take it */
    unsigned required; /* VB() of the verbs that need it */
};

static const struct key_def keys[NKEYS] = {
    [KEY_PATH] = {"path", VB(CTL_COMMIT), VB(CTL_COMMIT)},
    [KEY_STEP] = {"step", VB(CTL_COMMIT), 0},
    [KEY_WAIT] = {"wait", VB(CTL_COMMIT) | VB(CTL_FLUSH), 0},
    [KEY_TIMEOUT] = {"timeout", VB(CTL_COMMIT), 0},
    [KEY_DEADLINE] = {"deadline", VB(CTL_FLUSH), 0},
    [KEY_REGION] = {"region", VB(CTL_RETRY), VB(CTL_RETRY)},
    [KEY_BYTES] = {"bytes", VB(CTL_RESTORED), VB(CTL_RESTORED)},
    [KEY_FILES] = {"files", VB(CTL_RESTORED), VB(CTL_RESTORED)},
    [KEY_USEC] = {"usec", VB(CTL_RESTORED), VB(CTL_RESTORED)},
    [KEY_RESULT] = {"result", VB(CTL_RESTORED), VB(CTL_RESTORED)},
    [KEY_NODES] = {"nodes", VB(CTL_COMMIT), 0},
    [KEY_NODE_RANK] = {"node_rank", VB(CTL_COMMIT), 0},
};

static int key_lookup(const char *s, size_t len)
{
    for (int k = 0; k < NKEYS; k++)
        if (strlen(keys[k].name) == len && memcmp(keys[k].name, s, len) == 0)
            return k;
    return -1;
}

/* The name among names[first..n) that tmp is, or -1. */
static int word_lookup(const char *tmp, const char *const *names, unsigned first, unsigned n)
{
    for (unsigned w = first; w < n; w++)
        if (strcmp(tmp, names[w]) == 0)
            return (int)w;
    return -1;
}

/* The field a decimal key fills, or NULL for a key that is not one. */
static int64_t *count_field(struct ctl_request *r, int k)
{
    switch (k) {
    case KEY_STEP:
        return &r->step;
    case KEY_BYTES:
        return &r->bytes;
    case KEY_FILES:
        return &r->files;
    case KEY_USEC:
        return &r->usec;
    case KEY_NODES:
        return &r->nodes;
    case KEY_NODE_RANK:
        return &r->node_rank;
    }
    return NULL;
}

/* The largest value of a decimal key. */
static int64_t count_max(int k)
{
    return k == KEY_NODES ? CTL_MAX_NODES : k == KEY_NODE_RANK ? CTL_MAX_NODES - 1 : INT64_MAX;
}

/* nodes= and node_rank= go together, the rank below the count. */
static bool identity_ok(const struct ctl_request *r)
{
    if (r->nodes < 0 || r->node_rank < 0)
        return r->nodes == -1 && r->node_rank == -1;
    return r->nodes >= 1 && r->nodes <= CTL_MAX_NODES && r->node_rank < r->nodes;
}

/* Decodes and checks one value into r. */
static int key_set(struct ctl_request *r, int k, const char *v, size_t vlen, struct buf *err)
{
    char tmp[32];
    size_t n;
    int w;

    if (k == KEY_PATH) {
        if (pct_decode(v, vlen, r->path, sizeof(r->path), &n) < 0 || !path_ok(r->path, n))
            return fail(err, CKS_E_FORMAT, "path: not an absolute path of 1 to %u bytes",
                        CTL_PATH_MAX - 1);
        return 0;
    }
    if (k == KEY_REGION) {
        if (pct_decode(v, vlen, r->region, sizeof(r->region), &n) < 0 || !region_ok(r->region, n))
            return fail(err, CKS_E_FORMAT, "region: not a region name (1 to %u of A-Z a-z 0-9 _ -)",
                        CTL_REGION_MAX - 1);
        return 0;
    }
    if (pct_decode(v, vlen, tmp, sizeof(tmp), &n) < 0) {
        tmp[0] = 0;      /* no word */
        n = sizeof(tmp); /* and no number */
    }
    if (k == KEY_WAIT) {
        if ((w = word_lookup(tmp, wait_names, 0, NWAITS)) < 0)
            return fail(err, CKS_E_FORMAT, "wait: expected none, durable or replicated");
        r->wait = (enum ctl_wait)w;
        return 0;
    }
    if (k == KEY_RESULT) {
        if ((w = word_lookup(tmp, result_names, CTL_RESULT_OK, NRESULTS)) < 0)
            return fail(err, CKS_E_FORMAT, "result: expected ok or failed");
        r->result = (enum ctl_result)w;
        return 0;
    }
    int64_t *count = count_field(r, k);
    if (count) {
        if (n < sizeof(tmp) && parse_dec(tmp, n, count_max(k), count) == 0 &&
            (k != KEY_NODES || *count > 0))
            return 0;
        return fail(err, CKS_E_FORMAT, "%s: expected a decimal integer %d..%lld", keys[k].name,
                    k == KEY_NODES, (long long)count_max(k));
    }
    if (n < sizeof(tmp) && parse_dec(tmp, n, CTL_MAX_TIMEOUT, &r->timeout) == 0)
        return 0;
    return fail(err, CKS_E_FORMAT, "%s: expected decimal seconds 0..%d", keys[k].name,
                CTL_MAX_TIMEOUT);
}

/* One "key=value" token; *seen collects the keys met so far. */
static int param_parse(struct ctl_request *r, const char *tok, size_t len, unsigned *seen,
                       struct buf *err)
{
    const char *eq = memchr(tok, '=', len);
    int echo = (int)(len < TOKEN_ECHO_MAX ? len : TOKEN_ECHO_MAX);

    if (!eq)
        return fail(err, CKS_E_FORMAT, "expected key=value, got \"%.*s\"", echo, tok);
    size_t klen = (size_t)(eq - tok);
    int k = key_lookup(tok, klen);
    if (k < 0 || !(keys[k].verbs & VB(r->verb))) {
        echo = (int)(klen < TOKEN_ECHO_MAX ? klen : TOKEN_ECHO_MAX);
        return fail(err, CKS_E_FORMAT, "unknown key \"%.*s\" for %s", echo, tok,
                    verb_names[r->verb]);
    }
    if (*seen & (1u << k))
        return fail(err, CKS_E_FORMAT, "duplicate key \"%s\"", keys[k].name);
    *seen |= 1u << k;
    return key_set(r, k, eq + 1, len - klen - 1, err);
}

/* ---- request parse ----------------------------------------------------- */

/* Length, final newline, and only printable ASCII before it. */
static int screen_line(const char *line, size_t len, size_t max, bool high_ok, struct buf *err)
{
    if (len > max)
        return fail(err, CKS_E_LIMIT, "line longer than %zu bytes", max);
    if (len == 0 || line[len - 1] != '\n')
        return fail(err, CKS_E_FORMAT, "line does not end in a newline");
    for (size_t i = 0; i + 1 < len; i++) {
        uint8_t c = (uint8_t)line[i];
        if (c == 0)
            return fail(err, CKS_E_FORMAT, "NUL byte at offset %zu", i);
        if (c < 0x20 || (c >= 0x7f && !high_ok))
            return fail(err, CKS_E_FORMAT, "byte 0x%02x at offset %zu (escape it as %%XX)",
                        (unsigned)c, i);
    }
    return 0;
}

/* Next space-separated token of [*pos, end); an empty one is an error. */
static int next_token(const char **pos, const char *end, const char **ret_tok, size_t *ret_len)
{
    const char *p = *pos;
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    const char *stop = sp ? sp : end;

    if (stop == p)
        return -1;
    *ret_tok = p;
    *ret_len = (size_t)(stop - p);
    *pos = sp ? sp + 1 : end;
    return 0;
}

static int head_parse(const char **pos, const char *end, struct ctl_request *r, struct buf *err)
{
    const char *tok;
    size_t len;

    if (next_token(pos, end, &tok, &len) < 0)
        return fail(err, CKS_E_FORMAT, "empty token (fields are separated by one space)");
    if (len != strlen(CTL_MAGIC) || memcmp(tok, CTL_MAGIC, len) != 0) {
        if (len > 9 && memcmp(tok, "CKPTSYNC/", 9) == 0)
            return fail(err, CKS_E_VERSION, "unsupported protocol version (this is %s)", CTL_MAGIC);
        return fail(err, CKS_E_FORMAT, "not a %s request", CTL_MAGIC);
    }
    if (*pos == end || next_token(pos, end, &tok, &len) < 0)
        return fail(err, CKS_E_FORMAT, "missing verb");
    for (unsigned v = 0; v < NVERBS; v++)
        if (strlen(verb_names[v]) == len && memcmp(verb_names[v], tok, len) == 0) {
            ctl_request_init(r, (enum ctl_verb)v);
            return 0;
        }
    int echo = (int)(len < TOKEN_ECHO_MAX ? len : TOKEN_ECHO_MAX);
    return fail(err, CKS_E_FORMAT, "unknown verb \"%.*s\"", echo, tok);
}

int ctl_request_parse(const char *line, size_t len, struct ctl_request *ret, struct buf *err)
{
    const char *pos = line, *end, *tok;
    unsigned seen = 0;
    size_t tlen;
    int r = screen_line(line, len, CTL_MAX_REQUEST, false, err);

    if (r < 0)
        return r;
    end = line + len - 1;
    r = head_parse(&pos, end, ret, err);
    if (r == 0 && pos == end && end[-1] == ' ')
        r = fail(err, CKS_E_FORMAT, "trailing space");
    while (r == 0 && pos < end) {
        if (next_token(&pos, end, &tok, &tlen) < 0 || (pos == end && end[-1] == ' '))
            return fail(err, CKS_E_FORMAT, "empty token (fields are separated by one space)");
        r = param_parse(ret, tok, tlen, &seen, err);
    }
    for (int k = 0; r == 0 && k < NKEYS; k++)
        if ((keys[k].required & VB(ret->verb)) && !(seen & (1u << k)))
            r = fail(err, CKS_E_FORMAT, "%s needs %s=", verb_names[ret->verb], keys[k].name);
    if (r == 0 && !identity_ok(ret))
        r = ret->nodes < 0 || ret->node_rank < 0
                ? fail(err, CKS_E_FORMAT, "nodes= and node_rank= go together")
                : fail(err, CKS_E_FORMAT, "node_rank=%lld is not below nodes=%lld",
                       (long long)ret->node_rank, (long long)ret->nodes);
    return r;
}

/* ---- request encode ---------------------------------------------------- */

static bool request_valid(const struct ctl_request *r)
{
    if ((unsigned)r->verb >= NVERBS || (unsigned)r->wait >= NWAITS)
        return false;
    if (r->step < -1 || r->timeout < -1 || r->timeout > CTL_MAX_TIMEOUT)
        return false;
    if (r->verb == CTL_COMMIT && !path_ok(r->path, strnlen(r->path, sizeof(r->path))))
        return false;
    if (r->verb == CTL_RETRY && !region_ok(r->region, strnlen(r->region, sizeof(r->region))))
        return false;
    if (r->verb == CTL_RESTORED &&
        (r->bytes < 0 || r->files < 0 || r->usec < 0 || !ctl_result_name(r->result)))
        return false;
    if (!identity_ok(r) || (r->verb != CTL_COMMIT && r->nodes != -1))
        return false;
    return true;
}

static int key_encode(struct buf *out, enum key_id k, const char *s, size_t len)
{
    int r = buf_printf(out, " %s=", keys[k].name);
    return r < 0 ? r : pct_encode(out, s, len);
}

static int num_encode(struct buf *out, enum key_id k, int64_t v)
{
    return v < 0 ? 0 : buf_printf(out, " %s=%lld", keys[k].name, (long long)v);
}

int ctl_request_encode(const struct ctl_request *r, struct buf *out)
{
    if (!request_valid(r))
        return -EINVAL;
    int e = buf_printf(out, "%s %s", CTL_MAGIC, verb_names[r->verb]);
    if (e == 0 && r->verb == CTL_COMMIT) {
        e = key_encode(out, KEY_PATH, r->path, strlen(r->path));
        if (e == 0)
            e = num_encode(out, KEY_STEP, r->step);
    }
    if (e == 0 && (r->verb == CTL_COMMIT || r->verb == CTL_FLUSH) && r->wait != CTL_WAIT_NONE)
        e = buf_printf(out, " wait=%s", wait_names[r->wait]);
    if (e == 0 && r->verb == CTL_COMMIT)
        e = num_encode(out, KEY_TIMEOUT, r->timeout);
    if (e == 0 && r->verb == CTL_COMMIT)
        e = num_encode(out, KEY_NODES, r->nodes);
    if (e == 0 && r->verb == CTL_COMMIT)
        e = num_encode(out, KEY_NODE_RANK, r->node_rank);
    if (e == 0 && r->verb == CTL_FLUSH)
        e = num_encode(out, KEY_DEADLINE, r->timeout);
    if (e == 0 && r->verb == CTL_RETRY)
        e = key_encode(out, KEY_REGION, r->region, strlen(r->region));
    if (e == 0 && r->verb == CTL_RESTORED)
        e = buf_printf(out, " bytes=%lld files=%lld usec=%lld result=%s", (long long)r->bytes,
                       (long long)r->files, (long long)r->usec, result_names[r->result]);
    return e < 0 ? e : buf_puts(out, "\n");
}

/* ---- responses --------------------------------------------------------- */

static bool code_ok(const char *s, size_t len)
{
    if (len == 0 || len >= CTL_CODE_MAX || s[0] < 'a' || s[0] > 'z')
        return false;
    for (size_t i = 1; i < len; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

int ctl_response_ok(struct buf *out, const char *json_object)
{
    size_t len = json_object ? strlen(json_object) : 0;
    if (len < 2 || json_object[0] != '{' || json_object[len - 1] != '}')
        return -EINVAL;
    for (size_t i = 0; i < len; i++)
        if ((uint8_t)json_object[i] < 0x20)
            return -EINVAL;
    if (len > CTL_MAX_RESPONSE - 4)
        return CKS_E_LIMIT;
    int r = buf_puts(out, "OK ");
    if (r == 0)
        r = buf_append(out, json_object, len);
    return r < 0 ? r : buf_puts(out, "\n");
}

int ctl_response_err(struct buf *out, const char *code, const char *msg)
{
    size_t clen = code ? strlen(code) : 0;
    if (!code_ok(code, clen))
        return -EINVAL;
    int r = buf_printf(out, "ERR %s", code);
    size_t mlen = msg ? strlen(msg) : 0;
    /* Room for the message once encoded: "ERR " code " " msg "\n". */
    size_t room = CTL_MAX_RESPONSE - 4 - clen - 2, used = 0, take = 0;
    while (take < mlen) {
        size_t w = must_escape((uint8_t)msg[take]) ? 3 : 1;
        if (used + w > room)
            break;
        used += w;
        take++;
    }
    if (r == 0 && take > 0)
        r = buf_puts(out, " ");
    if (r == 0)
        r = pct_encode(out, msg ? msg : "", take);
    return r < 0 ? r : buf_puts(out, "\n");
}

/* Lenient: a '%' without two hex digits is kept; control bytes become '?'. */
static int msg_decode(const char *s, size_t len, struct buf *out)
{
    buf_reset(out);
    int r = len ? buf_reserve(out, len) : 0; /* reserve does not terminate */
    for (size_t i = 0; r == 0 && i < len; i++) {
        int c = (uint8_t)s[i];
        if (c == '%' && i + 2 < len && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
            c = hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]);
            i += 2;
        }
        char ch = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        r = buf_append(out, &ch, 1);
    }
    return r;
}

static int err_split(const char *p, const char *end, struct ctl_response *ret, struct buf *ret_msg)
{
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    const char *cend = sp ? sp : end;
    size_t clen = (size_t)(cend - p);

    if (!code_ok(p, clen))
        return CKS_E_FORMAT;
    memcpy(ret->code, p, clen);
    ret->code[clen] = 0;
    if (!ret_msg)
        return 0;
    return msg_decode(sp ? sp + 1 : end, sp ? (size_t)(end - sp - 1) : 0, ret_msg);
}

int ctl_response_parse(const char *line, size_t len, struct ctl_response *ret, struct buf *ret_msg)
{
    int r = screen_line(line, len, CTL_MAX_RESPONSE, true, NULL);

    memset(ret, 0, sizeof(*ret));
    if (ret_msg)
        buf_reset(ret_msg);
    if (r < 0)
        return r;
    const char *end = line + len - 1;
    if (len >= 4 && memcmp(line, "OK ", 3) == 0) {
        size_t blen = (size_t)(end - line - 3);
        if (blen < 2 || line[3] != '{' || end[-1] != '}')
            return CKS_E_FORMAT;
        ret->ok = true;
        ret->body = line + 3;
        ret->body_len = blen;
        return 0;
    }
    if (len >= 5 && memcmp(line, "ERR ", 4) == 0)
        return err_split(line + 4, end, ret, ret_msg);
    return CKS_E_FORMAT;
}

/* ---- error codes ------------------------------------------------------- */

const char *ctl_err_code(int err)
{
    switch (err) {
    case -ETIMEDOUT:
        return CTL_ERR_TIMEOUT;
    case -EINVAL:
    case CKS_E_FORMAT:
    case CKS_E_LIMIT:
    case CKS_E_VERSION:
        return CTL_ERR_BADREQUEST;
    case -ENOENT:
        return CTL_ERR_NOTFOUND;
    case CKS_E_FATAL:
        return CTL_ERR_DEGRADED;
    }
    return CTL_ERR_INTERNAL;
}

int ctl_err_errno(const char *code)
{
    static const struct {
        const char *code;
        int err;
    } map[] = {
        {CTL_ERR_TIMEOUT, -ETIMEDOUT},
        {CTL_ERR_BADREQUEST, -EINVAL},
        {CTL_ERR_NOTFOUND, -ENOENT},
        {CTL_ERR_DEGRADED, -EIO},
        {CTL_ERR_BUSY, -EBUSY},
        /* a path outside the watch root is a wrong argument, not a protocol failure */
        {CTL_ERR_NOTWATCHED, -EINVAL},
        /* so is a commit naming another node than the daemon's */
        {CTL_ERR_WRONGNODE, -EINVAL},
    };
    for (size_t i = 0; code && i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(code, map[i].code) == 0)
            return map[i].err;
    return -EPROTO;
}
