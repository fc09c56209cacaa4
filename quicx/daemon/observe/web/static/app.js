// The dashboard's pages: one document, a section per page (the URL's #hash
// picks it). Live figures come from /api/stream (server-sent events, one a
// second); the other pages read /api/... when shown, and after an action.
// Every text from the daemon goes in with textContent, never as HTML.
'use strict';

const state = {
  role: null, // 'admin' or 'monitor'
  csrf: null, // echoed by every action (X-Quicx-CSRF)
  history: 3600, // seconds of history kept (the charts show up to an hour of it)
  samples: [], // the history, oldest first, then each live sample
  overview: null, // the newest overview from the stream
};

const PAGES = ['overview', 'queues', 'task', 'dead', 'workers', 'schedules', 'cluster'];

const $ = (id) => document.getElementById(id);

// An element with attributes (and a dataset from `data`), and children (nodes or text).
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === 'data') Object.assign(node.dataset, value);
    else if (name === 'class') node.className = value;
    else node.setAttribute(name, value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined).map(
    (child) => (typeof child === 'object' ? child : String(child))));
  return node;
}

const isAdmin = () => state.role === 'admin';

function count(value) {
  return value === null || value === undefined ? '–' : Number(value).toLocaleString('en-US');
}

function rate(value) {
  if (value === null || value === undefined) return '–';
  return value >= 100 ? Math.round(value).toLocaleString('en-US') : value.toFixed(1);
}

function seconds(value) {
  if (value === null || value === undefined) return '–';
  if (value < 1) return `${(value * 1000).toFixed(value < 0.01 ? 2 : 1)} ms`;
  if (value < 120) return `${value.toFixed(value < 10 ? 2 : 1)} s`;
  if (value < 7200) return `${(value / 60).toFixed(1)} min`;
  return `${(value / 3600).toFixed(1)} h`;
}

function bytes(value) {
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

function when(time) {
  if (time === null || time === undefined) return '–';
  const date = new Date(time * 1000);
  const delta = time - Date.now() / 1000;
  const relative = delta >= 0 ? `in ${seconds(delta)}` : `${seconds(-delta)} ago`;
  return `${date.toLocaleString('en-GB')} (${relative})`;
}

function say(text, failed = false) {
  const message = $('message');
  message.textContent = text;
  message.hidden = false;
  message.classList.toggle('error', failed);
}

// GET or POST /api/PATH; the answer's JSON, or an Error with the daemon's words.
async function api(path, options = {}) {
  const response = await fetch(`/api/${path}`, { credentials: 'same-origin', ...options });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
  return body;
}

// POST an action (the admin role); say what it did, then show the page anew.
async function act(path, question) {
  if (question && !window.confirm(question)) return;
  try {
    const done = await api(path, { method: 'POST', headers: { 'X-Quicx-CSRF': state.csrf || '' } });
    say(describeAction(done));
  } catch (error) {
    say(error.message, true);
  }
  show();
}

function describeAction(done) {
  if ('paused' in done) return `queue ${done.queue} ${done.paused ? 'paused' : 'resumed'}`;
  if ('replayed' in done) return `replayed ${done.replayed.length} task(s): ${done.replayed.join(', ') || 'none'}`;
  if ('queue' in done) return `queue ${done.queue} purged: ${done.purged} task(s) cancelled`;
  return `${done.purged} dead task(s) purged`;
}

// -- the overview ---------------------------------------------------------------

function fill(id, text) {
  $(id).textContent = text;
}

function renderOverview() {
  const doc = state.overview;
  if (!doc) return;
  const sample = doc.sample || {};
  fill('rate-submitted', rate(sample.submitted_rate));
  fill('rate-done', rate(sample.done_rate));
  fill('rate-failed', rate(sample.failed_rate));
  fill('total-submitted', `${count(doc.tasks.submitted)} in all`);
  fill('total-done', `${count(doc.tasks.done)} in all`);
  fill('total-failed', `${count(doc.tasks.failed)} in all`);
  fill('now-queued', count(doc.queued));
  fill('now-delayed', `${count(doc.delayed)} delayed`);
  fill('now-running', count(doc.running));
  fill('now-dead', `${count(doc.dead)} dead`);
  fill('wait-p95', seconds(sample.wait_p95));
  fill('wait-p50', `p50 ${seconds(sample.wait_p50)}, queued to sent`);
  fill('run-p95', seconds(sample.run_p95));
  fill('run-p50', `p50 ${seconds(sample.run_p50)}, sent to done`);
  fill('now-workers', count(doc.connections.workers));
  fill('now-connections', `${count(doc.connections.idle_workers)} idle; ${count(doc.connections.total)} conn.`);
  fill('pool', `${(100 * doc.memory.used / doc.memory.total).toFixed(1)} %`);
  fill('pool-total', `${bytes(doc.memory.used)} of ${bytes(doc.memory.total)}`);
  const dropped = doc.streams.dropped ? `, ${count(doc.streams.dropped)} updates dropped for slow ones` : '';
  fill('about', `Quicx ${doc.version}, up ${seconds(doc.uptime)}; ${count(doc.results_kept)} outcomes kept;` +
    ` ${count(doc.streams.open)} live page(s)${dropped}.`);
  renderCharts();
}

function series(cls, field) {
  return { cls, points: state.samples.map((s) => [s.time, s[field]]) };
}

// The charts span the last hour, or less while the daemon is younger (30 s at least).
function renderCharts() {
  const samples = state.samples;
  if ($('overview').hidden || !samples.length) return;
  const end = samples[samples.length - 1].time;
  const span = Math.max(30, Math.min(3600, Math.ceil((end - samples[0].time) / 30) * 30));
  drawChart($('chart-rates'), [
    series('rate-submitted', 'submitted_rate'), series('rate-done', 'done_rate'), series('rate-failed', 'failed_rate'),
  ], end, span);
  drawChart($('chart-depth'), [
    series('depth-queued', 'queued'), series('depth-running', 'running'), series('depth-delayed', 'delayed'),
  ], end, span);
  drawChart($('chart-latency'), [
    series('latency-wait', 'wait_p95'), series('latency-run', 'run_p95'),
  ], end, span);
}

function addSample(sample) {
  const samples = state.samples;
  if (samples.length && samples[samples.length - 1].time >= sample.time) return;
  samples.push(sample);
  while (samples.length && samples[0].time <= sample.time - state.history) samples.shift();
}

// -- queues ---------------------------------------------------------------------

function button(label, onClick, attributes = {}) {
  const node = el('button', { type: 'button', ...attributes }, label);
  node.addEventListener('click', onClick);
  return node;
}

function renderQueues(queues) {
  $('queue-names').replaceChildren(...queues.map((q) => el('option', { value: q.name })));
  $('queue-rows').replaceChildren(...queues.map((q) => {
    const name = encodeURIComponent(q.name);
    // Highest priority first (an object lists number-like keys lowest first).
    const priorities = Object.entries(q.priorities).filter(([, n]) => n)
      .sort(([a], [b]) => Number(b) - Number(a))
      .map(([p, n]) => `${p}: ${count(n)}`).join(' · ');
    const actions = isAdmin() ? el('td', { class: 'actions' },
      q.paused
        ? button('Resume', () => act(`queues/${name}/resume`), { data: { action: 'resume', queue: q.name } })
        : button('Pause', () => act(`queues/${name}/pause`), { data: { action: 'pause', queue: q.name } }),
      button('Purge', () => act(`queues/${name}/purge`, `Cancel every task queued in ${q.name}?`),
        { class: 'danger', data: { action: 'purge', queue: q.name } }),
    ) : null;
    return el('tr', { data: { queue: q.name } },
      el('td', {}, q.name),
      el('td', { class: 'number' }, count(q.depth)),
      el('td', {}, priorities || '–'),
      el('td', { class: 'number' }, count(q.running)),
      el('td', { class: 'number' }, count(q.delayed)),
      el('td', { class: 'number' }, count(q.dead)),
      el('td', { class: 'number' }, `${count(q.workers)} (${count(q.idle_workers)})`),
      el('td', { class: 'number' }, seconds(q.oldest_age)),
      el('td', { class: 'number' }, rate(q.drain_rate)),
      el('td', { class: q.paused ? 'paused' : 'running' }, q.paused ? 'paused' : 'running'),
      actions);
  }));
}

// -- a task ---------------------------------------------------------------------

function facts(pairs) {
  return el('dl', {}, ...pairs.filter(([, value]) => value !== undefined && value !== null)
    .flatMap(([term, value]) => [el('dt', {}, term), el('dd', {}, value)]));
}

const TRACEBACK = '\nTraceback (most recent call last):';

// A failure's reason (the exception, from the Python worker), and the
// traceback that worker sends after it, if any.
function splitReason(reason) {
  const at = (reason || '').indexOf(TRACEBACK);
  return at < 0 ? [reason || '', ''] : [reason.slice(0, at), reason.slice(at + 1)];
}

// A reason shown in full: the exception, then its traceback apart, scrolling on its own.
function reasonView(reason) {
  if (reason === null || reason === undefined) return undefined;
  const [summary, traceback] = splitReason(reason);
  return el('div', { class: 'reason' }, el('strong', {}, summary),
    traceback ? el('pre', { class: 'traceback' }, traceback) : null);
}

function renderTask(found) {
  const box = $('task-answer');
  if (found.found === 'live') {
    const t = found.task;
    box.replaceChildren(
      el('h3', {}, `Task ${t.id}: ${t.state}`),
      facts([
        ['type', t.type], ['queue', t.queue], ['priority', t.priority], ['size', bytes(t.size)],
        ['age', seconds(t.age)], ['attempt', t.attempt], ['failures', `${t.failures} of ${t.retries} retries`],
        ['fairness key', t.fairness_key], ['worker', t.worker],
        ['running for', t.running_for === undefined ? undefined : seconds(t.running_for)],
        ['progress', t.progress && `${Math.round(t.progress.fraction * 100)} % ${t.progress.message}`],
        ['reason', reasonView(t.reason)], ['died', t.died_at === undefined ? undefined : when(t.died_at)],
        ['due', t.due === undefined ? undefined : when(t.due)],
        ['ahead of it', t.ahead], ['estimated start', t.estimated_start && when(t.estimated_start)],
      ]),
      ...(t.why && t.why.length ? [el('ul', { class: 'why' }, ...t.why.map((w) => el('li', {}, w.text)))] : []));
  } else if (found.found === 'kept') {
    const result = found.result;
    box.replaceChildren(
      el('h3', {}, `Task ${found.id}: ${found.outcome}`),
      facts([
        ['reason', reasonView(found.reason)],
        ['result', result && (result.kind === 'bytes' ? `${result.base64} (base64)` : result.text)],
        ['result kind', result && result.kind],
        ['kept until', when(found.kept_until)],
      ]));
  } else {
    const words = found.found !== 'forgotten'
      ? 'unknown: no live task, and no outcome kept'
      : found.evicted
        ? `finished; its outcome was kept and was ${found.evicted}`
        : 'finished; its outcome was kept, and its TTL ran out';
    box.replaceChildren(el('h3', {}, `Task ${found.id}: ${found.found}`), el('p', {}, words));
  }
}

async function lookUp(event) {
  event.preventDefault();
  try {
    renderTask(await api(`tasks/${Number($('task-id').value)}`));
  } catch (error) {
    say(error.message, true);
  }
}

// -- dead letters ---------------------------------------------------------------

function deadQueue() {
  return $('dead-queue').value.trim();
}

// PATH with the dead-letter page's queue (if one is given) and `extra` as its query.
function withQueue(path, extra = {}) {
  const query = new URLSearchParams(extra);
  if (deadQueue()) query.set('queue', deadQueue());
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

function whichQueue() {
  return deadQueue() ? `queue ${deadQueue()}` : 'every queue';
}

async function loadDead() {
  const dead = await api(withQueue('dead', { limit: 500 }));
  fill('dead-total', `${count(dead.total)} dead task(s) in ${whichQueue()}` +
    (dead.total > dead.tasks.length ? `; the oldest ${dead.tasks.length} shown` : ''));
  $('dead-rows').replaceChildren(...dead.tasks.map((t) => el('tr', { data: { task: t.id } },
    el('td', { class: 'number' }, t.id),
    el('td', {}, t.queue),
    el('td', {}, t.type),
    el('td', { class: 'number' }, t.failures),
    el('td', { class: 'reason', title: t.reason }, splitReason(t.reason)[0]),
    el('td', {}, t.worker || '–'),
    el('td', {}, when(t.died_at)),
    isAdmin() ? el('td', { class: 'actions' },
      button('Replay', () => act(`dead/${t.id}/replay`), { data: { action: 'replay', task: t.id } })) : null)));
}

// -- workers and schedules ------------------------------------------------------

async function loadWorkers() {
  const connections = await api('workers');
  $('worker-rows').replaceChildren(...connections.map((c) => el('tr', {},
    el('td', { class: 'number' }, c.id),
    el('td', {}, c.role),
    el('td', {}, c.identity ? `${c.peer} (${c.identity})` : c.peer),
    el('td', {}, c.client || '–'),
    el('td', {}, c.role === 'worker' ? c.queues.join(', ') : '–'),
    el('td', { class: 'number' }, c.role === 'worker' ? `${c.held} / ${c.credits}` : '–'),
    el('td', {}, c.tasks.join(', ') + (c.held > c.tasks.length ? ', …' : '')),
    el('td', {}, c.role === 'worker' ? (c.idle ? 'idle' : 'busy') : '–'),
    el('td', { class: 'number' }, seconds(c.silent_for)))));
}

async function loadSchedules() {
  const schedules = await api('schedules');
  $('schedule-rows').replaceChildren(...schedules.map((s) => el('tr', {},
    el('td', {}, s.name),
    el('td', {}, s.cron ? `${s.cron} (${s.timezone})` : `every ${seconds(s.every)}`),
    el('td', {}, s.type),
    el('td', {}, s.queue || 'default'),
    el('td', {}, when(s.next_fire)),
    el('td', {}, when(s.last_fire)),
    el('td', { class: 'number' }, count(s.fired)),
    el('td', {}, s.missed),
    el('td', {}, s.source))));
  if (!schedules.length) {
    $('schedule-rows').replaceChildren(el('tr', {}, el('td', { colspan: 9 }, 'No schedules.')));
  }
}

// -- the cluster: every daemon of [cluster] peers side by side, and the total ----------

const CLUSTER_ROWS = [
  ['state', (d) => (d.daemons === undefined ? (d.up ? 'up' : 'down') : `${d.up} of ${d.daemons} up`)],
  ['submitted', (d) => count(d.tasks.submitted)],
  ['done', (d) => count(d.tasks.done)],
  ['failed', (d) => count(d.tasks.failed)],
  ['submitted/s', (d) => rate(d.rates.submitted)],
  ['done/s', (d) => rate(d.rates.done)],
  ['failed/s', (d) => rate(d.rates.failed)],
  ['queued', (d) => count(d.queued)],
  ['running', (d) => count(d.running)],
  ['delayed', (d) => count(d.delayed)],
  ['dead', (d) => count(d.dead)],
  ['workers (idle)', (d) => `${count(d.workers)} (${count(d.idle_workers)})`],
  ['connections', (d) => count(d.connections)],
  ['memory', (d) => `${bytes(d.memory.used)} / ${bytes(d.memory.total)}`],
  ['wait p95', (d) => seconds(d.wait.p95)],
  ['run p95', (d) => seconds(d.run.p95)],
];

async function loadCluster() {
  let view;
  try {
    view = await api('cluster');
  } catch (error) {
    fill('cluster-note', error.message);
    $('cluster-head').replaceChildren();
    $('cluster-rows').replaceChildren();
    return;
  }
  const columns = [...view.daemons, view.total];
  const down = view.daemons.filter((d) => !d.up);
  fill('cluster-note', down.map((d) => `down: ${d.address}: ${d.error}`).join('; '));
  $('cluster-head').replaceChildren(el('th', {}, ''),
    ...view.daemons.map((d) => el('th', { class: 'number' }, d.address)),
    el('th', { class: 'number' }, 'total'));
  $('cluster-rows').replaceChildren(...CLUSTER_ROWS.map(([name, cell], index) => el('tr', {},
    el('th', {}, name),
    ...columns.map((d) => el('td', { class: 'number' },
      d.up || index === 0 ? cell(d) : '–')))));
}

// -- pages and the live stream ---------------------------------------------------

function page() {
  const name = location.hash.slice(1);
  return PAGES.includes(name) ? name : 'overview';
}

async function show() {
  const current = page();
  for (const name of PAGES) $(name).hidden = name !== current;
  for (const link of document.querySelectorAll('nav a')) {
    link.classList.toggle('current', link.getAttribute('href') === `#${current}`);
  }
  try {
    if (current === 'overview') renderCharts();
    else if (current === 'queues') renderQueues(await api('queues'));
    else if (current === 'dead') await loadDead();
    else if (current === 'workers') await loadWorkers();
    else if (current === 'schedules') await loadSchedules();
    else if (current === 'cluster') await loadCluster();
  } catch (error) {
    say(error.message, true);
  }
}

function onUpdate(doc) {
  state.overview = doc;
  if (doc.sample) addSample(doc.sample);
  renderOverview();
  if (page() === 'queues') renderQueues(doc.queues);
}

function connect() {
  const source = new EventSource('/api/stream');
  source.onopen = () => { $('live').textContent = 'live'; $('live').classList.remove('off'); };
  source.onmessage = (event) => onUpdate(JSON.parse(event.data));
  source.onerror = () => {
    $('live').textContent = 'reconnecting';
    $('live').classList.add('off');
    // A refusal (503: too many open pages) closes it for good: try again later.
    if (source.readyState === EventSource.CLOSED) setTimeout(connect, 10000);
  };
}

async function start() {
  const session = await api('session');
  state.role = session.role;
  state.csrf = session.csrf;
  state.history = Math.min(3600, session.history);
  document.body.classList.toggle('admin', isAdmin());
  fill('who', isAdmin() ? 'admin' : 'monitor: read only');
  const history = await api('history');
  for (const row of history.rows) {
    addSample(Object.fromEntries(history.fields.map((field, i) => [field, row[i]])));
  }
  $('task-form').addEventListener('submit', lookUp);
  $('dead-form').addEventListener('submit', (event) => { event.preventDefault(); show(); });
  document.querySelector('[data-action="replay-all"]').addEventListener(
    'click', () => act(withQueue('dead/replay'), `Replay every dead task of ${whichQueue()}?`));
  document.querySelector('[data-action="purge-dead"]').addEventListener(
    'click', () => act(withQueue('dead/purge'), `Drop every dead task of ${whichQueue()} for good?`));
  // The monitor role reads only: no action's button is on its pages.
  if (!isAdmin()) for (const node of document.querySelectorAll('.admin-only')) node.remove();
  $('workers-refresh').addEventListener('click', show);
  $('schedules-refresh').addEventListener('click', show);
  $('cluster-refresh').addEventListener('click', show);
  // What an action said belongs to its page: another page starts without it.
  window.addEventListener('hashchange', () => { $('message').hidden = true; show(); });
  window.addEventListener('resize', renderCharts);
  await show();
  connect();
}

start().catch((error) => say(error.message, true));
