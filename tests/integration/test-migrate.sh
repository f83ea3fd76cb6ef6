#!/usr/bin/env bash
# regions: dir s3 ceph
# Migration: migrate-out on the old instance makes the newest checkpoint
# durable and hands it off; on a deadline it says what is and is not safe
# (and still hands off the newest safe snapshot); migrate-in on a fresh
# instance (no daemon, no index) restores the handed-off snapshot and
# prints the one path to resume from.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
start_daemon
ck() { mkdir -p "$T/watch/r1/checkpoint-$1"; head -c $((2 << 20)) /dev/urandom > "$T/watch/r1/checkpoint-$1/model.bin"; }

step "migrate-out: the newest checkpoint becomes durable and is handed off"
ck 10
cks migrate-out --run r1 --deadline 60 --quorum 3 --json > "$T/out.json" || die "migrate-out failed"
[ "$(json "$T/out.json" 'd["runs"][0]["latest_safe"]')" = True ] || die "not safe"
[ "$(json "$T/out.json" 'd["runs"][0]["handoff_regions"]')" = 3 ] || die "handoff not in 3 regions"
id10=$(json "$T/out.json" 'd["runs"][0]["handoff"]')

step "a deadline that cannot be met: exit 1, says what is safe, hands off the safe one"
if [ "${CKS_REGIONS:-dir}" = s3 ]; then kill_s3 c; elif [ "${CKS_REGIONS:-dir}" = ceph ]; then kill_ceph_region c; else mv "$T/regions/c" "$T/regions/c.away"; fi
ck 20
set +e; cks migrate-out --run r1 --deadline 4 --quorum 3 > "$T/o2" 2> "$T/e2"; rc=$?; set -e
[ $rc = 1 ] || { cat "$T/e2"; die "migrate-out exit $rc with a region down and --quorum 3"; }
grep -q "NOT safe" "$T/e2" || { cat "$T/e2"; die "no 'NOT safe'"; }
grep -q "handoff names $id10" "$T/e2" || { cat "$T/e2"; die "the safe snapshot was not handed off"; }
cks migrate-out --run r1 --deadline 30 > /dev/null 2>&1 || die "quorum 2 should be met with two regions"
if [ "${CKS_REGIONS:-dir}" = s3 ]; then restart_s3 c; elif [ "${CKS_REGIONS:-dir}" = ceph ]; then restart_ceph_region c; else mv "$T/regions/c.away" "$T/regions/c"; fi
cks retry c -q
cks migrate-out --run r1 --deadline 60 --quorum 3 -q || die "region c back: migrate-out --quorum 3"
stop_daemon

step "migrate-in on a fresh instance: no daemon, no index"
rm -rf "$STATE"
sums=$(cd "$T/watch/r1/checkpoint-20" && sha256sum model.bin)
rm -rf "$T/watch"
path=$(cks migrate-in --run r1 --to "$T/new/r1")
[ "$path" = "$T/new/r1/checkpoint-20" ] || die "migrate-in printed '$path'"
(cd "$path" && echo "$sums" | sha256sum -c --quiet) || die "restored checkpoint differs"
expect_fail 1 cks migrate-in --run r1 --to "$T/new/r1"
grep -q "already exists" "$T/err" || die "a second migrate-in should refuse to overwrite"
cks migrate-in --to "$T/new2" --json > "$T/in.json"   # the only run: no --run needed
# The first migrate-in claimed generation 1 and committed nothing since, so
# this one resumes from what that claim resumed from, and claims generation 2.
[ "$(json "$T/in.json" 'd["root"]')" = checkpoint-20 ] || die "second migrate-in: not the claimed base"
[ "$(json "$T/in.json" 'd["generation"]')" = 2 ] || die "second migrate-in: generation"
echo "migrate: ok"
