// The chat page: one Centrifuge client connected to the node that served
// this page, subscribed to one room. Messages, joins and leaves from other
// nodes arrive through the broker; "Here now" starts from the room's
// presence, which shardcast keeps in Redis, and follows joins and leaves.
(function () {
  'use strict';
  const params = new URLSearchParams(location.search);
  const room = params.get('room') || 'lobby';
  const name = params.get('name') || 'guest-' + Math.floor(1000 + Math.random() * 9000);
  const node = document.body.dataset.node;

  const $ = (id) => document.getElementById(id);
  const state = $('state'), messages = $('messages'), form = $('send-form'),
    text = $('text'), send = $('send'), who = $('who');
  $('room').textContent = '#' + room;
  $('me').textContent = name;

  function setState(label, cls) {
    state.textContent = label;
    state.className = 'state ' + (cls || '');
  }

  function line(build) {
    const li = document.createElement('li');
    build(li);
    const atBottom = messages.scrollTop + messages.clientHeight >= messages.scrollHeight - 4;
    messages.appendChild(li);
    if (atBottom) messages.scrollTop = messages.scrollHeight;
  }

  function span(cls, str) {
    const s = document.createElement('span');
    s.className = cls;
    s.textContent = str;
    return s;
  }

  function addMessage(m) {
    line((li) => {
      li.className = 'message';
      li.append(span('who', m.user), ' ', span('node', '(' + m.node + ')'), ': ', span('text', m.text));
    });
  }

  function addNotice(str) {
    line((li) => li.append(span('notice', str)));
  }

  // What this tab showed of the room, kept across reloads (sessionStorage
  // is per tab): the messages and the stream position of the last one. A
  // reloaded page draws them again and subscribes from that position, and
  // the server sends what was published meanwhile from the room's history.
  const storeKey = 'shardcast-chat:' + room;
  const maxKept = 100;
  let kept = { messages: [], since: null };
  try {
    kept = JSON.parse(sessionStorage.getItem(storeKey)) || kept;
  } catch (err) {
    // a broken entry: start afresh
  }
  function save() {
    try {
      sessionStorage.setItem(storeKey, JSON.stringify(kept));
    } catch (err) {
      // storage full or disabled: the page still works, without recovery
    }
  }
  function keep(m, offset) {
    kept.messages.push(m);
    if (kept.messages.length > maxKept) kept.messages.splice(0, kept.messages.length - maxKept);
    if (kept.since && offset !== undefined) kept.since.offset = offset;
    save();
  }

  // Presence: client ID → ClientInfo, from sub.presence() and join/leave.
  let present = new Map();
  function nodeOf(info) {
    return info.connInfo && info.connInfo.node ? info.connInfo.node : '?';
  }
  function renderWho() {
    who.replaceChildren();
    const infos = [...present.values()].sort((a, b) => a.user.localeCompare(b.user) || a.client.localeCompare(b.client));
    for (const info of infos) {
      const li = document.createElement('li');
      li.append(span('user', info.user), ' ', span('node', '(' + nodeOf(info) + ')'));
      who.appendChild(li);
    }
  }

  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const client = new Centrifuge(scheme + '://' + location.host + '/connection/websocket', {
    data: { name: name },
  });
  client.on('connecting', (ctx) => setState('connecting to ' + node + '…', 'down'));
  client.on('connected', () => setState('connected to ' + node, 'connected'));
  client.on('disconnected', (ctx) => setState('disconnected: ' + ctx.reason, 'down'));

  for (const m of kept.messages) addMessage(m);
  const sub = client.newSubscription('chat:' + room, kept.since ? { since: kept.since } : {});
  sub.on('publication', (ctx) => {
    addMessage(ctx.data);
    keep(ctx.data, ctx.offset);
  });
  sub.on('join', (ctx) => {
    present.set(ctx.info.client, ctx.info);
    renderWho();
    addNotice(ctx.info.user + ' joined on ' + nodeOf(ctx.info));
  });
  sub.on('leave', (ctx) => {
    present.delete(ctx.info.client);
    renderWho();
    addNotice(ctx.info.user + ' left');
  });
  sub.on('subscribed', async (ctx) => {
    if (ctx.wasRecovering && !ctx.recovered) {
      addNotice('some messages could not be recovered');
    }
    if (ctx.streamPosition && !(ctx.wasRecovering && ctx.recovered)) {
      // A new position: the first visit, or one the room's history could
      // not bridge. Recovered publications, if any, move it on.
      kept.since = { offset: ctx.streamPosition.offset, epoch: ctx.streamPosition.epoch };
      save();
    }
    text.disabled = false;
    send.disabled = false;
    try {
      const res = await sub.presence();
      present = new Map(Object.entries(res.clients));
      renderWho();
    } catch (err) {
      addNotice('presence unavailable: ' + err.message);
    }
  });
  sub.on('unsubscribed', () => {
    text.disabled = true;
    send.disabled = true;
  });
  sub.on('subscribing', () => {
    text.disabled = true;
    send.disabled = true;
  });

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const value = text.value.trim();
    if (!value) return;
    text.value = '';
    try {
      await sub.publish({ text: value });
    } catch (err) {
      addNotice('not sent: ' + err.message);
      text.value = value;
    }
  });

  sub.subscribe();
  client.connect();
})();
