/*
 * retakes.c — the units to take again (retakes.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/retakes.h"

int retakes_add(struct retakes *rt, const char *unit)
{
    for (size_t i = 0; i < rt->n; i++)
        if (strcmp(rt->v[i], unit) == 0)
            return 0;
    if (rt->n == rt->cap) {
        size_t cap = rt->cap ? rt->cap * 2 : 16;
        char **v = realloc(rt->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        rt->v = v;
        rt->cap = cap;
    }
    if (!(rt->v[rt->n] = strdup(unit)))
        return -ENOMEM;
    rt->n++;
    return 1;
}

size_t retakes_take(struct retakes *rt, char (*ret)[4096], size_t cap)
{
    size_t n = rt->n < cap ? rt->n : cap;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        snprintf(ret[i], 4096, "%s", rt->v[i]);
        free(rt->v[i]);
    }
    memmove(rt->v, rt->v + n, (rt->n - n) * sizeof(*rt->v));
    rt->n -= n;
    return n;
}

void retakes_free(struct retakes *rt)
{
    for (size_t i = 0; i < rt->n; i++)
        free(rt->v[i]);
    free(rt->v);
    *rt = (struct retakes){0};
}
