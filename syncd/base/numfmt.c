/*
 * numfmt.c — the shortest decimal that reads back.
 *
 * Design notes.
 * - Tried in order of precision 1..17 with snprintf and strtod, the C
 *   library's own correctly rounded conversions: no digit generation of
 *   our own to get wrong, and 17 significant digits always read back (a
 *   binary64 needs at most 17).  A value costs a few dozen conversions at
 *   worst, negligible next to what prints it.
 * - %.*g switches to exponent notation when the exponent reaches the
 *   precision, so 100 would come out as "1e+02"; while the exponent is
 *   below 17 the digits are written out and padded with zeros (raising
 *   the precision instead would print digits the shortest form does not
 *   have: 3.172230058817275e+16 is 31722300588172750, not ...752).
 * - The check runs on the text as the locale wrote it (strtod reads the
 *   same locale), then a "," decimal mark becomes ".".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/numfmt.h"

/* "3.1e+16" -> "31000000000000000": %g's exponent notation of a number
 * below 1e17 written out, padded with zeros (so with the same digits,
 * not more of them). */
static void expand(char *out)
{
    char *e = strchr(out, 'e'), digits[NUMFMT_DOUBLE_MAX];
    long x = e ? strtol(e + 1, NULL, 10) : -1;
    size_t n = 0;
    if (!e || x < 0 || x >= 17)
        return;
    for (char *p = out; p < e; p++)
        if (*p >= '0' && *p <= '9')
            digits[n++] = *p;
    char *w = out + (out[0] == '-');
    memcpy(w, digits, n);
    while (n < (size_t)x + 1)
        w[n++] = '0';
    w[n] = 0;
}

char *numfmt_double(double v, char *out)
{
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(out, NUMFMT_DOUBLE_MAX, "%.*g", prec, v);
        if (prec == 17 || strtod(out, NULL) == v)
            break;
    }
    expand(out);
    for (char *p = out; *p; p++)
        if (*p == ',')
            *p = '.';
    return out;
}
