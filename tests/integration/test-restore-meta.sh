#!/usr/bin/env bash
# regions: dir
# What restore keeps of a file besides its bytes (#13): setuid and setgid
# bits are cleared unless --keep-setid (a region's writer must not plant
# setuid files on every instance that restores as root), with a warning
# counting them, in --json too; the sticky bit on a directory stays.
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

echo "restore-meta: ok"
