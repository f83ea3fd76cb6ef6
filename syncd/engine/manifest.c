/*
 * manifest.c — the snapshot manifest: builder, encoder, hostile-input parser.
 *
 * Design note.  The parser reads the text once, line by line, as a fixed
 * state machine: the version line, then the digest check, then the twelve
 * header lines in their fixed order, then the entries, then `end`.  Every
 * line is split into at most MAX_TOKENS single-space-separated tokens of
 * printable ASCII, so a field never needs quoting and a stray control byte
 * is an error at its own line.
 *
 * The trailing digest is checked before the body is parsed when the last
 * line looks like an `end` line: a manifest damaged in transit then fails
 * with CKS_E_DIGEST (fetch it from another region) rather than with
 * whatever syntax error the damage happens to produce.
 *
 * Memory is bounded by the declared counts, which are bounded by
 * MANIFEST_MAX_*: arrays grow geometrically but never past what the header
 * declared, and each text field's length is checked before it is decoded.
 * Per-line checks (paths, link targets, chunk lengths, sizes) happen where
 * the line is read, so errors carry their line number; the checks that need
 * every path (duplicates, an entry below a file or symlink) run last, on a
 * sorted array of pointers: O(n log n).
 *
 * The encoder first runs manifest_validate(), which applies the same
 * checks to a struct, so it never writes what the parser would refuse;
 * its output is canonical (one byte string per manifest).
 *
 * Text fields share one codec: the token "-" means "no value"; a value
 * that is literally "-" is written "%2D"; bytes <= 0x20, >= 0x7f and '%'
 * are written %XX.  The parser accepts %XX in either case for any byte
 * except NUL.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ckptsync/format.h>

#include "base/err.h"
#include "engine/fastcdc.h"
#include "engine/manifest.h"

_Static_assert(MANIFEST_VERSION == CKS_MANIFEST_VERSION, "format.h and manifest.h disagree");

#define MAX_TOKENS (5 + MANIFEST_MAX_BASES) /* "r <id> <len> <sig> <n> <base>..." */
#define HEADER_LINES 13 /* versions 2, 3: the version line and the twelve below it */
                        /* (versions 4, 5: one more, "nodes") */
#define TREE_PREFIX CKS_MANIFEST_TREE_PREFIX /* a version 5 chunk-tree digest field */
#define TREE_PREFIX_LEN (sizeof(TREE_PREFIX) - 1)
#define FIRST_ENTRY_LINE (HEADER_LINES + 1)
#define END_LINE_LEN (4 + HASH_HEX_LEN + 1)
#define CHUNKER_NAME "fastcdc2020"

/* ---- small shared predicates ---------------------------------------- */

static bool id_char(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '.' ||
           c == '_' || c == '-';
}

static bool id_chars(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!id_char((unsigned char)s[i]))
            return false;
    return true;
}

uint64_t manifest_regular_files(const struct manifest *m)
{
    uint64_t n = 0;
    for (size_t f = 0; f < m->nfiles; f++)
        n += m->files[f].type == MFILE_REG;
    return n;
}

int manifest_id_check(const char *id)
{
    if (!id || !id_chars(id, MANIFEST_ID_MAX) || id[0] == '.')
        return CKS_E_FORMAT;
    return 0;
}

/* Runs become key components (snapshots/<run>/...): "." and ".." would
 * climb the key space, so they are refused along with the charset. */
int manifest_run_check(const char *run)
{
    if (!run || !id_chars(run, MANIFEST_MAX_FIELD) || !strcmp(run, ".") || !strcmp(run, ".."))
        return CKS_E_FORMAT;
    return 0;
}

int manifest_path_check(const char *path)
{
    if (!path)
        return CKS_E_UNSAFE_PATH;
    size_t n = strnlen(path, MANIFEST_MAX_PATH + 1);
    if (n == 0 || n > MANIFEST_MAX_PATH)
        return CKS_E_UNSAFE_PATH;
    const char *s = path, *end = path + n;
    for (;;) {
        const char *slash = memchr(s, '/', (size_t)(end - s));
        size_t cl = (size_t)((slash ? slash : end) - s);
        if (cl == 0 || cl > MANIFEST_MAX_COMPONENT || (cl == 1 && s[0] == '.') ||
            (cl == 2 && s[0] == '.' && s[1] == '.'))
            return CKS_E_UNSAFE_PATH;
        if (!slash)
            return 0;
        s = slash + 1;
    }
}

/* Lexical resolution: depth starts at the number of directories above the
 * link and may never go below zero.  "." and empty components are
 * harmless ("./x", "a//b" are common targets) and are skipped. */
int manifest_link_check(const char *path, const char *target)
{
    if (manifest_path_check(path) < 0 || !target)
        return CKS_E_UNSAFE_PATH;
    size_t n = strnlen(target, MANIFEST_MAX_PATH + 1);
    if (n == 0 || n > MANIFEST_MAX_PATH || target[0] == '/')
        return CKS_E_UNSAFE_PATH;
    size_t depth = 0;
    for (const char *s = path; *s; s++)
        depth += *s == '/';
    /* ".." is allowed only before the first named component: "a/../.."
     * could climb out through a sibling symlink ("a" -> ".."), which a
     * lexical check cannot see.  With leading ".." only, every link
     * resolves inside the root by induction over the links it crosses. */
    bool named = false;
    const char *s = target, *end = target + n;
    while (s < end) {
        const char *slash = memchr(s, '/', (size_t)(end - s));
        size_t cl = (size_t)((slash ? slash : end) - s);
        if (cl == 2 && s[0] == '.' && s[1] == '.') {
            if (depth == 0 || named)
                return CKS_E_UNSAFE_PATH;
            depth--;
        } else if (cl > 0 && !(cl == 1 && s[0] == '.')) {
            depth++;
            named = true;
        }
        s += cl + 1;
    }
    return 0;
}

/* The chunker must be one that fastcdc_init() accepts: one source of truth
 * for "sane" parameters (min <= avg <= max <= 256 MiB, nc within the
 * mask table). */
static int check_chunker(uint64_t min, uint64_t avg, uint64_t max, uint64_t nc,
                         const char **ret_what)
{
    struct fastcdc cdc;
    if (max > FASTCDC_MAX_SIZE) {
        *ret_what = "chunk_max above 256 MiB";
        return CKS_E_LIMIT;
    }
    if (nc > 64 || fastcdc_init(&cdc, min, avg, max, (unsigned)nc) < 0) {
        *ret_what = "chunker parameters out of range (need 64 <= min <= avg <= max)";
        return CKS_E_FORMAT;
    }
    return 0;
}

static int check_chunk_len(const struct manifest *m, uint64_t len, const char **ret_what)
{
    if (len == 0) {
        *ret_what = "chunk length 0";
        return CKS_E_FORMAT;
    }
    if (len > m->chunk_max) {
        *ret_what = "chunk longer than the manifest's chunk_max";
        return CKS_E_LIMIT;
    }
    return 0;
}

/* What every entry must satisfy on its own (the parser calls this once the
 * entry's line is read, the validator for each struct entry). */
static bool has_target(enum mfile_type t)
{
    return t == MFILE_LINK || t == MFILE_HARDLINK;
}

static int check_entry(const struct mfile *f, const char **ret_what)
{
    if (f->type != MFILE_REG && f->type != MFILE_DIR && !has_target(f->type)) {
        *ret_what = "unknown entry type";
        return CKS_E_FORMAT;
    }
    if (f->mode > 07777) {
        *ret_what = "mode has bits outside 07777";
        return CKS_E_FORMAT;
    }
    if (f->mtime_ns < -1 || (f->type == MFILE_HARDLINK && f->mtime_ns != -1)) {
        *ret_what = "negative mtime, or a hard link with a time of its own (it has its target's)";
        return CKS_E_FORMAT;
    }
    if (manifest_path_check(f->path) < 0) {
        *ret_what = "unsafe path (absolute, empty, \".\", \"..\" or too long)";
        return CKS_E_UNSAFE_PATH;
    }
    if (has_target(f->type) != (f->link != NULL)) {
        *ret_what = "link target on a non-link, or link without target";
        return CKS_E_FORMAT;
    }
    if (f->type == MFILE_LINK && manifest_link_check(f->path, f->link) < 0) {
        *ret_what = "symlink target leaves the snapshot";
        return CKS_E_UNSAFE_PATH;
    }
    if (f->type == MFILE_HARDLINK && manifest_path_check(f->link) < 0) {
        *ret_what = "unsafe hard link target";
        return CKS_E_UNSAFE_PATH;
    }
    if (f->dkind != MDIGEST_SHA256 && (f->type != MFILE_REG || f->dkind != MDIGEST_TREE)) {
        *ret_what = "digest kind: not sha256 or tree, or set on a non-file";
        return CKS_E_FORMAT;
    }
    return 0;
}

/* ---- the tree check: duplicates and entries below non-directories ---- */

/* Byte order, except that '/' sorts right after the end of the string: all
 * entries below "a" then follow "a" directly, before "a b" or "a.x". */
static int path_key(unsigned char c)
{
    return c == 0 ? 0 : c == '/' ? 1 : c + 1;
}

static int path_cmp(const void *a, const void *b)
{
    const unsigned char *x = (const unsigned char *)(*(const struct mfile *const *)a)->path;
    const unsigned char *y = (const unsigned char *)(*(const struct mfile *const *)b)->path;
    for (;; x++, y++) {
        int d = path_key(*x) - path_key(*y);
        if (d || !*x)
            return d;
    }
}

static bool is_below(const char *parent, const char *child)
{
    size_t n = strlen(parent);
    return strncmp(parent, child, n) == 0 && child[n] == '/';
}

/* A hard link names an earlier regular file (v: the entries sorted by
 * path_cmp): restore makes it once that file is complete; a link to a
 * directory, a symlink, another hard link or a later entry is refused. */
static int check_hardlinks(const struct manifest *m, const struct mfile **v, size_t *ret_a,
                           size_t *ret_b, const char **ret_what)
{
    for (size_t i = 0; i < m->nfiles; i++) {
        const struct mfile *h = &m->files[i];
        if (h->type != MFILE_HARDLINK)
            continue;
        const struct mfile key = {.path = h->link}, *kp = &key;
        const struct mfile *const *hit = bsearch(&kp, v, m->nfiles, sizeof(*v), path_cmp);
        size_t t = hit ? (size_t)(*hit - m->files) : i;
        if (!hit || (*hit)->type != MFILE_REG || t > i) {
            *ret_what = "hard link to what is not an earlier regular file";
            *ret_a = t; /* reported as "line of i (see line of t)" */
            *ret_b = i;
            return CKS_E_FORMAT;
        }
    }
    return 0;
}

/* On failure *ret_b is the index of the entry at fault, *ret_a that of
 * the other one involved (equal when there is none). */
static int check_tree(const struct manifest *m, size_t *ret_a, size_t *ret_b, const char **ret_what)
{
    if (m->nfiles == 0)
        return 0;
    const struct mfile **v = reallocarray(NULL, m->nfiles, sizeof(*v));
    if (!v) {
        *ret_what = "out of memory";
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->nfiles; i++)
        v[i] = &m->files[i];
    qsort(v, m->nfiles, sizeof(*v), path_cmp);
    int r = 0;
    for (size_t i = 0; i + 1 < m->nfiles && r == 0; i++) {
        if (!strcmp(v[i]->path, v[i + 1]->path)) {
            *ret_what = "duplicate path";
            r = CKS_E_FORMAT;
        } else if (v[i]->type != MFILE_DIR && is_below(v[i]->path, v[i + 1]->path)) {
            *ret_what = "entry below a regular file or symlink";
            r = CKS_E_UNSAFE_PATH;
        }
        if (r < 0) {
            size_t a = (size_t)(v[i] - m->files), b = (size_t)(v[i + 1] - m->files);
            *ret_a = a < b ? a : b;
            *ret_b = a < b ? b : a;
        }
    }
    if (r == 0)
        r = check_hardlinks(m, v, ret_a, ret_b, ret_what);
    free(v);
    return r;
}

bool manifest_has_tree(const struct manifest *m)
{
    for (size_t i = 0; i < m->nfiles; i++)
        if (m->files[i].dkind == MDIGEST_TREE)
            return true;
    return false;
}

/* The version the encoder writes: 6 with recipes, 5 with a tree digest,
 * 4 for a merged step, else 3. */
static unsigned enc_version(const struct manifest *m)
{
    return m->nextras ? 6 : manifest_has_tree(m) ? 5 : m->nodes > 0 ? 4 : 3;
}

/* Header lines beyond version 3's: "nodes" (4..6), "extras" (6). */
static size_t hdr_more(unsigned version)
{
    return (version >= 4) + (version >= 6);
}

/* Line of entry i in the encoded text (entries and their chunks follow
 * the header in order; versions 4 and 5 have the "nodes" line). */
static size_t entry_line(const struct manifest *m, size_t i)
{
    return FIRST_ENTRY_LINE + hdr_more(enc_version(m)) + i + (size_t)m->files[i].first_chunk;
}

/* ---- builder --------------------------------------------------------- */

void manifest_init(struct manifest *m)
{
    memset(m, 0, sizeof(*m));
}

void manifest_free(struct manifest *m)
{
    if (!m)
        return;
    free(m->run);
    free(m->host);
    free(m->instance);
    free(m->parent);
    free(m->root);
    for (size_t i = 0; i < m->nfiles; i++) {
        free(m->files[i].path);
        free(m->files[i].link);
    }
    free(m->files);
    free(m->chunks);
    free(m->marks);
    free(m->extras);
    free(m->bases);
    manifest_init(m);
}

int manifest_set_str(char **field, const char *value)
{
    char *s = NULL;
    if (value && !(s = strdup(value)))
        return -ENOMEM;
    free(*field);
    *field = s;
    return 0;
}

/* Next capacity for an array holding n and needing one more, never above
 * limit (callers check n < limit first). */
static size_t next_cap(size_t cap, size_t limit)
{
    size_t c = cap ? cap * 2 : 16;
    return c > limit ? limit : c;
}

static int files_reserve(struct manifest *m, size_t limit)
{
    if (m->nfiles < m->files_cap)
        return 0;
    if (m->nfiles >= limit)
        return CKS_E_LIMIT;
    size_t cap = next_cap(m->files_cap, limit);
    struct mfile *p = reallocarray(m->files, cap, sizeof(*p));
    if (!p)
        return -ENOMEM;
    m->files = p;
    m->files_cap = cap;
    return 0;
}

static int chunks_reserve(struct manifest *m, size_t limit)
{
    if (m->nchunks < m->chunks_cap)
        return 0;
    if (m->nchunks >= limit)
        return CKS_E_LIMIT;
    size_t cap = next_cap(m->chunks_cap, limit);
    struct mchunk *p = reallocarray(m->chunks, cap, sizeof(*p));
    if (!p)
        return -ENOMEM;
    m->chunks = p;
    m->chunks_cap = cap;
    return 0;
}

int manifest_add_file(struct manifest *m, enum mfile_type type, const char *path, uint32_t mode,
                      const char *link)
{
    if (!path || (type != MFILE_REG && type != MFILE_DIR && !has_target(type)) ||
        has_target(type) != (link != NULL))
        return -EINVAL;
    int r = files_reserve(m, MANIFEST_MAX_FILES);
    if (r < 0)
        return r;
    struct mfile f = {.type = type, .mode = mode, .first_chunk = m->nchunks, .mtime_ns = -1};
    f.path = strdup(path);
    f.link = link ? strdup(link) : NULL;
    if (!f.path || (link && !f.link)) {
        free(f.path);
        free(f.link);
        return -ENOMEM;
    }
    m->files[m->nfiles++] = f;
    return 0;
}

int manifest_add_chunk(struct manifest *m, const uint8_t id[HASH_LEN], uint32_t len)
{
    if (m->nfiles == 0 || m->files[m->nfiles - 1].type != MFILE_REG)
        return -EINVAL;
    int r = chunks_reserve(m, MANIFEST_MAX_CHUNKS);
    if (r < 0)
        return r;
    struct mchunk *c = &m->chunks[m->nchunks++];
    memcpy(c->id, id, HASH_LEN);
    c->len = len;
    struct mfile *f = &m->files[m->nfiles - 1];
    f->nchunks++;
    f->size += len;
    return 0;
}

void manifest_set_digest(struct manifest *m, const uint8_t digest[HASH_LEN])
{
    if (m->nfiles)
        memcpy(m->files[m->nfiles - 1].digest, digest, HASH_LEN);
}

void manifest_set_digest_kind(struct manifest *m, enum mdigest_kind kind)
{
    if (m->nfiles)
        m->files[m->nfiles - 1].dkind = kind;
}

void manifest_set_mtime(struct manifest *m, int64_t sec, long nsec)
{
    struct mfile *f = m->nfiles ? &m->files[m->nfiles - 1] : NULL;
    if (!f || f->type == MFILE_HARDLINK)
        return;
    bool ok = sec >= 0 && nsec >= 0 && nsec < 1000000000 && sec <= (INT64_MAX - nsec) / 1000000000;
    f->mtime_ns = ok ? sec * 1000000000 + nsec : -1;
}

int manifest_chunk_at(const struct manifest *m, const uint8_t id[HASH_LEN], size_t *ret_file,
                      uint64_t *ret_off, uint32_t *ret_len)
{
    for (size_t i = 0; i < m->nfiles; i++) {
        const struct mfile *f = &m->files[i];
        uint64_t off = 0;
        for (uint64_t k = 0; f->type == MFILE_REG && k < f->nchunks; k++) {
            const struct mchunk *c = &m->chunks[f->first_chunk + k];
            if (!memcmp(c->id, id, HASH_LEN)) {
                *ret_file = i;
                *ret_off = off;
                *ret_len = c->len;
                return 0;
            }
            off += c->len;
        }
    }
    return -ENOENT;
}

/* Version 6's extras, by content (bases by id, not by position). */
static bool extras_equal(const struct manifest *a, const struct manifest *b)
{
    if (a->nextras != b->nextras)
        return false;
    for (size_t i = 0; i < a->nextras; i++) {
        const struct mextra *x = &a->extras[i], *y = &b->extras[i];
        if (memcmp(x->id, y->id, HASH_LEN) || x->len != y->len || x->recipe != y->recipe ||
            x->nbases != y->nbases || memcmp(x->sig, y->sig, sizeof(x->sig)))
            return false;
        for (uint32_t k = 0; k < x->nbases; k++)
            if (memcmp(a->bases[x->first_base + k].id, b->bases[y->first_base + k].id, HASH_LEN))
                return false;
    }
    return true;
}

bool manifest_equal(const struct manifest *a, const struct manifest *b)
{
#define STR_EQ(x, y) ((!(x) && !(y)) || ((x) && (y) && !strcmp((x), (y))))
    if (strcmp(a->id, b->id) || !STR_EQ(a->run, b->run) || a->step != b->step || a->gen != b->gen ||
        a->time != b->time || !STR_EQ(a->host, b->host) || !STR_EQ(a->instance, b->instance) ||
        !STR_EQ(a->parent, b->parent) || !STR_EQ(a->root, b->root) ||
        a->chunk_min != b->chunk_min || a->chunk_avg != b->chunk_avg ||
        a->chunk_max != b->chunk_max || a->normalization != b->normalization ||
        a->nodes != b->nodes || a->nfiles != b->nfiles || a->nchunks != b->nchunks)
        return false;
    for (size_t i = 0; i < a->nfiles; i++) {
        const struct mfile *x = &a->files[i], *y = &b->files[i];
        if (x->type != y->type || x->mode != y->mode || x->mtime_ns != y->mtime_ns ||
            !STR_EQ(x->path, y->path) || !STR_EQ(x->link, y->link) || x->size != y->size ||
            x->first_chunk != y->first_chunk || x->nchunks != y->nchunks || x->node != y->node ||
            x->dkind != y->dkind || memcmp(x->digest, y->digest, HASH_LEN))
            return false;
    }
#undef STR_EQ
    for (size_t i = 0; i < a->nchunks; i++)
        if (a->chunks[i].len != b->chunks[i].len ||
            manifest_chunk_recipe(a, i) != manifest_chunk_recipe(b, i) ||
            memcmp(a->chunks[i].id, b->chunks[i].id, HASH_LEN))
            return false;
    return extras_equal(a, b);
}

/* ---- validation of a struct (what the encoder would write) ----------- */

static int report(struct buf *err, int code, size_t line, const char *what)
{
    if (err) {
        buf_reset(err);
        buf_printf(err, "line %zu: %s", line, what);
    }
    return code;
}

static int check_text(const char *s, size_t max, bool required)
{
    if (!s)
        return required ? CKS_E_FORMAT : 0;
    size_t n = strnlen(s, max + 1);
    return n == 0 ? CKS_E_FORMAT : n > max ? CKS_E_LIMIT : 0;
}

/* The header fields, each with the line it is written on. */
static int check_header(const struct manifest *m, size_t *ret_line, const char **ret_what)
{
    int r;
#define CHECK(line, expr, what)                                                                    \
    do {                                                                                           \
        *ret_line = (line);                                                                        \
        *ret_what = (what);                                                                        \
        if ((r = (expr)) < 0)                                                                      \
            return r;                                                                              \
    } while (0)
    CHECK(2, memchr(m->id, 0, sizeof(m->id)) ? manifest_id_check(m->id) : CKS_E_FORMAT,
          "invalid snapshot id");
    CHECK(3, manifest_run_check(m->run), "invalid run name");
    CHECK(4, m->step < -1 ? CKS_E_FORMAT : 0, "step below -1");
    CHECK(5, m->time < 0 ? CKS_E_FORMAT : 0, "negative time");
    CHECK(6, check_text(m->host, MANIFEST_MAX_FIELD, true), "host missing, empty or too long");
    CHECK(7, check_text(m->instance, MANIFEST_MAX_FIELD, false), "instance empty or too long");
    CHECK(8, m->parent ? manifest_id_check(m->parent) : 0, "invalid parent id");
    CHECK(9, m->gen < 0 || m->gen > MANIFEST_GEN_MAX ? CKS_E_FORMAT : 0, "generation out of range");
    CHECK(10, m->root ? manifest_path_check(m->root) : 0, "unsafe root path");
    CHECK(11, check_chunker(m->chunk_min, m->chunk_avg, m->chunk_max, m->normalization, ret_what),
          *ret_what);
    size_t v4 = enc_version(m) >= 4; /* the "nodes" line */
    CHECK(12, m->nodes > MANIFEST_MAX_NODES ? CKS_E_LIMIT : 0, "node count above 4096");
    CHECK(12 + v4, m->nfiles > MANIFEST_MAX_FILES ? CKS_E_LIMIT : 0, "too many files");
    CHECK(13 + v4, m->nchunks > MANIFEST_MAX_CHUNKS ? CKS_E_LIMIT : 0, "too many chunks");
    CHECK(14 + v4, m->nextras > MANIFEST_MAX_CHUNKS ? CKS_E_LIMIT : 0, "too many extras");
#undef CHECK
    return 0;
}

/* A regular file's chunks: each length valid, and they add up to its size. */
static int check_file_chunks(const struct manifest *m, const struct mfile *f, size_t *ret_line,
                             const char **ret_what)
{
    size_t line = *ret_line;
    uint64_t sum = 0;
    for (uint64_t k = 0; k < f->nchunks; k++) {
        uint32_t len = m->chunks[f->first_chunk + k].len;
        int r = check_chunk_len(m, len, ret_what);
        if (r < 0) {
            *ret_line = line + 1 + (size_t)k;
            return r;
        }
        sum += len;
    }
    if (sum != f->size) {
        *ret_what = "file size differs from the sum of its chunk lengths";
        return CKS_E_FORMAT;
    }
    return 0;
}

/* An entry's node field: a rank below m->nodes or "several" in a merged
 * step (version 4), 0 in any other manifest. */
static bool node_ok(const struct manifest *m, int32_t node)
{
    if (m->nodes == 0)
        return node == 0;
    return node == MANIFEST_NODE_SEVERAL || (node >= 0 && (uint32_t)node < m->nodes);
}

static int check_entries(const struct manifest *m, size_t *ret_line, const char **ret_what)
{
    uint64_t next = 0;
    size_t line = FIRST_ENTRY_LINE + hdr_more(enc_version(m));
    for (size_t i = 0; i < m->nfiles; i++) {
        const struct mfile *f = &m->files[i];
        *ret_line = line;
        int r = check_entry(f, ret_what);
        if (r < 0)
            return r;
        if (!node_ok(m, f->node)) {
            *ret_what = "node field: not a rank below the node count, or set outside version 4";
            return CKS_E_FORMAT;
        }
        if (f->first_chunk != next || f->nchunks > m->nchunks - next ||
            (f->type != MFILE_REG && f->nchunks)) {
            *ret_what = "chunk range does not follow the previous entry's";
            return CKS_E_FORMAT;
        }
        if (f->type == MFILE_REG && (r = check_file_chunks(m, f, ret_line, ret_what)) < 0)
            return r;
        next += f->nchunks;
        line += 1 + (size_t)f->nchunks;
    }
    *ret_line = line;
    *ret_what = "chunks not owned by any file";
    return next == m->nchunks ? 0 : CKS_E_FORMAT;
}

/* Line of extra i (version 6): after every entry and chunk line. */
static size_t extra_line(const struct manifest *m, size_t i)
{
    return FIRST_ENTRY_LINE + hdr_more(enc_version(m)) + m->nfiles + m->nchunks + i;
}

/* Line of chunk i: after its file's line and the files before. */
static size_t chunk_line(const struct manifest *m, size_t i)
{
    size_t f = 0;
    while (f + 1 < m->nfiles && m->files[f + 1].first_chunk <= i)
        f++;
    return m->nfiles ? entry_line(m, f) + 1 + (size_t)(i - m->files[f].first_chunk) : 0;
}

/* Version 6's extras (mrecipe.c), *ret_line where the fault is. */
static int check_extras(const struct manifest *m, size_t *ret_line, const char **ret_what)
{
    size_t idx = 0;
    bool chunk = false;
    int r = manifest_check_extras(m, &idx, &chunk, ret_what);
    if (r < 0)
        *ret_line = chunk ? chunk_line(m, idx) : extra_line(m, idx);
    return r;
}

int manifest_validate(const struct manifest *m, struct buf *err)
{
    size_t line = 0, a = 0, b = 0;
    const char *what = "";
    int r = check_header(m, &line, &what);
    if (r == 0)
        r = check_entries(m, &line, &what);
    if (r < 0)
        return report(err, r, line, what);
    r = check_extras(m, &line, &what);
    if (r < 0)
        return report(err, r, line, what);
    r = check_tree(m, &a, &b, &what);
    if (r < 0) {
        if (err) {
            buf_reset(err);
            buf_printf(err, "line %zu: %s", entry_line(m, b), what);
            if (a != b)
                buf_printf(err, " (see line %zu)", entry_line(m, a));
        }
        return r;
    }
    return 0;
}

/* ---- encoder --------------------------------------------------------- */

/* Sticky error: after the first failure every put is a no-op. */
struct enc {
    struct buf *out;
    int err;
};

static void put(struct enc *e, const char *s, size_t n)
{
    if (e->err == 0)
        e->err = buf_append(e->out, s, n);
}

static void put_str(struct enc *e, const char *s)
{
    put(e, s, strlen(s));
}

static void put_u64(struct enc *e, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(e, tmp + i, sizeof(tmp) - i);
}

static bool needs_escape(unsigned char c)
{
    return c <= 0x20 || c >= 0x7f || c == '%';
}

/* A text field as one token (see the design note). */
static void put_text(struct enc *e, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    if (!s || !strcmp(s, "-")) {
        put_str(e, s ? "%2D" : "-");
        return;
    }
    while (*s) {
        size_t n = 0;
        while (s[n] && !needs_escape((unsigned char)s[n]))
            n++;
        put(e, s, n);
        s += n;
        if (*s) {
            unsigned char c = (unsigned char)*s++;
            char esc[3] = {'%', hex[c >> 4], hex[c & 15]};
            put(e, esc, 3);
        }
    }
}

static void put_hash(struct enc *e, const uint8_t h[HASH_LEN])
{
    char hex[HASH_HEX_LEN + 1];
    hex_encode(h, HASH_LEN, hex);
    put(e, hex, HASH_HEX_LEN);
}

static void put_mode(struct enc *e, uint32_t mode)
{
    char s[4] = {(char)('0' + ((mode >> 9) & 7)), (char)('0' + ((mode >> 6) & 7)),
                 (char)('0' + ((mode >> 3) & 7)), (char)('0' + (mode & 7))};
    put(e, s, 4);
}

static void put_header(struct enc *e, const struct manifest *m)
{
    unsigned v = enc_version(m);
    put_str(e, v == 6   ? CKS_MANIFEST_MAGIC " 6\nid "
               : v == 5 ? CKS_MANIFEST_MAGIC " 5\nid "
               : v == 4 ? CKS_MANIFEST_MAGIC " 4\nid "
                        : CKS_MANIFEST_MAGIC " 3\nid ");
    put_text(e, m->id);
    put_str(e, "\nrun ");
    put_text(e, m->run);
    put_str(e, "\nstep ");
    if (m->step < 0)
        put_str(e, "-1");
    else
        put_u64(e, (uint64_t)m->step);
    put_str(e, "\ntime ");
    put_u64(e, (uint64_t)m->time);
    put_str(e, "\nhost ");
    put_text(e, m->host);
    put_str(e, "\ninstance ");
    put_text(e, m->instance);
    put_str(e, "\nparent ");
    put_text(e, m->parent);
    put_str(e, "\ngen ");
    put_u64(e, (uint64_t)m->gen);
    put_str(e, "\nroot ");
    put_text(e, m->root);
    put_str(e, "\nchunker " CHUNKER_NAME " ");
    put_u64(e, m->chunk_min);
    put_str(e, " ");
    put_u64(e, m->chunk_avg);
    put_str(e, " ");
    put_u64(e, m->chunk_max);
    put_str(e, " ");
    put_u64(e, m->normalization);
    if (v >= 4) {
        put_str(e, "\nnodes ");
        put_u64(e, m->nodes);
    }
    put_str(e, "\nfiles ");
    put_u64(e, m->nfiles);
    put_str(e, "\nchunks ");
    put_u64(e, m->nchunks);
    if (v >= 6) {
        put_str(e, "\nextras ");
        put_u64(e, m->nextras);
    }
    put_str(e, "\n");
}

/* Version 6: "r <id> <len> <sig> <n> <base>..." or "k <id> <len>". */
static void put_extra(struct enc *e, const struct manifest *m, const struct mextra *x)
{
    char sig[2 * MANIFEST_RECIPE_SIG + 1];
    put_str(e, x->recipe ? "r " : "k ");
    put_hash(e, x->id);
    put_str(e, " ");
    put_u64(e, x->len);
    if (x->recipe) {
        hex_encode(x->sig, MANIFEST_RECIPE_SIG, sig);
        put_str(e, " ");
        put_str(e, sig);
        put_str(e, " ");
        put_u64(e, x->nbases);
        for (uint32_t k = 0; k < x->nbases; k++) {
            put_str(e, " ");
            put_hash(e, m->bases[x->first_base + k].id);
        }
    }
    put_str(e, "\n");
}

static void put_entry(struct enc *e, const struct manifest *m, const struct mfile *f)
{
    char kind[2] = {(char)f->type, ' '};
    put(e, kind, 2);
    put_mode(e, f->mode);
    put_str(e, " ");
    if (f->mtime_ns < 0)
        put_str(e, "-");
    else
        put_u64(e, (uint64_t)f->mtime_ns);
    put_str(e, " ");
    if (m->nodes && f->node == MANIFEST_NODE_SEVERAL)
        put_str(e, "* ");
    else if (m->nodes) {
        put_u64(e, (uint64_t)f->node);
        put_str(e, " ");
    }
    if (f->type == MFILE_DIR) {
        put_str(e, "-");
    } else if (has_target(f->type)) {
        put_text(e, f->link);
    } else {
        put_u64(e, f->size);
        put_str(e, f->dkind == MDIGEST_TREE ? " " TREE_PREFIX : " ");
        put_hash(e, f->digest);
        put_str(e, " ");
        put_u64(e, f->nchunks);
    }
    put_str(e, " ");
    put_text(e, f->path);
    put_str(e, "\n");
    for (uint64_t k = 0; k < f->nchunks; k++) {
        const struct mchunk *c = &m->chunks[f->first_chunk + k];
        put_str(e, "c ");
        put_hash(e, c->id);
        put_str(e, " ");
        put_u64(e, c->len);
        put_str(e, manifest_chunk_recipe(m, (size_t)(f->first_chunk + k)) ? " r\n" : "\n");
    }
}

int manifest_encode(const struct manifest *m, struct buf *out)
{
    int r = manifest_validate(m, NULL);
    if (r < 0)
        return r;
    size_t start = out->len;
    struct enc e = {out, 0};
    put_header(&e, m);
    for (size_t i = 0; i < m->nfiles && e.err == 0; i++)
        put_entry(&e, m, &m->files[i]);
    for (size_t i = 0; i < m->nextras && e.err == 0; i++)
        put_extra(&e, m, &m->extras[i]);
    if (e.err == 0 && out->len - start > MANIFEST_MAX_BYTES - END_LINE_LEN)
        e.err = CKS_E_LIMIT;
    if (e.err == 0) {
        uint8_t digest[HASH_LEN];
        hash_sha256(out->data + start, out->len - start, digest);
        put_str(&e, "end ");
        put_hash(&e, digest);
        put_str(&e, "\n");
    }
    if (e.err < 0) {
        out->len = start;
        if (out->data)
            out->data[start] = 0;
    }
    return e.err;
}

/* ---- parser: lines and tokens --------------------------------------- */

struct tok {
    const char *p;
    size_t n;
};

struct line {
    size_t start; /* offset of the line in the input */
    size_t ntok;
    struct tok tok[MAX_TOKENS];
};

struct parser {
    const uint8_t *data;
    size_t len;
    size_t pos;    /* start of the next line */
    size_t lineno; /* number of the line last read */
    struct manifest *m;
    struct buf *err;
    bool digest_checked;
    uint64_t decl_files, decl_chunks, decl_extras;
    uint64_t chunks_left; /* chunk lines still owed to the last file */
    uint64_t chunk_sum;   /* lengths of its chunks read so far */
    size_t file_line;     /* line of the last file */
    unsigned version;     /* of the version line: 1 has no "gen" line */
    size_t mt;            /* 1 from version 3: entry lines hold an mtime after the mode */
    size_t nd;            /* 1 in version 4 (and 5 with nodes > 0): and a node field
                           * after the mtime */
};

static int fail(struct parser *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct parser *p, int code, const char *fmt, ...)
{
    if (p->err) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        buf_reset(p->err);
        buf_printf(p->err, "line %zu: %s", p->lineno, msg);
    }
    return code;
}

static int tokenize(struct parser *p, const char *s, size_t n, struct line *ln)
{
    size_t begin = 0;
    ln->ntok = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != ' ') {
            unsigned char c = (unsigned char)s[i];
            if (c <= 0x20 || c >= 0x7f)
                return fail(p, CKS_E_FORMAT, "byte 0x%02x must be percent-encoded", c);
            continue;
        }
        if (i == begin)
            return fail(p, CKS_E_FORMAT, "empty field (stray space or empty line)");
        if (ln->ntok == MAX_TOKENS)
            return fail(p, CKS_E_FORMAT, "too many fields");
        ln->tok[ln->ntok++] = (struct tok){s + begin, i - begin};
        begin = i + 1;
    }
    return 0;
}

static int read_line(struct parser *p, struct line *ln)
{
    p->lineno++;
    if (p->pos >= p->len)
        return fail(p, CKS_E_FORMAT, "unexpected end of input (truncated?)");
    const uint8_t *s = p->data + p->pos;
    const uint8_t *nl = memchr(s, '\n', p->len - p->pos);
    if (!nl)
        return fail(p, CKS_E_FORMAT, "line has no newline (truncated?)");
    size_t n = (size_t)(nl - s);
    ln->start = p->pos;
    p->pos += n + 1;
    return tokenize(p, (const char *)s, n, ln);
}

static bool tok_is(const struct tok *t, const char *s)
{
    size_t n = strlen(s);
    return t->n == n && memcmp(t->p, s, n) == 0;
}

/* Decimal without sign or leading zeros, <= max; CKS_E_FORMAT otherwise. */
static int tok_u64(const struct tok *t, uint64_t max, uint64_t *ret)
{
    if (t->n == 0 || (t->n > 1 && t->p[0] == '0'))
        return CKS_E_FORMAT;
    uint64_t v = 0;
    for (size_t i = 0; i < t->n; i++) {
        unsigned d = (unsigned)((unsigned char)t->p[i] - '0');
        if (d > 9 || v > max / 10 || (v == max / 10 && d > max % 10))
            return CKS_E_FORMAT;
        v = v * 10 + d;
    }
    *ret = v;
    return 0;
}

/* Exactly four octal digits. */
static int tok_mode(const struct tok *t, uint32_t *ret)
{
    uint32_t v = 0;
    if (t->n != 4)
        return CKS_E_FORMAT;
    for (size_t i = 0; i < 4; i++) {
        if (t->p[i] < '0' || t->p[i] > '7')
            return CKS_E_FORMAT;
        v = v * 8 + (uint32_t)(t->p[i] - '0');
    }
    *ret = v;
    return 0;
}

/* 64 lower-case hex digits. */
static int tok_hash(const struct tok *t, uint8_t out[HASH_LEN])
{
    if (t->n != HASH_HEX_LEN)
        return CKS_E_FORMAT;
    for (size_t i = 0; i < t->n; i++) {
        char c = t->p[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return CKS_E_FORMAT;
    }
    return hex_decode(t->p, HASH_LEN, out);
}

/* A file's digest field: 64 hex digits (SHA-256 of its bytes), or from
 * version 5 TREE_PREFIX and 64 hex digits (its chunk tree). */
static int tok_digest(const struct parser *p, const struct tok *t, struct mfile *f)
{
    struct tok h = *t;
    f->dkind = MDIGEST_SHA256;
    if (p->version >= 5 && h.n > TREE_PREFIX_LEN && !memcmp(h.p, TREE_PREFIX, TREE_PREFIX_LEN)) {
        f->dkind = MDIGEST_TREE;
        h.p += TREE_PREFIX_LEN;
        h.n -= TREE_PREFIX_LEN;
    }
    return tok_hash(&h, f->digest);
}

/* Decodes a text token of at most max decoded bytes: "-" gives NULL. */
static int tok_text(const struct tok *t, size_t max, char **ret)
{
    *ret = NULL;
    if (tok_is(t, "-"))
        return 0;
    if (t->n / 3 > max) /* cannot decode to max bytes or fewer */
        return CKS_E_LIMIT;
    char *s = malloc(t->n + 1);
    if (!s)
        return -ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < t->n; i++) {
        int c = (unsigned char)t->p[i];
        if (c == '%') {
            int hi = i + 2 < t->n ? hex_digit(t->p[i + 1]) : -1;
            int lo = hi >= 0 ? hex_digit(t->p[i + 2]) : -1;
            if (lo < 0 || (hi | lo) == 0) {
                free(s);
                return CKS_E_FORMAT;
            }
            c = hi << 4 | lo;
            i += 2;
        }
        s[o++] = (char)c;
    }
    s[o] = 0;
    if (o > max) {
        free(s);
        return CKS_E_LIMIT;
    }
    *ret = s;
    return 0;
}

static int text_field(struct parser *p, const struct tok *t, size_t max, const char *name,
                      bool required, char **ret)
{
    int r = tok_text(t, max, ret);
    if (r == CKS_E_LIMIT)
        return fail(p, r, "%s longer than %zu bytes", name, max);
    if (r == CKS_E_FORMAT)
        return fail(p, r, "%s: bad percent escape or %%00", name);
    if (r < 0)
        return fail(p, r, "out of memory");
    if (required && !*ret)
        return fail(p, CKS_E_FORMAT, "missing %s (\"-\" stands for none)", name);
    return 0;
}

/* ---- parser: header ---------------------------------------------------- */

static int parse_version(struct parser *p)
{
    struct line ln;
    uint64_t v;
    int r = read_line(p, &ln);
    if (r < 0)
        return r;
    if (!tok_is(&ln.tok[0], CKS_MANIFEST_MAGIC))
        return fail(p, CKS_E_FORMAT, "not a ckptsync manifest");
    if (ln.ntok != 2 || tok_u64(&ln.tok[1], UINT64_MAX, &v) < 0)
        return fail(p, CKS_E_FORMAT, "bad version line");
    if (v < 1 || v > MANIFEST_VERSION)
        return fail(p, CKS_E_VERSION,
                    "manifest version %" PRIu64 " not supported (this reads 1..%d)", v,
                    MANIFEST_VERSION);
    p->version = (unsigned)v;
    p->mt = v >= 3;
    p->nd = v == 4; /* version 5: once its "nodes" line is read (hdr_nodes) */
    return 0;
}

static size_t count_lines(const uint8_t *s, size_t n)
{
    size_t lines = 0;
    const uint8_t *end = s + n, *nl;
    while (s < end && (nl = memchr(s, '\n', (size_t)(end - s)))) {
        lines++;
        s = nl + 1;
    }
    return lines;
}

/* If the last line is a well-formed end line, check its digest now (see
 * the design note); otherwise the sequential parse reports what is wrong. */
static int precheck_digest(struct parser *p)
{
    if (p->data[p->len - 1] != '\n')
        return 0;
    const uint8_t *nl = p->len > 1 ? memrchr(p->data, '\n', p->len - 1) : NULL;
    size_t start = nl ? (size_t)(nl - p->data) + 1 : 0;
    struct tok t = {(const char *)p->data + start + 4, HASH_HEX_LEN};
    uint8_t want[HASH_LEN], got[HASH_LEN];
    if (p->len - start != END_LINE_LEN || memcmp(p->data + start, "end ", 4) ||
        tok_hash(&t, want) < 0)
        return 0;
    hash_sha256(p->data, start, got);
    if (memcmp(want, got, HASH_LEN)) {
        p->lineno = count_lines(p->data, p->len);
        return fail(p, CKS_E_DIGEST, "manifest digest mismatch (damaged or altered)");
    }
    p->digest_checked = true;
    return 0;
}

static int hdr_id(struct parser *p, const struct line *ln)
{
    char *id;
    int r = text_field(p, &ln->tok[1], MANIFEST_ID_MAX, "id", true, &id);
    if (r < 0)
        return r;
    r = manifest_id_check(id);
    if (r == 0)
        memcpy(p->m->id, id, strlen(id) + 1);
    free(id);
    return r < 0 ? fail(p, r, "invalid snapshot id") : 0;
}

static int hdr_run(struct parser *p, const struct line *ln)
{
    int r = text_field(p, &ln->tok[1], MANIFEST_MAX_FIELD, "run", true, &p->m->run);
    if (r == 0 && manifest_run_check(p->m->run) < 0)
        return fail(p, CKS_E_FORMAT, "invalid run name");
    return r;
}

static int hdr_step(struct parser *p, const struct line *ln)
{
    uint64_t v;
    if (tok_is(&ln->tok[1], "-1")) {
        p->m->step = -1;
        return 0;
    }
    if (tok_u64(&ln->tok[1], INT64_MAX, &v) < 0)
        return fail(p, CKS_E_FORMAT, "step: not -1 or a number up to 2^63-1");
    p->m->step = (int64_t)v;
    return 0;
}

static int hdr_time(struct parser *p, const struct line *ln)
{
    uint64_t v;
    if (tok_u64(&ln->tok[1], INT64_MAX, &v) < 0)
        return fail(p, CKS_E_FORMAT, "time: not a number up to 2^63-1");
    p->m->time = (int64_t)v;
    return 0;
}

static int hdr_host(struct parser *p, const struct line *ln)
{
    return text_field(p, &ln->tok[1], MANIFEST_MAX_FIELD, "host", true, &p->m->host);
}

static int hdr_instance(struct parser *p, const struct line *ln)
{
    return text_field(p, &ln->tok[1], MANIFEST_MAX_FIELD, "instance", false, &p->m->instance);
}

static int hdr_parent(struct parser *p, const struct line *ln)
{
    int r = text_field(p, &ln->tok[1], MANIFEST_ID_MAX, "parent", false, &p->m->parent);
    if (r == 0 && p->m->parent && manifest_id_check(p->m->parent) < 0)
        return fail(p, CKS_E_FORMAT, "invalid parent id");
    return r;
}

static int hdr_gen(struct parser *p, const struct line *ln)
{
    uint64_t v;
    if (tok_u64(&ln->tok[1], MANIFEST_GEN_MAX, &v) < 0)
        return fail(p, CKS_E_FORMAT, "gen: not a number up to %lld", (long long)MANIFEST_GEN_MAX);
    p->m->gen = (int64_t)v;
    return 0;
}

static int hdr_root(struct parser *p, const struct line *ln)
{
    int r = text_field(p, &ln->tok[1], MANIFEST_MAX_PATH, "root", false, &p->m->root);
    if (r == 0 && p->m->root && manifest_path_check(p->m->root) < 0)
        return fail(p, CKS_E_UNSAFE_PATH, "unsafe root path");
    return r;
}

static int hdr_chunker(struct parser *p, const struct line *ln)
{
    uint64_t v[4];
    const char *what;
    if (!tok_is(&ln->tok[1], CHUNKER_NAME))
        return fail(p, CKS_E_FORMAT, "unknown chunker (want " CHUNKER_NAME ")");
    for (int i = 0; i < 4; i++)
        if (tok_u64(&ln->tok[2 + i], UINT64_MAX, &v[i]) < 0)
            return fail(p, CKS_E_FORMAT, "chunker: bad number");
    int r = check_chunker(v[0], v[1], v[2], v[3], &what);
    if (r < 0)
        return fail(p, r, "%s", what);
    p->m->chunk_min = v[0];
    p->m->chunk_avg = v[1];
    p->m->chunk_max = v[2];
    p->m->normalization = (unsigned)v[3];
    return 0;
}

static int hdr_nodes(struct parser *p, const struct line *ln)
{
    uint64_t v;
    /* version 5: "nodes 0" for a snapshot that is not a merged step */
    if (tok_u64(&ln->tok[1], UINT64_MAX, &v) < 0 || (v == 0 && p->version < 5))
        return fail(p, CKS_E_FORMAT, "bad node count");
    if (v > MANIFEST_MAX_NODES)
        return fail(p, CKS_E_LIMIT, "node count %" PRIu64 " above %u", v, MANIFEST_MAX_NODES);
    p->m->nodes = (unsigned)v;
    p->nd = v > 0;
    return 0;
}

static int hdr_count(struct parser *p, const struct line *ln, uint64_t limit, uint64_t *ret)
{
    if (tok_u64(&ln->tok[1], UINT64_MAX, ret) < 0)
        return fail(p, CKS_E_FORMAT, "bad count");
    if (*ret > limit)
        return fail(p, CKS_E_LIMIT, "count %" PRIu64 " above the limit %" PRIu64, *ret, limit);
    return 0;
}

static int hdr_files(struct parser *p, const struct line *ln)
{
    return hdr_count(p, ln, MANIFEST_MAX_FILES, &p->decl_files);
}

static int hdr_chunks(struct parser *p, const struct line *ln)
{
    return hdr_count(p, ln, MANIFEST_MAX_CHUNKS, &p->decl_chunks);
}

/* Version 6: the r and k lines after the entries; at least one (a
 * snapshot without recipes is written as version 5 or before). */
static int hdr_extras(struct parser *p, const struct line *ln)
{
    int r = hdr_count(p, ln, MANIFEST_MAX_CHUNKS, &p->decl_extras);
    if (r == 0 && p->decl_extras == 0)
        return fail(p, CKS_E_FORMAT, "version 6 without extras (write version 5)");
    return r;
}

static const struct header_line {
    const char *key;
    size_t nval;
    int (*parse)(struct parser *p, const struct line *ln);
} header_lines[] = {
    {"id", 1, hdr_id},           {"run", 1, hdr_run},       {"step", 1, hdr_step},
    {"time", 1, hdr_time},       {"host", 1, hdr_host},     {"instance", 1, hdr_instance},
    {"parent", 1, hdr_parent},   {"gen", 1, hdr_gen},       {"root", 1, hdr_root},
    {"chunker", 5, hdr_chunker}, {"nodes", 1, hdr_nodes},   {"files", 1, hdr_files},
    {"chunks", 1, hdr_chunks},   {"extras", 1, hdr_extras},
};

/* The header lines come in one fixed order, each exactly once. */
static int parse_header(struct parser *p)
{
    size_t n = sizeof(header_lines) / sizeof(header_lines[0]);
    for (size_t i = 0; i < n; i++) {
        const struct header_line *h = &header_lines[i];
        struct line ln;
        if (p->version == 1 && h->parse == hdr_gen)
            continue; /* version 1: generation 0 */
        if (p->version < 4 && h->parse == hdr_nodes)
            continue; /* versions 1-3: not a merged multi-node step */
        if (p->version < 6 && h->parse == hdr_extras)
            continue; /* versions 1-5: no recipes */
        int r = read_line(p, &ln);
        if (r < 0)
            return r;
        if (!tok_is(&ln.tok[0], h->key)) {
            for (size_t j = 0; j < i; j++)
                if (tok_is(&ln.tok[0], header_lines[j].key))
                    return fail(p, CKS_E_FORMAT, "duplicate \"%s\" line", header_lines[j].key);
            return fail(p, CKS_E_FORMAT, "expected \"%s\" line", h->key);
        }
        if (ln.ntok != 1 + h->nval)
            return fail(p, CKS_E_FORMAT, "\"%s\" takes %zu value(s)", h->key, h->nval);
        if ((r = h->parse(p, &ln)) < 0)
            return r;
    }
    return 0;
}

/* ---- parser: entries ----------------------------------------------------- */

static void mfile_release(struct mfile *f)
{
    free(f->path);
    free(f->link);
}

/* Checks the entry, then moves it into m (which takes its strings). */
static int push_entry(struct parser *p, struct mfile *f)
{
    const char *what;
    int r = check_entry(f, &what);
    if (r < 0) {
        mfile_release(f);
        return fail(p, r, "%s", what);
    }
    r = files_reserve(p->m, (size_t)p->decl_files);
    if (r < 0) {
        mfile_release(f);
        return fail(p, r, "cannot add entry: %s", r == -ENOMEM ? "out of memory" : "limit");
    }
    p->m->files[p->m->nfiles++] = *f;
    p->file_line = p->lineno;
    return 0;
}

/* Field i (counted as in version 2: 0 kind, 1 mode, 2...) of an entry
 * line: from version 3 an mtime follows the mode, from version 4 a node
 * field the mtime. */
static const struct tok *field(const struct parser *p, const struct line *ln, size_t i)
{
    return &ln->tok[i < 2 ? i : i + p->mt + p->nd];
}

/* Version 4's node field: "*" or a rank below the header's node count. */
static int tok_node(const struct parser *p, const struct tok *t, int32_t *ret)
{
    uint64_t v;
    if (tok_is(t, "*")) {
        *ret = MANIFEST_NODE_SEVERAL;
        return 0;
    }
    if (tok_u64(t, (uint64_t)p->m->nodes - 1, &v) < 0)
        return CKS_E_FORMAT;
    *ret = (int32_t)v;
    return 0;
}

/* "-" (unknown) or nanoseconds since the epoch. */
static int tok_mtime(const struct tok *t, int64_t *ret)
{
    uint64_t v;
    *ret = -1;
    if (tok_is(t, "-"))
        return 0;
    if (tok_u64(t, INT64_MAX, &v) < 0)
        return CKS_E_FORMAT;
    *ret = (int64_t)v;
    return 0;
}

/* Fields shared by every entry line: kind, mode, mtime (version 3), ...,
 * path (the last); ntok counts the fields as in version 2. */
static int entry_common(struct parser *p, const struct line *ln, enum mfile_type type, size_t ntok,
                        struct mfile *f)
{
    *f = (struct mfile){.type = type, .first_chunk = p->m->nchunks, .mtime_ns = -1};
    ntok += p->mt + p->nd;
    if (ln->ntok != ntok)
        return fail(p, CKS_E_FORMAT, "\"%c\" line takes %zu fields", (char)type, ntok - 1);
    if (tok_mode(&ln->tok[1], &f->mode) < 0)
        return fail(p, CKS_E_FORMAT, "mode: want four octal digits");
    if (p->mt && tok_mtime(&ln->tok[2], &f->mtime_ns) < 0)
        return fail(p, CKS_E_FORMAT, "mtime: not \"-\" or nanoseconds up to 2^63-1");
    if (p->nd && tok_node(p, &ln->tok[3], &f->node) < 0)
        return fail(p, CKS_E_FORMAT, "node: not \"*\" or a rank below the node count %u",
                    p->m->nodes);
    return text_field(p, &ln->tok[ntok - 1], MANIFEST_MAX_PATH, "path", true, &f->path);
}

static int line_dir(struct parser *p, const struct line *ln)
{
    struct mfile f;
    int r = entry_common(p, ln, MFILE_DIR, 4, &f);
    if (r == 0 && !tok_is(field(p, ln, 2), "-"))
        r = fail(p, CKS_E_FORMAT, "directory: the field before the path must be \"-\"");
    if (r < 0) {
        mfile_release(&f);
        return r;
    }
    return push_entry(p, &f);
}

/* A symlink, or (version 3) a hard link: both name a target. */
static int line_link(struct parser *p, const struct line *ln, enum mfile_type type)
{
    struct mfile f;
    if (type == MFILE_HARDLINK && p->version < 3)
        return fail(p, CKS_E_FORMAT, "hard link entries need manifest version 3");
    int r = entry_common(p, ln, type, 4, &f);
    if (r == 0)
        r = text_field(p, field(p, ln, 2), MANIFEST_MAX_PATH, "link target", true, &f.link);
    if (r < 0) {
        mfile_release(&f);
        return r;
    }
    return push_entry(p, &f);
}

static int file_numbers(struct parser *p, const struct line *ln, struct mfile *f)
{
    if (tok_u64(field(p, ln, 2), UINT64_MAX, &f->size) < 0)
        return fail(p, CKS_E_FORMAT, "bad file size");
    if (tok_digest(p, field(p, ln, 3), f) < 0)
        return fail(p, CKS_E_FORMAT,
                    "bad file digest (want 64 lower-case hex digits, or from version 5 "
                    "\"" TREE_PREFIX "\" and 64)");
    if (tok_u64(field(p, ln, 4), UINT64_MAX, &f->nchunks) < 0)
        return fail(p, CKS_E_FORMAT, "bad chunk count");
    if (f->nchunks > p->decl_chunks - p->m->nchunks)
        return fail(p, CKS_E_FORMAT, "more chunks than the header declares");
    if (f->nchunks == 0 && f->size != 0)
        return fail(p, CKS_E_FORMAT, "non-empty file without chunks");
    return 0;
}

static int line_file(struct parser *p, const struct line *ln)
{
    struct mfile f;
    int r = entry_common(p, ln, MFILE_REG, 6, &f);
    if (r == 0)
        r = file_numbers(p, ln, &f);
    if (r < 0) {
        mfile_release(&f);
        return r;
    }
    p->chunks_left = f.nchunks;
    p->chunk_sum = 0;
    return push_entry(p, &f);
}

static int line_chunk(struct parser *p, const struct line *ln)
{
    uint64_t len;
    const char *what;
    struct mchunk c;
    if (p->chunks_left == 0)
        return fail(p, CKS_E_FORMAT, "chunk line not owed to any file");
    bool mark = p->version >= 6 && ln->ntok == 4 && tok_is(&ln->tok[3], "r");
    if (ln->ntok != 3 && !mark)
        return fail(p, CKS_E_FORMAT, "\"c\" line takes 2 fields (version 6: and \"r\")");
    if (tok_hash(&ln->tok[1], c.id) < 0)
        return fail(p, CKS_E_FORMAT, "bad chunk id (want 64 lower-case hex digits)");
    if (tok_u64(&ln->tok[2], UINT32_MAX, &len) < 0)
        return fail(p, CKS_E_FORMAT, "bad chunk length");
    int r = check_chunk_len(p->m, len, &what);
    if (r < 0)
        return fail(p, r, "%s", what);
    c.len = (uint32_t)len;
    if ((r = chunks_reserve(p->m, (size_t)p->decl_chunks)) < 0)
        return fail(p, r, "cannot add chunk");
    p->m->chunks[p->m->nchunks++] = c;
    if (mark && manifest_mark_recipe(p->m, p->m->nchunks - 1, true) < 0)
        return fail(p, -ENOMEM, "out of memory");
    p->chunk_sum += len;
    const struct mfile *f = &p->m->files[p->m->nfiles - 1];
    if (--p->chunks_left == 0 && p->chunk_sum != f->size)
        return fail(p, CKS_E_FORMAT,
                    "size of the file at line %zu (%" PRIu64 ") != sum of its "
                    "chunk lengths (%" PRIu64 ")",
                    p->file_line, f->size, p->chunk_sum);
    return 0;
}

static int body_line(struct parser *p, const struct line *ln)
{
    const struct tok *k = &ln->tok[0];
    if (tok_is(k, "c"))
        return line_chunk(p, ln);
    if (p->chunks_left)
        return fail(p, CKS_E_FORMAT, "%" PRIu64 " more chunk line(s) expected", p->chunks_left);
    if (tok_is(k, "f"))
        return line_file(p, ln);
    if (tok_is(k, "d"))
        return line_dir(p, ln);
    if (tok_is(k, "l"))
        return line_link(p, ln, MFILE_LINK);
    if (tok_is(k, "h"))
        return line_link(p, ln, MFILE_HARDLINK);
    if (tok_is(k, "end"))
        return fail(p, CKS_E_FORMAT, "end after %zu of %" PRIu64 " declared entries", p->m->nfiles,
                    p->decl_files);
    return fail(p, CKS_E_FORMAT, "unknown line kind \"%.*s\"", (int)(k->n < 16 ? k->n : 16), k->p);
}

static int parse_body(struct parser *p)
{
    while (p->m->nfiles < p->decl_files || p->chunks_left > 0) {
        struct line ln;
        int r = read_line(p, &ln);
        if (r == 0)
            r = body_line(p, &ln);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Version 6: "r <id> <len> <sig> <n> <base>..." into m's extras and
 * bases (the closure is checked once all are read). */
static int line_recipe(struct parser *p, const struct line *ln, struct mextra *x)
{
    uint64_t n;
    if (ln->ntok < 6 || tok_u64(&ln->tok[4], MANIFEST_MAX_BASES, &n) < 0 || n == 0 ||
        ln->ntok != 5 + n)
        return fail(p, CKS_E_FORMAT, "\"r\" line: want <id> <len> <sig> <n 1..%d> and n base ids",
                    MANIFEST_MAX_BASES);
    char sig[2 * MANIFEST_RECIPE_SIG + 1];
    const struct tok *t = &ln->tok[3];
    bool ok = t->n == 2 * MANIFEST_RECIPE_SIG;
    for (size_t i = 0; ok && i < t->n; i++)
        ok = (t->p[i] >= '0' && t->p[i] <= '9') || (t->p[i] >= 'a' && t->p[i] <= 'f');
    if (ok) {
        memcpy(sig, t->p, t->n);
        sig[t->n] = 0;
    }
    if (!ok || hex_decode(sig, MANIFEST_RECIPE_SIG, x->sig) < 0)
        return fail(p, CKS_E_FORMAT, "\"r\" line: bad signature (want 16 lower-case hex)");
    struct manifest *m = p->m;
    if (m->nbases + n > m->bases_cap) {
        size_t cap = m->bases_cap ? m->bases_cap * 2 : 64;
        cap = cap < m->nbases + n ? m->nbases + n : cap;
        struct mbase *b = reallocarray(m->bases, cap, sizeof(*b));
        if (!b)
            return fail(p, -ENOMEM, "out of memory");
        m->bases = b;
        m->bases_cap = cap;
    }
    x->recipe = true;
    x->nbases = (uint32_t)n;
    x->first_base = m->nbases;
    for (size_t k = 0; k < n; k++)
        if (tok_hash(&ln->tok[5 + k], m->bases[m->nbases + k].id) < 0)
            return fail(p, CKS_E_FORMAT, "\"r\" line: bad base id");
    m->nbases += n;
    return 0;
}

static int line_extra(struct parser *p, const struct line *ln)
{
    struct mextra x = {0};
    uint64_t len;
    const char *what;
    bool rec = tok_is(&ln->tok[0], "r");
    if (!rec && !tok_is(&ln->tok[0], "k"))
        return fail(p, CKS_E_FORMAT, "expected an \"r\" or \"k\" line (%" PRIu64 " declared)",
                    p->decl_extras);
    if ((!rec && ln->ntok != 3) || ln->ntok < 3 || tok_hash(&ln->tok[1], x.id) < 0 ||
        tok_u64(&ln->tok[2], UINT32_MAX, &len) < 0)
        return fail(p, CKS_E_FORMAT, "\"%c\" line: want <64 hex id> <len>%s", rec ? 'r' : 'k',
                    rec ? " <sig> <n> <bases>" : "");
    int r = check_chunk_len(p->m, len, &what);
    if (r < 0)
        return fail(p, r, "%s", what);
    x.len = (uint32_t)len;
    if (rec && (r = line_recipe(p, ln, &x)) < 0)
        return r;
    struct manifest *m = p->m;
    if (m->nextras == m->extras_cap) {
        size_t cap = next_cap(m->extras_cap, (size_t)p->decl_extras);
        struct mextra *v = reallocarray(m->extras, cap, sizeof(*v));
        if (!v)
            return fail(p, -ENOMEM, "out of memory");
        m->extras = v;
        m->extras_cap = cap;
    }
    m->extras[m->nextras++] = x;
    return 0;
}

static int parse_extras(struct parser *p)
{
    while (p->m->nextras < p->decl_extras) {
        struct line ln;
        int r = read_line(p, &ln);
        if (r == 0)
            r = line_extra(p, &ln);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The closure of version 6's extras, once all are read. */
static int parse_closure(struct parser *p)
{
    size_t line = 0;
    const char *what = "";
    int r = check_extras(p->m, &line, &what);
    if (r < 0) {
        p->lineno = line;
        return fail(p, r, "%s", what);
    }
    return 0;
}

static int parse_end(struct parser *p)
{
    struct line ln;
    uint8_t want[HASH_LEN], got[HASH_LEN];
    int r = read_line(p, &ln);
    if (r < 0)
        return r;
    if (!tok_is(&ln.tok[0], "end"))
        return fail(p, CKS_E_FORMAT,
                    "expected end line (more entries than the %" PRIu64 " declared?)",
                    p->decl_files);
    if (p->m->nchunks != p->decl_chunks)
        return fail(p, CKS_E_FORMAT, "%zu chunks, header declares %" PRIu64, p->m->nchunks,
                    p->decl_chunks);
    if (ln.ntok != 2 || tok_hash(&ln.tok[1], want) < 0)
        return fail(p, CKS_E_FORMAT, "bad end line (want \"end <64 hex>\")");
    if (p->pos != p->len)
        return fail(p, CKS_E_FORMAT, "data after the end line");
    if (!p->digest_checked) { /* precheck_digest() saw this same line */
        hash_sha256(p->data, ln.start, got);
        if (memcmp(want, got, HASH_LEN))
            return fail(p, CKS_E_DIGEST, "manifest digest mismatch");
    }
    return 0;
}

static int parse_tree(struct parser *p)
{
    size_t a = 0, b = 0;
    const char *what = "";
    int r = check_tree(p->m, &a, &b, &what);
    if (r < 0) {
        /* the text's header lines, not the encoder's: version 1 has one
         * fewer, a "nodes" line may be there that the encoder would drop */
        size_t adj = hdr_more(p->version) - (p->version == 1) - hdr_more(enc_version(p->m));
        p->lineno = entry_line(p->m, b) + adj;
        if (a == b)
            return fail(p, r, "%s", what);
        return fail(p, r, "%s (see line %zu)", what, entry_line(p->m, a) + adj);
    }
    return 0;
}

int manifest_parse(const uint8_t *data, size_t len, struct manifest *m, struct buf *err)
{
    struct parser p = {.data = data, .len = len, .m = m, .err = err};
    int r;
    manifest_init(m);
    if (len > MANIFEST_MAX_BYTES) {
        p.lineno = 1;
        r = fail(&p, CKS_E_LIMIT, "manifest larger than %u bytes", MANIFEST_MAX_BYTES);
    } else if ((r = parse_version(&p)) == 0 && (r = precheck_digest(&p)) == 0 &&
               (r = parse_header(&p)) == 0 && (r = parse_body(&p)) == 0 &&
               (r = parse_extras(&p)) == 0 && (r = parse_end(&p)) == 0 &&
               (r = parse_tree(&p)) == 0) {
        r = parse_closure(&p);
    }
    if (r < 0)
        manifest_free(m);
    return r;
}

int manifest_object_cmp(const uint8_t ida[HASH_LEN], bool ra, const uint8_t *sa,
                        const uint8_t idb[HASH_LEN], bool rb, const uint8_t *sb)
{
    int c = memcmp(ida, idb, HASH_LEN);
    if (c == 0 && ra != rb)
        c = ra ? 1 : -1;
    if (c == 0 && ra)
        c = memcmp(sa, sb, MANIFEST_RECIPE_SIG);
    return c;
}
