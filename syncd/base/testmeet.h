/*
 * testmeet.h — a test hook that makes a race between two threads happen
 * on every run instead of once in a while: the first thread to reach a
 * point with a key waits there for a second thread to reach it with the
 * same key, so both go on from that point together.
 *
 *   testmeet_at("CKPTSYNC_TEST_SNAP_MEET", id, sizeof(id));
 *
 * Off unless the environment variable named (read once per process) is a
 * number of milliseconds N > 0; then the first call waits up to N ms for
 * a second call with an equal key, and says on the log (info) whether
 * one came.  The hook is spent after that: one meeting per process, so a
 * test that finds it armed knows where the process waited.  Calls with
 * another key while the first waits, and every later call, return at
 * once.  Thread-safe.  For tests only (service/snapshot.c: two uploads
 * of one chunk, the race sworker.claim closes): compiled in only where
 * the tests are built (CKS_TESTS, which defines CKS_TEST_HOOKS); in a
 * build without them testmeet_at does nothing.
 */
#ifndef CKS_TESTMEET_H
#define CKS_TESTMEET_H

#include <stddef.h>

/* 1 when a second caller came (for both of them), 0 otherwise. */
int testmeet_at(const char *env, const void *key, size_t len);

#endif
