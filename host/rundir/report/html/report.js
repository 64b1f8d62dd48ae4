// The rollout table and trajectory view of a proctor report. The table is
// built from the #rows JSON; a rollout's record and transcript sit gzipped
// in the block #t-<index> and are decoded only when the rollout is opened.
// Text from the run only ever reaches the page as text nodes, never as HTML.
(function () {
  'use strict';
  const body = document.body;
  const rows = JSON.parse(document.getElementById('rows').textContent);
  const table = document.getElementById('table');
  const tbody = table.tBodies[0];
  const filter = document.getElementById('filter');
  const outcome = document.getElementById('outcome');
  const shown = document.getElementById('shown');
  const detail = document.getElementById('detail');
  const marks = JSON.parse(table.dataset.marks); // outcome: symbol

  // el builds an element; string children become text nodes.
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === 'class') e.className = attrs[k]; else e.setAttribute(k, attrs[k]);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }
  function text(x) { return typeof x === 'string' ? x : JSON.stringify(x, null, 2); }
  function fixed(n) { return x => (x == null || x < 0 ? '' : x.toFixed(n)); }

  // Columns: header, sort value, shown text.
  const order = JSON.parse(table.dataset.phases); // the order phases happen in
  const seen = new Set();
  for (const r of rows) for (const p in r.ph || {}) seen.add(p);
  const phases = order.filter(p => seen.has(p)).concat([...seen].filter(p => !order.includes(p)).sort());
  const cols = [
    { h: '#', v: r => r.i },
    { h: 'rollout', v: r => r.id },
    { h: 'category', v: r => r.cat || '' },
    { h: 'outcome', v: r => r.o, t: r => (marks[r.o] || '?') + ' ' + r.o + (r.ec ? ' (' + r.ec + ')' : '') },
    { h: 'reward', v: r => r.r, t: r => r.r.toFixed(3) },
    { h: 'tests', v: r => (r.tests[1] ? r.tests[0] / r.tests[1] : -1), t: r => (r.tests[1] ? r.tests[0] + '/' + r.tests[1] : '') },
    { h: 'turns', v: r => r.turns },
    { h: 'tokens in', v: r => r.tin },
    { h: 'tokens out', v: r => r.tout },
    { h: 'cost $', v: r => r.cost, t: r => (r.cost ? r.cost.toFixed(4) : '') },
  ].concat(phases.map(p => ({ h: p + ' s', v: r => (r.ph && p in r.ph ? r.ph[p] : -1), t: r => fixed(2)(r.ph && r.ph[p]) })),
    [{ h: 'total s', v: r => r.dur, t: r => r.dur.toFixed(1) }, { h: 'stop', v: r => r.stop || '' }]);

  const head = el('tr');
  cols.forEach((c, k) => head.append(el('th', { 'data-col': k, title: 'sort by ' + c.h }, c.h)));
  table.tHead.append(head);
  // Rows are drawn a page at a time, so a run of thousands opens fast.
  const PAGE = 100;
  function makeRow(r) {
    const tr = el('tr', { 'data-i': r.i });
    for (const c of cols) {
      const td = el('td', null, c.t ? c.t(r) : String(c.v(r)));
      if (c.h === 'outcome') td.className = 'o-' + r.o;
      tr.append(td);
    }
    return tr;
  }
  for (const r of rows) r.hay = [r.id, r.cat, r.o, r.ec, r.stop].join(' ').toLowerCase();

  // Sorting, filtering, paging, and their state across reloads of a live page.
  const key = 'proctor-report:' + location.pathname;
  let state = { f: '', o: '', c: 0, d: 1, p: 0 };
  try { state = Object.assign(state, JSON.parse(sessionStorage.getItem(key) || '{}')); } catch (e) { /* no storage */ }
  function save() { try { sessionStorage.setItem(key, JSON.stringify(state)); } catch (e) { /* no storage */ } }

  let view = rows;
  let opened = -1;
  // Text sorts with the numbers in it compared as numbers (task#2 before
  // task#10); numbers sort as numbers.
  const collate = new Intl.Collator(undefined, { numeric: true }).compare;
  function refresh() {
    const terms = state.f.toLowerCase().split(/\s+/).filter(Boolean);
    const c = cols[state.c] || cols[0];
    view = rows.filter(r => (!state.o || r.o === state.o) && terms.every(t => r.hay.includes(t)));
    view.sort((a, b) => {
      const x = c.v(a), y = c.v(b);
      const d = typeof x === 'number' ? x - y : collate(String(x), String(y));
      return state.d * d || a.i - b.i;
    });
    for (const th of head.children) {
      th.classList.toggle('asc', +th.dataset.col === state.c && state.d > 0);
      th.classList.toggle('desc', +th.dataset.col === state.c && state.d < 0);
    }
    draw();
  }
  function draw() {
    const pages = Math.max(1, Math.ceil(view.length / PAGE));
    state.p = Math.max(0, Math.min(state.p, pages - 1));
    const f = document.createDocumentFragment();
    for (const r of view.slice(state.p * PAGE, (state.p + 1) * PAGE)) {
      r.tr = r.tr || makeRow(r);
      r.tr.classList.toggle('open', r.i === opened);
      f.append(r.tr);
    }
    tbody.replaceChildren(f);
    shown.textContent = view.length + ' of ' + rows.length + ' rollouts';
    pageInfo.textContent = 'page ' + (state.p + 1) + ' of ' + pages;
    prev.disabled = state.p === 0;
    next.disabled = state.p >= pages - 1;
    save();
  }
  const prev = document.getElementById('prev');
  const next = document.getElementById('next');
  const pageInfo = document.getElementById('page');
  prev.addEventListener('click', () => { state.p--; draw(); });
  next.addEventListener('click', () => { state.p++; draw(); });
  head.addEventListener('click', e => {
    const th = e.target.closest('th');
    if (!th) return;
    const c = +th.dataset.col;
    state.d = state.c === c ? -state.d : 1;
    state.c = c;
    state.p = 0;
    refresh();
  });
  filter.value = state.f;
  outcome.value = state.o;
  filter.addEventListener('input', () => { state.f = filter.value; state.p = 0; refresh(); });
  outcome.addEventListener('change', () => { state.o = outcome.value; state.p = 0; refresh(); });
  tbody.addEventListener('click', e => {
    const tr = e.target.closest('tr');
    if (tr) location.hash = 'r-' + tr.dataset.i;
  });
  document.querySelector('.controls').hidden = false;
  refresh();

  // The trajectory view. JSON.parse turns integers past 2^53 into nearby
  // floats, so what must keep every digit is shown from text: the seed
  // comes as a string, and a transcript without messages as written.
  async function load(i) {
    const block = document.getElementById('t-' + i);
    if (!block) throw new Error('the page holds no data for rollout ' + i);
    const bin = atob(block.textContent.trim());
    const bytes = new Uint8Array(bin.length);
    for (let k = 0; k < bin.length; k++) bytes[k] = bin.charCodeAt(k);
    if (typeof DecompressionStream !== 'function') throw new Error('this browser cannot decompress the transcript (no DecompressionStream)');
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    // A line of JSON with the record, then the transcript file as written.
    const text = await new Response(stream).text();
    const nl = text.indexOf('\n');
    const d = JSON.parse(nl < 0 ? text : text.slice(0, nl));
    const rest = nl < 0 ? '' : text.slice(nl + 1);
    d.raw = rest;
    if (rest) {
      try {
        d.transcript = JSON.parse(rest);
      } catch (e) {
        d.transcript_error = 'it is not JSON (' + e.message + ')';
        d.transcript_text = rest;
      }
    }
    return d;
  }

  function clip(s, lines) {
    s = text(s);
    const all = s.split('\n');
    if (all.length <= lines && s.length <= 4000) return el('pre', null, s);
    const preview = all.slice(0, lines).join('\n').slice(0, 4000);
    return el('details', { class: 'clip' },
      el('summary', null, el('pre', { class: 'preview' }, preview), 'show all ' + all.length + ' lines (' + s.length + ' characters)'),
      el('pre', null, s));
  }
  // ends shows a long text by its first and last lines, the lines between
  // marked as left out, and the whole text when opened.
  function ends(s, lines) {
    s = text(s);
    const all = s.split('\n');
    if (all.length <= 2 * lines && s.length <= 8000) return el('pre', null, s);
    const head = all.slice(0, lines).join('\n').slice(0, 2000);
    const tail = all.slice(-lines).join('\n').slice(-6000);
    const cut = all.length - 2 * lines;
    return el('details', { class: 'clip' },
      el('summary', null, el('pre', { class: 'preview' }, head + '\n[… ' + cut + ' lines left out …]\n' + tail), 'show all ' + all.length + ' lines (' + s.length + ' characters)'),
      el('pre', null, s));
  }
  // logLink links a file of the run directory by its relative name
  // (verifier/<rollout>.txt); anything else is shown as text.
  function logLink(name) {
    if (typeof name !== 'string' || !/^verifier\/[^/\\]+$/.test(name)) return text(name == null ? '' : name);
    return el('a', { href: 'verifier/' + encodeURIComponent(name.slice('verifier/'.length)), type: 'text/plain' }, name);
  }
  function facts(pairs) {
    const dl = el('dl', { class: 'facts' });
    for (const [k, v] of pairs) if (v !== undefined && v !== null && v !== '') dl.append(el('dt', null, k), el('dd', null, String(v)));
    return dl;
  }
  function args(a) {
    try { return JSON.stringify(JSON.parse(a), null, 2); } catch (e) { return text(a == null ? '' : a); }
  }
  function message(m) {
    const role = String(m.role || '?');
    const box = el('div', { class: 'msg ' + (['system', 'user', 'assistant', 'tool'].includes(role) ? role : 'other') });
    box.append(el('div', { class: 'role' }, role + (m.name ? ' · ' + m.name : '') + (m.tool_call_id ? ' · ' + m.tool_call_id : '')));
    if (m.reasoning_content) {
      box.append(el('details', { class: 'reasoning' }, el('summary', null, 'reasoning (' + text(m.reasoning_content).length + ' characters)'), el('pre', null, text(m.reasoning_content))));
    }
    if (m.content) box.append(role === 'assistant' || role === 'user' ? el('pre', null, text(m.content)) : clip(m.content, 6));
    for (const c of m.tool_calls || []) {
      const f = c.function || {};
      box.append(el('div', { class: 'call' }, el('span', { class: 'name' }, '→ ' + text(f.name || '?')), ' ', el('span', { class: 'mono' }, text(c.id || '')),
        el('pre', { class: 'args' }, args(f.arguments))));
    }
    return box;
  }
  function turns(ts) {
    const t = el('table', { class: 'num' }, el('thead', null, el('tr', null, ...['turn', 'model s', 'tokens in', 'tokens out', 'tools', 'errors'].map(h => el('th', null, h)))));
    const tb = el('tbody');
    for (const x of ts) {
      const u = x.usage || {};
      const tools = (x.tools || []).map(c => c.name + ' ' + (+c.secs || 0).toFixed(2) + 's' + (c.failed ? ' (failed)' : '')).join(', ');
      tb.append(el('tr', null, ...[x.index, fixed(2)(x.model_secs), u.prompt_tokens, u.completion_tokens, tools, (x.errors || []).join('; ')].map(v => el('td', null, v == null ? '' : String(v)))));
    }
    t.append(tb);
    return el('details', null, el('summary', null, 'turns (' + ts.length + ')'), t);
  }

  function render(r, d) {
    const rec = d.record || {};
    const out = [el('h2', null, 'Rollout ' + r.id)];
    const u = rec.usage || {};
    out.push(facts([['outcome', (marks[rec.outcome] || '?') + ' ' + rec.outcome], ['error class', rec.error_class], ['reward', rec.reward],
      ['stop reason', rec.stop_reason], ['turns', rec.turns], ['tokens', (u.prompt_tokens || 0) + ' in, ' + (u.completion_tokens || 0) + ' out'],
      ['cost', rec.cost_usd ? '$' + rec.cost_usd.toFixed(4) : ''], ['seconds', r.dur.toFixed(2)], ['attempt', rec.attempt], ['try', rec.try],
      ['category', rec.category], ['difficulty', rec.difficulty], ['image', rec.image], ['seed', d.seed], ['transcript', rec.transcript],
      ['network', rec.network], ['network withheld', rec.network_withheld], ['reward from', rec.reward_source]]));
    if (rec.error) out.push(el('h3', null, 'Error'), el('pre', null, text(rec.error)));
    if (rec.tests && rec.tests.length) {
      const tb = el('tbody');
      for (const t of rec.tests) tb.append(el('tr', null, el('td', null, text(t.name)), el('td', { class: 'o-' + (t.status === 'passed' ? 'passed' : 'failed') }, text(t.status)), el('td', null, t.message ? clip(t.message, 4) : '')));
      out.push(el('h3', null, 'Tests'), el('table', { class: 'tests' }, el('thead', null, el('tr', null, el('th', null, 'test'), el('th', null, 'status'), el('th', null, 'message'))), tb));
    }
    if (rec.scores) out.push(el('h3', null, 'Scores'), facts(Object.entries(rec.scores)));
    if (rec.rewards && rec.rewards.length) {
      const tb = el('tbody');
      tb.append(el('tr', null, el('td', null, 'verifier'), el('td', null, ''), el('td', null, String(rec.verifier_reward)), el('td', null, '')));
      for (const s of rec.rewards) {
        const detail = s.error ? 'error: ' + s.error : Object.entries(s.scores || {}).map(([k, v]) => k + ' ' + v).join(', ');
        tb.append(el('tr', null, el('td', null, text(s.name)), el('td', null, String(s.weight)), el('td', { class: s.error ? 'o-failed' : '' }, s.error ? '—' : String(s.reward)), el('td', null, text(detail))));
      }
      out.push(el('h3', null, 'Stacked rewards (reward = weighted sum)'), el('table', { class: 'tests' }, el('thead', null, el('tr', null, el('th', null, 'reward'), el('th', null, 'weight'), el('th', null, 'value'), el('th', null, 'details'))), tb));
    }
    if (rec.verifier_output || rec.verifier_log) {
      out.push(el('h3', null, 'Verifier output'));
      if (rec.verifier_log) out.push(el('p', null, 'the whole output: ', logLink(rec.verifier_log)));
      if (rec.verifier_output) out.push(ends(rec.verifier_output, 12));
    }

    out.push(el('h3', null, 'Trajectory'));
    if (d.transcript_error) out.push(el('p', { class: 'banner' }, 'transcript unreadable: ' + d.transcript_error));
    if (d.transcript_text) out.push(clip(d.transcript_text, 30));
    const t = d.transcript;
    const tr = t && typeof t === 'object' && t.trajectory && typeof t.trajectory === 'object' ? t.trajectory : t;
    if (!t) {
      if (!d.transcript_error) out.push(el('p', null, 'no transcript'));
    } else if (tr && tr.oracle && typeof tr.oracle === 'object') {
      const o = tr.oracle;
      out.push(facts([['agent', tr.agent], ['exit code', o.exit_code == null ? 'none (it did not run to its end)' : o.exit_code], ['error', tr.error]]));
      out.push(el('h3', null, 'Reference solution output'), clip(o.output || '', 30));
    } else if (tr && Array.isArray(tr.messages) && tr.messages.length) {
      out.push(facts([['agent', tr.agent], ['model', tr.model], ['tools', (tr.tools || []).join(', ')], ['stop reason', tr.stop_reason], ['error', tr.error]]));
      for (const m of tr.messages) out.push(message(m || {}));
      if (Array.isArray(tr.turns) && tr.turns.length) out.push(turns(tr.turns));
    } else {
      if (t.system) out.push(message({ role: 'system', content: t.system }));
      if (t.prompt) out.push(message({ role: 'user', content: t.prompt }));
      out.push(el('p', null, 'no messages: the transcript as written'), clip(d.raw, 30));
    }
    detail.replaceChildren(...out);
  }

  async function open() {
    const m = /^#r-(\d+)$/.exec(location.hash);
    const i = m ? +m[1] : -1;
    if (i === opened) return;
    opened = i;
    for (const r of view) if (r.tr) r.tr.classList.toggle('open', r.i === i);
    const r = rows[i];
    if (!r) { detail.hidden = true; return; }
    detail.hidden = false;
    detail.replaceChildren(el('p', null, 'loading ' + r.id + '…'));
    try {
      const d = await load(i);
      if (opened === i) render(r, d);
    } catch (e) {
      if (opened === i) detail.replaceChildren(el('h2', null, 'Rollout ' + r.id), el('p', { class: 'banner' }, String(e)));
    }
    if (opened === i) detail.dataset.rollout = i;
  }
  window.addEventListener('hashchange', () => { open().then(() => detail.scrollIntoView()); });
  open();

  // A page served by `proctor view` for a run in progress reloads itself
  // when rollouts finish (the hash keeps the open rollout).
  if (body.dataset.live) {
    setInterval(async () => {
      try {
        const s = await (await fetch('status', { cache: 'no-store' })).json();
        if (String(s.rollouts) !== body.dataset.rollouts || s.finished) location.reload();
      } catch (e) { /* the server stopped: keep the page */ }
    }, 3000);
  }
  body.dataset.ready = '1';
  body.dataset.readyMs = String(Math.round(performance.now()));
})();
