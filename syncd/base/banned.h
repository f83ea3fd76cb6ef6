/*
 * banned.h — libc calls this project does not use, made compile errors.
 *
 * Each banned call expands to an undeclared identifier that names the
 * function, so a use fails to build (with or without -Werror):
 *     error: 'sorry_strcpy_is_a_banned_function' undeclared
 * Use instead:
 *     strcpy, strcat, strncpy, strncat  snprintf(dst, size, "%s", src), or
 *                                       memcpy with a length checked before
 *     sprintf, vsprintf                 snprintf, vsnprintf, buf_printf
 *     gets                              fgets, getline
 *     strtok                            strcspn/strspn, or strtok_r on a copy
 *     atoi, atol, atoll                 strtol/strtoull with errno and end
 *                                       checked (config_parse_size, cli_parse_i64)
 *
 * CMakeLists.txt force-includes this file into every project source
 * (-include), before anything else.  So it first includes the libc headers
 * that declare these functions: their declarations (and glibc's fortified
 * inline versions) are seen before the macros exist, and a later #include
 * of those headers is a no-op thanks to their include guards.  That needs
 * the feature-test macros (_GNU_SOURCE) on the command line, as
 * CMakeLists.txt sets them, not #defined in a source file.
 *
 * The macros are function-like, as in git's banned.h: a struct member or
 * variable of the same name is unaffected; only calls are.
 * tests/unit/banned-check.sh checks that a call fails to compile.
 */
#ifndef CKS_BANNED_H
#define CKS_BANNED_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BANNED(func) sorry_##func##_is_a_banned_function

#undef strcpy
#define strcpy(...) BANNED(strcpy)
#undef strcat
#define strcat(...) BANNED(strcat)
#undef strncpy
#define strncpy(...) BANNED(strncpy)
#undef strncat
#define strncat(...) BANNED(strncat)
#undef sprintf
#define sprintf(...) BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) BANNED(vsprintf)
#undef gets
#define gets(...) BANNED(gets)
#undef strtok
#define strtok(...) BANNED(strtok)
#undef atoi
#define atoi(...) BANNED(atoi)
#undef atol
#define atol(...) BANNED(atol)
#undef atoll
#define atoll(...) BANNED(atoll)

#endif
