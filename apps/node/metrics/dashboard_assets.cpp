// The dashboard's page, script and style, served from the binary (no CDN,
// nothing fetched from the internet). The script builds every element with
// textContent: task ids, agent output and error texts are untrusted and
// never become markup.

#include "dashboard.hpp"

namespace tasksup::app {

const std::string_view dashboard_html = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tasksup</title>
<link rel="stylesheet" href="/dashboard.css">
</head>
<body>
<header>
  <h1>tasksup</h1>
  <nav>
    <a href="#/" id="nav-tasks">Tasks</a>
    <a href="#/agents" id="nav-agents">Agents</a>
    <a href="/metrics">Metrics</a>
  </nav>
  <span id="conn" class="muted">connecting…</span>
</header>
<main id="main"></main>
<script src="/dashboard.js"></script>
</body>
</html>
)html";

const std::string_view dashboard_css = R"css(
:root { --bg:#fafafa; --fg:#1d2330; --muted:#6b7280; --line:#e5e7eb;
  --ok:#15803d; --bad:#b91c1c; --warn:#b45309; --run:#1d4ed8; --card:#fff; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, sans-serif; background:var(--bg);
  color:var(--fg); }
header { display:flex; gap:24px; align-items:baseline; padding:10px 20px;
  background:#1d2330; color:#fff; }
header h1 { font-size:18px; margin:0; }
header a { color:#cbd5e1; text-decoration:none; margin-right:14px; }
header a.active { color:#fff; border-bottom:2px solid #60a5fa; }
main { padding:16px 20px; }
h2 { font-size:16px; margin:18px 0 8px; }
table { border-collapse:collapse; width:100%; background:var(--card); }
th, td { text-align:left; padding:6px 10px; border-bottom:1px solid var(--line);
  white-space:nowrap; }
th { font-weight:600; color:var(--muted); font-size:12px;
  text-transform:uppercase; }
td.wrap { white-space:normal; }
tr.row:hover { background:#f1f5f9; cursor:pointer; }
.muted { color:var(--muted); }
.state-running { color:var(--run); font-weight:600; }
.state-backoff { color:var(--warn); font-weight:600; }
.state-queued { color:var(--muted); }
.outcome-succeeded { color:var(--ok); font-weight:600; }
.outcome-failed { color:var(--bad); font-weight:600; }
.outcome-stopped { color:var(--warn); }
.buttons button { margin-right:8px; padding:4px 12px; border:1px solid #94a3b8;
  background:#fff; border-radius:4px; cursor:pointer; }
.buttons button:disabled { opacity:.4; cursor:default; }
.timeline { position:relative; height:34px; background:var(--card);
  border:1px solid var(--line); margin:6px 0 4px; }
.bar { position:absolute; top:5px; height:24px; border-radius:3px; min-width:6px;
  color:#fff; font-size:11px; padding:4px 4px; overflow:hidden; }
.bar.ok { background:var(--ok); } .bar.bad { background:var(--bad); }
.bar.run { background:var(--run); }
.bar.wait { background:repeating-linear-gradient(45deg,#fde68a,#fde68a 4px,
  #fef3c7 4px,#fef3c7 8px); color:#92400e; }
pre.output { background:#0f172a; color:#e2e8f0; padding:10px; max-height:360px;
  overflow:auto; font-size:12px; }
.card { background:var(--card); border:1px solid var(--line); padding:10px 14px;
  margin-bottom:10px; }
.kv span { margin-right:18px; }
#message { margin:8px 0; min-height:18px; }
td.phase-skipped { color:var(--muted); font-style:italic; }
#graph { background:var(--card); border:1px solid var(--line); }
#graph .step rect { fill:#fff; stroke:#94a3b8; }
#graph .step { cursor:pointer; font-size:12px; }
#graph .step.last-normal rect { fill:#dcfce7; stroke:var(--ok); }
#graph .step.last-failed rect { fill:#fee2e2; stroke:var(--bad); }
#graph .step.last-stopped rect { fill:#fef3c7; stroke:var(--warn); }
#graph .step.phase-running rect { stroke:var(--run); stroke-width:2; }
#graph .step.phase-skipped rect { fill:#f1f5f9; stroke-dasharray:4 3; }
#graph .step.phase-skipped text { fill:var(--muted); }
#graph .edge { stroke:#94a3b8; stroke-width:1.2; marker-end:url(#arrow); }
)css";

const std::string_view dashboard_js = R"js('use strict';
// tasksup dashboard: reloads the view when the node's event stream
// (/api/stream) says tasks changed; polls once a second while the stream is
// down and tries it again every 10 s.
const main = document.getElementById('main');
let skew = 0; // node clock minus browser clock, seconds
let timer = null;
let stream = null;
let streaming = false;
let streamMessages = 0;
const pageStep = 50;
let pageSize = pageStep;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'onclick') e.addEventListener('click', v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) {
    if (k === null || k === undefined) continue;
    e.appendChild(typeof k === 'string' || typeof k === 'number'
      ? document.createTextNode(String(k)) : k);
  }
  return e;
}

function now() { return Date.now() / 1000 + skew; }

function dur(s) {
  if (s === null || s === undefined || !isFinite(s)) return '-';
  s = Math.max(0, s);
  if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + 's';
  const m = Math.floor(s / 60), r = Math.round(s % 60);
  if (m < 60) return m + 'm' + (r ? ' ' + r + 's' : '');
  const h = Math.floor(m / 60);
  return h + 'h ' + (m % 60) + 'm';
}

function iso(ts) {
  return ts ? new Date(ts * 1000).toISOString().replace(/\.\d+Z$/, 'Z') : '-';
}

async function getJson(url) {
  const r = await fetch(url, {cache: 'no-store'});
  if (!r.ok) throw new Error(url + ': ' + r.status + ' ' + (await r.text()));
  return r.json();
}

function setConn(ok, text) {
  const c = document.getElementById('conn');
  c.textContent = text;
  c.className = ok ? 'muted' : 'outcome-failed';
}

function nextRetryCell(t) {
  const td = el('td', {class: 'next-retry'});
  if (t.state === 'backoff' && t.next_retry_ts) {
    td.dataset.deadline = t.next_retry_ts;
    td.textContent = 'in ' + dur(t.next_retry_ts - now());
  } else if (t.state === 'quota_wait' && t.resume_ts) {
    td.dataset.deadline = t.resume_ts;
    td.title = 'waiting for the quota reset at ' + iso(t.resume_ts);
    td.textContent = 'in ' + dur(t.resume_ts - now());
  } else if (t.state === 'not_now' && t.resume_ts) {
    td.dataset.deadline = t.resume_ts;
    td.title = 'not now: trying again at ' + iso(t.resume_ts);
    td.textContent = 'in ' + dur(t.resume_ts - now());
  } else td.textContent = '-';
  return td;
}

function tick() {
  for (const td of document.querySelectorAll('[data-deadline]'))
    td.textContent = 'in ' + dur(Number(td.dataset.deadline) - now());
  for (const td of document.querySelectorAll('[data-since]'))
    td.textContent = dur(now() - Number(td.dataset.since));
}
setInterval(tick, 250);

async function control(id, action) {
  const msg = document.getElementById('message');
  try {
    const r = await fetch('/api/tasks/' + encodeURIComponent(id) + '/' + action,
      {method: 'POST', headers: {'X-Tasksup-CSRF': '1'}});
    const body = await r.json().catch(() => ({message: r.statusText}));
    msg.textContent = body.message || (action + ': ' + r.status);
    msg.className = r.ok && body.ok ? 'outcome-succeeded' : 'outcome-failed';
  } catch (e) {
    msg.textContent = String(e);
    msg.className = 'outcome-failed';
  }
  refresh();
}

function taskRow(t) {
  const tr = el('tr', {class: 'row', 'data-task': t.task_id,
                       onclick: () => { location.hash = '#/task/' +
                         encodeURIComponent(t.task_id); }});
  const age = el('td', {class: 'age'});
  if (t.submitted_ts) {
    if (t.finished_ts) age.textContent = dur(t.finished_ts - t.submitted_ts);
    else { age.dataset.since = t.submitted_ts; age.textContent =
      dur(now() - t.submitted_ts); }
  } else age.textContent = '-';
  let retries = String(t.retry_count);
  if (t.max_retries > 0 && t.state !== 'done') retries += '/' + t.max_retries;
  tr.append(
    el('td', {class: 'task'}, t.task_id),
    el('td', {class: 'state state-' + t.state}, t.state),
    el('td', {class: 'agent'}, t.agent_id || '-'),
    el('td', {class: 'attempt'}, t.attempt),
    el('td', {class: 'retries'}, retries),
    age, nextRetryCell(t),
    el('td', {class: 'outcome' + (t.outcome ? ' outcome-' + t.outcome : '')},
       t.outcome ? t.outcome + (t.outcome !== 'succeeded' && t.exit_code >= 0
         ? ' (exit ' + t.exit_code + ')' : '') : '-'),
    el('td', {class: 'wrap decision muted'}, t.last_decision || ''));
  return tr;
}

// The node's schedules: when each fires next, its last run and the one
// still going.
function scheduleSection(list) {
  if (!list || !list.length) return null;
  const when = ts => ts === null ? '-' : iso(ts) + (ts >= now()
    ? ' (in ' + dur(ts - now()) + ')' : ' (' + dur(now() - ts) + ' ago)');
  return el('div', {},
    el('h2', {}, 'Schedules'),
    el('table', {id: 'schedules'},
      el('thead', {}, el('tr', {}, ...['Schedule', 'Timing', 'Overlap',
        'Next run', 'Last run', 'Running', 'Runs', 'Skipped']
        .map(h => el('th', {}, h)))),
      el('tbody', {}, ...list.map(x => el('tr', {'data-schedule': x.name},
        el('td', {}, x.name), el('td', {}, x.timing), el('td', {}, x.overlap),
        el('td', {class: 'next-run'}, x.paused ? 'paused' : when(x.next_ts)),
        el('td', {}, when(x.last_ts)),
        el('td', {}, x.running ? el('a', {href: '#/task/' +
          encodeURIComponent(x.running)}, x.running) : '-'),
        el('td', {}, x.runs), el('td', {}, x.skipped))))));
}

async function showTasks() {
  const data = await getJson('/api/tasks?limit=' + pageSize);
  // A node from before schedules answers 404: no section.
  const schedules = await getJson('/api/schedules').catch(() => []);
  skew = data.now - Date.now() / 1000;
  const counts = data.counts;
  const more = data.next === null ? null : el('p', {},
    el('button', {id: 'more', onclick: () => {
      pageSize = Math.min(pageSize + pageStep, 1000); refresh(); }},
      'Show ' + pageStep + ' more'),
    el('span', {class: 'muted', id: 'shown'}, ' ' + data.tasks.length +
       ' of ' + data.total + ' shown, newest first'));
  const table = el('table', {id: 'tasks'},
    el('thead', {}, el('tr', {}, ...['Task', 'State', 'Agent', 'Attempt',
      'Retries', 'Age', 'Next retry', 'Outcome', 'Last decision']
      .map(h => el('th', {}, h)))),
    el('tbody', {}, ...data.tasks.map(taskRow)));
  main.replaceChildren(
    el('h2', {}, 'Tasks'),
    el('p', {class: 'muted', id: 'summary'},
       `${counts.running} running · ${counts.backoff} waiting to retry · ` +
       `${counts.queued} queued · ${counts.done} done`),
    data.tasks.length ? table : el('p', {class: 'muted'}, 'no tasks yet'),
    ...(more ? [more] : []),
    ...(scheduleSection(schedules) ? [scheduleSection(schedules)] : []));
}

function eventLine(e) {
  switch (e.event) {
    case 'task_submitted': return 'submitted (agents: ' +
      (e.agents || []).join(', ') + ')';
    case 'attempt_started': return 'attempt ' + e.attempt + ' started: ' +
      e.agent_id + ' (' + e.agent_cli + ', ' + e.container_id + ')';
    case 'attempt_exited': return 'attempt ' + e.attempt + ' exited ' +
      e.exit_code + (e.signal ? ' (signal ' + e.signal + ')' : '') +
      (e.oom_killed ? ' OOM-killed' : '') + ' after ' + dur(e.duration_s) +
      (e.infrastructure_error ? ': ' + e.infrastructure_error : '');
    case 'classified': return 'classified ' + e['class'] + ' by rule ' +
      e.rule + (e.line ? ' — matched: "' + e.line + '"' : '') +
      (e.retry_after_s !== null && e.retry_after_s !== undefined
        ? ' (retry-after hint ' + e.retry_after_s + 's)' : '');
    case 'retry_scheduled': if (e.restart > 0) return 'restart ' +
      e.restart + ' of ' + e.agent + ' in ' + dur(e.delay_s) + ' (ran ' +
      dur(e.ran_s || 0) + (e.stable ? ' stably' : '') + ')' +
      (e.reason ? ': ' + e.reason : '');
      return 'retry ' + e.retry_count + '/' +
      e.max_retries + ' of ' + e.agent + ' in ' + dur(e.delay_s) +
      ' — delay from ' + e.delay_source + ' (schedule step ' +
      dur(e.scheduled_s) + (e.capped ? ', capped' : '') + ')' +
      (e.reason ? ': ' + e.reason : '');
    case 'agent_switched': return 'fallback ' + e.from + ' → ' + e.to +
      (e.reason ? ': ' + e.reason : '');
    case 'user_stop': return 'user stop (' + e.mode + '): ' + e.message;
    case 'task_done': return 'task ' + e.outcome + ', exit ' + e.exit_code +
      (e.error ? ': ' + e.error : '');
    case 'escalated': return 'escalated (' + e.outcome + ') to ' + e.parent;
    case 'warning': return 'warning: ' + e.message;
    case 'group': return e.change === 'restart'
      ? 'restart ' + e.restarts + ' of ' + (e.members || []).join(', ') +
        ' after ' + e.member + ' ended ' + e.how
      : e.change === 'ended'
        ? 'group ended ' + e.how + (e.member ? ' (' + e.member + ')' : '') +
          ': ' + e.outcome
        : e.change === 'started' ? 'every member started'
        : e.change.replace(/_/g, ' ') + ' ' + e.member +
          (e.how ? ': ' + e.how : '');
    default: return e.event;
  }
}

function timeline(events, task) {
  const start = task.submitted_ts || (events[0] && events[0].ts) || now();
  const end = task.finished_ts || now();
  const span = Math.max(end - start, 0.001);
  const box = el('div', {class: 'timeline', id: 'timeline'});
  const pos = ts => ((ts - start) / span * 100).toFixed(3) + '%';
  const open = {};
  const bars = [];
  for (const e of events) {
    if (e.event === 'attempt_started') open[e.attempt] = e;
    if (e.event === 'attempt_exited') {
      const s = open[e.attempt];
      const from = s ? s.ts : e.ts - e.duration_s;
      bars.push({from, to: e.ts, cls: e.exit_code === 0 ? 'ok' : 'bad',
                 label: '#' + e.attempt + ' ' + (s ? s.agent_id : '')});
      delete open[e.attempt];
    }
    if (e.event === 'retry_scheduled')
      bars.push({from: e.ts, to: Math.min(e.ts + e.delay_s, end), cls: 'wait',
                 label: 'wait ' + dur(e.delay_s)});
  }
  for (const s of Object.values(open))
    bars.push({from: s.ts, to: end, cls: 'run', label: '#' + s.attempt + ' ' +
               s.agent_id});
  for (const b of bars) {
    const bar = el('div', {class: 'bar ' + b.cls, title: b.label + ' (' +
      dur(b.to - b.from) + ')'}, b.label);
    bar.style.left = pos(b.from);
    bar.style.width = 'calc(' + pos(b.to) + ' - ' + pos(b.from) + ')';
    box.appendChild(bar);
  }
  return box;
}

async function showTask(id) {
  const data = await getJson('/api/tasks/' + encodeURIComponent(id));
  skew = data.now - Date.now() / 1000;
  const t = data.task;
  const live = t.state !== 'done';
  const btn = (label, action, enabled) => el('button',
    {'data-action': action, onclick: () => control(t.task_id, action)}, label);
  const buttons = el('div', {class: 'buttons'},
    btn('Stop', 'stop'), btn('Kill', 'kill'), btn('Retry now', 'retry-now'),
    btn('Fallback now', 'fallback-now'),
    t.state === 'paused' ? btn('Resume', 'resume') : btn('Pause', 'pause'));
  // A group takes stop and kill; the other controls are its tasks'.
  const group = Array.isArray(t.tree);
  for (const b of buttons.querySelectorAll('button'))
    b.disabled = !live || (group && b.dataset.action !== 'stop' &&
                           b.dataset.action !== 'kill');
  const steps = group && t.tree[0].strategy === 'steps'
    ? stepGraph(t.task_id, t.tree) : null;
  const members = group ? el('table', {id: 'tree'},
    el('thead', {}, el('tr', {}, ...['Member', 'Kind', 'State', 'Restarts',
      'Last run'].map(h => el('th', {}, h)))),
    el('tbody', {}, ...t.tree.map(r => el('tr', {'data-member': r.id},
      el('td', {style: 'padding-left:' + (0.5 + 1.5 * r.depth) + 'em'},
        r.depth === 0 ? el('b', {}, r.id)
          : el('a', {href: '#/task/' + encodeURIComponent(r.id)}, r.id)),
      el('td', {}, r.kind), el('td', {class: 'phase-' + r.phase}, r.phase),
      el('td', {}, r.restarts), el('td', {}, r.last || '-'))))) : null;
  const decisions = el('tbody');
  const output = {};
  for (const e of data.events) {
    if (e.event === 'log') {
      (output[e.attempt] = output[e.attempt] || []).push(
        (e.stream === 'stderr' ? '! ' : '') + e.line);
      continue;
    }
    decisions.appendChild(el('tr', {class: 'ev ev-' + e.event},
      el('td', {}, iso(e.ts)), el('td', {}, e.attempt),
      el('td', {}, e.event), el('td', {class: 'wrap'}, eventLine(e))));
  }
  // The checked answer of the run that succeeded (its last task_done).
  const done = data.events.filter(e => e.event === 'task_done' && e.answer);
  const answer = done.length ? el('div', {},
    el('h2', {}, 'Answer'),
    el('pre', {id: 'task-answer', class: 'output'},
       JSON.stringify(done[done.length - 1].answer, null, 2))) : null;
  const outs = Object.keys(output).map(a => el('div', {},
    el('h2', {}, 'Output of attempt ' + a),
    el('pre', {class: 'output', 'data-attempt': a}, output[a].join('\n'))));
  const since = el('span', {}, 'age ');
  const ageText = el('b', {});
  if (t.submitted_ts && !t.finished_ts) ageText.dataset.since = t.submitted_ts;
  ageText.textContent = t.submitted_ts
    ? dur((t.finished_ts || now()) - t.submitted_ts) : '-';
  since.appendChild(ageText);
  main.replaceChildren(
    el('h2', {id: 'task-title'}, (group ? 'Group ' : 'Task ') + t.task_id),
    el('div', {class: 'card kv'},
      el('span', {}, 'state ', el('b', {id: 'task-state',
        class: 'state-' + t.state}, t.state)),
      el('span', {}, 'agent ', el('b', {}, t.agent_id || '-')),
      el('span', {}, 'attempt ', el('b', {}, t.attempt)),
      since,
      el('span', {}, 'submitted ', el('b', {}, iso(t.submitted_ts))),
      el('span', {}, 'outcome ', el('b', {id: 'task-outcome',
        class: t.outcome ? 'outcome-' + t.outcome : ''}, t.outcome || '-')),
      t.waiting_for && live ? el('div', {id: 'task-waits', class: 'muted'},
        'waiting for ' + t.waiting_for) : null,
      t.error ? el('div', {class: 'outcome-failed'}, t.error) : null),
    buttons, el('div', {id: 'message'}),
    // A group's members where a task's attempts go.
    el('h2', {}, group ? 'Members' : 'Attempts'),
    ...(steps ? [steps] : []),
    group ? members : timeline(data.events, t),
    el('h2', {}, 'Decisions'),
    el('table', {id: 'decisions'}, el('thead', {}, el('tr', {},
      ...['Time', 'Attempt', 'Event', 'What and why'].map(h => el('th', {}, h)))),
      decisions),
    ...(answer ? [answer] : []), ...outs);
}

// An SVG element.
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids)
    e.appendChild(typeof k === 'string' ? document.createTextNode(k) : k);
  return e;
}

// Most steps the graph draws; the table below lists them all.
const graphSteps = 200;

// A workflow's steps as a graph: a column per step's longest chain of
// dependencies, an arrow from each step it depends on, each box coloured by
// how its run went (see the CSS) and a link to its page.
function stepGraph(workflow, tree) {
  const rows = tree.filter(r => r.depth === 1);
  if (rows.length > graphSteps)
    return el('p', {id: 'graph-note', class: 'muted'}, 'The graph is drawn '
      + 'for at most ' + graphSteps + ' steps; this workflow has '
      + rows.length + '.');
  const byId = new Map(rows.map(r => [r.id, r]));
  // Kahn's order: no recursion, whatever the chain's length.
  const col = new Map(), waiting = new Map(), next = new Map();
  for (const r of rows) {
    const deps = (r.depends_on || []).filter(d => byId.has(d));
    waiting.set(r.id, deps.length);
    for (const d of deps) (next.get(d) || next.set(d, []).get(d)).push(r.id);
  }
  const ready = rows.filter(r => waiting.get(r.id) === 0).map(r => r.id);
  for (const id of ready) col.set(id, 0);
  while (ready.length) {
    const id = ready.shift();
    for (const n of next.get(id) || []) {
      col.set(n, Math.max(col.get(n) || 0, col.get(id) + 1));
      waiting.set(n, waiting.get(n) - 1);
      if (waiting.get(n) === 0) ready.push(n);
    }
  }
  const w = 150, h = 30, gapX = 50, gapY = 16, pad = 12;
  const place = new Map(), perCol = [];
  for (const r of rows) {
    const c = col.get(r.id) || 0;
    perCol[c] = (perCol[c] || 0) + 1;
    place.set(r.id, {x: pad + c * (w + gapX), y: pad + (perCol[c] - 1) * (h + gapY)});
  }
  const width = pad * 2 + perCol.length * (w + gapX) - gapX;
  const height = pad * 2 + Math.max(1, ...perCol) * (h + gapY) - gapY;
  const g = svg('svg', {id: 'graph', width: width, height: height,
                        viewBox: '0 0 ' + width + ' ' + height},
    svg('defs', {}, svg('marker', {id: 'arrow', viewBox: '0 0 10 10', refX: 10,
      refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'},
      svg('path', {d: 'M 0 0 L 10 5 L 0 10 z', fill: '#94a3b8'}))));
  for (const r of rows)
    for (const d of r.depends_on || []) {
      const a = place.get(d), b = place.get(r.id);
      if (!a) continue;
      g.appendChild(svg('line', {class: 'edge', 'data-from': d, 'data-to': r.id,
        x1: a.x + w, y1: a.y + h / 2, x2: b.x, y2: b.y + h / 2}));
    }
  const prefix = workflow + '.';
  for (const r of rows) {
    const p = place.get(r.id);
    const name = r.id.startsWith(prefix) ? r.id.slice(prefix.length) : r.id;
    const box = svg('g', {class: 'step phase-' + r.phase
      + (r.last ? ' last-' + r.last : ''), 'data-step': r.id},
      svg('title', {}, r.id + ': ' + r.phase + (r.last ? ', ' + r.last : '')),
      svg('rect', {x: p.x, y: p.y, width: w, height: h, rx: 4}),
      svg('text', {x: p.x + 8, y: p.y + h / 2 + 4},
          name.length > 20 ? name.slice(0, 19) + '…' : name));
    box.addEventListener('click',
      () => { location.hash = '#/task/' + encodeURIComponent(r.id); });
    g.appendChild(box);
  }
  return el('div', {}, el('h2', {}, 'Steps'), g);
}

async function showAgents() {
  const data = await getJson('/api/agents');
  const rows = data.agents.map(a => el('tr', {'data-agent': a.agent_id},
    el('td', {}, a.agent_id),
    el('td', {class: 'rate'}, Math.round(a.success_rate * 100) + '%'),
    el('td', {}, a.attempts),
    el('td', {}, dur(a.median_duration_s)), el('td', {}, dur(a.p90_duration_s)),
    el('td', {class: 'wrap'}, Object.entries(a.failure_classes)
      .map(([k, v]) => k + ' ×' + v).join(', ') || '-'),
    el('td', {class: a.breaker === 'open' ? 'outcome-failed' : ''},
       a.breaker || '-'),
    el('td', {class: 'wrap muted'}, a.last_failure
      ? iso(a.last_failure.ts) + ' ' + (a.last_failure['class'] || '') + ': ' +
        (a.last_failure.line || 'exit ' + a.last_failure.exit_code) : '-')));
  main.replaceChildren(
    el('h2', {}, 'Agents'),
    data.agents.length ? el('table', {id: 'agents'},
      el('thead', {}, el('tr', {}, ...['Agent', 'Success', 'Attempts',
        'Median', 'p90', 'Failure classes', 'Breaker', 'Last failure']
        .map(h => el('th', {}, h)))), el('tbody', {}, ...rows))
      : el('p', {class: 'muted'}, 'no attempts yet'),
    el('h2', {}, 'Suggested fallback order'),
    el('ol', {id: 'fallback-order'}, ...data.fallback_order.map(s =>
      el('li', {}, el('b', {}, s.agent_id), ' — ', s.why))),
    el('h2', {}, 'Restarting often (last hour)'),
    (data.restarting || []).length ? el('table', {id: 'restarting'},
      el('thead', {}, el('tr', {}, ...['Task', 'Agent', 'Restarts',
        'Last restart', 'Recovery'].map(h => el('th', {}, h)))),
      el('tbody', {}, ...data.restarting.map(r => el('tr',
        {'data-task': r.task_id},
        el('td', {}, el('a', {href: '#/task/' + encodeURIComponent(r.task_id)},
          r.task_id)),
        el('td', {}, r.agent_id), el('td', {}, r.restarts_last_hour),
        el('td', {}, iso(r.last_restart_ts)),
        el('td', {class: r.failing_since_ts !== null ? 'outcome-failed' : ''},
          r.failing_since_ts !== null
            ? 'failing for ' + dur(data.now - r.failing_since_ts)
            : r.last_recovery_s !== null
              ? 'recovered in ' + dur(r.last_recovery_s) : '-')))))
      : el('p', {class: 'muted', id: 'restarting'}, 'no task restarted 3 ' +
        'or more times in the last hour'));
}

let loading = false;
let again = false;

async function refresh() {
  // One load at a time; a change that comes meanwhile loads once more.
  if (loading) { again = true; return; }
  loading = true;
  const h = location.hash || '#/';
  for (const a of document.querySelectorAll('nav a'))
    a.classList.toggle('active', a.getAttribute('href') === h);
  try {
    if (h.startsWith('#/task/'))
      await showTask(decodeURIComponent(h.slice(7)));
    else if (h === '#/agents') await showAgents();
    else await showTasks();
    setConn(true, (streaming ? 'live' : 'polling') + ' · updated ' +
      new Date().toLocaleTimeString());
  } catch (e) {
    setConn(false, String(e.message || e));
  }
  loading = false;
  if (again) { again = false; refresh(); }
}

function poll(on) {
  if (on && !timer) timer = setInterval(refresh, 1000);
  if (!on && timer) { clearInterval(timer); timer = null; }
}

function openStream() {
  if (!window.EventSource) { poll(true); return; }
  stream = new EventSource('/api/stream');
  stream.addEventListener('hello', () => {
    streaming = true;
    document.body.dataset.stream = 'open';
    poll(false);
    refresh();
  });
  stream.addEventListener('change', () => {
    document.body.dataset.streamMessages = ++streamMessages;
    refresh();
  });
  stream.onerror = () => {
    // The node restarted, or dropped us for reading too slowly: poll
    // meanwhile, and try the stream again.
    stream.close();
    stream = null;
    streaming = false;
    document.body.dataset.stream = 'polling';
    poll(true);
    setTimeout(openStream, 10000);
  };
}

window.addEventListener('hashchange', refresh);
refresh();
openStream();
)js";

} // namespace tasksup::app
