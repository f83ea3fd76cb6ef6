#!/usr/bin/env bash
# package.sh — build the Debian packages, split as Debian users expect:
#
#   ckptsync_<version>_<arch>.deb               the daemon and the CLI
#   libckptsync-client0_<version>_<arch>.deb    the shared library
#   libckptsync-client-dev_<version>_<arch>.deb headers, .a, .so, .pc
#   python3-ckptsync_<version>_all.deb          the Python module
#
#   deploy/package.sh [--build DIR] [--out DIR]
#
# Builds (incrementally) a release tree for prefix /usr in DIR (default
# $CKS_PACKAGE_BUILD, else build-package/), with Debian's build flags
# (dpkg-buildflags, hardening=+all: a tree of its own, not tests/run.sh's
# build-release/, which these flags would recompile each time),
# installs it into a staging root with `cmake --install --strip`, shares
# the files out into one root per package, adds what the CMake install
# does not know about, and writes the packages with dpkg-deb into --out
# (default: the build directory).  Prints their paths, one a line.  Needs
# no root: the files are owned by root in the packages
# (--root-owner-group), not on disk.
#
# What the packages are made of lives in deploy/debian/: control (the
# fields; dpkg-gencontrol writes each package's), changelog (its newest
# entry gives the version: <project version>-<revision>), copyright, the
# maintainer scripts (deb-systemd-helper, deb-systemd-invoke, $DPKG_ROOT),
# libckptsync-client0.symbols (the ABI: dpkg-gensymbols fails when the
# library exports more or less than it lists), PKG.lintian-overrides (the
# lintian warnings that do not apply, each with its reason).  The man pages are
# docs/man/*.{1,8}.  Depends come from dpkg-shlibdeps.
#
# ckptsync:  /usr/bin/ckptsync, /usr/sbin/ckptsyncd,
#            /usr/sbin/ckptsync-preempt-watch, ckptsync-migrate-out,
#            ckptsync-migrate-in (the hooks; also as
#            /usr/share/ckptsync/hooks/migrate-{out,in}.sh),
#            /lib/systemd/system/ckptsyncd.service, ckptsync-preempt.service
#            (installed, not enabled; restarted on upgrade when enabled),
#            /etc/ckptsync/ckptsync.conf.example (a conffile),
#            /usr/share/ckptsync/examples/*.conf, the man pages, the README
# libckptsync-client0:    /usr/lib/<multiarch>/libckptsync-client.so.0*
# libckptsync-client-dev: /usr/include/ckptsync/*.h, .../libckptsync-client.{a,so},
#                         .../pkgconfig/ckptsync-client.pc
# python3-ckptsync:       /usr/lib/python3/dist-packages/ckptsync/
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
meta=$top/deploy/debian
build=${CKS_PACKAGE_BUILD:-$top/build-package}
out=
PACKAGES=(ckptsync libckptsync-client0 libckptsync-client-dev python3-ckptsync)

die() { echo "package.sh: $*" >&2; exit 1; }

parse_args() {
  while [ $# -gt 0 ]; do
    case $1 in
      --build) build=$2; shift 2;;
      --out) out=$2; shift 2;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0;;
      *) echo "package.sh: unknown argument '$1' (see --help)" >&2; exit 2;;
    esac
  done
  build=$(mkdir -p "$build" && cd "$build" && pwd)
  out=${out:-$build}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local tool
  for tool in cmake strip dpkg-buildflags dpkg-deb dpkg-shlibdeps dpkg-gencontrol dpkg-gensymbols dpkg-parsechangelog gzip; do
    command -v "$tool" > /dev/null || die "'$tool' not found (deploy/deps.sh installs it)"
  done
}

# The release tree, built for prefix /usr.  The packages are a release
# build: sanitizer runtimes have no place in them.
build_tree() {
  if [ -f "$build/CMakeCache.txt" ] && grep -Eq '^CKS_(SANITIZE|TSAN|FUZZ):BOOL=ON' "$build/CMakeCache.txt"; then
    die "$build is a sanitizer or fuzzing build; give a release build (--build DIR)"
  fi
  # Debian's build flags, hardening included (fortify, stack protector,
  # relro, bindnow), taken from the source tree's root.
  local cflags cppflags ldflags
  cflags=$(cd "$top" && DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get CFLAGS)
  cppflags=$(cd "$top" && DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get CPPFLAGS)
  ldflags=$(cd "$top" && DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get LDFLAGS)
  cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKS_TESTS=OFF -DCKS_WERROR=ON \
        -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_C_FLAGS="$cflags $cppflags" \
        -DCMAKE_EXE_LINKER_FLAGS="$ldflags" -DCMAKE_SHARED_LINKER_FLAGS="$ldflags" > /dev/null
  cmake --build "$build" -j"$(nproc)" > "$build/package-build.log" 2>&1 \
    || { tail -30 "$build/package-build.log" >&2; die "the build failed (log: $build/package-build.log)"; }
}

# $version (the project's), $debversion (the changelog's), $multi.
read_versions() {
  version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
  [ -n "$version" ] || die "no project version in $build/CMakeCache.txt"
  debversion=$(dpkg-parsechangelog -l "$meta/changelog" -S Version)
  [ "${debversion%-*}" = "$version" ] \
    || die "$meta/changelog's newest entry is $debversion, the project is $version: add an entry ($version-1)"
  multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
}

# The work area dpkg-gencontrol, dpkg-shlibdeps and dpkg-gensymbols run in
# (they read debian/control and debian/changelog), one root per package
# and the staging root cmake installs into.
prepare_roots() {
  work=$build/package-work
  rm -rf "$work"
  install -d -m 0755 "$work/debian" "$work/stage"
  cp "$meta/control" "$meta/changelog" "$work/debian/"
  local p
  for p in "${PACKAGES[@]}"; do
    install -d -m 0755 "$work/$p/DEBIAN" "$work/$p/usr/share/doc/$p"
    install -m 0644 "$meta/copyright" "$work/$p/usr/share/doc/$p/copyright"
    gzip -9n < "$meta/changelog" > "$work/$p/usr/share/doc/$p/changelog.Debian.gz"
    chmod 0644 "$work/$p/usr/share/doc/$p/changelog.Debian.gz"
    install -D -m 0644 "$meta/$p.lintian-overrides" "$work/$p/usr/share/lintian/overrides/$p"
  done
  DESTDIR="$work/stage" cmake --install "$build" --prefix /usr --strip > /dev/null
  strip_stage
}

# What dh_strip does beyond --strip: no .comment or .note sections, the
# shared library's unneeded symbols and the archive's debugging
# information gone (deterministically).
strip_stage() {
  local f
  while IFS= read -r -d '' f; do
    case $f in
      *.a) strip --strip-debug --remove-section=.comment --remove-section=.note \
                 --enable-deterministic-archives "$f";;
      *.so.*) strip --remove-section=.comment --remove-section=.note --strip-unneeded "$f";;
      *) if head -c 4 "$f" | grep ELF > /dev/null; then
           strip --remove-section=.comment --remove-section=.note "$f"
         fi;;
    esac
  done < <(find "$work/stage" -type f \( -perm -0100 -o -name '*.so.*' -o -name '*.a' \) -print0)
}

# take PKG PATH...: move PATH (relative to /) from the staging root to PKG's.
take() {
  local p=$1 f
  shift
  for f in "$@"; do
    [ -e "$work/stage/$f" ] || [ -L "$work/stage/$f" ] || die "cmake --install did not install /$f"
    install -d -m 0755 "$work/$p/$(dirname "$f")"
    mv "$work/stage/$f" "$work/$p/$f"
  done
}

# man PKG PAGE...: docs/man/PAGE, version filled in, as man<section>/PAGE.gz.
man_pages() {
  local p=$1 page sect
  shift
  for page in "$@"; do
    sect=${page##*.}
    install -d -m 0755 "$work/$p/usr/share/man/man$sect"
    sed "s/@VERSION@/$version/g" "$top/docs/man/$page" | gzip -9n > "$work/$p/usr/share/man/man$sect/$page.gz"
    chmod 0644 "$work/$p/usr/share/man/man$sect/$page.gz"
  done
}

# The systemd units name the /usr/local paths deploy/install.sh uses, and
# the README as their documentation: here /usr and the man pages.
install_units() {
  local r=$work/ckptsync unit page
  install -d -m 0755 "$r/lib/systemd/system"
  for unit in ckptsyncd.service ckptsync-preempt.service; do
    page=ckptsyncd.8
    [ "$unit" = ckptsyncd.service ] || page=ckptsync-preempt-watch.8
    sed -e 's|/usr/local/sbin/|/usr/sbin/|g' -e 's|/usr/local/bin/|/usr/bin/|g' \
        -e 's|/usr/local/share/|/usr/share/|g' \
        -e "s|^Documentation=.*|Documentation=man:${page%.8}(8) file:///usr/share/doc/ckptsync/README.md.gz|" \
        -e 's|Installed by deploy/install.sh as|Installed by the Debian package (deploy/package.sh) as|' \
        -e 's|/etc/systemd/system/ckptsyncd.service|/lib/systemd/system/ckptsyncd.service|' \
        "$top/deploy/$unit" > "$r/lib/systemd/system/$unit"
    chmod 0644 "$r/lib/systemd/system/$unit"
  done
  if grep -rq /usr/local "$r/lib/systemd/system"; then
    die "a systemd unit still names /usr/local: $(grep -rl /usr/local "$r/lib/systemd/system")"
  fi
}

# ckptsync: the programs, the scripts from the source tree (the same files
# deploy/install.sh installs, under /usr instead of /usr/local), units,
# configuration, man pages.
fill_ckptsync() {
  local r=$work/ckptsync hook
  take ckptsync usr/bin/ckptsync usr/sbin/ckptsyncd
  install -m 0755 "$top/deploy/preempt-watch.sh" "$r/usr/sbin/ckptsync-preempt-watch"
  install -d -m 0755 "$r/usr/share/ckptsync/hooks" "$r/usr/share/ckptsync/examples"
  for hook in migrate-out migrate-in; do
    install -m 0755 "$top/deploy/hooks/$hook.sh" "$r/usr/sbin/ckptsync-$hook"
    ln -s "../../../sbin/ckptsync-$hook" "$r/usr/share/ckptsync/hooks/$hook.sh"
  done
  install -m 0644 "$top"/deploy/examples/*.conf "$r/usr/share/ckptsync/examples/"
  install -D -m 0644 "$top/deploy/ckptsync.conf.example" "$r/etc/ckptsync/ckptsync.conf.example"
  gzip -9n < "$top/README.md" > "$r/usr/share/doc/ckptsync/README.md.gz"
  chmod 0644 "$r/usr/share/doc/ckptsync/README.md.gz"
  install -d -m 0755 "$r/usr/share/doc/ckptsync/docs"
  for page in "$top"/docs/*.md; do # the reference the README links to
    gzip -9n < "$page" > "$r/usr/share/doc/ckptsync/docs/$(basename "$page").gz"
    chmod 0644 "$r/usr/share/doc/ckptsync/docs/$(basename "$page").gz"
  done
  man_pages ckptsync ckptsync.1 ckptsyncd.8 ckptsync-preempt-watch.8 \
            ckptsync-migrate-out.8 ckptsync-migrate-in.8
  install_units
  (cd "$r" && find etc -type f -printf '/%p\n' | sort) > "$r/DEBIAN/conffiles"
  local s
  for s in postinst prerm postrm; do
    install -m 0755 "$meta/ckptsync.$s" "$r/DEBIAN/$s"
  done
}

fill_libraries() {
  local l=usr/lib/$multi so
  so=$(cd "$work/stage/$l" && ls libckptsync-client.so.0.*) || die "no libckptsync-client.so.0.* in /$l"
  take libckptsync-client0 "$l/libckptsync-client.so.0" "$l/$so"
  install -m 0644 "$meta/libckptsync-client0.triggers" "$work/libckptsync-client0/DEBIAN/triggers"
  take libckptsync-client-dev usr/include "$l/libckptsync-client.so" "$l/libckptsync-client.a" \
       "$l/pkgconfig/ckptsync-client.pc"
}

fill_python() {
  local r=$work/python3-ckptsync s
  install -D -m 0644 "$top/client/python/ckptsync/__init__.py" \
          "$r/usr/lib/python3/dist-packages/ckptsync/__init__.py"
  for s in postinst prerm; do
    install -m 0755 "$meta/python3-ckptsync.$s" "$r/DEBIAN/$s"
  done
}

# Nothing of the install may be left unpackaged.
check_stage_empty() {
  local left
  left=$(cd "$work/stage" && find . ! -type d | sort)
  [ -z "$left" ] || die "installed but in no package: $left"
}

# libckptsync-client0's symbols (checked against deploy/debian's: -c2
# fails on a symbol added or removed without it) and shlibs files.
library_control() {
  local r=$work/libckptsync-client0
  (cd "$work" && dpkg-gensymbols -plibckptsync-client0 -P"$r" -c2 \
     -I"$meta/libckptsync-client0.symbols" -O"$r/DEBIAN/symbols") \
    || die "libckptsync-client.so.0 exports other symbols than $meta/libckptsync-client0.symbols lists (client/libclient.map): update it"
  echo "libckptsync-client 0 libckptsync-client0 (>= $version)" > "$r/DEBIAN/shlibs"
  chmod 0644 "$r/DEBIAN/symbols" "$r/DEBIAN/shlibs"
}

# shlibdeps PKG: ${shlibs:Depends} of PKG's ELF files into debian/PKG.substvars.
shlibdeps() {
  local p=$1 elves
  mapfile -t elves < <(find "$work/$p/usr" -type f -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print | sort)
  [ ${#elves[@]} -gt 0 ] || die "no ELF file in $p"
  (cd "$work" && dpkg-shlibdeps -T"debian/$p.substvars" "${elves[@]}" 2> "$work/$p.shlibdeps") \
    || { cat "$work/$p.shlibdeps" >&2; die "dpkg-shlibdeps failed for $p"; }
  grep -q '^shlibs:Depends=.' "$work/debian/$p.substvars" || die "dpkg-shlibdeps found no dependencies of $p"
}

# write_deb PKG: DEBIAN/control (dpkg-gencontrol: fields, version,
# Installed-Size), md5sums, then the .deb; prints its path.
write_deb() {
  local p=$1 r=$work/$1 a deb
  touch "$work/debian/$p.substvars"
  (cd "$work" && dpkg-gencontrol -p"$p" -P"$r" -T"debian/$p.substvars" -fdebian/files \
     -Vmisc:Depends= -Vpython3:Depends=python3:any 2> "$work/$p.gencontrol") \
    || { cat "$work/$p.gencontrol" >&2; die "dpkg-gencontrol failed for $p"; }
  (cd "$r" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 -r md5sum) \
    > "$r/DEBIAN/md5sums"
  chmod 0644 "$r/DEBIAN/control" "$r/DEBIAN/md5sums"
  [ -s "$r/DEBIAN/conffiles" ] || rm -f "$r/DEBIAN/conffiles"
  a=$(sed -n 's/^Architecture: //p' "$r/DEBIAN/control")
  deb="$out/${p}_${debversion}_$a.deb"
  dpkg-deb --root-owner-group -Zxz --build "$r" "$deb" > /dev/null
  echo "$deb"
}

main() {
  parse_args "$@"
  build_tree
  read_versions
  prepare_roots
  fill_ckptsync
  fill_libraries
  fill_python
  check_stage_empty
  library_control
  shlibdeps ckptsync
  shlibdeps libckptsync-client0
  local p
  for p in "${PACKAGES[@]}"; do
    write_deb "$p"
  done
}

main "$@"
