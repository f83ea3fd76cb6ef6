#!/usr/bin/env bash
# The C client library as a user gets it: installed from the build under
# test into a temporary prefix, a small program outside the tree built
# with `pkg-config --cflags --libs ckptsync-client` (the shared library)
# and once more against the static one (`--static`), each committing a
# checkpoint to a real ckptsyncd and waiting until it is durable; the
# regions must then list the snapshot the library reported.
. "$(dirname "$0")/lib.sh"
: "${CKS_BUILD_DIR:?CKS_BUILD_DIR must name the build tree (ctest sets it)}"
command -v pkg-config > /dev/null || skip "pkg-config is not installed"
CC=${CC:-cc}
# A sanitized build's libraries need the program built the same way
# (the sanitizer runtime must come first).
san=()
grep -q '^CKS_SANITIZE:BOOL=ON' "$CKS_BUILD_DIR/CMakeCache.txt" && san=(-fsanitize=address,undefined)
grep -q '^CKS_TSAN:BOOL=ON' "$CKS_BUILD_DIR/CMakeCache.txt" && san=(-fsanitize=thread)

step "install into a temporary prefix"
P="$T/prefix"
cmake --install "$CKS_BUILD_DIR" --prefix "$P" > "$T/install.log"
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$(find "$P" -name ckptsync-client.pc -print -quit)")
[ -f "$PKG_CONFIG_PATH/ckptsync-client.pc" ] || die "no ckptsync-client.pc installed"
[ -f "$P/include/ckptsync/client.h" ] || die "client.h not installed"
libdir=$(pkg-config --variable=libdir ckptsync-client)
[ "$(pkg-config --variable=prefix ckptsync-client)" = "$P" ] || die "the .pc names another prefix"
[ "$(pkg-config --modversion ckptsync-client)" = "$("$CKPTSYNC" --version | grep -o '[0-9][0-9.]*' | sed -n 1p)" ] \
  || die "the .pc's version is not the program's"
for f in libckptsync-client.a libckptsync-client.so libckptsync-client.so.0; do
  [ -e "$libdir/$f" ] || die "$libdir/$f not installed"
done
readelf -d "$libdir/libckptsync-client.so" | grep 'SONAME.*\[libckptsync-client\.so\.0\]' > /dev/null \
  || die "no SONAME libckptsync-client.so.0"
# Only the API of client.h is exported, nothing of the engine inside.
nm -D --defined-only "$libdir/libckptsync-client.so" | awk '$2 == "T" {print $3}' \
  | sed 's/@.*//' | grep -v '^cks_' > "$T/extra" && { cat "$T/extra" >&2; die "engine symbols exported"; }

step "a program outside the tree, built with pkg-config"
mkdir -p "$T/src"
cat > "$T/src/commit.c" <<'EOC'
/* Commit a checkpoint and wait until it is durable; print the answer. */
#include <ckptsync/client.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    struct cks_client *c;
    char *json = NULL;
    if (argc != 4)
        return 2;
    int r = cks_client_open(argv[1], &c);
    if (r < 0) {
        fprintf(stderr, "open: %d\n", r);
        return 1;
    }
    r = cks_ping(c);
    if (r == 0)
        r = cks_commit(c, argv[2], atoll(argv[3]), CKS_WAIT_DURABLE, 60, &json);
    if (r < 0)
        fprintf(stderr, "commit: %s (%s)\n", cks_client_error(c), cks_client_error_code(c));
    else
        printf("%s\n", json);
    free(json);
    cks_client_close(c);
    return r < 0;
}
EOC
# (-Werror: the installed header must be clean under a user's warnings)
cflags=(-std=c99 -Wall -Wextra -Werror -Wstrict-prototypes "${san[@]}")
# shellcheck disable=SC2046
"$CC" "${cflags[@]}" -o "$T/commit-shared" "$T/src/commit.c" $(pkg-config --cflags --libs ckptsync-client)
# The static library: the archive by name, its dependencies from --static.
# shellcheck disable=SC2046
"$CC" "${cflags[@]}" -o "$T/commit-static" "$T/src/commit.c" $(pkg-config --cflags ckptsync-client) \
  $(pkg-config --static --libs ckptsync-client | sed 's/-lckptsync-client\b/-l:libckptsync-client.a/')
readelf -d "$T/commit-shared" | grep 'NEEDED.*libckptsync-client\.so\.0' > /dev/null || die "not linked to the shared library"
readelf -d "$T/commit-static" | grep 'libckptsync-client' > /dev/null && die "the static build needs the shared library"

step "both commit to a real ckptsyncd and wait until durable"
write_config 64K 256K 1M
start_daemon
for kind in shared static; do
  step_n=$([ $kind = shared ] && echo 1000 || echo 2000)
  make_file "$T/watch/r1/step_$step_n.pt" 2
  LD_LIBRARY_PATH="$libdir" "$T/commit-$kind" "$STATE/ckptsyncd.sock" "$T/watch/r1/step_$step_n.pt" "$step_n" \
    > "$T/$kind.json" || die "the $kind program failed"
  [ "$(json "$T/$kind.json" 'd["durable"]')" = True ] || { cat "$T/$kind.json"; die "$kind: not durable"; }
  [ "$(json "$T/$kind.json" 'd["run"]')" = r1 ] || die "$kind: wrong run"
done
# A missing daemon is reported as such, not as a hang.
set +e; LD_LIBRARY_PATH="$libdir" "$T/commit-shared" "$T/nope.sock" "$T/watch/r1/x" 1 2> "$T/err"; rc=$?; set -e
[ $rc = 1 ] && grep -q "open: -2" "$T/err" || { cat "$T/err"; die "no daemon: exit $rc"; }

step "the regions hold the snapshots the library reported"
cks ls --remote --run r1 --json > "$T/ls.json"
for kind in shared static; do
  id=$(json "$T/$kind.json" 'd["id"]')
  n=$(json "$T/ls.json" "[s['regions'] for s in d if s['id'] == '$id'][0]")
  [ "$n" -ge 2 ] || die "$kind: snapshot $id in $n regions, quorum is 2"
done
stop_daemon
echo "ok"
