/*
 * repoobj.c — encode and parse the `repo` object.
 *
 * The object is tiny and read from every region at start, so the parser is
 * strict rather than lenient: exact line order, exact keywords, decimal
 * numbers without signs or leading zeros, a trailing SHA-256 over the body.
 * Chunker bounds are checked with fastcdc_init() so that a repository this
 * parser accepts is one the chunker can run.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "base/err.h"
#include "engine/fastcdc.h"
#include "engine/hash.h"
#include "engine/repoobj.h"

int repoobj_encode(const struct repoobj *o, struct buf *out)
{
    size_t start = out->len;
    uint8_t digest[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    int r = buf_printf(out, "ckptsync-repo %d\nid %s\nchunker fastcdc2020 %llu %llu %llu %u\n",
                       REPOOBJ_VERSION, o->id, (unsigned long long)o->chunk_min,
                       (unsigned long long)o->chunk_avg, (unsigned long long)o->chunk_max,
                       o->normalization);
    if (r == 0 && !o->encrypted)
        r = buf_puts(out, "hash sha256\ncompression zstd\nencryption none\n");
    if (r == 0 && o->encrypted) {
        hex_encode(o->key_check, sizeof(o->key_check), hex);
        r = buf_printf(out, "hash hmac-sha256\ncompression zstd\nencryption aes-256-gcm %s\n", hex);
    }
    if (r < 0)
        return r;
    hash_sha256(out->data + start, out->len - start, digest);
    hex_encode(digest, HASH_LEN, hex);
    return buf_printf(out, "end %s\n", hex);
}

/* A cursor over the lines of the object. */
struct rcur {
    const char *p, *end;
    unsigned line;
    char text[256];
};

/* Counts the line before reading it, so that an error names the line
 * that could not be read, not the one before. */
static int rcur_next(struct rcur *c)
{
    c->line++;
    const char *nl = c->p ? memchr(c->p, '\n', (size_t)(c->end - c->p)) : NULL;
    if (!nl)
        return CKS_E_FORMAT;
    size_t n = (size_t)(nl - c->p);
    if (n >= sizeof(c->text) || memchr(c->p, 0, n))
        return CKS_E_FORMAT;
    memcpy(c->text, c->p, n);
    c->text[n] = 0;
    c->p = nl + 1;
    return 0;
}

/* Exactly n lower-case hex digits: the format allows one spelling only, so
 * that an object this parser accepts re-encodes to the same bytes. */
static bool lower_hex(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool parse_dec(const char **s, uint64_t *ret)
{
    const char *p = *s;
    uint64_t v = 0;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *s = p;
    *ret = v;
    return true;
}

static int repoobj_chunker(const char *t, struct repoobj *o)
{
    const char *p = t;
    uint64_t v[4];
    if (strncmp(p, "chunker fastcdc2020 ", 20) != 0)
        return CKS_E_FORMAT;
    p += 20;
    for (int i = 0; i < 4; i++) {
        if (!parse_dec(&p, &v[i]) || *p != (i == 3 ? 0 : ' '))
            return CKS_E_FORMAT;
        p += i == 3 ? 0 : 1;
    }
    struct fastcdc cdc;
    if (v[3] > 3 || v[2] > FASTCDC_MAX_SIZE ||
        fastcdc_init(&cdc, (size_t)v[0], (size_t)v[1], (size_t)v[2], (unsigned)v[3]) < 0)
        return CKS_E_LIMIT;
    o->chunk_min = v[0];
    o->chunk_avg = v[1];
    o->chunk_max = v[2];
    o->normalization = (unsigned)v[3];
    return 0;
}

static int repoobj_fail(struct buf *err, unsigned line, const char *what, int code)
{
    if (err)
        buf_printf(err, "line %u: %s", line, what);
    return code;
}

int repoobj_parse(const uint8_t *data, size_t len, struct repoobj *ret, struct buf *err)
{
    static const char *const fixed[] = {"hash sha256", "compression zstd", "encryption none"};
    static const char *const fixed_enc[] = {"hash hmac-sha256", "compression zstd",
                                            "encryption aes-256-gcm "};
    struct rcur c = {(const char *)data, (const char *)data + len, 0, {0}};
    struct repoobj o;
    uint8_t want[HASH_LEN], got[HASH_LEN];
    int r;

    memset(&o, 0, sizeof(o));
    if (len > REPOOBJ_MAX_BYTES)
        return repoobj_fail(err, 0, "repo object too large", CKS_E_LIMIT);
    if (rcur_next(&c) < 0 || strncmp(c.text, "ckptsync-repo ", 14) != 0)
        return repoobj_fail(err, 1, "not a ckptsync repo object", CKS_E_FORMAT);
    if (strcmp(c.text + 14, "1") != 0)
        return repoobj_fail(err, 1, "unsupported repo format version", CKS_E_VERSION);
    if (rcur_next(&c) < 0 || strncmp(c.text, "id ", 3) != 0 ||
        !lower_hex(c.text + 3, REPOOBJ_ID_HEX))
        return repoobj_fail(err, c.line, "expected 'id <32 hex>'", CKS_E_FORMAT);
    memcpy(o.id, c.text + 3, REPOOBJ_ID_HEX + 1);
    if (rcur_next(&c) < 0 || (r = repoobj_chunker(c.text, &o)) < 0)
        return repoobj_fail(err, c.line, "bad chunker line", CKS_E_FORMAT);
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        /* Only a readable line naming something else is a newer format. */
        if (rcur_next(&c) < 0)
            return repoobj_fail(err, c.line, "truncated, overlong or NUL in line", CKS_E_FORMAT);
        if (i == 0 && strcmp(c.text, fixed_enc[0]) == 0)
            o.encrypted = true;
        const char *line = o.encrypted ? fixed_enc[i] : fixed[i];
        if (o.encrypted && i == 2) {
            const char *hex = c.text + strlen(line);
            if (strncmp(c.text, line, strlen(line)) != 0)
                return repoobj_fail(err, c.line, "expected 'encryption aes-256-gcm <64 hex>'",
                                    CKS_E_VERSION);
            if (!lower_hex(hex, 2 * sizeof(o.key_check)) ||
                hex_decode(hex, sizeof(o.key_check), o.key_check) < 0)
                return repoobj_fail(err, c.line, "bad key check", CKS_E_FORMAT);
        } else if (strcmp(c.text, line) != 0) {
            return repoobj_fail(err, c.line, "unsupported repository feature", CKS_E_VERSION);
        }
    }
    size_t body = (size_t)(c.p - (const char *)data);
    if (rcur_next(&c) < 0 || strncmp(c.text, "end ", 4) != 0 ||
        !lower_hex(c.text + 4, HASH_HEX_LEN) || hex_decode(c.text + 4, HASH_LEN, want) < 0)
        return repoobj_fail(err, c.line, "expected 'end <sha256>'", CKS_E_FORMAT);
    if (c.p != c.end)
        return repoobj_fail(err, c.line + 1, "data after end line", CKS_E_FORMAT);
    hash_sha256(data, body, got);
    if (memcmp(got, want, HASH_LEN) != 0)
        return repoobj_fail(err, c.line, "checksum mismatch", CKS_E_DIGEST);
    *ret = o;
    return 0;
}
