/*
 * lineage.c — keys and bodies of commit, claim and handoff records.
 *
 * Both directions are strict: one spelling of every number, a restricted
 * charset for every field, fixed line order, a trailing SHA-256.  A record
 * is exactly what a ckptsync wrote, or it is rejected; a key that is not
 * ours is ignored by the listing code rather than guessed at.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "engine/lineage.h"

static const char *const kind_names[] = {"commit", "claim", "handoff", "forget"};

bool lineage_field_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

void lineage_sanitise(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; in && in[n] && n + 1 < cap; n++)
        out[n] = lineage_field_char(in[n]) ? in[n] : '_';
    out[n] = 0;
    if (n == 0)
        snprintf(out, cap, "-");
}

static bool hex_field(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* A decimal without sign or leading zeros, or "-1" when allow_unknown. */
static bool parse_num(const char *s, size_t n, bool allow_unknown, int64_t max, int64_t *ret)
{
    int64_t v = 0;
    if (allow_unknown && n == 2 && !memcmp(s, "-1", 2)) {
        *ret = -1;
        return true;
    }
    if (n == 0 || n > 19 || (s[0] == '0' && n > 1))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || v > (INT64_MAX - (s[i] - '0')) / 10)
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v > max)
        return false;
    *ret = v;
    return true;
}

/* "-" is a valid snapshot id but the body's spelling of "none". */
static bool id_ok(const char *id)
{
    return manifest_id_check(id) == 0 && strcmp(id, "-");
}

static int rec_check(const struct lineage_rec *r)
{
    if ((unsigned)r->kind > LINEAGE_FORGET || manifest_run_check(r->run) < 0 || r->gen < 0 ||
        r->gen > LINEAGE_GEN_MAX || r->step < -1 || r->time < 0)
        return -EINVAL;
    if (r->kind != LINEAGE_CLAIM && !id_ok(r->id))
        return -EINVAL;
    if (r->kind == LINEAGE_CLAIM &&
        ((r->id[0] && !id_ok(r->id)) || !hex_field(r->tag, LINEAGE_CLAIM_HEX)))
        return -EINVAL;
    return 0;
}

int lineage_name(const struct lineage_rec *r, char *out, size_t cap)
{
    int n;
    if (rec_check(r) < 0)
        return -EINVAL;
    if (r->kind == LINEAGE_COMMIT || r->kind == LINEAGE_FORGET)
        n = snprintf(out, cap, "g%lld.s%lld.%s", (long long)r->gen, (long long)r->step, r->id);
    else if (r->kind == LINEAGE_CLAIM)
        n = snprintf(out, cap, "g%lld.claim.%s", (long long)r->gen, r->tag);
    else
        n = snprintf(out, cap, "g%lld.handoff.s%lld.%s", (long long)r->gen, (long long)r->step,
                     r->id);
    return n > 0 && (size_t)n < cap ? 0 : -EINVAL;
}

/* "g<gen>." at *p; advances past the dot. */
static bool key_num(const char **p, char lead, bool allow_unknown, int64_t max, int64_t *ret)
{
    const char *s = *p, *dot;
    if (*s != lead || !(dot = strchr(s + 1, '.')))
        return false;
    if (!parse_num(s + 1, (size_t)(dot - s - 1), allow_unknown, max, ret))
        return false;
    *p = dot + 1;
    return true;
}

static int key_rest(const char *p, struct lineage_rec *r)
{
    if (!key_num(&p, 'g', false, LINEAGE_GEN_MAX, &r->gen))
        return CKS_E_FORMAT;
    if (r->kind == LINEAGE_CLAIM || r->kind == LINEAGE_HANDOFF) {
        const char *w = r->kind == LINEAGE_CLAIM ? "claim." : "handoff.";
        if (strncmp(p, w, strlen(w)))
            return CKS_E_FORMAT;
        p += strlen(w);
    }
    if (r->kind == LINEAGE_CLAIM) {
        if (!hex_field(p, LINEAGE_CLAIM_HEX))
            return CKS_E_FORMAT;
        memcpy(r->tag, p, LINEAGE_CLAIM_HEX + 1);
        return 0;
    }
    if (!key_num(&p, 's', true, INT64_MAX, &r->step) || strlen(p) > MANIFEST_ID_MAX || !id_ok(p))
        return CKS_E_FORMAT;
    memcpy(r->id, p, strlen(p) + 1);
    return 0;
}

int lineage_name_parse(const char *name, struct lineage_rec *r)
{
    if (r->kind == LINEAGE_HANDOFF || r->kind == LINEAGE_CLAIM) {
        const char *dot = strchr(name, '.');
        r->kind = dot && !strncmp(dot + 1, "claim.", 6) ? LINEAGE_CLAIM : LINEAGE_HANDOFF;
    }
    return key_rest(name, r);
}

int lineage_encode(const struct lineage_rec *r, struct buf *out)
{
    char host[LINEAGE_FIELD_MAX + 1], inst[LINEAGE_FIELD_MAX + 1], hex[HASH_HEX_LEN + 1];
    uint8_t d[HASH_LEN];
    size_t start = out->len;
    if (rec_check(r) < 0)
        return -EINVAL;
    lineage_sanitise(r->host, host, sizeof(host));
    lineage_sanitise(r->instance, inst, sizeof(inst));
    if (r->kind == LINEAGE_COMMIT)
        hex_encode(r->manifest, HASH_LEN, hex);
    else
        snprintf(hex, sizeof(hex), "-");
    int e = buf_printf(out,
                       "ckptsync-%s 1\nrun %s\ngen %lld\nsnapshot %s\nstep %lld\ntag %s\n"
                       "host %s\ninstance %s\ntime %lld\nmanifest %s\n",
                       kind_names[r->kind], r->run, (long long)r->gen, r->id[0] ? r->id : "-",
                       (long long)r->step, r->kind == LINEAGE_CLAIM ? r->tag : "-", host, inst,
                       (long long)r->time, hex);
    if (e < 0)
        return e;
    hash_sha256(out->data + start, out->len - start, d);
    hex_encode(d, HASH_LEN, hex);
    return buf_printf(out, "end %s\n", hex);
}

/* ---- parser ------------------------------------------------------------ */

struct lp {
    const char *p, *end;
    char line[MANIFEST_MAX_FIELD + 1]; /* the longest value: a run name */
};

/* Next line, which must be "<key> <value>" with a field-charset value. */
static const char *lp_field(struct lp *l, const char *key)
{
    const char *nl = memchr(l->p, '\n', (size_t)(l->end - l->p));
    size_t n = nl ? (size_t)(nl - l->p) : 0, kl = strlen(key);
    if (!nl || n <= kl + 1 || n - kl - 1 >= sizeof(l->line) || memcmp(l->p, key, kl) ||
        l->p[kl] != ' ')
        return NULL;
    memcpy(l->line, l->p + kl + 1, n - kl - 1);
    l->line[n - kl - 1] = 0;
    for (const char *c = l->line; *c; c++)
        if (!lineage_field_char(*c))
            return NULL;
    l->p = nl + 1;
    return l->line;
}

static bool lp_copy(struct lp *l, const char *key, char *out, size_t cap, bool dash_empty)
{
    const char *v = lp_field(l, key);
    if (!v || strlen(v) >= cap)
        return false;
    snprintf(out, cap, "%s", dash_empty && !strcmp(v, "-") ? "" : v);
    return true;
}

static bool lp_num(struct lp *l, const char *key, bool allow_unknown, int64_t max, int64_t *ret)
{
    const char *v = lp_field(l, key);
    return v && parse_num(v, strlen(v), allow_unknown, max, ret);
}

static int lp_head(struct lp *l, struct lineage_rec *r)
{
    const char *nl = memchr(l->p, '\n', (size_t)(l->end - l->p));
    size_t n = nl ? (size_t)(nl - l->p) : 0;
    for (unsigned k = 0; nl && k <= LINEAGE_FORGET; k++) {
        char want[32];
        int w = snprintf(want, sizeof(want), "ckptsync-%s ", kind_names[k]);
        if (n < (size_t)w || memcmp(l->p, want, (size_t)w))
            continue;
        if (n != (size_t)w + 1 || l->p[w] != '1')
            return CKS_E_VERSION;
        r->kind = (enum lineage_kind)k;
        l->p = nl + 1;
        return 0;
    }
    return CKS_E_FORMAT;
}

static int lp_body(struct lp *l, struct lineage_rec *r)
{
    char hex[HASH_HEX_LEN + 1];
    if (!lp_copy(l, "run", r->run, sizeof(r->run), false) ||
        !lp_num(l, "gen", false, LINEAGE_GEN_MAX, &r->gen) ||
        !lp_copy(l, "snapshot", r->id, sizeof(r->id), true) ||
        !lp_num(l, "step", true, INT64_MAX, &r->step) ||
        !lp_copy(l, "tag", r->tag, sizeof(r->tag), true) ||
        !lp_copy(l, "host", r->host, sizeof(r->host), false) ||
        !lp_copy(l, "instance", r->instance, sizeof(r->instance), true) ||
        !lp_num(l, "time", false, INT64_MAX, &r->time) ||
        !lp_copy(l, "manifest", hex, sizeof(hex), false))
        return CKS_E_FORMAT;
    if (r->kind == LINEAGE_COMMIT) {
        if (!hex_field(hex, HASH_HEX_LEN) || hex_decode(hex, HASH_LEN, r->manifest) < 0)
            return CKS_E_FORMAT;
    } else if (strcmp(hex, "-")) {
        return CKS_E_FORMAT;
    }
    if ((r->kind != LINEAGE_CLAIM && r->tag[0]) || rec_check(r) < 0)
        return CKS_E_FORMAT;
    return 0;
}

int lineage_parse(const uint8_t *data, size_t len, struct lineage_rec *ret)
{
    struct lp l = {.p = (const char *)data, .end = (const char *)data + len};
    struct lineage_rec r;
    uint8_t want[HASH_LEN], got[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];

    memset(&r, 0, sizeof(r));
    if (len == 0 || len > LINEAGE_MAX_BYTES || memchr(data, 0, len))
        return CKS_E_FORMAT;
    int e = lp_head(&l, &r);
    if (e == 0)
        e = lp_body(&l, &r);
    if (e < 0)
        return e;
    size_t body = (size_t)(l.p - (const char *)data);
    if (!lp_copy(&l, "end", hex, sizeof(hex), false) || l.p != l.end ||
        !hex_field(hex, HASH_HEX_LEN) || hex_decode(hex, HASH_LEN, want) < 0)
        return CKS_E_FORMAT;
    hash_sha256(data, body, got);
    if (memcmp(want, got, HASH_LEN))
        return CKS_E_DIGEST;
    *ret = r;
    return 0;
}

int lineage_parse_for(const struct lineage_rec *k, const uint8_t *data, size_t len,
                      struct lineage_rec *ret)
{
    struct lineage_rec b;
    int e = lineage_parse(data, len, &b);
    if (e < 0)
        return e;
    if (k->kind != b.kind || strcmp(k->run, b.run) || k->gen != b.gen ||
        (k->kind == LINEAGE_CLAIM ? strcmp(k->tag, b.tag)
                                  : (strcmp(k->id, b.id) || k->step != b.step)))
        return CKS_E_MISMATCH;
    *ret = b;
    return 0;
}

int lineage_newer(int64_t step_a, const char *id_a, int64_t step_b, const char *id_b)
{
    if ((step_a >= 0) != (step_b >= 0))
        return step_a >= 0;
    if (step_a != step_b)
        return step_a > step_b;
    return strcmp(id_a, id_b) > 0;
}
