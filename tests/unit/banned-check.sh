#!/usr/bin/env bash
# banned-check.sh CC FLAGS... — syncd/base/banned.h works with these flags
# (ctest passes the compiler and the project's flags, -include banned.h
# among them): each banned call fails to compile, naming the function; a
# file that includes the libc headers again and uses the allowed
# replacements compiles, also with glibc's fortified headers.
set -euo pipefail
cc=$1; shift
T=$(mktemp -d "${TMPDIR:-/tmp}/cks-banned.XXXXXX")
trap 'rm -rf "$T"' EXIT

cat > "$T/good.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int good(char *d, size_t n, const char *s);
int good(char *d, size_t n, const char *s)
{
    struct { int atoi, strcpy; } names = {1, 2}; /* only calls are banned */
    char *end;
    long v = strtol(s, &end, 10);
    return snprintf(d, n, "%s%ld", s, v) + names.atoi + names.strcpy + (int)strlen(d);
}
C
for extra in "" "-O2 -D_FORTIFY_SOURCE=2"; do
  # shellcheck disable=SC2086
  "$cc" "$@" $extra -c "$T/good.c" -o "$T/good.o" 2> "$T/err" \
    || { cat "$T/err"; echo "FAIL: allowed code does not compile with banned.h ($extra)"; exit 1; }
done

for call in "strcpy(d, s)" "strcat(d, s)" "strncpy(d, s, 4)" "strncat(d, s, 4)" \
            "sprintf(d, \"%s\", s)" "vsprintf(d, s, ap)" "gets(d)" "strtok(d, s)" \
            "atoi(s)" "atol(s)" "atoll(s)"; do
  f=${call%%(*}
  cat > "$T/bad.c" <<C
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
long bad(char *d, const char *s, va_list ap);
long bad(char *d, const char *s, va_list ap)
{
    (void)d; (void)s; (void)ap;
    return (long)$call;
}
C
  if "$cc" "$@" -c "$T/bad.c" -o "$T/bad.o" 2> "$T/err"; then
    echo "FAIL: a call of $f compiles"; exit 1
  fi
  grep -q "sorry_${f}_is_a_banned_function" "$T/err" || { cat "$T/err"; echo "FAIL: $f: not refused as banned"; exit 1; }
done
echo "banned: ok"
