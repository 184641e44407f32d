// The idemproxy operator console. Everything a record holds is shown as
// text (textContent, never HTML): a field can carry what a client or an
// upstream sent. Loaded as a module (a CORS-mode fetch, as the style sheet
// is: Caddy's admin endpoint refuses no-cors ones).
'use strict';

(() => {
  const TOKEN = 'idemproxy-admin-token';
  // The admin API is the page's parent: / on idemproxy, /idempotency/ under Caddy.
  const api = new URL('../', location.href);
  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(TOKEN) || '';
  let handler = '';
  let held = [];        // the held keys loaded so far
  let cursor = '';      // the next page's, if any
  let current = null;   // the hash of the key view, when shown

  // el makes an element with text (never parsed as HTML) and children.
  function el(tag, text, ...children) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    for (const c of children) if (c) e.append(c);
    return e;
  }

  function say(text, bad) {
    const s = $('status');
    s.textContent = text;
    s.className = bad ? 'bad' : 'ok';
  }

  // call sends one admin API request and returns {status, body}.
  async function call(method, path, params, body) {
    const url = new URL(path, api);
    for (const [k, v] of Object.entries(params || {})) url.searchParams.set(k, v);
    if (handler) url.searchParams.set('handler', handler);
    const headers = {};
    if (token) headers.Authorization = 'Bearer ' + token;
    if (method === 'POST') headers['Content-Type'] = 'application/json';
    const resp = await fetch(url, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit', cache: 'no-store', redirect: 'error',
    });
    let out = null;
    try { out = await resp.json(); } catch (e) { out = null; }
    if (resp.status === 401) {
      $('token-form').classList.add('wanted');
      $('token').focus();
      throw new Error('the admin token is required: enter it above');
    }
    return { status: resp.status, body: out };
  }

  function errorOf(r) {
    return (r.body && r.body.error) ? r.body.error : 'HTTP ' + r.status;
  }

  const fmtTime = (s) => {
    if (!s) return '';
    const d = new Date(s);
    return isNaN(d) ? String(s) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  };

  // request is a one-line summary of a record's request, when it has one.
  function request(x) {
    const q = x && x.request;
    if (!q || typeof q !== 'object') return '';
    return [q.method, q.path].filter(Boolean).join(' ');
  }

  const HELD_FIELDS = new Set(['key_hash', 'hash', 'kind', 'status', 'route', 'created_at',
    'held_since', 'held_until', 'reconcile', 'request']);

  function shown() {
    const route = $('f-route').value.trim();
    const state = $('f-state').value;
    const hash = $('f-hash').value.trim().toLowerCase();
    return held.filter((h) => {
      if (route && !String(h.route || (h.request && h.request.route) || '').includes(route)) return false;
      if (hash && !String(h.hash || h.key_hash).startsWith(hash)) return false;
      switch (state) {
        case '': return true;
        case 'no_answer': case 'lease_lapsed': return h.kind === state;
        case 'none': return !h.reconcile;
        default: return h.reconcile && h.reconcile.state === state;
      }
    });
  }

  function renderHeld() {
    const body = $('held').tBodies[0];
    body.replaceChildren();
    const rows = shown();
    for (const h of rows) {
      const hash = h.hash || h.key_hash;
      const open = el('a', h.key_hash);
      open.href = '#key=' + encodeURIComponent(hash);
      open.className = 'hash';
      const rec = h.reconcile ? [h.reconcile.state, 'attempts ' + h.reconcile.attempts,
        h.reconcile.last_status ? 'last ' + h.reconcile.last_status : '', h.reconcile.last_error || '']
        .filter(Boolean).join(', ') : '';
      const extra = Object.keys(h).filter((k) => !HELD_FIELDS.has(k));
      const more = el('td');
      more.className = 'wrap';
      for (const k of extra) more.append(el('div', k + ': ' + brief(h[k])));
      const settle = el('td', null,
        button('Release…', () => release(hash, h.key_hash)),
        button('Resolve…', () => { location.hash = '#key=' + encodeURIComponent(hash) + '&resolve'; }),
        button('Delete…', () => remove(hash, h.key_hash), 'danger'));
      settle.className = 'actions';
      const tr = el('tr', null, el('td', null, open), el('td', h.kind), el('td', h.status),
        el('td', h.route || (h.request && h.request.route) || ''), wrap(el('td', request(h))),
        el('td', fmtTime(h.held_since)), el('td', fmtTime(h.held_until)), wrap(el('td', rec)), more, settle);
      tr.dataset.hash = hash;
      body.append(tr);
    }
    $('held-count').textContent = '(' + rows.length + (rows.length !== held.length ? ' of ' + held.length : '') + (cursor ? ', more' : '') + ')';
    $('held-empty').hidden = rows.length > 0;
    $('held').hidden = rows.length === 0;
    $('more').hidden = !cursor;
  }

  function wrap(e) { e.className = 'wrap'; return e; }

  function brief(v) {
    if (v === null || typeof v !== 'object') return String(v);
    const s = JSON.stringify(v);
    return s.length > 120 ? s.slice(0, 117) + '…' : s;
  }

  function button(text, fn, cls) {
    const b = el('button', text);
    b.type = 'button';
    if (cls) b.className = cls;
    b.addEventListener('click', fn);
    return b;
  }

  async function loadHeld(more) {
    const params = { state: 'held', limit: '100' };
    if (more && cursor) params.cursor = cursor;
    const r = await call('GET', 'keys', params);
    if (r.status !== 200) throw new Error('listing the held keys: ' + errorOf(r));
    held = more ? held.concat(r.body.held || []) : (r.body.held || []);
    cursor = r.body.next_cursor || '';
    renderHeld();
  }

  // confirm asks in a dialog and resolves to whether the operator confirmed.
  function confirmed(title, text, detail) {
    const d = $('confirm');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-detail').textContent = detail || '';
    $('confirm-detail').hidden = !detail;
    d.returnValue = '';
    d.showModal();
    $('confirm-cancel').focus();
    return new Promise((done) => d.addEventListener('close', () => done(d.returnValue === 'ok'), { once: true }));
  }

  async function settle(what, hash, keyHash, params, body, method) {
    const r = await call(method || 'POST', what, Object.assign({ hash }, params), body);
    if (r.status !== 200) throw new Error(what + ' ' + keyHash + ': ' + errorOf(r));
    return r;
  }

  async function release(hash, keyHash) {
    if (!await confirmed('Release ' + keyHash + '?', 'The next retry of this key runs again upstream. Release only when you know the first execution had no effect.')) return;
    await settle('release', hash, keyHash);
    say('Released ' + keyHash + ': the next retry runs.');
    await refresh();
  }

  async function remove(hash, keyHash) {
    if (!await confirmed('Delete ' + keyHash + '?', 'The record is purged, whatever its state: a retry then runs again, and an in-flight key may run twice.')) return;
    await settle('keys', hash, keyHash, {}, undefined, 'DELETE');
    say('Deleted ' + keyHash + '.');
    if (current) location.hash = '';
    await refresh();
  }

  function parseHeaders(text) {
    const out = {};
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      const i = line.indexOf(':');
      if (i <= 0) throw new Error('header line without "Name: value": ' + line);
      const name = line.slice(0, i).trim();
      (out[name] = out[name] || []).push(line.slice(i + 1).trim());
    }
    return out;
  }

  async function resolve(ev) {
    ev.preventDefault();
    const hash = current;
    const keyHash = hash.slice(0, 12);
    const req = { status: Number($('r-status').value), headers: parseHeaders($('r-headers').value), body: $('r-body').value };
    const detail = req.status + '\n' + Object.entries(req.headers).map(([k, vs]) => vs.map((v) => k + ': ' + v).join('\n')).join('\n') + '\n\n' + req.body;
    if (!await confirmed('Resolve ' + keyHash + '?', 'Every retry of this key is answered with this response from now on, as if the upstream had sent it.', detail)) return;
    await settle('resolve', hash, keyHash, {}, req);
    say('Resolved ' + keyHash + ' with ' + req.status + ': its retries get this response.');
    await showKey(hash);
    await loadHeld(false);
  }

  // field renders one value of a record: an object as a list of its
  // fields, anything else as text.
  function field(v) {
    if (v === null || typeof v !== 'object') return el('span', v === null ? 'null' : String(v));
    if (Array.isArray(v)) {
      if (v.every((x) => x === null || typeof x !== 'object')) return el('span', v.join(', '));
      const ol = el('ol');
      for (const x of v) ol.append(el('li', null, field(x)));
      return ol;
    }
    const dl = el('dl');
    for (const [k, x] of Object.entries(v)) dl.append(el('dt', k), el('dd', null, field(x)));
    return dl;
  }

  function bodyText(b64) {
    try {
      const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      return new TextDecoder('utf-8').decode(bytes.slice(0, 65536)) + (bytes.length > 65536 ? '\n… (' + bytes.length + ' bytes)' : '');
    } catch (e) { return '(not text)'; }
  }

  async function showKey(hash) {
    current = hash;
    $('list-view').hidden = true;
    $('key-view').hidden = false;
    $('kv-hash').textContent = hash;
    const box = $('kv-record');
    box.replaceChildren(el('p', 'Loading…'));
    const r = await call('GET', 'keys', { hash });
    if (r.status !== 200) {
      box.replaceChildren(el('p', errorOf(r)), r.body ? field(r.body) : '');
      $('resolve-form').hidden = true;
      $('kv-release').hidden = true;
      $('kv-delete').hidden = r.status === 404;
      return;
    }
    const rec = r.body;
    const parts = [field(rec)];
    if (rec.response && rec.response.body_base64) {
      parts.push(el('h3', 'Response body, as text'), el('pre', bodyText(rec.response.body_base64)));
    }
    box.replaceChildren(...parts);
    box.dataset.state = rec.state;
    const holding = !!(rec.response && rec.response.unknown_outcome);
    $('resolve-form').hidden = !holding;
    $('kv-release').hidden = !holding;
    $('kv-delete').hidden = false;
  }

  async function refresh() {
    if (current) await showKey(current);
    else await loadHeld(false);
  }

  async function route() {
    const m = /^#key=([^&]*)(&resolve)?$/.exec(location.hash);
    if (m) {
      await showKey(decodeURIComponent(m[1]));
      if (m[2]) $('r-status').focus();
      return;
    }
    current = null;
    $('key-view').hidden = true;
    $('list-view').hidden = false;
    await loadHeld(false);
  }

  async function lookup(ev) {
    ev.preventDefault();
    const hash = $('f-hash').value.trim().toLowerCase();
    renderHeld();
    if (/^[0-9a-f]{12,64}$/.test(hash) && shown().length === 0) {
      location.hash = '#key=' + hash; // not held: any record by its hash
    }
  }

  async function handlers() {
    // Caddy's admin API lists its handlers; idemproxy's has one store.
    const r = await call('GET', 'handlers');
    if (r.status !== 200 || !Array.isArray(r.body) || r.body.length < 2) return;
    const sel = $('handler');
    sel.replaceChildren(el('option', '(the only store)'));
    sel.options[0].value = '';
    for (const h of r.body) {
      const o = el('option', h.name + ' — ' + h.store);
      o.value = h.name;
      sel.append(o);
    }
    $('handler-label').hidden = false;
  }

  // guard runs fn, showing what failed.
  const guard = (fn) => (...args) => fn(...args).catch((e) => say(e.message, true));

  $('token').value = token;
  $('token-form').addEventListener('submit', guard(async (ev) => {
    ev.preventDefault();
    token = $('token').value.trim();
    if (token) sessionStorage.setItem(TOKEN, token); else sessionStorage.removeItem(TOKEN);
    $('token-form').classList.remove('wanted');
    say(token ? 'Token set for this tab.' : 'No token.');
    await handlers();
    await route();
  }));
  $('token-forget').addEventListener('click', () => {
    token = '';
    $('token').value = '';
    sessionStorage.removeItem(TOKEN);
    say('Token forgotten.');
  });
  $('handler').addEventListener('change', guard(async () => { handler = $('handler').value; await refresh(); }));
  $('filters').addEventListener('submit', guard(lookup));
  $('f-route').addEventListener('input', renderHeld);
  $('f-state').addEventListener('change', renderHeld);
  $('f-hash').addEventListener('input', renderHeld);
  $('refresh').addEventListener('click', guard(refresh));
  $('more').addEventListener('click', guard(() => loadHeld(true)));
  $('kv-reload').addEventListener('click', guard(refresh));
  $('kv-release').addEventListener('click', guard(() => release(current, current.slice(0, 12))));
  $('kv-delete').addEventListener('click', guard(() => remove(current, current.slice(0, 12))));
  $('resolve-form').addEventListener('submit', guard(resolve));
  window.addEventListener('hashchange', guard(route));
  guard(async () => { await handlers(); await route(); })();
})();
