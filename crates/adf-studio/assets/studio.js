// ADF Studio: a small page over the daemon's JSON API and its event streams.
// Every string that comes from an agent is placed with textContent (never parsed as HTML).
'use strict';

const PAGE = 50;
const metrics = { fleetRenderedMs: null, tokenLatencies: [], connected: {} };
window.studioMetrics = metrics;

// ------------------------------------------------------------------ helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'text') el.textContent = value;
    else if (key === 'class') el.className = value;
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key in el && typeof value !== 'string') el[key] = value;
    else el.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }

function toast(message, bad) {
  const box = document.getElementById('toast');
  const item = h('div', { class: bad ? 'bad' : '', text: message });
  box.append(item);
  setTimeout(() => item.remove(), bad ? 8000 : 2500);
}

async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    return { ok: false, status: 0, data: { error: 'the daemon is not reachable' } };
  }
  let data = null;
  const type = response.headers.get('content-type') || '';
  if (type.includes('json')) data = await response.json().catch(() => null);
  else data = { text: await response.text() };
  if (response.status === 401) showLoggedOut();
  return { ok: response.ok, status: response.status, data };
}

function errorText(result) {
  const d = result.data || {};
  return d.error && d.message ? `${d.error}: ${d.message}` : (d.error || d.message || d.text || `HTTP ${result.status}`);
}

function when(ms) {
  if (!ms) return '—';
  const n = typeof ms === 'number' ? ms : Date.parse(ms);
  if (!n) return String(ms);
  const age = Date.now() - n;
  const span = Math.abs(age);
  const words = span < 60000 ? `${Math.round(span / 1000)} s` : span < 3600000 ? `${Math.round(span / 60000)} min`
    : span < 86400000 ? `${Math.round(span / 3600000)} h` : null;
  if (!words) return new Date(n).toISOString().slice(0, 16).replace('T', ' ');
  return age >= 0 ? `${words} ago` : `in ${words}`;
}

function json(value) { return JSON.stringify(value, null, 2); }

function stateBadge(state) {
  const tone = { active: 'ok', idle: '', hibernate: 'warn', suspended: 'bad', off: 'bad',
    thinking: 'ok', awaiting_approval: 'warn', awaiting_ask: 'warn', busy: 'warn' }[state] || '';
  return h('span', { class: `badge ${tone}`, text: state || '—' });
}

let loggedOut = false;
function showLoggedOut() {
  if (loggedOut) return;
  loggedOut = true;
  const main = clear(document.getElementById('main'));
  main.append(h('h2', { text: 'Not logged in' }),
    h('p', { text: 'This browser has no session, or its session ended (sessions last 12 hours and can be revoked). Run `adf studio` for a new one-time login link.' }));
}

// ------------------------------------------------------------------ event streams

// One EventSource per purpose; closed when the view changes.
let streams = [];
function stream(path, handlers) {
  const source = new EventSource(path, { withCredentials: true });
  const conn = document.getElementById('conn');
  source.onopen = () => { conn.textContent = 'live'; conn.className = 'conn live'; metrics.connected[path.split('?')[0]] = true; };
  source.onerror = () => { conn.textContent = 'reconnecting…'; conn.className = 'conn down'; };
  for (const [name, fn] of Object.entries(handlers)) {
    source.addEventListener(name, (e) => { try { fn(JSON.parse(e.data), e); } catch (err) { console.error(err); } });
  }
  streams.push(source);
  return source;
}
function closeStreams() { for (const s of streams) s.close(); streams = []; }

// Every frame of an event stream whatever its event name (EventSource only delivers names it
// was told about, and agents publish their own `custom.*` names): read with fetch.
function streamAll(path, onFrame) {
  const controller = new AbortController();
  streams.push({ close: () => controller.abort() });
  (async () => {
    const response = await fetch(path, { credentials: 'same-origin', signal: controller.signal, headers: { Accept: 'text/event-stream' } });
    if (!response.ok) { toast(`event stream: HTTP ${response.status}`, true); return; }
    metrics.connected[path.split('?')[0]] = true;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
        if (data) { try { onFrame(JSON.parse(data)); } catch (err) { console.error(err); } }
      }
    }
  })().catch((err) => { if (err.name !== 'AbortError') toast(`event stream ended: ${err.message}`, true); });
}

// The bus's event names this page reacts to (everything else is shown in the Events tab).
const AGENT_EVENTS = ['agent.loaded', 'agent.unloaded', 'agent.state.changed', 'hil.requested',
  'hil.resolved', 'ask.requested', 'ask.resolved', 'turn.completed', 'config.changed',
  'file.written', 'file.deleted', 'timer.fired', 'tool.called', 'loop.cleared',
  'lambda.started', 'lambda.completed', 'suspend.requested', 'suspend.resolved', 'message'];

function debounce(fn, ms) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

// ------------------------------------------------------------------ router

function route() {
  closeStreams();
  loggedOut = false;
  const main = clear(document.getElementById('main'));
  const parts = (location.hash.replace(/^#\/?/, '') || '').split('/').map(decodeURIComponent);
  document.getElementById('nav-fleet').removeAttribute('aria-current');
  document.getElementById('nav-runtime').removeAttribute('aria-current');
  if (parts[0] === 'agent' && parts[1]) return agentView(main, parts[1], parts[2] || 'loop');
  if (parts[0] === 'runtime') {
    document.getElementById('nav-runtime').setAttribute('aria-current', 'page');
    return runtimeView(main);
  }
  document.getElementById('nav-fleet').setAttribute('aria-current', 'page');
  const page = Number(new URLSearchParams(parts[0].split('?')[1] || '').get('page') || 0);
  return fleetView(main, page);
}

// ------------------------------------------------------------------ fleet

const fleetState = { offset: 0, query: '', unloaded: [] };

async function fleetView(main, page) {
  fleetState.offset = page * PAGE;
  const search = h('input', { type: 'search', id: 'fleet-search', value: fleetState.query, placeholder: 'handle, name or path' });
  const table = h('table', { id: 'fleet' });
  const pager = h('div', { class: 'pager' });
  const summary = h('p', { class: 'muted', id: 'fleet-summary', role: 'status' });
  const unloaded = h('div', { id: 'fleet-unloaded' });
  main.append(
    h('h2', { text: 'Fleet' }),
    h('div', { class: 'card' },
      h('form', { class: 'row', id: 'create-form', onsubmit: createAgent },
        h('label', {}, 'New agent name', h('input', { type: 'text', id: 'create-name', required: true, pattern: '[A-Za-z0-9][A-Za-z0-9 _.-]*' })),
        h('label', {}, 'Description (optional)', h('input', { type: 'text', id: 'create-description' })),
        h('button', { class: 'primary', type: 'submit', id: 'create-submit' }, 'Create agent')),
      h('form', { class: 'row', onsubmit: loadAgent },
        h('label', {}, 'Open an .adf file (path on the daemon\'s machine)', h('input', { type: 'text', id: 'load-path', required: true, size: 40 })),
        h('button', { type: 'submit' }, 'Load'))),
    h('div', { class: 'row' }, h('label', {}, 'Filter agents', search)),
    summary, table, pager, unloaded);
  search.addEventListener('input', debounce(() => { fleetState.query = search.value; fleetState.offset = 0; refresh(); }, 200));
  const refresh = async () => {
    const q = encodeURIComponent(fleetState.query);
    const result = await api('GET', `/studio/api/fleet?offset=${fleetState.offset}&limit=${PAGE}&q=${q}`);
    if (!result.ok) { summary.textContent = errorText(result); return; }
    renderFleet(table, pager, summary, result.data, refresh);
    if (metrics.fleetRenderedMs === null) metrics.fleetRenderedMs = performance.now();
    renderUnloaded(unloaded, refresh);
  };
  await refresh();
  const later = debounce(refresh, 300);
  stream('/events?since=' + latestCursor, Object.fromEntries(AGENT_EVENTS.map((n) => [n, (frame) => { latestCursor = frame.cursor; later(); }])));
}
let latestCursor = 0;

function renderFleet(table, pager, summary, data, refresh) {
  clear(table);
  const from = data.total ? data.offset + 1 : 0;
  const to = data.offset + data.agents.length;
  summary.textContent = `${from}–${to} of ${data.total} loaded agents`;
  table.append(h('thead', {}, h('tr', {},
    h('th', { scope: 'col' }, 'State'), h('th', { scope: 'col' }, 'Agent'),
    h('th', { scope: 'col' }, 'Model'), h('th', { scope: 'col' }, 'Last activity'),
    h('th', { scope: 'col', class: 'num' }, 'Approvals'), h('th', { scope: 'col', class: 'num' }, 'Asks'), h('th', { scope: 'col', class: 'num' }, 'Unread'),
    h('th', { scope: 'col' }, 'Actions'))));
  const body = h('tbody');
  for (const agent of data.agents) {
    const label = agent.handle || agent.name || agent.id;
    const setState = h('select', { 'aria-label': `Display state of ${label}`,
      onchange: async (e) => {
        const r = await api('POST', `/agents/${encodeURIComponent(agent.id)}/state`, { state: e.target.value });
        if (!r.ok) toast(errorText(r), true);
        refresh();
      } }, ['active', 'idle', 'hibernate', 'suspended', 'off'].map((s) => h('option', { value: s, selected: s === agent.state }, s)));
    body.append(h('tr', { 'data-agent': agent.id },
      h('td', { 'data-label': 'State' }, stateBadge(agent.runtimeState === 'idle' ? agent.state : agent.runtimeState)),
      h('td', {}, h('a', { href: `#/agent/${encodeURIComponent(agent.id)}/loop` }, label),
        h('div', { class: 'muted', text: agent.handle && agent.name && agent.name !== agent.handle ? agent.name : '' })),
      h('td', { 'data-label': 'Model' }, agent.model || h('span', { class: 'muted', text: agent.busy ? 'busy' : '—' })),
      h('td', { 'data-label': 'Last activity' }, when(agent.lastActivity)),
      h('td', { class: 'num', 'data-label': 'Approvals' }, agent.pendingApprovals ? h('span', { class: 'badge warn', text: String(agent.pendingApprovals) }) : '0'),
      h('td', { class: 'num', 'data-label': 'Asks' }, agent.pendingAsks ? h('span', { class: 'badge warn', text: String(agent.pendingAsks) }) : '0'),
      h('td', { class: 'num', 'data-label': 'Unread' }, String(agent.unreadInbox ?? '—')),
      h('td', {}, h('div', { class: 'row' }, setState,
        h('a', { href: `/studio/api/agents/${encodeURIComponent(agent.id)}/download`, download: '', 'aria-label': `Download ${label}'s .adf file` }, 'Download'),
        h('button', { class: 'danger', 'aria-label': `Unload ${label}`, onclick: async () => {
          const r = await api('POST', `/agents/${encodeURIComponent(agent.id)}/unload`);
          if (!r.ok) return toast(errorText(r), true);
          fleetState.unloaded.push({ id: agent.id, label });
          toast(`${label} unloaded`);
          refresh();
        } }, 'Unload')))));
  }
  table.append(body);
  clear(pager);
  const prev = h('button', { disabled: data.offset === 0, onclick: () => { location.hash = `#/?page=${Math.max(0, data.offset / PAGE - 1)}`; } }, '← Previous');
  const next = h('button', { disabled: to >= data.total, onclick: () => { location.hash = `#/?page=${data.offset / PAGE + 1}`; } }, 'Next →');
  pager.append(prev, h('span', { class: 'muted', text: `page ${Math.floor(data.offset / PAGE) + 1} of ${Math.max(1, Math.ceil(data.total / PAGE))}` }), next);
}

function renderUnloaded(box, refresh) {
  clear(box);
  if (!fleetState.unloaded.length) return;
  box.append(h('h3', { text: 'Unloaded in this session' }));
  for (const item of fleetState.unloaded) {
    box.append(h('div', { class: 'row' }, h('span', { text: item.label }),
      h('button', { onclick: async () => {
        const r = await api('POST', `/agents/${encodeURIComponent(item.id)}/start`);
        if (!r.ok) return toast(errorText(r), true);
        fleetState.unloaded = fleetState.unloaded.filter((u) => u !== item);
        refresh();
      } }, `Start ${item.label}`)));
  }
}

async function createAgent(e) {
  e.preventDefault();
  const name = document.getElementById('create-name').value.trim();
  const description = document.getElementById('create-description').value.trim();
  const r = await api('POST', '/studio/api/agents', { name, description: description || undefined });
  if (!r.ok) return toast(errorText(r), true);
  toast(`created ${r.data.filePath}`);
  location.hash = `#/agent/${encodeURIComponent(r.data.id)}/loop`;
}

async function loadAgent(e) {
  e.preventDefault();
  const r = await api('POST', '/agents/load', { filePath: document.getElementById('load-path').value.trim() });
  if (!r.ok) return toast(errorText(r), true);
  location.hash = `#/agent/${encodeURIComponent(r.data.id)}/loop`;
}

// ------------------------------------------------------------------ agent

const TABS = [['loop', 'Loop'], ['files', 'Files'], ['config', 'Config'], ['messages', 'Inbox & outbox'],
  ['timers', 'Timers'], ['tasks', 'Tasks'], ['logs', 'Logs'], ['events', 'Events'],
  ['identity', 'Identity'], ['adapters', 'Adapters'], ['compute', 'Compute'], ['review', 'Review'], ['usage', 'Usage']];

async function agentView(main, id, tab) {
  const base = `/agents/${encodeURIComponent(id)}`;
  const status = await api('GET', `${base}/status`);
  if (!status.ok) { main.append(h('h2', { text: 'Agent' }), h('p', { class: 'error', text: errorText(status) })); return; }
  const s = status.data;
  // The display state lives in the daemon's memory; the fleet row carries it.
  const row = await api('GET', `/studio/api/fleet?q=${encodeURIComponent(s.id)}&limit=1`);
  const display = row.ok && row.data.agents[0] ? row.data.agents[0].state : 'idle';
  s.display = display;
  const title = s.handle || s.name || s.id;
  document.title = `${title} — ADF Studio`;
  const badge = h('span', { id: 'agent-state' }, stateBadge(s.runtimeState === 'idle' ? display : s.runtimeState));
  main.append(h('h2', {}, h('a', { href: '#/' }, 'Fleet'), ' / ', title, ' ', badge),
    h('p', { class: 'muted', text: s.filePath }), forkForm(id, s.name || title));
  const tablist = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Agent sections' });
  const panel = h('section', { role: 'tabpanel', id: 'panel', tabindex: '0' });
  for (const [key, label] of TABS) {
    tablist.append(h('button', { role: 'tab', id: `tab-${key}`, 'aria-selected': String(key === tab), 'aria-controls': 'panel',
      tabindex: key === tab ? '0' : '-1', onclick: () => { location.hash = `#/agent/${encodeURIComponent(id)}/${key}`; } }, label));
  }
  // Arrow keys move between tabs, as the ARIA tabs pattern expects.
  tablist.addEventListener('keydown', (e) => {
    const keys = TABS.map((t) => t[0]);
    const at = keys.indexOf(tab);
    const next = e.key === 'ArrowRight' ? at + 1 : e.key === 'ArrowLeft' ? at - 1 : null;
    if (next === null) return;
    const key = keys[(next + keys.length) % keys.length];
    location.hash = `#/agent/${encodeURIComponent(id)}/${key}`;
    setTimeout(() => document.getElementById(`tab-${key}`)?.focus(), 50);
  });
  panel.setAttribute('aria-labelledby', `tab-${tab}`);
  main.append(tablist, panel);
  const views = { loop: loopTab, files: filesTab, config: configTab, messages: messagesTab, timers: timersTab,
    tasks: tasksTab, logs: logsTab, events: eventsTab, identity: identityTab, adapters: adaptersTab, compute: computeTab, review: reviewTab, usage: usageTab };
  await (views[tab] || loopTab)(panel, id, base, s);
}

// Beyond the reference: fork the agent into a new file from its current state (a new id,
// handle and identity; the daemon copies the file and provisions the identity).
function forkForm(id, name) {
  const input = h('input', { type: 'text', id: 'fork-name', value: `${name} fork`, size: 24 });
  const error = h('span', { class: 'field-error', id: 'fork-error', role: 'alert' });
  input.setAttribute('aria-describedby', error.id);
  return h('details', { class: 'fork', id: 'fork-box' }, h('summary', { text: 'Fork this agent' }),
    h('form', { class: 'row', onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = '';
      const r = await api('POST', `/studio/api/agents/${encodeURIComponent(id)}/fork`, { name: input.value.trim() });
      if (!r.ok) { error.textContent = errorText(r); return; }
      toast(`forked into ${r.data.filePath}`);
      location.hash = `#/agent/${encodeURIComponent(r.data.id)}/loop`;
    } }, h('label', {}, 'Name of the copy', input),
    h('button', { type: 'submit', id: 'fork-submit' }, 'Fork into a new file'), error,
    h('p', { class: 'muted', text: 'The copy gets this agent\'s config, files, loop and messages, a new id, handle and identity; credentials are not copied.' })));
}

// ---- loop: transcript, live stream, approvals, asks, chat

async function loopTab(panel, id, base, status) {
  const transcript = h('div', { class: 'transcript', id: 'transcript', 'aria-live': 'polite', 'aria-label': 'Loop transcript' });
  const pending = h('div', { id: 'pending' });
  const usage = h('p', { class: 'muted', id: 'turn-usage' });
  const timing = h('p', { class: 'muted', id: 'turn-timing', 'aria-live': 'polite' });
  // The context window's fill: the last request's prompt against the loop's compaction
  // threshold (`context.compact_threshold`, the executor's 100,000 when unset).
  const fill = h('meter', { id: 'context-fill', min: '0', max: '1', value: '0', 'aria-label': 'Context window fill' });
  const fillText = h('span', { class: 'muted', id: 'context-fill-text' });
  const cfg = await api('GET', `${base}/config`);
  const threshold = (cfg.ok && (cfg.data.config || cfg.data).context && (cfg.data.config || cfg.data).context.compact_threshold) || 100000;
  const showFill = (prompt) => {
    fill.value = Math.min(1, prompt / threshold);
    fillText.textContent = ` context: ${prompt.toLocaleString('en')} of ${threshold.toLocaleString('en')} tokens before compaction (${Math.round(100 * prompt / threshold)}%)`;
  };
  const input = h('textarea', { id: 'chat-input', rows: 3, placeholder: 'Message the agent (Ctrl+Enter sends)' });
  const send = h('button', { class: 'primary', type: 'submit', id: 'chat-send' }, 'Send');
  const abort = h('button', { type: 'button', id: 'chat-abort', class: 'danger', onclick: async () => {
    const r = await api('POST', `${base}/abort`);
    toast(r.ok ? (r.data.aborted ? 'turn aborted' : 'no turn was running') : errorText(r), !r.ok);
  } }, 'Abort turn');
  const form = h('form', { class: 'card', onsubmit: async (e) => {
    e.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    const r = await api('POST', `${base}/chat`, { text });
    if (!r.ok) return toast(errorText(r), true);
    input.value = '';
    transcript.append(h('div', { class: 'msg user', text }));
    transcript.scrollTop = transcript.scrollHeight;
  } }, h('label', {}, 'Message', input), h('div', { class: 'row' }, send, abort));
  input.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit(); });
  const diffBox = h('div', { id: 'loop-diff' });
  panel.append(transcript, usage, h('p', {}, fill, fillText), timing, pending, form, diffBox);

  let streaming = null;
  // The running turn's latest retry line: a transcript reload during the turn (another event's)
  // keeps it, since the stored transcript has no row for it until the turn ends.
  let retryLine = null;
  // Beyond the reference: where a turn's time went, from the executor's state changes as the
  // daemon stamped them (model = waiting on the provider, tools = running calls, owner =
  // waiting for an approval or an answer).
  const clock = {
    last: null, state: null, spent: {},
    step(frame) {
      if (this.last !== null && this.state) this.spent[this.state] = (this.spent[this.state] || 0) + (frame.t - this.last);
      this.last = frame.t;
      this.state = frame.state;
      if (frame.state !== 'Idle') return;
      const part = (name, keys) => `${name} ${keys.reduce((sum, k) => sum + (this.spent[k] || 0), 0)} ms`;
      const known = ['Thinking', 'ToolUse', 'AwaitingApproval', 'AwaitingAsk'];
      const other = Object.entries(this.spent).filter(([k]) => !known.includes(k)).reduce((sum, [, v]) => sum + v, 0);
      timing.textContent = `last turn: ${part('model', ['Thinking'])} · ${part('tools', ['ToolUse'])} · ${part('owner', ['AwaitingApproval', 'AwaitingAsk'])} · runtime ${other} ms`;
      this.last = null; this.state = null; this.spent = {};
    },
  };
  const reload = async () => {
    const r = await api('GET', `${base}/chat?limit=200`);
    if (!r.ok) { transcript.append(h('p', { class: 'error', text: errorText(r) })); return; }
    clear(transcript);
    streaming = null;
    const last = renderTranscript(transcript, r.data.chatHistory.uiLog, usage);
    if (retryLine) transcript.append(retryLine);
    if (last) {
      const t = typeof last === 'string' ? JSON.parse(last) : last;
      showFill((t.input ?? t.input_tokens ?? 0) + (t.cache_read ?? 0) + (t.cache_write ?? 0));
    }
    transcript.scrollTop = transcript.scrollHeight;
    renderDiffPicker(diffBox, r.data.chatHistory.uiLog);
  };
  const reloadPending = () => renderPending(pending, base);
  await Promise.all([reload(), reloadPending()]);

  const laterReload = debounce(reload, 150);
  stream(`/studio/api/agents/${encodeURIComponent(id)}/live`, {
    live: (frame) => {
      if (frame.kind === 'text' || frame.kind === 'thinking') {
        metrics.tokenLatencies.push(Date.now() - frame.t);
        if (!streaming || streaming.kind !== frame.kind) {
          streaming = { kind: frame.kind, el: h('div', { class: `msg text streaming ${frame.kind}`, 'data-streaming': frame.kind }) };
          transcript.append(frame.kind === 'thinking' ? h('details', { class: 'fold', open: true }, h('summary', { text: 'thinking' }), streaming.el) : streaming.el);
        }
        streaming.el.textContent += frame.text;
        transcript.scrollTop = transcript.scrollHeight;
      } else if (frame.kind === 'tool_call') {
        streaming = null;
        transcript.append(fold(`tool call: ${frame.name}`, json(frame.input), 'tool_call'));
      } else if (frame.kind === 'tool_result') {
        streaming = null;
        transcript.append(fold(`${frame.is_error ? 'tool error' : 'tool result'}: ${frame.name}`, frame.text, 'tool_result'));
      } else if (frame.kind === 'retry') {
        // The model request failed and waits to be retried: said in the chat, where the owner
        // is looking (the transcript reload at the turn's end replaces it).
        streaming = null;
        retryLine = h('div', { class: 'msg retry', role: 'status', 'data-retry': String(frame.attempt), text: frame.message });
        transcript.append(retryLine);
        transcript.scrollTop = transcript.scrollHeight;
      } else if (frame.kind === 'reply' && frame.usage) {
        usage.textContent = `last reply: ${tokenText(frame.usage, frame.model)}`;
        showFill((frame.usage.input || 0) + (frame.usage.cache_read || 0) + (frame.usage.cache_write || 0));
      } else if (frame.kind === 'state') {
        clock.step(frame);
        const badge = document.getElementById('agent-state');
        // Idle is the executor's rest; the badge then shows the agent's display state.
        const shown = frame.state === 'Idle' ? status.display : frame.state.replace(/([a-z])([A-Z])/g, '$1_$2').toLowerCase();
        if (badge) badge.replaceChildren(stateBadge(shown));
        if (frame.state === 'Idle') {
          retryLine = null;
          laterReload();
        }
        reloadPending();
      }
    },
  });
  const updatePending = debounce(reloadPending, 100);
  stream(`/events?agentId=${encodeURIComponent(id)}&since=${latestCursor}`, {
    'hil.requested': updatePending, 'hil.resolved': updatePending,
    'ask.requested': updatePending, 'ask.resolved': updatePending,
    'turn.completed': () => { laterReload(); updatePending(); },
    'loop.cleared': laterReload,
  });
}

function fold(title, body, kind) {
  return h('details', { class: 'fold', 'data-kind': kind }, h('summary', { text: title }), h('pre', { text: typeof body === 'string' ? body : json(body) }));
}

function renderTranscript(box, log, usageLine) {
  let lastTokens = null;
  for (const entry of log) {
    const meta = entry.metadata || {};
    const content = typeof entry.content === 'string' ? entry.content : json(entry.content);
    if (entry.type === 'user') box.append(h('div', { class: 'msg user', text: content }));
    else if (entry.type === 'text') box.append(h('div', { class: 'msg text', text: content }));
    else if (entry.type === 'thinking') box.append(fold('thinking', content, 'thinking'));
    else if (entry.type === 'tool_call') box.append(fold(`tool call: ${content}`, json(meta.input), 'tool_call'));
    else if (entry.type === 'tool_result') box.append(fold(`${meta.is_error ? 'tool error' : 'tool result'}`, content, 'tool_result'));
    // How a turn ended (`[Context: turn_failed]` / `[Context: turn_aborted]` rows) is for the
    // owner: a line of the chat, not a folded context row.
    else if (entry.type === 'context' && (meta.category === 'turn_failed' || meta.category === 'turn_aborted')) {
      box.append(h('div', { class: `msg turn-end ${meta.category === 'turn_failed' ? 'failed' : 'aborted'}`, role: 'note', 'data-turn-end': meta.category, text: content }));
    } else if (entry.type === 'context') box.append(fold(`context: ${meta.category || ''}`, content, 'context'));
    if (meta.tokens && meta.tokens !== lastTokens && entry.type === 'text') {
      lastTokens = meta.tokens;
      box.append(h('div', { class: 'tokens', text: tokenText(meta.tokens, meta.model) }));
    }
  }
  usageLine.textContent = lastTokens ? `last turn: ${tokenText(lastTokens)}` : '';
  return lastTokens;
}

function tokenText(tokens, model) {
  const t = typeof tokens === 'string' ? JSON.parse(tokens) : tokens;
  const input = t.input ?? t.input_tokens ?? t.prompt_tokens ?? '?';
  const output = t.output ?? t.output_tokens ?? t.completion_tokens ?? '?';
  return `${model ? model + ' · ' : ''}${input} in · ${output} out tokens`;
}

async function renderPending(box, base) {
  const [tasks, asks] = await Promise.all([api('GET', `${base}/tasks?status=pending_approval`), api('GET', `${base}/asks`)]);
  // Events redraw this list while the owner may be typing an answer: keep what they typed.
  const typed = new Map([...box.querySelectorAll('input[data-ask-input]')].map((input) => [input.dataset.askInput, input.value]));
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.askInput : undefined;
  clear(box);
  for (const task of (tasks.ok ? tasks.data.tasks : [])) {
    box.append(h('div', { class: 'card pending', 'data-task': task.id, role: 'group', 'aria-label': `Approval for ${task.tool}` },
      h('strong', { text: `Approve ${task.tool}?` }), h('pre', { class: 'json', text: task.args }),
      h('div', { class: 'row' },
        h('button', { class: 'primary', 'data-approve': task.id, onclick: () => resolve(base, task.id, { action: 'approve' }, box) }, 'Approve'),
        h('button', { class: 'danger', 'data-deny': task.id, onclick: () => resolve(base, task.id, { action: 'deny', reason: 'denied in the Studio' }, box) }, 'Deny'))));
  }
  for (const ask of (asks.ok ? asks.data.asks : [])) {
    const answer = h('input', { type: 'text', 'data-ask-input': ask.requestId });
    if (typed.has(ask.requestId)) answer.value = typed.get(ask.requestId);
    box.append(h('form', { class: 'card pending', 'data-ask': ask.requestId, onsubmit: async (e) => {
      e.preventDefault();
      const r = await api('POST', `${base}/asks/${encodeURIComponent(ask.requestId)}/respond`, { answer: answer.value });
      if (!r.ok) return toast(errorText(r), true);
      renderPending(box, base);
    } }, h('strong', { text: 'The agent asks:' }), h('p', { text: ask.question }),
      h('div', { class: 'row' }, h('label', {}, 'Your answer', answer), h('button', { class: 'primary', type: 'submit' }, 'Answer'))));
    if (focused === ask.requestId) answer.focus({ preventScroll: true });
  }
}

async function resolve(base, taskId, body, box) {
  const r = await api('POST', `${base}/tasks/${encodeURIComponent(taskId)}/resolve`, body);
  if (!r.ok) toast(errorText(r), true);
  renderPending(box, base);
}

// Beyond the reference: read two turns' context as a diff (rows added or dropped).
function renderDiffPicker(box, log) {
  clear(box);
  const turns = [];
  let current = null;
  for (const entry of log) {
    if (entry.type === 'user') { current = { label: String(entry.content).slice(0, 40), rows: [] }; turns.push(current); }
    if (current) current.rows.push(`${entry.type}: ${typeof entry.content === 'string' ? entry.content : json(entry.content)}`);
  }
  if (turns.length < 2) return;
  const pick = (id, at) => h('select', { id }, turns.map((t, i) => h('option', { value: String(i), selected: i === at }, `turn ${i + 1}: ${t.label}`)));
  const a = pick('diff-a', turns.length - 2);
  const b = pick('diff-b', turns.length - 1);
  const out = h('div', { class: 'diff' });
  const show = () => {
    clear(out);
    const left = new Set(turns[a.value].rows);
    const right = new Set(turns[b.value].rows);
    for (const row of turns[a.value].rows) if (!right.has(row)) out.append(h('div', { class: 'del', text: row }));
    for (const row of turns[b.value].rows) out.append(h('div', { class: left.has(row) ? '' : 'add', text: row }));
  };
  a.onchange = show; b.onchange = show;
  box.append(h('details', { class: 'card' }, h('summary', { text: 'Compare two turns' }),
    h('div', { class: 'row' }, h('label', {}, 'Turn A', a), h('label', {}, 'Turn B', b)), out));
  show();
}

// ---- files

async function filesTab(panel, id, base) {
  const tree = h('nav', { class: 'tree', 'aria-label': 'Files' });
  const editor = h('div', { id: 'file-editor' }, h('p', { class: 'muted', text: 'Choose a file.' }));
  const upload = h('input', { type: 'file', id: 'file-upload' });
  const uploadPath = h('input', { type: 'text', id: 'file-upload-path', placeholder: 'lib/notes.md (default: the file name)' });
  panel.append(h('form', { class: 'card row', onsubmit: async (e) => {
    e.preventDefault();
    const file = upload.files[0];
    if (!file) return toast('choose a file to upload', true);
    const bytes = new Uint8Array(await file.arrayBuffer());
    let binary = '';
    for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    const path = uploadPath.value.trim() || file.name;
    const r = await api('PUT', `${base}/files/content?path=${encodeURIComponent(path)}`, { content_base64: btoa(binary), mime_type: file.type || undefined });
    if (!r.ok) return toast(errorText(r), true);
    toast(`uploaded ${path}`);
    render();
  } }, h('label', {}, 'Upload a file', upload), h('label', {}, 'Store as', uploadPath), h('button', { type: 'submit' }, 'Upload')),
  h('div', { class: 'split' }, h('div', { class: 'card' }, tree), h('div', { class: 'card' }, editor)));
  const open = async (info) => {
    for (const b of tree.querySelectorAll('button[aria-current]')) b.removeAttribute('aria-current');
    tree.querySelector(`button[data-path="${CSS.escape(info.path)}"]`)?.setAttribute('aria-current', 'true');
    clear(editor);
    const r = await api('GET', `${base}/files/content?path=${encodeURIComponent(info.path)}`);
    if (!r.ok) return editor.append(h('p', { class: 'error', text: errorText(r) }));
    editor.append(h('h3', { text: info.path }), fileBadges(info));
    if (r.data.encoding !== 'utf-8') {
      editor.append(h('p', { class: 'muted', text: `binary file, ${info.size} bytes (${info.mime_type || 'unknown type'})` }));
      return;
    }
    const text = h('textarea', { id: 'file-text', rows: 14, 'aria-label': `Contents of ${info.path}`, readOnly: info.protection === 'read_only' });
    text.value = r.data.content;
    const save = h('button', { class: 'primary', id: 'file-save', disabled: info.protection === 'read_only', onclick: async () => {
      const w = await api('PUT', `${base}/files/content?path=${encodeURIComponent(info.path)}`, { content: text.value });
      if (!w.ok) return toast(errorText(w), true);
      toast(`saved ${info.path}`);
    } }, 'Save');
    editor.append(text, h('div', { class: 'row' }, save,
      info.protection === 'read_only' ? h('span', { class: 'muted', text: 'read-only: the owner can change protection below' }) : null,
      h('label', {}, 'Protection', h('select', { 'aria-label': 'Protection', onchange: async (e) => {
        const p = await api('PATCH', `${base}/files/protection`, { path: info.path, protection: e.target.value });
        if (!p.ok) toast(errorText(p), true); else render();
      } }, ['none', 'no_delete', 'read_only'].map((v) => h('option', { value: v, selected: v === info.protection }, v))))));
  };
  const render = async () => {
    clear(tree);
    const r = await api('GET', `${base}/files`);
    if (!r.ok) return tree.append(h('p', { class: 'error', text: errorText(r) }));
    tree.append(buildTree(r.data.files, open));
  };
  await render();
}

function fileBadges(info) {
  return h('span', {},
    info.protection && info.protection !== 'none' ? h('span', { class: 'badge warn', text: info.protection }) : null,
    info.authorized ? h('span', { class: 'badge ok', text: 'authorized' }) : null);
}

function buildTree(files, open) {
  const root = { dirs: {}, files: [] };
  for (const f of files) {
    const parts = f.path.split('/');
    let node = root;
    for (const dir of parts.slice(0, -1)) node = node.dirs[dir] ||= { dirs: {}, files: [] };
    node.files.push(f);
  }
  const list = (node) => h('ul', {},
    Object.entries(node.dirs).map(([name, child]) => h('li', {}, h('details', { open: true }, h('summary', { text: name + '/' }), list(child)))),
    node.files.map((f) => h('li', {}, h('button', { 'data-path': f.path, onclick: () => open(f) }, f.path.split('/').pop()), ' ', fileBadges(f))));
  return list(root);
}

// ---- config: forms with inline validation, and the raw JSON

const CONFIG_FIELDS = [
  { path: 'name', label: 'Name', type: 'text' },
  { path: 'description', label: 'Description', type: 'text' },
  { path: 'model.provider', label: 'Model provider', type: 'text' },
  { path: 'model.model_id', label: 'Model id', type: 'text' },
  { path: 'model.temperature', label: 'Temperature (0–2)', type: 'number', check: (v) => (v === '' || (!Number.isNaN(Number(v)) && Number(v) >= 0 && Number(v) <= 2)) ? null : 'must be a number from 0 to 2' },
  { path: 'model.max_tokens', label: 'Max tokens', type: 'number', check: (v) => (v === '' || (Number.isInteger(Number(v)) && Number(v) > 0)) ? null : 'must be a positive whole number' },
  { path: 'state', label: 'Stored state', type: 'select', options: ['active', 'idle', 'hibernate', 'suspended', 'off'] },
  { path: 'autostart', label: 'Autostart', type: 'checkbox' },
];

function getPath(obj, path) { return path.split('.').reduce((o, k) => (o == null ? undefined : o[k]), obj); }
function setPath(obj, path, value) {
  const keys = path.split('.');
  let o = obj;
  for (const k of keys.slice(0, -1)) o = o[k] ||= {};
  if (value === undefined) delete o[keys[keys.length - 1]]; else o[keys[keys.length - 1]] = value;
}

async function configTab(panel, id, base) {
  const r = await api('GET', `${base}/config`);
  if (!r.ok) return panel.append(h('p', { class: 'error', text: errorText(r) }));
  const config = r.data.config || r.data;
  const formError = h('p', { class: 'error', id: 'config-error', role: 'alert' });
  const inputs = {};
  const grid = h('div', { class: 'grid2' });
  for (const field of CONFIG_FIELDS) {
    const value = getPath(config, field.path);
    const fieldId = `cfg-${field.path.replace(/\./g, '-')}`;
    let input;
    if (field.type === 'select') input = h('select', { id: fieldId }, field.options.map((o) => h('option', { value: o, selected: o === value }, o)));
    else if (field.type === 'checkbox') input = h('input', { type: 'checkbox', id: fieldId, checked: !!value });
    else input = h('input', { type: 'text', inputmode: field.type === 'number' ? 'decimal' : null, id: fieldId, value: value === undefined || value === null ? '' : String(value) });
    if (field.path === 'model.provider') input.setAttribute('list', 'provider-choices');
    const err = h('span', { class: 'field-error', id: `${fieldId}-error` });
    input.setAttribute('aria-describedby', err.id);
    inputs[field.path] = { field, input, err };
    grid.append(h('label', { class: field.type === 'checkbox' ? 'inline' : '' }, field.label, input, err));
  }
  // The provider field suggests the agent's own providers, the runtime's and the built-in types.
  const known = await api('GET', '/runtime/providers');
  const choices = new Set(['anthropic', 'openai', 'openrouter']);
  for (const p of (Array.isArray(config.providers) ? config.providers : [])) if (p.id) choices.add(p.id);
  for (const p of (known.ok ? known.data.providers : [])) if (p.id) choices.add(p.id);
  grid.append(h('datalist', { id: 'provider-choices' }, [...choices].map((c) => h('option', { value: c }))));
  const tools = h('table', { id: 'config-tools' }, h('thead', {}, h('tr', {}, h('th', { text: 'Tool' }), h('th', { text: 'Enabled' }), h('th', { text: 'Visible' }), h('th', { text: 'Restricted' }))));
  const toolBody = h('tbody');
  for (const [i, tool] of (Array.isArray(config.tools) ? config.tools : []).entries()) {
    const box = (key) => h('input', { type: 'checkbox', checked: !!tool[key], 'aria-label': `${tool.name} ${key}`, onchange: (e) => { config.tools[i][key] = e.target.checked; } });
    toolBody.append(h('tr', {}, h('td', { text: tool.name }), h('td', {}, box('enabled')), h('td', {}, box('visible')), h('td', {}, box('restricted'))));
  }
  tools.append(toolBody);
  const save = h('button', { class: 'primary', id: 'config-save', type: 'submit' }, 'Save config');
  const form = h('form', { class: 'card', novalidate: true, onsubmit: async (e) => {
    e.preventDefault();
    formError.textContent = '';
    const next = JSON.parse(JSON.stringify(config));
    let bad = false;
    for (const { field, input, err } of Object.values(inputs)) {
      const raw = field.type === 'checkbox' ? input.checked : input.value.trim();
      const problem = field.check ? field.check(raw) : null;
      err.textContent = problem ? `${field.label}: ${problem}` : '';
      input.setAttribute('aria-invalid', String(!!problem));
      if (problem) { bad = true; continue; }
      const value = field.type === 'number' ? (raw === '' ? undefined : Number(raw)) : raw;
      if (field.type === 'number' && raw === '' && getPath(config, field.path) === undefined) continue;
      setPath(next, field.path, value);
    }
    if (bad) {
      const first = Object.values(inputs).find(({ input }) => input.getAttribute('aria-invalid') === 'true');
      formError.textContent = 'Not saved: fix the field marked above.';
      first.input.focus();
      return;
    }
    const w = await api('PUT', `${base}/config`, next);
    if (!w.ok) {
      // The store names the offending path; show the error beside that field when we have it.
      const message = errorText(w);
      const hit = Object.values(inputs).find(({ field }) => message.includes(field.path) || message.includes(field.path.split('.').pop()));
      if (hit) { hit.err.textContent = message; hit.input.setAttribute('aria-invalid', 'true'); }
      formError.textContent = message;
      return;
    }
    toast('config saved');
    Object.assign(config, next);
    raw.value = json(config);
  } }, grid, h('details', { class: 'tools' }, h('summary', { text: `Tools (${toolBody.children.length}): enabled, visible, restricted` }), tools), formError, save);
  const raw = h('textarea', { id: 'config-raw', rows: 18, 'aria-label': 'Config as JSON' });
  raw.value = json(config);
  const sections = h('div', { id: 'config-sections' });
  for (const [key, title] of CONFIG_SECTIONS) sections.append(sectionForm(base, config, key, title, () => { raw.value = json(config); }));
  const rawError = h('p', { class: 'error', role: 'alert', id: 'config-raw-error' });
  panel.append(form, sections, h('details', { class: 'card', id: 'config-raw-box' }, h('summary', { text: 'Raw JSON' }), raw, rawError,
    h('button', { id: 'config-raw-save', onclick: async () => {
      rawError.textContent = '';
      let parsed;
      try { parsed = JSON.parse(raw.value); } catch (err) { rawError.textContent = `not JSON: ${err.message}`; return; }
      const w = await api('PUT', `${base}/config`, parsed);
      if (!w.ok) { rawError.textContent = errorText(w); return; }
      toast('config saved');
    } }, 'Save raw JSON')));
}

// One form per config section, generated from the section's current value: booleans as
// checkboxes, numbers and text as fields, lists (trigger targets, serving routes) as JSON.
// The daemon validates the whole config on save; its error is shown beside the field whose
// path it names, and nothing is stored.
const CONFIG_SECTIONS = [['model', 'Model and provider'], ['triggers', 'Triggers'], ['messaging', 'Messaging'], ['serving', 'Serving']];

function sectionForm(base, config, key, title, saved) {
  const fields = [];
  const fieldset = h('div', { class: 'grid2' });
  const walk = (value, path) => {
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) walk(v, `${path}.${k}`);
      return;
    }
    const fieldId = `sec-${path.replace(/[^A-Za-z0-9]+/g, '-')}`;
    const kind = typeof value === 'boolean' ? 'bool' : typeof value === 'number' ? 'number' : typeof value === 'string' ? 'text' : 'json';
    let input;
    if (kind === 'bool') input = h('input', { type: 'checkbox', id: fieldId, checked: value });
    else if (kind === 'json') { input = h('textarea', { id: fieldId, rows: Array.isArray(value) && value.length ? 3 : 1 }); input.value = JSON.stringify(value); }
    else input = h('input', { type: 'text', id: fieldId, value: String(value), inputmode: kind === 'number' ? 'decimal' : null });
    const err = h('span', { class: 'field-error', id: `${fieldId}-error` });
    input.setAttribute('aria-describedby', err.id);
    input.dataset.path = path;
    if (path === 'model.provider') input.setAttribute('list', 'provider-choices');
    fields.push({ path, kind, input, err });
    fieldset.append(h('label', { class: kind === 'bool' ? 'inline' : '' }, path.slice(key.length + 1), input, err));
  };
  walk(config[key] ?? {}, key);
  const error = h('p', { class: 'error', role: 'alert', id: `section-${key}-error` });
  return h('details', { class: 'card', id: `section-${key}` }, h('summary', { text: title }),
    h('form', { novalidate: true, onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = '';
      const next = JSON.parse(JSON.stringify(config));
      let bad = null;
      for (const f of fields) {
        f.err.textContent = '';
        f.input.setAttribute('aria-invalid', 'false');
        let value;
        if (f.kind === 'bool') value = f.input.checked;
        else if (f.kind === 'number') {
          value = Number(f.input.value.trim());
          if (f.input.value.trim() === '' || Number.isNaN(value)) { f.err.textContent = 'must be a number'; bad ||= f; continue; }
        } else if (f.kind === 'json') {
          try { value = JSON.parse(f.input.value); } catch (err) { f.err.textContent = `not JSON: ${err.message}`; bad ||= f; continue; }
        } else value = f.input.value;
        setPath(next, f.path, value);
      }
      if (bad) { bad.input.setAttribute('aria-invalid', 'true'); error.textContent = 'Not saved: fix the field marked above.'; bad.input.focus(); return; }
      const w = await api('PUT', `${base}/config`, next);
      if (!w.ok) {
        const message = errorText(w);
        // The longest field path the daemon's message names is the one it refused.
        const hit = fields.filter((f) => message.includes(f.path) || message.includes(f.path.replace(/^[^.]+\./, '')))
          .sort((a, b) => b.path.length - a.path.length)[0];
        if (hit) { hit.err.textContent = message; hit.input.setAttribute('aria-invalid', 'true'); }
        error.textContent = message;
        return;
      }
      Object.assign(config, next);
      saved();
      toast(`${title.toLowerCase()} saved`);
    } }, fieldset, error, h('button', { type: 'submit', class: 'primary', id: `section-${key}-save` }, `Save ${title.toLowerCase()}`)));
}

// ---- inbox/outbox, timers, tasks, logs, events

async function messagesTab(panel, id, base) {
  for (const box of ['inbox', 'outbox']) {
    const r = await api('GET', `${base}/${box}?limit=100`);
    panel.append(h('h3', { text: box === 'inbox' ? 'Inbox' : 'Outbox' }));
    if (!r.ok) { panel.append(h('p', { class: 'error', text: errorText(r) })); continue; }
    const rows = r.data.messages || r.data[box] || [];
    if (!rows.length) { panel.append(h('p', { class: 'muted', text: 'no messages' })); continue; }
    const threads = {};
    for (const m of rows) (threads[m.thread_id || m.id] ||= []).push(m);
    for (const [thread, messages] of Object.entries(threads)) {
      panel.append(h('details', { class: 'card' }, h('summary', { text: `${messages[0].from || messages[0].to || ''} — ${messages.length} message(s) — thread ${thread}` }),
        messages.map((m) => h('div', {}, h('span', { class: 'badge', text: m.status || '' }), h('span', { class: 'muted', text: when(m.received_at || m.created_at) }),
          h('pre', { class: 'json', text: typeof m.content === 'string' ? m.content : json(m.content ?? m) })))));
    }
  }
}

async function timersTab(panel, id, base) {
  const r = await api('GET', `${base}/timers`);
  if (!r.ok) return panel.append(h('p', { class: 'error', text: errorText(r) }));
  const timers = r.data.timers || [];
  if (!timers.length) panel.append(h('p', { class: 'muted', text: 'no timers' }));
  const table = h('table', {}, h('thead', {}, h('tr', {}, ['Id', 'Schedule', 'Next', 'Scope', ''].map((t) => h('th', { text: t })))));
  const body = h('tbody');
  for (const t of timers) {
    body.append(h('tr', {}, h('td', { text: String(t.id) }), h('td', {}, h('code', { text: json(t.schedule ?? t.schedule_json ?? '') })),
      h('td', { text: when(t.next_wake_at) }), h('td', { text: String(t.scope ?? '') }),
      h('td', {}, h('button', { 'data-timer-edit': t.id, onclick: () => editTimer(t) }, 'Edit'), ' ', h('button', { class: 'danger', onclick: async () => {
        const d = await api('DELETE', `${base}/timers/${encodeURIComponent(t.id)}`);
        if (!d.ok) return toast(errorText(d), true);
        clear(panel); timersTab(panel, id, base);
      } }, 'Delete'))));
  }
  table.append(body);
  if (timers.length) panel.append(table);
  // A new timer: the daemon resolves and validates the schedule; its refusal is shown here.
  const mode = h('select', { id: 'timer-mode' }, [['once_delay', 'once, after a delay (ms)'], ['interval', 'every N ms'],
    ['cron', 'cron expression'], ['once_at', 'once, at (epoch ms)']].map(([v, t]) => h('option', { value: v }, t)));
  const value = h('input', { type: 'text', id: 'timer-value', required: true });
  const payload = h('input', { type: 'text', id: 'timer-payload' });
  const error = h('p', { class: 'error', role: 'alert', id: 'timer-error' });
  // Editing rewrites the schedule in place (PUT keeps the id and run count).
  let editing = null;
  const heading = h('h3', { text: 'Add a timer' });
  const submit = h('button', { type: 'submit', id: 'timer-submit' }, 'Add timer');
  const editTimer = (t) => {
    editing = t.id;
    heading.textContent = `Edit timer ${t.id}`;
    submit.textContent = `Update timer ${t.id}`;
    const sch = t.schedule || {};
    const kind = sch.type || sch.mode;
    if (kind === 'interval' && sch.every_ms) { mode.value = 'interval'; value.value = String(sch.every_ms); }
    else if (kind === 'cron' && sch.cron) { mode.value = 'cron'; value.value = sch.cron; }
    else if (sch.at) { mode.value = 'once_at'; value.value = String(sch.at); }
    payload.value = t.payload || '';
    value.focus();
  };
  panel.append(h('form', { class: 'card', id: 'timer-form', onsubmit: async (e) => {
    e.preventDefault();
    error.textContent = '';
    const key = { once_delay: 'delay_ms', interval: 'every_ms', cron: 'cron', once_at: 'at' }[mode.value];
    const raw = value.value.trim();
    const body = { mode: mode.value, [key]: key === 'cron' ? raw : Number(raw) };
    if (key !== 'cron' && !Number.isFinite(body[key])) { error.textContent = 'the value must be a number of milliseconds'; return; }
    if (payload.value.trim()) body.payload = payload.value.trim();
    const r = editing === null ? await api('POST', `${base}/timers`, body)
      : await api('PUT', `${base}/timers/${encodeURIComponent(editing)}`, body);
    if (!r.ok) { error.textContent = errorText(r); return; }
    toast(editing === null ? 'timer added' : `timer ${editing} updated`);
    clear(panel); timersTab(panel, id, base);
  } }, heading, h('div', { class: 'row' }, h('label', {}, 'When', mode), h('label', {}, 'Value', value),
    h('label', {}, 'Payload (optional)', payload), submit), error));
}

async function tasksTab(panel, id, base) {
  const filter = h('select', { id: 'task-status' }, ['', 'pending', 'pending_approval', 'running', 'completed', 'failed', 'denied', 'cancelled'].map((s) => h('option', { value: s }, s || 'any')));
  const list = h('div');
  const load = async () => {
    clear(list);
    const r = await api('GET', `${base}/tasks${filter.value ? `?status=${filter.value}` : ''}`);
    if (!r.ok) return list.append(h('p', { class: 'error', text: errorText(r) }));
    if (!r.data.tasks.length) list.append(h('p', { class: 'muted', text: 'no tasks' }));
    for (const t of r.data.tasks) list.append(fold(`${t.tool} — ${t.status} — ${when(t.created_at)}`, json(t), 'task'));
  };
  filter.onchange = load;
  panel.append(h('label', {}, 'Status', filter), list);
  await load();
}

async function logsTab(panel, id, base) {
  const origin = h('input', { type: 'text', id: 'log-origin' });
  const event = h('input', { type: 'text', id: 'log-event' });
  const level = h('select', { id: 'log-level' }, ['', 'debug', 'info', 'warn', 'error'].map((l) => h('option', { value: l }, l || 'any')));
  const list = h('ul', { class: 'logs' });
  const order = { debug: 0, info: 1, warn: 2, error: 3 };
  const load = async () => {
    clear(list);
    const q = new URLSearchParams({ limit: '200' });
    if (origin.value.trim()) q.set('origin', origin.value.trim());
    if (event.value.trim()) q.set('event', event.value.trim());
    const r = await api('GET', `${base}/logs?${q}`);
    if (!r.ok) return list.append(h('li', { class: 'error', text: errorText(r) }));
    for (const row of r.data.logs) {
      if (level.value && (order[row.level] ?? 0) < order[level.value]) continue;
      list.append(h('li', {}, `${when(row.created_at)} [${row.level}] ${row.origin || ''} ${row.event || ''}: ${row.message || ''}`));
    }
    if (!list.firstChild) list.append(h('li', { class: 'muted', text: 'no log rows' }));
  };
  panel.append(h('form', { class: 'row card', onsubmit: (e) => { e.preventDefault(); load(); } },
    h('label', {}, 'Origin', origin), h('label', {}, 'Event', event), h('label', {}, 'Minimum level', level), h('button', { type: 'submit' }, 'Filter')), list);
  await load();
}

async function eventsTab(panel, id) {
  const list = h('ul', { class: 'events', id: 'event-list', 'aria-live': 'polite' });
  panel.append(h('p', { class: 'muted', text: 'Events of this agent as the daemon publishes them (newest last).' }), list);
  const add = (frame) => {
    const e = frame.event || {};
    list.append(h('li', { 'data-event': e.event_type }, `#${frame.cursor} ${new Date(e.timestamp).toISOString().slice(11, 23)} ${e.event_type} ${JSON.stringify(e.payload)}`));
    list.scrollTop = list.scrollHeight;
  };
  streamAll(`/events?agentId=${encodeURIComponent(id)}`, add);
}

async function identityTab(panel, id, base) {
  const [did, password, entries] = await Promise.all([api('GET', `${base}/identity/did`),
    api('GET', `${base}/identity/password`), api('GET', `${base}/identities`)]);
  const status = h('dl', { class: 'facts', id: 'identity-status' });
  const fact = (term, value) => status.append(h('dt', { text: term }), h('dd', {}, value));
  fact('DID', did.ok ? (did.data.did ? h('code', { text: did.data.did }) : h('span', { class: 'badge warn', text: 'no identity' })) : h('span', { class: 'error', text: errorText(did) }));
  if (password.ok) {
    fact('Credentials', h('span', {}, h('span', { class: `badge ${password.data.unlocked ? 'ok' : 'warn'}`, text: password.data.unlocked ? 'unlocked' : 'locked' }),
      password.data.unlockedVia ? ` via ${password.data.unlockedVia}` : '', password.data.needsPassword ? ' · has a password slot' : ''));
  } else fact('Credentials', h('span', { class: 'error', text: errorText(password) }));
  panel.append(h('h3', { text: 'Identity' }), status);
  const table = h('table', { id: 'identity-purposes' }, h('thead', {}, h('tr', {}, ['Purpose', 'Value', 'Sealed', 'Code access'].map((t) => h('th', { text: t })))));
  const body = h('tbody');
  const list = entries.ok ? (entries.data.identities || entries.data.entries || entries.data.purposes || []) : [];
  for (const entry of list) {
    const purpose = typeof entry === 'string' ? entry : entry.purpose;
    body.append(h('tr', { 'data-purpose': purpose }, h('td', {}, h('code', { text: purpose })),
      h('td', {}, h('span', { class: 'badge ok', text: 'set' }), h('span', { class: 'muted', text: ' (never shown)' })),
      h('td', { text: entry.encrypted === false ? 'no' : 'yes' }), h('td', { text: entry.code_access ? 'yes' : 'no' })));
  }
  table.append(body);
  panel.append(h('h3', { text: 'Credentials and keys' }),
    entries.ok ? (list.length ? table : h('p', { class: 'muted', text: 'nothing stored' })) : h('p', { class: 'error', text: errorText(entries) }),
    h('p', { class: 'muted', text: 'Values are never sent to this page; set or replace one below (write-only).' }));
  const purpose = h('input', { type: 'text', id: 'cred-purpose', placeholder: 'provider:openai:apiKey', required: true });
  const value = h('input', { type: 'password', id: 'cred-value', autocomplete: 'off' });
  const error = h('p', { class: 'error', role: 'alert', id: 'cred-error' });
  panel.append(h('form', { class: 'card', id: 'cred-form', onsubmit: async (e) => {
    e.preventDefault();
    error.textContent = '';
    const name = purpose.value.trim();
    if (!name) { error.textContent = 'a purpose is required'; return; }
    const w = await api('PUT', `${base}/identity/${encodeURIComponent(name)}`, { value: value.value });
    value.value = '';
    if (!w.ok) { error.textContent = errorText(w); return; }
    toast(`${name} set`);
    clear(panel); identityTab(panel, id, base);
  } }, h('div', { class: 'row' }, h('label', {}, 'Purpose', purpose), h('label', {}, 'Secret (write-only)', value),
    h('button', { type: 'submit', id: 'cred-submit' }, 'Set credential')), error));
}

// ---- channel adapters: live states, write-only credentials, a credential check

function adapterBadge(state) {
  const tone = { running: 'ok', starting: 'warn', backoff: 'warn', failed: 'bad', stopped: '', disabled: '' }[state] || '';
  return h('span', { class: `badge ${tone}`, text: state || '—' });
}

// The credential key an adapter's error names (`adapter:<type>:<KEY>`), to suggest it.
function namedKey(type, error) {
  const m = new RegExp(`adapter:${type}:([A-Za-z0-9_]+)`).exec(error || '');
  return m ? m[1] : null;
}

async function adaptersTab(panel, id, base) {
  const table = h('table', { id: 'adapter-states' }, h('thead', {}, h('tr', {}, ['Adapter', 'State', 'Error', 'Restarts', 'Check'].map((t) => h('th', { text: t })))));
  const rows = h('tbody');
  table.append(rows);
  const none = h('p', { class: 'muted', id: 'adapters-none', text: 'This agent configures no channel adapter (adapters in its config).' });
  const types = h('select', { id: 'adapter-cred-type' });
  const creds = h('div', { id: 'adapter-credentials' });
  const errors = {};

  // One row per adapter, updated in place so a live change never redraws the table.
  const row = (type) => {
    let tr = rows.querySelector(`tr[data-adapter="${CSS.escape(type)}"]`);
    if (tr) return tr;
    const result = h('span', { class: 'adapter-test-result', role: 'status' });
    const test = h('button', { type: 'button', 'data-test-adapter': type, onclick: async () => {
      result.textContent = 'checking…';
      const r = await api('POST', `${base}/adapters/${encodeURIComponent(type)}/test`);
      if (!r.ok) { result.textContent = errorText(r); result.className = 'adapter-test-result error'; return; }
      const who = r.data.bot && r.data.bot.username ? ` as @${r.data.bot.username}` : '';
      result.textContent = r.data.ok ? `the credential works${who}` : r.data.error;
      result.className = `adapter-test-result ${r.data.ok ? 'ok' : 'error'}`;
    } }, 'Test credential');
    tr = h('tr', { 'data-adapter': type }, h('td', {}, h('code', { text: type })), h('td', { class: 'adapter-state' }),
      h('td', { class: 'adapter-error' }), h('td', { class: 'adapter-restarts num' }), h('td', {}, test, ' ', result));
    rows.append(tr);
    types.append(h('option', { value: type, text: type }));
    return tr;
  };
  const show = (s) => {
    const tr = row(s.type);
    tr.querySelector('.adapter-state').replaceChildren(adapterBadge(s.state));
    tr.querySelector('.adapter-error').textContent = s.error || '';
    if (s.restarts !== undefined) tr.querySelector('.adapter-restarts').textContent = String(s.restarts);
    errors[s.type] = s.error;
    suggestKey();
  };
  const load = async () => {
    const r = await api('GET', `${base}/runtime/adapters`);
    if (!r.ok) { toast(errorText(r), true); return; }
    none.hidden = (r.data.states || []).length > 0;
    for (const s of r.data.states || []) show(s);
  };
  const reload = debounce(load, 150);

  // Which credentials of the chosen adapter are set (never their values), each deletable.
  const loadCreds = async () => {
    const type = types.value;
    clear(creds);
    if (!type) return;
    const r = await api('GET', `${base}/adapters/credentials?adapterType=${encodeURIComponent(type)}`);
    if (!r.ok) { creds.append(h('p', { class: 'error', text: errorText(r) })); return; }
    const names = Object.keys(r.data.credentials || {});
    if (!names.length) { creds.append(h('p', { class: 'muted', text: `no ${type} credential is set` })); return; }
    const t = h('table', {}, h('thead', {}, h('tr', {}, ['Credential', 'Value', ''].map((x) => h('th', { text: x })))));
    const b = h('tbody');
    for (const name of names) {
      b.append(h('tr', { 'data-credential': name }, h('td', {}, h('code', { text: `adapter:${type}:${name}` })),
        h('td', {}, h('span', { class: 'badge ok', text: 'set' }), h('span', { class: 'muted', text: ' (never shown)' })),
        h('td', {}, h('button', { type: 'button', class: 'danger', 'data-delete-credential': name, onclick: async () => {
          const d = await api('DELETE', `${base}/identity/${encodeURIComponent(`adapter:${type}:${name}`)}`);
          toast(d.ok ? `adapter:${type}:${name} deleted` : errorText(d), !d.ok);
          loadCreds();
        } }, 'Delete'))));
    }
    t.append(b);
    creds.append(t);
  };

  const key = h('input', { type: 'text', id: 'adapter-cred-key', placeholder: 'e.g. TELEGRAM_BOT_TOKEN', required: true });
  // The key a failed adapter's error names is the one to set: shown as the field's hint.
  function suggestKey() {
    const named = namedKey(types.value, errors[types.value]);
    if (named) key.placeholder = named;
  }
  const value = h('input', { type: 'password', id: 'adapter-cred-value', autocomplete: 'off' });
  const error = h('p', { class: 'error', role: 'alert', id: 'adapter-cred-error' });
  types.addEventListener('change', () => { suggestKey(); loadCreds(); });
  const form = h('form', { class: 'card', id: 'adapter-cred-form', onsubmit: async (e) => {
    e.preventDefault();
    error.textContent = '';
    const envKey = key.value.trim();
    if (!types.value) { error.textContent = 'configure an adapter first'; return; }
    if (!envKey) { error.textContent = 'the credential key is required'; return; }
    const w = await api('PUT', `${base}/adapters/credentials`, { adapterType: types.value, envKey, value: value.value });
    value.value = '';
    if (!w.ok) { error.textContent = errorText(w); return; }
    toast(`adapter:${types.value}:${envKey} set; the adapter restarts`);
    key.value = '';
    loadCreds();
  } }, h('div', { class: 'row' }, h('label', {}, 'Adapter', types), h('label', {}, 'Credential key', key),
    h('label', {}, 'Secret (write-only)', value), h('button', { type: 'submit', id: 'adapter-cred-submit' }, 'Set credential')), error);

  panel.append(h('h3', { text: 'Channel adapters' }), none, table,
    h('p', { class: 'muted', text: 'States change live as the daemon reports them; an adapter restarts when its config or credential changes.' }),
    h('h3', { text: 'Adapter credentials' }),
    h('p', { class: 'muted', text: 'Sealed in the agent\'s identity store as adapter:<type>:<KEY>. Values are never sent to this page: set, replace or delete them here.' }),
    form, creds);
  stream(`/events?agentId=${encodeURIComponent(id)}&since=${latestCursor}`, {
    'adapter.status.changed': (frame) => {
      const p = (frame.event || frame).payload || {};
      if (p.adapter) { none.hidden = true; show({ type: p.adapter, state: p.state, error: p.error }); }
      reload();
    },
    'config.changed': reload,
  });
  await load();
  await loadCreds();
}

async function reviewTab(panel, id, base, status) {
  const r = await api('GET', `/agents/review?filePath=${encodeURIComponent(status.filePath)}`);
  if (!r.ok) return panel.append(h('p', { class: 'error', text: errorText(r) }));
  panel.append(h('p', {}, 'What this file can do, for you to review before it may autostart. ',
    r.data.reviewed ? h('span', { class: 'badge ok', text: 'reviewed' }) : h('span', { class: 'badge warn', text: 'not reviewed' })),
  h('pre', { class: 'json', text: json(r.data) }),
  h('button', { class: 'primary', onclick: async () => {
    const a = await api('POST', '/agents/review/accept', { filePath: status.filePath });
    toast(a.ok ? 'review recorded' : errorText(a), !a.ok);
    if (a.ok) { clear(panel); reviewTab(panel, id, base, status); }
  } }, 'Accept this review'));
}

// ---- compute and packages: what this machine can run for the agent, and what it declares

// The tool a target needs on this machine: bubblewrap for the sandboxes, Podman for a
// registered container; `host` depends on the runtime setting, which the daemon checks per call.
function targetNeeds(target, status) {
  if (target === 'isolated' || target === 'shared') return status.bubblewrap;
  if (target === 'host') return null;
  return status.podman;
}

async function computeTab(panel, id, base) {
  const [st, cfg] = await Promise.all([api('GET', '/compute/status'), api('GET', `${base}/config`)]);
  if (!st.ok) return panel.append(h('p', { class: 'error', text: errorText(st) }));
  if (!cfg.ok) return panel.append(h('p', { class: 'error', text: errorText(cfg) }));
  const status = st.data;
  const conf = cfg.data.config || cfg.data;
  const compute = conf.compute || {};
  const tool = (name, a) => h('tr', { 'data-tool': name }, h('td', { text: name }),
    h('td', {}, a.available ? h('span', { class: 'badge ok', text: 'installed' }) : h('span', { class: 'badge bad', text: 'missing' })),
    h('td', { class: 'compute-tool-detail', text: a.available ? a.path : `install ${a.install}` }));
  panel.append(h('h3', { text: 'This machine' }),
    h('p', {}, 'Isolation: ', h('strong', { id: 'compute-isolation', text: status.isolation || 'none (compute_exec fails closed)' }),
      ` · network in sandboxes: ${status.network}`),
    h('table', { id: 'compute-tools' }, h('tbody', {}, tool('bubblewrap', status.bubblewrap), tool('podman', status.podman))),
    h('pre', { class: 'json', id: 'compute-limits', text: json(status.limits) }));
  const allowed = Array.isArray(compute.allowed_targets) ? compute.allowed_targets
    : [compute.enabled ? 'isolated' : null, compute.host_access ? 'host' : null].filter(Boolean);
  const rows = h('tbody');
  for (const target of allowed) {
    const need = targetNeeds(target, status);
    const state = need === null ? h('span', { class: 'badge warn', text: 'needs the runtime setting compute.hostAccess' })
      : need.available ? h('span', { class: 'badge ok', text: 'can run' }) : h('span', { class: 'badge bad', text: `cannot run: install ${need.install}` });
    rows.append(h('tr', { 'data-target': target }, h('td', { text: target }), h('td', { class: 'compute-target-state' }, state),
      h('td', { text: target === (compute.default_target || allowed[0]) ? 'default' : '' })));
  }
  const packages = (conf.code_execution && conf.code_execution.packages) || [];
  const pip = (compute.packages && compute.packages.pip) || [];
  panel.append(h('h3', { text: 'This agent' }),
    h('p', { id: 'compute-enabled', text: compute.enabled ? 'compute is enabled' : 'compute is off (compute.enabled)' }),
    allowed.length ? h('table', { id: 'compute-targets' }, h('thead', {}, h('tr', {}, ['Target', 'On this machine', ''].map((t) => h('th', { text: t })))), rows)
      : h('p', { class: 'muted', text: 'No compute target is allowed.' }),
    h('h3', { text: 'Packages' }),
    h('p', { id: 'compute-npm', text: packages.length ? `npm: ${packages.map((p) => `${p.name}@${p.version || '*'}`).join(', ')}` : 'npm: none (adf packages FILE install NAME)' }),
    h('p', { id: 'compute-pip', text: pip.length ? `pip: ${pip.join(', ')}` : 'pip: none' }));
}

// Beyond the reference: per-turn token use and timing from the transcript.
async function usageTab(panel, id, base) {
  const r = await api('GET', `${base}/usage`);
  if (r.ok) panel.append(h('h3', { text: 'Usage' }), h('pre', { class: 'json', text: json(r.data) }));
  else panel.append(h('p', { class: 'error', text: errorText(r) }));
  const loop = await api('GET', `${base}/loop?limit=200`);
  if (!loop.ok) return;
  const table = h('table', { id: 'turn-costs' }, h('thead', {}, h('tr', {}, ['Turn row', 'Model', 'Input tokens', 'Output tokens', 'Time since previous row'].map((t) => h('th', { text: t })))));
  const body = h('tbody');
  let previous = null;
  for (const row of loop.data.entries) {
    if (row.role === 'assistant' && row.tokens) {
      const t = typeof row.tokens === 'string' ? JSON.parse(row.tokens) : row.tokens;
      body.append(h('tr', {}, h('td', { text: String(row.seq) }), h('td', { text: row.model || '' }),
        h('td', { class: 'num', text: String(t.input ?? t.input_tokens ?? '') }), h('td', { class: 'num', text: String(t.output ?? t.output_tokens ?? '') }),
        h('td', { class: 'num', text: previous ? `${row.created_at - previous} ms` : '' })));
    }
    previous = row.created_at;
  }
  table.append(body);
  panel.append(h('h3', { text: 'Turns (model rows)' }), table);
}

// ------------------------------------------------------------------ runtime settings

function section(title, id, ...children) {
  return h('section', { class: 'card', id, 'aria-label': title }, h('h3', { text: title }), ...children);
}

async function runtimeView(main) {
  main.append(h('h2', { text: 'Runtime' }));
  const [runtime, providers, settings, mcp, usage, network] = await Promise.all(
    ['/runtime', '/runtime/providers', '/runtime/settings', '/runtime/mcp', '/runtime/usage', '/network'].map((p) => api('GET', p)));
  // The long answers are folded: the screen opens on what an owner changes.
  const body = (r, what) => (r.ok ? h('details', {}, h('summary', { text: what }), h('pre', { class: 'json', text: json(r.data) }))
    : h('p', { class: 'error', text: errorText(r) }));
  const tokens = usage.ok && usage.data.totals ? `${usage.data.totals.input ?? 0} in · ${usage.data.totals.output ?? 0} out tokens on the loaded agents` : '';
  const mesh = network.ok && network.data.mesh ? `mesh ${network.data.mesh.status && network.data.mesh.status.meshServerRunning ? 'running' : 'off'}` : '';
  main.append(
    section('Providers', 'rt-providers', providersTable(providers)),
    section('MCP registrations', 'rt-mcp', await mcpList(mcp)),
    section('Defaults', 'rt-defaults', defaultsForm(settings)),
    section('Runtime status', 'rt-status', body(runtime, 'Status as the daemon reports it')),
    section('Usage', 'rt-usage', h('p', { text: tokens }), body(usage, 'By provider, model and day')),
    section('Network', 'rt-network', h('p', { text: mesh }), body(network, 'Host, mesh and each agent\'s messaging')));
}

// The settings' providers, keys shown only as set/not set, each with a test button (one tiny
// model request from the daemon; its answer or the provider's error is shown in the row).
function providersTable(r) {
  if (!r.ok) return h('p', { class: 'error', text: errorText(r) });
  const list = r.data.providers || [];
  const out = h('div');
  if (!list.length) out.append(h('p', { class: 'muted', text: 'No runtime providers: add them with PUT /settings/providers (or `adf settings`).' }));
  else {
    const table = h('table', { id: 'providers' }, h('thead', {}, h('tr', {}, ['Id', 'Type', 'Base URL', 'Default model', 'Key', 'Test'].map((t) => h('th', { text: t })))));
    const rows = h('tbody');
    for (const p of list) {
      const result = h('span', { class: 'provider-result', 'data-provider-result': p.id, role: 'status' });
      const button = h('button', { type: 'button', 'data-provider-test': p.id, 'aria-label': `Test provider ${p.id}`, onclick: async () => {
        button.disabled = true;
        result.className = 'provider-result muted';
        result.textContent = 'testing…';
        const t = await api('POST', `/runtime/providers/${encodeURIComponent(p.id)}/test`, {});
        button.disabled = false;
        const ok = t.ok && t.data.ok;
        result.className = `provider-result ${ok ? 'ok' : 'error'}`;
        result.dataset.ok = String(ok);
        result.textContent = ok ? `ok · ${t.data.model} answered “${t.data.reply}” in ${t.data.latencyMs} ms` : (t.ok ? t.data.error : errorText(t));
      } }, 'Test this provider');
      rows.append(h('tr', { 'data-provider': p.id }, h('td', {}, h('code', { text: p.id })), h('td', { text: p.type }),
        h('td', { text: p.baseUrl || '(default)' }), h('td', { text: p.defaultModel || '—' }),
        h('td', {}, h('span', { class: `badge ${p.hasApiKey ? 'ok' : ''}`, text: p.hasApiKey ? 'set' : 'none' })),
        h('td', {}, button, ' ', result)));
    }
    table.append(rows);
    out.append(table);
  }
  const usage = r.data.agentUsage || [];
  if (usage.length) {
    out.append(h('details', {}, h('summary', { text: `Which provider each loaded agent uses (${usage.length})` }),
      h('ul', {}, usage.map((u) => h('li', { text: `${u.handle || u.agentId}: ${u.providerId || '(none)'} ${u.modelId || ''} — ${u.source}` })))));
  }
  return out;
}

// MCP registrations: the daemon's listing when it serves one, else the settings' entries
// (secrets redacted by the daemon), said so.
async function mcpList(r) {
  let list = null;
  let note = null;
  if (r.ok) list = r.data.servers || r.data.mcpServers || r.data.registrations || [];
  else if (r.status === 404) {
    const s = await api('GET', '/settings/mcpServers');
    if (!s.ok) return h('p', { class: 'error', text: errorText(s) });
    list = Array.isArray(s.data.value) ? s.data.value : [];
    note = h('p', { class: 'muted', 'data-source': 'settings', text: 'From the runtime settings (mcpServers); this daemon has no MCP status route yet.' });
  } else return h('p', { class: 'error', text: errorText(r) });
  const out = h('div', { id: 'mcp-list' }, note);
  if (!list.length) out.append(h('p', { class: 'muted', text: 'No MCP servers registered.' }));
  for (const m of list) {
    const name = m.name || m.id || m.npmPackage || m.package || '(unnamed)';
    out.append(h('details', { class: 'fold' }, h('summary', { text: `${name}${m.command ? ` — ${m.command}` : ''}${m.url ? ` — ${m.url}` : ''}` }), h('pre', { class: 'json', text: json(m) })));
  }
  return out;
}

// The runtime-wide defaults an owner changes most (the rest stay in `adf settings`).
const DEFAULT_FIELDS = [
  { key: 'autoCompactThreshold', label: 'Auto-compact threshold (tokens)', check: (v) => v === '' || (Number.isInteger(Number(v)) && Number(v) > 0) ? null : 'must be a positive whole number' },
  { key: 'maxDirectoryScanDepth', label: 'Directory scan depth', check: (v) => v === '' || (Number.isInteger(Number(v)) && Number(v) >= 0) ? null : 'must be a whole number' },
];

function defaultsForm(r) {
  if (!r.ok) return h('p', { class: 'error', text: errorText(r) });
  const error = h('p', { class: 'error', role: 'alert', id: 'defaults-error' });
  const inputs = DEFAULT_FIELDS.map((f) => {
    const input = h('input', { type: 'text', inputmode: 'numeric', id: `default-${f.key}`, value: r.data[f.key] ?? '' });
    return { f, input };
  });
  return h('div', {},
    h('form', { class: 'row', id: 'defaults-form', onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = '';
      const patch = {};
      for (const { f, input } of inputs) {
        const v = input.value.trim();
        const problem = f.check(v);
        input.setAttribute('aria-invalid', String(!!problem));
        if (problem) { error.textContent = `${f.label}: ${problem}`; input.focus(); return; }
        if (v !== '') patch[f.key] = Number(v);
      }
      const w = await api('PATCH', '/settings', patch);
      if (!w.ok) { error.textContent = errorText(w); return; }
      toast('defaults saved');
    } }, inputs.map(({ f, input }) => h('label', {}, f.label, input)), h('button', { type: 'submit' }, 'Save defaults')),
    error,
    h('details', {}, h('summary', { text: 'All settings (summary)' }), h('pre', { class: 'json', text: json(r.data) })));
}

// ------------------------------------------------------------------ start

window.addEventListener('hashchange', route);
document.addEventListener('DOMContentLoaded', route);
