'use strict';
// Checks shardcast_layout.js against every vector of
// testdata/layout_vectors.json. Usage: node test_vectors.js [vectors.json]
// Prints one line per failure and a closing "N passed, N failed" line;
// exits non-zero if any vector failed.

const fs = require('node:fs');
const path = require('node:path');
const sl = require('./shardcast_layout');

async function main() {
  await sl.ready;
  const file = process.argv[2] || path.join(__dirname, '..', '..', 'testdata', 'layout_vectors.json');
  const v = JSON.parse(fs.readFileSync(file, 'utf8'));
  let passed = 0;
  let failed = 0;
  const check = (name, got, want) => {
    const g = JSON.stringify(got);
    const w = JSON.stringify(want);
    if (g === w) {
      passed++;
    } else {
      failed++;
      console.log(`FAIL ${name}: got ${g}, want ${w}`);
    }
  };

  const layouts = new Map();
  v.layout.forEach((c, i) => {
    const id = `${c.partitions}/${c.prefix}`;
    if (!layouts.has(id)) layouts.set(id, new sl.Layout(c.partitions, c.prefix));
    const lay = layouts.get(id);
    const name = `layout[${i}] ${JSON.stringify(c.channel)} N=${c.partitions} prefix ${JSON.stringify(c.prefix)}`;
    const p = lay.partition(c.channel);
    const key = lay.key(c.channel);
    check(`${name} hash`, sl.xxh64(c.channel).toString(16).padStart(16, '0'), c.hash);
    check(`${name} partition`, p, c.partition);
    check(`${name} tag`, lay.tag(p), c.tag);
    check(`${name} key`, key.toString('hex'), Buffer.from(c.key, 'utf8').toString('hex'));
    check(`${name} slot`, [sl.keySlot(key), lay.slot(p)], [c.slot, c.slot]);
    const back = lay.channel(key);
    check(`${name} channel`, back && back.toString('hex'), Buffer.from(c.channel, 'utf8').toString('hex'));
    check(`${name} instance`, sl.instance(c.channel, c.instances), c.instance);
  });
  for (const c of v.jump) {
    check(`jump(${c.key}, ${c.buckets})`, sl.jump(BigInt(c.key), c.buckets), c.bucket);
  }
  for (const c of v.envelope_encode) {
    const frame = sl.encodeFrame(Buffer.from(c.payload_hex, 'hex'), BigInt(c.timestamp_us));
    check(`encode ${c.timestamp_us}`, frame.toString('hex'), c.frame_hex);
  }
  for (const c of v.envelope_decode) {
    let got;
    try {
      const { timestampUs, payload } = sl.decodeFrame(Buffer.from(c.frame_hex, 'hex'));
      got = [true, timestampUs.toString(), payload.toString('hex')];
    } catch (e) {
      if (!(e instanceof sl.BadFrame)) throw e;
      got = [false, e.kind];
    }
    check(`decode ${c.frame_hex}`, got, c.ok ? [true, c.timestamp_us, c.payload_hex] : [false, c.error]);
  }
  for (const c of v.layout_fingerprints) {
    check(`fingerprint N=${c.partitions} prefix ${JSON.stringify(c.prefix)}`,
      new sl.Layout(c.partitions, c.prefix).fingerprint(), c.fingerprint);
  }
  for (const c of v.sharded_fingerprints) {
    check(`normalize ${JSON.stringify(c.addrs)}`, c.addrs.map(sl.normalizeAddr), c.normalized);
    check(`sharded fingerprint ${JSON.stringify(c.addrs)}`, sl.shardedFingerprint(c.addrs), c.fingerprint);
  }
  for (const c of v.addr_normalize) {
    let got = null;
    try { got = sl.normalizeAddr(c.addr); } catch (e) { got = null; }
    check(`normalize ${JSON.stringify(c.addr)}`, got, c.ok ? c.normalized : null);
  }
  for (const c of v.key_parse) {
    const id = `${c.partitions}/${c.prefix}`;
    if (!layouts.has(id)) layouts.set(id, new sl.Layout(c.partitions, c.prefix));
    const back = layouts.get(id).channel(Buffer.from(c.key, 'utf8'));
    check(`key_parse ${JSON.stringify(c.key)} N=${c.partitions} prefix ${JSON.stringify(c.prefix)} (${c.why})`,
      back && back.toString('hex'), c.ok ? Buffer.from(c.channel, 'utf8').toString('hex') : null);
  }
  for (const c of v.key_slot) {
    check(`key_slot ${JSON.stringify(c.key)}`, sl.keySlot(Buffer.from(c.key, 'utf8')), c.slot);
  }

  // Input no vector can hold: a lone surrogate has no UTF-8; Buffer.from
  // would turn it into U+FFFD and give the key of another channel.
  for (const ch of ['\ud800', '\udc00', 'a\ud83d']) {
    let got = 'returned';
    try { new sl.Layout(16).key(ch); } catch (e) { got = 'threw'; }
    check(`key(${JSON.stringify(ch)})`, got, 'threw');
  }
  check('key of a surrogate pair', new sl.Layout(16).key('\ud83d\ude00').toString('hex'),
    Buffer.concat([Buffer.from(`{${new sl.Layout(16).tag(new sl.Layout(16).partition('\ud83d\ude00'))}}.`), Buffer.from([0xf0, 0x9f, 0x98, 0x80])]).toString('hex'));
  console.log(`node: ${passed} passed, ${failed} failed`);
  return failed ? 1 : 0;
}

main().then((code) => { process.exitCode = code; }, (err) => { console.error(err); process.exitCode = 2; });
