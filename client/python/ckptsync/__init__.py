"""ckptsync — tell a running ckptsyncd that a checkpoint is complete.

Pure Python 3, standard library only.  Speaks the control protocol
documented in include/ckptsync/protocol.h over the daemon's unix socket:
one connection per request, one request line out, one response line back.

    import ckptsync
    ckptsync.commit("/data/cloud_storage/run1/checkpoint-1000", step=1000)
    ckptsync.commit(path, step=1000, wait="durable", timeout=600)
    ckptsync.latest("run1")   # {"id": ..., "step": 1000, "state": "durable"}

From a training loop:

    cb = ckptsync.CheckpointCallback("/data/cloud_storage/run1")
    torch.save(state, "/data/cloud_storage/run1/step_1000.pt")
    cb.saved("step_1000.pt", 1000)

With the Hugging Face Trainer (transformers is not imported here):

    trainer = Trainer(..., callbacks=[ckptsync.CheckpointCallback()])

The socket is the ``socket_path`` argument, else found as the CLI and the
C library find it (``find_socket``): $CKPTSYNC_SOCKET, else the
configuration's [daemon] socket (the configuration being $CKPTSYNC_CONFIG,
else /etc/ckptsync/ckptsync.conf where it exists), else
STATE/ckptsyncd.sock with STATE $CKPTSYNC_STATE, else the configuration's
[daemon] state, else /var/lib/ckptsync.  A missing daemon raises
DaemonNotRunning; an ERR answer raises Error with the daemon's ``code``
("timeout", "badrequest", "notfound", "notwatched", "degraded", "wrongnode",
...) and ``message``.  Both are subclasses of Error.  Other OSErrors (say,
no permission on the socket) are raised as they are.

Restoring while the job starts (``restore`` runs the ``ckptsync`` CLI,
``restore --progressive --json``; no daemon is needed):

    h = ckptsync.restore("run1", "/data/ckpt", progressive=True)
    weights = h.wait("model.safetensors", timeout=600)   # whole, verified
    model.load_state_dict(safetensors.torch.load_file(weights))
    opt_state = torch.load(h.wait("optimizer.pt"))       # still arriving above
    h.wait_all()

Functions are thread-safe: no state is shared between calls.
"""

import json
import logging
import math
import os
import re
import socket
import subprocess
import threading
import time

__all__ = [
    "Client", "Error", "DaemonNotRunning", "CheckpointCallback",
    "ping", "commit", "status", "flush", "retry", "latest", "restore", "Restore",
    "find_socket", "node_identity", "DEFAULT_SOCKET", "SOCKET_ENV", "CONFIG_ENV", "STATE_ENV",
]
__version__ = "0.1.0"

DEFAULT_SOCKET = "/var/lib/ckptsync/ckptsyncd.sock"
DEFAULT_CONFIG = "/etc/ckptsync/ckptsync.conf"
DEFAULT_STATE = "/var/lib/ckptsync"
SOCKET_ENV = "CKPTSYNC_SOCKET"
CONFIG_ENV = "CKPTSYNC_CONFIG"
STATE_ENV = "CKPTSYNC_STATE"
MAGIC = "CKPTSYNC/1"
MAX_REQUEST = 65536
MAX_RESPONSE = 4 << 20
MAX_TIMEOUT = 604800
CLIENT_SLACK = 30  # seconds to wait for an answer past the request's own limit
WAITS = ("none", "durable", "replicated")
MAX_NODES = 4096  # commit nodes= ([daemon] nodes' limit)
# Where a training process learns its node of a multi-node job, in order:
# ckptsync's own variables (as the daemon reads them), torchrun's (the
# elastic agent exports GROUP_RANK and GROUP_WORLD_SIZE, the node count),
# Slurm's.  Each pair as (rank variable, count variable).
NODE_ENV = (("CKPTSYNC_NODE_RANK", "CKPTSYNC_NODES"),
            ("GROUP_RANK", "GROUP_WORLD_SIZE"),
            ("SLURM_NODEID", "SLURM_NNODES"))
_CODE = re.compile(rb"[a-z][a-z0-9_]{0,30}")
_REGION = re.compile(r"[A-Za-z0-9_-]{1,63}")

_log = logging.getLogger("ckptsync")


class Error(Exception):
    """The daemon answered ERR (or could not be understood).

    ``code`` is the daemon's short lowercase code, or "protocol" for a
    malformed or missing answer, "timeout" when no answer came in time.
    """

    def __init__(self, code, message=""):
        super().__init__("%s: %s" % (code, message) if message else code)
        self.code = code
        self.message = message


class DaemonNotRunning(Error):
    """No daemon listens on the socket (no socket file, or refused)."""

    def __init__(self, path, reason):
        super().__init__("notrunning", "no ckptsyncd at %r (%s)" % (path, reason))
        self.path = path


# ---- encoding ----------------------------------------------------------------

def _quote(value):
    """Percent-encodes bytes <= 0x20, >= 0x7f, '%' and '='."""
    if isinstance(value, str):
        value = os.fsencode(value)
    out = []
    for b in value:
        if b <= 0x20 or b >= 0x7F or b in (0x25, 0x3D):
            out.append("%%%02X" % b)
        else:
            out.append(chr(b))
    return "".join(out)


def _unquote_message(text):
    """Lenient decoding of an ERR message: bad escapes are kept as they are."""
    raw = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c == 0x25 and i + 2 < len(text):
            try:
                raw.append(int(text[i + 1:i + 3].decode("ascii"), 16))
                i += 3
                continue
            except ValueError:
                pass
        raw.append(c)
        i += 1
    return raw.decode("utf-8", "replace")


def _check_wait(wait):
    if wait is None:
        return "none"
    if wait not in WAITS:
        raise ValueError("wait must be None, 'none', 'durable' or 'replicated', not %r" % (wait,))
    return wait


def _check_seconds(name, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("%s must be a number of seconds, not %r" % (name, value))
    seconds = math.ceil(value)
    if not 0 <= seconds <= MAX_TIMEOUT:
        raise ValueError("%s must be 0..%d seconds, not %r" % (name, MAX_TIMEOUT, value))
    return seconds


def _absolute(path):
    """The path made absolute against the current directory, not resolved:
    the daemon decides what it means under its watch root."""
    path = os.fspath(path)
    if not path:
        raise ValueError("empty path")
    if isinstance(path, bytes):
        return path if path.startswith(b"/") else os.path.join(os.getcwdb(), path)
    return path if path.startswith("/") else os.path.join(os.getcwd(), path)


def _check_node(node_rank, nodes):
    """(node_rank, nodes) as given, both ints with 0 <= node_rank < nodes
    <= MAX_NODES, or both None."""
    if node_rank is None and nodes is None:
        return None
    for name, value in (("node_rank", node_rank), ("nodes", nodes)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("node_rank and nodes go together, as ints; %s is %r"
                             % (name, value))
    if not 0 <= node_rank < nodes <= MAX_NODES:
        raise ValueError("need 0 <= node_rank < nodes <= %d, not node_rank=%d nodes=%d"
                         % (MAX_NODES, node_rank, nodes))
    return node_rank, nodes


def _env_uint(environ, name):
    value = environ.get(name, "")
    return int(value) if value.isdigit() else None


def node_identity(environ=None):
    """(node_rank, nodes) of this process's node in a multi-node job, read
    from environ (default os.environ) as NODE_ENV lists: the first pair
    whose two variables are set and valid.  None when none is, or when it
    says one node: a one-node job commits as before."""
    environ = os.environ if environ is None else environ
    for rank_var, count_var in NODE_ENV:
        rank, count = _env_uint(environ, rank_var), _env_uint(environ, count_var)
        if rank is None or count is None or not 0 <= rank < count <= MAX_NODES:
            continue
        return (rank, count) if count > 1 else None
    return None


def _answer_timeout(wait, limit):
    """Seconds to wait for the answer; None means no limit."""
    if wait == "none":
        return CLIENT_SLACK
    return None if limit is None else limit + CLIENT_SLACK


# ---- finding the daemon ---------------------------------------------------------

def _daemon_settings(path):
    """[daemon] socket and state of the INI file at path ("" when unset), read
    the way the daemon's parser reads them: sections, key = value, comments
    starting with ; or # (also after a blank at the end of a line)."""
    found = {"socket": "", "state": ""}
    section = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = re.sub(r"(^|[ \t])[;#].*", "", line.rstrip("\r\n")).strip()
            if line.startswith("["):
                section = line
            elif section == "[daemon]" and "=" in line:
                key, value = (x.strip() for x in line.split("=", 1))
                if key in found:
                    found[key] = value
    return found


def find_socket(config=None, state=None):
    """The daemon's socket, in the order the CLI and the C library use:
    $CKPTSYNC_SOCKET; the configuration's [daemon] socket; STATE/ckptsyncd.sock.
    config and state (paths) take the place of $CKPTSYNC_CONFIG and
    $CKPTSYNC_STATE.  An unreadable configuration that was named raises OSError."""
    env = os.environ.get(SOCKET_ENV)
    if env:
        return env
    config = config or os.environ.get(CONFIG_ENV) or None
    if config is None and os.path.exists(DEFAULT_CONFIG):
        config = DEFAULT_CONFIG
    settings = _daemon_settings(config) if config else {"socket": "", "state": ""}
    if settings["socket"]:
        return settings["socket"]
    state = os.fspath(state or os.environ.get(STATE_ENV) or settings["state"] or DEFAULT_STATE)
    return os.path.join(os.path.abspath(state), "ckptsyncd.sock")


# ---- the client ----------------------------------------------------------------

class Client:
    """A handle on one daemon's socket.  Cheap: it holds only the path;
    every request opens its own connection."""

    def __init__(self, socket_path=None):
        self.socket_path = os.fspath(socket_path or find_socket())

    def request(self, verb, params=(), timeout=CLIENT_SLACK):
        """Sends ``CKPTSYNC/1 verb k=v...``; returns the OK answer's dict."""
        line = " ".join([MAGIC, verb] + ["%s=%s" % (k, _quote(v)) for k, v in params]) + "\n"
        data = line.encode("ascii")
        if len(data) > MAX_REQUEST:
            raise ValueError("request longer than %d bytes" % MAX_REQUEST)
        with self._connect() as sock:
            sock.settimeout(timeout)
            try:
                sock.sendall(data)
                answer = self._read_line(sock)
            except socket.timeout:
                raise Error("timeout", "no answer from ckptsyncd within %s s" % timeout) from None
            except (BrokenPipeError, ConnectionResetError) as e:
                raise Error("protocol", "ckptsyncd closed the connection (%s)" % e) from None
        return self._parse(answer)

    def _connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.socket_path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            raise DaemonNotRunning(self.socket_path, e.strerror) from None
        except BaseException:
            sock.close()
            raise
        return sock

    @staticmethod
    def _read_line(sock):
        buf = bytearray()
        while True:
            chunk = sock.recv(min(65536, MAX_RESPONSE - len(buf)))
            if not chunk:
                raise Error("protocol", "ckptsyncd closed the connection without an answer")
            start = len(buf)
            buf += chunk
            nl = buf.find(b"\n", start)
            if nl >= 0:
                return bytes(buf[:nl])
            if len(buf) >= MAX_RESPONSE:
                raise Error("protocol", "answer longer than %d bytes" % MAX_RESPONSE)

    @staticmethod
    def _parse(line):
        if line.startswith(b"OK "):
            try:
                body = json.loads(line[3:].decode("utf-8"))
            except ValueError as e:
                raise Error("protocol", "malformed JSON in answer: %s" % e) from None
            if not isinstance(body, dict):
                raise Error("protocol", "answer is not a JSON object")
            return body
        if line.startswith(b"ERR "):
            code, _, msg = line[4:].partition(b" ")
            if _CODE.fullmatch(code):
                raise Error(code.decode("ascii"), _unquote_message(msg))
        raise Error("protocol", "malformed answer: %r" % line[:80])

    # ---- verbs ----

    def ping(self):
        return self.request("ping")

    def commit(self, path, step=None, wait=None, timeout=None, node_rank=None, nodes=None):
        """Checkpoint at path (file or directory) is complete; with wait
        "durable" or "replicated", return once it is (at most timeout s).

        node_rank and nodes name this node of a multi-node job; where not
        given, node_identity() reads them from the environment (torchrun,
        Slurm).  The daemon refuses the commit (Error "wrongnode") when its
        own [daemon] node_rank and nodes differ."""
        ident = _check_node(node_rank, nodes) or node_identity()
        params = [("path", _absolute(path))]
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                raise ValueError("step must be an int >= 0, not %r" % (step,))
            params.append(("step", str(step)))
        wait = _check_wait(wait)
        if wait != "none":
            params.append(("wait", wait))
        timeout = _check_seconds("timeout", timeout)
        if timeout is not None:
            params.append(("timeout", str(timeout)))
        if ident is not None:
            params += [("nodes", str(ident[1])), ("node_rank", str(ident[0]))]
        return self.request("commit", params, _answer_timeout(wait, timeout))

    def status(self):
        return self.request("status")

    def flush(self, wait=None, deadline=None):
        """Upload everything queued now; with wait, return once all of it
        is durable or replicated (at most deadline s)."""
        wait = _check_wait(wait)
        params = [("wait", wait)] if wait != "none" else []
        deadline = _check_seconds("deadline", deadline)
        if deadline is not None:
            params.append(("deadline", str(deadline)))
        return self.request("flush", params, _answer_timeout(wait, deadline))

    def retry(self, region):
        """Retry a failing region now instead of after its backoff."""
        if not isinstance(region, str) or not _REGION.fullmatch(region):
            raise ValueError("not a region name: %r" % (region,))
        return self.request("retry", [("region", region)])

    def latest(self, run):
        """The run's latest snapshot ({"id", "step", "state", ...}), or None
        when the daemon knows no snapshot of that run."""
        for entry in self.status().get("runs") or []:
            if isinstance(entry, dict) and entry.get("run") == run:
                return entry.get("latest")
        return None


def ping(socket_path=None):
    return Client(socket_path).ping()


def commit(path, step=None, wait=None, timeout=None, socket_path=None, node_rank=None,
           nodes=None):
    return Client(socket_path).commit(path, step=step, wait=wait, timeout=timeout,
                                      node_rank=node_rank, nodes=nodes)


def status(socket_path=None):
    return Client(socket_path).status()


def flush(wait=None, deadline=None, socket_path=None):
    return Client(socket_path).flush(wait=wait, deadline=deadline)


def retry(region, socket_path=None):
    return Client(socket_path).retry(region)


def latest(run, socket_path=None):
    return Client(socket_path).latest(run)


# ---- training loops ---------------------------------------------------------

def _noop(*args, **kwargs):
    return None


class CheckpointCallback:
    """Commits each checkpoint a training loop saves.

    Plain loop:   cb = CheckpointCallback(root); ...; cb.saved(path, step)
    HF Trainer:   Trainer(..., callbacks=[CheckpointCallback()])

    ``root`` is where relative paths given to saved() live (default: the
    current directory).  ``wait`` None commits and returns at once (the
    daemon uploads in the background); "durable" or "replicated" blocks
    the loop until the checkpoint is safe, at most ``timeout`` seconds.

    By default a failure is logged and training goes on (the daemon also
    notices checkpoints by itself); ``strict=True`` raises instead.

    In a multi-node job every node's daemon needs its node's commit:
    ``node_rank`` and ``nodes`` name this node (default: node_identity(),
    from torchrun's or Slurm's variables), each commit carries them, and
    with the Trainer the first process of every node commits (one node:
    the first process of the job, as before).
    """

    def __init__(self, root=None, wait=None, timeout=None, socket_path=None, strict=False,
                 node_rank=None, nodes=None):
        self.root = os.fspath(root) if root is not None else None
        self.wait = _check_wait(wait)
        self.timeout = _check_seconds("timeout", timeout)
        self.client = Client(socket_path)
        self.strict = strict
        self.node = _check_node(node_rank, nodes) or node_identity()
        self.last = None  # the daemon's answer to the last commit
        self._warned = False

    def saved(self, path, step=None):
        """The checkpoint at path is complete.  Returns the daemon's answer,
        or None when it failed and strict is off."""
        path = os.fspath(path)
        if self.root is not None and not os.path.isabs(path):
            path = os.path.join(self.root, path)
        try:
            rank, nodes = self.node or (None, None)
            self.last = self.client.commit(path, step=step, wait=self.wait, timeout=self.timeout,
                                           node_rank=rank, nodes=nodes)
            return self.last
        except (Error, OSError) as e:
            if self.strict:
                raise
            self._report(path, e)
            return None

    def _report(self, path, e):
        if isinstance(e, DaemonNotRunning):
            if not self._warned:
                _log.warning("ckptsync: %s; checkpoints are not committed explicitly", e.message)
            self._warned = True
        else:
            _log.warning("ckptsync: commit %r: %s", path, e)

    # Hugging Face TrainerCallback protocol: the Trainer calls every on_*
    # event on every callback; only on_save matters here.
    def on_save(self, args, state, control, **kwargs):
        first = "is_local_process_zero" if self.node else "is_world_process_zero"
        if not getattr(state, first, getattr(state, "is_world_process_zero", True)):
            return None
        step = state.global_step
        self.saved(os.path.join(args.output_dir, "checkpoint-%d" % step), step)
        return None  # None leaves the Trainer's control as it is

    def __getattr__(self, name):
        if name.startswith("on_"):
            return _noop
        raise AttributeError("%r object has no attribute %r" % (type(self).__name__, name))


# ---- restore -----------------------------------------------------------------


class Restore:
    """A restore running in a ``ckptsync`` process (see ``restore``).

    ``wait(relpath, timeout)`` returns the absolute path of a file once it
    is placed: whole, its digest verified, fsynced (relpath below the
    snapshot's root, or with it).  ``wait_all(timeout)`` returns the
    restore's result (the CLI's ``--json`` object).  A failed restore
    raises Error("restore", last message) from both; a file that is not
    placed before the timeout raises TimeoutError; a file the restore ends
    without placing raises Error("notfound", ...).
    """

    def __init__(self, argv, target):
        self._target = target
        self._placed = {}
        self._result = None
        self._error = None
        self._done = False
        self._cond = threading.Condition()
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        self._err = []
        self._errt = threading.Thread(target=self._drain_err, daemon=True)
        self._errt.start()
        threading.Thread(target=self._read, daemon=True).start()

    def _drain_err(self):
        for line in self._proc.stderr:
            self._err.append(line.rstrip("\n"))
            del self._err[:-20]

    def _read(self):
        for line in self._proc.stdout:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                if "placed" in d:
                    self._placed[d["placed"]] = os.path.join(self._target, d["placed"])
                else:
                    self._result = d
                self._cond.notify_all()
        rc = self._proc.wait()
        self._errt.join()  # its last line is the message
        with self._cond:
            if rc != 0:
                msg = self._err[-1] if self._err else "exit status %d" % rc
                self._error = Error("restore", msg)
            self._done = True
            self._cond.notify_all()

    def _find(self, relpath):
        rel = os.path.normpath(relpath)
        for name, path in self._placed.items():
            if name == rel or name.split("/", 1)[-1] == rel:
                return path
        if self._done and self._error is None and self._result:  # not progressive
            root = self._result.get("root", "")
            for cand in (os.path.join(self._target, rel), os.path.join(self._target, root, rel)):
                if os.path.isfile(cand):
                    return cand
        return None

    def _wait_for(self, ready, timeout):
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            got = ready()
            if got is not None:
                return got
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("restore: not ready after %.1f s" % timeout)
            self._cond.wait(left)

    def wait(self, relpath, timeout=None):
        def ready():
            path = self._find(relpath)
            if path is not None:
                return path
            if self._error is not None:
                raise self._error
            if self._done:
                raise Error("notfound", "%s: not in the restored snapshot" % relpath)
            return None
        with self._cond:
            return self._wait_for(ready, timeout)

    def wait_all(self, timeout=None):
        def ready():
            if self._error is not None:
                raise self._error
            return self._result if self._done else None
        with self._cond:
            return self._wait_for(ready, timeout)

    def placed(self):
        """The files placed so far (paths as in the snapshot)."""
        with self._cond:
            return list(self._placed)


def restore(run, to, progressive=True, snapshot=None, force=False, exclude=(),
            exclude_optimizer=False, config=None, binary="ckptsync"):
    """Starts ``ckptsync restore`` of RUN's newest snapshot (or SNAPSHOT)
    into directory TO and returns a Restore handle at once.  With
    progressive (the default here), files are usable as they are placed,
    by priority (metadata, weights, master weights, optimizer state: see
    the README); without, ``wait`` returns only after the whole tree is in
    place.  ``config`` is the CLI's --config (default: the CLI's own)."""
    argv = [binary]
    if config is not None:
        argv += ["--config", config]
    argv += ["--json", "restore", "--run", run, "--to", to]
    argv += ["--snapshot", snapshot] if snapshot else ["--latest"]
    if progressive:
        argv.append("--progressive")
    if force:
        argv.append("--force")
    for pattern in exclude:
        argv += ["--exclude", pattern]
    if exclude_optimizer:
        argv.append("--exclude-optimizer")
    return Restore(argv, os.path.abspath(to))
