#!/usr/bin/env bash
# `pip install client/python` into a virtual environment, offline, with
# Debian's python3 and with the first other CPython on PATH (pyenv, conda,
# uv: what users usually run): the build backend is in the tree
# (client/python/_build, standard library only), so no setuptools, wheel
# or index is needed.  The installed module reports the project's version,
# says when no daemon runs, commits a checkpoint to a real ckptsyncd and
# waits until it is durable; pip uninstalls it cleanly.
. "$(dirname "$0")/lib.sh"
pys=()
[ -x /usr/bin/python3 ] && pys+=(/usr/bin/python3)
other=$(command -v python3 || true)
if [ -n "$other" ] && [ "$(readlink -f "$other")" != "$(readlink -f /usr/bin/python3)" ]; then
  # A pyenv shim resolves to the interpreter it would run.
  other=$("$other" -c 'import sys; print(sys.executable)')
  [ "$(readlink -f "$other")" = "$(readlink -f /usr/bin/python3)" ] || pys+=("$other")
fi
[ "${#pys[@]}" -gt 0 ] || skip "python3 is not installed"
version=$(sed -n 's/^project(ckptsync VERSION \([0-9.]*\).*/\1/p' "$CKS_SOURCE_DIR/CMakeLists.txt")
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset PYTHONPATH

install_in() { # install_in PY: a fresh venv at $T/venv with the module installed
py=$1
"$py" -c 'import venv, ensurepip' 2> /dev/null || skip "$py: the venv module or ensurepip is missing (Debian: python3-venv, deploy/deps.sh --test)"
step "pip install client/python into a venv of $py ($("$py" -V 2>&1)), offline"
rm -rf "$T/venv" "$T/src"
"$py" -m venv "$T/venv"
V="$T/venv/bin/python"
# From a copy: the tree stays as it is whatever pip writes next to it.
cp -r "$CKS_SOURCE_DIR/client/python" "$T/src"
rm -rf "$T/src/build" "$T"/src/*.egg-info
"$V" -m pip install -q --no-index "$T/src" > "$T/pip.log" 2>&1 \
  || { cat "$T/pip.log"; die "pip install failed"; }
"$V" -m pip show ckptsync > "$T/show"
grep -qx "Version: $version" "$T/show" || { cat "$T/show"; die "pip shows another version than $version"; }

step "the installed module: its version, and no daemon is said so"
(cd "$T"   # not the source tree: the venv's copy must be the one imported
"$V" - "$T/venv" "$version" "$T/no-daemon.sock" <<'EOF' || die "the installed module"
import sys
import ckptsync
venv, version, sock = sys.argv[1:]
assert ckptsync.__file__.startswith(venv + "/lib/"), ckptsync.__file__
assert ckptsync.__version__ == version, ckptsync.__version__
try:
    ckptsync.ping(socket_path=sock)
    raise SystemExit("ping succeeded without a daemon")
except ckptsync.DaemonNotRunning as e:
    assert sock in str(e), str(e)
try:
    ckptsync.commit("/x", wait="soon", socket_path=sock)
    raise SystemExit("a bad wait was accepted")
except ValueError:
    pass
cb = ckptsync.CheckpointCallback("/x", socket_path=sock)   # not strict: logs, returns None
assert cb.saved("step_1.pt", 1) is None
EOF
) || exit 1
}

commit_from_venv() {
step "it commits to a real ckptsyncd and waits until durable"
write_config 64K 256K 1M
start_daemon
make_file "$T/watch/r1/step_100.pt" 2
"$V" - "$STATE/ckptsyncd.sock" "$T/watch/r1/step_100.pt" > "$T/commit.json" <<'EOF' || die "commit from the venv"
import json, sys
import ckptsync
sock, path = sys.argv[1:]
ckptsync.ping(socket_path=sock)
print(json.dumps(ckptsync.commit(path, step=100, wait="durable", timeout=60, socket_path=sock)))
EOF
[ "$(json "$T/commit.json" 'd["durable"]')" = True ] || { cat "$T/commit.json"; die "not durable"; }
id=$(json "$T/commit.json" 'd["id"]')
cks ls --remote --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" "[s['regions'] for s in d if s['id'] == '$id'][0]")" -ge 2 ] \
  || die "snapshot $id is not in a quorum of regions"
stop_daemon
}

uninstall_in() {
step "pip uninstall removes it"
"$V" -m pip uninstall -q -y ckptsync > "$T/pip.log" 2>&1 || { cat "$T/pip.log"; die "pip uninstall failed"; }
# Gone from the venv.  A copy deploy/install.sh put in the system's
# site-packages (the README's first command) stays visible through
# --system-site-packages, and is not the venv's to remove.
"$V" - "$T/venv" <<'EOF' || die "ckptsync still importable from the venv after uninstall"
import sys
try:
    import ckptsync
except ImportError:
    sys.exit(0)
sys.exit(1 if ckptsync.__file__.startswith(sys.argv[1] + "/") else 0)
EOF
}

for py in "${pys[@]}"; do
  install_in "$py"
  [ "$py" != "${pys[0]}" ] || commit_from_venv
  uninstall_in
done
echo "ok"
