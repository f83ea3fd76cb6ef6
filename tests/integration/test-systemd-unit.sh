#!/usr/bin/env bash
# deploy/ckptsyncd.service is sandboxed as Debian's own daemons are:
# `systemd-analyze security` (offline, on the unit file) rates its exposure
# at most 3.0 ("OK"; it was 9.6 "UNSAFE" before the sandbox), and the
# settings the daemon depends on are there: the watch root and the state
# directory writable, io_uring allowed, no privilege escalation.
# (Running the daemon itself under the unit needs systemd as PID 1, which
# the test machines do not have.)
. "$(dirname "$0")/lib.sh"
command -v systemd-analyze > /dev/null || skip "systemd-analyze is not installed"
unit=$CKS_SOURCE_DIR/deploy/ckptsyncd.service

step "exposure at most 3.0"
(cd "$T" && systemd-analyze security --offline=yes --threshold=30 "$unit") > "$T/sec.txt" 2>&1 ||
  { tail -30 "$T/sec.txt"; die "systemd-analyze security rates the unit above 3.0"; }
tail -1 "$T/sec.txt"

step "what the daemon needs is allowed"
for want in 'ProtectSystem=strict' 'ReadWritePaths=-/data/cloud_storage' 'StateDirectory=ckptsync' \
            'NoNewPrivileges=yes' 'PrivateTmp=yes'; do
  grep -qx "$want" "$unit" || die "the unit lacks $want"
done
grep -q '^SystemCallFilter=@system-service.*io_uring_setup.*io_uring_enter' "$unit" ||
  die "the unit's system call filter does not allow io_uring"
grep -q '^RestrictAddressFamilies=.*AF_UNIX.*AF_INET .*AF_INET6' "$unit" ||
  die "the unit does not allow unix and IP sockets"
echo "systemd-unit: ok"
