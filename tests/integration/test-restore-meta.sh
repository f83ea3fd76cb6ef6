#!/usr/bin/env bash
# regions: dir
# What restore keeps of a file besides its bytes (#13): setuid and setgid
# bits are cleared unless --keep-setid (a region's writer must not plant
# setuid files on every instance that restores as root), with a warning
# counting them, in --json too; the sticky bit on a directory stays.
# Hard links within a snapshot come back as links to one inode, from the
# CLI's snapshot and from the daemon's.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M

ck="$T/watch/run1/ckpt"
mkdir -p "$ck/bin" "$ck/shared"
printf '#!/bin/sh\necho hi\n' > "$ck/bin/suid"; chmod 4755 "$ck/bin/suid"
printf 'x\n' > "$ck/bin/sgid"; chmod 2750 "$ck/bin/sgid"
printf 'plain\n' > "$ck/bin/plain"; chmod 0644 "$ck/bin/plain"
chmod 1777 "$ck/shared"
chmod 2755 "$ck/bin"

step "snapshot of setuid, setgid and sticky entries"
cks snapshot "$ck" --run run1 --step 1 -q
cks show --run run1 "$(cks ls --run run1 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["id"])')" \
  > "$T/show.txt"
grep -q '^f 4755 .*ckpt/bin/suid$' "$T/show.txt" || { cat "$T/show.txt"; die "the manifest lacks the setuid bit"; }

step "restore clears setuid and setgid, says how many, keeps the sticky bit"
cks restore --run run1 --latest --to "$T/r1" --json > "$T/r1.json" 2> "$T/r1.err"
[ "$(stat -c %a "$T/r1/ckpt/bin/suid")" = 755 ] || die "setuid kept: $(stat -c %a "$T/r1/ckpt/bin/suid")"
[ "$(stat -c %a "$T/r1/ckpt/bin/sgid")" = 750 ] || die "setgid kept: $(stat -c %a "$T/r1/ckpt/bin/sgid")"
[ "$(stat -c %a "$T/r1/ckpt/bin")" = 755 ] || die "setgid directory kept: $(stat -c %a "$T/r1/ckpt/bin")"
[ "$(stat -c %a "$T/r1/ckpt/bin/plain")" = 644 ] || die "plain file mode changed"
[ "$(stat -c %a "$T/r1/ckpt/shared")" = 1777 ] || die "sticky bit lost: $(stat -c %a "$T/r1/ckpt/shared")"
[ "$(json "$T/r1.json" 'd["setid_cleared"]')" = 3 ] || die "--json: setid_cleared is not 3"
grep -q 'cleared the setuid/setgid bits of 3 file' "$T/r1.err" || { cat "$T/r1.err"; die "no warning"; }

step "--keep-setid keeps them"
cks restore --run run1 --latest --to "$T/r2" --keep-setid --json > "$T/r2.json" 2> "$T/r2.err"
[ "$(stat -c %a "$T/r2/ckpt/bin/suid")" = 4755 ] || die "--keep-setid: $(stat -c %a "$T/r2/ckpt/bin/suid")"
[ "$(stat -c %a "$T/r2/ckpt/bin/sgid")" = 2750 ] || die "--keep-setid: $(stat -c %a "$T/r2/ckpt/bin/sgid")"
[ "$(stat -c %a "$T/r2/ckpt/bin")" = 2755 ] || die "--keep-setid: directory $(stat -c %a "$T/r2/ckpt/bin")"
[ "$(json "$T/r2.json" 'd["setid_cleared"]')" = 0 ] || die "--keep-setid: setid_cleared is not 0"
grep -q 'setuid' "$T/r2.err" && die "--keep-setid: a warning anyway"

# check_links DIR: DIR/data.bin, DIR/copy.bin and DIR/sub/again.bin are one
# inode with 3 links, with the source's bytes.
check_links() {
  local a b c
  a=$(stat -c '%i %h' "$1/data.bin"); b=$(stat -c '%i %h' "$1/copy.bin"); c=$(stat -c '%i %h' "$1/sub/again.bin")
  [ "$a" = "$b" ] && [ "$a" = "$c" ] || die "\"$1\": not one inode: $a / $b / $c"
  [ "${a#* }" = 3 ] || die "\"$1\": $a: want 3 links"
  cmp "$2" "$1/data.bin" || die "\"$1\": content differs"
}

step "hard links: a file with three names in the snapshot, one more outside it"
hl="$T/watch/run2/links"
mkdir -p "$hl/sub"
head -c $((2 << 20)) /dev/urandom > "$hl/data.bin"
ln "$hl/data.bin" "$hl/copy.bin"; ln "$hl/data.bin" "$hl/sub/again.bin"; ln "$hl/data.bin" "$T/outside.bin"
cp "$hl/data.bin" "$T/data.orig"
cks snapshot "$hl" --run run2 --step 1 --json > "$T/h.json"
[ "$(json "$T/h.json" 'd["bytes"]')" = $((2 << 20)) ] || die "the linked file was read more than once"
id=$(json "$T/h.json" 'd["id"]')
cks show --run run2 "$id" > "$T/hshow.txt"
grep -q '^h .* links/data.bin -> links/copy.bin$' "$T/hshow.txt" || { cat "$T/hshow.txt"; die "no hard link entry"; }
cks restore --run run2 --snapshot "$id" --to "$T/h1" -q
check_links "$T/h1/links" "$T/data.orig"
[ "$(stat -c %h "$T/h1/links/data.bin")" = 3 ] || die "a link outside the snapshot was restored"

step "hard links through the daemon's snapshot of a unit"
set_settle 1
start_daemon
hl2="$T/watch/run3/links"
mkdir -p "$hl2/sub"
cp "$T/data.orig" "$hl2/data.bin"; ln "$hl2/data.bin" "$hl2/copy.bin"; ln "$hl2/data.bin" "$hl2/sub/again.bin"
cks commit "$hl2" --wait durable --timeout 60 -q || { tail -20 "$T/daemon.log"; die "commit"; }
stop_daemon
cks restore --run run3 --latest --to "$T/h2" -q
check_links "$T/h2/links" "$T/data.orig"

echo "restore-meta: ok"
