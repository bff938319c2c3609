#!/usr/bin/env python3
"""The stream row's client floor (bench-serve.sh): an envd that costs
nothing.  Serves process.Process/Start with MIB MiB of zeros in the very
envelopes sbx-serve's front makes (Connect's JSON framing: a start event,
data events of 96 KiB as base64, the end event, the end of the stream),
made once up front, so the E2B SDK's own time to take them in is all
that is timed.  Any other path: 404.

    bench-serve-replay.py PORT MIB        (127.0.0.1 only)
"""
import base64, http.server, json, struct, sys

port, mib = int(sys.argv[1]), int(sys.argv[2])


def envelope(obj, flags=0):
    body = json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(body)) + body


CHUNK = 96 << 10  # what one of the front's envelopes carries (STREAM_BLOCK)
data = envelope({"event": {"data": {"stdout": base64.b64encode(bytes(CHUNK)).decode()}}})
total = mib << 20
parts = [envelope({"event": {"start": {"pid": 1}}})]
parts += [data] * (total // CHUNK)
if total % CHUNK:
    parts.append(envelope({"event": {"data": {"stdout": base64.b64encode(bytes(total % CHUNK)).decode()}}}))
parts.append(envelope({"event": {"end": {"exitCode": 0, "exited": True, "status": "exit status 0"}}}))
parts.append(envelope({}, flags=2))


class Replay(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/process.Process/Start":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/connect+json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for p in parts:
            self.wfile.write(b"%x\r\n" % len(p) + p + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


http.server.ThreadingHTTPServer(("127.0.0.1", port), Replay).serve_forever()
