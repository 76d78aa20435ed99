#!/usr/bin/env python3
"""A WebSocket echo server and a client that checks the echo, standard library
only (RFC 6455: the handshake, text frames up to 125 bytes, close), for the
benchmark scripts that keep one WebSocket open through the proxy while they
change it under load (bench/upgrade_under_load.sh).

  ws_echo.py server PORT                 echo every text frame back, forever
  ws_echo.py client HOST:PORT SECONDS    one connection: a message every 100 ms,
                                         each echo checked; prints the count and
                                         exits 1 at the first missing or wrong echo
"""
import base64
import hashlib
import os
import socket
import struct
import sys
import threading
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_head(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise EOFError("closed during the handshake")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


def recv_exact(sock, n, buf):
    while len(buf) < n:
        chunk = sock.recv(4096)
        if not chunk:
            raise EOFError("closed")
        buf += chunk
    return buf[:n], buf[n:]


def read_frame(sock, buf):
    """One frame: (opcode, payload, rest of buf)."""
    hdr, buf = recv_exact(sock, 2, buf)
    opcode, length = hdr[0] & 0x0F, hdr[1] & 0x7F
    masked = hdr[1] & 0x80
    if length == 126:
        ext, buf = recv_exact(sock, 2, buf)
        length = struct.unpack("!H", ext)[0]
    elif length == 127:
        ext, buf = recv_exact(sock, 8, buf)
        length = struct.unpack("!Q", ext)[0]
    mask = b""
    if masked:
        mask, buf = recv_exact(sock, 4, buf)
    payload, buf = recv_exact(sock, length, buf)
    if masked:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return opcode, payload, buf


def frame(opcode, payload, mask):
    head = bytes([0x80 | opcode])
    if not mask:
        return head + bytes([len(payload)]) + payload
    key = os.urandom(4)
    return head + bytes([0x80 | len(payload)]) + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def serve_one(conn):
    try:
        head, buf = read_head(conn)
        key = next(l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("sec-websocket-key:"))
        accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
        conn.sendall(
            ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode()
        )
        while True:
            opcode, payload, buf = read_frame(conn, buf)
            if opcode == 8:
                conn.sendall(frame(8, payload[:2], False))
                return
            if opcode == 1:
                conn.sendall(frame(1, payload, False))
    except (EOFError, OSError, StopIteration):
        pass
    finally:
        conn.close()


def server(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=serve_one, args=(conn,), daemon=True).start()


def client(target, seconds):
    host, port = target.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (f"GET /ws HTTP/1.1\r\nHost: {target}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
    )
    head, buf = read_head(sock)
    if not head.startswith("HTTP/1.1 101"):
        print(f"websocket: no 101: {head.splitlines()[0] if head else head!r}")
        return 1
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        msg = f"echo {n}".encode()
        try:
            sock.sendall(frame(1, msg, True))
            opcode, payload, buf = read_frame(sock, buf)
        except (EOFError, OSError) as e:
            print(f"websocket: failed after {n} echoes: {e}")
            return 1
        if opcode != 1 or payload != msg:
            print(f"websocket: echo {n} wrong: {opcode} {payload!r}")
            return 1
        n += 1
        time.sleep(0.1)
    sock.sendall(frame(8, struct.pack("!H", 1000), True))
    print(f"websocket: {n} echoes, all right, on one connection")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["server"]:
        server(int(sys.argv[2]))
    elif sys.argv[1:2] == ["client"]:
        sys.exit(client(sys.argv[2], float(sys.argv[3])))
    else:
        print(__doc__)
        sys.exit(2)
