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

const PAGES = ['overview', 'queues', 'finished', 'task', 'dead', 'bulk', 'workers', 'schedules', 'cluster'];

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
  if (done.state === 'cancelled') return `task ${done.id} cancelled`;
  if ('workers' in done) return `${done.action}: worker(s) ${done.workers.join(', ') || 'none'}`;
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
  $('replication').hidden = !doc.replication;
  if (doc.replication) fill('replication', `Replication: ${doc.replication}`);
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

// A queue's tasks no connected worker runs: how many, and of which types.
function unroutable(byType) {
  const types = Object.entries(byType);
  const total = types.reduce((sum, [, n]) => sum + n, 0);
  return el('td', { class: total ? 'number unroutable' : 'number', data: { column: 'unroutable' },
    title: types.map(([type, n]) => `${type}: ${count(n)}`).join(', ') }, count(total));
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
      el('td', { class: 'number', data: { column: 'promoted' } }, count(q.promoted)),
      unroutable(q.unroutable || {}),
      el('td', { class: q.paused ? 'paused' : 'running' }, q.paused ? 'paused' : 'running'),
      actions);
  }));
}

// -- a task ---------------------------------------------------------------------

// A task id as a link to its page (#task/ID): every task id the pages show is one.
function taskLink(id) {
  return el('a', { href: `#task/${id}`, class: 'task-link', data: { task: id } }, id);
}

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

// The task page: a list of sections, each drawn from the page's document
// (GET /api/tasks/ID) or left out (null); a new section is one more function.
const TASK_SECTIONS = [taskFacts, taskDependencies, taskKept, taskFailure, taskResult, taskPayload, taskCheckpoint, taskTimeline, taskActions];

// The task's newest record in the history of finished tasks, if any.
const newest = (found) => (found.history && found.history.length ? found.history[0] : null);

function taskState(found) {
  if (found.found === 'live') return found.task.state;
  const record = newest(found);
  if (record) return record.state;
  return found.found === 'kept' ? found.outcome : found.found;
}

function taskFacts(found) {
  const record = newest(found);
  if (found.found === 'live') {
    const t = found.task;
    return el('div', {},
      facts([
        ['type', t.type], ['queue', t.queue], ['key', record ? record.key : undefined],
        ['priority', t.priority], ['size', bytes(t.size)],
        ['age', seconds(t.age)], ['attempt', t.attempt], ['failures', `${t.failures} of ${t.retries} retries`],
        ['fairness key', t.fairness_key], ['worker', t.worker],
        ['running for', t.running_for === undefined ? undefined : seconds(t.running_for)],
        ['progress', t.progress && `${Math.round(t.progress.fraction * 100)} % ${t.progress.message}`],
        ['died', t.died_at === undefined ? undefined : when(t.died_at)],
        ['due', t.due === undefined ? undefined : when(t.due)],
        ['ahead of it', t.ahead], ['estimated start', t.estimated_start && when(t.estimated_start)],
      ]),
      ...(t.why && t.why.length ? [el('ul', { class: 'why' }, ...t.why.map((w) => el('li', {}, w.text)))] : []));
  }
  if (record) {
    return facts([
      ['type', record.type], ['queue', record.queue], ['key', record.key], ['priority', record.priority],
      ['size', bytes(record.size)], ['submitted', when(record.submitted_at)],
      ['started', record.started_at && when(record.started_at)], ['finished', when(record.finished_at)],
      ['waited', record.wait === null ? undefined : seconds(record.wait)],
      ['ran', record.run === null ? undefined : seconds(record.run)],
      ['attempts', record.attempts], ['worker', record.worker],
    ]);
  }
  return null;
}

// Ids as links, comma-separated, then how many more there are than shown.
function linkedIds(ids, total, label = (id) => taskLink(id)) {
  return [...ids.flatMap((id, i) => [i ? ', ' : '', label(id)]),
    total > ids.length ? ` and ${total - ids.length} more` : ''];
}

// What a live task waits for (its parents, each linked; its group; its failure
// policy) and the waiting tasks that name it a parent, as far as the daemon knows them.
function taskDependencies(found) {
  const d = found.found === 'live' ? found.task.dependencies : null;
  if (!d) return null;
  const items = [];
  if (d.parents) {
    if (d.parents_total) {
      items.push(el('li', { class: 'parents' },
        `parents (${d.parents_pending} of ${d.parents_total} pending): `,
        ...linkedIds(d.parents, d.parents_total, (p) => el('span', { data: { parent: p.id, pending: p.pending } },
          taskLink(p.id), p.pending ? ' (pending)' : ' (finished)'))));
    }
    if (d.group) {
      items.push(el('li', { class: 'group' },
        `group ${d.group.id}: ${d.group.pending ? 'waits for it to finish' : 'finished'}`));
    }
    items.push(el('li', { class: 'policy' }, `if a parent does not finish done: ${d.policy}`));
  }
  if (d.children_total) {
    items.push(el('li', { class: 'children' }, 'waiting for it: ', ...linkedIds(d.children, d.children_total)));
  }
  return el('div', { class: 'dependencies' }, el('h4', {}, 'Dependencies'), el('ul', {}, ...items));
}

// Whether its outcome is kept (for AWAIT and the page's result), and till when.
function taskKept(found) {
  if (found.found === 'live') return null;
  if (found.found === 'kept') return el('p', {}, `Its outcome is kept until ${when(found.kept_until)}.`);
  if (found.found === 'unknown') {
    return newest(found) ? null
      : el('p', {}, 'unknown: no live task, no outcome kept, and none in the history of finished tasks');
  }
  return el('p', {}, found.evicted
    ? `finished; its outcome was kept and was ${found.evicted}`
    : 'finished; its outcome was kept, and its TTL ran out (forgotten)');
}

// The failure: the dead task's reason, else the newest record's, else the kept outcome's.
function taskFailure(found) {
  const record = newest(found);
  const reason = (found.found === 'live' ? found.task.reason : undefined)
    ?? (record ? record.reason : undefined) ?? found.reason;
  return reason ? el('div', { class: 'failure' }, el('h4', {}, 'Failure'), reasonView(reason)) : null;
}

function taskResult(found) {
  const result = found.result;
  if (!result) return null;
  return el('div', { class: 'result' }, el('h4', {}, `Result (${result.kind})`),
    el('pre', { class: 'payload' }, result.kind === 'bytes' ? `${result.base64} (base64)` : result.text));
}

function taskPayload(found) {
  const record = newest(found);
  const payload = found.payload || (record && record.payload);
  if (!payload) return null;
  const shown = payload.cut ? `the first ${bytes(payload.shown)} of ${bytes(payload.size)}` : bytes(payload.size);
  return el('div', { class: 'payload' },
    el('h4', {}, `Payload (${shown}${payload.text === undefined ? ', hex' : ''})`),
    el('pre', { class: 'payload' }, payload.text ?? payload.hex));
}

// Its last checkpoint: size and age, and its state when small and text (the daemon decides).
function taskCheckpoint(found) {
  const saved = found.found === 'live' ? found.task.checkpoint : undefined;
  if (!saved) return null;
  return el('div', { class: 'checkpoint' },
    el('h4', {}, `Checkpoint (${bytes(saved.size)}, saved ${when(saved.at)})`),
    saved.text === undefined ? null : el('pre', { class: 'payload' }, saved.text));
}

// Every step of every record of the task (a replayed task has one per outcome), oldest first.
function taskTimeline(found) {
  if (!found.history) return el('p', { class: 'footnote' }, 'No history of finished tasks is kept ([web] task_history = 0).');
  const seen = new Set();
  const steps = found.history.slice().reverse().flatMap((record) => record.timeline)
    .filter((step) => { const id = `${step.at} ${step.event}`; const fresh = !seen.has(id); seen.add(id); return fresh; });
  const record = newest(found);
  // Where it is now, unless its last step said so (a dead task).
  if (found.found === 'live' && !(record && record.state === found.task.state)) {
    steps.push({ at: Date.now() / 1000, event: `now ${found.task.state}`, text: '' });
  }
  if (!steps.length) return null;
  return el('div', { class: 'timeline' }, el('h4', {}, 'Timeline'),
    el('table', {}, el('tbody', {}, ...steps.map((step) => el('tr', { data: { event: step.event } },
      el('td', {}, new Date(step.at * 1000).toLocaleString('en-GB')),
      el('td', {}, step.event),
      el('td', { class: 'reason' }, splitReason(step.text)[0]))))));
}

// What an admin may do to it: retry or delete a dead task, cancel a queued or delayed one.
function taskActions(found) {
  if (!isAdmin() || found.found !== 'live') return null;
  const t = found.task;
  const buttons = [];
  if (t.state === 'dead') {
    buttons.push(button('Retry', () => act(`tasks/${t.id}/retry`), { data: { action: 'retry' } }),
      button('Delete', () => act(`tasks/${t.id}/delete`, `Drop dead task ${t.id} for good?`),
        { class: 'danger', data: { action: 'delete' } }));
  } else if (t.state === 'queued' || t.state === 'delayed') {
    buttons.push(button('Cancel', () => act(`tasks/${t.id}/cancel`, `Cancel task ${t.id}?`),
      { class: 'danger', data: { action: 'cancel' } }));
  }
  return buttons.length ? el('p', { class: 'controls task-actions' }, ...buttons) : null;
}

function renderTask(found) {
  const id = found.found === 'live' ? found.task.id : found.id;
  $('task-answer').replaceChildren(el('h3', {}, `Task ${id}: ${taskState(found)}`),
    ...TASK_SECTIONS.map((section) => section(found)).filter((node) => node));
}

// The task page's id, from its link (#task/ID), or none.
function linkedTask() {
  const [name, id] = location.hash.slice(1).split('/');
  return name === 'task' && /^[0-9]+$/.test(id || '') ? Number(id) : null;
}

async function loadTask() {
  const id = linkedTask();
  if (id === null) { $('task-answer').replaceChildren(); return; }
  $('task-id').value = id;
  renderTask(await api(`tasks/${id}`));
}

function lookUp(event) {
  event.preventDefault();
  const wanted = `#task/${Number($('task-id').value)}`;
  if (location.hash === wanted) show(); else location.hash = wanted;
}

// -- finished tasks: the history, searched, newest first -------------------------

const FINISHED_PAGE = 50;
// The cursor each page shown starts from (null: the newest), and the next page's.
let finishedPages = [null];
let finishedNext = null;

function finishedQuery(before, limit) {
  const query = new URLSearchParams();
  for (const field of ['id', 'key', 'type', 'queue', 'state']) {
    const value = $(`finished-${field}`).value.trim();
    if (value) query.set(field, value);
  }
  if (before !== null) query.set('before', before);
  query.set('limit', limit);
  return query.toString();
}

// A page of matches: the daemon reads a bounded slice of its history per
// request (one reactor turn each), so a sparse search follows its cursor.
// Each load is numbered: one overtaken by a later (a search sent while the
// page's first load still follows its cursor) shows nothing.
let finishedLoads = 0;

async function loadFinished() {
  const load = ++finishedLoads;
  const tasks = [];
  let found;
  let before = finishedPages[finishedPages.length - 1];
  let scanned = 0;
  do {
    found = await api(`finished?${finishedQuery(before, FINISHED_PAGE - tasks.length)}`);
    if (load !== finishedLoads) return;
    tasks.push(...found.tasks);
    scanned += found.scanned;
    before = found.next;
  } while (tasks.length < FINISHED_PAGE && before !== null);
  finishedNext = before;
  const first = (finishedPages.length - 1) * FINISHED_PAGE;
  fill('finished-total', `${count(found.kept)} kept (at most ${count(found.limit)}), newest first; ` +
    (tasks.length ? `matches ${count(first + 1)} to ${count(first + tasks.length)} shown` : 'none matching') +
    ` (${count(scanned)} read)`);
  $('finished-rows').replaceChildren(...tasks.map((t) => el('tr', { data: { task: t.id, state: t.state } },
    el('td', { class: 'number' }, taskLink(t.id)),
    el('td', { class: `state ${t.state}` }, t.state),
    el('td', {}, t.type),
    el('td', {}, t.queue),
    el('td', {}, t.key || '–'),
    el('td', { class: 'number' }, t.attempts),
    el('td', {}, when(t.finished_at)),
    el('td', { class: 'number' }, seconds(t.run)),
    el('td', { class: 'reason' }, t.reason || ''))));
  $('finished-newer').disabled = finishedPages.length === 1;
  $('finished-older').disabled = finishedNext === null;
}

function pageFinished(step) {
  if (step > 0) finishedPages.push(finishedNext); else if (finishedPages.length > 1) finishedPages.pop();
  show();
}

// -- bulk actions: a filter, its dry run's count, then the action ----------------

// The filter's query (with the dry run's flag), from the form.
function bulkQuery(dryRun) {
  const query = new URLSearchParams();
  for (const field of ['queue', 'type', 'key', 'older', 'newer', 'reason', 'to']) {
    const value = $(`bulk-${field}`).value.trim();
    if (value) query.set(field, value);
  }
  const states = [...document.querySelectorAll('#bulk-form input[name=states]:checked')].map((box) => box.value);
  if (states.length) query.set('states', states.join(','));
  if (dryRun) query.set('dry_run', '1');
  return `bulk/${$('bulk-action').value}?${query}`;
}

// The last dry run's count and the query it ran (the action runs only that one).
let bulkCounted = null;

async function bulkPost(dryRun) {
  const path = bulkQuery(dryRun);
  const action = $('bulk-action').value;
  if (!dryRun) {
    if (!bulkCounted || bulkCounted.path !== bulkQuery(true)) return;
    if (!window.confirm(`${action} the tasks that match? The dry run counted ${bulkCounted.matched}.`)) return;
  }
  $('bulk-run').disabled = true;
  try {
    const done = await api(path, { method: 'POST', headers: { 'X-Quicx-CSRF': state.csrf || '' } });
    const sample = done.sample.length
      ? el('p', { class: 'sample' }, `${dryRun ? 'among them' : 'among those'}: `, ...linkedIds(done.sample, done.matched))
      : null;
    const summary = dryRun
      ? `dry run: ${count(done.matched)} task(s) match (of ${count(done.examined)} looked at)`
      : `${done.action}: ${count(done.acted)} of ${count(done.matched)} matching task(s) acted on, ${count(done.skipped)} skipped`;
    $('bulk-result').replaceChildren(el('p', { class: 'summary', data: { matched: done.matched, acted: done.acted } }, summary), sample);
    bulkCounted = dryRun ? { path, matched: done.matched } : null;
    $('bulk-run').textContent = dryRun ? `${action} ${done.matched} task(s)` : 'Run';
    $('bulk-run').disabled = !dryRun || !done.matched;
  } catch (error) {
    $('bulk-result').replaceChildren(el('p', { class: 'error' }, error.message));
    bulkCounted = null;
  }
}

// A changed filter needs a dry run again before its action.
function bulkChanged() {
  bulkCounted = null;
  $('bulk-run').disabled = true;
  $('bulk-run').textContent = 'Run';
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
    el('td', { class: 'number' }, taskLink(t.id)),
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

// What a worker runs now: each task's link, type and how long it has run.
function running(c) {
  if (!c.running.length) return '–';
  return el('ul', { class: 'running' }, ...c.running.map((t) => el('li', { data: { task: t.id } },
    taskLink(t.id), ` ${t.type} (${t.queue}), ${seconds(t.for)}`)),
  ...(c.held > c.running.length ? [el('li', {}, `and ${count(c.held - c.running.length)} more`)] : []));
}

// What a worker said it is (ANNOUNCE): its name, on which host, as which process.
function announced(c) {
  if (c.role !== 'worker' || !(c.name || c.host || c.pid)) return '–';
  return `${c.name || '?'} on ${c.host || '?'}` + (c.pid ? ` (pid ${c.pid})` : '');
}

// An admin's steering of a worker: quiet an active one, terminate one not yet terminating.
function steering(c) {
  if (!isAdmin() || c.role !== 'worker') return null;
  const data = (action) => ({ data: { action, worker: c.id } });
  return el('td', { class: 'actions' },
    c.state === 'active' ? button('Quiet', () => act(`workers/${c.id}/quiet`), data('quiet')) : null,
    c.state !== 'terminating' ? button('Terminate', () => act(`workers/${c.id}/terminate`,
      `Terminate worker ${c.id}? What it runs is queued again, and its connection closed.`),
    { class: 'danger', ...data('terminate') }) : null);
}

// The workers page's columns: a heading and a cell per connection; a new column is one more line.
const WORKER_COLUMNS = [
  ['id', (c) => c.id, 'number'],
  ['role', (c) => c.role],
  ['worker', announced],
  ['types', (c) => (c.role === 'worker' ? (c.types ? c.types.join(', ') : 'all') : '–')],
  ['state', (c) => (c.role === 'worker' ? c.state || 'active' : '–')],
  ['peer', (c) => (c.identity ? `${c.peer} (${c.identity})` : c.peer)],
  ['client', (c) => c.client || '–'],
  ['queues', (c) => (c.role === 'worker' ? c.queues.join(', ') : '–')],
  ['holds / credits', (c) => (c.role === 'worker' ? `${c.held} / ${c.credits}` : '–'), 'number'],
  ['running now', running],
  ['idle', (c) => (c.role === 'worker' ? (c.idle ? 'idle' : 'busy') : '–')],
  ['silent for', (c) => seconds(c.silent_for), 'number'],
];

async function loadWorkers() {
  const connections = await api('workers');
  $('worker-rows').replaceChildren(...connections.map((c) => el('tr', { data: { connection: c.id } },
    ...WORKER_COLUMNS.map(([, cell, cls]) => el('td', cls ? { class: cls } : {}, cell(c))),
    steering(c))));
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
  const name = location.hash.slice(1).split('/')[0];
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
    else if (current === 'finished') await loadFinished();
    else if (current === 'task') await loadTask();
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
  $('finished-form').addEventListener('submit', (event) => { event.preventDefault(); finishedPages = [null]; show(); });
  $('finished-newer').addEventListener('click', () => pageFinished(-1));
  $('finished-older').addEventListener('click', () => pageFinished(1));
  $('dead-form').addEventListener('submit', (event) => { event.preventDefault(); show(); });
  $('bulk-form').addEventListener('submit', (event) => { event.preventDefault(); bulkPost(true); });
  $('bulk-form').addEventListener('input', bulkChanged);
  $('bulk-run').addEventListener('click', () => bulkPost(false));
  document.querySelector('[data-action="replay-all"]').addEventListener(
    'click', () => act(withQueue('dead/replay'), `Replay every dead task of ${whichQueue()}?`));
  document.querySelector('[data-action="purge-dead"]').addEventListener(
    'click', () => act(withQueue('dead/purge'), `Drop every dead task of ${whichQueue()} for good?`));
  document.querySelector('[data-action="quiet-all"]').addEventListener(
    'click', () => act('workers/quiet', 'Quiet every worker? Each finishes what it runs and is dealt no more.'));
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
