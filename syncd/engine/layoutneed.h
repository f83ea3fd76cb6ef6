/*
 * layoutneed.h — the files a checkpoint's own layout says must exist: what
 * the layout readers (engine/dcpmeta.h, engine/hfindex.h) produce and
 * service/layoutcov.h checks against a step's tree.
 *
 *   struct layout_needs n = LAYOUT_NEEDS_INIT;
 *   e = layout_needs_add(&n, "__0_0.distcp", 4096);   (path checked, copied)
 *   layout_needs_fold(&n);                            sorted, one per path
 *   ... n.v[0 .. n.n) ...
 *   layout_needs_free(&n);
 *
 * Pure; not thread-safe per list.
 */
#ifndef CKS_LAYOUTNEED_H
#define CKS_LAYOUTNEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on one layout's list. */
#define LAYOUT_NEEDS_MAX 10000000u
#define LAYOUT_NEED_PATH_MAX 4096u

/* A file a layout names (relative to the layout file's directory), and
 * the bytes it must have at least: the end of the furthest byte range
 * named in it (0: it must exist). */
struct layout_need {
    char *path;
    uint64_t size;
};

struct layout_needs {
    struct layout_need *v;
    size_t n, cap;
};

#define LAYOUT_NEEDS_INIT                                                                          \
    {                                                                                              \
        NULL, 0, 0                                                                                 \
    }

/* Whether path is a safe relative path: not empty, not absolute, no
 * empty, "." or ".." component, no byte below 0x20, at most
 * LAYOUT_NEED_PATH_MAX bytes. */
bool layout_need_path_ok(const char *path);
/* Appends (path, size): 0, CKS_E_UNSAFE_PATH (path_ok says no),
 * CKS_E_LIMIT (more than LAYOUT_NEEDS_MAX) or -ENOMEM. */
int layout_needs_add(struct layout_needs *n, const char *path, uint64_t size);
/* Sorts by path and folds the entries of one path into one (the largest
 * size). */
void layout_needs_fold(struct layout_needs *n);
void layout_needs_free(struct layout_needs *n);

#endif
