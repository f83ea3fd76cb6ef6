/*
 * sigv4.c — AWS Signature Version 4, header-based, as S3 checks it.
 *
 * Design: the request is validated first (so a bad field is -EINVAL and
 * never a wrong signature), then the canonical request is built into one
 * buffer in its fixed order: method, URI, query, headers, signed-header
 * list, payload hash.  S3 differs from the other AWS services in two ways
 * that matter here: the path is encoded exactly once and never normalised
 * ("//" and "." stay), and '/' stays literal in the path.  Headers are
 * collected into a small array (the signer's own four plus the caller's),
 * lower-cased, value-normalised, sorted with qsort and checked for
 * duplicates, so one sorted list yields both the canonical header block
 * and the SignedHeaders list.  The signing key is derived on the stack
 * (secret bounded by SIGV4_MAX_SECRET) and every key-derived byte is wiped
 * with OPENSSL_cleanse before return.  Output buffers are appended to and
 * rolled back to their old length on any failure.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "engine/hash.h"
#include "store/sigv4.h"

#define SIGV4_ALGO "AWS4-HMAC-SHA256"
#define SIGV4_TERM "aws4_request"
#define SIGV4_MAX_ALL (SIGV4_MAX_HEADERS + 4)

/* One header as signed: lower-case name, normalised value. */
struct chdr {
    struct buf name;
    struct buf value;
};

/* One query parameter, both halves already encoded. */
struct qparam {
    struct buf name;
    struct buf value;
};

static bool is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

static bool is_tchar(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* HTTP field-value bytes: no control characters except HTAB. */
static bool is_field_text(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            return false;
    return true;
}

static void buf_rollback(struct buf *b, size_t len)
{
    if (b && b->data) {
        b->len = len;
        b->data[len] = 0;
    }
}

static int uri_encode_n(const char *s, size_t n, bool encode_slash, struct buf *ret)
{
    static const char hex[] = "0123456789ABCDEF";
    if (n > (SIZE_MAX - 1) / 3)
        return -ENOMEM;
    int r = buf_reserve(ret, 3 * n);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (is_unreserved(c) || (c == '/' && !encode_slash)) {
            ret->data[ret->len++] = c;
        } else {
            ret->data[ret->len++] = '%';
            ret->data[ret->len++] = (uint8_t)hex[c >> 4];
            ret->data[ret->len++] = (uint8_t)hex[c & 15];
        }
    }
    ret->data[ret->len] = 0;
    return 0;
}

int sigv4_uri_encode(const char *s, bool encode_slash, struct buf *ret)
{
    return uri_encode_n(s, strlen(s), encode_slash, ret);
}

/* ---- canonical query ---------------------------------------------------- */

static int qparam_cmp(const void *a, const void *b)
{
    const struct qparam *x = a, *y = b;
    int c = strcmp(buf_str(&x->name), buf_str(&y->name));
    return c ? c : strcmp(buf_str(&x->value), buf_str(&y->value));
}

/* Splits and encodes the raw query into p; returns the count or < 0. */
static int query_split(const char *query, struct qparam *p)
{
    int n = 0;
    for (const char *s = query; *s;) {
        size_t len = strcspn(s, "&");
        if (len > 0) {
            if (n == SIGV4_MAX_PARAMS)
                return -EINVAL;
            const char *eq = memchr(s, '=', len);
            size_t nlen = eq ? (size_t)(eq - s) : len;
            int r = uri_encode_n(s, nlen, true, &p[n].name);
            if (r >= 0 && eq)
                r = uri_encode_n(eq + 1, len - nlen - 1, true, &p[n].value);
            n++;
            if (r < 0)
                return r;
        }
        s += len + (s[len] == '&');
    }
    return n;
}

static int query_join(struct qparam *p, int n, struct buf *ret)
{
    int r = 0;
    qsort(p, (size_t)n, sizeof(*p), qparam_cmp);
    for (int i = 0; i < n && r >= 0; i++)
        r = buf_printf(ret, "%s%s=%s", i ? "&" : "", buf_str(&p[i].name), buf_str(&p[i].value));
    return r;
}

int sigv4_canonical_query(const char *query, struct buf *ret)
{
    struct qparam p[SIGV4_MAX_PARAMS];
    size_t old = ret->len;
    memset(p, 0, sizeof(p));
    int r = query_split(query ? query : "", p);
    int n = r < 0 ? SIGV4_MAX_PARAMS : r;
    if (r >= 0)
        r = query_join(p, n, ret);
    for (int i = 0; i < n; i++) {
        buf_free(&p[i].name);
        buf_free(&p[i].value);
    }
    if (r < 0)
        buf_rollback(ret, old);
    return r < 0 ? r : 0;
}

/* ---- validation --------------------------------------------------------- */

/* Path and query bytes are all percent-encoded, so only their length
 * matters. */
static bool length_ok(const char *s)
{
    return s && strlen(s) <= SIGV4_MAX_FIELD;
}

static bool field_ok(const char *s, bool allow_empty)
{
    return s && (allow_empty || *s) && strlen(s) <= SIGV4_MAX_FIELD && is_field_text(s);
}

/* A credential-scope component: no separator of the Credential field. */
static bool scope_ok(const char *s)
{
    return field_ok(s, false) && !strpbrk(s, "/, \t");
}

static bool amz_date_ok(const char *d)
{
    if (!d || strlen(d) != SIGV4_DATE_LEN || d[8] != 'T' || d[15] != 'Z')
        return false;
    for (int i = 0; i < 15; i++)
        if (i != 8 && (d[i] < '0' || d[i] > '9'))
            return false;
    return true;
}

static bool token_ok(const char *s)
{
    if (!s || !*s || strlen(s) > SIGV4_MAX_FIELD)
        return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (!is_tchar(*p))
            return false;
    return true;
}

static bool request_ok(const struct sigv4_request *r)
{
    return token_ok(r->method) && field_ok(r->host, false) && !strpbrk(r->host, " \t") &&
           length_ok(r->path) && (r->path[0] == '/' || r->path[0] == 0) &&
           (!r->query || length_ok(r->query)) && field_ok(r->payload_hash, false) &&
           amz_date_ok(r->amz_date) && scope_ok(r->region) && scope_ok(r->service) &&
           scope_ok(r->access_key) && r->secret_key && *r->secret_key &&
           strlen(r->secret_key) <= SIGV4_MAX_SECRET &&
           (!r->session_token || field_ok(r->session_token, false)) &&
           r->nheaders <= SIGV4_MAX_HEADERS && (r->headers || r->nheaders == 0);
}

/* ---- canonical headers -------------------------------------------------- */

static bool reserved_header(const char *name)
{
    static const char *const own[] = {"host", "x-amz-date", "x-amz-content-sha256",
                                      "x-amz-security-token", "authorization"};
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (!strcasecmp(name, own[i]))
            return true;
    return false;
}

/* Lower-case name; value with outer blanks trimmed, inner runs collapsed. */
static int chdr_set(struct chdr *h, const char *name, const char *value)
{
    int r = buf_puts(&h->name, name);
    for (size_t i = 0; r >= 0 && i < h->name.len; i++)
        if (h->name.data[i] >= 'A' && h->name.data[i] <= 'Z')
            h->name.data[i] = (uint8_t)(h->name.data[i] - 'A' + 'a');
    const char *p = value;
    while (r >= 0 && *p) {
        size_t blank = strspn(p, " \t");
        p += blank;
        size_t word = strcspn(p, " \t");
        if (word == 0)
            break;
        if (h->value.len > 0)
            r = buf_append(&h->value, " ", 1);
        if (r >= 0)
            r = buf_append(&h->value, p, word);
        p += word;
    }
    if (r >= 0 && !h->value.data)
        r = buf_append(&h->value, "", 0);
    return r;
}

static int chdr_cmp(const void *a, const void *b)
{
    const struct chdr *x = a, *y = b;
    return strcmp(buf_str(&x->name), buf_str(&y->name));
}

/* Fills h with every header to sign, sorted; returns the count or < 0.
 * Entries up to the returned count (or all on error) must be freed. */
static int headers_collect(const struct sigv4_request *rq, struct chdr *h)
{
    int n = 0, r = chdr_set(&h[n++], "host", rq->host);
    if (r >= 0)
        r = chdr_set(&h[n++], "x-amz-content-sha256", rq->payload_hash);
    if (r >= 0)
        r = chdr_set(&h[n++], "x-amz-date", rq->amz_date);
    if (r >= 0 && rq->session_token)
        r = chdr_set(&h[n++], "x-amz-security-token", rq->session_token);
    for (size_t i = 0; r >= 0 && i < rq->nheaders; i++) {
        const struct sigv4_header *x = &rq->headers[i];
        if (!token_ok(x->name) || reserved_header(x->name) || !field_ok(x->value, true))
            return -EINVAL;
        r = chdr_set(&h[n++], x->name, x->value);
    }
    if (r < 0)
        return r;
    qsort(h, (size_t)n, sizeof(*h), chdr_cmp);
    for (int i = 1; i < n; i++)
        if (chdr_cmp(&h[i - 1], &h[i]) == 0)
            return -EINVAL;
    return n;
}

static int signed_list(const struct chdr *h, int n, struct buf *ret)
{
    int r = 0;
    for (int i = 0; i < n && r >= 0; i++)
        r = buf_printf(ret, "%s%s", i ? ";" : "", buf_str(&h[i].name));
    return r;
}

/* ---- canonical request -------------------------------------------------- */

static int canonical_headers(const struct chdr *h, int n, struct buf *out)
{
    int r = 0;
    for (int i = 0; i < n && r >= 0; i++)
        r = buf_printf(out, "%s:%s\n", buf_str(&h[i].name), buf_str(&h[i].value));
    return r;
}

static int canonical_request(const struct sigv4_request *rq, const struct chdr *h, int n,
                             const struct buf *signed_hdrs, struct buf *out)
{
    int r = buf_printf(out, "%s\n", rq->method);
    if (r >= 0)
        r = sigv4_uri_encode(rq->path[0] ? rq->path : "/", false, out);
    if (r >= 0)
        r = buf_append(out, "\n", 1);
    if (r >= 0)
        r = sigv4_canonical_query(rq->query, out);
    if (r >= 0)
        r = buf_append(out, "\n", 1);
    if (r >= 0)
        r = canonical_headers(h, n, out);
    if (r >= 0)
        r = buf_printf(out, "\n%s\n%s", buf_str(signed_hdrs), rq->payload_hash);
    return r;
}

/* ---- signature ---------------------------------------------------------- */

static int hmac256(const void *key, size_t klen, const void *data, size_t dlen,
                   uint8_t out[HASH_LEN])
{
    unsigned int olen = 0;
    if (!HMAC(EVP_sha256(), key, (int)klen, data, dlen, out, &olen) || olen != HASH_LEN) {
        ERR_clear_error();
        return -ENOTSUP;
    }
    return 0;
}

/* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service),
 * "aws4_request"). */
static int signing_key(const struct sigv4_request *rq, uint8_t ret[HASH_LEN])
{
    char k0[4 + SIGV4_MAX_SECRET];
    uint8_t k[HASH_LEN];
    size_t slen = strlen(rq->secret_key);
    memcpy(k0, "AWS4", 4);
    memcpy(k0 + 4, rq->secret_key, slen);
    int r = hmac256(k0, 4 + slen, rq->amz_date, 8, k);
    if (r >= 0)
        r = hmac256(k, HASH_LEN, rq->region, strlen(rq->region), k);
    if (r >= 0)
        r = hmac256(k, HASH_LEN, rq->service, strlen(rq->service), k);
    if (r >= 0)
        r = hmac256(k, HASH_LEN, SIGV4_TERM, strlen(SIGV4_TERM), ret);
    OPENSSL_cleanse(k0, sizeof(k0));
    OPENSSL_cleanse(k, sizeof(k));
    return r;
}

/* Hex signature of the string to sign built over the canonical request. */
static int signature(const struct sigv4_request *rq, const struct buf *creq,
                     char ret[HASH_HEX_LEN + 1])
{
    uint8_t digest[HASH_LEN], key[HASH_LEN], sig[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    struct buf sts = BUF_INIT;
    int r = hash_digest(creq->data, creq->len, digest);
    if (r >= 0) {
        hex_encode(digest, HASH_LEN, hex);
        r = buf_printf(&sts, SIGV4_ALGO "\n%s\n%.8s/%s/%s/" SIGV4_TERM "\n%s", rq->amz_date,
                       rq->amz_date, rq->region, rq->service, hex);
    }
    if (r >= 0)
        r = signing_key(rq, key);
    if (r >= 0)
        r = hmac256(key, HASH_LEN, sts.data, sts.len, sig);
    if (r >= 0)
        hex_encode(sig, HASH_LEN, ret);
    OPENSSL_cleanse(key, sizeof(key));
    buf_free(&sts);
    return r;
}

static int authorization(const struct sigv4_request *rq, const struct buf *signed_hdrs,
                         const char *sig, struct buf *out)
{
    return buf_printf(
        out, SIGV4_ALGO " Credential=%s/%.8s/%s/%s/" SIGV4_TERM ",SignedHeaders=%s,Signature=%s",
        rq->access_key, rq->amz_date, rq->region, rq->service, buf_str(signed_hdrs), sig);
}

static int sign_with(const struct sigv4_request *rq, const struct chdr *h, int n,
                     struct buf *ret_auth, struct buf *ret_canonical)
{
    struct buf list = BUF_INIT, creq = BUF_INIT;
    char sig[HASH_HEX_LEN + 1];
    int r = signed_list(h, n, &list);
    if (r >= 0)
        r = canonical_request(rq, h, n, &list, &creq);
    if (r >= 0)
        r = signature(rq, &creq, sig);
    if (r >= 0)
        r = authorization(rq, &list, sig, ret_auth);
    if (r >= 0 && ret_canonical)
        r = buf_append(ret_canonical, creq.data, creq.len);
    buf_free(&list);
    buf_free(&creq);
    return r;
}

int sigv4_sign(const struct sigv4_request *rq, struct buf *ret_authorization,
               struct buf *ret_canonical)
{
    struct chdr h[SIGV4_MAX_ALL];
    size_t old_auth = ret_authorization->len;
    size_t old_canon = ret_canonical ? ret_canonical->len : 0;

    if (!request_ok(rq))
        return -EINVAL;
    memset(h, 0, sizeof(h));
    int r = headers_collect(rq, h);
    if (r >= 0)
        r = sign_with(rq, h, r, ret_authorization, ret_canonical);
    for (int i = 0; i < SIGV4_MAX_ALL; i++) {
        buf_free(&h[i].name);
        buf_free(&h[i].value);
    }
    if (r < 0) {
        buf_rollback(ret_authorization, old_auth);
        buf_rollback(ret_canonical, old_canon);
    }
    return r < 0 ? r : 0;
}

/* ---- date --------------------------------------------------------------- */

static char *put_digits(char *p, int v, int width)
{
    for (int i = width - 1; i >= 0; i--, v /= 10)
        p[i] = (char)('0' + v % 10);
    return p + width;
}

int sigv4_amz_date(time_t t, char out[SIGV4_DATE_LEN + 1])
{
    struct tm tm;
    out[0] = 0;
    if (!gmtime_r(&t, &tm) || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900)
        return -EOVERFLOW;
    char *p = put_digits(out, tm.tm_year + 1900, 4);
    p = put_digits(p, tm.tm_mon + 1, 2);
    p = put_digits(p, tm.tm_mday, 2);
    *p++ = 'T';
    p = put_digits(p, tm.tm_hour, 2);
    p = put_digits(p, tm.tm_min, 2);
    p = put_digits(p, tm.tm_sec, 2);
    *p++ = 'Z';
    *p = 0;
    return 0;
}
