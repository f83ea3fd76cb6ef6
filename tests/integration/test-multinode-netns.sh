#!/usr/bin/env bash
# A node of a three-node job cut off from the regions by a network
# partition: its daemon runs in a network namespace this test makes (a
# veth pair, 10.231.X.1/30 on the host side, .2 inside; X drawn), and the
# three regions are s3rver servers listening on the host side's address.
#   1. step 1000 commits on all three nodes (the link up);
#   2. step 2000: node 2 (in the namespace, its uploads capped at 512 KiB/s
#      a region) is cut off while it uploads (its side of the link down;
#      the connections it had open are aborted with `ss -K`, as a reset
#      would: a silent drop would stall them until curl's 30 s low-speed
#      limit, CKS_NETNS_HANG=1 tries that): its daemon reports every region
#      failing; step 2000 stays incomplete (no commit record, node 2
#      missing in ls --remote), and a fresh instance restores step 1000,
#      bit for bit;
#   3. the link back: node 2's queue resumes by itself, and step 2000
#      commits once per region and restores whole on a fresh instance.
# Skipped (77) where network namespaces or veth pairs cannot be made.
. "$(dirname "$0")/lib.sh"
command -v ip > /dev/null 2>&1 || skip "no ip(8)"
NS=cks-mn$$
HV=ckh$$ NV=ckn$$
ip netns add "$NS" 2> /dev/null || skip "ip netns add is not permitted here"
_ns_cleanup() { ip link del "$HV" 2> /dev/null || true; ip netns del "$NS" 2> /dev/null || true; }
CKS_CLEANUP_HOOKS+=(_ns_cleanup)
ip link add "$HV" type veth peer name "$NV" 2> /dev/null || skip "cannot make a veth pair here"
X=
for _ in $(seq 1 20); do   # a /30 no interface of this machine uses
  x=$(( $(od -An -N1 -tu1 /dev/urandom) ))
  ip -4 -o addr show | grep " 10\.231\.$x\." > /dev/null || { X=$x; break; }
done
[ -n "$X" ] || skip "no free 10.231.X.0/30"
HOSTIP=10.231.$X.1 NSIP=10.231.$X.2
ip link set "$NV" netns "$NS"
ip addr add "$HOSTIP/30" dev "$HV"
ip link set "$HV" up
ip -n "$NS" addr add "$NSIP/30" dev "$NV"
ip -n "$NS" link set lo up
ip -n "$NS" link set "$NV" up

CKS_REGIONS=s3
. "$CKS_SOURCE_DIR/tests/integration/s3lib.sh"
for r in a b c; do start_s3 "$r" --address "$HOSTIP"; done
s3_url() { echo "http://$HOSTIP:${S3_PORT[$1]:?s3 server $1 not started}"; }
write_config_s3 16K 64K 256K   # (not write_config: it would source s3lib.sh again)
sed -i "s|^endpoint = http://127.0.0.1:|endpoint = http://$HOSTIP:|" "$CONF"
. "$CKS_SOURCE_DIR/tests/integration/mnrand.sh"   # multilib.sh; mn_commits, mn_check_tree ...
MN_N=3
for k in 0 1; do inst "n$k" nodes=3 node_rank=$k settle=3600; done
inst n2 nodes=3 node_rank=2 settle=3600 region.bandwidth=512K
inst x

ns_daemon() {   # node 2's daemon, inside the namespace (its control socket is a path: reachable)
  ip netns exec "$NS" "$CKPTSYNCD" --config "$T/i-n2.conf" >> "$T/i-n2/daemon.log" 2>&1 &
  IPID[n2]=$!
  for _ in $(seq 1 100); do
    daemon_answers icks n2 && return 0
    kill -0 "${IPID[n2]}" 2> /dev/null || { tail -20 "$T/i-n2/daemon.log" >&2; die "node 2's daemon exited"; }
    sleep 0.1
  done
  die "node 2's daemon (in $NS) did not answer"
}
idaemon n0
idaemon n1
ns_daemon
# n2_regions: node 2's regions as its daemon reports them, "state:failures" each.
n2_regions() {
  icks n2 status --json > "$T/st2.json" 2> /dev/null || true
  json "$T/st2.json" '" ".join("%s:%s" % (r["state"], r["failures"]) for r in d["regions"])'
}
# want S: the union of the three nodes' units of step S (sums in $T/sums-S).
want() {
  rm -rf "$T/want"; mkdir -p "$T/want"
  for k in 0 1 2; do cp -a "$T/i-n$k/watch/job/${MN_UNIT[$1]}/." "$T/want/"; done
  tree_sums "$T/want" > "$T/sums-$1"
}

# ============================================================================
step "1. step 1000 on three nodes, the link up: committed once per region"
MN_UNIT[1000]=$(python3 "$CKS_SOURCE_DIR/tests/integration/mnlayout.py" dcp 1000 3 "$T" 1 64)
want 1000
for k in 0 1 2; do mn_commit "$k" 1000 || { cat "$T/commit-$k.out" >&2; die "node $k: commit"; }; done
MN_STEPS=(1000)
CKS_MN_SETTLE=60 mn_settled 1000
mn_once 1000

# ============================================================================
step "2. step 2000: node 2 cut off while it uploads"
MN_UNIT[2000]=$(python3 "$CKS_SOURCE_DIR/tests/integration/mnlayout.py" megatron 2000 3 "$T" 2 64)
make_file "$T/i-n2/watch/job/${MN_UNIT[2000]}/mp_rank_02/distrib_optim.pt" 3
want 2000
for k in 0 1 2; do mn_commit "$k" 2000 || { cat "$T/commit-$k.out" >&2; die "node $k: commit"; }; done
n2_put() { json "$T/st2.json" 'sum(r["bytes_put"] for r in d["regions"])' 2> /dev/null || echo 0; }
ok=
for _ in $(seq 1 200); do   # node 2 has put its first chunks: it is uploading
  n2_regions > /dev/null
  [ "$(n2_put)" -gt 0 ] && { ok=1; break; }
  sleep 0.05
done
[ -n "$ok" ] || die "node 2 put nothing within 10 s"
ip -n "$NS" link set "$NV" down
[ "${CKS_NETNS_HANG:-0}" = 1 ] || ip netns exec "$NS" ss -K dst "$HOSTIP" > /dev/null 2>&1 || true
echo "link down after node 2 put $(n2_put) bytes"
ok=
tries=300   # 30 s; a silent drop waits for curl's 30 s low-speed limit
[ "${CKS_NETNS_HANG:-0}" != 1 ] || tries=900
for _ in $(seq 1 $tries); do
  case " $(n2_regions) " in *" ok:"*) ;; *) ok=1; break ;; esac
  sleep 0.1
done
[ -n "$ok" ] || die "node 2 does not report its regions failing: $(n2_regions)"
echo "node 2's regions: $(n2_regions)"
json "$T/st2.json" '"\n".join("  %s: %s" % (r["name"], r["last_error"]) for r in d["regions"])'
grep 'event=region_failed' "$T/i-n2/daemon.log" > /dev/null || die "node 2 logged no region_failed event"
parts01() { echo "$(mn_count a parts 's2000.[01]-of-3.*') $(mn_count b parts 's2000.[01]-of-3.*') $(mn_count c parts 's2000.[01]-of-3.*')"; }
for _ in $(seq 1 300); do   # the other nodes' parts are in (they were not cut off)
  [ "$(parts01)" = "2 2 2" ] && break
  sleep 0.1
done
[ "$(parts01)" = "2 2 2" ] || die "nodes 0 and 1's parts of step 2000 per region: $(parts01), expected 2 2 2"
[ "$(mn_commits 2000)" = "0 0 0" ] || die "step 2000 committed while node 2 is cut off: $(mn_commits 2000)"
rm -rf "$T/i-x/state"
icks x ls --remote --run job --json > "$T/ls.json" 2> "$T/ls.err" || { cat "$T/ls.err" >&2; die "ls --remote"; }
inc=$(json "$T/ls.json" '[(x["step"], x["missing"]) for x in d if x.get("incomplete")]')
[ "$inc" = "[(2000, [2])]" ] || die "ls --remote: incomplete steps $inc, expected [(2000, [2])]"
[ "$(mn_latest_is 1000 1000)" = 1000 ] || die "restore --latest while node 2 is cut off"
[ "$(mn_commits 2000)" = "0 0 0" ] || die "step 2000 committed while node 2 is cut off: $(mn_commits 2000)"

# ============================================================================
step "3. the link back: node 2's queue resumes, step 2000 commits once per region"
ip -n "$NS" link set "$NV" up
t0=$SECONDS
MN_STEPS=(1000 2000)
CKS_MN_SETTLE=90 mn_settled 2000
echo "step 2000 committed $((SECONDS - t0)) s after the link came back; node 2's regions: $(n2_regions)"
mn_once 2000
mn_remote 2000
[ "$(mn_latest_is 2000 2000)" = 2000 ] || die "restore --latest after the partition"
mn_restore_id 1000

for k in 0 1 2; do istop "n$k"; done
if grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$T"/i-n*/daemon.log > "$T/san.txt"; then
  cat "$T/san.txt" >&2; die "a daemon reported a sanitizer error"
fi
echo "ok"
