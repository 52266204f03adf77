// flue_nb chat widget: draws the synced `history`, `live` and `status` traits.
// Plain ES module for anywidget: no build step, no imports, nothing fetched at run time.

const GLYPH = {
  running: "◌", ok: "✓", error: "✗", aborted: "■", failed: "✗", awaiting_approval: "?",
};
const OUTCOME = { completed: "✓ completed", failed: "✗ failed", aborted: "■ aborted" };

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function fmtTokens(n) {
  if (n === null || n === undefined) return "?";
  if (n >= 1000000) return (n / 1000000).toFixed(1).replace(/\.0$/, "") + "M";
  if (n >= 1000) return (n / 1000).toFixed(1).replace(/\.0$/, "") + "k";
  return String(n);
}

function fmtBytes(n) {
  if (n >= 1048576) return (n / 1048576).toFixed(1) + " MB";
  if (n >= 1024) return (n / 1024).toFixed(1) + " KB";
  return n + " bytes";
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "";
  return ms >= 1000 ? (ms / 1000).toFixed(1) + " s" : Math.round(ms) + " ms";
}

// --- a small markdown renderer (escape first, then a few block and inline forms) -----------

function inline(text) {
  const codes = [];
  let s = esc(text).replace(/`([^`\n]+)`/g, (_, c) => {
    codes.push(c);
    return "\u0000" + (codes.length - 1) + "\u0000";
  });
  s = s.replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, "$1<em>$2</em>")
    .replace(/(^|[^_\w])_([^_\n]+)_(?!\w)/g, "$1<em>$2</em>")
    .replace(/\[([^\]\n]+)\]\((https?:\/\/[^)\s]+)\)/g,
      '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>');
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => "<code>" + codes[+i] + "</code>");
}

export function markdown(src) {
  const lines = String(src ?? "").replace(/\r\n/g, "\n").split("\n");
  const out = [];
  let para = [];
  let list = null; // {tag, items}
  const flushPara = () => {
    if (para.length) out.push("<p>" + para.map(inline).join("<br>") + "</p>");
    para = [];
  };
  const flushList = () => {
    if (list) out.push(`<${list.tag}>` + list.items.map((i) => "<li>" + inline(i) + "</li>").join("") + `</${list.tag}>`);
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*```\s*([\w+-]*)/);
    if (fence) {
      flushPara(); flushList();
      const body = [];
      i++;
      while (i < lines.length && !/^\s*```/.test(lines[i])) body.push(lines[i++]);
      out.push(`<pre class="flue-code"><code>${esc(body.join("\n"))}</code></pre>`);
      continue;
    }
    const h = line.match(/^(#{1,6})\s+(.*)$/);
    if (h) { flushPara(); flushList(); out.push(`<h${h[1].length + 2 > 6 ? 6 : h[1].length + 2}>${inline(h[2])}</h${h[1].length + 2 > 6 ? 6 : h[1].length + 2}>`); continue; }
    const ul = line.match(/^\s*[-*+]\s+(.*)$/);
    const ol = line.match(/^\s*\d+[.)]\s+(.*)$/);
    if (ul || ol) {
      flushPara();
      const tag = ul ? "ul" : "ol";
      if (!list || list.tag !== tag) { flushList(); list = { tag, items: [] }; }
      list.items.push((ul || ol)[1]);
      continue;
    }
    const q = line.match(/^>\s?(.*)$/);
    if (q) { flushPara(); flushList(); out.push("<blockquote>" + inline(q[1]) + "</blockquote>"); continue; }
    if (!line.trim()) { flushPara(); flushList(); continue; }
    flushList();
    para.push(line);
  }
  flushPara(); flushList();
  return out.join("");
}

// --- parts ----------------------------------------------------------------------------------

function details(key, open, summaryHtml, bodyHtml, cls = "") {
  return `<details class="${cls}" data-key="${esc(key)}"${open ? " open" : ""}><summary>${summaryHtml}</summary>${bodyHtml}</details>`;
}

function clipped(key, label, v, opened) {
  if (!v) return "";
  const size = `${fmtBytes(v.bytes)}, ${v.lines} line${v.lines === 1 ? "" : "s"}`;
  const more = v.clipped ? `<div class="flue-muted">showing the first ${v.text.length.toLocaleString()} characters</div>` : "";
  const body = `<pre class="flue-pre">${esc(v.text)}</pre>${more}`;
  const long = v.lines > 12 || v.bytes > 1200;
  if (!long) return `<div class="flue-field"><span class="flue-label">${label}</span>${body}</div>`;
  return details(key, opened.has(key), `<span class="flue-label">${label}</span> <span class="flue-muted">(${size}, collapsed)</span>`, body, "flue-long");
}

function namespaceRow(ns) {
  if (!ns) return "";
  const bits = [];
  for (const [k, sign] of [["added", "+"], ["changed", "~"], ["removed", "−"]]) {
    for (const name of ns[k] || []) bits.push(`<span class="flue-ns flue-ns-${k}" title="${k}">${sign} ${esc(name)}</span>`);
  }
  if (!bits.length) return `<div class="flue-nsrow"><span class="flue-label">namespace</span> <span class="flue-muted">no names changed</span></div>`;
  return `<div class="flue-nsrow"><span class="flue-label">namespace</span> ${bits.join(" ")}</div>`;
}

function approvalNote(a) {
  if (!a) return "";
  if (a.reason === "approved") return `<div class="flue-muted">approved by the user</div>`;
  if (a.reason === "declined") return `<div class="flue-muted">denied by the user</div>`;
  if (a.reason === "policy") return `<div class="flue-muted">denied by the approval policy</div>`;
  if (a.reason === "headless" || a.reason === "unanswered") {
    return `<div class="flue-muted">no one to ask: fallback policy ${esc(a.fallback)} ${a.approved ? "ran it" : "refused it"}</div>`;
  }
  return "";
}

function toolCard(t, opened, interactive) {
  const key = "tool:" + t.call_id;
  const st = t.status || "running";
  const head = `<span class="flue-glyph flue-st-${st}">${GLYPH[st] || "·"}</span> <span class="flue-tname">${esc(t.name)}</span> <span class="flue-targ">${esc(t.summary)}</span>` +
    `<span class="flue-tmeta">${st === "running" ? (t.progress ? `running… ${esc(t.progress)}` : "running…") : st === "awaiting_approval" ? "waiting for approval" : esc(st === "ok" ? "" : st)} ${fmtMs(t.duration_ms)}</span>`;
  let body = clipped(key + ":in", "arguments", t.input, opened);
  if (st === "awaiting_approval") {
    body += `<div class="flue-ask"><div>${esc(t.ask || "")}</div>` +
      (interactive
        ? `<button class="flue-btn flue-approve" data-call="${esc(t.call_id)}">Approve</button> <button class="flue-btn flue-deny" data-call="${esc(t.call_id)}">Deny</button>`
        : `<span class="flue-muted">answer in the prompt under the cell</span>`) + "</div>";
  }
  if (t.result) body += clipped(key + ":out", t.status === "error" ? "error" : "result", t.result, opened);
  body += namespaceRow(t.namespace);
  body += approvalNote(t.approval);
  if (t.task) body += taskCard(t.task, key, opened, interactive);
  const open = opened.has(key) || st === "awaiting_approval" || (opened.auto && st === "running");
  return details(key, open, head, `<div class="flue-tbody">${body}</div>`, `flue-tool flue-tool-${st}`);
}

function taskCard(task, key, opened, interactive) {
  const st = task.status;
  const inner = renderParts(task.parts || [], opened, interactive);
  const tail = task.error ? `<div class="flue-err">${esc(task.error)}</div>` : "";
  return `<div class="flue-task"><div class="flue-task-head"><span class="flue-glyph flue-st-${st}">${GLYPH[st] || "·"}</span> subagent <b>${esc(task.agent)}</b> <span class="flue-muted">${esc(task.description)}</span></div>${inner}${tail}</div>`;
}

function signalChip(p) {
  const what = (p.changes && p.changes.length) ? p.changes.map(inline).join(" · ") : esc(p.signal_type) + " changed";
  return `<div class="flue-chip" title="signal: ${esc(p.signal_type)}"><span class="flue-chip-kind">${esc(p.signal_type)}</span> ${what}</div>`;
}

function compaction(p, i, opened) {
  const key = "compaction:" + i + ":" + p.reason;
  if (p.running) return `<div class="flue-divider"><span>compacting the context (${esc(p.reason)})…</span></div>`;
  let label;
  if (p.is_error) label = `compaction (${esc(p.reason)}) failed: ${esc(p.error || "")}`;
  else if (p.skipped) label = `compaction (${esc(p.reason)}): nothing old enough to fold`;
  else label = `compacted (${esc(p.reason)}): ${fmtTokens(p.tokens_before)} → ${fmtTokens(p.tokens_after)} tokens`;
  const summary = p.summary ? details(key, opened.has(key), "summary", `<div class="flue-md flue-summary">${markdown(p.summary)}</div>`, "flue-sumbox") : "";
  return `<div class="flue-divider"><span>${label}</span></div>${summary}`;
}

function renderParts(parts, opened, interactive, prefix = "") {
  return parts.map((p, i) => {
    switch (p.kind) {
      case "text": return `<div class="flue-md flue-answer">${markdown(p.text)}</div>`;
      case "thinking": {
        const key = prefix + "thinking:" + i;
        return details(key, opened.has(key), '<span class="flue-muted">thinking</span>', `<div class="flue-thinking">${esc(p.text)}</div>`, "flue-think");
      }
      case "tool": return toolCard(p, opened, interactive);
      case "task": return taskCard(p, prefix + "task:" + i, opened, interactive);
      case "signal": return signalChip(p);
      case "compaction": return compaction(p, prefix + i, opened);
      case "user": return `<div class="flue-user flue-joined"><span class="flue-badge">joined</span>${esc(p.text)}</div>`;
      case "note": return `<div class="flue-note">${esc(p.text)}</div>`;
      default: return "";
    }
  }).join("");
}

function outcomeLine(b) {
  if (b.state === "queued") return `<div class="flue-outcome flue-queued">queued: runs when the agent is free</div>`;
  if (b.state === "joining") return `<div class="flue-outcome flue-queued">queued: joins the live response at the next turn</div>`;
  if (b.state === "running") return `<div class="flue-outcome flue-running">running…</div>`;
  if (!b.outcome) return "";
  let text = OUTCOME[b.outcome] || b.outcome;
  if (b.error && b.outcome === "failed") text += `: ${esc(b.error.type)}: ${esc(b.error.message)}`;
  else if (b.error && b.outcome === "aborted") text += `: ${esc(b.error.message)}`;
  if (b.recovered) text += " (recovered after a restart)";
  return `<div class="flue-outcome flue-${b.outcome}">${text}</div>`;
}

function block(b, opened, interactive, mode) {
  if (b.kind === "aside") return `<div class="flue-block flue-aside">${renderParts(b.parts, opened, interactive, b.id + ":")}</div>`;
  if (b.state === "joined" && mode === "chat") return ""; // drawn inside the response it joined
  const user = mode === "chat" && b.text ? `<div class="flue-user">${esc(b.text)}</div>` : "";
  const rec = b.recovered ? `<span class="flue-badge flue-rec">recovered</span>` : "";
  return `<div class="flue-block" data-sid="${esc(b.id)}">${user}${rec}${renderParts(b.parts, opened, interactive, b.id + ":")}${outcomeLine(b)}</div>`;
}

function gauge(st) {
  const used = st.used_tokens, win = st.context_window, thr = st.threshold;
  const u = st.usage || {};
  const pct = used && win ? Math.min(100, (100 * used) / win) : 0;
  const mark = thr && win ? `<div class="flue-gauge-mark" style="left:${Math.min(100, (100 * thr) / win)}%" title="compacts at ${fmtTokens(thr)}"></div>` : "";
  const ctx = win ? `${fmtTokens(used ?? 0)} / ${fmtTokens(win)} tokens` + (thr ? ` · compacts at ${fmtTokens(thr)}` : "") : "context window unknown";
  return `<div class="flue-gauge" title="context used"><div class="flue-gauge-fill" style="width:${pct}%"></div>${mark}</div>` +
    `<div class="flue-gauge-text">${ctx} · in ${fmtTokens(u.input || 0)} · out ${fmtTokens(u.output || 0)} · cache read ${fmtTokens(u.cache_read || 0)} · cache write ${fmtTokens(u.cache_write || 0)}${st.cache_share != null ? ` <span title="share of prompt tokens read from the provider's cache">(${Math.round(st.cache_share * 100)} % cached)</span>` : ""}${st.cost ? ` · <span title="${esc(st.cost_note || "")}">${esc(st.cost)}</span>` : ""}</div>`;
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "flue-chat";
  root.innerHTML = `<div class="flue-head"><span class="flue-title"></span><span class="flue-state"></span><span class="flue-hint"></span><button class="flue-btn flue-stop" title="Abort every unsettled message of this conversation">Stop</button></div>
<div class="flue-gaugebox"></div>
<div class="flue-log"><div class="flue-history"></div><div class="flue-live"></div></div>
<div class="flue-error"></div>
<div class="flue-input"><textarea rows="2" placeholder="Message the agent (Enter to send, Shift+Enter for a new line)"></textarea><button class="flue-btn flue-send">Send</button></div>`;
  el.appendChild(root);
  const $ = (s) => root.querySelector(s);
  const log = $(".flue-log");
  const opened = new Set();
  opened.auto = false;

  root.addEventListener("toggle", (e) => {
    const d = e.target;
    if (!(d instanceof HTMLDetailsElement) || !d.dataset.key) return;
    if (d.open) opened.add(d.dataset.key); else opened.delete(d.dataset.key);
  }, true);
  root.addEventListener("click", (e) => {
    const b = e.target.closest("button");
    if (!b) return;
    if (b.classList.contains("flue-approve") || b.classList.contains("flue-deny")) {
      model.send({ type: "approve", call_id: b.dataset.call, approved: b.classList.contains("flue-approve") });
      b.parentElement.querySelectorAll("button").forEach((x) => { x.disabled = true; });
    }
  });
  $(".flue-stop").addEventListener("click", () => model.send({ type: "stop" }));
  const ta = $("textarea");
  const send = () => {
    const text = ta.value.trim();
    if (!text) return;
    model.send({ type: "send", text });
    ta.value = "";
  };
  $(".flue-send").addEventListener("click", send);
  ta.addEventListener("keydown", (e) => {
    e.stopPropagation(); // keys typed here are the message's, not the notebook's shortcuts
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
  });

  const nearBottom = () => log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  const draw = (which) => {
    const stick = nearBottom();
    const mode = model.get("mode");
    const interactive = model.get("interactive");
    if (which !== "live") {
      $(".flue-history").innerHTML = (model.get("history") || []).map((b) => block(b, opened, interactive, mode)).join("");
    }
    $(".flue-live").innerHTML = (model.get("live") || []).map((b) => block(b, opened, interactive, mode)).join("");
    if (stick) log.scrollTop = log.scrollHeight;
  };
  const drawStatus = () => {
    const st = model.get("status") || {};
    const mode = model.get("mode");
    root.classList.toggle("flue-mode-cell", mode === "cell");
    $(".flue-title").textContent = `flue · ${st.agent || "agent"}${st.model ? " · " + st.model : ""} · ${model.get("title")}`;
    const live = model.get("live") || [];
    const running = st.running || live.some((b) => b.state === "running");
    const queued = live.filter((b) => b.state === "queued" || b.state === "joining").length;
    $(".flue-state").textContent = running ? (queued ? `working · ${queued} queued` : "working") : (queued ? `${queued} queued` : "idle");
    $(".flue-state").className = "flue-state " + (running ? "flue-busy" : "flue-idle");
    const interactive = model.get("interactive");
    $(".flue-stop").disabled = !running && !queued;
    $(".flue-stop").style.display = interactive ? "" : "none";
    // A blocking cell keeps the kernel busy: the kernel's own stop button is the way to stop it.
    $(".flue-hint").textContent = !interactive && running ? "stop with the kernel's interrupt (■)" : "";
    $(".flue-gaugebox").innerHTML = gauge(st);
  };
  const drawError = () => { $(".flue-error").textContent = model.get("error") || ""; };
  const onHistory = () => { draw("all"); drawStatus(); };
  const onLive = () => { draw("live"); drawStatus(); };
  model.on("change:history", onHistory);
  model.on("change:live", onLive);
  model.on("change:status", drawStatus);
  model.on("change:error", drawError);
  model.on("change:mode", onHistory);
  model.on("change:interactive", onHistory);
  draw("all"); drawStatus(); drawError();
  log.scrollTop = log.scrollHeight;
  return () => {
    model.off("change:history", onHistory);
    model.off("change:live", onLive);
    model.off("change:status", drawStatus);
    model.off("change:error", drawError);
    model.off("change:mode", onHistory);
    model.off("change:interactive", onHistory);
  };
}

export default { render };
