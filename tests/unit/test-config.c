/*
 * test-config.c — defaults, a full valid file, every kind of error (each
 * message names file, line and key), sizes, durations, retention policies,
 * config_finish() after --state, config_load() on real files, and the
 * [daemon] metrics address and metrics_textfile.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sys/socket.h>

#include "base/config.h"
#include "base/err.h"
#include "engine/fastcdc.h"

#define NAME "test.conf"
#define NAME60 "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij"
#define DAY 86400ull

static struct config *cfg_new(void)
{
    struct config *c = malloc(sizeof(*c));
    assert_non_null(c);
    return c;
}

/* The text as written. */
static int parse_raw(const char *text, struct config *c, struct buf *err)
{
    buf_reset(err);
    return config_parse(NAME, text, strlen(text), c, err);
}

/* The text, with two dir regions appended when it names none (a file
 * must name its regions); appended last, so line numbers are unchanged. */
static int parse(const char *text, struct config *c, struct buf *err)
{
    if (strstr(text, "[region."))
        return parse_raw(text, c, err);
    struct buf full = BUF_INIT;
    assert_int_equal(buf_puts(&full, text), 0);
    assert_int_equal(buf_puts(&full, "[region.ra]\npath = /regions/ra\n"
                                     "[region.rb]\npath = /regions/rb\n"),
                     0);
    int r = parse_raw(buf_str(&full), c, err);
    buf_free(&full);
    return r;
}

static void test_defaults(void **state)
{
    struct config *c = cfg_new();
    config_default(c);
    assert_string_equal(c->source, "");
    assert_string_equal(c->watch, "/data/cloud_storage");
    assert_string_equal(c->state, "/var/lib/ckptsync");
    assert_string_equal(c->socket, "/var/lib/ckptsync/ckptsyncd.sock");
    assert_int_equal(c->quorum, 2);
    assert_int_equal(c->settle, 10);
    assert_int_equal(c->create_settle, 10);
    assert_int_equal(c->control_idle_timeout, 5);
    assert_int_equal(c->memory, 1u << 30);
    assert_int_equal(c->chunk_min, 1u << 19);
    assert_int_equal(c->chunk_avg, 2u << 20);
    assert_int_equal(c->chunk_max, 8u << 20);
    assert_int_equal(c->normalization, 1);
    assert_int_equal(c->zstd_level, 3);
    assert_true(c->derive_bf16);
    /* [retention]: no rule, so everything is kept; [prune] */
    assert_string_equal(c->retention.run, "");
    assert_int_equal(c->retention.keep_last, 0);
    assert_int_equal(c->retention.keep_every, 0);
    assert_int_equal(c->retention.keep_within, 0);
    assert_int_equal(c->retention.keep_best, 0);
    assert_string_equal(c->retention.best_metric, "eval_loss");
    assert_false(c->retention.best_max);
    assert_false(retention_policy_active(&c->retention));
    assert_int_equal(c->npolicies, 0);
    assert_ptr_equal(config_policy(c, "run1"), &c->retention);
    assert_ptr_equal(config_policy(c, ""), &c->retention);
    assert_ptr_equal(config_policy(c, NULL), &c->retention);
    assert_int_equal(c->prune_grace, 3600);
    assert_int_equal(c->prune_interval, 0);
    assert_int_equal(c->intent_ttl, 21600);
    assert_int_equal(c->clock_skew, 300);
    assert_int_equal(c->prune_lease, 900);
    assert_true(c->default_regions);
    assert_true(c->default_socket);
    assert_int_equal(c->nregions, 3);
    const char *names[] = {"a", "b", "c"};
    for (size_t i = 0; i < 3; i++) {
        const struct region_conf *r = &c->regions[i];
        char path[64];
        snprintf(path, sizeof(path), "/var/lib/ckptsync/regions/%s", names[i]);
        assert_string_equal(r->name, names[i]);
        assert_int_equal(r->kind, REGION_KIND_DIR);
        assert_string_equal(r->path, path);
        assert_string_equal(r->signing_region, "us-east-1");
        assert_false(r->virtual_hosted);
        assert_false(r->unsigned_payload);
        assert_true(r->tls_verify);
        assert_int_equal(r->connections, 16);
        assert_int_equal(r->bandwidth, 0);
        assert_false(r->no_preconditions); /* auto */
    }
    /* The embedded default is itself valid. */
    struct buf err = BUF_INIT;
    assert_int_equal(config_finish(c, &err), 0);
    buf_free(&err);
    free(c);
}

/* A file that names no region is refused, naming the file: the embedded
 * regions a, b, c apply only when there is no file at all.  Errors on a
 * line still come first. */
static void test_no_region(void **state)
{
    static const char *const files[] = {
        "",
        "; only a comment\n",
        "[daemon]\nwatch = /mnt/ckpt\nstate = /srv/cks\n",
        "[daemon]\nquorum = 1\n[retention]\nkeep_last = 3\n[prune]\ninterval = 1h\n",
        "[daemon]\nquorum = 5\n", /* not "more than the number of regions (3)" */
    };
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    (void)state;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        memset(c, 0x5a, sizeof(*c));
        if (parse_raw(files[i], c, &err) != CKS_E_CONFIG)
            fail_msg("file %zu: accepted without a region", i);
        assert_string_equal(buf_str(&err),
                            NAME ": no [region.NAME] section: a configuration file must name its "
                                 "regions (the embedded default regions apply only when there "
                                 "is no configuration file)");
        assert_int_equal(((unsigned char *)c)[0], 0x5a);
    }
    assert_int_equal(parse_raw("[daemon]\nquorum = x\n", c, &err), CKS_E_CONFIG);
    assert_non_null(strstr(buf_str(&err), NAME ":2: [daemon] quorum: 'x' is not a number"));
    assert_int_equal(parse_raw("[chunker]\nmin = 8M\n", c, &err), CKS_E_CONFIG);
    assert_non_null(strstr(buf_str(&err), NAME ":2: [chunker] min"));
    /* one region is enough (with a quorum it can meet) */
    assert_int_equal(parse_raw("[daemon]\nquorum = 1\n[region.a]\npath = /r\n", c, &err), 0);
    assert_false(c->default_regions);
    assert_int_equal(c->nregions, 1);
    buf_free(&err);
    free(c);
}

/* [chunker] is validated the way the chunker itself is (#13 item 2):
 * config_parse() (base/, which may not include engine/) accepts exactly
 * the bounds fastcdc_init() accepts, over a grid of sizes and every
 * normalization level, and with each accepted set FastCDC cuts a chunk of
 * at most max bytes before the end of the input (min = avg = max too). */
static void test_chunker_agrees_with_fastcdc(void **state)
{
    static const uint64_t sizes[] = {32,       64,        100,       128,          4096,
                                     1 << 16,  1 << 20,   2 << 20,   8 << 20,      32 << 20,
                                     64 << 20, 256 << 20, 512 << 20, (1 << 20) + 1};
    const size_t ns = sizeof(sizes) / sizeof(sizes[0]);
    static uint8_t data[1 << 20];
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    size_t accepted = 0;
    (void)state;
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)((i * 2654435761u) >> 13);
    for (size_t a = 0; a < ns; a++)
        for (size_t b = 0; b < ns; b++)
            for (size_t m = 0; m < ns; m++)
                for (unsigned nc = 0; nc <= 3; nc++) {
                    char text[256];
                    struct fastcdc cdc;
                    snprintf(text, sizeof(text),
                             "[chunker]\nmin = %llu\navg = %llu\nmax = %llu\n"
                             "normalization = %u\n",
                             (unsigned long long)sizes[a], (unsigned long long)sizes[b],
                             (unsigned long long)sizes[m], nc);
                    bool conf_ok = parse(text, c, &err) == 0;
                    bool cdc_ok = fastcdc_init(&cdc, sizes[a], sizes[b], sizes[m], nc) == 0;
                    if (conf_ok != cdc_ok)
                        fail_msg("min %llu avg %llu max %llu normalization %u: config %s, "
                                 "fastcdc_init %s (%s)",
                                 (unsigned long long)sizes[a], (unsigned long long)sizes[b],
                                 (unsigned long long)sizes[m], nc, conf_ok ? "accepts" : "refuses",
                                 cdc_ok ? "accepts" : "refuses", buf_str(&err));
                    if (!conf_ok)
                        continue;
                    accepted++;
                    assert_int_equal(c->chunk_min, sizes[a]);
                    assert_int_equal(c->chunk_max, sizes[m]);
                    if (sizes[m] <= sizeof(data)) {
                        size_t cut = fastcdc_cut(&cdc, data, sizes[m], false);
                        if (cut == 0 || cut > sizes[m])
                            fail_msg("min %llu avg %llu max %llu: no cut in max bytes (%zu)",
                                     (unsigned long long)sizes[a], (unsigned long long)sizes[b],
                                     (unsigned long long)sizes[m], cut);
                    }
                }
    assert_true(accepted > 100);
    buf_free(&err);
    free(c);
}

static const char full_file[] = "\xEF\xBB\xBF; ckptsync configuration\r\n"
                                "# both comment styles\n"
                                "[daemon]\n"
                                "watch = /mnt/ckpt\n"
                                "state = /srv/ckptsync   ; inline comment\n"
                                "socket = /run/ckptsyncd.sock\n"
                                "quorum = 3\n"
                                "settle: 30\n"
                                "memory = 2G\n"
                                "\n"
                                "[chunker]\n"
                                "min = 512K\n"
                                "avg = 2M\n"
                                "max = 8M\n"
                                "normalization = 2\n"
                                "[compress]\n"
                                "level = 19\n"
                                "derive_bf16 = off\n"
                                "[region.local]\n"
                                "kind = dir\n"
                                "path = /nas/ckpt\n"
                                "connections = 4\n"
                                "[region.aws-us_1]\n"
                                "kind = s3\n"
                                "endpoint = https://s3.us-west-2.amazonaws.com\n"
                                "bucket = my-bucket\n"
                                "prefix = team/run\n"
                                "region = us-west-2\n"
                                "addressing = virtual\n"
                                "payload = unsigned\n"
                                "credentials = /etc/ckptsync/aws.cred\n"
                                "tls_verify = off\n"
                                "ca_file = /etc/ssl/ca.pem\n"
                                "connections = 64\n"
                                "bandwidth = 100M\n"
                                "[region.minio]\n"
                                "kind = S3\n"
                                "endpoint = http://10.0.0.5:9000\n"
                                "bucket = ckpt\n";

static void test_full_file(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;

    int r = parse(full_file, c, &err);
    if (r != 0)
        fail_msg("unexpected error: %s", buf_str(&err));
    assert_string_equal(c->source, NAME);
    assert_string_equal(c->watch, "/mnt/ckpt");
    assert_string_equal(c->state, "/srv/ckptsync");
    assert_string_equal(c->socket, "/run/ckptsyncd.sock");
    assert_false(c->default_socket);
    assert_int_equal(c->quorum, 3);
    assert_int_equal(c->settle, 30);
    assert_int_equal(c->memory, 2ull << 30);
    assert_int_equal(c->chunk_min, 512u << 10);
    assert_int_equal(c->chunk_avg, 2u << 20);
    assert_int_equal(c->chunk_max, 8u << 20);
    assert_int_equal(c->normalization, 2);
    assert_int_equal(c->zstd_level, 19);
    assert_false(c->derive_bf16);
    assert_false(c->default_regions);
    assert_int_equal(c->nregions, 3);

    const struct region_conf *d = &c->regions[0];
    assert_string_equal(d->name, "local");
    assert_int_equal(d->kind, REGION_KIND_DIR);
    assert_string_equal(d->path, "/nas/ckpt");
    assert_int_equal(d->connections, 4);

    const struct region_conf *s = &c->regions[1];
    assert_string_equal(s->name, "aws-us_1");
    assert_int_equal(s->kind, REGION_KIND_S3);
    assert_string_equal(s->path, "");
    assert_string_equal(s->endpoint, "https://s3.us-west-2.amazonaws.com");
    assert_string_equal(s->bucket, "my-bucket");
    assert_string_equal(s->prefix, "team/run");
    assert_string_equal(s->signing_region, "us-west-2");
    assert_true(s->virtual_hosted);
    assert_true(s->unsigned_payload);
    assert_string_equal(s->credentials, "/etc/ckptsync/aws.cred");
    assert_false(s->tls_verify);
    assert_string_equal(s->ca_file, "/etc/ssl/ca.pem");
    assert_int_equal(s->connections, 64);
    assert_int_equal(s->bandwidth, 100u << 20);

    const struct region_conf *m = &c->regions[2];
    assert_string_equal(m->name, "minio");
    assert_int_equal(m->kind, REGION_KIND_S3);
    assert_string_equal(m->signing_region, "us-east-1");
    assert_false(m->virtual_hosted);
    assert_false(m->unsigned_payload);
    assert_true(m->tls_verify);
    assert_int_equal(m->connections, 16);
    assert_int_equal(m->bandwidth, 0);
    buf_free(&err);
    free(c);
}

/* Valid files that exercise one rule each. */
static void test_valid_small(void **state)
{
    static const char *const files[] = {
        /* state moves: the default socket follows it */
        "[daemon]\nstate = /srv/x/\n",
        /* a 63-byte region name (longer than inih's own section buffer) */
        "[region." NAME60 "012]\npath = /r\n"
        "[daemon]\nquorum = 1\n",
        /* an empty [daemon] section, CRLF, comments, key: value */
        "[daemon]\r\n[daemon]\r\n; x\r\nquorum: 1\r\n",
        /* boolean spellings */
        "[region.a]\nkind=s3\nendpoint=http://h\nbucket=b\ntls_verify=YES\n"
        "[region.b]\nkind=s3\nendpoint=http://h\nbucket=b\ntls_verify=0\n",
        /* watch at the root of a filesystem, state elsewhere */
        "[daemon]\nwatch = /data\nstate = /var/lib/x\n",
        /* a prefix of watch that is not a parent of it */
        "[daemon]\nwatch = /data/cloud\nstate = /data/cloud_state\n",
        /* the largest avg FastCDC takes without normalization */
        "[chunker]\navg = 32M\nmax = 64M\nnormalization = 0\n",
        /* same-looking section names inih would cut differently */
        "[region." NAME60 "01]\npath = /r/1\n[region." NAME60 "02]\npath = /r/2\n",
    };
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (parse(files[i], c, &err) != 0)
            fail_msg("file %zu: unexpected error: %s", i, buf_str(&err));
    }
    assert_int_equal(parse(files[0], c, &err), 0);
    assert_false(c->default_regions);
    assert_string_equal(c->regions[1].path, "/regions/rb");
    assert_string_equal(c->socket, "/srv/x/ckptsyncd.sock");
    assert_int_equal(parse(files[1], c, &err), 0);
    assert_int_equal(c->nregions, 1);
    assert_string_equal(c->regions[0].name, NAME60 "012");
    assert_int_equal(strlen(c->regions[0].name), CONFIG_NAME_MAX - 1);
    buf_free(&err);
    free(c);
}

/* Keys whose value is a word or a bounded number: what each gives. */
struct value_case {
    const char *text;
    bool no_preconditions; /* of regions[0] */
    unsigned create_settle;
    unsigned control_idle_timeout;
};

static const struct value_case value_cases[] = {
    {"[region.x]\npath = /r\n", false, 10, 5},
    {"[region.x]\npath = /r\npreconditions = auto\n", false, 10, 5},
    {"[region.x]\npath = /r\npreconditions = none\n", true, 10, 5},
    {"[region.x]\npath = /r\npreconditions = NONE\n", true, 10, 5},
    {"[region.x]\npath = /r\npreconditions = Auto\n", false, 10, 5},
    {"[region.x]\nkind = s3\nendpoint = http://h\nbucket = b\npreconditions = none\n", true, 10, 5},
    {"[daemon]\ncreate_settle = 1\n[region.x]\npath = /r\n[daemon]\nquorum = 1\n", false, 1, 5},
    {"[daemon]\ncreate_settle = 600\nquorum = 1\n[region.x]\npath = /r\n", false, 600, 5},
    {"[daemon]\ncreate_settle: 30\nquorum = 1\n[region.x]\npath = /r\npreconditions = none\n", true,
     30, 5},
    {"[daemon]\ncontrol_idle_timeout = 1\n[region.x]\npath = /r\n", false, 10, 1},
    {"[daemon]\ncontrol_idle_timeout = 3600\n[region.x]\npath = /r\n", false, 10, 3600},
};

static void test_values(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    for (size_t i = 0; i < sizeof(value_cases) / sizeof(value_cases[0]); i++) {
        const struct value_case *v = &value_cases[i];
        /* one region: the default quorum of 2 would be refused */
        struct buf text = BUF_INIT;
        assert_int_equal(buf_puts(&text, v->text), 0);
        if (!strstr(v->text, "quorum"))
            assert_int_equal(buf_puts(&text, "[daemon]\nquorum = 1\n"), 0);
        int r = parse(buf_str(&text), c, &err);
        if (r != 0)
            fail_msg("case %zu: unexpected error: %s", i, buf_str(&err));
        assert_int_equal(c->nregions, 1);
        if (c->regions[0].no_preconditions != v->no_preconditions)
            fail_msg("case %zu: no_preconditions %d, want %d", i, c->regions[0].no_preconditions,
                     v->no_preconditions);
        if (c->create_settle != v->create_settle)
            fail_msg("case %zu: create_settle %u, want %u", i, c->create_settle, v->create_settle);
        if (c->control_idle_timeout != v->control_idle_timeout)
            fail_msg("case %zu: control_idle_timeout %u, want %u", i, c->control_idle_timeout,
                     v->control_idle_timeout);
        buf_free(&text);
    }
    /* each region has its own mode */
    assert_int_equal(parse("[region.a]\npath = /r/a\npreconditions = none\n"
                           "[region.b]\npath = /r/b\n",
                           c, &err),
                     0);
    assert_true(c->regions[0].no_preconditions);
    assert_false(c->regions[1].no_preconditions);
    buf_free(&err);
    free(c);
}

/* Every [retention] and [prune] key; a run's section replaces the default. */
static void test_retention(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    static const char text[] = "[retention]\n"
                               "keep_last = 3\n"
                               "keep_every = 1000\n"
                               "keep_within = 7d\n"
                               "keep_best = 2\n"
                               "best_metric = eval/accuracy\n"
                               "best_mode = max\n"
                               "[retention.llama-7b_v2.1]\n"
                               "keep_last = 5\n"
                               "[retention.bare]\n"
                               "[prune]\n"
                               "grace = 0\n"
                               "interval = 15m\n"
                               "intent_ttl = 12h\n"
                               "clock_skew = 90s\n"
                               "lease = 600\n"
                               "[retention]\n"
                               "; [retention] may be reopened, like [daemon]\n";

    int r = parse(text, c, &err);
    if (r != 0)
        fail_msg("unexpected error: %s", buf_str(&err));
    const struct retention_policy *p = &c->retention;
    assert_string_equal(p->run, "");
    assert_int_equal(p->keep_last, 3);
    assert_int_equal(p->keep_every, 1000);
    assert_int_equal(p->keep_within, 7 * DAY);
    assert_int_equal(p->keep_best, 2);
    assert_string_equal(p->best_metric, "eval/accuracy");
    assert_true(p->best_max);
    assert_true(retention_policy_active(p));

    /* The run's section starts from the built-in defaults, not [retention]. */
    assert_int_equal(c->npolicies, 2);
    const struct retention_policy *q = config_policy(c, "llama-7b_v2.1");
    assert_ptr_equal(q, &c->policies[0]);
    assert_string_equal(q->run, "llama-7b_v2.1");
    assert_int_equal(q->keep_last, 5);
    assert_int_equal(q->keep_every, 0);
    assert_int_equal(q->keep_within, 0);
    assert_int_equal(q->keep_best, 0);
    assert_string_equal(q->best_metric, "eval_loss");
    assert_false(q->best_max);
    assert_true(retention_policy_active(q));
    /* An empty run section keeps everything for that run. */
    const struct retention_policy *b = config_policy(c, "bare");
    assert_ptr_equal(b, &c->policies[1]);
    assert_false(retention_policy_active(b));
    /* Other runs (names are case-sensitive) get [retention]. */
    assert_ptr_equal(config_policy(c, "Bare"), &c->retention);
    assert_ptr_equal(config_policy(c, "other"), &c->retention);

    assert_int_equal(c->prune_grace, 0);
    assert_int_equal(c->prune_interval, 900);
    assert_int_equal(c->intent_ttl, 12 * 3600);
    assert_int_equal(c->clock_skew, 90);
    assert_int_equal(c->prune_lease, 600);

    /* One rule alone makes a policy active; bounds are inclusive. */
    static const char *const active[] = {
        "[retention]\nkeep_last = 1000000\n",
        "[retention]\nkeep_every = 1000000000000\n",
        "[retention]\nkeep_within = 1\n",
        "[retention]\nkeep_best = 1\nbest_mode = MIN\n",
    };
    for (size_t i = 0; i < sizeof(active) / sizeof(active[0]); i++) {
        if (parse(active[i], c, &err) != 0)
            fail_msg("case %zu: unexpected error: %s", i, buf_str(&err));
        if (!retention_policy_active(&c->retention))
            fail_msg("case %zu: policy not active", i);
    }
    assert_false(c->retention.best_max);

    /* Run names: 63 bytes (longer than inih's section buffer), dots, and
     * two names inih would cut to the same section. */
    assert_int_equal(parse("[retention." NAME60 "012]\nkeep_last = 1\n"
                           "[retention." NAME60 "01]\nkeep_last = 2\n"
                           "[retention...x]\nkeep_last = 3\n",
                           c, &err),
                     0);
    assert_int_equal(c->npolicies, 3);
    assert_int_equal(config_policy(c, NAME60 "012")->keep_last, 1);
    assert_int_equal(config_policy(c, NAME60 "01")->keep_last, 2);
    assert_int_equal(config_policy(c, "..x")->keep_last, 3);

    /* Durations at the ends of their ranges. */
    assert_int_equal(parse("[prune]\nintent_ttl = 30d\nclock_skew = 1d\nlease = 30\n", c, &err), 0);
    assert_int_equal(c->intent_ttl, 30 * DAY);
    assert_int_equal(c->clock_skew, DAY);
    assert_int_equal(c->prune_lease, 30);
    assert_int_equal(parse("[prune]\nintent_ttl = 1m\nclock_skew = 0\nlease = 1d\n", c, &err), 0);
    assert_int_equal(c->intent_ttl, 60);
    assert_int_equal(c->clock_skew, 0);
    assert_int_equal(c->prune_lease, DAY);
    /* intent_ttl just above twice clock_skew */
    assert_int_equal(parse("[prune]\nintent_ttl = 601\nclock_skew = 5m\n", c, &err), 0);
    buf_free(&err);
    free(c);
}

static void test_too_many_policies(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    struct buf text = BUF_INIT;

    for (int i = 0; i < CONFIG_MAX_POLICIES; i++)
        buf_printf(&text, "[retention.run%d]\nkeep_last = %d\n", i, i + 1);
    assert_int_equal(parse(buf_str(&text), c, &err), 0);
    assert_int_equal(c->npolicies, CONFIG_MAX_POLICIES);
    assert_int_equal(config_policy(c, "run15")->keep_last, 16);
    buf_printf(&text, "[retention.run%d]\n", CONFIG_MAX_POLICIES);
    assert_int_equal(parse(buf_str(&text), c, &err), CKS_E_CONFIG);
    char want[80];
    snprintf(want, sizeof(want), NAME ":%d: [retention.run%d]: too many run sections (at most %d)",
             2 * CONFIG_MAX_POLICIES + 1, CONFIG_MAX_POLICIES, CONFIG_MAX_POLICIES);
    assert_string_equal(buf_str(&err), want);
    buf_free(&text);
    buf_free(&err);
    free(c);
}

struct err_case {
    const char *text;
    int line;         /* expected line, 0 = none in the message */
    const char *key;  /* must appear in the message ("[section]" or key) */
    const char *what; /* must appear in the message */
};

#define LONG40 "0123456789012345678901234567890123456789"

static const struct err_case err_cases[] = {
    /* [snapshot] file_digest */
    {"[snapshot]\nfile_digest = md5\n", 2, "[snapshot] file_digest", "not a file digest kind"},
    {"[snapshot]\nfile_digest = tree sha256\n", 2, "file_digest", "(tree or sha256)"},
    {"[snapshot]\nfile_digest =\n", 2, "file_digest", "not a file digest kind"},
    {"[snapshot]\ndigest = tree\n", 2, "[snapshot] digest", "unknown key"},
    /* [restore] order */
    {"[restore]\norder = weights\n", 2, "[restore] order", "not GROUP:PATTERN"},
    {"[restore]\norder = weights:*.bin model:*.pt\n", 2, "model:*.pt", "not GROUP:PATTERN"},
    {"[restore]\norder = optimizer:\n", 2, "order", "not GROUP:PATTERN"},
    {"[restore]\norder = :*.pt\n", 2, "order", "not GROUP:PATTERN"},
    {"[restore]\nfoo = 1\n", 2, "foo", "unknown key"},
    {"[foo]\nx = 1\n", 1, "[foo]", "unknown section"},
    {"[region]\n", 1, "[region]", "unknown section"},
    {"quorum = 1\n", 1, "quorum", "outside any section"},
    {"[daemon]\nfoo = 1\n", 2, "[daemon] foo", "unknown key"},
    {"[daemon]\nQuorum = 1\n", 2, "Quorum", "unknown key"},
    {"[region.a]\npath = /r\nendpont = x\n", 3, "[region.a] endpont", "unknown key"},
    {"[region.a]\npath = /r\ncopy_from = b;c\n", 3, "copy_from", "not auto, none or a list"},
    {"[region.a]\npath = /r\ncopy_from = b\n[region.b]\npath = /s\ncopy_from = zz\n", 6,
     "copy_from", "'zz' is not a configured region"},
    {"[region.a]\npath = /r\ncopy_from = a\n", 3, "copy_from", "this region itself"},
    {"[daemon]\nquorum = 1\nquorum = 1\n", 3, "[daemon] quorum",
     "duplicate key (first set on line 2)"},
    {"[daemon]\nsettle = 1\n[chunker]\n[daemon]\nsettle = 2\n", 5, "settle", "duplicate key"},
    {"[region.a]\npath = /r/a\npath = /r/b\n", 3, "[region.a] path", "duplicate key"},
    {"[region.a]\npath = /r/a\n[region.a]\npath = /r/b\n", 3, "[region.a]", "duplicate region"},
    {"[region.a b]\npath = /r\n", 1, "[region.a b]", "invalid region name"},
    {"[region.]\n", 1, "[region.]", "invalid region name"},
    {"[region." NAME60 "0123]\n", 1, "[region." NAME60 "0123]", "invalid region name"},
    {"[daemon]\nquorum = two\n", 2, "quorum", "'two' is not a number"},
    {"[daemon]\nquorum = -1\n", 2, "quorum", "not a number"},
    {"[daemon]\nquorum = 99999999999999999999999\n", 2, "quorum", "not a number"},
    {"[daemon]\nquorum = 0\n", 2, "quorum", "out of range"},
    {"[daemon]\nquorum = 3\n[region.a]\npath = /r/a\n[region.b]\npath = /r/b\n", 2,
     "[daemon] quorum", "3 is more than the number of regions (2)"},
    {"[region.a]\npath = /r/a\n", 0, "[daemon] quorum", "more than the number of regions (1)"},
    {"[daemon]\nsettle = 1d\n", 2, "settle", "not a number"},
    {"[daemon]\nmemory = 4X\n", 2, "memory", "'4X' is not a size"},
    {"[daemon]\nmemory = -1\n", 2, "memory", "not a size"},
    {"[daemon]\nmemory =\n", 2, "memory", "not a size"},
    {"[daemon]\nmemory = 1K\n", 2, "memory", "too small"},
    {"[chunker]\nmin = 8M\n", 2, "[chunker] min", "8M is larger than avg (2M)"},
    {"[chunker]\navg = 1M\nmin = 2M\n", 3, "[chunker] min", "larger than avg"},
    {"[chunker]\nmin = 2M\navg = 1M\n", 3, "[chunker] avg", "1M is smaller than min (2M)"},
    {"[chunker]\nmax = 1M\n", 2, "[chunker] max", "1M is smaller than avg (2M)"},
    {"[chunker]\navg = 32M\nmax = 64M\n", 2, "[chunker] avg",
     "avg 32M with normalization 1 is outside what FastCDC supports"},
    {"[chunker]\nmin = 32\n", 2, "min", "out of range (64 to 256M)"},
    {"[chunker]\nmax = 512M\n", 2, "max", "out of range"},
    {"[chunker]\nnormalization = 4\n", 2, "normalization", "out of range (0 to 3)"},
    {"[chunker]\nmin = 64\navg = 64\nmax = 64\nnormalization = 2\n", 5, "normalization", "FastCDC"},
    {"[compress]\nlevel = 0\n", 2, "[compress] level", "out of range (1 to 19)"},
    {"[compress]\nlevel = 20\n", 2, "level", "out of range"},
    {"[compress]\nderive_bf16 = maybe\n", 2, "[compress] derive_bf16", "'maybe' is not on or off"},
    {"[region.a]\nkind = s3\nendpoint = http://h\nbucket = b\ntls_verify = maybe\n", 5,
     "tls_verify", "not a boolean"},
    {"[region.a]\nkind = nfs\n", 2, "kind", "not a region kind"},
    {"[region.a]\nkind = s3\naddressing = host\n", 3, "addressing", "not an addressing style"},
    {"[region.a]\nkind = s3\npayload = maybe\n", 3, "payload", "not a payload"},
    {"[region.a]\nkind = s3\nendpoint = s3.example.com\n", 3, "endpoint", "not an http"},
    {"[region.a]\nkind = dir\n", 1, "[region.a] path", "missing (required for kind = dir)"},
    {"[region.a]\n[region.b]\npath = /r\n", 1, "[region.a] path", "missing"},
    {"[region.a]\nkind = s3\nbucket = b\n", 1, "[region.a] endpoint", "missing"},
    {"[region.a]\nkind = s3\nendpoint = https://h\n", 1, "[region.a] bucket", "missing"},
    {"[region.a]\npath = /r\nendpoint = https://h\n", 3, "[region.a] endpoint",
     "only valid for kind = s3 (this region's kind is dir)"},
    {"[region.a]\npath = /r\nkind = s3\nendpoint = https://h\nbucket = b\n", 2, "[region.a] path",
     "only valid for kind = dir"},
    {"[region.a]\npath = r/a\n", 2, "[region.a] path", "not an absolute path"},
    {"[region.a]\npath = /data/cloud_storage/r\n", 2, "[region.a] path", "inside watch"},
    {"[region.a]\npath = /r\n[region.b]\npath = /r/\n", 4, "[region.b] path",
     "same directory as region a"},
    {"[daemon]\nwatch = data\n", 2, "[daemon] watch", "not an absolute path"},
    {"[daemon]\nstate = \n", 2, "state", "not an absolute path"},
    {"[daemon]\nsocket = run/x.sock\n", 2, "socket", "not an absolute path"},
    {"[daemon]\nwatch = /data\nstate = /data/state\n", 3, "[daemon] state", "inside watch"},
    {"[daemon]\nwatch = /data\nstate = /data/x/../../data\n", 3, "state", "inside watch"},
    {"[daemon]\nstate = /srv\nwatch = /srv/w\n", 3, "[daemon] watch", "inside state"},
    {"[daemon]\nwatch = /\n", 2, "[daemon] watch", "'/' contains state '/var/lib/ckptsync'"},
    {"[daemon]\nstate = /data\n", 2, "[daemon] state", "contains watch"},
    {"[daemon]\nsocket = /data/cloud_storage/s\n", 2, "socket", "inside watch"},
    {"[daemon]\nstate = /" LONG40 "/" LONG40 "/" LONG40 "\n", 2, "[daemon] state",
     "too long for a unix socket"},
    {"[region.a]\nkind = s3\nregion = " LONG40 LONG40 "\n", 3, "[region.a] region",
     "value too long"},
    {"[region.a]\nkind = s3\nbucket = a b\n", 3, "bucket", "must not contain"},
    {"[region.a]\nkind = s3\nprefix = a\x01\n", 3, "prefix", "control character"},
    {"[daemon]\nwatch = /" LONG40 LONG40 LONG40 LONG40 LONG40 "\n", 2, NULL, "line too long"},
    {"[daemon]\nwatch = /a\n  /b\n", 3, "[daemon] watch", "multi-line values are not supported"},
    {"[daemon]\nwatch\n", 2, NULL, "syntax error"},
    {"[daemon\nwatch = /a\n", 1, NULL, "syntax error"},
    {"[daemon]\nbad line\nfoo = 1\n", 2, NULL, "syntax error"},
    {"[daemon] x\n", 1, NULL, "syntax error: text after ']'"},
    /* [region.X] preconditions = auto|none */
    {"[region.x]\npath = /r\npreconditions = sometimes\n", 3, "[region.x] preconditions",
     "'sometimes' is not a preconditions mode (auto or none)"},
    {"[region.x]\nkind = s3\nendpoint = http://h\nbucket = b\npreconditions = off\n", 5,
     "[region.x] preconditions", "not a preconditions mode"},
    {"[region.x]\npath = /r\npreconditions =\n", 3, "[region.x] preconditions",
     "'' is not a preconditions mode"},
    {"[region.x]\npath = /r\npreconditions = none\npreconditions = auto\n", 4,
     "[region.x] preconditions", "duplicate key (first set on line 3)"},
    {"[daemon]\npreconditions = none\n", 2, "[daemon] preconditions", "unknown key"},
    /* [daemon] create_settle, 1..600 seconds */
    {"[daemon]\ncreate_settle = 0\n", 2, "[daemon] create_settle", "0 is out of range (1 to 600)"},
    {"[daemon]\ncreate_settle = 601\n", 2, "[daemon] create_settle",
     "601 is out of range (1 to 600)"},
    {"[daemon]\ncreate_settle = 99999999999999999999\n", 2, "create_settle", "not a number"},
    {"[daemon]\ncreate_settle = 10s\n", 2, "create_settle", "'10s' is not a number"},
    {"[daemon]\ncreate_settle = -1\n", 2, "create_settle", "not a number"},
    {"[daemon]\ncreate_settle = 5\ncreate_settle = 5\n", 3, "[daemon] create_settle",
     "duplicate key"},
    {"[region.x]\npath = /r\ncreate_settle = 5\n", 3, "[region.x] create_settle", "unknown key"},
    /* [daemon] control_idle_timeout, 1..3600 seconds */
    {"[daemon]\ncontrol_idle_timeout = 0\n", 2, "[daemon] control_idle_timeout",
     "0 is out of range (1 to 3600)"},
    {"[daemon]\ncontrol_idle_timeout = 3601\n", 2, "[daemon] control_idle_timeout",
     "3601 is out of range (1 to 3600)"},
    {"[daemon]\ncontrol_idle_timeout = 5s\n", 2, "control_idle_timeout", "'5s' is not a number"},
    /* [retention], [retention.RUN] */
    {"[retention]\nkeep_last = many\n", 2, "[retention] keep_last", "'many' is not a number"},
    {"[retention]\nkeep_last = 1000001\n", 2, "[retention] keep_last",
     "1000001 is out of range (0 to 1000000)"},
    {"[retention]\nkeep_best = -1\n", 2, "[retention] keep_best", "not a number"},
    {"[retention]\nkeep_every = 1000000000001\n", 2, "[retention] keep_every",
     "out of range (0 to 1000000000000)"},
    {"[retention]\nkeep_every = 1k\n", 2, "keep_every", "not a number"},
    {"[retention]\nkeep_within = 3X\n", 2, "[retention] keep_within",
     "'3X' is not a duration (like 90s, 15m, 6h, 7d)"},
    {"[retention]\nbest_mode = maximum\n", 2, "[retention] best_mode",
     "'maximum' is not a best mode (min or max)"},
    {"[retention.r1]\nbest_mode =\n", 2, "[retention.r1] best_mode", "not a best mode"},
    {"[retention]\nbest_metric =\n", 2, "[retention] best_metric", "'' is not a metric name"},
    {"[retention]\nbest_metric = eval loss\n", 2, "best_metric", "not a metric name"},
    {"[retention]\nbest_metric = " LONG40 LONG40 "\n", 2, "best_metric", "value too long"},
    {"[retention]\nkeep_last = 1\nkeep_last = 2\n", 3, "[retention] keep_last",
     "duplicate key (first set on line 2)"},
    {"[retention]\nkeep_last = 1\n[prune]\n[retention]\nkeep_last = 2\n", 5, "keep_last",
     "duplicate key"},
    {"[retention.r]\nkeep_last = 1\nkeep_last = 2\n", 3, "[retention.r] keep_last",
     "duplicate key"},
    {"[retention.r]\nkeep_last = 1\n[retention.r]\nkeep_last = 2\n", 3, "[retention.r]",
     "duplicate run section (first defined on line 1)"},
    {"[retention]\nkeep = 1\n", 2, "[retention] keep", "unknown key (expected one of: keep_last"},
    {"[retention.r]\ngrace = 1\n", 2, "[retention.r] grace", "unknown key"},
    {"[retention.a b]\n", 1, "[retention.a b]", "invalid run name"},
    {"[retention.a/b]\n", 1, "[retention.a/b]", "invalid run name"},
    {"[retention.]\n", 1, "[retention.]", "invalid run name"},
    {"[retention..]\n", 1, "[retention..]", "invalid run name"},
    {"[retention...]\n", 1, "[retention...]", "invalid run name"},
    {"[retention." NAME60 "0123]\n", 1, "[retention." NAME60 "0123]", "invalid run name"},
    {"[retentions]\n", 1, "[retentions]", "unknown section"},
    {"[Retention]\n", 1, "[Retention]", "unknown section"},
    /* [prune] */
    {"[prune]\ngrace = 3X\n", 2, "[prune] grace", "'3X' is not a duration (like 90s, 15m, 6h, 7d)"},
    {"[prune]\ngrace = -1\n", 2, "grace", "not a duration"},
    {"[prune]\ngrace = 1h30m\n", 2, "grace", "not a duration"},
    {"[prune]\ngrace = 6H\n", 2, "grace", "not a duration"},
    {"[prune]\ngrace = 5 m\n", 2, "grace", "not a duration"},
    {"[prune]\ngrace =\n", 2, "grace", "not a duration"},
    {"[prune]\ninterval = 213503982334602d\n", 2, "[prune] interval", "not a duration"},
    {"[prune]\nintent_ttl = 59\n", 2, "[prune] intent_ttl", "59 is out of range (1m to 30d)"},
    {"[prune]\nintent_ttl = 31d\n", 2, "intent_ttl", "31d is out of range (1m to 30d)"},
    {"[prune]\nclock_skew = 25h\n", 2, "[prune] clock_skew", "25h is out of range (0 to 1d)"},
    {"[prune]\nlease = 29s\n", 2, "[prune] lease", "29 is out of range (30 to 1d)"},
    {"[prune]\nlease = 2d\n", 2, "lease", "out of range"},
    {"[prune]\ngrace = 1\ngrace = 2\n", 3, "[prune] grace", "duplicate key"},
    {"[prune]\nttl = 1\n", 2, "[prune] ttl", "unknown key (expected one of: grace, interval"},
    {"[prune]\nintent_ttl = 10m\n", 2, "[prune] intent_ttl",
     "intent_ttl (10m) must be more than twice clock_skew (5m)"},
    {"[prune]\nintent_ttl = 1h\nclock_skew = 30m\n", 3, "[prune] clock_skew",
     "intent_ttl (1h) must be more than twice clock_skew (30m)"},
    {"[prune]\nclock_skew = 1d\n[daemon]\n[prune]\nintent_ttl = 2d\n", 5, "[prune] intent_ttl",
     "must be more than twice clock_skew (1d)"},
    {"[prune]\nclock_skew = 4h\n", 2, "[prune] clock_skew",
     "intent_ttl (6h) must be more than twice clock_skew (4h)"},
    /* [daemon] metrics, metrics_textfile */
    {"[daemon]\nmetrics = :9477\n", 2, "[daemon] metrics",
     "':9477' is not a listening address (PORT or HOST:PORT with a numeric HOST, e.g. "
     "127.0.0.1:9477 or 0.0.0.0:9477 for every interface; or off)"},
    {"[daemon]\nmetrics = example.com:9477\n", 2, "[daemon] metrics", "not a listening address"},
    {"[daemon]\nmetrics = 127.0.0.1\n", 2, "metrics", "not a listening address"},
    {"[daemon]\nmetrics = 127.0.0.1:0\n", 2, "metrics", "not a listening address"},
    {"[daemon]\nmetrics = 127.0.0.1:65536\n", 2, "metrics", "not a listening address"},
    {"[daemon]\nmetrics = 127.0.0.1:-1\n", 2, "metrics", "not a listening address"},
    {"[daemon]\nmetrics = ::1:9477\n", 2, "metrics", "not a listening address"},
    {"[daemon]\nmetrics = [::1\n", 2, "metrics", "not a listening address"},
    {"[daemon]\nmetrics = 256.0.0.1:9477\n", 2, "metrics", "not a listening address"},
    {"[daemon]\nmetrics =\n", 2, "[daemon] metrics", "write off to turn metrics off"},
    {"[daemon]\nmetrics = 9477\nmetrics = 9478\n", 3, "[daemon] metrics", "duplicate key"},
    {"[daemon]\nmetrics_textfile = ckptsync.prom\n", 2, "[daemon] metrics_textfile",
     "not an absolute path"},
    {"[daemon]\nmetrics_textfile = /var/lib/node/ckptsync.txt\n", 2, "[daemon] metrics_textfile",
     "does not end in .prom (node_exporter reads only *.prom files)"},
    {"[daemon]\nmetrics_textfile = /var/lib/node/.prom\n", 2, "metrics_textfile",
     "does not end in .prom"},
    {"[daemon]\nmetrics_textfile = /data/cloud_storage/m.prom\n", 2, "[daemon] metrics_textfile",
     "inside watch"},
    {"[region.a]\npath = /r\nmetrics = 9477\n", 3, "[region.a] metrics", "unknown key"},
};

/* config_parse_listen: what is accepted, and as which address. */
static const struct {
    const char *in;
    int family; /* 0: refused */
    const char *host;
    unsigned port;
} listen_cases[] = {
    {"9477", AF_INET, "127.0.0.1", 9477},
    {"127.0.0.1:9477", AF_INET, "127.0.0.1", 9477},
    {"localhost:1", AF_INET, "127.0.0.1", 1},
    {"0.0.0.0:9477", AF_INET, "0.0.0.0", 9477},
    {"10.1.2.3:65535", AF_INET, "10.1.2.3", 65535},
    {"[::1]:9477", AF_INET6, "::1", 9477},
    {"[::]:9477", AF_INET6, "::", 9477},
    {":9477", 0, NULL, 0},
    {"", 0, NULL, 0},
    {"9477x", 0, NULL, 0},
    {"+9477", 0, NULL, 0},
    {"host:9477", 0, NULL, 0},
    {"[]:9477", 0, NULL, 0},
    {"[127.0.0.1]:9477", 0, NULL, 0},
    {"1.2.3:9477", 0, NULL, 0},
    {"127.0.0.1:9477:1", 0, NULL, 0},
};

static void test_metrics_keys(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    (void)state;
    for (size_t i = 0; i < sizeof(listen_cases) / sizeof(listen_cases[0]); i++) {
        struct config_listen l;
        int r = config_parse_listen(listen_cases[i].in, &l);
        if (!listen_cases[i].family) {
            if (r != CKS_E_CONFIG)
                fail_msg("case %zu: '%s' accepted", i, listen_cases[i].in);
            continue;
        }
        if (r != 0)
            fail_msg("case %zu: '%s' refused", i, listen_cases[i].in);
        assert_int_equal(l.family, listen_cases[i].family);
        assert_string_equal(l.host, listen_cases[i].host);
        assert_int_equal(l.port, listen_cases[i].port);
    }
    /* off by default; "off" keeps it off; the value is kept as written */
    assert_int_equal(parse("", c, &err), 0);
    assert_string_equal(c->metrics, "");
    assert_string_equal(c->metrics_textfile, "");
    assert_int_equal(parse("[daemon]\nmetrics = off\n", c, &err), 0);
    assert_string_equal(c->metrics, "");
    assert_int_equal(parse("[daemon]\nmetrics = 0.0.0.0:9477\n"
                           "metrics_textfile = /var/lib/node_exporter/ckptsync.prom\n",
                           c, &err),
                     0);
    assert_string_equal(c->metrics, "0.0.0.0:9477");
    assert_string_equal(c->metrics_textfile, "/var/lib/node_exporter/ckptsync.prom");
    assert_int_equal(parse("[daemon]\nmetrics: [::1]:9100\n", c, &err), 0);
    assert_string_equal(c->metrics, "[::1]:9100");
    /* config_finish holds a value set later to the same rules */
    snprintf(c->metrics, sizeof(c->metrics), "nohost:1");
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_non_null(strstr(buf_str(&err), "metrics"));
    buf_free(&err);
    free(c);
}

/* [snapshot] file_digest: tree (default) or sha256. */
static void test_file_digest(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    (void)state;
    assert_int_equal(parse("", c, &err), 0);
    assert_false(c->file_digest_sha256);
    assert_int_equal(parse("[snapshot]\nfile_digest = sha256\n", c, &err), 0);
    assert_true(c->file_digest_sha256);
    assert_int_equal(parse("[snapshot]\nfile_digest = tree\n", c, &err), 0);
    assert_false(c->file_digest_sha256);
    buf_free(&err);
    free(c);
}

/* [restore] order: GROUP:PATTERN items, kept as written. */
static void test_restore_order(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    (void)state;
    assert_int_equal(parse("", c, &err), 0);
    assert_string_equal(c->restore_order, "");
    assert_int_equal(parse("[restore]\norder = optimizer:*/__1_*.distcp weights:extra_*  "
                           "metadata:a:b\n",
                           c, &err),
                     0);
    assert_string_equal(c->restore_order, "optimizer:*/__1_*.distcp weights:extra_*  metadata:a:b");
    snprintf(c->restore_order, sizeof(c->restore_order), "fp32:x");
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_non_null(strstr(buf_str(&err), "fp32:x"));
    buf_free(&err);
    free(c);
}

/* Does msg start with NAME ":<line>: " (line > 0) or NAME ": " (line 0)? */
static void check_message(size_t i, const struct err_case *tc, const char *msg)
{
    char prefix[64];
    if (tc->line)
        snprintf(prefix, sizeof(prefix), NAME ":%d: ", tc->line);
    else
        snprintf(prefix, sizeof(prefix), NAME ": ");
    if (strncmp(msg, prefix, strlen(prefix)) != 0)
        fail_msg("case %zu: message \"%s\" does not start with \"%s\"", i, msg, prefix);
    if (tc->key && !strstr(msg, tc->key))
        fail_msg("case %zu: message \"%s\" does not name \"%s\"", i, msg, tc->key);
    if (!strstr(msg, tc->what))
        fail_msg("case %zu: message \"%s\" does not say \"%s\"", i, msg, tc->what);
    if (strchr(msg, '\n') || strstr(msg + 1, NAME))
        fail_msg("case %zu: more than one message: \"%s\"", i, msg);
}

/* [region.X] copy_from: auto (default), none, or a list of names. */
static void test_copy_from(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    (void)state;
    assert_int_equal(parse("[region.a]\npath = /a\n[region.b]\npath = /b\ncopy_from = none\n"
                           "[region.c]\npath = /c\ncopy_from = a, b\n",
                           c, &err),
                     0);
    assert_int_equal(config_copy_from(c, 0, 1), -1); /* a: auto */
    assert_int_equal(config_copy_from(c, 0, 0), 0);  /* never from itself */
    assert_int_equal(config_copy_from(c, 1, 0), 0);  /* b: none */
    assert_int_equal(config_copy_from(c, 2, 0), 1);  /* c: a, b */
    assert_int_equal(config_copy_from(c, 2, 1), 1);
    assert_int_equal(parse("[region.a]\npath = /a\n[region.ab]\npath = /b\ncopy_from = a\n"
                           "[region.c]\npath = /c\ncopy_from = auto\n",
                           c, &err),
                     0);
    assert_int_equal(config_copy_from(c, 1, 0), 1);
    assert_int_equal(config_copy_from(c, 1, 2), 0); /* not listed */
    assert_int_equal(config_copy_from(c, 2, 1), -1);
    buf_free(&err);
    free(c);
}

static void test_errors(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;

    for (size_t i = 0; i < sizeof(err_cases) / sizeof(err_cases[0]); i++) {
        const struct err_case *tc = &err_cases[i];
        memset(c, 0x5a, sizeof(*c));
        int r = parse(tc->text, c, &err);
        if (r != CKS_E_CONFIG)
            fail_msg("case %zu: returned %d, message \"%s\"", i, r, buf_str(&err));
        check_message(i, tc, buf_str(&err));
        /* The caller's struct is left alone on error. */
        assert_int_equal(((unsigned char *)c)[0], 0x5a);
        assert_int_equal(((unsigned char *)c)[sizeof(*c) - 1], 0x5a);
    }
    buf_free(&err);
    free(c);
}

static void test_nul_and_too_many(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    static const char nul[] = "[daemon]\nquorum = 1\0\n";
    assert_int_equal(config_parse(NAME, nul, sizeof(nul) - 1, c, &err), CKS_E_CONFIG);
    assert_non_null(strstr(buf_str(&err), NAME ":2: syntax error: NUL byte"));

    struct buf text = BUF_INIT;
    for (int i = 0; i <= CONFIG_MAX_REGIONS; i++)
        buf_printf(&text, "[region.r%d]\npath = /r/%d\n", i, i);
    assert_int_equal(parse(buf_str(&text), c, &err), CKS_E_CONFIG);
    char want[64];
    snprintf(want, sizeof(want), NAME ":%d: [region.r%d]: too many regions",
             2 * CONFIG_MAX_REGIONS + 1, CONFIG_MAX_REGIONS);
    assert_non_null(strstr(buf_str(&err), want));
    /* Exactly CONFIG_MAX_REGIONS is fine. */
    buf_reset(&text);
    for (int i = 0; i < CONFIG_MAX_REGIONS; i++)
        buf_printf(&text, "[region.r%d]\npath = /r/%d\n", i, i);
    assert_int_equal(parse(buf_str(&text), c, &err), 0);
    assert_int_equal(c->nregions, CONFIG_MAX_REGIONS);
    buf_free(&text);
    buf_free(&err);
    free(c);
}

struct size_case {
    const char *s;
    int ret;
    uint64_t v;
};

static const struct size_case duration_cases[] = {
    {"0", 0, 0},
    {"0s", 0, 0},
    {"0d", 0, 0},
    {"90", 0, 90},
    {"90s", 0, 90},
    {"15m", 0, 900},
    {"6h", 0, 21600},
    {"7d", 0, 7 * DAY},
    {"007d", 0, 7 * DAY},
    {"18446744073709551615", 0, UINT64_MAX},
    {"18446744073709551615s", 0, UINT64_MAX},
    {"213503982334601d", 0, 213503982334601ull * DAY},
    {"213503982334602d", CKS_E_CONFIG, 0},
    {"5124095576030431h", 0, 5124095576030431ull * 3600},
    {"5124095576030432h", CKS_E_CONFIG, 0},
    {"307445734561825860m", 0, 307445734561825860ull * 60},
    {"307445734561825861m", CKS_E_CONFIG, 0},
    {"18446744073709551616", CKS_E_CONFIG, 0},
    {"", CKS_E_CONFIG, 0},
    {"s", CKS_E_CONFIG, 0},
    {"d", CKS_E_CONFIG, 0},
    {"3X", CKS_E_CONFIG, 0},
    {"7D", CKS_E_CONFIG, 0},
    {"15M", CKS_E_CONFIG, 0},
    {"1w", CKS_E_CONFIG, 0},
    {"1ms", CKS_E_CONFIG, 0},
    {"1h30m", CKS_E_CONFIG, 0},
    {"1dd", CKS_E_CONFIG, 0},
    {"-1", CKS_E_CONFIG, 0},
    {"+1", CKS_E_CONFIG, 0},
    {" 1", CKS_E_CONFIG, 0},
    {"1 ", CKS_E_CONFIG, 0},
    {"1 s", CKS_E_CONFIG, 0},
    {"1.5h", CKS_E_CONFIG, 0},
    {"0x10", CKS_E_CONFIG, 0},
};

static void test_parse_duration(void **state)
{
    for (size_t i = 0; i < sizeof(duration_cases) / sizeof(duration_cases[0]); i++) {
        const struct size_case *tc = &duration_cases[i];
        uint64_t v = 42;
        int r = config_parse_duration(tc->s, &v);
        if (r != tc->ret)
            fail_msg("\"%s\": returned %d, expected %d", tc->s, r, tc->ret);
        if (v != (r == 0 ? tc->v : 42))
            fail_msg("\"%s\": gave %llu, expected %llu", tc->s, (unsigned long long)v,
                     (unsigned long long)(r == 0 ? tc->v : 42));
    }
    uint64_t v;
    assert_int_equal(config_parse_duration(NULL, &v), CKS_E_CONFIG);
}

static const struct size_case size_cases[] = {
    {"0", 0, 0},
    {"123", 0, 123},
    {"512K", 0, 512ull << 10},
    {"512k", 0, 512ull << 10},
    {"4M", 0, 4ull << 20},
    {"1G", 0, 1ull << 30},
    {"2T", 0, 2ull << 40},
    {"18446744073709551615", 0, UINT64_MAX},
    {"16777215T", 0, 16777215ull << 40},
    {"16777216T", CKS_E_CONFIG, 0},
    {"18446744073709551616", CKS_E_CONFIG, 0},
    {"", CKS_E_CONFIG, 0},
    {"M", CKS_E_CONFIG, 0},
    {"4X", CKS_E_CONFIG, 0},
    {"4MB", CKS_E_CONFIG, 0},
    {"-1", CKS_E_CONFIG, 0},
    {"+1", CKS_E_CONFIG, 0},
    {" 1", CKS_E_CONFIG, 0},
    {"1 M", CKS_E_CONFIG, 0},
    {"0x10", CKS_E_CONFIG, 0},
    {"1.5G", CKS_E_CONFIG, 0},
};

static void test_parse_size(void **state)
{
    for (size_t i = 0; i < sizeof(size_cases) / sizeof(size_cases[0]); i++) {
        uint64_t v = 42;
        int r = config_parse_size(size_cases[i].s, &v);
        if (r != size_cases[i].ret)
            fail_msg("\"%s\": returned %d, expected %d", size_cases[i].s, r, size_cases[i].ret);
        assert_int_equal(v, r == 0 ? size_cases[i].v : 42);
    }
    uint64_t v;
    assert_int_equal(config_parse_size(NULL, &v), CKS_E_CONFIG);
}

static void test_finish(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;

    config_default(c);
    snprintf(c->state, sizeof(c->state), "/srv/cks");
    assert_int_equal(config_finish(c, &err), 0);
    assert_string_equal(c->socket, "/srv/cks/ckptsyncd.sock");
    assert_string_equal(c->regions[0].path, "/srv/cks/regions/a");
    assert_string_equal(c->regions[2].path, "/srv/cks/regions/c");

    /* Embedded default: no file name in the message. */
    snprintf(c->state, sizeof(c->state), "relative");
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "[daemon] state: 'relative' is not an absolute path");
    snprintf(c->state, sizeof(c->state), "/data/cloud_storage/state");
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_non_null(strstr(buf_str(&err), "[daemon] state: '/data/cloud_storage/state' is "
                                          "inside watch"));

    /* From a file: the file is named, no line (the value came from elsewhere);
     * explicit region paths and socket are kept. */
    assert_int_equal(parse("[daemon]\nsocket = /run/c.sock\n[region.x]\npath = /nas/x\n"
                           "[daemon]\nquorum = 1\n",
                           c, &err),
                     0);
    snprintf(c->state, sizeof(c->state), "/srv/other");
    assert_int_equal(config_finish(c, &err), 0);
    assert_string_equal(c->socket, "/run/c.sock");
    assert_string_equal(c->regions[0].path, "/nas/x");
    snprintf(c->state, sizeof(c->state), "/nas/x/../x/state");
    c->quorum = 2;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err),
                        NAME ": [daemon] quorum: 2 is more than the number of regions (1)");

    /* Fields set by hand are held to the same rules, never overrun. */
    config_default(c);
    memset(c->socket, 'x', sizeof(c->socket));
    c->default_socket = false;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "[daemon] socket: value too long (at most 4095 bytes)");
    config_default(c);
    c->zstd_level = 22;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "[compress] level: 22 is out of range (1 to 19)");
    config_default(c);
    c->create_settle = 0;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "[daemon] create_settle: 0 is out of range (1 to 600)");
    config_default(c);
    c->create_settle = 601;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "[daemon] create_settle: 601 is out of range (1 to 600)");
    config_default(c);
    c->nregions = CONFIG_MAX_REGIONS + 1;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    config_default(c);
    c->clock_skew = 3 * 3600;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "[prune] intent_ttl: intent_ttl (6h) must be more than "
                                       "twice clock_skew (3h)");
    config_default(c);
    c->prune_lease = 10;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "[prune] lease: 10 is out of range (30 to 1d)");
    config_default(c);
    c->retention.keep_last = 1000001;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err),
                        "[retention] keep_last: 1000001 is out of range (0 to 1000000)");
    /* a run's policy, from a file: named by its section; no line */
    assert_int_equal(parse("[retention.r]\nkeep_best = 2\n", c, &err), 0);
    c->policies[0].best_metric[0] = '\0';
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), NAME ": [retention.r] best_metric: '' is not a metric "
                                            "name (1 to 63 characters of A-Z a-z 0-9 _ . / -)");
    config_default(c);
    c->npolicies = 1;
    snprintf(c->policies[0].run, sizeof(c->policies[0].run), "..");
    snprintf(c->policies[0].best_metric, sizeof(c->policies[0].best_metric), "eval_loss");
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "[retention...]: invalid run name");
    config_default(c);
    c->npolicies = CONFIG_MAX_POLICIES + 1;
    assert_int_equal(config_finish(c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "corrupt configuration structure");
    buf_free(&err);
    free(c);
}

static void test_load(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT;
    char path[] = "/tmp/test-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char text[] = "[daemon]\nquorum = 1\nsettle = 5\n[region.a]\npath = /r\n";
    assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
    close(fd);

    assert_int_equal(config_load(path, c, &err), 0);
    assert_string_equal(c->source, path);
    assert_int_equal(c->quorum, 1);
    assert_int_equal(c->settle, 5);

    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs("[compress]\nlevel = 99\n", f);
    fclose(f);
    assert_int_equal(config_load(path, c, &err), CKS_E_CONFIG);
    char want[128];
    snprintf(want, sizeof(want), "%s:7: [compress] level: 99 is out of range (1 to 19)", path);
    assert_string_equal(buf_str(&err), want);
    unlink(path);

    assert_int_equal(config_load(path, c, &err), -ENOENT);
    snprintf(want, sizeof(want), "%s: No such file or directory", path);
    assert_string_equal(buf_str(&err), want);
    assert_int_equal(config_load("/", c, &err), -EISDIR);
    buf_free(&err);
    free(c);
}

/* A fake environment for config_nodes_env: "NAME=value" entries. */
static const char *const *fake_env;

static char *fake_getenv(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; fake_env && fake_env[i]; i++)
        if (!strncmp(fake_env[i], name, n) && fake_env[i][n] == '=')
            return (char *)fake_env[i] + n + 1;
    return NULL;
}

struct nodes_case {
    const char *file;     /* [daemon] lines */
    const char *env[5];   /* NULL-terminated */
    int want;             /* 0 or CKS_E_CONFIG */
    unsigned nodes, rank; /* when 0 */
    const char *why;      /* in the error */
};

static const struct nodes_case nodes_cases[] = {
    {"", {NULL}, 0, 1, 0, NULL},
    {"nodes = 4\nnode_rank = 3\n", {NULL}, 0, 4, 3, NULL},
    {"nodes = 4\nnode_rank = 3\n", {"CKPTSYNC_NODE_RANK=1", NULL}, 0, 4, 1, NULL},
    {"nodes = 4\n", {"CKPTSYNC_NODES=8", "CKPTSYNC_NODE_RANK=7", NULL}, 0, 8, 7, NULL},
    {"", {"SLURM_NNODES=16", "SLURM_NODEID=5", NULL}, 0, 16, 5, NULL},
    /* the file's nodes beat the launcher's; CKPTSYNC_* beat both */
    {"nodes = 2\nnode_rank = 1\n", {"SLURM_NNODES=16", "SLURM_NODEID=5", NULL}, 0, 2, 1, NULL},
    {"", {"SLURM_NNODES=16", "SLURM_NODEID=5", "CKPTSYNC_NODE_RANK=9", NULL}, 0, 16, 9, NULL},
    {"",
     {"CKPTSYNC_NODES=4", "CKPTSYNC_NODE_RANK=4", NULL},
     CKS_E_CONFIG,
     0,
     0,
     "node rank 4 is not below the node count 4"},
    {"", {"CKPTSYNC_NODES=0", NULL}, CKS_E_CONFIG, 0, 0, "$CKPTSYNC_NODES: '0'"},
    {"", {"CKPTSYNC_NODES=4x", NULL}, CKS_E_CONFIG, 0, 0, "$CKPTSYNC_NODES: '4x'"},
    {"", {"CKPTSYNC_NODES=-1", NULL}, CKS_E_CONFIG, 0, 0, "$CKPTSYNC_NODES"},
    {"", {"CKPTSYNC_NODES=99999999999", NULL}, CKS_E_CONFIG, 0, 0, "$CKPTSYNC_NODES"},
    {"", {"SLURM_NNODES=2", "SLURM_NODEID=abc", NULL}, CKS_E_CONFIG, 0, 0, "$SLURM_NODEID"},
};

static void test_nodes(void **state)
{
    struct config *c = cfg_new();
    struct buf err = BUF_INIT, text = BUF_INIT;
    (void)state;
    for (size_t i = 0; i < sizeof(nodes_cases) / sizeof(nodes_cases[0]); i++) {
        const struct nodes_case *k = &nodes_cases[i];
        buf_reset(&text);
        assert_int_equal(buf_printf(&text, "[daemon]\n%s", k->file), 0);
        assert_int_equal(parse(buf_str(&text), c, &err), 0);
        assert_int_equal(c->part_timeout, 3600);
        fake_env = k->env;
        buf_reset(&err);
        int r = config_nodes_env(c, fake_getenv, &err);
        if (r != k->want)
            fail_msg("case %zu: %d, want %d (%s)", i, r, k->want, buf_str(&err));
        if (r == 0 && (c->nodes != k->nodes || c->node_rank != k->rank))
            fail_msg("case %zu: node %u of %u, want %u of %u", i, c->node_rank, c->nodes, k->rank,
                     k->nodes);
        if (r < 0 && !strstr(buf_str(&err), k->why))
            fail_msg("case %zu: error '%s' lacks '%s'", i, buf_str(&err), k->why);
    }
    fake_env = NULL;
    /* the file alone: node_rank must be below nodes, naming the key */
    assert_int_equal(parse("[daemon]\nnodes = 2\nnode_rank = 2\n", c, &err), CKS_E_CONFIG);
    assert_non_null(strstr(buf_str(&err), "node_rank"));
    assert_int_equal(parse("[daemon]\nnodes = 4097\n", c, &err), CKS_E_CONFIG);
    assert_int_equal(parse("[daemon]\npart_timeout = 10m\n", c, &err), 0);
    assert_int_equal(c->part_timeout, 600);
    assert_int_equal(config_nodes(c), 1);
    buf_free(&text);
    buf_free(&err);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_full_file),
        cmocka_unit_test(test_no_region),
        cmocka_unit_test(test_valid_small),
        cmocka_unit_test(test_chunker_agrees_with_fastcdc),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_too_many_policies),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_copy_from),
        cmocka_unit_test(test_parse_duration),
        cmocka_unit_test(test_nul_and_too_many),
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_finish),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_metrics_keys),
        cmocka_unit_test(test_nodes),
        cmocka_unit_test(test_restore_order),
        cmocka_unit_test(test_file_digest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
