/*
 * testutil.h — helpers shared by the unit tests (header-only: each test is
 * its own program).
 */
#ifndef CKS_TESTUTIL_H
#define CKS_TESTUTIL_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* rm -rf of a scratch directory, also through directories made read-only
 * by a test. */
static inline int test_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return 0;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    chmod(path, 0700);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[4096];
        int n = snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        if (n > 0 && (size_t)n < sizeof(sub))
            test_rm_rf(sub);
    }
    if (d)
        closedir(d);
    return rmdir(path);
}

#endif
