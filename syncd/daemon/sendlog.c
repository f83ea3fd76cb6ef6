/*
 * sendlog.c — bytes sent per snapshot (sendlog.h): a ring of the last
 * SENDLOG_KEEP units, looked up by unit, seq or snapshot id.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/sendlog.h"

struct sendlog {
    pthread_mutex_t mu;
    uint64_t next; /* the next unit number (from 1) */
    struct sendlog_rec rec[SENDLOG_KEEP];
};

int sendlog_new(struct sendlog **ret)
{
    struct sendlog *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    pthread_mutex_init(&l->mu, NULL);
    l->next = 1;
    *ret = l;
    return 0;
}

void sendlog_free(struct sendlog *l)
{
    if (!l)
        return;
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* The record of unit u, if still kept (caller holds mu). */
static struct sendlog_rec *sendlog_unit(struct sendlog *l, uint64_t u)
{
    struct sendlog_rec *r = &l->rec[u % SENDLOG_KEEP];
    return u && r->unit == u ? r : NULL;
}

uint64_t sendlog_unit_begin(struct sendlog *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t u = l->next++;
    l->rec[u % SENDLOG_KEEP] = (struct sendlog_rec){.unit = u};
    pthread_mutex_unlock(&l->mu);
    return u;
}

void sendlog_unit_commit(struct sendlog *l, uint64_t unit, uint64_t seq, const char *id,
                         uint64_t stored)
{
    pthread_mutex_lock(&l->mu);
    struct sendlog_rec *r = sendlog_unit(l, unit);
    if (r) {
        r->seq = seq;
        r->stored = stored;
        snprintf(r->id, sizeof(r->id), "%s", id);
    }
    pthread_mutex_unlock(&l->mu);
}

void sendlog_add(struct sendlog *l, uint64_t unit, uint64_t seq, uint64_t sent, uint64_t copied)
{
    struct sendlog_rec *r = NULL;
    pthread_mutex_lock(&l->mu);
    for (size_t k = 0; seq && !r && k < SENDLOG_KEEP; k++)
        if (l->rec[k].unit && l->rec[k].seq == seq)
            r = &l->rec[k];
    if (!seq)
        r = sendlog_unit(l, unit);
    if (r) {
        r->sent += sent;
        r->copied += copied;
    }
    pthread_mutex_unlock(&l->mu);
}

bool sendlog_get(struct sendlog *l, const char *id, struct sendlog_rec *ret)
{
    bool found = false;
    pthread_mutex_lock(&l->mu);
    for (size_t k = 0; !found && k < SENDLOG_KEEP; k++)
        if (l->rec[k].unit && l->rec[k].seq && !strcmp(l->rec[k].id, id)) {
            *ret = l->rec[k];
            found = true;
        }
    pthread_mutex_unlock(&l->mu);
    return found;
}
