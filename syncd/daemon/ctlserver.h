/*
 * ctlserver.h — the daemon's control socket: accepts clients, answers
 * ping, status, commit, flush, retry and restored (engine/ctlproto.h,
 * include/ckptsync/protocol.h), and parks the requests that wait for
 * durability until they can be answered.
 *
 *   ctlserver_new(&parts, epfd, &s);          // listens on parts.conf->socket
 *   loop:
 *     epoll_wait(epfd, ..., timeout);          // timeout <= ctlserver_deadline(s)
 *     if (ctlserver_event(s, ev.data.ptr)) ...;    // for each epoll event
 *     ctlserver_unit_taken(s, unit, ticket);   // a ready unit went to ingest
 *     ctlserver_unit_done(s, &done);           // ingest finished a unit
 *     ctlserver_tick(s);                       // once per loop turn
 *   ctlserver_free(s);                         // closes everything, unlinks the socket
 *
 * The server registers its sockets in the caller's epoll set (epfd), with
 * data.ptr tags of its own; ctlserver_event() says whether a tag was one.
 * It borrows parts (daemon/parts.h) for its whole life; the members it
 * uses (repo, replicator, ingester, detector, metrics) need only be set by
 * the time the loop runs.  ctlserver_new() logs why it failed and returns
 * a negative errno; ctlserver_free(NULL) does nothing, and every other
 * function accepts NULL too.
 *
 * Limits: a client has [daemon] control_idle_timeout seconds to send its
 * request line, and as long to read its answer; connections are at most
 * half the RLIMIT_NOFILE soft limit (16 to 4096), and beyond that the one
 * idle the longest is closed to make room (answered busy); with only
 * waiters left, a new client is answered busy.
 *
 * Thread-safety: none; the daemon's event loop alone calls it.
 */
#ifndef CKS_CTLSERVER_H
#define CKS_CTLSERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/parts.h"
#include "daemon/ingest.h"

struct ctlserver;

int ctlserver_new(const struct daemon_parts *parts, int epfd, struct ctlserver **ret);
void ctlserver_free(struct ctlserver *s);

/* Handles one epoll event if tag is the server's; true when it was. */
bool ctlserver_event(struct ctlserver *s, void *tag);
/* Answers the waiters that are done or past their deadline, and closes
 * the connections idle too long. */
void ctlserver_tick(struct ctlserver *s);
/* The nearest time (monotonic ms) ctlserver_tick() has something to do,
 * or -1 for none. */
int64_t ctlserver_deadline(const struct ctlserver *s);

/* The loop handed unit to ingest as ticket: commits waiting for a unit
 * containing their path now wait for that ticket. */
void ctlserver_unit_taken(struct ctlserver *s, const char *unit, uint64_t ticket);
/* Ingest finished done->ticket: its waiters are answered (failure) or go
 * on waiting for the snapshot's regions. */
void ctlserver_unit_done(struct ctlserver *s, const struct ingest_done *done);

#endif
