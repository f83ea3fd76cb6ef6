/*
 * numfmt.h — a double as the shortest decimal text that reads back as the
 * same double, for the JSON writer and the Prometheus exposition.
 *
 *   char s[NUMFMT_DOUBLE_MAX];
 *   numfmt_double(9.564, s);          // "9.564", not "9.5640000000000001"
 *
 * The digits are the fewest (1 to 17) whose "%.*g" strtod() turns back
 * into v exactly; the notation is %g's, except that a number with fewer
 * than 17 integer digits is written out in full ("100", not "1e+02").
 * The decimal mark is "." whatever LC_NUMERIC says.  v must be finite
 * (callers spell NaN and infinities as their format wants).  No state;
 * thread-safe.
 */
#ifndef CKS_NUMFMT_H
#define CKS_NUMFMT_H

#define NUMFMT_DOUBLE_MAX 32

/* Writes v into out (NUMFMT_DOUBLE_MAX bytes) and returns out. */
char *numfmt_double(double v, char *out);

#endif
