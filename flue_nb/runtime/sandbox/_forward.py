"""Inside the sandbox: serve the proxy's Unix socket on a loopback port, then run the command.

Run as `python -I -S _forward.py SOCKET -- ARGV...` by `contain.Containment.wrap` (standard
library only: it starts on every contained command that may use the network). It listens on
127.0.0.1 in the sandbox's own network namespace, forks a child that relays each TCP connection
to SOCKET (the filtering proxy outside, which checks the host), and execs ARGV with HTTP_PROXY,
HTTPS_PROXY and ALL_PROXY naming that port. Tools that honour those variables (curl, pip, git,
requests, urllib) reach the allowed hosts; nothing else leaves the namespace. The relay dies with
the command: bubblewrap's PID namespace ends when its first process exits.
"""

import os
import socket
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def _relay(conn: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        conn.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
    back.start()
    _pump(conn, upstream)
    back.join()
    conn.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_relay, args=(conn, path), daemon=True).start()


def main() -> None:
    """Listen, fork the relay, exec the command."""
    path, sep, *argv = sys.argv[1:]
    if sep != "--" or not argv:
        sys.exit("usage: _forward.py SOCKET -- ARGV...")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the command's output pipe must close when the command ends
            os.dup2(devnull, fd)
        _serve(listener, path)
        os._exit(0)
    listener.close()
    env = dict(os.environ)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = url
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        sys.stderr.write(f"{argv[0]}: {exc.strerror}\n")
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main()
