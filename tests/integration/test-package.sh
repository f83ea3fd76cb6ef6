#!/usr/bin/env bash
# The Debian packages (deploy/package.sh): ckptsync, libckptsync-client0,
# libckptsync-client-dev and python3-ckptsync, built from a release tree,
# checked by lintian (no error, no warning but the overridden ones, each
# with its reason), their control fields, contents, man pages (rendered by
# man, and naming every option the programs' --help does) and the
# library's SONAME and symbols file; then installed by dpkg into a
# throw-away root (dpkg --root, maintainer scripts run chrootless with
# $DPKG_ROOT: the real deb-systemd-helper records the units' state there,
# nothing on this machine changes), upgraded (an administrator's
# enablement survives), used from there (ckptsyncd --check on the
# packaged examples, the Python module, a program built through the .pc
# against the installed library), removed and purged.  The maintainer
# scripts' systemd calls on a running system (restart on upgrade, stop on
# removal) are checked in a private mount namespace whose /run says
# systemd runs, with stand-ins for deb-systemd-invoke, deb-systemd-helper
# and systemctl that record what they are asked (no systemd runs here).
#
# The release tree: $CKS_PACKAGE_BUILD, else build-package/ next to the
# build under test; deploy/package.sh builds it incrementally, with
# Debian's build flags (a first build takes a few minutes).
. "$(dirname "$0")/lib.sh"
for tool in dpkg-deb dpkg-shlibdeps dpkg-gencontrol dpkg-gensymbols; do
  command -v $tool > /dev/null || skip "$tool is not installed (deploy/deps.sh --test: dpkg-dev)"
done
top=$CKS_SOURCE_DIR
B=${CKS_PACKAGE_BUILD:-$(dirname "${CKS_BUILD_DIR:-$top/build}")/build-package}
version=$(sed -n 's/^project(ckptsync VERSION \([0-9.]*\).*/\1/p' "$top/CMakeLists.txt")
debversion=$(dpkg-parsechangelog -l "$top/deploy/debian/changelog" -S Version)
arch=$(dpkg --print-architecture)
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
PKGS=(ckptsync libckptsync-client0 libckptsync-client-dev python3-ckptsync)
declare -A DEB
DEB[ckptsync]=$T/out/ckptsync_${debversion}_$arch.deb
DEB[libckptsync-client0]=$T/out/libckptsync-client0_${debversion}_$arch.deb
DEB[libckptsync-client-dev]=$T/out/libckptsync-client-dev_${debversion}_$arch.deb
DEB[python3-ckptsync]=$T/out/python3-ckptsync_${debversion}_all.deb
field() { dpkg-deb -f "${DEB[$1]}" "$2"; }
R=$T/root

check_build() {
  step "deploy/package.sh builds the four packages, version $debversion (release tree $B)"
  [ "${debversion%-*}" = "$version" ] || die "deploy/debian/changelog is at $debversion, the project at $version"
  "$top/deploy/package.sh" --build "$B" --out "$T/out" > "$T/package.out"
  local p
  for p in "${PKGS[@]}"; do
    [ -f "${DEB[$p]}" ] || { cat "$T/package.out"; die "no ${DEB[$p]}"; }
    grep -qx "${DEB[$p]}" "$T/package.out" || die "package.sh did not name ${DEB[$p]}"
  done
  [ "$(wc -l < "$T/package.out")" = 4 ] || { cat "$T/package.out"; die "package.sh wrote other packages"; }
}

check_lintian() {
  step "lintian: no error, no warning (overrides only with a reason)"
  if ! command -v lintian > /dev/null; then
    echo "lintian is not installed (deploy/deps.sh --test installs it): not checked"
    return
  fi
  lintian --tag-display-limit 0 --show-overrides --fail-on none "${DEB[@]}" > "$T/lintian" 2>&1 \
    || { cat "$T/lintian"; die "lintian failed"; }
  grep -E '^[EW]: ' "$T/lintian" && die "lintian reports errors or warnings"
  # (overridden tags are O: lines, which --fail-on would count)
  # Each override comes with its reason (an N: line before the O: lines).
  awk '/^N: /{why = 1} /^O: /{if (!why) bad = 1} /^[^NO]/{why = 0} END{exit bad}' "$T/lintian" \
    || { cat "$T/lintian"; die "a lintian override without a reason"; }
}

check_control() {
  step "control: names, version, architecture, sections, maintainer, Depends"
  local p
  for p in "${PKGS[@]}"; do
    [ "$(field "$p" Package)" = "$p" ] || die "$p: Package: $(field "$p" Package)"
    [ "$(field "$p" Version)" = "$debversion" ] || die "$p: Version: $(field "$p" Version)"
    [ "$(field "$p" Priority)" = optional ] || die "$p: Priority: $(field "$p" Priority)"
    [ -n "$(field "$p" Description)" ] || die "$p: no Description"
    field "$p" Maintainer | grep -E '^[^<]+ <[^@ ]+@[^> ]+\.[a-z]+>$' > /dev/null || die "$p: Maintainer: $(field "$p" Maintainer)"
    field "$p" Maintainer | grep -E '@(localhost|[^>]*\.(invalid|localdomain))>' > /dev/null && die "$p: a bogus Maintainer"
  done
  [ "$(field ckptsync Architecture)" = "$arch" ] && [ "$(field python3-ckptsync Architecture)" = all ] \
    || die "architectures: $(field ckptsync Architecture), $(field python3-ckptsync Architecture)"
  [ "$(field ckptsync Section)" = admin ] && [ "$(field libckptsync-client0 Section)" = libs ] \
    && [ "$(field libckptsync-client-dev Section)" = libdevel ] && [ "$(field python3-ckptsync Section)" = python ] \
    || die "sections"
  [ "$(field libckptsync-client0 Multi-Arch)" = same ] || die "libckptsync-client0 is not Multi-Arch: same"
  local depends lib
  depends=$(field ckptsync Depends)
  for lib in libc6 libzstd1 libssl3 libcurl4 liburing2 liblmdb0 libinih1 libexpat1; do
    grep -Eq "(^|, )$lib( \(>= [^)]*\))?(,|$)" <<< "$depends" || die "ckptsync: Depends lacks $lib: $depends"
  done
  field libckptsync-client0 Depends | grep -E '(^|, )libssl3 \(>= ' > /dev/null || die "libckptsync-client0: Depends: $(field libckptsync-client0 Depends)"
  field libckptsync-client-dev Depends | grep "libckptsync-client0 (= $debversion)" > /dev/null \
    || die "libckptsync-client-dev: Depends: $(field libckptsync-client-dev Depends)"
  field python3-ckptsync Depends | grep python3 > /dev/null || die "python3-ckptsync: Depends: $(field python3-ckptsync Depends)"
}

# contents PKG: the paths PKG holds, one a line, without ./
contents() { dpkg-deb -c "${DEB[$1]}" | awk '{print $6}' | sed 's|^\./||; /\/$/d'; }

check_contents() {
  step "contents: each file in its package, in one package only, owned by root"
  local p f
  for p in "${PKGS[@]}"; do
    dpkg-deb -c "${DEB[$p]}" | awk '{print $2}' | sort -u | grep -vx 'root/root' && die "$p: files not owned by root"
    contents "$p" > "$T/$p.files"
    for f in usr/share/doc/$p/copyright usr/share/doc/$p/changelog.Debian.gz; do
      grep -qx "$f" "$T/$p.files" || die "$p lacks /$f"
    done
  done
  expect_files ckptsync usr/bin/ckptsync usr/sbin/ckptsyncd usr/sbin/ckptsync-preempt-watch \
    usr/sbin/ckptsync-migrate-out usr/sbin/ckptsync-migrate-in \
    usr/share/ckptsync/hooks/migrate-out.sh usr/share/ckptsync/hooks/migrate-in.sh \
    lib/systemd/system/ckptsyncd.service lib/systemd/system/ckptsync-preempt.service \
    etc/ckptsync/ckptsync.conf.example usr/share/ckptsync/examples/aws-s3-3regions.conf \
    usr/share/man/man1/ckptsync.1.gz usr/share/man/man8/ckptsyncd.8.gz \
    usr/share/man/man8/ckptsync-preempt-watch.8.gz usr/share/man/man8/ckptsync-migrate-out.8.gz \
    usr/share/man/man8/ckptsync-migrate-in.8.gz usr/share/doc/ckptsync/README.md.gz
  expect_files libckptsync-client0 "usr/lib/$multi/libckptsync-client.so.0" "usr/lib/$multi/libckptsync-client.so.$version"
  expect_files libckptsync-client-dev usr/include/ckptsync/client.h "usr/lib/$multi/libckptsync-client.so" \
    "usr/lib/$multi/libckptsync-client.a" "usr/lib/$multi/pkgconfig/ckptsync-client.pc"
  expect_files python3-ckptsync usr/lib/python3/dist-packages/ckptsync/__init__.py
  grep -v '^usr/share/\(doc\|lintian\)/' "$T"/*.files | cut -d: -f2 | sort | uniq -d | grep . && die "files in two packages"
  cat "$T"/*.files | grep -E '^usr/local/|wants/' && die "a file in /usr/local, or a unit enabled by a link"
  dpkg-deb --ctrl-tarfile "${DEB[ckptsync]}" | tar -xO ./conffiles | grep -x /etc/ckptsync/ckptsync.conf.example > /dev/null \
    || die "the example configuration is not a conffile"
}

# expect_files PKG PATH...: PKG holds each PATH.
expect_files() {
  local p=$1 f
  shift
  for f in "$@"; do grep -qx "$f" "$T/$p.files" || die "$p lacks /$f"; done
}

check_library() {
  step "libckptsync-client0: SONAME, symbols file = the exported symbols, shlibs, ldconfig trigger"
  local x=$T/x-lib
  dpkg-deb -R "${DEB[libckptsync-client0]}" "$x"
  readelf -d "$x/usr/lib/$multi/libckptsync-client.so.$version" | grep 'SONAME.*\[libckptsync-client\.so\.0\]' > /dev/null \
    || die "the library's SONAME is not libckptsync-client.so.0"
  nm -D --defined-only "$x/usr/lib/$multi/libckptsync-client.so.$version" | awk '$2 == "T" {print $3}' | sort \
    > "$T/exported"
  grep -q '^cks_client_open@@CKPTSYNC_CLIENT_0$' "$T/exported" || die "cks_client_open is not exported"
  grep -v '^cks_' "$T/exported" && die "the library exports more than the cks_ API"
  sed -n 's/^ \(cks_[a-z_]*\)@\([A-Z0-9_.]*\) .*/\1@@\2/p' "$x/DEBIAN/symbols" | sort > "$T/listed"
  sed 's/@@.*@@/@@/' "$T/exported" | diff "$T/listed" - || die "DEBIAN/symbols is not what the library exports"
  head -1 "$x/DEBIAN/symbols" | grep '^libckptsync-client\.so\.0 libckptsync-client0 ' > /dev/null || die "symbols: $(head -1 "$x/DEBIAN/symbols")"
  grep -qx "libckptsync-client 0 libckptsync-client0 (>= $version)" "$x/DEBIAN/shlibs" || die "shlibs: $(cat "$x/DEBIAN/shlibs")"
  grep -qx 'activate-noawait ldconfig' "$x/DEBIAN/triggers" || die "no ldconfig trigger"
  # The programs link the engine statically, not the client library.
  dpkg-deb -x "${DEB[ckptsync]}" "$T/x-ckptsync"
  readelf -d "$T/x-ckptsync/usr/sbin/ckptsyncd" | grep libckptsync > /dev/null && die "ckptsyncd needs libckptsync-client"
  readelf -d "$T/x-ckptsync/usr/sbin/ckptsyncd" | grep 'FLAGS.*BIND_NOW' > /dev/null || die "ckptsyncd is not linked -z now"
}

# help_options PROGRAM: the long options its --help names.
help_options() { "$@" --help 2>&1 | grep -o -- '--[a-z][a-z-]*' | sort -u; }

check_man() {
  step "man pages: rendered by man without warnings, every --help option in them"
  command -v man > /dev/null || { echo "man is not installed: not checked"; return; }
  local x=$T/x-ckptsync prog page sect opt
  for prog in usr/bin/ckptsync usr/sbin/ckptsyncd usr/sbin/ckptsync-preempt-watch \
              usr/sbin/ckptsync-migrate-out usr/sbin/ckptsync-migrate-in; do
    sect=8; [ "${prog#usr/bin/}" = "$prog" ] || sect=1
    page=$x/usr/share/man/man$sect/$(basename "$prog").$sect.gz
    [ -f "$page" ] || die "no man page for /$prog"
    LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" > "$T/man.txt" 2> "$T/man.err" || die "man -l $page failed"
    [ ! -s "$T/man.err" ] || { cat "$T/man.err"; die "man warns about $(basename "$page")"; }
    grep -q "ckptsync $version" "$T/man.txt" || die "$(basename "$page") does not give the version $version"
    for opt in $(help_options "$x/$prog"); do
      grep -q -- "$opt" "$T/man.txt" || die "$(basename "$page") does not describe $opt ($prog --help does)"
    done
  done
  # gzip -9n: no file name (flag 8), no time stamp in the header
  for page in "$x"/usr/share/man/man*/*.gz; do
    [ "$(od -An -tu1 -j3 -N5 "$page" | tr -s ' ')" = " 0 0 0 0 0" ] || die "$(basename "$page") is not gzip -n"
  done
  # ckptsync's commands, as its --help lists them.
  "$x/usr/bin/ckptsync" --help | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p' | sort -u > "$T/commands"
  [ "$(wc -l < "$T/commands")" -ge 15 ] || die "ckptsync --help lists $(wc -l < "$T/commands") commands"
  LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$x/usr/share/man/man1/ckptsync.1.gz" > "$T/man.txt" 2> /dev/null
  while read -r cmd; do
    grep -Eq "^ {7}$cmd( |$)" "$T/man.txt" || die "ckptsync(1) does not describe the command $cmd"
  done < "$T/commands"
}

# An admin directory for the throw-away root: what the packages depend on,
# as this system has it (so that dpkg checks the Depends), nothing else.
make_admindir() {
  local d=$R/var/lib/dpkg dep
  install -d "$d/info" "$d/updates" "$d/triggers"
  : > "$d/available"
  : > "$d/status"
  for dep in $(cat "$T"/*.deps | sort -u); do
    dpkg-query -s "$dep" >> "$d/status" 2> /dev/null || die "this system lacks $dep, a dependency"
    echo >> "$d/status"
    : > "$d/info/$(dpkg-query -W -f='${binary:Package}' "$dep").list"
  done
}

# root_dpkg ARGS: dpkg on the throw-away root, maintainer scripts run
# here (chrootless) with DPKG_ROOT=$R.
root_dpkg() { dpkg --root="$R" --force-script-chrootless "$@" > "$T/dpkg.out" 2>&1 || { cat "$T/dpkg.out"; return 1; }; }

# What the package install may not touch on this machine.
host_state() {
  find /var/lib/systemd /etc/systemd /var/lib/dpkg/info /lib/systemd/system /usr/sbin /usr/bin \
       -name '*ckptsync*' -printf '%p %y %m\n' 2> /dev/null | sort
  stat -c '%n %F %a' /var/lib/ckptsync 2> /dev/null || true
}

check_install() {
  step "dpkg --root installs the four into a throw-away root; \$DPKG_ROOT honoured, this machine untouched"
  local p
  for p in "${PKGS[@]}"; do
    field "$p" Depends | tr ',' '\n' | sed 's/([^)]*)//; s/:any//; s/ //g' | grep -v '^libckptsync' > "$T/$p.deps" || true
  done
  make_admindir
  host_state > "$T/host.before"
  root_dpkg -i "${DEB[@]}" || die "dpkg --root -i failed"
  for p in "${PKGS[@]}"; do
    dpkg --root="$R" -s "$p" | grep -x 'Status: install ok installed' > /dev/null || die "$p is not installed in the root"
  done
  [ "$(stat -c %a "$R/var/lib/ckptsync")" = 700 ] || die "postinst did not make \$DPKG_ROOT/var/lib/ckptsync 0700"
  for unit in ckptsyncd.service ckptsync-preempt.service; do
    [ -f "$R/var/lib/systemd/deb-systemd-helper-enabled/$unit.dsh-also" ] \
      || die "deb-systemd-helper recorded no state for $unit under \$DPKG_ROOT"
  done
  [ ! -e "$R/etc/systemd/system/multi-user.target.wants" ] || die "the install enabled a unit"
  host_state > "$T/host.after"
  diff "$T/host.before" "$T/host.after" || die "installing into the root changed this machine"
}

check_upgrade() {
  step "an upgrade keeps what the administrator enabled, and only that"
  local wants=$R/etc/systemd/system/multi-user.target.wants
  # The administrator: systemctl enable ckptsyncd (the link it makes).
  if command -v systemctl > /dev/null; then
    systemctl --root="$R" enable ckptsyncd.service > /dev/null 2>&1 || die "systemctl --root enable failed"
  else
    mkdir -p "$wants" && ln -s /lib/systemd/system/ckptsyncd.service "$wants/"
  fi
  [ -L "$wants/ckptsyncd.service" ] || die "could not enable ckptsyncd in the root"
  root_dpkg -i "${DEB[ckptsync]}" || die "the upgrade failed"
  [ -L "$wants/ckptsyncd.service" ] || die "the upgrade did not keep ckptsyncd enabled"
  [ ! -e "$wants/ckptsync-preempt.service" ] || die "the upgrade enabled the watcher"
  grep -q "multi-user.target.wants/ckptsyncd.service" "$R/var/lib/systemd/deb-systemd-helper-enabled/ckptsyncd.service.dsh-also" \
    || die "deb-systemd-helper did not take over the enablement (purge would leave the link)"
}

check_use() {
  step "used from the root: the programs, the hooks, ckptsyncd --check on the packaged examples"
  "$R/usr/bin/ckptsync" --version | grep "$version" > /dev/null || die "ckptsync --version is not $version"
  "$R/usr/sbin/ckptsyncd" --version | grep "$version" > /dev/null || die "ckptsyncd --version is not $version"
  "$R/usr/share/ckptsync/hooks/migrate-out.sh" --help | grep '^usage: migrate-out.sh' > /dev/null || die "the migrate-out hook"
  "$R/usr/sbin/ckptsync-migrate-in" --help | grep '^usage: migrate-in.sh' > /dev/null || die "the migrate-in hook"
  local unit exe
  for unit in "$R"/lib/systemd/system/*.service; do
    grep -q /usr/local "$unit" && die "$(basename "$unit") names /usr/local"
    for exe in $(sed -n 's/^Exec[A-Za-z]*=-\{0,1\}\([^ ]*\).*/\1/p' "$unit"); do
      [ "$exe" = /bin/kill ] || [ -x "$R$exe" ] || die "$(basename "$unit") runs $exe, not in the package"
    done
  done
  mkdir -p "$T/watch" "$T/ra" "$T/rb" "$T/rc"
  sed -e "s|^watch = /data/cloud_storage|watch = $T/watch|" -e "s|^state = /var/lib/ckptsync|state = $T/state|" \
      -e "s|^path = /mnt/region-a|path = $T/ra|" -e "s|^path = /mnt/region-b|path = $T/rb|" \
      -e "s|^path = /mnt/region-c|path = $T/rc|" "$R/etc/ckptsync/ckptsync.conf.example" > "$T/check.conf"
  grep -q "^watch = $T/watch" "$T/check.conf" || die "the example configuration has no watch line to point here"
  "$R/usr/sbin/ckptsyncd" --config "$T/check.conf" --check > "$T/check.out" 2>&1 \
    || { cat "$T/check.out"; die "ckptsyncd --check refused the example configuration"; }
  grep -q "is valid" "$T/check.out" || { cat "$T/check.out"; die "--check said nothing"; }
  [ ! -e "$T/state" ] || die "--check created the state directory"
  local ex
  # --check reads the credentials files the examples name: one here, 0600
  (umask 077; printf '[default]\naws_access_key_id = AKEXAMPLE\naws_secret_access_key = example\n' \
    > "$T/credentials")
  for ex in "$R"/usr/share/ckptsync/examples/*.conf; do
    sed -e "s|^watch = .*|watch = $T/watch|" -e "s|^state = .*|state = $T/state|" \
        -e "s|^credentials = .*|credentials = $T/credentials|" "$ex" > "$T/ex.conf"
    "$R/usr/sbin/ckptsyncd" --config "$T/ex.conf" --check > "$T/check.out" 2>&1 \
      || { cat "$T/check.out"; die "--check refused $(basename "$ex")"; }
  done
}

check_python() {
  step "the installed Python module imports and reports the version"
  local py=/usr/bin/python3
  [ -x "$py" ] || py=python3
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
}

check_dev() {
  step "a program builds against the installed -dev package through its .pc, runs on libckptsync-client0"
  command -v pkg-config > /dev/null || { echo "pkg-config is not installed: not checked"; return; }
  cat > "$T/open.c" <<'EOF'
#include <errno.h>
#include <ckptsync/client.h>
int main(int argc, char **argv)
{
    struct cks_client *c = 0;
    return argc == 2 && cks_client_open(argv[1], &c) == -ENOENT && c == 0 ? 0 : 1;
}
EOF
  # (the .pc says prefix=/usr: redefined to the root)
  # shellcheck disable=SC2046
  ${CC:-cc} -Wall -Werror -o "$T/open" "$T/open.c" $(PKG_CONFIG_PATH="$R/usr/lib/$multi/pkgconfig" \
    pkg-config --define-variable=prefix="$R/usr" --cflags --libs ckptsync-client)
  LD_LIBRARY_PATH="$R/usr/lib/$multi" "$T/open" "$T/no-daemon.sock" || die "the program on the installed library"
  LD_LIBRARY_PATH="$R/usr/lib/$multi" ldd "$T/open" | grep "$R/usr/lib/$multi/libckptsync-client.so.0" > /dev/null \
    || die "the program did not load the packaged library"
}

check_remove() {
  step "remove keeps the conffile, purge removes it and the units' state (under \$DPKG_ROOT)"
  root_dpkg -r python3-ckptsync libckptsync-client-dev libckptsync-client0 ckptsync || die "dpkg --root -r failed"
  [ ! -e "$R/usr/sbin/ckptsyncd" ] && [ ! -e "$R/usr/lib/$multi/libckptsync-client.so.0" ] \
    && [ ! -e "$R/usr/lib/python3/dist-packages/ckptsync" ] || die "remove left files"
  [ -f "$R/etc/ckptsync/ckptsync.conf.example" ] || die "remove took the conffile"
  root_dpkg --purge ckptsync || die "dpkg --root --purge failed"
  [ ! -e "$R/etc/ckptsync/ckptsync.conf.example" ] || die "purge left the conffile"
  [ ! -e "$R/var/lib/systemd/deb-systemd-helper-enabled/ckptsyncd.service.dsh-also" ] \
    && [ ! -e "$R/etc/systemd/system/multi-user.target.wants/ckptsyncd.service" ] \
    || die "purge left the units' state: $(find "$R/var/lib/systemd" "$R/etc/systemd" 2> /dev/null)"
  host_state > "$T/host.after"
  diff "$T/host.before" "$T/host.after" || die "removing from the root changed this machine"
}

# With a running systemd (a private /run that says so), DPKG_ROOT empty:
# stand-ins record the calls; /var/lib and /etc/systemd are private too.
check_running_system() {
  step "on a running systemd: no enable on install, restart on upgrade, stop on removal, purge forgets"
  command -v unshare > /dev/null && unshare -m true 2> /dev/null \
    || { echo "no private mount namespace here (unshare -m): not checked"; return; }
  local fake=$T/fake s
  mkdir -p "$fake"
  for s in deb-systemd-helper deb-systemd-invoke systemctl; do
    printf '#!/bin/sh\necho "%s $*" >> "%s/calls"\n[ "$1" != debian-installed ] && [ "$2" != was-enabled ]\n' \
      "$s" "$T" > "$fake/$s"
    chmod +x "$fake/$s"
  done
  dpkg-deb -e "${DEB[ckptsync]}" "$T/ctl"
  run_scripts "postinst configure" "postinst configure $debversion" "prerm upgrade $debversion" \
              "prerm remove" "postrm remove" "postrm purge"
  diff -u - "$T/calls" <<EOF || die "the maintainer scripts' systemd calls"
== postinst configure
deb-systemd-helper debian-installed ckptsyncd.service
deb-systemd-helper update-state ckptsyncd.service
deb-systemd-helper debian-installed ckptsync-preempt.service
deb-systemd-helper update-state ckptsync-preempt.service
systemctl --system daemon-reload
== postinst configure $debversion
deb-systemd-helper debian-installed ckptsyncd.service
deb-systemd-helper update-state ckptsyncd.service
deb-systemd-helper debian-installed ckptsync-preempt.service
deb-systemd-helper update-state ckptsync-preempt.service
systemctl --system daemon-reload
deb-systemd-invoke restart ckptsyncd.service ckptsync-preempt.service
== prerm upgrade $debversion
== prerm remove
deb-systemd-invoke stop ckptsync-preempt.service ckptsyncd.service
== postrm remove
systemctl --system daemon-reload
== postrm purge
deb-systemd-helper purge ckptsyncd.service ckptsync-preempt.service
EOF
  : > "$T/calls"
  DPKG_ROOT=$R run_scripts "postinst configure $debversion" "prerm remove" "postrm remove"
  grep -E 'systemctl|deb-systemd-invoke' "$T/calls" && die "with \$DPKG_ROOT set the scripts touched the running system"
  return 0
}

# run_scripts "SCRIPT ARGS"...: each of ckptsync's maintainer scripts in
# the private namespace, its calls appended to $T/calls.
run_scripts() {
  local spec
  for spec in "$@"; do
    echo "== $spec" >> "$T/calls"
    # shellcheck disable=SC2086
    unshare -m sh -ec 'for d in /run /var/lib /etc/systemd; do mount -t tmpfs tmpfs "$d"; done
                       mkdir -p /run/systemd/system
                       PATH="$1:$PATH" "$2/$3" $4' _ "$T/fake" "$T/ctl" ${spec%% *} "${spec#* }" \
      || die "ckptsync's $spec failed"
  done
}

check_build
check_lintian
check_control
check_contents
check_library
check_man
check_install
check_upgrade
check_use
check_python
check_dev
check_remove
check_running_system
echo "ok"
