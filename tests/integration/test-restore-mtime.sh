#!/usr/bin/env bash
# regions: dir
# Restore keeps modification times (#13 item 13): files, symlinks and
# directories (set after their contents) come back with the mtime the
# snapshot recorded, to the nanosecond, and an access time equal to it;
# through the CLI's snapshot and the daemon's.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M

# mk_tree DIR: files, an empty file, nested and empty directories, a
# symlink, each with its own old time.
mk_tree() {
  mkdir -p "$1/sub/deep" "$1/empty"
  head -c 300000 /dev/urandom > "$1/model.bin"
  printf 'cfg\n' > "$1/sub/config.json"
  : > "$1/sub/deep/empty-file"
  ln -s ../model.bin "$1/sub/model.link"
  touch -d '2001-02-03 04:05:06.123456789' "$1/model.bin"
  touch -d '1999-12-31 23:59:59.5' "$1/sub/config.json"
  touch -d '2010-01-01 00:00:00' "$1/sub/deep/empty-file"
  touch -h -d '2005-05-05 05:05:05.000000555' "$1/sub/model.link"
  touch -d '2002-02-02 02:02:02.2' "$1/sub/deep" "$1/empty"
  touch -d '2003-03-03 03:03:03' "$1/sub"
  touch -d '2004-04-04 04:04:04' "$1"
}

# same_times A B: every entry's mtime equal (nanoseconds), and in B (read
# by nothing before: reading updates atimes) atime = mtime.
same_times() {
  (cd "$1" && find . -printf '%p %T@\n' | sort) > "$T/times.a"
  (cd "$2" && find . -printf '%p %T@ %A@\n' | sort) > "$T/times.ab"
  cut -d' ' -f1,2 "$T/times.ab" > "$T/times.b"
  cmp -s "$T/times.a" "$T/times.b" || { diff "$T/times.a" "$T/times.b" >&2; die "mtimes differ: $1 $2"; }
  awk '$2 != $3 { print; bad = 1 } END { exit bad }' "$T/times.ab" >&2 || die "atime is not mtime: $2"
}

step "snapshot and restore keep times"
mk_tree "$T/watch/run1/ckpt"
cp -a "$T/watch/run1/ckpt" "$T/orig"
cks snapshot "$T/watch/run1/ckpt" --run run1 --step 1 -q
cks restore --run run1 --latest --to "$T/r1" -q
same_times "$T/orig" "$T/r1/ckpt"
same_tree "$T/orig" "$T/r1/ckpt"
[ "$(stat -c %Y "$T/r1/ckpt/model.bin")" = "$(stat -c %Y "$T/orig/model.bin")" ] || die "stat %Y differs"

step "a single-file snapshot"
cks snapshot "$T/watch/run1/ckpt/model.bin" --run run1b --step 1 -q
cks restore --run run1b --latest --to "$T/r2" -q
[ "$(stat -c %y "$T/r2/model.bin")" = "$(stat -c %y "$T/orig/model.bin")" ] || die "single file: mtime differs"

step "through the daemon"
mkdir -p "$T/watch/run2"
cp -a "$T/orig" "$T/watch/run2/ckpt"
set_settle 1
start_daemon
cks commit "$T/watch/run2/ckpt" --wait durable --timeout 60 -q || { tail -20 "$T/daemon.log"; die "commit"; }
stop_daemon
cks restore --run run2 --latest --to "$T/r3" -q
same_times "$T/orig" "$T/r3/ckpt"
echo "restore-mtime: ok"
