/*
 * config.c — the INI configuration: defaults, parsing with libinih,
 * validation with one precise message.
 *
 * Design note.  Keys are a table {section, key, parser, check, offset,
 * bounds}: the inih handler looks the key up and calls its parser on the
 * field at that offset; validation walks the same table calling the checks,
 * so a value changed later (config_finish() after --state) is held to the
 * same rules as one read from the file.  Relations between keys (quorum vs
 * regions, min <= avg <= max, state outside watch, intent_ttl vs clock_skew)
 * are checked once, after the whole file, naming the line where the key was
 * set.  [retention] and each [retention.RUN] fill one struct
 * retention_policy with the same keys: a run's section starts from the
 * built-in defaults, not from [retention].
 *
 * libinih gives neither line numbers to the handler (INI_HANDLER_LINENO is
 * off in distribution builds) nor section-header events, and it cuts
 * section names at 49 bytes.  So we feed it through our own line reader
 * (ini_parse_stream): one reader call per physical line keeps our line
 * counter equal to inih's, and the reader recognises "[section]" lines the
 * way inih does, so every section — even an empty one, even a 63-byte
 * region or run name — is validated when it opens.  The handler
 * cross-checks our idea of the section against inih's and treats
 * disagreement as a syntax error.  Lines longer than inih's line buffer (ini_max_line, 200 bytes in
 * default builds) are rejected rather than split, and NUL bytes are
 * rejected: neither ever reaches inih.
 *
 * inih behaviour we inherit, on purpose: "key: value" is accepted, ';' or
 * '#' starts a comment line, " ;" starts an inline comment.  Its multi-line
 * values (an indented line continuing the previous value) are rejected:
 * a mis-indented key would otherwise silently become part of a path.
 *
 * Parsing stops at the first error, so err holds exactly one message; an
 * inih syntax error on an earlier line than ours wins.  The result is built
 * in a scratch copy and stored into the caller's struct only on success.
 */
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "base/config.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

/* Bounds of FastCDC parameters; must agree with engine/fastcdc.h (base may
 * not include engine headers).  bits = round(log2(avg)) and bits +- nc must
 * stay within the mask table 5..25, as fastcdc_init() checks. */
#define CHUNK_SIZE_MIN 64u
#define CHUNK_SIZE_MAX (256 * MIB)
#define CHUNK_MASK_BITS_MIN 5u
#define CHUNK_MASK_BITS_MAX 25u

#define CONFIG_FILE_MAX MIB
#define SETTLE_MAX 86400u
#define CONTROL_IDLE_TIMEOUT_MAX 3600u
#define NODES_MAX 4096u /* store/layout.h's LAYOUT_NODES_MAX */
#define CONNECTIONS_MAX 256u
#define DAY 86400u
#define KEEP_COUNT_MAX 1000000u         /* keep_last, keep_best */
#define KEEP_EVERY_MAX 1000000000000ull /* keep_every, in steps */
#define NO_POLICY SIZE_MAX              /* parse_state.policy: [retention] */
#define SOCKET_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
/* ini.c's MAX_SECTION: inih passes at most this many bytes - 1. */
#define INIH_SECTION_MAX 50
#define SECTION_MAX 256
#define WHY_MAX 512

enum section_id {
    SEC_NONE,
    SEC_DAEMON,
    SEC_CHUNKER,
    SEC_COMPRESS,
    SEC_RETENTION, /* [retention] and [retention.RUN] */
    SEC_PRUNE,
    SEC_REPOSITORY,
    SEC_RESTORE,
    SEC_SNAPSHOT,
    SEC_REGION,
    SEC_UNKNOWN
};

enum { KIND_DIR = 1u << REGION_KIND_DIR, KIND_S3 = 1u << REGION_KIND_S3, KIND_ANY = 3u };

struct key_def;
/* Parses value into field; on error writes what is wrong into why. */
typedef int (*key_parse_fn)(const struct key_def *d, const char *value, void *field, char *why);
/* Checks the value already in field (also used by config_finish). */
typedef int (*key_check_fn)(const struct key_def *d, const void *field, char *why);

struct key_def {
    enum section_id section;
    const char *key;
    key_parse_fn parse;
    key_check_fn check;
    size_t offset; /* into struct config; struct region_conf for SEC_REGION,
                    * struct retention_policy for SEC_RETENTION */
    size_t size;
    uint64_t min, max;
    unsigned kinds; /* SEC_REGION: the kinds the key applies to */
};

static int parse_text(const struct key_def *d, const char *value, void *field, char *why);
static int parse_uint(const struct key_def *d, const char *value, void *field, char *why);
static int parse_int(const struct key_def *d, const char *value, void *field, char *why);
static int parse_size(const struct key_def *d, const char *value, void *field, char *why);
static int parse_bool(const struct key_def *d, const char *value, void *field, char *why);
static int parse_kind(const struct key_def *d, const char *value, void *field, char *why);
static int parse_tensor(const struct key_def *d, const char *value, void *field, char *why);
static int parse_on_off(const struct key_def *d, const char *value, void *field, char *why);
static int parse_file_digest(const struct key_def *d, const char *value, void *field, char *why);
static int parse_durable_first(const struct key_def *d, const char *value, void *field, char *why);
static int parse_encryption(const struct key_def *d, const char *value, void *field, char *why);
static int parse_addressing(const struct key_def *d, const char *value, void *field, char *why);
static int parse_payload(const struct key_def *d, const char *value, void *field, char *why);
static int parse_preconditions(const struct key_def *d, const char *value, void *field, char *why);
static int parse_uint64(const struct key_def *d, const char *value, void *field, char *why);
static int parse_duration(const struct key_def *d, const char *value, void *field, char *why);
static int parse_best_mode(const struct key_def *d, const char *value, void *field, char *why);
static int check_abs_path(const struct key_def *d, const void *field, char *why);
static int check_opt_path(const struct key_def *d, const void *field, char *why);
static int check_endpoint(const struct key_def *d, const void *field, char *why);
static int check_word(const struct key_def *d, const void *field, char *why);
static int check_uint(const struct key_def *d, const void *field, char *why);
static int check_int(const struct key_def *d, const void *field, char *why);
static int check_size(const struct key_def *d, const void *field, char *why);
static int check_uint64(const struct key_def *d, const void *field, char *why);
static int check_duration(const struct key_def *d, const void *field, char *why);
static int check_metric(const struct key_def *d, const void *field, char *why);
static int parse_listen(const struct key_def *d, const char *value, void *field, char *why);
static int check_listen(const struct key_def *d, const void *field, char *why);
static int check_textfile(const struct key_def *d, const void *field, char *why);
static int check_copy_from(const struct key_def *d, const void *field, char *why);
static int check_restore_order(const struct key_def *d, const void *field, char *why);

#define CFG(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)
#define REG(f) offsetof(struct region_conf, f), sizeof(((struct region_conf *)0)->f)
#define POL(f) offsetof(struct retention_policy, f), sizeof(((struct retention_policy *)0)->f)

static const struct key_def config_keys[] = {
    {SEC_DAEMON, "watch", parse_text, check_abs_path, CFG(watch), 0, 0, 0},
    {SEC_DAEMON, "state", parse_text, check_abs_path, CFG(state), 0, 0, 0},
    {SEC_DAEMON, "socket", parse_text, check_abs_path, CFG(socket), 0, 0, 0},
    {SEC_DAEMON, "quorum", parse_uint, check_uint, CFG(quorum), 1, CONFIG_MAX_REGIONS, 0},
    {SEC_DAEMON, "settle", parse_uint, check_uint, CFG(settle), 0, SETTLE_MAX, 0},
    {SEC_DAEMON, "memory", parse_size, check_size, CFG(memory), MIB, UINT64_MAX, 0},
    {SEC_DAEMON, "workers", parse_uint, check_uint, CFG(workers), 0, 1024, 0},
    {SEC_DAEMON, "readers", parse_uint, check_uint, CFG(readers), 0, 1024, 0},
    {SEC_DAEMON, "create_settle", parse_uint, check_uint, CFG(create_settle), 1, 600, 0},
    {SEC_DAEMON, "metrics", parse_listen, check_listen, CFG(metrics), 0, 0, 0},
    {SEC_DAEMON, "durable_first", parse_durable_first, NULL, CFG(durable_first), 0, 0, 0},
    {SEC_DAEMON, "metrics_textfile", parse_text, check_textfile, CFG(metrics_textfile), 0, 0, 0},
    {SEC_DAEMON, "control_idle_timeout", parse_uint, check_uint, CFG(control_idle_timeout), 1,
     CONTROL_IDLE_TIMEOUT_MAX, 0},
    {SEC_DAEMON, "nodes", parse_uint, check_uint, CFG(nodes), 0, NODES_MAX, 0},
    {SEC_DAEMON, "node_rank", parse_uint, check_uint, CFG(node_rank), 0, NODES_MAX - 1, 0},
    {SEC_DAEMON, "part_timeout", parse_duration, check_duration, CFG(part_timeout), 1, 30 * DAY, 0},
    {SEC_DAEMON, "part_expire", parse_duration, check_duration, CFG(part_expire), 1, 365 * DAY, 0},
    {SEC_CHUNKER, "min", parse_size, check_size, CFG(chunk_min), CHUNK_SIZE_MIN, CHUNK_SIZE_MAX, 0},
    {SEC_CHUNKER, "avg", parse_size, check_size, CFG(chunk_avg), CHUNK_SIZE_MIN, CHUNK_SIZE_MAX, 0},
    {SEC_CHUNKER, "max", parse_size, check_size, CFG(chunk_max), CHUNK_SIZE_MIN, CHUNK_SIZE_MAX, 0},
    {SEC_CHUNKER, "normalization", parse_uint, check_uint, CFG(normalization), 0, 3, 0},
    {SEC_COMPRESS, "level", parse_int, check_int, CFG(zstd_level), 1, 19, 0},
    {SEC_COMPRESS, "tensor", parse_tensor, NULL, CFG(tensor), 0, 0, 0},
    {SEC_COMPRESS, "derive_bf16", parse_on_off, NULL, CFG(derive_bf16), 0, 0, 0},
    {SEC_COMPRESS, "keyframe_fetch", parse_on_off, NULL, CFG(keyframe_fetch), 0, 0, 0},
    {SEC_COMPRESS, "keyframe_every", parse_uint, check_uint, CFG(keyframe_every), 1,
     CONFIG_KEYFRAME_MAX, 0},
    {SEC_RETENTION, "keep_last", parse_uint, check_uint, POL(keep_last), 0, KEEP_COUNT_MAX, 0},
    {SEC_RETENTION, "keep_every", parse_uint64, check_uint64, POL(keep_every), 0, KEEP_EVERY_MAX,
     0},
    {SEC_RETENTION, "keep_within", parse_duration, check_duration, POL(keep_within), 0, UINT64_MAX,
     0},
    {SEC_RETENTION, "keep_best", parse_uint, check_uint, POL(keep_best), 0, KEEP_COUNT_MAX, 0},
    {SEC_RETENTION, "best_metric", parse_text, check_metric, POL(best_metric), 0, 0, 0},
    {SEC_RETENTION, "best_mode", parse_best_mode, NULL, POL(best_max), 0, 0, 0},
    {SEC_PRUNE, "grace", parse_duration, check_duration, CFG(prune_grace), 0, UINT64_MAX, 0},
    {SEC_PRUNE, "interval", parse_duration, check_duration, CFG(prune_interval), 0, UINT64_MAX, 0},
    {SEC_PRUNE, "intent_ttl", parse_duration, check_duration, CFG(intent_ttl), 60, 30 * DAY, 0},
    {SEC_PRUNE, "clock_skew", parse_duration, check_duration, CFG(clock_skew), 0, DAY, 0},
    {SEC_PRUNE, "lease", parse_duration, check_duration, CFG(prune_lease), 30, DAY, 0},
    {SEC_REPOSITORY, "encryption", parse_encryption, NULL, CFG(encryption), 0, 0, 0},
    {SEC_REPOSITORY, "key_file", parse_text, check_opt_path, CFG(key_file), 0, 0, 0},
    {SEC_REPOSITORY, "passphrase_file", parse_text, check_opt_path, CFG(passphrase_file), 0, 0, 0},
    {SEC_RESTORE, "order", parse_text, check_restore_order, CFG(restore_order), 0, 0, 0},
    {SEC_RESTORE, "inflight", parse_size, check_size, CFG(restore_inflight), 0, 64 * GIB, 0},
    {SEC_SNAPSHOT, "file_digest", parse_file_digest, NULL, CFG(file_digest_sha256), 0, 0, 0},
    {SEC_REGION, "kind", parse_kind, NULL, REG(kind), 0, 0, KIND_ANY},
    {SEC_REGION, "path", parse_text, check_opt_path, REG(path), 0, 0, KIND_DIR},
    {SEC_REGION, "endpoint", parse_text, check_endpoint, REG(endpoint), 0, 0, KIND_S3},
    {SEC_REGION, "bucket", parse_text, check_word, REG(bucket), 0, 0, KIND_S3},
    {SEC_REGION, "prefix", parse_text, NULL, REG(prefix), 0, 0, KIND_S3},
    {SEC_REGION, "region", parse_text, check_word, REG(signing_region), 0, 0, KIND_S3},
    {SEC_REGION, "addressing", parse_addressing, NULL, REG(virtual_hosted), 0, 0, KIND_S3},
    {SEC_REGION, "payload", parse_payload, NULL, REG(unsigned_payload), 0, 0, KIND_S3},
    {SEC_REGION, "credentials", parse_text, check_opt_path, REG(credentials), 0, 0, KIND_S3},
    {SEC_REGION, "tls_verify", parse_bool, NULL, REG(tls_verify), 0, 0, KIND_S3},
    {SEC_REGION, "ca_file", parse_text, check_opt_path, REG(ca_file), 0, 0, KIND_S3},
    {SEC_REGION, "connections", parse_uint, check_uint, REG(connections), 1, CONNECTIONS_MAX,
     KIND_ANY},
    {SEC_REGION, "bandwidth", parse_size, check_size, REG(bandwidth), 0, UINT64_MAX, KIND_ANY},
    {SEC_REGION, "preconditions", parse_preconditions, NULL, REG(no_preconditions), 0, 0, KIND_ANY},
    {SEC_REGION, "copy_from", parse_text, check_copy_from, REG(copy_from), 0, 0, KIND_ANY},
};

#define NKEYS ARRAY_SIZE(config_keys)

/* Where each key was set (0 = not in the file). */
struct config_lines {
    unsigned key[NKEYS];                         /* other keys, [retention]'s included */
    unsigned region[CONFIG_MAX_REGIONS][NKEYS];  /* region keys */
    unsigned header[CONFIG_MAX_REGIONS];         /* the [region.NAME] line */
    unsigned policy[CONFIG_MAX_POLICIES][NKEYS]; /* [retention.RUN] keys */
    unsigned policy_header[CONFIG_MAX_POLICIES]; /* the [retention.RUN] line */
};

struct parse_state {
    struct config c; /* scratch result */
    struct config_lines lines;
    struct buf *err;
    const char *file;
    const char *text;
    size_t len, pos;
    unsigned lineno;
    unsigned fail_line; /* 0 = no error yet */
    /* Our model of inih's state, see the design note. */
    enum section_id sec;
    size_t region;
    size_t policy; /* SEC_RETENTION: index into c.policies, or NO_POLICY */
    char section[SECTION_MAX];
    bool prev_name_set;    /* inih's prev_name is non-empty */
    bool cur_continuation; /* the current line continues the previous value */
};

/* ---- messages ---------------------------------------------------------- */

static void buf_vprintf(struct buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (n < 0 || buf_reserve(b, (size_t)n) < 0)
        return;
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

/* "<file>:<line>: [section] key: what"; any of the parts may be absent. */
static void config_verror(struct buf *err, const char *file, unsigned line, const char *section,
                          const char *key, const char *fmt, va_list ap)
    __attribute__((format(printf, 6, 0)));
static void config_verror(struct buf *err, const char *file, unsigned line, const char *section,
                          const char *key, const char *fmt, va_list ap)
{
    if (!err)
        return;
    buf_reset(err);
    if (file && file[0])
        buf_puts(err, file);
    if (line && file && file[0])
        buf_printf(err, ":%u", line);
    else if (line)
        buf_printf(err, "line %u", line);
    if (buf_str(err)[0])
        buf_puts(err, ": ");
    if (section)
        buf_printf(err, "[%s]%s", section, key ? " " : "");
    if (key)
        buf_puts(err, key);
    if (section || key)
        buf_puts(err, ": ");
    buf_vprintf(err, fmt, ap);
}

static void config_error(struct buf *err, const char *file, unsigned line, const char *section,
                         const char *key, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void config_error(struct buf *err, const char *file, unsigned line, const char *section,
                         const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    config_verror(err, file, line, section, key, fmt, ap);
    va_end(ap);
}

/* An error on the line being parsed; stops the parse.  Returns 0 (the inih
 * handler's "error"). */
static int st_fail(struct parse_state *st, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int st_fail(struct parse_state *st, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    config_verror(st->err, st->file, st->lineno, st->sec == SEC_NONE ? NULL : st->section, key, fmt,
                  ap);
    va_end(ap);
    st->fail_line = st->lineno;
    return 0;
}

/* An error about the line itself, naming no section or key. */
static int st_fail_line(struct parse_state *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int st_fail_line(struct parse_state *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    config_verror(st->err, st->file, st->lineno, NULL, NULL, fmt, ap);
    va_end(ap);
    st->fail_line = st->lineno;
    return 0;
}

/* ---- value parsers and checks ----------------------------------------- */

static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

/* The rules of a text value, given or already in its field. */
static int check_text(const struct key_def *d, const char *s, char *why)
{
    if (has_control(s)) {
        snprintf(why, WHY_MAX, "value contains a control character");
        return -1;
    }
    return d->check ? d->check(d, s, why) : 0;
}

static int parse_text(const struct key_def *d, const char *value, void *field, char *why)
{
    size_t len = strlen(value);

    if (len >= d->size) {
        snprintf(why, WHY_MAX, "value too long (%zu bytes, at most %zu)", len, d->size - 1);
        return -1;
    }
    if (check_text(d, value, why) < 0)
        return -1;
    memcpy(field, value, len + 1);
    return 0;
}

static int check_abs_path(const struct key_def *d, const void *field, char *why)
{
    const char *s = field;
    if (s[0] == '/')
        return 0;
    snprintf(why, WHY_MAX, "'%.*s' is not an absolute path", WHY_MAX / 2, s);
    return -1;
}

static int check_opt_path(const struct key_def *d, const void *field, char *why)
{
    const char *s = field;
    return s[0] ? check_abs_path(d, field, why) : 0;
}

static int check_endpoint(const struct key_def *d, const void *field, char *why)
{
    const char *s = field;
    if (s[0] == '\0')
        return 0; /* unset; required-ness is checked per region */
    const char *host = !strncmp(s, "https://", 8)  ? s + 8
                       : !strncmp(s, "http://", 7) ? s + 7
                                                   : NULL;
    if (host && host[0] && host[0] != '/' && !strpbrk(s, " \t"))
        return 0;
    snprintf(why, WHY_MAX, "'%.*s' is not an http:// or https:// URL", WHY_MAX / 2, s);
    return -1;
}

/* Bucket names and signing regions: one word, no '/'. */
static int check_word(const struct key_def *d, const void *field, char *why)
{
    const char *s = field;
    if (!strpbrk(s, " \t/"))
        return 0;
    snprintf(why, WHY_MAX, "'%.*s' must not contain spaces or '/'", WHY_MAX / 2, s);
    return -1;
}

/* [restore] order: "GROUP:PATTERN ..."; the group names are
 * restore_group_name()'s (service/restore.h; base cannot include it). */
static int check_restore_order(const struct key_def *d, const void *field, char *why)
{
    static const char *const groups[] = {"metadata", "weights", "master", "optimizer"};
    const char *p = field;
    (void)d;
    while (*(p += strspn(p, " \t"))) {
        size_t n = strcspn(p, " \t"), g = strcspn(p, ":");
        bool known = false;
        for (size_t i = 0; i < ARRAY_SIZE(groups); i++)
            known = known || (g == strlen(groups[i]) && !strncmp(p, groups[i], g));
        if (g >= n || g + 1 == n || !known) {
            snprintf(why, WHY_MAX,
                     "'%.*s' is not GROUP:PATTERN (GROUP one of metadata, weights, master, "
                     "optimizer)",
                     (int)(n < WHY_MAX / 2 ? n : WHY_MAX / 2), p);
            return -1;
        }
        p += n;
    }
    return 0;
}

/* copy_from: auto, none, or "name, name, ...": region names, checked
 * against the regions in validate_copy_from once all are read. */
static int check_copy_from(const struct key_def *d, const void *field, char *why)
{
    (void)d;
    const char *s = field;
    if (!strcmp(s, "auto") || !strcmp(s, "none") || !s[0])
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == ',' || *p == ' ')) {
            snprintf(why, WHY_MAX, "'%.*s' is not auto, none or a list of region names",
                     WHY_MAX / 2, s);
            return -1;
        }
    return 0;
}

/* Is name (len bytes) in the comma-separated list? */
static bool copy_from_names(const char *list, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ", ");
        if (n && n == nl && !memcmp(p, name, n))
            return true;
        p += n;
    }
    return false;
}

int config_copy_from(const struct config *c, size_t dst, size_t src)
{
    const char *v = c->regions[dst].copy_from;
    if (dst == src || !strcmp(v, "none"))
        return 0;
    if (!v[0] || !strcmp(v, "auto"))
        return -1;
    return copy_from_names(v, c->regions[src].name) ? 1 : 0;
}

/* Strict unsigned decimal: digits only, no sign, no space, no overflow. */
static int parse_u64(const char *s, uint64_t *ret)
{
    char *end;

    if (s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE || *end != '\0')
        return -1;
    *ret = v;
    return 0;
}

/* "4M" if v is a whole number of a unit, else the plain number. */
static void format_size(uint64_t v, char *out, size_t size)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (v && u < 3 && (v & 1023) == 0) {
        v >>= 10;
        u++;
    }
    if (u < 0)
        snprintf(out, size, "%llu", (unsigned long long)v);
    else
        snprintf(out, size, "%llu%c", (unsigned long long)v, units[u]);
}

/* "7d", "6h", "15m" if v is a whole number of a unit, else seconds. */
static void format_duration(uint64_t v, char *out, size_t size)
{
    static const struct {
        uint64_t seconds;
        char suffix;
    } units[] = {{DAY, 'd'}, {3600, 'h'}, {60, 'm'}};
    for (size_t i = 0; v && i < ARRAY_SIZE(units); i++) {
        if (v % units[i].seconds == 0) {
            snprintf(out, size, "%llu%c", (unsigned long long)(v / units[i].seconds),
                     units[i].suffix);
            return;
        }
    }
    snprintf(out, size, "%llu", (unsigned long long)v);
}

/* How a key's numbers are written in messages. */
enum unit { UNIT_NUMBER, UNIT_SIZE, UNIT_DURATION };

static void format_value(enum unit unit, uint64_t v, char *out, size_t size)
{
    if (unit == UNIT_SIZE)
        format_size(v, out, size);
    else if (unit == UNIT_DURATION)
        format_duration(v, out, size);
    else
        snprintf(out, size, "%llu", (unsigned long long)v);
}

static int range_error(const struct key_def *d, uint64_t v, enum unit unit, char *why)
{
    char lo[32], hi[32], val[32];
    format_value(unit, d->min, lo, sizeof(lo));
    format_value(unit, d->max, hi, sizeof(hi));
    format_value(unit, v, val, sizeof(val));
    if (d->max == UINT64_MAX)
        snprintf(why, WHY_MAX, "%s is too small (at least %s)", val, lo);
    else
        snprintf(why, WHY_MAX, "%s is out of range (%s to %s)", val, lo, hi);
    return -1;
}

static int check_range(const struct key_def *d, uint64_t v, enum unit unit, char *why)
{
    return v < d->min || v > d->max ? range_error(d, v, unit, why) : 0;
}

static int check_uint(const struct key_def *d, const void *field, char *why)
{
    unsigned v;
    memcpy(&v, field, sizeof(v));
    return check_range(d, v, UNIT_NUMBER, why);
}

static int check_int(const struct key_def *d, const void *field, char *why)
{
    int v;
    memcpy(&v, field, sizeof(v));
    if (v < 0) {
        snprintf(why, WHY_MAX, "%d is out of range (%llu to %llu)", v, (unsigned long long)d->min,
                 (unsigned long long)d->max);
        return -1;
    }
    return check_range(d, (uint64_t)v, UNIT_NUMBER, why);
}

static int check_size(const struct key_def *d, const void *field, char *why)
{
    uint64_t v;
    memcpy(&v, field, sizeof(v));
    return check_range(d, v, UNIT_SIZE, why);
}

static int check_uint64(const struct key_def *d, const void *field, char *why)
{
    uint64_t v;
    memcpy(&v, field, sizeof(v));
    return check_range(d, v, UNIT_NUMBER, why);
}

static int check_duration(const struct key_def *d, const void *field, char *why)
{
    uint64_t v;
    memcpy(&v, field, sizeof(v));
    return check_range(d, v, UNIT_DURATION, why);
}

/* best_metric: a trainer_state.json log_history key such as "eval_loss". */
static int check_metric(const struct key_def *d, const void *field, char *why)
{
    const char *s = field;
    size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-");
    if (s[0] && s[n] == '\0' && n < CONFIG_METRIC_MAX)
        return 0;
    snprintf(why, WHY_MAX,
             "'%.*s' is not a metric name (1 to %d characters of A-Z a-z 0-9 _ . / -)", WHY_MAX / 2,
             s, CONFIG_METRIC_MAX - 1);
    return -1;
}

int config_parse_listen(const char *s, struct config_listen *ret)
{
    struct config_listen l = {.family = AF_INET};
    const char *colon = strrchr(s, ':');
    const char *port = colon ? colon + 1 : s;
    size_t hlen = colon ? (size_t)(colon - s) : 0;
    uint8_t addr[16];
    uint64_t p;
    if (parse_u64(port, &p) < 0 || p < 1 || p > 65535)
        return CKS_E_CONFIG;
    l.port = (unsigned)p;
    if (!colon) {
        snprintf(l.host, sizeof(l.host), "127.0.0.1");
    } else if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']' && hlen - 2 < sizeof(l.host)) {
        l.family = AF_INET6;
        snprintf(l.host, sizeof(l.host), "%.*s", (int)(hlen - 2), s + 1);
    } else if (hlen == 9 && !strncmp(s, "localhost", 9)) {
        snprintf(l.host, sizeof(l.host), "127.0.0.1");
    } else if (hlen > 0 && hlen < sizeof(l.host) && !memchr(s, ':', hlen)) {
        snprintf(l.host, sizeof(l.host), "%.*s", (int)hlen, s);
    } else {
        return CKS_E_CONFIG;
    }
    if (inet_pton(l.family, l.host, addr) != 1)
        return CKS_E_CONFIG;
    if (ret)
        *ret = l;
    return 0;
}

static int check_listen(const struct key_def *d, const void *field, char *why)
{
    const char *s = field;
    (void)d;
    if (s[0] == '\0' || config_parse_listen(s, NULL) == 0)
        return 0;
    snprintf(why, WHY_MAX,
             "'%.*s' is not a listening address (PORT or HOST:PORT with a numeric HOST, "
             "e.g. 127.0.0.1:9477 or 0.0.0.0:9477 for every interface; or off)",
             WHY_MAX / 2, s);
    return -1;
}

/* [daemon] metrics: "off" (or nothing) is stored as "". */
static int parse_listen(const struct key_def *d, const char *value, void *field, char *why)
{
    if (!strcmp(value, "off")) {
        memset(field, 0, d->size);
        return 0;
    }
    if (!value[0]) {
        snprintf(why, WHY_MAX, "'' is not a listening address (write off to turn metrics off)");
        return -1;
    }
    return parse_text(d, value, field, why);
}

/* node_exporter's textfile collector reads only *.prom files. */
static int check_textfile(const struct key_def *d, const void *field, char *why)
{
    const char *s = field;
    size_t n = strlen(s);
    if (s[0] == '\0')
        return 0;
    if (check_abs_path(d, field, why) < 0)
        return -1;
    if (n > 5 && !strcmp(s + n - 5, ".prom") && s[n - 6] != '/')
        return 0;
    snprintf(why, WHY_MAX, "'%.*s' does not end in .prom (node_exporter reads only *.prom files)",
             WHY_MAX / 2, s);
    return -1;
}

static int parse_number(const struct key_def *d, const char *value, uint64_t *ret, char *why)
{
    if (parse_u64(value, ret) < 0) {
        snprintf(why, WHY_MAX, "'%.*s' is not a number", WHY_MAX / 2, value);
        return -1;
    }
    return check_range(d, *ret, UNIT_NUMBER, why);
}

static int parse_uint(const struct key_def *d, const char *value, void *field, char *why)
{
    uint64_t v;
    if (parse_number(d, value, &v, why) < 0)
        return -1;
    unsigned u = (unsigned)v; /* max bounds every unsigned key well below UINT_MAX */
    memcpy(field, &u, sizeof(u));
    return 0;
}

static int parse_int(const struct key_def *d, const char *value, void *field, char *why)
{
    uint64_t v;
    if (parse_number(d, value, &v, why) < 0)
        return -1;
    int i = (int)v; /* likewise bounded by max */
    memcpy(field, &i, sizeof(i));
    return 0;
}

static int parse_uint64(const struct key_def *d, const char *value, void *field, char *why)
{
    uint64_t v;
    if (parse_number(d, value, &v, why) < 0)
        return -1;
    memcpy(field, &v, sizeof(v));
    return 0;
}

static int parse_duration(const struct key_def *d, const char *value, void *field, char *why)
{
    uint64_t v;
    if (config_parse_duration(value, &v) < 0) {
        snprintf(why, WHY_MAX, "'%.*s' is not a duration (like 90s, 15m, 6h, 7d)", WHY_MAX / 2,
                 value);
        return -1;
    }
    if (check_range(d, v, UNIT_DURATION, why) < 0)
        return -1;
    memcpy(field, &v, sizeof(v));
    return 0;
}

static int parse_size(const struct key_def *d, const char *value, void *field, char *why)
{
    uint64_t v;
    if (config_parse_size(value, &v) < 0) {
        snprintf(why, WHY_MAX, "'%.*s' is not a size (a number with an optional K, M, G or T)",
                 WHY_MAX / 2, value);
        return -1;
    }
    if (check_range(d, v, UNIT_SIZE, why) < 0)
        return -1;
    memcpy(field, &v, sizeof(v));
    return 0;
}

struct word {
    const char *word;
    int value;
};

/* Looks value up in words (case-insensitive); -1 if absent. */
static int parse_word(const struct word *words, size_t n, const char *value, int *ret)
{
    for (size_t i = 0; i < n; i++) {
        if (strcasecmp(value, words[i].word) == 0) {
            *ret = words[i].value;
            return 0;
        }
    }
    return -1;
}

/* A key with two meanings, each spelled by one or more words: the bool
 * field gets the word's value; why says what the value is not. */
static int parse_flag_word(const struct word *words, size_t n, const char *what, const char *value,
                           void *field, char *why)
{
    int v;
    if (parse_word(words, n, value, &v) < 0) {
        snprintf(why, WHY_MAX, "'%.*s' is not %s", WHY_MAX / 2, value, what);
        return -1;
    }
    *(bool *)field = v;
    return 0;
}

static int parse_bool(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {
        {"true", 1}, {"yes", 1}, {"on", 1}, {"1", 1}, {"false", 0}, {"no", 0}, {"off", 0}, {"0", 0},
    };
    return parse_flag_word(words, ARRAY_SIZE(words), "a boolean (true/false, yes/no, on/off, 1/0)",
                           value, field, why);
}

static int parse_kind(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {{"dir", REGION_KIND_DIR}, {"s3", REGION_KIND_S3}};
    int v;
    if (parse_word(words, ARRAY_SIZE(words), value, &v) < 0) {
        snprintf(why, WHY_MAX, "'%.*s' is not a region kind (dir or s3)", WHY_MAX / 2, value);
        return -1;
    }
    *(enum region_kind *)field = (enum region_kind)v;
    return 0;
}

static int parse_tensor(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {{"auto", 1}, {"off", 0}};
    return parse_flag_word(words, ARRAY_SIZE(words), "a tensor codec mode (auto or off)", value,
                           field, why);
}

static int parse_on_off(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {{"on", 1}, {"off", 0}};
    return parse_flag_word(words, ARRAY_SIZE(words), "on or off", value, field, why);
}

static int parse_file_digest(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {{"tree", 0}, {"sha256", 1}};
    return parse_flag_word(words, ARRAY_SIZE(words), "a file digest kind (tree or sha256)", value,
                           field, why);
}

static int parse_durable_first(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {
        {"auto", DURABLE_FIRST_AUTO}, {"on", DURABLE_FIRST_ON},   {"yes", DURABLE_FIRST_ON},
        {"true", DURABLE_FIRST_ON},   {"off", DURABLE_FIRST_OFF}, {"no", DURABLE_FIRST_OFF},
        {"false", DURABLE_FIRST_OFF},
    };
    int v;
    if (parse_word(words, ARRAY_SIZE(words), value, &v) < 0) {
        snprintf(why, WHY_MAX, "'%.*s' is not a durable_first mode (auto, on or off)", WHY_MAX / 2,
                 value);
        return -1;
    }
    *(enum config_durable_first *)field = (enum config_durable_first)v;
    return 0;
}

static int parse_encryption(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {{"none", 0}, {"aes-256-gcm", 1}};
    return parse_flag_word(words, ARRAY_SIZE(words), "an encryption (none or aes-256-gcm)", value,
                           field, why);
}

static int parse_addressing(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {{"path", 0}, {"virtual", 1}, {"virtual-hosted", 1}};
    return parse_flag_word(words, ARRAY_SIZE(words), "an addressing style (path or virtual)", value,
                           field, why);
}

static int parse_payload(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {{"signed", 0}, {"unsigned", 1}, {"UNSIGNED-PAYLOAD", 1}};
    return parse_flag_word(words, ARRAY_SIZE(words), "a payload signing mode (signed or unsigned)",
                           value, field, why);
}

static int parse_preconditions(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {{"auto", 0}, {"none", 1}};
    return parse_flag_word(words, ARRAY_SIZE(words), "a preconditions mode (auto or none)", value,
                           field, why);
}

static int parse_best_mode(const struct key_def *d, const char *value, void *field, char *why)
{
    static const struct word words[] = {{"min", 0}, {"max", 1}};
    return parse_flag_word(words, ARRAY_SIZE(words), "a best mode (min or max)", value, field, why);
}

int config_parse_size(const char *s, uint64_t *ret)
{
    static const char units[] = "KMGT";
    uint64_t v;
    unsigned shift = 0;
    char num[32];

    if (!s)
        return CKS_E_CONFIG;
    size_t len = strlen(s);
    if (len > 0) {
        const char *u = strchr(units, s[len - 1] & ~0x20); /* upper-case the suffix */
        if (u && *u) {
            shift = 10 * (unsigned)(u - units + 1);
            len--;
        }
    }
    if (len == 0 || len >= sizeof(num))
        return CKS_E_CONFIG;
    memcpy(num, s, len);
    num[len] = '\0';
    if (parse_u64(num, &v) < 0 || v > (UINT64_MAX >> shift))
        return CKS_E_CONFIG;
    *ret = v << shift;
    return 0;
}

/* Lower-case suffixes only: "15M" could as well mean months. */
int config_parse_duration(const char *s, uint64_t *ret)
{
    static const struct {
        char suffix;
        uint64_t seconds;
    } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', DAY}};
    uint64_t v, mul = 1;
    char num[32];

    if (!s)
        return CKS_E_CONFIG;
    size_t len = strlen(s);
    for (size_t i = 0; len > 0 && i < ARRAY_SIZE(units); i++) {
        if (s[len - 1] == units[i].suffix) {
            mul = units[i].seconds;
            len--;
            break;
        }
    }
    if (len == 0 || len >= sizeof(num))
        return CKS_E_CONFIG;
    memcpy(num, s, len);
    num[len] = '\0';
    if (parse_u64(num, &v) < 0 || v > UINT64_MAX / mul)
        return CKS_E_CONFIG;
    *ret = v * mul;
    return 0;
}

const struct retention_policy *config_policy(const struct config *c, const char *run)
{
    for (size_t i = 0; run && run[0] && i < c->npolicies && i < CONFIG_MAX_POLICIES; i++)
        if (strcmp(c->policies[i].run, run) == 0)
            return &c->policies[i];
    return &c->retention;
}

bool retention_policy_active(const struct retention_policy *p)
{
    return p->keep_last || p->keep_every || p->keep_within || p->keep_best;
}

/* ---- defaults and derived values -------------------------------------- */

/* The built-in policy (keeps everything); run "" is [retention]. */
static void policy_default(struct retention_policy *p, const char *run)
{
    char copy[CONFIG_RUN_MAX];
    snprintf(copy, sizeof(copy), "%s", run); /* run may be p->run itself */
    memset(p, 0, sizeof(*p));
    memcpy(p->run, copy, sizeof(copy));
    snprintf(p->best_metric, sizeof(p->best_metric), "eval_loss");
    p->best_max = false;
}

static void region_default(struct region_conf *r, const char *name)
{
    char copy[CONFIG_NAME_MAX];
    snprintf(copy, sizeof(copy), "%s", name); /* name may not alias *r once it is cleared */
    memset(r, 0, sizeof(*r));
    memcpy(r->name, copy, sizeof(copy));
    r->kind = REGION_KIND_DIR;
    snprintf(r->signing_region, sizeof(r->signing_region), "us-east-1");
    r->virtual_hosted = false;
    r->unsigned_payload = false;
    r->tls_verify = true;
    r->connections = 16;
    r->bandwidth = 0;
    r->no_preconditions = false;
    r->copy_from[0] = 0;
}

/* dir + "/" + a + b, without doubling a trailing '/' of dir; -1 if it does
 * not fit. */
static int path_join(char *out, size_t size, const char *dir, const char *a, const char *b)
{
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    const char *sep = dl > 0 && dir[dl - 1] == '/' ? "" : "/";
    int n = snprintf(out, size, "%.*s%s%s%s", (int)dl, dir, sep, a, b);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* Defaulted values that depend on state.  Fails only when a derived path
 * does not fit; reports it as a problem of state. */
static int config_derive(struct config *c, const char *file, unsigned state_line, struct buf *err)
{
    if (c->default_socket &&
        path_join(c->socket, sizeof(c->socket), c->state, "ckptsyncd.sock", "") < 0)
        goto too_long;
    for (size_t i = 0; c->default_regions && i < c->nregions; i++) {
        struct region_conf *r = &c->regions[i];
        if (path_join(r->path, sizeof(r->path), c->state, "regions/", r->name) < 0)
            goto too_long;
    }
    return 0;
too_long:
    config_error(err, file, state_line, "daemon", "state",
                 "too long to derive the default paths under it");
    return CKS_E_CONFIG;
}

void config_default(struct config *c)
{
    static const char *const names[] = {"a", "b", "c"};

    memset(c, 0, sizeof(*c));
    snprintf(c->watch, sizeof(c->watch), "/data/cloud_storage");
    snprintf(c->state, sizeof(c->state), "/var/lib/ckptsync");
    c->quorum = 2;
    c->settle = 10;
    c->create_settle = 10;
    c->control_idle_timeout = 5;
    c->part_timeout = 3600;
    c->part_expire = 7 * 86400;
    c->memory = GIB;
    c->restore_inflight = 16 * MIB;
    c->chunk_min = MIB / 2;
    c->chunk_avg = 2 * MIB;
    c->chunk_max = 8 * MIB;
    c->normalization = 1;
    c->zstd_level = 3;
    c->tensor = true;
    c->derive_bf16 = true;
    c->keyframe_every = 8;
    policy_default(&c->retention, "");
    c->npolicies = 0;
    c->prune_grace = 3600;
    c->prune_interval = 0;
    c->intent_ttl = 6 * 3600;
    c->clock_skew = 300;
    c->prune_lease = 900;
    c->default_regions = true;
    c->default_socket = true;
    c->nregions = ARRAY_SIZE(names);
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        region_default(&c->regions[i], names[i]);
    config_derive(c, NULL, 0, NULL); /* the defaults always fit */
}

/* ---- validation -------------------------------------------------------- */

/* Lexical normalization for comparisons: no "//", no ".", ".." resolved,
 * no trailing '/'.  out has room for strlen(in) + 2. */
static void path_normalize(const char *in, char *out)
{
    size_t n = 0;
    out[n++] = '/';
    while (*in) {
        while (*in == '/')
            in++;
        size_t len = strcspn(in, "/");
        if (len == 0 || (len == 1 && in[0] == '.')) {
            in += len;
            continue;
        }
        if (len == 2 && in[0] == '.' && in[1] == '.') {
            while (n > 1 && out[n - 1] != '/')
                n--;
            if (n > 1)
                n--; /* the '/' before the removed component */
        } else {
            if (n > 1)
                out[n++] = '/';
            memcpy(out + n, in, len);
            n += len;
        }
        in += len;
    }
    out[n] = '\0';
}

/* Is a the same as b or below it? (lexically; both absolute) */
static bool path_inside(const char *a, const char *b)
{
    char na[CONFIG_PATH_MAX + 2], nb[CONFIG_PATH_MAX + 2];

    if (strlen(a) >= CONFIG_PATH_MAX || strlen(b) >= CONFIG_PATH_MAX)
        return false; /* cannot happen: fields are CONFIG_PATH_MAX bytes */
    path_normalize(a, na);
    path_normalize(b, nb);
    size_t lb = strlen(nb);
    if (strcmp(nb, "/") == 0)
        return true;
    return strncmp(na, nb, lb) == 0 && (na[lb] == '\0' || na[lb] == '/');
}

/* What validation needs to name the place of an error. */
struct where {
    const char *file;
    const struct config_lines *lines; /* NULL: no line numbers (config_finish) */
    struct buf *err;
};

static const struct key_def *key_find(enum section_id sec, const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (config_keys[i].section == sec && strcmp(config_keys[i].key, key) == 0)
            return &config_keys[i];
    return NULL;
}

/* A key of any section but [region.NAME] (their names are distinct); for
 * a [retention] key, the default policy's. */
static const struct key_def *global_key(const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (config_keys[i].section != SEC_REGION && strcmp(config_keys[i].key, key) == 0)
            return &config_keys[i];
    return NULL;
}

static size_t key_index(const struct key_def *d)
{
    return (size_t)(d - config_keys);
}

static const char *section_name(enum section_id sec)
{
    switch (sec) {
    case SEC_DAEMON:
        return "daemon";
    case SEC_CHUNKER:
        return "chunker";
    case SEC_COMPRESS:
        return "compress";
    case SEC_RETENTION:
        return "retention";
    case SEC_PRUNE:
        return "prune";
    case SEC_REPOSITORY:
        return "repository";
    case SEC_RESTORE:
        return "restore";
    case SEC_SNAPSHOT:
        return "snapshot";
    default:
        return "region";
    }
}

/* Line where a key outside [region.NAME] and [retention.RUN] was set, 0 if
 * unknown. */
static unsigned global_line(const struct where *w, const char *key)
{
    const struct key_def *d = global_key(key);
    return w->lines && d ? w->lines->key[key_index(d)] : 0;
}

static int fail_key(const struct where *w, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_key(const struct where *w, const char *key, const char *fmt, ...)
{
    const struct key_def *d = global_key(key);
    va_list ap;
    va_start(ap, fmt);
    config_verror(w->err, w->file, global_line(w, key), d ? section_name(d->section) : NULL, key,
                  fmt, ap);
    va_end(ap);
    return CKS_E_CONFIG;
}

/* An error about region i; key NULL names the region itself (its header). */
static int fail_region(const struct where *w, const struct config *c, size_t i, const char *key,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail_region(const struct where *w, const struct config *c, size_t i, const char *key,
                       const char *fmt, ...)
{
    char section[CONFIG_NAME_MAX + 8];
    const struct key_def *d = key ? key_find(SEC_REGION, key) : NULL;
    unsigned line = 0;
    if (w->lines && d)
        line = w->lines->region[i][key_index(d)];
    if (w->lines && !line)
        line = w->lines->header[i];
    snprintf(section, sizeof(section), "region.%s", c->regions[i].name);
    va_list ap;
    va_start(ap, fmt);
    config_verror(w->err, w->file, line, section, key, fmt, ap);
    va_end(ap);
    return CKS_E_CONFIG;
}

/* An error about [retention.RUN] i; key NULL names the section itself. */
static int fail_policy(const struct where *w, const struct config *c, size_t i, const char *key,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail_policy(const struct where *w, const struct config *c, size_t i, const char *key,
                       const char *fmt, ...)
{
    char section[CONFIG_RUN_MAX + 16];
    const struct key_def *d = key ? key_find(SEC_RETENTION, key) : NULL;
    unsigned line = 0;
    if (w->lines && d)
        line = w->lines->policy[i][key_index(d)];
    if (w->lines && !line)
        line = w->lines->policy_header[i];
    snprintf(section, sizeof(section), "retention.%s", c->policies[i].run);
    va_list ap;
    va_start(ap, fmt);
    config_verror(w->err, w->file, line, section, key, fmt, ap);
    va_end(ap);
    return CKS_E_CONFIG;
}

static bool terminated(const void *field, size_t size)
{
    return memchr(field, '\0', size) != NULL;
}

/* What config_derive() and messages rely on, for a struct that a caller
 * may have changed by hand before config_finish(). */
static bool config_sane(const struct config *c)
{
    if (c->nregions > CONFIG_MAX_REGIONS || !terminated(c->source, sizeof(c->source)) ||
        !terminated(c->state, sizeof(c->state)))
        return false;
    for (size_t i = 0; i < c->nregions; i++)
        if (!terminated(c->regions[i].name, sizeof(c->regions[i].name)))
            return false;
    if (c->npolicies > CONFIG_MAX_POLICIES)
        return false;
    for (size_t i = 0; i < c->npolicies; i++)
        if (!terminated(c->policies[i].run, sizeof(c->policies[i].run)))
            return false;
    return true;
}

static int field_check(const struct key_def *d, const void *field, char *why)
{
    if (d->parse != parse_text)
        return d->check ? d->check(d, field, why) : 0;
    if (!terminated(field, d->size)) {
        snprintf(why, WHY_MAX, "value too long (at most %zu bytes)", d->size - 1);
        return -1;
    }
    return check_text(d, field, why);
}

/* Every field against its own rule (table-driven). */
static int validate_fields(const struct config *c, const struct where *w)
{
    char why[WHY_MAX];
    for (size_t k = 0; k < NKEYS; k++) {
        const struct key_def *d = &config_keys[k];
        if (d->section == SEC_REGION) {
            for (size_t i = 0; i < c->nregions; i++)
                if (field_check(d, (const char *)&c->regions[i] + d->offset, why) < 0)
                    return fail_region(w, c, i, d->key, "%s", why);
        } else if (d->section == SEC_RETENTION) {
            if (field_check(d, (const char *)&c->retention + d->offset, why) < 0)
                return fail_key(w, d->key, "%s", why);
            for (size_t i = 0; i < c->npolicies; i++)
                if (field_check(d, (const char *)&c->policies[i] + d->offset, why) < 0)
                    return fail_policy(w, c, i, d->key, "%s", why);
        } else if (field_check(d, (const char *)c + d->offset, why) < 0) {
            return fail_key(w, d->key, "%s", why);
        }
    }
    return 0;
}

/* Of two keys in a relation that does not hold, the one to name: the one
 * set later in the file (a default is never the culprit if the other key
 * was set); a when neither was set. */
static bool blame_first(const struct where *w, const char *a, const char *b)
{
    return global_line(w, a) >= global_line(w, b);
}

static int validate_daemon(const struct config *c, const struct where *w)
{
    if (c->nodes && c->node_rank >= c->nodes) {
        if (blame_first(w, "node_rank", "nodes"))
            return fail_key(w, "node_rank", "%u is not below nodes (%u)", c->node_rank, c->nodes);
        return fail_key(w, "nodes", "%u is not above node_rank (%u)", c->nodes, c->node_rank);
    }
    if (path_inside(c->state, c->watch)) {
        if (blame_first(w, "state", "watch"))
            return fail_key(w, "state", "'%s' is inside watch '%s'", c->state, c->watch);
        return fail_key(w, "watch", "'%s' contains state '%s'", c->watch, c->state);
    }
    if (path_inside(c->watch, c->state)) {
        if (blame_first(w, "watch", "state"))
            return fail_key(w, "watch", "'%s' is inside state '%s'", c->watch, c->state);
        return fail_key(w, "state", "'%s' contains watch '%s'", c->state, c->watch);
    }
    if (path_inside(c->socket, c->watch))
        return fail_key(w, "socket", "'%s' is inside watch '%s'", c->socket, c->watch);
    if (c->metrics_textfile[0] && path_inside(c->metrics_textfile, c->watch))
        return fail_key(w, "metrics_textfile", "'%s' is inside watch '%s'", c->metrics_textfile,
                        c->watch);
    if (strlen(c->socket) > SOCKET_PATH_MAX) {
        const char *key = c->default_socket ? "state" : "socket";
        return fail_key(w, key,
                        "socket path '%s' is too long for a unix socket (at most %zu "
                        "bytes)%s",
                        c->socket, SOCKET_PATH_MAX,
                        c->default_socket ? "; set [daemon] socket" : "");
    }
    return 0;
}

/* small <= big for two chunker sizes, naming the key set later. */
static int check_order(const struct where *w, const char *small, uint64_t vs, const char *big,
                       uint64_t vb)
{
    char s[32], b[32];

    if (vs <= vb)
        return 0;
    format_size(vs, s, sizeof(s));
    format_size(vb, b, sizeof(b));
    if (blame_first(w, big, small))
        return fail_key(w, big, "%s is smaller than %s (%s)", b, small, s);
    return fail_key(w, small, "%s is larger than %s (%s)", s, big, b);
}

/* round(log2(v)) for 1 <= v <= CHUNK_SIZE_MAX, as fastcdc_init() computes. */
static unsigned round_log2(uint64_t v)
{
    unsigned b = 0;
    while (((uint64_t)2 << b) <= v)
        b++;
    if (v * v >= (uint64_t)1 << (2 * b + 1))
        b++;
    return b;
}

static int validate_chunker(const struct config *c, const struct where *w)
{
    char avg[32];
    int r = check_order(w, "min", c->chunk_min, "avg", c->chunk_avg);
    if (r == 0)
        r = check_order(w, "avg", c->chunk_avg, "max", c->chunk_max);
    if (r < 0)
        return r;
    unsigned bits = round_log2(c->chunk_avg), nc = c->normalization;
    if (nc <= bits && bits - nc >= CHUNK_MASK_BITS_MIN && bits + nc <= CHUNK_MASK_BITS_MAX)
        return 0;
    format_size(c->chunk_avg, avg, sizeof(avg));
    return fail_key(w, blame_first(w, "normalization", "avg") ? "normalization" : "avg",
                    "avg %s with normalization %u is outside what FastCDC supports "
                    "(log2(avg) +- normalization must stay within %u..%u)",
                    avg, nc, CHUNK_MASK_BITS_MIN, CHUNK_MASK_BITS_MAX);
}

/* [retention.RUN]: the run directory's name as the watcher sees it. */
static bool run_name_ok(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len >= CONFIG_RUN_MAX || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return false;
    return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == len;
}

/* Run names as the parser admits them, distinct (config_policy() takes the
 * first match). */
static int validate_retention(const struct config *c, const struct where *w)
{
    for (size_t i = 0; i < c->npolicies; i++) {
        if (!run_name_ok(c->policies[i].run))
            return fail_policy(w, c, i, NULL, "invalid run name");
        for (size_t j = 0; j < i; j++)
            if (strcmp(c->policies[i].run, c->policies[j].run) == 0)
                return fail_policy(w, c, i, NULL, "duplicate run section");
    }
    return 0;
}

/* An intent must outlive the clock difference both ways: a pruner whose
 * clock runs clock_skew ahead must not take a live intent for expired. */
static int validate_prune(const struct config *c, const struct where *w)
{
    char ttl[32], skew[32];

    /* validate_fields() bounded clock_skew to a day: 2 * clock_skew fits. */
    if (c->intent_ttl > 2 * c->clock_skew)
        return 0;
    format_duration(c->intent_ttl, ttl, sizeof(ttl));
    format_duration(c->clock_skew, skew, sizeof(skew));
    return fail_key(w, blame_first(w, "intent_ttl", "clock_skew") ? "intent_ttl" : "clock_skew",
                    "intent_ttl (%s) must be more than twice clock_skew (%s)", ttl, skew);
}

/* A key set in the file for a region of the other kind. */
static int validate_region_keys(const struct config *c, size_t i, const struct where *w)
{
    const struct region_conf *r = &c->regions[i];
    for (size_t k = 0; w->lines && k < NKEYS; k++) {
        const struct key_def *d = &config_keys[k];
        if (d->section == SEC_REGION && w->lines->region[i][k] && !(d->kinds & (1u << r->kind)))
            return fail_region(w, c, i, d->key,
                               "only valid for kind = %s (this region's kind "
                               "is %s)",
                               r->kind == REGION_KIND_S3 ? "dir" : "s3",
                               r->kind == REGION_KIND_S3 ? "s3" : "dir");
    }
    return 0;
}

/* Every name in copy_from is another configured region. */
static int validate_copy_from(const struct config *c, size_t i, const struct where *w)
{
    const char *v = c->regions[i].copy_from;
    if (!v[0] || !strcmp(v, "auto") || !strcmp(v, "none"))
        return 0;
    for (const char *p = v; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ", "), k = 0;
        while (n && k < c->nregions &&
               (strlen(c->regions[k].name) != n || memcmp(c->regions[k].name, p, n)))
            k++;
        if (n && (k == c->nregions || k == i))
            return fail_region(w, c, i, "copy_from", "'%.*s' is %s", (int)n, p,
                               k == i ? "this region itself" : "not a configured region");
        p += n;
    }
    return 0;
}

static int validate_region(const struct config *c, size_t i, const struct where *w)
{
    const struct region_conf *r = &c->regions[i];
    int ret = validate_region_keys(c, i, w);
    if (ret == 0)
        ret = validate_copy_from(c, i, w);
    if (ret < 0)
        return ret;
    if (r->kind == REGION_KIND_S3) {
        if (!r->endpoint[0])
            return fail_region(w, c, i, "endpoint", "missing (required for kind = s3)");
        if (!r->bucket[0])
            return fail_region(w, c, i, "bucket", "missing (required for kind = s3)");
        return 0;
    }
    if (!r->path[0])
        return fail_region(w, c, i, "path", "missing (required for kind = dir)");
    if (path_inside(r->path, c->watch))
        return fail_region(w, c, i, "path", "'%s' is inside watch '%s'", r->path, c->watch);
    for (size_t j = 0; j < i; j++) {
        const struct region_conf *o = &c->regions[j];
        if (o->kind == REGION_KIND_DIR && path_inside(r->path, o->path) &&
            path_inside(o->path, r->path))
            return fail_region(w, c, i, "path", "same directory as region %s", o->name);
    }
    return 0;
}

static int fail_no_region(const struct where *w)
{
    config_error(w->err, w->file, 0, NULL, NULL,
                 "no [region.NAME] section: a configuration file must name its regions (the "
                 "embedded default regions apply only when there is no configuration file)");
    return CKS_E_CONFIG;
}

/* One secret: a key file or a passphrase, not both (which would unlock
 * is not something to guess). */
static int validate_repository(const struct config *c, const struct where *w)
{
    if (c->key_file[0] && c->passphrase_file[0])
        return fail_key(w, "passphrase_file", "key_file is set too: give one secret, not both");
    return 0;
}

static int config_validate(const struct config *c, const struct where *w)
{
    int r = validate_fields(c, w);
    if (r == 0)
        r = validate_daemon(c, w);
    if (r == 0)
        r = validate_chunker(c, w);
    if (r == 0)
        r = validate_retention(c, w);
    if (r == 0)
        r = validate_prune(c, w);
    if (r == 0)
        r = validate_repository(c, w);
    /* A file that names no region would otherwise replicate into the
     * embedded a, b, c under state: "committed in 3 of 3 regions" on one
     * disk.  Those apply only when there is no file at all (w->lines is
     * set only while parsing one). */
    if (r == 0 && w->lines && c->default_regions)
        r = fail_no_region(w);
    for (size_t i = 0; r == 0 && i < c->nregions; i++)
        r = validate_region(c, i, w);
    if (r == 0 && c->quorum > c->nregions)
        r = fail_key(w, "quorum", "%u is more than the number of regions (%zu)", c->quorum,
                     c->nregions);
    return r;
}

/* ---- parsing ----------------------------------------------------------- */

static bool region_name_ok(const char *name, size_t len)
{
    if (len == 0 || len >= CONFIG_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

/* [region.NAME] opens: the first one replaces the embedded regions. */
static int region_open(struct parse_state *st, const char *name)
{
    struct config *c = &st->c;

    if (!region_name_ok(name, strlen(name)))
        return st_fail(st, NULL, "invalid region name (1 to %d characters of A-Z a-z 0-9 _ -)",
                       CONFIG_NAME_MAX - 1);
    if (c->default_regions) {
        c->default_regions = false;
        c->nregions = 0;
    }
    for (size_t i = 0; i < c->nregions; i++)
        if (strcmp(c->regions[i].name, name) == 0)
            return st_fail(st, NULL, "duplicate region (first defined on line %u)",
                           st->lines.header[i]);
    if (c->nregions == CONFIG_MAX_REGIONS)
        return st_fail(st, NULL, "too many regions (at most %d)", CONFIG_MAX_REGIONS);
    st->region = c->nregions++;
    region_default(&c->regions[st->region], name);
    st->lines.header[st->region] = st->lineno;
    return 1;
}

/* [retention.RUN] opens: a policy of its own, from the built-in defaults. */
static int policy_open(struct parse_state *st, const char *run)
{
    struct config *c = &st->c;

    if (!run_name_ok(run))
        return st_fail(st, NULL,
                       "invalid run name (1 to %d characters of A-Z a-z 0-9 . _ -, not . or ..)",
                       CONFIG_RUN_MAX - 1);
    for (size_t i = 0; i < c->npolicies; i++)
        if (strcmp(c->policies[i].run, run) == 0)
            return st_fail(st, NULL, "duplicate run section (first defined on line %u)",
                           st->lines.policy_header[i]);
    if (c->npolicies == CONFIG_MAX_POLICIES)
        return st_fail(st, NULL, "too many run sections (at most %d)", CONFIG_MAX_POLICIES);
    st->policy = c->npolicies++;
    policy_default(&c->policies[st->policy], run);
    st->lines.policy_header[st->policy] = st->lineno;
    return 1;
}

/* A "[name]" line as inih will see it. */
static int section_open(struct parse_state *st, const char *name, size_t len)
{
    static const struct {
        const char *name;
        enum section_id id;
    } fixed[] = {{"daemon", SEC_DAEMON},     {"chunker", SEC_CHUNKER},
                 {"compress", SEC_COMPRESS}, {"retention", SEC_RETENTION},
                 {"prune", SEC_PRUNE},       {"repository", SEC_REPOSITORY},
                 {"restore", SEC_RESTORE},   {"snapshot", SEC_SNAPSHOT}};

    st->prev_name_set = false;
    st->sec = SEC_NONE;
    st->policy = NO_POLICY;
    if (len >= sizeof(st->section))
        return st_fail_line(st, "section name too long");
    memcpy(st->section, name, len);
    st->section[len] = '\0';
    for (size_t i = 0; i < ARRAY_SIZE(fixed); i++) {
        if (strcmp(st->section, fixed[i].name) == 0) {
            st->sec = fixed[i].id;
            return 1;
        }
    }
    if (strncmp(st->section, "region.", 7) == 0) {
        st->sec = SEC_REGION;
        return region_open(st, st->section + 7);
    }
    if (strncmp(st->section, "retention.", 10) == 0) {
        st->sec = SEC_RETENTION;
        return policy_open(st, st->section + 10);
    }
    st->sec = SEC_UNKNOWN;
    return st_fail(st, NULL,
                   "unknown section (expected daemon, chunker, compress, retention, "
                   "retention.RUN, prune, repository, restore or region.NAME)");
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

/* Mirrors inih's treatment of one line (see ini.c's ini_parse_stream):
 * comment, continuation, section header or key.  line is NUL-terminated. */
static int line_classify(struct parse_state *st, const char *line)
{
    const char *start = line;
    const char *end = line + strlen(line);

    st->cur_continuation = false;
    if (st->lineno == 1 && !strncmp(start, "\xEF\xBB\xBF", 3))
        start += 3;
    while (end > start && is_space(end[-1]))
        end--;
    while (start < end && is_space(*start))
        start++;
    if (start == end || *start == ';' || *start == '#')
        return 1;
    if (st->prev_name_set && start > line) {
        st->cur_continuation = true;
        return 1;
    }
    if (*start != '[')
        return 1;
    /* inih's find_chars_or_comment(start + 1, "]") */
    bool was_space = false;
    const char *q = start + 1;
    for (; q < end && *q != ']'; q++) {
        if (was_space && *q == ';')
            return 1; /* no ']': inih reports a syntax error */
        was_space = is_space(*q);
    }
    if (q == end)
        return 1;
    const char *rest = q + 1;
    while (rest < end && is_space(*rest))
        rest++;
    if (rest < end && *rest != ';' && *rest != '#')
        return st_fail_line(st, "syntax error: text after ']'");
    return section_open(st, start + 1, (size_t)(q - (start + 1)));
}

/* The ini_reader: exactly one physical line per call, so inih's line
 * counter and ours agree.  Returns NULL at the end or after an error. */
static char *config_reader(char *str, int num, void *stream)
{
    struct parse_state *st = stream;

    if (st->fail_line || st->pos >= st->len)
        return NULL;
    if (num < 4) {
        st_fail_line(st, "inih line buffer too small");
        return NULL;
    }
    const char *line = st->text + st->pos;
    size_t avail = st->len - st->pos;
    const char *nl = memchr(line, '\n', avail);
    size_t len = nl ? (size_t)(nl - line) + 1 : avail;
    st->pos += len;
    st->lineno++;
    size_t content = len - (nl ? 1 : 0);
    if (content > 0 && line[content - 1] == '\r')
        content--;
    if (memchr(line, '\0', len)) {
        st_fail_line(st, "syntax error: NUL byte");
        return NULL;
    }
    if (content > (size_t)num - 3) {
        st_fail_line(st, "line too long (at most %d characters)", num - 3);
        return NULL;
    }
    memcpy(str, line, len);
    str[len] = '\0';
    if (!line_classify(st, str))
        return NULL;
    return str;
}

/* Our section must be what inih passes (cut to its buffer). */
static bool section_agrees(const struct parse_state *st, const char *section)
{
    size_t ours = st->sec == SEC_NONE ? 0 : strlen(st->section);
    if (ours > INIH_SECTION_MAX - 1)
        ours = INIH_SECTION_MAX - 1;
    return strlen(section) == ours && strncmp(section, st->section, ours) == 0;
}

static const char *key_list(enum section_id sec, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < NKEYS && n < size; i++) {
        if (config_keys[i].section != sec)
            continue;
        int w = snprintf(out + n, size - n, "%s%s", n ? ", " : "", config_keys[i].key);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return out;
}

/* The inih handler: one key = value. */
static int config_handler(void *user, const char *section, const char *name, const char *value)
{
    struct parse_state *st = user;
    char why[WHY_MAX];

    if (st->fail_line)
        return 0;
    if (!section_agrees(st, section))
        return st_fail(st, NULL, "syntax error");
    if (st->cur_continuation)
        return st_fail(st, name,
                       "indented line continues the value; multi-line values are not "
                       "supported");
    st->prev_name_set = name[0] != '\0';
    if (st->sec == SEC_NONE)
        return st_fail(st, name, "key outside any section");
    const struct key_def *d = key_find(st->sec, name);
    if (!d)
        return st_fail(st, name, "unknown key (expected one of: %s)",
                       key_list(st->sec, why, sizeof(why)));
    size_t k = key_index(d);
    unsigned *line = &st->lines.key[k];
    void *base = &st->c;
    if (st->sec == SEC_REGION) {
        line = &st->lines.region[st->region][k];
        base = &st->c.regions[st->region];
    } else if (st->sec == SEC_RETENTION && st->policy == NO_POLICY) {
        base = &st->c.retention;
    } else if (st->sec == SEC_RETENTION) {
        line = &st->lines.policy[st->policy][k];
        base = &st->c.policies[st->policy];
    }
    if (*line)
        return st_fail(st, name, "duplicate key (first set on line %u)", *line);
    why[0] = '\0';
    if (d->parse(d, value, (char *)base + d->offset, why) < 0)
        return st_fail(st, name, "%s", why);
    *line = st->lineno;
    if (d->section == SEC_DAEMON && strcmp(d->key, "socket") == 0)
        st->c.default_socket = false;
    return 1;
}

static int config_run(struct parse_state *st)
{
    int rc = ini_parse_stream(config_reader, st, config_handler, st);
    if (rc == -2) {
        config_error(st->err, st->file, 0, NULL, NULL, "%s", strerror(ENOMEM));
        return -ENOMEM;
    }
    if (rc > 0 && (!st->fail_line || (unsigned)rc < st->fail_line)) {
        config_error(st->err, st->file, (unsigned)rc, NULL, NULL,
                     "syntax error (expected \"key = value\" or \"[section]\")");
        return CKS_E_CONFIG;
    }
    if (st->fail_line || rc != 0)
        return CKS_E_CONFIG;
    const struct where w = {st->file, &st->lines, st->err};
    const struct key_def *state = global_key("state");
    int r = config_derive(&st->c, st->file, st->lines.key[key_index(state)], st->err);
    return r < 0 ? r : config_validate(&st->c, &w);
}

int config_parse(const char *name, const char *text, size_t len, struct config *c, struct buf *err)
{
    if (!name)
        name = "";
    if (strlen(name) >= sizeof(c->source)) {
        config_error(err, name, 0, NULL, NULL, "file name too long");
        return -ENAMETOOLONG;
    }
    struct parse_state *st = calloc(1, sizeof(*st));
    if (!st) {
        config_error(err, name, 0, NULL, NULL, "%s", strerror(ENOMEM));
        return -ENOMEM;
    }
    config_default(&st->c);
    memcpy(st->c.source, name, strlen(name) + 1);
    st->err = err;
    st->file = name;
    st->text = text;
    st->len = text ? len : 0;
    int r = config_run(st);
    if (r == 0)
        *c = st->c;
    free(st);
    return r;
}

int config_load(const char *path, struct config *c, struct buf *err)
{
    uint8_t *data = NULL;
    size_t len = 0;

    int r = fileio_read_all(path, CONFIG_FILE_MAX, &data, &len);
    if (r == CKS_E_LIMIT) {
        config_error(err, path, 0, NULL, NULL, "file is larger than %llu bytes",
                     (unsigned long long)CONFIG_FILE_MAX);
        return CKS_E_CONFIG;
    }
    if (r < 0) {
        config_error(err, path, 0, NULL, NULL, "%s", err_str(r));
        return r;
    }
    r = config_parse(path, (const char *)data, len, c, err);
    free(data);
    return r;
}

size_t config_warn_insecure(const struct config *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->nregions; i++) {
        const struct region_conf *r = &c->regions[i];
        if (r->kind != REGION_KIND_S3 || r->tls_verify)
            continue;
        log_warn("region %s: tls_verify = false: the server's TLS certificate is not checked, so "
                 "anyone on the network path can read or alter what is stored there",
                 r->name);
        n++;
    }
    return n;
}

int config_finish(struct config *c, struct buf *err)
{
    const struct where w = {c->source, NULL, err};
    if (!config_sane(c)) {
        config_error(err, NULL, 0, NULL, NULL, "corrupt configuration structure");
        return CKS_E_CONFIG;
    }
    int r = config_derive(c, c->source, 0, err);
    return r < 0 ? r : config_validate(c, &w);
}

/* ---- node identity ------------------------------------------------------ */

unsigned config_nodes(const struct config *c)
{
    return c->nodes ? c->nodes : 1;
}

/* A variable's value as a count in [min, max]: 1 taken, 0 unset, or
 * CKS_E_CONFIG naming it. */
static int env_uint(char *(*get)(const char *), const char *name, unsigned min, unsigned max,
                    unsigned *ret, struct buf *err)
{
    const char *v = get(name);
    uint64_t n = 0;
    size_t i = 0;
    if (!v || !*v)
        return 0;
    for (; v[i] >= '0' && v[i] <= '9' && n <= max; i++)
        n = n * 10 + (uint64_t)(v[i] - '0');
    if (v[i] || i > 5 || n < min || n > max) {
        config_error(err, NULL, 0, NULL, NULL, "$%s: '%.64s' is not a number in %u..%u", name, v,
                     min, max);
        return CKS_E_CONFIG;
    }
    *ret = (unsigned)n;
    return 1;
}

int config_nodes_env(struct config *c, char *(*get)(const char *name), struct buf *err)
{
    unsigned nodes = c->nodes, rank = c->node_rank;
    int a = 0, b = 0;
    if (!c->nodes) { /* the launcher's, where the file says nothing */
        a = env_uint(get, "SLURM_NNODES", 1, NODES_MAX, &nodes, err);
        b = a < 0 ? a : env_uint(get, "SLURM_NODEID", 0, NODES_MAX - 1, &rank, err);
    }
    if (a >= 0 && b >= 0)
        a = env_uint(get, "CKPTSYNC_NODES", 1, NODES_MAX, &nodes, err);
    if (a >= 0 && b >= 0)
        b = env_uint(get, "CKPTSYNC_NODE_RANK", 0, NODES_MAX - 1, &rank, err);
    if (a < 0 || b < 0)
        return CKS_E_CONFIG;
    if (!nodes)
        nodes = 1;
    if (rank >= nodes) {
        config_error(err, NULL, 0, NULL, NULL,
                     "node rank %u is not below the node count %u ([daemon] node_rank, nodes; "
                     "$CKPTSYNC_NODE_RANK, $CKPTSYNC_NODES; $SLURM_NODEID, $SLURM_NNODES)",
                     rank, nodes);
        return CKS_E_CONFIG;
    }
    c->nodes = nodes;
    c->node_rank = rank;
    return 0;
}
