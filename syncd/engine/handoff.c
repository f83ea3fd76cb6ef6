/*
 * handoff.c — encode and parse handoff records.  Strict line order and
 * keywords, a restricted charset for every field, a trailing SHA-256: a
 * record is either exactly what a ckptsync wrote or rejected.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/textline.h"
#include "engine/handoff.h"
#include "engine/hash.h"
#include "engine/lineage.h"

int handoff_encode(const struct handoff *h, struct buf *out)
{
    char host[HANDOFF_FIELD_MAX + 1], inst[HANDOFF_FIELD_MAX + 1], hex[HASH_HEX_LEN + 1];
    uint8_t d[HASH_LEN];
    size_t start = out->len;
    if (manifest_run_check(h->run) < 0 || manifest_id_check(h->id) < 0 || h->step < -1)
        return -EINVAL;
    lineage_sanitise(h->host, host, sizeof(host));
    lineage_sanitise(h->instance, inst, sizeof(inst));
    int e = buf_printf(out,
                       "ckptsync-handoff 1\nrun %s\nsnapshot %s\nstep %lld\nhost %s\n"
                       "instance %s\ntime %lld\n",
                       h->run, h->id, (long long)h->step, host, inst, (long long)h->time);
    if (e < 0)
        return e;
    hash_sha256(out->data + start, out->len - start, d);
    hex_encode(d, HASH_LEN, hex);
    return buf_printf(out, "end %s\n", hex);
}

static bool parse_i64(const char *s, int64_t min, int64_t *ret)
{
    bool neg = s[0] == '-';
    const char *p = s + neg;
    int64_t v = 0;
    if (!*p || (p[0] == '0' && p[1]) || (neg && strcmp(s, "-1")))
        return false;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - (*p - '0')) / 10)
            return false;
        v = v * 10 + (*p - '0');
    }
    *ret = neg ? -v : v;
    return *ret >= min;
}

static bool word_field(const char *line, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    if (strncmp(line, key, kl) || line[kl] != ' ')
        return false;
    const char *v = line + kl + 1;
    size_t n = strlen(v);
    if (n == 0 || n >= cap)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!lineage_field_char(v[i]))
            return false;
    memcpy(out, v, n + 1);
    return true;
}

int handoff_parse(const uint8_t *data, size_t len, struct handoff *ret)
{
    const char *p = (const char *)data, *end = p + len, *body_end;
    char line[256], num[32];
    struct handoff h;
    uint8_t want[HASH_LEN], got[HASH_LEN];

    memset(&h, 0, sizeof(h));
    if (len > HANDOFF_MAX_BYTES || !textline_next(&p, end, line, sizeof(line)))
        return CKS_E_FORMAT;
    if (strncmp(line, "ckptsync-handoff ", 17) != 0)
        return CKS_E_FORMAT;
    if (strcmp(line + 17, "1") != 0)
        return CKS_E_VERSION;
    if (!textline_next(&p, end, line, sizeof(line)) ||
        !word_field(line, "run", h.run, sizeof(h.run)) || manifest_run_check(h.run) < 0 ||
        !textline_next(&p, end, line, sizeof(line)) ||
        !word_field(line, "snapshot", h.id, sizeof(h.id)) || manifest_id_check(h.id) < 0 ||
        !textline_next(&p, end, line, sizeof(line)) ||
        !word_field(line, "step", num, sizeof(num)) || !parse_i64(num, -1, &h.step) ||
        !textline_next(&p, end, line, sizeof(line)) ||
        !word_field(line, "host", h.host, sizeof(h.host)) ||
        !textline_next(&p, end, line, sizeof(line)) ||
        !word_field(line, "instance", h.instance, sizeof(h.instance)) ||
        !textline_next(&p, end, line, sizeof(line)) ||
        !word_field(line, "time", num, sizeof(num)) || !parse_i64(num, 0, &h.time))
        return CKS_E_FORMAT;
    body_end = p;
    if (!textline_next(&p, end, line, sizeof(line)) || strncmp(line, "end ", 4) ||
        strlen(line + 4) != HASH_HEX_LEN || hex_decode(line + 4, HASH_LEN, want) < 0 || p != end)
        return CKS_E_FORMAT;
    char canon[HASH_HEX_LEN + 1];
    hex_encode(want, HASH_LEN, canon);
    if (strcmp(canon, line + 4) != 0) /* one spelling: lower-case hex */
        return CKS_E_FORMAT;
    hash_sha256(data, (size_t)(body_end - (const char *)data), got);
    if (memcmp(want, got, HASH_LEN))
        return CKS_E_DIGEST;
    if (!strcmp(h.instance, "-"))
        h.instance[0] = 0;
    *ret = h;
    return 0;
}
