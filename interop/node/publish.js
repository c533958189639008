'use strict';
// Publishes messages as a shardcast publisher would, with ioredis and
// shardcast_layout.js only; the interop test starts it and checks that a Go
// subscriber receives them.
//
// Usage: node publish.js SPEC
// SPEC is JSON: {"engine": "sharded" | "cluster", "addrs": [host:port, ...],
// "partitions": N, "prefix": "...", "raw": false,
// "messages": [{"channel": "...", "payload_hex": "..."}, ...]}.
// For the sharded engine addrs is the ordered instance list; for the cluster
// engine a seed node. Prints the layout fingerprint, then one line per
// message (where it went), and exits non-zero if a message reached no
// subscriber: a wrong instance or key is caught here, not by a timeout on
// the other side.

const Redis = require('ioredis');
const sl = require('./shardcast_layout');

function connect(addr) {
  const i = addr.lastIndexOf(':');
  const host = addr.slice(0, i).replace(/^\[|\]$/g, '');
  return new Redis({ host, port: Number(addr.slice(i + 1)), maxRetriesPerRequest: 1 });
}

// host:port of the master serving slot, from CLUSTER SLOTS, with the
// endpoint rules Go follows (topology.go): "?" means the node's "ip"
// metadata, an empty or null endpoint the host that was queried.
async function masterOf(seed, slot) {
  for (const [start, end, master] of await seed.call('CLUSTER', 'SLOTS')) {
    if (start <= slot && slot <= end) {
      let host = master[0] == null || master[0] === '' ? seed.options.host : String(master[0]);
      if (host === '?') {
        const meta = master[3] || [];
        const i = meta.findIndex((v, k) => k % 2 === 0 && String(v) === 'ip');
        if (i < 0 || !meta[i + 1]) throw new Error(`master of slot ${slot}: endpoint "?" and no ip`);
        host = String(meta[i + 1]);
      }
      return host.includes(':') ? `[${host}]:${master[1]}` : `${host}:${master[1]}`;
    }
  }
  throw new Error(`no master serves slot ${slot}`);
}

async function main() {
  await sl.ready;
  const spec = JSON.parse(process.argv[2]);
  const conns = new Map();
  const conn = (addr) => {
    if (!conns.has(addr)) conns.set(addr, connect(sl.normalizeAddr(addr)));
    return conns.get(addr);
  };
  try {
    const cluster = spec.engine === 'cluster';
    const layout = cluster ? new sl.Layout(spec.partitions, spec.prefix || '') : null;
    const fingerprint = cluster ? layout.fingerprint() : sl.shardedFingerprint(spec.addrs);
    console.log(JSON.stringify({ fingerprint }));
    for (const m of spec.messages) {
      const payload = Buffer.from(m.payload_hex, 'hex');
      const data = spec.raw ? payload : sl.encodeFrame(payload);
      let addr;
      let target;
      let receivers;
      if (cluster) {
        target = layout.key(m.channel);
        addr = await masterOf(conn(spec.addrs[0]), sl.keySlot(target));
        receivers = await conn(addr).call('SPUBLISH', target, data);
      } else {
        addr = spec.addrs[sl.instance(m.channel, spec.addrs.length)];
        target = Buffer.from(m.channel, 'utf8');
        receivers = await conn(addr).publish(target, data);
      }
      console.log(JSON.stringify({ channel: m.channel, addr, target: target.toString('utf8'), receivers }));
      if (receivers < 1) throw new Error(`${target} on ${addr} reached no subscriber: wrong instance or key`);
    }
  } finally {
    await Promise.all([...conns.values()].map((c) => c.quit()));
  }
}

main().catch((err) => { console.error(err.message || err); process.exitCode = 1; });
