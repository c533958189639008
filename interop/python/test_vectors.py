"""Checks shardcast_layout.py against every vector of
testdata/layout_vectors.json. Usage: python3 test_vectors.py [vectors.json]
Prints one line per failure and a closing "N passed, N failed" line; exits
non-zero if any vector failed."""

import json
import os
import sys

import shardcast_layout as sl

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "..", "testdata", "layout_vectors.json")


def main():
    with open(sys.argv[1] if len(sys.argv) > 1 else DEFAULT, encoding="utf-8") as f:
        v = json.load(f)
    passed, failed = 0, 0

    def check(name, got, want):
        nonlocal passed, failed
        if got == want:
            passed += 1
        else:
            failed += 1
            print("FAIL %s: got %r, want %r" % (name, got, want))

    layouts = {}
    for i, c in enumerate(v["layout"]):
        n, prefix, ch = c["partitions"], c["prefix"], c["channel"]
        name = "layout[%d] %r N=%d prefix %r" % (i, ch, n, prefix)
        lay = layouts.get((n, prefix)) or layouts.setdefault((n, prefix), sl.Layout(n, prefix))
        p = lay.partition(ch)
        key = lay.key(ch)
        check(name + " hash", "%016x" % sl.xxh64(ch), c["hash"])
        check(name + " partition", p, c["partition"])
        check(name + " tag", lay.tag(p), c["tag"])
        check(name + " key", key, c["key"].encode("utf-8"))
        check(name + " slot", (sl.key_slot(key), lay.slot(p)), (c["slot"], c["slot"]))
        check(name + " channel", lay.channel(key), ch.encode("utf-8"))
        check(name + " instance", sl.instance(ch, c["instances"]), c["instance"])
    for c in v["jump"]:
        check("jump(%s, %d)" % (c["key"], c["buckets"]), sl.jump(int(c["key"]), c["buckets"]), c["bucket"])
    for c in v["envelope_encode"]:
        frame = sl.encode_frame(bytes.fromhex(c["payload_hex"]), int(c["timestamp_us"]))
        check("encode %s" % c["timestamp_us"], frame.hex(), c["frame_hex"])
    for c in v["envelope_decode"]:
        try:
            us, payload = sl.decode_frame(bytes.fromhex(c["frame_hex"]))
            got = (True, str(us), payload.hex())
        except sl.BadFrame as e:
            got = (False, e.kind)
        want = (True, c["timestamp_us"], c["payload_hex"]) if c["ok"] else (False, c["error"])
        check("decode %s" % c["frame_hex"], got, want)
    for c in v["layout_fingerprints"]:
        lay = sl.Layout(c["partitions"], c["prefix"])
        check("fingerprint N=%d prefix %r" % (c["partitions"], c["prefix"]), lay.fingerprint(), c["fingerprint"])
    for c in v["sharded_fingerprints"]:
        check("normalize %r" % c["addrs"], [sl.normalize_addr(a) for a in c["addrs"]], c["normalized"])
        check("sharded fingerprint %r" % c["addrs"], sl.sharded_fingerprint(c["addrs"]), c["fingerprint"])
    for c in v["addr_normalize"]:
        try:
            got = sl.normalize_addr(c["addr"])
        except ValueError:
            got = None
        check("normalize %r" % c["addr"], got, c["normalized"] if c["ok"] else None)
    for c in v["key_parse"]:
        lay = layouts.get((c["partitions"], c["prefix"])) or layouts.setdefault(
            (c["partitions"], c["prefix"]), sl.Layout(c["partitions"], c["prefix"]))
        want = c["channel"].encode("utf-8") if c["ok"] else None
        check("key_parse %r N=%d prefix %r (%s)" % (c["key"], c["partitions"], c["prefix"], c["why"]), lay.channel(c["key"]), want)
    for c in v["key_slot"]:
        check("key_slot %r" % c["key"], sl.key_slot(c["key"]), c["slot"])

    # Input no vector can hold: each must raise, never give a key or a
    # fingerprint Go would not (JSON's 16.0 for 16 hashed as "16.0"; an
    # int taken for that many NUL bytes; partition -1 read as the last;
    # a lone surrogate, which has no UTF-8).
    def raises(name, fn, exc):
        try:
            fn()
        except exc:
            check(name, "raised", "raised")
        else:
            check(name, "returned", "raised %s" % exc.__name__)

    raises("Layout(16.0)", lambda: sl.Layout(16.0), TypeError)
    raises("key(5)", lambda: sl.Layout(128).key(5), TypeError)
    raises("tag(-1)", lambda: sl.Layout(16).tag(-1), IndexError)
    raises("slot(-1)", lambda: sl.Layout(16).slot(-1), IndexError)
    raises("tag(16) of 16", lambda: sl.Layout(16).tag(16), IndexError)
    raises("key(lone surrogate)", lambda: sl.Layout(16).key("\ud800"), UnicodeEncodeError)

    print("python: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
