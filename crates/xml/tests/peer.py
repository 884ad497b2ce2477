#!/usr/bin/env python3
"""A client of the XML exchange protocol written from the spec alone, with nothing but
Python's standard library: sockets for the framing and xml.etree.ElementTree to parse
every reply. Run by tests/python_peer.rs against a real node, gateway and XML front end:

    python3 peer.py HOST:BARE_PORT HOST:FRAMED_PORT

Exits 0 when every check holds; prints the failing check and exits 1 otherwise."""

import socket
import sys
import xml.etree.ElementTree as ET


def address(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def frame(body):
    data = body.encode("utf-8")
    return str(len(data)).encode("ascii") + b"\n" + data


def bare(addr, body, raw=None):
    """One request on a new connection; the reply is everything until the server closes."""
    with socket.create_connection(addr, timeout=20) as s:
        s.sendall(raw if raw is not None else frame(body))
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return parse(b"".join(chunks))


class Framed:
    """A length-prefixed connection: M LF then M bytes per reply."""

    def __init__(self, addr):
        self.sock = socket.create_connection(addr, timeout=20)
        self.buffer = b""

    def _take(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("the server closed a length-prefixed connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def request(self, body):
        self.sock.sendall(frame(body))
        line = b""
        while not line.endswith(b"\n"):
            line += self._take(1)
        return parse(self._take(int(line.strip())))

    def close(self):
        self.sock.close()


def parse(data):
    text = data.decode("utf-8")
    check(text.startswith('<?xml version="1.0" encoding="UTF-8"?>'), "XML declaration first: " + text)
    root = ET.fromstring(data)
    check(root.tag == "results", "root is results: " + root.tag)
    return root


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def main():
    bare_addr, framed_addr = address(sys.argv[1]), address(sys.argv[2])

    # Accounts and shares, bare.
    root = bare(bare_addr, """<?xml version="1.0" encoding="UTF-8"?>
<create>
  <account id="1001" balance="10000"/>
  <account id="1002" balance="10000"/>
  <account id="1001" balance="5"/>
  <symbol sym="PEER">
    <account id="1001">100</account>
    <account id="9999">1</account>
  </symbol>
</create>
""")
    got = [(c.tag, dict(c.attrib), (c.text or "")) for c in root]
    check(got == [
        ("created", {"id": "1001"}, ""),
        ("created", {"id": "1002"}, ""),
        ("error", {"id": "1001"}, "Account already exists"),
        ("created", {"sym": "PEER", "id": "1001"}, ""),
        ("error", {"sym": "PEER", "id": "9999"}, "Account does not exist"),
    ], "create results: %r" % got)

    # Orders, queries and cancels on one kept-open connection.
    conn = Framed(framed_addr)
    root = conn.request('<transactions id="1001"><order sym="PEER" amount="-10" limit="20.5"/></transactions>')
    opened = root[0]
    check(opened.tag == "opened" and opened.get("amount") == "-10" and opened.get("limit") == "20.5", ET.tostring(root))
    sell = opened.get("id")
    check(sell.isdigit(), "transaction id: " + sell)

    root = conn.request('<transactions id="1002"><order sym="PEER" amount="4" limit="21"/>'
                        '<query id="%s"/></transactions>' % sell)
    check([c.tag for c in root] == ["opened", "error"], ET.tostring(root))
    check(root[1].text == "Unknown transaction", "another account's order is unknown")
    buy = root[0].get("id")

    root = conn.request('<transactions id="1001"><query id="%s"/><cancel id="%s"/><cancel id="%s"/></transactions>'
                        % (sell, sell, sell))
    status, canceled, again = root
    check(status.tag == "status" and status.get("id") == sell, ET.tostring(status))
    check([c.tag for c in status] == ["open", "executed"], ET.tostring(status))
    check(status[0].get("shares") == "6", "open 6")
    executed = status[1]
    check(executed.get("shares") == "4" and executed.get("price") == "20.5", "executed at the resting price")
    check(int(executed.get("time")) > 1_600_000_000, "time in seconds since the epoch")
    check(canceled.tag == "canceled" and [c.tag for c in canceled] == ["canceled", "executed"], ET.tostring(canceled))
    check(canceled[0].get("shares") == "6", "6 cancelled")
    check(again.tag == "error" and again.text == "Nothing to cancel", ET.tostring(again))

    root = conn.request('<transactions id="1002"><query id="%s"/></transactions>' % buy)
    check([(c.tag, c.get("shares"), c.get("price")) for c in root[0]] == [("executed", "4", "20.5")], ET.tostring(root))
    conn.close()

    # Errors: request-level ones are a single error without attributes.
    for raw, text in [
        (b"abc\n", "Malformed length line"),
        (frame("<bogus/>"), "Unknown root element: bogus"),
        (frame('<!DOCTYPE x [<!ENTITY e "boom">]><create>&e;</create>'), "Malformed XML"),
        (frame("<create><account"), "Malformed XML"),
    ]:
        root = bare(bare_addr, None, raw=raw)
        check(len(root) == 1 and root[0].tag == "error" and root[0].attrib == {} and root[0].text == text,
              "%r: %r" % (raw, ET.tostring(root)))

    # Escaped values come back escaped, and parse back to what was sent.
    root = bare(bare_addr, '<transactions id="1001"><order sym="A&amp;&lt;&quot;" amount="1" limit="1"/></transactions>')
    check(root[0].get("sym") == 'A&<"' and root[0].text == "Invalid symbol", ET.tostring(root))
    print("peer: every check passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as failure:
        print("peer: FAILED:", failure)
        sys.exit(1)
