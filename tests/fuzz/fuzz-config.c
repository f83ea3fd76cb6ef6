/*
 * fuzz-config.c — arbitrary text into config_parse().
 *
 * Must never crash or leak.  On success the result must satisfy every
 * invariant the rest of the daemon relies on, and config_finish() on it
 * must succeed without changing anything; on failure there must be exactly
 * one message, naming the file.  Any violation aborts.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/err.h"

#define FUZZ_NAME "fuzz.conf"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond)
{
    if (!cond)
        abort();
}

/* The field is a NUL-terminated string (never filled to the brim). */
static int terminated(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL;
}

static int absolute(const char *s, size_t size)
{
    return terminated(s, size) && s[0] == '/';
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n < CONFIG_NAME_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyz"
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

static void check_region(const struct config *c, size_t i)
{
    const struct region_conf *r = &c->regions[i];
    require(terminated(r->name, sizeof(r->name)) && name_ok(r->name));
    for (size_t j = 0; j < i; j++)
        require(strcmp(r->name, c->regions[j].name) != 0);
    require(r->kind == REGION_KIND_DIR || r->kind == REGION_KIND_S3);
    if (r->kind == REGION_KIND_DIR)
        require(absolute(r->path, sizeof(r->path)));
    else
        require(terminated(r->endpoint, sizeof(r->endpoint)) && r->endpoint[0] &&
                terminated(r->bucket, sizeof(r->bucket)) && r->bucket[0]);
    require(terminated(r->prefix, sizeof(r->prefix)));
    require(terminated(r->signing_region, sizeof(r->signing_region)));
    require(terminated(r->credentials, sizeof(r->credentials)));
    require(terminated(r->ca_file, sizeof(r->ca_file)));
    require(r->connections >= 1 && r->connections <= 256);
}

static void check_policy(const struct retention_policy *p, bool named)
{
    require(terminated(p->run, sizeof(p->run)) && (named == (p->run[0] != 0)));
    require(terminated(p->best_metric, sizeof(p->best_metric)) && p->best_metric[0]);
    require(p->keep_last <= 1000000 && p->keep_best <= 1000000);
}

static void check_config(const struct config *c)
{
    require(strcmp(c->source, FUZZ_NAME) == 0);
    require(absolute(c->watch, sizeof(c->watch)));
    require(absolute(c->state, sizeof(c->state)));
    require(absolute(c->socket, sizeof(c->socket)));
    require(strcmp(c->state, c->watch) != 0);
    require(c->nregions >= 1 && c->nregions <= CONFIG_MAX_REGIONS);
    require(c->quorum >= 1 && c->quorum <= c->nregions);
    require(c->chunk_min >= 64 && c->chunk_min <= c->chunk_avg && c->chunk_avg <= c->chunk_max &&
            c->chunk_max <= 256u << 20);
    require(c->normalization <= 3);
    require(c->zstd_level >= 1 && c->zstd_level <= 19);
    require(c->settle <= 86400);
    /* a file names its regions: the embedded a, b, c never come from one */
    require(!c->default_regions);
    for (size_t i = 0; i < c->nregions; i++)
        check_region(c, i);
    /* [retention], [retention.RUN], [prune] (the protocol needs
     * intent_ttl > 2 clock_skew: service/gc.h) */
    check_policy(&c->retention, false);
    require(c->npolicies <= CONFIG_MAX_POLICIES);
    for (size_t i = 0; i < c->npolicies; i++) {
        check_policy(&c->policies[i], true);
        for (size_t j = 0; j < i; j++)
            require(strcmp(c->policies[i].run, c->policies[j].run) != 0);
        require(config_policy(c, c->policies[i].run) == &c->policies[i]);
    }
    require(c->intent_ttl > 2 * c->clock_skew && c->intent_ttl >= 60 && c->prune_lease >= 30);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct config c, again;
    struct buf err = BUF_INIT;

    int r = config_parse(FUZZ_NAME, (const char *)data, size, &c, &err);
    if (r == 0) {
        require(err.len == 0);
        check_config(&c);
        again = c;
        require(config_finish(&again, &err) == 0);
        require(memcmp(&again, &c, sizeof(c)) == 0);
    } else {
        const char *msg = buf_str(&err);
        require(r == CKS_E_CONFIG);
        require(strncmp(msg, FUZZ_NAME ":", strlen(FUZZ_NAME ":")) == 0);
        require(strchr(msg, '\n') == NULL);
    }
    buf_free(&err);
    return 0;
}
