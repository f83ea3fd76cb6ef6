/*
 * ref.c — encode and parse `latest` refs.
 */
#include <string.h>

#include "base/err.h"
#include "engine/ref.h"

int ref_encode(const struct ref *f, struct buf *out)
{
    return buf_printf(out, "%s %lld\n", f->id, (long long)f->step);
}

int ref_parse(const uint8_t *data, size_t len, struct ref *ret)
{
    char text[REF_MAX_BYTES + 1];
    struct ref f;

    if (len == 0 || len > REF_MAX_BYTES || data[len - 1] != '\n')
        return CKS_E_FORMAT;
    memcpy(text, data, len - 1);
    text[len - 1] = 0;
    if (strlen(text) != len - 1)
        return CKS_E_FORMAT;
    char *sp = strchr(text, ' ');
    if (!sp || (size_t)(sp - text) > MANIFEST_ID_MAX)
        return CKS_E_FORMAT;
    *sp = 0;
    if (manifest_id_check(text) < 0)
        return CKS_E_FORMAT;
    memcpy(f.id, text, (size_t)(sp - text) + 1);
    const char *p = sp + 1;
    if (!strcmp(p, "-1")) {
        f.step = -1;
    } else {
        int64_t v = 0;
        if (*p < '0' || *p > '9' || (p[0] == '0' && p[1]))
            return CKS_E_FORMAT;
        for (; *p; p++) {
            if (*p < '0' || *p > '9' || v > (INT64_MAX - (*p - '0')) / 10)
                return CKS_E_FORMAT;
            v = v * 10 + (*p - '0');
        }
        f.step = v;
    }
    *ret = f;
    return 0;
}

int ref_newer(const struct ref *cand, const struct ref *cur)
{
    /* Order: (step known, step, id).  A snapshot with a step (a
     * checkpoint) always outranks one without (a log or config file
     * captured by quiescence), so files written after a checkpoint never
     * take `latest` away from it; the order is total and transitive. */
    if ((cand->step >= 0) != (cur->step >= 0))
        return cand->step >= 0;
    if (cand->step != cur->step)
        return cand->step > cur->step;
    return strcmp(cand->id, cur->id) >= 0;
}
