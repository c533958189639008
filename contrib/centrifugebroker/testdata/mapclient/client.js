// A centrifuge-js map subscription client for map_ws_test.go: it connects
// to a Centrifuge node's WebSocket endpoint, opens one map subscription and
// prints every event it gets as one JSON line on stdout, for the Go test to
// read and assert. It takes commands on stdin (see the end of this file)
// and runs until stdin closes (the test ending it) or it is killed; it never
// exits on its own after a transient error, because reconnecting and
// re-syncing are what the test watches.
//
//   node client.js WS_URL CHANNEL [PAGE_SIZE]
//
// Lines, each with "ev" naming the event:
//   ready                              the subscription object exists
//   connecting/connected/disconnected  the client's state, with code and reason
//   subscribing/subscribed/unsubscribed the subscription's state; subscribed
//                                      carries recovered, wasRecovering, the
//                                      stream position and the state entries
//   sync     entries                   a full snapshot: the initial one or a re-sync
//   update   key, data, removed, offset one live key change
//   cmd      phase, limit, cursor, recover, epoch, offset
//                                      a map subscribe command the client sent
//                                      for the channel (how pagination is seen)
//   error    type, code, message       a client or subscription error
'use strict';

const { Centrifuge } = require('centrifuge');
const WebSocket = require('ws');

const [url, channel, pageSizeArg] = process.argv.slice(2);
if (!url || !channel) {
  process.stderr.write('usage: node client.js WS_URL CHANNEL [PAGE_SIZE]\n');
  process.exit(2);
}
const pageSize = pageSizeArg ? Number(pageSizeArg) : 0;

// emit prints one event line. Writes to a pipe are asynchronous in Node, but
// kept in order.
function emit(ev, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ ev }, fields)) + '\n');
}

// entry is the printable form of a map entry or update.
function entry(e) {
  const out = { key: e.key, data: e.data };
  if (e.offset !== undefined) out.offset = Number(e.offset);
  if (e.removed) out.removed = true;
  return out;
}

// Node 20 has no global WebSocket; centrifuge-js takes a constructor in its
// options. This one also reports each map subscribe command the client
// sends for the channel, so the test can see the pages it asked for.
class ReportingWebSocket extends WebSocket {
  send(data, ...rest) {
    if (typeof data === 'string') {
      for (const line of data.split('\n')) {
        let cmd;
        try {
          cmd = JSON.parse(line);
        } catch (_) {
          continue;
        }
        const s = cmd && cmd.subscribe;
        if (s && s.channel === channel && s.type) {
          emit('cmd', {
            phase: s.phase || 0, limit: s.limit || 0, cursor: s.cursor || '',
            recover: !!s.recover, epoch: s.epoch || '', offset: Number(s.offset || 0),
          });
        }
      }
    }
    return super.send(data, ...rest);
  }
}

const client = new Centrifuge(url, {
  websocket: ReportingWebSocket,
  data: 'mapclient',
  // Quick retries: the test restarts Redis under the client and waits for
  // it to come back.
  minReconnectDelay: 100,
  maxReconnectDelay: 1000,
  timeout: 10000,
});

client.on('connecting', (ctx) => emit('connecting', { code: ctx.code, reason: ctx.reason }));
client.on('connected', (ctx) => emit('connected', { client: ctx.client }));
client.on('disconnected', (ctx) => emit('disconnected', { code: ctx.code, reason: ctx.reason }));
client.on('error', (ctx) => emit('error', { type: ctx.type, code: ctx.error && ctx.error.code, message: ctx.error && ctx.error.message }));

const sub = client.newMapSubscription(channel, {
  pageSize,
  unrecoverableStrategy: 'from_scratch',
  minResubscribeDelay: 100,
  maxResubscribeDelay: 1000,
});
sub.on('subscribing', (ctx) => emit('subscribing', { code: ctx.code, reason: ctx.reason }));
sub.on('subscribed', (ctx) => emit('subscribed', {
  recovered: ctx.recovered, wasRecovering: ctx.wasRecovering,
  epoch: ctx.streamPosition ? ctx.streamPosition.epoch : '',
  offset: ctx.streamPosition ? Number(ctx.streamPosition.offset) : 0,
  state: ctx.state ? ctx.state.map(entry) : null,
}));
sub.on('unsubscribed', (ctx) => emit('unsubscribed', { code: ctx.code, reason: ctx.reason }));
sub.on('error', (ctx) => emit('error', { type: ctx.type, code: ctx.error && ctx.error.code, message: ctx.error && ctx.error.message }));
sub.on('sync', (ctx) => emit('sync', { entries: ctx.entries.map(entry) }));
sub.on('update', (ctx) => emit('update', entry(ctx)));

sub.subscribe();
client.connect();
emit('ready', { channel, pageSize });

// The test writes commands on stdin, one a line, and closes it to stop the
// client cleanly:
//   disconnect  disconnect the client; its subscription keeps its position
//               and resubscribes, recovering from it, once connected again
//   connect     connect it again
const lines = require('readline').createInterface({ input: process.stdin });
lines.on('line', (line) => {
  switch (line.trim()) {
    case 'disconnect':
      client.disconnect();
      break;
    case 'connect':
      client.connect();
      break;
    default:
      process.stderr.write(`unknown command ${JSON.stringify(line)}\n`);
  }
});
lines.on('close', () => {
  client.disconnect();
  process.exit(0);
});
