#!/usr/bin/env bash
# regions: dir
# restore --force replaces DIR/<root> atomically (#13 item 7): the old tree
# and the new one are exchanged in one rename, so DIR/<root> names one
# complete tree at every instant, and the old tree is deleted only after
# the exchange.  Real kill -9s of restore at random moments, most of them
# right after the exchange (while the old tree, thousands of files, is
# being deleted): after each, DIR/<root> is the old or the new tree, whole.
# The next restore removes what a killed one left.  Also the two-rename
# fallback (file systems without RENAME_EXCHANGE), and a tree that an
# interrupted fallback had moved aside (the state a kill between its two
# renames leaves, made here by hand: that window is too short to hit) is
# put back even by a restore that then fails.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M

# mk_tree DIR NAME: 500 small files, NAME in ckpt/WHICH and in every file (one
# content per shard: few chunks, a quick snapshot).
mk_tree() {
  local d=$1/ckpt i j
  mkdir -p "$d"
  for i in $(seq 0 4); do
    mkdir -p "$d/shard-$i"
    for j in $(seq 0 99); do printf "%s %s\n" "$2" "$i" > "$d/shard-$i/f$j"; done
  done
  printf '%s\n' "$2" > "$d/WHICH"
}

step "two snapshots of one root, A and B, of 500 files each"
mk_tree "$T/src/A" A
mk_tree "$T/src/B" B
declare -A id
for w in A B; do
  cks snapshot "$T/src/$w/ckpt" --run r1 --step 1 --json > "$T/s$w.json"
  id[$w]=$(json "$T/s$w.json" 'd["id"]')
done
cks restore --run r1 --snapshot "${id[A]}" --to "$T/dst" -q

# check_out: DIR/ckpt is A or B, complete; prints which.
check_out() {
  local w
  read -r w < "$T/dst/ckpt/WHICH" || die "round $1: \"$T/dst/ckpt\" is missing or incomplete"
  diff -r "$T/src/$w/ckpt" "$T/dst/ckpt" > /dev/null || die "round $1: \"$T/dst/ckpt\" is not tree $w, whole"
  echo "$w"
}

# kill_round N: restore the other tree with --force, kill -9 it.
# Two rounds in three wait until the new tree is in place (the old one is
# being deleted then); the third kills at a random moment.
after_swap=0
kill_round() {
  local n=$1 cur next pid w t
  cur=$(check_out "$n"); next=A; [ "$cur" = A ] && next=B
  "$CKPTSYNC" --config "$CONF" restore --run r1 --snapshot "${id[$next]}" --to "$T/dst" \
    --force -q 2> "$T/kill.err" &
  pid=$!
  if [ $((n % 3)) -ne 0 ]; then
    while kill -0 "$pid" 2> /dev/null; do
      read -r w 2> /dev/null < "$T/dst/ckpt/WHICH" && [ "$w" = "$next" ] && break
    done
    t=$((RANDOM % 4))
  else
    t=$((RANDOM % 400))
  fi
  if [ "$t" -gt 0 ]; then sleep "0.$(printf '%03d' "$t")"; fi
  kill -9 "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  if compgen -G "$T/dst/.ckptsync-restore.*" > /dev/null && [ -e "$T/dst/ckpt" ]; then
    if read -r w < "$T/dst/ckpt/WHICH" && [ "$w" = "$next" ]; then after_swap=$((after_swap + 1)); fi
  fi
  return 0
}

step "12 restores --force killed with SIGKILL: DIR/ckpt is always one whole tree"
for n in $(seq 1 12); do
  kill_round "$n"
  check_out "$n" > /dev/null
done
echo "killed after the exchange, with the old tree not yet deleted: $after_swap of 12"
[ "$after_swap" -gt 0 ] || die "no kill landed between the exchange and the end of the old tree's deletion"

step "the next restore removes what killed ones left"
cur=$(check_out final)
cks restore --run r1 --snapshot "${id[$cur]}" --to "$T/dst.2" -q
cks restore --run r1 --snapshot "${id[$cur]}" --to "$T/dst" --force -q
check_out final > /dev/null
if compgen -G "$T/dst/.ckptsync-restore.*" > /dev/null; then ls -A "$T/dst" >&2; die "staging directories left"; fi

step "fallback without RENAME_EXCHANGE: two renames, old tree removed after"
next=A; [ "$cur" = A ] && next=B
CKPTSYNC_RESTORE_NO_EXCHANGE=1 cks restore --run r1 --snapshot "${id[$next]}" --to "$T/dst" --force -q
[ "$(check_out fallback)" = "$next" ] || die "fallback: the new tree is not in place"
if compgen -G "$T/dst/.ckptsync-restore.*" > /dev/null; then die "fallback: staging directory left"; fi

step "a tree moved aside by an interrupted swap is put back by a restore that then fails"
mkdir -p "$T/src/C/ckpt"; printf 'only in C %s\n' "$RANDOM$RANDOM" > "$T/src/C/ckpt/c.bin"
cks snapshot "$T/src/C/ckpt" --run r1 --step 2 --json > "$T/sC.json"
idC=$(json "$T/sC.json" 'd["id"]')
sum=$(sha256sum "$T/src/C/ckpt/c.bin" | cut -c1-64)
rm -f "$T"/regions/*/chunks/"${sum:0:2}/$sum"
cur=$(check_out aside)
mkdir -p "$T/dst/.ckptsync-restore.$idC/old" "$T/dst/.ckptsync-restore.$idC/tree/ckpt"
mv "$T/dst/ckpt" "$T/dst/.ckptsync-restore.$idC/old/ckpt"
expect_fail 1 cks restore --run r1 --snapshot "$idC" --to "$T/dst" --force
grep -q 'put back' "$T/err" || { cat "$T/err" >&2; die "no 'put back' message"; }
[ "$(check_out aside)" = "$cur" ] || die "the old tree was not put back"
if compgen -G "$T/dst/.ckptsync-restore.*" > /dev/null; then ls -A "$T/dst" >&2; die "staging directory left"; fi
echo "restore-swap: ok"
