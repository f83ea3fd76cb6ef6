"""test_python_client.py — the Python module (client/python/ckptsync)
against a fake daemon: a socketserver on a unix socket in a temp directory
that records each request line and answers with a canned line.

Run: PYTHONPATH=client/python python3 -m unittest tests/unit/test_python_client.py
"""

import os
import socket
import socketserver
import tempfile
import threading
import time
import types
import unittest

import ckptsync


class FakeDaemon:
    """Answers requests in order from ``replies``; a reply is bytes sent as
    is, or a callable taking the socket."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []
        self.dir = tempfile.TemporaryDirectory(prefix="cks-pyclient-")
        self.path = os.path.join(self.dir.name, "d.sock")
        daemon = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                line = self.rfile.readline(ckptsync.MAX_REQUEST + 1)
                daemon.requests.append(line.decode("ascii", "replace"))
                reply = daemon.replies.pop(0) if daemon.replies else b"ERR internal script%20ended\n"
                if callable(reply):
                    reply(self.connection)
                else:
                    self.wfile.write(reply)

        self.server = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.dir.cleanup()


class Requests(unittest.TestCase):
    def test_verbs_send_exact_lines(self):
        replies = [b"OK {}\n", b'OK {"snapshot":"s1","state":"durable"}\n',
                   b"OK {}\n", b"OK {}\n", b'OK {"pending":0}\n', b"OK {}\n", b"OK {}\n"]
        with FakeDaemon(replies) as d:
            c = ckptsync.Client(d.path)
            self.assertEqual(c.ping(), {})
            self.assertEqual(
                ckptsync.commit("/data/r1/checkpoint 10", step=10, wait="durable", timeout=600,
                                socket_path=d.path),
                {"snapshot": "s1", "state": "durable"})
            ckptsync.commit(b"/data/r1/\xff=%", socket_path=d.path)
            ckptsync.commit("/x", step=0, wait="none", timeout=1.5, socket_path=d.path)
            self.assertEqual(ckptsync.flush(wait="replicated", deadline=30, socket_path=d.path),
                             {"pending": 0})
            ckptsync.flush(socket_path=d.path)
            ckptsync.retry("eu-1", socket_path=d.path)
        self.assertEqual(d.requests, [
            "CKPTSYNC/1 ping\n",
            "CKPTSYNC/1 commit path=/data/r1/checkpoint%2010 step=10 wait=durable timeout=600\n",
            "CKPTSYNC/1 commit path=/data/r1/%FF%3D%25\n",
            "CKPTSYNC/1 commit path=/x step=0 timeout=2\n",
            "CKPTSYNC/1 flush wait=replicated deadline=30\n",
            "CKPTSYNC/1 flush\n",
            "CKPTSYNC/1 retry region=eu-1\n",
        ])

    def test_relative_path_and_env_socket(self):
        with FakeDaemon([b"OK {}\n"]) as d:
            old = os.environ.get(ckptsync.SOCKET_ENV)
            os.environ[ckptsync.SOCKET_ENV] = d.path
            try:
                ckptsync.commit("rel/ckpt-1")
            finally:
                if old is None:
                    del os.environ[ckptsync.SOCKET_ENV]
                else:
                    os.environ[ckptsync.SOCKET_ENV] = old
        want = os.path.join(os.getcwd(), "rel/ckpt-1").replace(" ", "%20")
        self.assertEqual(d.requests, ["CKPTSYNC/1 commit path=%s\n" % want])

    def test_status_and_latest(self):
        st = (b'OK {"runs":[{"run":"r0","latest":null},'
              b'{"run":"r1","latest":{"id":"s9","step":900,"state":"replicated"}}],'
              b'"regions":[{"name":"a","lag":0}]}\n')
        with FakeDaemon([st, st, st, st]) as d:
            self.assertEqual(ckptsync.status(socket_path=d.path)["regions"][0]["name"], "a")
            self.assertEqual(ckptsync.latest("r1", socket_path=d.path),
                             {"id": "s9", "step": 900, "state": "replicated"})
            self.assertIsNone(ckptsync.latest("r0", socket_path=d.path))
            self.assertIsNone(ckptsync.latest("nope", socket_path=d.path))
        self.assertEqual(d.requests, ["CKPTSYNC/1 status\n"] * 4)

    def test_answer_in_pieces(self):
        def slow(conn):
            for piece in (b'OK {"a"', b':1}', b"\nignored"):
                conn.sendall(piece)
                time.sleep(0.05)
        with FakeDaemon([slow]) as d:
            self.assertEqual(ckptsync.ping(socket_path=d.path), {"a": 1})

    def test_bad_arguments_send_nothing(self):
        with FakeDaemon([]) as d:
            bad = [
                lambda: ckptsync.commit("/x", step=-1, socket_path=d.path),
                lambda: ckptsync.commit("/x", step=True, socket_path=d.path),
                lambda: ckptsync.commit("/x", step="3", socket_path=d.path),
                lambda: ckptsync.commit("/x", wait="sometimes", socket_path=d.path),
                lambda: ckptsync.commit("/x", timeout=604801, socket_path=d.path),
                lambda: ckptsync.commit("/x", timeout=-1, socket_path=d.path),
                lambda: ckptsync.commit("", socket_path=d.path),
                lambda: ckptsync.flush(wait="always", socket_path=d.path),
                lambda: ckptsync.retry("eu 1", socket_path=d.path),
                lambda: ckptsync.retry("", socket_path=d.path),
                lambda: ckptsync.commit("/" + "a" * 70000, socket_path=d.path),
            ]
            for call in bad:
                with self.assertRaises(ValueError):
                    call()
        self.assertEqual(d.requests, [])


class Errors(unittest.TestCase):
    def test_err_answers(self):
        cases = [
            (b"ERR timeout not%20durable%20after%20600%20s\n", "timeout", "not durable after 600 s"),
            (b"ERR notfound no%20such%20file\n", "notfound", "no such file"),
            (b"ERR notwatched /tmp/x%C3%A9\n", "notwatched", "/tmp/x\u00e9"),
            (b"ERR degraded\n", "degraded", ""),
            (b"ERR internal 100%zz\n", "internal", "100%zz"),
        ]
        with FakeDaemon([c[0] for c in cases]) as d:
            for _, code, msg in cases:
                with self.assertRaises(ckptsync.Error) as cm:
                    ckptsync.commit("/d/x", wait="durable", timeout=5, socket_path=d.path)
                self.assertNotIsInstance(cm.exception, ckptsync.DaemonNotRunning)
                self.assertEqual(cm.exception.code, code)
                self.assertEqual(cm.exception.message, msg)

    def test_malformed_answers(self):
        def close(conn):
            pass
        replies = [b"HELLO\n", b"OK []\n", b"OK {nope}\n", b"ERR BadCode x\n", close]
        with FakeDaemon(replies) as d:
            for _ in replies:
                with self.assertRaises(ckptsync.Error) as cm:
                    ckptsync.ping(socket_path=d.path)
                self.assertEqual(cm.exception.code, "protocol")

    def test_no_daemon(self):
        t0 = time.monotonic()
        with self.assertRaises(ckptsync.DaemonNotRunning) as cm:
            ckptsync.status(socket_path="/nonexistent-ckptsync/d.sock")
        self.assertIsInstance(cm.exception, ckptsync.Error)
        with tempfile.TemporaryDirectory(prefix="cks-pyclient-") as tmp:
            path = os.path.join(tmp, "dead.sock")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)  # bound, never listening: a daemon that died
            try:
                with self.assertRaises(ckptsync.DaemonNotRunning):
                    ckptsync.ping(socket_path=path)
            finally:
                s.close()
        self.assertLess(time.monotonic() - t0, 1.0)


class Callbacks(unittest.TestCase):
    def test_saved_commits_under_root(self):
        with FakeDaemon([b'OK {"snapshot":"s1"}\n', b"OK {}\n"]) as d:
            cb = ckptsync.CheckpointCallback("/data/run1", socket_path=d.path)
            self.assertEqual(cb.saved("step_10.pt", 10), {"snapshot": "s1"})
            cb = ckptsync.CheckpointCallback("/data/run1", wait="durable", timeout=60,
                                             socket_path=d.path)
            cb.saved("/elsewhere/ckpt")
        self.assertEqual(d.requests, [
            "CKPTSYNC/1 commit path=/data/run1/step_10.pt step=10\n",
            "CKPTSYNC/1 commit path=/elsewhere/ckpt wait=durable timeout=60\n",
        ])

    def test_failures_do_not_stop_training_unless_strict(self):
        cb = ckptsync.CheckpointCallback("/data/run1", socket_path="/nonexistent-ckptsync/d.sock")
        with self.assertLogs("ckptsync", level="WARNING"):
            self.assertIsNone(cb.saved("a.pt", 1))
        self.assertIsNone(cb.saved("b.pt", 2))
        strict = ckptsync.CheckpointCallback(socket_path="/nonexistent-ckptsync/d.sock",
                                             strict=True)
        with self.assertRaises(ckptsync.DaemonNotRunning):
            strict.saved("/data/run1/a.pt", 1)
        with FakeDaemon([b"ERR timeout slow\n"]) as d:
            cb = ckptsync.CheckpointCallback(socket_path=d.path, wait="durable")
            with self.assertLogs("ckptsync", level="WARNING"):
                self.assertIsNone(cb.saved("/data/run1/c.pt", 3))

    def test_hugging_face_trainer_events(self):
        args = types.SimpleNamespace(output_dir="/data/cloud_storage/run2")
        control = object()
        with FakeDaemon([b"OK {}\n"]) as d:
            cb = ckptsync.CheckpointCallback(socket_path=d.path)
            # The Trainer calls every event on every callback.
            for event in ("on_init_end", "on_train_begin", "on_step_end", "on_log", "on_evaluate"):
                self.assertIsNone(getattr(cb, event)(args, types.SimpleNamespace(), control,
                                                     model=None, logs={}))
            state = types.SimpleNamespace(global_step=500, is_world_process_zero=True)
            self.assertIsNone(cb.on_save(args, state, control, model=None))
            other = types.SimpleNamespace(global_step=500, is_world_process_zero=False)
            self.assertIsNone(cb.on_save(args, other, control))
        self.assertEqual(d.requests, [
            "CKPTSYNC/1 commit path=/data/cloud_storage/run2/checkpoint-500 step=500\n"])
        with self.assertRaises(AttributeError):
            cb.not_an_event


class NodeIdentity(unittest.TestCase):
    def test_identity_from_the_environment(self):
        ni = ckptsync.node_identity
        self.assertIsNone(ni({}))
        self.assertEqual(ni({"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "4"}), (1, 4))
        self.assertEqual(ni({"SLURM_NODEID": "2", "SLURM_NNODES": "3"}), (2, 3))
        # ckptsync's own first, then torchrun's, then Slurm's
        self.assertEqual(ni({"CKPTSYNC_NODE_RANK": "0", "CKPTSYNC_NODES": "2",
                             "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "4",
                             "SLURM_NODEID": "2", "SLURM_NNODES": "3"}), (0, 2))
        self.assertEqual(ni({"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "4",
                             "SLURM_NODEID": "2", "SLURM_NNODES": "3"}), (1, 4))
        # one node: nothing to say; a half or broken pair is passed over
        self.assertIsNone(ni({"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
                              "SLURM_NODEID": "1", "SLURM_NNODES": "2"}))
        self.assertEqual(ni({"GROUP_RANK": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2"}),
                         (1, 2))
        self.assertEqual(ni({"GROUP_RANK": "4", "GROUP_WORLD_SIZE": "4",
                             "SLURM_NODEID": "1", "SLURM_NNODES": "2"}), (1, 2))
        self.assertIsNone(ni({"GROUP_RANK": "-1", "GROUP_WORLD_SIZE": "x2"}))

    def test_commit_carries_the_node(self):
        env = {"GROUP_RANK": "3", "GROUP_WORLD_SIZE": "4"}
        saved = {k: os.environ.get(k) for k in env}
        with FakeDaemon([b"OK {}\n"] * 3) as d:
            ckptsync.commit("/d/r/c-1", step=1, node_rank=1, nodes=2, socket_path=d.path)
            os.environ.update(env)
            try:
                ckptsync.commit("/d/r/c-2", socket_path=d.path)
                ckptsync.commit("/d/r/c-3", node_rank=0, nodes=1, socket_path=d.path)
            finally:
                for k, v in saved.items():
                    if v is None:
                        del os.environ[k]
                    else:
                        os.environ[k] = v
            for bad in ((1, None), (None, 2), (2, 2), (-1, 2), (0, 4097), (True, 2), (0, "2")):
                with self.assertRaises(ValueError):
                    ckptsync.commit("/d/r/c-4", node_rank=bad[0], nodes=bad[1],
                                    socket_path=d.path)
        self.assertEqual(d.requests, [
            "CKPTSYNC/1 commit path=/d/r/c-1 step=1 nodes=2 node_rank=1\n",
            "CKPTSYNC/1 commit path=/d/r/c-2 nodes=4 node_rank=3\n",
            "CKPTSYNC/1 commit path=/d/r/c-3 nodes=1 node_rank=0\n",
        ])

    def test_every_node_commits_from_the_trainer(self):
        args = types.SimpleNamespace(output_dir="/data/cloud_storage/run2")
        with FakeDaemon([b"OK {}\n"]) as d:
            cb = ckptsync.CheckpointCallback(socket_path=d.path, node_rank=1, nodes=2)
            # node 1's first process: not the job's first, still commits
            state = types.SimpleNamespace(global_step=7, is_world_process_zero=False,
                                          is_local_process_zero=True)
            cb.on_save(args, state, None)
            other = types.SimpleNamespace(global_step=7, is_world_process_zero=False,
                                          is_local_process_zero=False)
            cb.on_save(args, other, None)
        self.assertEqual(d.requests, [
            "CKPTSYNC/1 commit path=/data/cloud_storage/run2/checkpoint-7 step=7 "
            "nodes=2 node_rank=1\n"])


if __name__ == "__main__":
    unittest.main()
