#!/usr/bin/env bash
# The Debian package (deploy/package.sh): built from a release tree, its
# control fields and contents checked, then unpacked (dpkg-deb -x, nothing
# installed on this machine) and used from there: the unpacked ckptsyncd
# validates the packaged example configuration (--check), the unpacked
# Python module imports, and a program builds against the unpacked
# library through its pkg-config file.
#
# The release tree: $CKS_PACKAGE_BUILD, else tests/run.sh's build-release/
# when it exists (CI builds it before the tests), else build-package/ next
# to the build under test; deploy/package.sh builds it incrementally (a
# first build takes a minute or two).
. "$(dirname "$0")/lib.sh"
command -v dpkg-deb > /dev/null || skip "dpkg-deb is not installed (not a Debian system)"
command -v dpkg-shlibdeps > /dev/null || skip "dpkg-shlibdeps is not installed (deploy/deps.sh: dpkg-dev)"
top=$CKS_SOURCE_DIR
if [ -n "${CKS_PACKAGE_BUILD:-}" ]; then B=$CKS_PACKAGE_BUILD
elif [ -f "$top/build-release/CMakeCache.txt" ]; then B=$top/build-release
else B=$(dirname "${CKS_BUILD_DIR:-$top/build}")/build-package
fi
version=$(sed -n 's/^project(ckptsync VERSION \([0-9.]*\).*/\1/p' "$top/CMakeLists.txt")
arch=$(dpkg --print-architecture)

step "deploy/package.sh builds ckptsync_${version}_$arch.deb (release tree $B)"
"$top/deploy/package.sh" --build "$B" --out "$T/out" > "$T/package.out"
deb="$T/out/ckptsync_${version}_$arch.deb"
[ "$(tail -1 "$T/package.out")" = "$deb" ] || { cat "$T/package.out"; die "package.sh did not name $deb"; }
[ -f "$deb" ] || die "no $deb"

step "control: name, version, architecture, Depends on the runtime libraries"
dpkg-deb -I "$deb" > "$T/info"
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = ckptsync ] || die "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || die "Version: $(field Version), expected $version"
[ "$(field Architecture)" = "$arch" ] || die "Architecture: $(field Architecture)"
[ -n "$(field Maintainer)" ] && [ -n "$(field Description)" ] || die "Maintainer or Description missing"
depends=$(field Depends)
for lib in libc6 libzstd1 libssl3 libcurl4 liburing2 liblmdb0 libinih1 libexpat1; do
  grep -Eq "(^|, )$lib( \(>= [^)]*\))?(,|$)" <<< "$depends" || die "Depends lacks $lib: $depends"
done
# Each of them is what this system's binaries were linked against.
ldconfig -p > "$T/ldconfig"
for lib in libzstd.so.1 libcurl.so.4 liblmdb.so.0 liburing.so.2 libinih.so.1; do
  path=$(awk -v l="$lib" '$1 == l && /x86-64/ && !p {print $NF; p = 1}' "$T/ldconfig")
  [ -n "$path" ] || continue
  owner=$(dpkg -S "$(readlink -f "$path")" 2> /dev/null | sed -n '1s/:.*//p') || true
  [ -z "$owner" ] || grep "$owner" > /dev/null <<< "$depends" || die "$lib comes from $owner, not in Depends"
done
grep -q 'conffiles' "$T/info" || die "no conffiles"

step "contents: binaries, units, configuration, Python module, watcher, hooks, library, docs"
dpkg-deb -c "$deb" > "$T/contents"
awk '{print $2}' "$T/contents" | sort -u | grep -vx 'root/root' && die "files not owned by root"
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2> /dev/null || echo x86_64-linux-gnu)
for f in usr/bin/ckptsync usr/sbin/ckptsyncd usr/sbin/ckptsync-preempt-watch \
         lib/systemd/system/ckptsyncd.service lib/systemd/system/ckptsync-preempt.service \
         etc/ckptsync/ckptsync.conf.example usr/share/ckptsync/examples/aws-s3-3regions.conf \
         usr/share/ckptsync/hooks/migrate-out.sh usr/share/ckptsync/hooks/migrate-in.sh \
         usr/lib/python3/dist-packages/ckptsync/__init__.py \
         usr/include/ckptsync/client.h "usr/lib/$multi/libckptsync-client.so.$version" \
         "usr/lib/$multi/libckptsync-client.so.0" "usr/lib/$multi/libckptsync-client.so" \
         "usr/lib/$multi/libckptsync-client.a" "usr/lib/$multi/pkgconfig/ckptsync-client.pc" \
         usr/share/doc/ckptsync/README.md usr/share/doc/ckptsync/copyright; do
  grep -q " \./$f\( ->.*\)\?$" "$T/contents" || die "the package lacks /$f"
done
# Not enabled by default: no wants/ link, no maintainer script enables it.
grep -q 'wants/' "$T/contents" && die "the package enables a unit"
grep -q '\./usr/local' "$T/contents" && die "the package installs into /usr/local"

step "unpacked: md5sums hold, the units name the packaged paths"
R="$T/root"
dpkg-deb -x "$deb" "$R"
dpkg-deb -e "$deb" "$R/DEBIAN"
(cd "$R" && md5sum --quiet -c DEBIAN/md5sums) || die "md5sums do not match"
for s in postinst prerm postrm; do
  [ ! -f "$R/DEBIAN/$s" ] || ! grep -q 'enable' "$R/DEBIAN/$s" || die "$s enables a unit"
done
for unit in "$R"/lib/systemd/system/*.service; do
  grep -q /usr/local "$unit" && die "$(basename "$unit") names /usr/local"
  for exe in $(sed -n 's/^Exec[A-Za-z]*=-\{0,1\}\([^ ]*\).*/\1/p' "$unit"); do
    [ "$exe" = /bin/kill ] || [ -x "$R$exe" ] || die "$(basename "$unit") runs $exe, not in the package"
  done
done
"$R/usr/bin/ckptsync" --version | grep "$version" > /dev/null || die "ckptsync --version is not $version"
"$R/usr/sbin/ckptsyncd" --version | grep "$version" > /dev/null || die "ckptsyncd --version is not $version"
# The programs link the engine statically, not the client library.
readelf -d "$R/usr/sbin/ckptsyncd" | grep libckptsync > /dev/null && die "ckptsyncd needs libckptsync-client"

step "the unpacked ckptsyncd --check accepts the packaged example configuration"
mkdir -p "$T/watch" "$T/ra" "$T/rb" "$T/rc"
sed -e "s|^watch = /data/cloud_storage|watch = $T/watch|" -e "s|^state = /var/lib/ckptsync|state = $T/state|" \
    -e "s|^path = /mnt/region-a|path = $T/ra|" -e "s|^path = /mnt/region-b|path = $T/rb|" \
    -e "s|^path = /mnt/region-c|path = $T/rc|" "$R/etc/ckptsync/ckptsync.conf.example" > "$T/check.conf"
grep -q "^watch = $T/watch" "$T/check.conf" || die "the example configuration has no watch line to point here"
"$R/usr/sbin/ckptsyncd" --config "$T/check.conf" --check > "$T/check.out" 2>&1 \
  || { cat "$T/check.out"; die "ckptsyncd --check refused the example configuration"; }
grep -q "is valid" "$T/check.out" || { cat "$T/check.out"; die "--check said nothing"; }
[ ! -e "$T/state" ] || die "--check created the state directory"
# ... and the cloud examples parse too (their regions need no network for --check).
for ex in "$R"/usr/share/ckptsync/examples/*.conf; do
  sed -e "s|^watch = .*|watch = $T/watch|" -e "s|^state = .*|state = $T/state|" "$ex" > "$T/ex.conf"
  "$R/usr/sbin/ckptsyncd" --config "$T/ex.conf" --check > "$T/check.out" 2>&1 \
    || { cat "$T/check.out"; die "--check refused $(basename "$ex")"; }
done

step "the unpacked Python module imports and reports the package's version"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
PYTHONPATH="$R/usr/lib/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 "$py" - "$R" "$version" <<'EOF' \
  || die "the packaged Python module"
import sys
import ckptsync
assert ckptsync.__file__.startswith(sys.argv[1]), ckptsync.__file__
assert ckptsync.__version__ == sys.argv[2], ckptsync.__version__
try:
    ckptsync.ping(socket_path=sys.argv[1] + "/no-daemon.sock")
    raise SystemExit("ping succeeded without a daemon")
except ckptsync.DaemonNotRunning:
    pass
EOF

step "a program builds against the unpacked library through its .pc"
command -v pkg-config > /dev/null || skip "pkg-config is not installed (the rest passed)"
cat > "$T/open.c" <<'EOF'
#include <errno.h>
#include <ckptsync/client.h>
int main(int argc, char **argv)
{
    struct cks_client *c = 0;
    return argc == 2 && cks_client_open(argv[1], &c) == -ENOENT && c == 0 ? 0 : 1;
}
EOF
# (the .pc says prefix=/usr: redefined to the unpacked copy)
# shellcheck disable=SC2046
${CC:-cc} -Wall -Werror -o "$T/open" "$T/open.c" $(PKG_CONFIG_PATH="$R/usr/lib/$multi/pkgconfig" \
  pkg-config --define-variable=prefix="$R/usr" --cflags --libs ckptsync-client)
LD_LIBRARY_PATH="$R/usr/lib/$multi" "$T/open" "$T/no-daemon.sock" || die "the program on the unpacked library"
LD_LIBRARY_PATH="$R/usr/lib/$multi" ldd "$T/open" | grep "$R/usr/lib/$multi/libckptsync-client.so.0" > /dev/null \
  || die "the program did not load the packaged library"
echo "ok"
