"""Publishes messages as a shardcast publisher would, with redis-py and
shardcast_layout.py only; the interop test starts it and checks that a Go
subscriber receives them.

Usage: python3 publish.py SPEC
SPEC is JSON: {"engine": "sharded" | "cluster", "addrs": [host:port, ...],
"partitions": N, "prefix": "...", "raw": false,
"messages": [{"channel": "...", "payload_hex": "..."}, ...]}.
For the sharded engine addrs is the ordered instance list; for the cluster
engine a seed node. Prints the layout fingerprint, then one line per message
(where it went), and exits non-zero if a message reached no subscriber: a
wrong instance or key is caught here, not by a timeout on the other side.
"""

import json
import sys

import redis

import shardcast_layout as sl


def connect(addr):
    host, _, port = addr.rpartition(":")
    return redis.Redis(host=host.strip("[]"), port=int(port))


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


def master_of(seed, slot):
    """host:port of the master serving slot, from CLUSTER SLOTS, with the
    endpoint rules Go follows (topology.go): "?" means the node's "ip"
    metadata, an empty or null endpoint the host that was queried."""
    for entry in seed.execute_command("CLUSTER", "SLOTS"):
        start, end, master = entry[0], entry[1], entry[2]
        if start <= slot <= end:
            host = _text(master[0]) or seed.connection_pool.connection_kwargs["host"]
            if host == "?":
                meta = [_text(x) for x in (master[3] if len(master) > 3 else [])]
                meta = dict(zip(meta[::2], meta[1::2]))
                if not meta.get("ip"):
                    raise SystemExit('master of slot %d: endpoint "?" and no ip' % slot)
                host = meta["ip"]
            return ("[%s]:%d" if ":" in host else "%s:%d") % (host, master[1])
    raise SystemExit("no master serves slot %d" % slot)


def main():
    spec = json.loads(sys.argv[1])
    conns = {}

    def conn(addr):
        if addr not in conns:
            conns[addr] = connect(sl.normalize_addr(addr))
        return conns[addr]

    cluster = spec["engine"] == "cluster"
    if cluster:
        layout = sl.Layout(spec["partitions"], spec.get("prefix", ""))
        print(json.dumps({"fingerprint": layout.fingerprint()}))
    else:
        print(json.dumps({"fingerprint": sl.sharded_fingerprint(spec["addrs"])}))
    for m in spec["messages"]:
        channel, payload = m["channel"], bytes.fromhex(m["payload_hex"])
        data = payload if spec.get("raw") else sl.encode_frame(payload)
        if cluster:
            key = layout.key(channel)
            addr = master_of(conn(spec["addrs"][0]), sl.key_slot(key))
            receivers = conn(addr).execute_command("SPUBLISH", key, data)
            target = key
        else:
            addr = spec["addrs"][sl.instance(channel, len(spec["addrs"]))]
            receivers = conn(addr).publish(channel.encode("utf-8"), data)
            target = channel.encode("utf-8")
        print(json.dumps({"channel": channel, "addr": addr, "target": target.decode("utf-8"), "receivers": receivers}))
        if receivers < 1:
            raise SystemExit("%s on %s reached no subscriber: wrong instance or key" % (target, addr))
    for c in conns.values():
        c.close()


if __name__ == "__main__":
    main()
