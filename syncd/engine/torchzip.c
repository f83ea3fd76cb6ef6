/*
 * torchzip.c — a zip archive's records from its central directory (format
 * and what is trusted in torchzip.h).
 *
 * Design notes.
 * - Three reads bound everything: the tail (end record, zip64 locator and
 *   record), the central directory (checked against the file and
 *   TORCHZIP_MAX_CDIR before it is allocated), then one local header per
 *   record (30 bytes and the name).
 * - A record's own faults make it unusable, not the archive: the caller
 *   (tensorview) then simply finds no storage there.
 */
#include "engine/torchzip.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define END_LEN 22u
#define LOC64_LEN 20u
#define END64_LEN 56u
#define CENTRAL_LEN 46u
#define LOCAL_LEN 30u
#define TAIL_MAX (END_LEN + 65535u)

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

bool torchzip_is_zip(const uint8_t *head, size_t len)
{
    return len >= 4 && le(head, 4) == SIG_LOCAL;
}

void torchzip_free(struct torchzip *z)
{
    for (size_t i = 0; i < z->n; i++)
        free(z->v[i].name);
    free(z->v);
    z->v = NULL;
    z->n = 0;
}

/* Where the central directory lies, from the end records. */
struct cdir {
    uint64_t off, size, count;
};

static int fmt(struct buf *err, const char *what, uint64_t off)
{
    if (err)
        buf_printf(err, "zip: %s (offset %llu)", what, (unsigned long long)off);
    return CKS_E_FORMAT;
}

/* The zip64 end record, through the locator just before the end record at
 * end_at. */
static int read_end64(uint64_t end_at, torchzip_read_fn rd, void *ud, struct cdir *c,
                      struct buf *err)
{
    uint8_t loc[LOC64_LEN], rec[END64_LEN];
    int e;
    if (end_at < LOC64_LEN)
        return fmt(err, "zip64 fields without a zip64 locator", end_at);
    if ((e = rd(ud, end_at - LOC64_LEN, loc, sizeof(loc))) < 0)
        return e;
    uint64_t at = le(loc + 8, 8);
    if (le(loc, 4) != SIG_LOC64 || le(loc + 4, 4) != 0 || le(loc + 16, 4) > 1)
        return fmt(err, "zip64 fields without a zip64 locator", end_at - LOC64_LEN);
    if (at > end_at - LOC64_LEN || end_at - LOC64_LEN - at < END64_LEN)
        return fmt(err, "the zip64 end record lies outside the file", end_at - LOC64_LEN);
    if ((e = rd(ud, at, rec, sizeof(rec))) < 0)
        return e;
    if (le(rec, 4) != SIG_END64 || le(rec + 16, 4) != 0 || le(rec + 20, 4) != 0 ||
        le(rec + 24, 8) != le(rec + 32, 8))
        return fmt(err, "not a zip64 end record of one disk", at);
    c->count = le(rec + 32, 8);
    c->size = le(rec + 40, 8);
    c->off = le(rec + 48, 8);
    return 0;
}

/* The end record: the last signature in the tail whose comment ends the
 * file.  Its offset into *ret_at. */
static int find_end(const uint8_t *tail, size_t n, uint64_t tail_at, uint64_t *ret_at)
{
    for (size_t i = n - END_LEN + 1; i-- > 0;)
        if (le(tail + i, 4) == SIG_END && i + END_LEN + le(tail + i + 20, 2) == n) {
            *ret_at = tail_at + i;
            return 0;
        }
    return CKS_E_FORMAT;
}

static int read_end(uint64_t file_size, torchzip_read_fn rd, void *ud, struct cdir *c,
                    uint64_t *ret_end_at, struct buf *err)
{
    size_t n = file_size < TAIL_MAX ? (size_t)file_size : TAIL_MAX;
    uint64_t at = file_size - n, end_at;
    uint8_t *tail = n >= END_LEN ? malloc(n) : NULL;
    int e = n < END_LEN ? fmt(err, "too short for a zip archive", 0) : tail ? 0 : -ENOMEM;
    if (e == 0)
        e = rd(ud, at, tail, n);
    if (e == 0 && find_end(tail, n, at, &end_at) < 0)
        e = fmt(err, "no end of central directory record in the last 64 KiB", at);
    const uint8_t *r = e == 0 ? tail + (end_at - at) : NULL;
    if (r && (le(r + 4, 2) != 0 || le(r + 6, 2) != 0 || le(r + 8, 2) != le(r + 10, 2)))
        e = fmt(err, "an archive of several disks", end_at);
    if (e == 0) {
        c->count = le(r + 10, 2);
        c->size = le(r + 12, 4);
        c->off = le(r + 16, 4);
        *ret_end_at = end_at;
        if (c->count == 0xffff || c->size == 0xffffffffu || c->off == 0xffffffffu)
            e = read_end64(end_at, rd, ud, c, err);
    }
    free(tail);
    return e;
}

/* One central entry's sizes and offset, with the zip64 extra field where
 * the classic fields are saturated. */
struct entry {
    uint64_t csize, usize, off;
    unsigned method, flags, nlen;
    const uint8_t *name;
};

static int zip64_extra(const uint8_t *x, size_t xlen, struct entry *en)
{
    while (xlen >= 4) {
        size_t id = (size_t)le(x, 2), sz = (size_t)le(x + 2, 2);
        if (sz > xlen - 4)
            return CKS_E_FORMAT;
        if (id == 1) {
            uint64_t *f[3] = {&en->usize, &en->csize, &en->off};
            size_t at = 0;
            for (int i = 0; i < 3; i++) {
                if (*f[i] != 0xffffffffu)
                    continue;
                if (at + 8 > sz)
                    return CKS_E_FORMAT;
                *f[i] = le(x + 4 + at, 8);
                at += 8;
            }
            return 0;
        }
        x += 4 + sz;
        xlen -= 4 + sz;
    }
    return 0;
}

/* The central entry at d[*pos ..) of a directory of len bytes. */
static int parse_entry(const uint8_t *d, size_t len, size_t *pos, struct entry *en)
{
    const uint8_t *h = d + *pos;
    if (len - *pos < CENTRAL_LEN || le(h, 4) != SIG_CENTRAL)
        return CKS_E_FORMAT;
    size_t nlen = (size_t)le(h + 28, 2), xlen = (size_t)le(h + 30, 2), clen = (size_t)le(h + 32, 2);
    if (nlen + xlen + clen > len - *pos - CENTRAL_LEN || le(h + 34, 2) != 0)
        return CKS_E_FORMAT;
    *en = (struct entry){.flags = (unsigned)le(h + 8, 2),
                         .method = (unsigned)le(h + 10, 2),
                         .csize = le(h + 20, 4),
                         .usize = le(h + 24, 4),
                         .off = le(h + 42, 4),
                         .nlen = (unsigned)nlen,
                         .name = h + CENTRAL_LEN};
    *pos += CENTRAL_LEN + nlen + xlen + clen;
    return zip64_extra(h + CENTRAL_LEN + nlen, xlen, en);
}

/* The record of entry en: its local header read to find where the data
 * begins (the local extra field's length differs from the central one's). */
static int add_record(const struct entry *en, uint64_t cdir_off, torchzip_read_fn rd, void *ud,
                      struct torchzip_record *r)
{
    uint8_t h[LOCAL_LEN + TORCHZIP_MAX_NAME];
    r->usable = false;
    if (!(r->name = malloc(en->nlen + 1)))
        return -ENOMEM;
    memcpy(r->name, en->name, en->nlen);
    r->name[en->nlen] = 0;
    r->begin = r->end = 0;
    if (memchr(en->name, 0, en->nlen) || en->off > cdir_off ||
        cdir_off - en->off < LOCAL_LEN + en->nlen)
        return 0;
    int e = rd(ud, en->off, h, LOCAL_LEN + en->nlen);
    if (e < 0)
        return e;
    uint64_t data = en->off + LOCAL_LEN + en->nlen + le(h + 28, 2);
    if (le(h, 4) != SIG_LOCAL || le(h + 26, 2) != en->nlen ||
        memcmp(h + LOCAL_LEN, en->name, en->nlen) != 0 || data > cdir_off ||
        en->csize > cdir_off - data)
        return 0;
    r->begin = data;
    r->end = data + en->csize;
    r->usable = en->method == 0 && !(en->flags & 1) && en->csize == en->usize;
    return 0;
}

static int by_begin(const void *a, const void *b)
{
    const struct torchzip_record *x = *(const struct torchzip_record *const *)a,
                                 *y = *(const struct torchzip_record *const *)b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct torchzip_record *)a)->name,
                  ((const struct torchzip_record *)b)->name);
}

/* Records whose bytes overlap another's, and records of one name, are
 * unusable; the second of a name is dropped. */
static int settle(struct torchzip *z)
{
    struct torchzip_record **o = malloc((z->n ? z->n : 1) * sizeof(*o));
    if (!o)
        return -ENOMEM;
    for (size_t i = 0; i < z->n; i++)
        o[i] = &z->v[i];
    qsort(o, z->n, sizeof(*o), by_begin);
    uint64_t reach = 0;
    struct torchzip_record *last = NULL;
    for (size_t i = 0; i < z->n; i++) {
        if (o[i]->begin == o[i]->end)
            continue; /* empty: overlaps nothing */
        if (last && o[i]->begin < reach)
            o[i]->usable = last->usable = false;
        if (!last || o[i]->end > reach)
            reach = o[i]->end, last = o[i];
    }
    free(o);
    qsort(z->v, z->n, sizeof(*z->v), by_name);
    size_t k = 0;
    for (size_t i = 0; i < z->n; i++) {
        if (k && !strcmp(z->v[k - 1].name, z->v[i].name)) {
            z->v[k - 1].usable = false;
            free(z->v[i].name);
            continue;
        }
        z->v[k++] = z->v[i];
    }
    z->n = k;
    return 0;
}

/* Whether the directory names a "<archive>/data.pkl" (or is malformed:
 * the walk then says where), before a local header is read: any other
 * zip (a dataset, a document) costs the directory's read only. */
static bool names_pickle(const uint8_t *d, const struct cdir *c)
{
    size_t pos = 0, tail = strlen("/data.pkl");
    struct entry en;
    for (uint64_t i = 0; i < c->count; i++) {
        if (parse_entry(d, (size_t)c->size, &pos, &en) < 0)
            return true;
        if (en.nlen > tail && !memcmp(en.name + en.nlen - tail, "/data.pkl", tail))
            return true;
    }
    return false;
}

static int walk_cdir(const uint8_t *d, const struct cdir *c, torchzip_read_fn rd, void *ud,
                     struct torchzip *z, struct buf *err)
{
    size_t pos = 0, len = (size_t)c->size;
    int e = 0;
    if (!names_pickle(d, c))
        return fmt(err, "not a torch.save archive: no record <archive>/data.pkl", c->off);
    for (uint64_t i = 0; e == 0 && i < c->count; i++) {
        struct entry en;
        if (parse_entry(d, len, &pos, &en) < 0)
            return fmt(err, "a central directory entry runs past the directory or is malformed",
                       c->off + pos);
        if (en.nlen > TORCHZIP_MAX_NAME)
            continue;
        e = add_record(&en, c->off, rd, ud, &z->v[z->n]);
        z->n++; /* its name is owned either way */
    }
    if (e == 0 && pos != len)
        return fmt(err, "the central directory holds more than its entries", c->off + pos);
    return e < 0 ? e : settle(z);
}

int torchzip_open(uint64_t file_size, torchzip_read_fn rd, void *ud, struct torchzip *z,
                  struct buf *err)
{
    struct cdir c;
    uint64_t end_at = 0;
    uint8_t *d = NULL;
    torchzip_free(z);
    int e = read_end(file_size, rd, ud, &c, &end_at, err);
    if (e == 0 && (c.off > end_at || c.size > end_at - c.off))
        e = fmt(err, "the central directory lies outside the file", c.off);
    if (e == 0 && (c.size > TORCHZIP_MAX_CDIR || c.count > TORCHZIP_MAX_RECORDS ||
                   c.count > c.size / CENTRAL_LEN)) {
        if (err)
            buf_printf(err,
                       "zip: a central directory of %llu bytes and %llu entries is past the limit",
                       (unsigned long long)c.size, (unsigned long long)c.count);
        e = CKS_E_LIMIT;
    }
    if (e == 0 && !(d = malloc(c.size ? (size_t)c.size : 1)))
        e = -ENOMEM;
    if (e == 0 && !(z->v = calloc(c.count ? (size_t)c.count : 1, sizeof(*z->v))))
        e = -ENOMEM;
    if (e == 0)
        e = rd(ud, c.off, d, (size_t)c.size);
    if (e == 0)
        e = walk_cdir(d, &c, rd, ud, z, err);
    free(d);
    if (e < 0)
        torchzip_free(z);
    return e;
}

const struct torchzip_record *torchzip_find(const struct torchzip *z, const char *name)
{
    size_t lo = 0, hi = z->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(z->v[mid].name, name);
        if (c == 0)
            return &z->v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
