// @ts-check
// flue_nb chat widget: draws the synced `history`, `live`, `status` and `images` traits.
// Plain ES module for anywidget: no build step. The libraries (marked, DOMPurify, highlight.js,
// KaTeX) come from the shared `vendor` model (_vendor.py), loaded once a page.
// The synced traits' and messages' shapes are wire.d.ts, written from the TypedDicts in
// wire.py beside it; `tsc -p` this directory (tsconfig.json: strict) checks this file
// against them (tests/notebook/test_wire_types.py, in `make test`). The JSDoc is only comments:
// the browser runs this file as it is.

/**
 * The wire (wire.d.ts):
 * @typedef {import("./wire").ClipJSON} ClipJSON
 * @typedef {import("./wire").ImageJSON} ImageJSON
 * @typedef {import("./wire").NamespaceJSON} NamespaceJSON
 * @typedef {import("./wire").ApprovalJSON} ApprovalJSON
 * @typedef {import("./wire").ToolJSON} ToolJSON
 * @typedef {import("./wire").TaskJSON} TaskJSON
 * @typedef {import("./wire").CompactionJSON} CompactionJSON
 * @typedef {import("./wire").PartJSON} PartJSON
 * @typedef {import("./wire").BlockJSON} BlockJSON
 * @typedef {import("./wire").StatusJSON} StatusJSON
 * @typedef {import("./wire").UsageJSON} UsageJSON
 * @typedef {import("./wire").ChangesJSON} ChangesJSON
 * @typedef {import("./wire").ChangeItemJSON} ChangeItemJSON
 * @typedef {import("./wire").Traits} Traits
 * @typedef {import("./wire").VendorTraits} VendorTraits
 * @typedef {import("./wire").BrowserMsg} BrowserMsg
 * @typedef {import("./wire").KernelMsg} KernelMsg
 * @typedef {import("./wire").StopRequest} StopRequest
 * @typedef {import("./wire").StopReply} StopReply
 *
 * What this view uses of anywidget's model, typed by the traits and messages above:
 * @typedef {object} Model
 * @property {<K extends keyof Traits>(key: K) => Traits[K]} get
 * @property {(msg: BrowserMsg) => void} send
 * @property {(name: string, fn: (...args: any[]) => void) => void} on
 * @property {(name: string, fn: (...args: any[]) => void) => void} off
 * @property {any} widget_manager  JupyterLab's, Notebook 7's or VS Code's: probed, never trusted
 *
 * @typedef {{ marked: any, DOMPurify: any, hljs: any, katex: any }} Libs
 * @typedef {(src: string | null | undefined) => string} Markdown
 * @typedef {"" | "restarted" | "dead" | "silent"} Gone
 *
 * What drawing a part needs besides the part:
 * @typedef {object} Ctx
 * @property {Set<string>} opened  keys of the <details> the user opened
 * @property {Set<string>} closed  keys of the cards with figures the user closed
 * @property {Partial<Libs> | null} libs
 * @property {Markdown} md
 * @property {Record<string, string>} images
 * @property {Traits["mode"]} mode
 * @property {boolean} interactive
 * @property {Gone} [gone]
 * @property {Record<string, ChangesJSON>} [changes]  each settled run's changes panel, by submission id
 */

/** @type {Record<string, string>} */
const GLYPH = {
  running: "◌", ok: "✓", error: "✗", denied: "⊘", aborted: "■", failed: "✗", awaiting_approval: "?",
};
/** @type {Record<string, string>} */
const OUTCOME = { completed: "✓ completed", failed: "✗ failed", aborted: "■ aborted" };

/** @type {Record<string, string>} */
const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** @param {unknown} s */
export function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ENTITIES[c]);
}

/** @param {number | null | undefined} n */
function fmtTokens(n) {
  if (n === null || n === undefined) return "?";
  if (n >= 1000000) return (n / 1000000).toFixed(1).replace(/\.0$/, "") + "M";
  if (n >= 1000) return (n / 1000).toFixed(1).replace(/\.0$/, "") + "k";
  return String(n);
}

/** @param {number} n */
function fmtBytes(n) {
  if (n >= 1048576) return (n / 1048576).toFixed(1) + " MB";
  if (n >= 1024) return (n / 1024).toFixed(1) + " KB";
  return n + " bytes";
}

/** @param {number | null | undefined} ms */
function fmtMs(ms) {
  if (ms === null || ms === undefined) return "";
  return ms >= 1000 ? (ms / 1000).toFixed(1) + " s" : Math.round(ms) + " ms";
}

/** @param {number} seconds */
export function fmtWait(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m} min ${s % 60} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

// --- markdown: marked (GFM), highlight.js, DOMPurify, KaTeX -----------------------------------

const MATH = /\$\$([\s\S]+?)\$\$|\\\[([\s\S]+?)\\\]|\\\(([\s\S]+?)\\\)|(?<![\\$\w])\$(?=\S)([^$\n]+?)(?<=\S)\$(?![\w$])/g;
const FILES = /<(read-files|modified-files)>\n?([\s\S]*?)<\/\1>/g;

/** @typedef {{ tex: string, display: boolean }} Math */

/**
 * Math out of the way of markdown (it would eat `_` and `*`), code spans and fences left alone.
 * @param {string} src
 * @param {Math[]} found
 */
function protectMath(src, found) {
  return src.split(/(```[\s\S]*?(?:```|$)|`[^`\n]+`)/g).map((seg, i) => (i % 2 ? seg : seg.replace(MATH, (m, a, b, c, d) => {
    found.push({ tex: a ?? b ?? c ?? d, display: a !== undefined || b !== undefined });
    return `FLUEMATH${found.length - 1}X`;
  }))).join("");
}

/**
 * A compaction summary's `<read-files>` / `<modified-files>` blocks as markdown lists.
 * @param {string} src
 */
function fileLists(src) {
  return src.replace(FILES, (_, /** @type {string} */ tag, /** @type {string} */ body) => {
    const items = body.split("\n").map((s) => s.trim()).filter(Boolean);
    const title = tag === "read-files" ? "Files read" : "Files modified";
    return `\n**${title}:**\n\n${items.map((f) => "- `" + f.replace(/`/g, "") + "`").join("\n")}\n`;
  });
}

/**
 * The markdown renderer over the vendored libraries; `libs` null renders escaped text.
 * @param {Libs | null} libs
 * @returns {Markdown}
 */
export function makeMarkdown(libs) {
  if (!libs) return (src) => `<p class="flue-plain">${esc(src).replace(/\n/g, "<br>")}</p>`;
  const { marked, DOMPurify, hljs, katex } = libs;
  const md = new marked.Marked({ gfm: true, breaks: false });
  md.use({
    renderer: {
      /** @param {{ text: string, lang?: string }} token */
      code({ text, lang }) { return codeBlock(text, (lang || "").split(/\s/)[0], hljs); },
    },
  });
  const purify = DOMPurify.default ? DOMPurify.default : DOMPurify;
  if (!purify.__flueHooked) purify.addHook("afterSanitizeAttributes", (/** @type {Element} */ node) => {
    if (node.tagName === "A" && node.getAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
    // An image in the model's text would be fetched from anywhere when drawn: only inline ones
    // are shown; a remote one keeps its alt text and says where it was.
    if (node.tagName === "IMG" && !/^data:image\//i.test(node.getAttribute("src") || "")) {
      node.setAttribute("title", `not loaded: ${node.getAttribute("src") || ""}`);
      node.removeAttribute("src");
    }
  });
  purify.__flueHooked = true;
  return (src) => {
    /** @type {Math[]} */
    const found = [];
    const text = protectMath(fileLists(String(src ?? "")), found);
    const clean = purify.sanitize(md.parse(text), { ADD_ATTR: ["target"], FORBID_TAGS: ["style", "form", "input"] });
    return clean.replace(/FLUEMATH(\d+)X/g, (/** @type {string} */ _, /** @type {string} */ i) => {
      const m = found[+i];
      try {
        return katex.renderToString(m.tex, { displayMode: m.display, throwOnError: false, output: "htmlAndMathml" });
      } catch (e) {
        return `<code>${esc(m.tex)}</code>`;
      }
    });
  };
}

/**
 * Code as a highlighted block (escaped by highlight.js, or by us when the language is unknown).
 * @param {string} text
 * @param {string} lang
 * @param {any} hljs
 */
export function codeBlock(text, lang, hljs) {
  let body = esc(text);
  if (hljs) {
    try {
      body = lang && hljs.getLanguage(lang) ? hljs.highlight(text, { language: lang, ignoreIllegals: true }).value
        : esc(text);
    } catch (e) { body = esc(text); }
  }
  return `<pre class="flue-code"><code class="hljs${lang ? " language-" + esc(lang) : ""}">${body}</code></pre>`;
}

// --- parts ------------------------------------------------------------------------------------

/**
 * @param {string} key
 * @param {boolean} open
 * @param {string} summaryHtml
 * @param {string} bodyHtml
 */
function details(key, open, summaryHtml, bodyHtml, cls = "", label = "") {
  const aria = label ? ` role="group" aria-label="${esc(label)}"` : "";
  return `<details class="${cls}" data-key="${esc(key)}"${open ? " open" : ""}${aria}><summary>${summaryHtml}</summary>${bodyHtml}</details>`;
}

/** @param {ClipJSON} v */
function sized(v) { return `${fmtBytes(v.bytes)}, ${v.lines} line${v.lines === 1 ? "" : "s"}`; }

/**
 * @param {Ctx} ctx
 * @param {string} key
 * @param {string} label
 * @param {ClipJSON} v
 * @param {string} [bodyHtml]
 */
function clipped(ctx, key, label, v, bodyHtml) {
  const more = v.clipped ? `<div class="flue-muted">showing the first ${v.text.length.toLocaleString()} characters</div>` : "";
  const body = (bodyHtml ?? `<pre class="flue-pre">${esc(v.text)}</pre>`) + more;
  if (!(v.lines > 12 || v.bytes > 1200)) return `<div class="flue-field"><span class="flue-label">${label}</span>${body}</div>`;
  return details(key, ctx.opened.has(key), `<span class="flue-label">${label}</span> <span class="flue-muted">(${sized(v)}, collapsed)</span>`, body, "flue-long");
}

/**
 * @param {Ctx} ctx
 * @param {ToolJSON} t
 */
function resultBody(ctx, t) {
  const v = t.result;
  if (!v) return undefined;
  if (t.result_kind === "list") {
    const items = v.text.split("\n").filter((s) => s.trim());
    return `<ul class="flue-list">${items.map((s) => `<li><code>${esc(s)}</code></li>`).join("")}</ul>`;
  }
  if (t.result_kind === "markdown") return `<div class="flue-md">${ctx.md(v.text)}</div>`;
  if (t.result_kind === "code") return codeBlock(v.text, t.result_lang, ctx.libs && ctx.libs.hljs);
  return undefined;
}

/** @param {NamespaceJSON | null} ns */
function namespaceRow(ns) {
  if (!ns) return "";
  const bits = [];
  for (const [k, sign] of /** @type {[keyof NamespaceJSON, string][]} */ ([["added", "+"], ["changed", "~"], ["removed", "−"]])) {
    for (const name of ns[k] || []) bits.push(`<span class="flue-ns flue-ns-${k}" title="${k}">${sign} ${esc(name)}</span>`);
  }
  const what = bits.length ? bits.join(" ") : `<span class="flue-muted">no names changed</span>`;
  return `<div class="flue-nsrow"><span class="flue-label">namespace</span> ${what}</div>`;
}

/** @type {Record<string, string>} */
const ANSWERED = {
  approved: "approved by the user", declined: "denied by the user", policy: "denied by the approval policy",
};

/** @param {ApprovalJSON | null} a */
function approvalNote(a) {
  if (!a) return "";
  const why = a.reason ? ANSWERED[a.reason] : undefined;
  // Where it was answered, when another view of the conversation could have: "in nb.ipynb (kernel …)".
  if (why) return `<div class="flue-muted flue-answered">${why}${a.by && a.reason !== "policy" ? " in " + esc(a.by) : ""}</div>`;
  // Run without asking by a rule or a grant other than the plain default: which one.
  if (a.reason === "allowed" && a.rule) return `<div class="flue-muted flue-answered">${esc(a.rule)}</div>`;
  if (a.reason === "ended") {
    return `<div class="flue-muted flue-answered">the approval request ended${a.detail ? ": " + esc(a.detail) : ""}</div>`;
  }
  if (a.reason === "headless" || a.reason === "unanswered") {
    return `<div class="flue-muted">no one to ask: fallback policy ${esc(a.fallback)} ${a.approved ? "ran it" : "refused it"}</div>`;
  }
  return "";
}

/**
 * @param {Ctx} ctx
 * @param {ImageJSON[]} images
 */
function figures(ctx, images) {
  if (!images || !images.length) return "";
  return `<div class="flue-figs">${images.map((i) => {
    const src = ctx.images[i.digest];
    const label = i.label || "image";
    if (!src) return `<div class="flue-muted">[${esc(label)}: ${i.width}×${i.height}]</div>`;
    return `<button class="flue-fig" data-digest="${esc(i.digest)}" title="${esc(label)} (${i.width}×${i.height}): click for full size" aria-label="${esc(label)}, full size">` +
      `<img src="${esc(src)}" alt="${esc(label)}" width="${i.width}" height="${i.height}"></button>`;
  }).join("")}</div>`;
}

/**
 * @param {ToolJSON} t
 * @param {ToolJSON["status"]} st
 * @param {Gone | undefined} gone
 */
function toolMeta(t, st, gone) {
  if (gone && (st === "running" || st === "awaiting_approval")) return "cut off: the kernel went away";
  if (st === "running") return t.progress ? `running… ${esc(t.progress)}` : "running…";
  if (st === "awaiting_approval") {
    const since = t.asked_at ? ` <span class="flue-wait" data-since="${t.asked_at}">${fmtWait(Date.now() / 1000 - t.asked_at)}</span>` : "";
    return `waiting for approval${since}`;
  }
  return st === "ok" ? "" : esc(st);
}

/**
 * "Always allow": approves the call and keeps a grant with the conversation, when the rules offer
 * one (`t.always`: the tool's pattern; never for a place that runs code later).
 * @param {ToolJSON} t
 */
function alwaysButton(t) {
  if (t.always == null) return "";
  const what = t.always === "*" ? t.name
    : t.name === "bash" ? "this command"
    : t.name === "write" ? "writes to this file"
    : t.name === "edit" ? "edits of this file" : `${t.name} calls like this`;
  const scope = t.always === "*" ? `every ${t.name} call` : `${t.name} calls matching ${t.always}`;
  const title = `Approve, and run ${scope} without asking for the rest of this conversation (%flue status lists it; %flue revoke ${t.name} takes it back)`;
  return ` <button class="flue-btn flue-always" data-call="${esc(t.call_id)}" title="${esc(title)}">Always allow ${esc(what)} in this conversation</button>`;
}

/**
 * @param {Ctx} ctx
 * @param {ToolJSON} t
 * @param {string} at  the part's place (block and index): call ids repeat across submissions
 */
function toolCard(ctx, t, at) {
  const key = "tool:" + at;
  const st = t.status || "running";
  const head = `<span class="flue-glyph flue-st-${st}" aria-hidden="true">${GLYPH[st] || "·"}</span> <span class="flue-tname">${esc(t.name)}</span> <span class="flue-targ">${esc(t.summary)}</span>` +
    `<span class="flue-tmeta">${toolMeta(t, st, ctx.gone)} ${fmtMs(t.duration_ms)}</span>`;
  let body = "";
  // An edit that landed: its old and new source as a diff, in place of the new source alone.
  if (t.diff && t.diff.length) {
    body += `<div class="flue-field flue-celldiff"><span class="flue-label">change</span>${diffHtml(t.diff, "python", ctx.libs && ctx.libs.hljs)}</div>`;
  }
  for (const c of t.code || []) {
    body += clipped(ctx, `${key}:code:${c.arg}`, esc(c.arg), c.value, c.lang === "markdown"
      ? `<div class="flue-md">${ctx.md(c.value.text)}</div>` : codeBlock(c.value.text, c.lang, ctx.libs && ctx.libs.hljs));
  }
  if (t.input && t.input.text) body += clipped(ctx, key + ":in", "arguments", t.input);
  if (st === "awaiting_approval" && !ctx.gone) {
    body += `<div class="flue-ask" role="alert"><div>${esc(t.ask || "")}</div>` +
      (ctx.interactive
        ? `<button class="flue-btn flue-approve" data-call="${esc(t.call_id)}">Approve</button> <button class="flue-btn flue-deny" data-call="${esc(t.call_id)}">Deny</button>${alwaysButton(t)}`
        : `<span class="flue-muted">answer in the prompt under the cell</span>`) + "</div>";
  }
  if (t.result && (t.result.text || t.status !== "ok")) {
    const label = st === "error" || st === "failed" ? "error" : st === "denied" ? "refusal" : "result";
    body += clipped(ctx, key + ":out", label, t.result, st === "ok" ? resultBody(ctx, t) : undefined);
  }
  body += figures(ctx, t.images);
  body += namespaceRow(t.namespace);
  body += approvalNote(t.approval);
  if (t.effects && st !== "running" && st !== "awaiting_approval" && ctx.interactive && ctx.mode === "chat" && !ctx.gone) {
    body += `<div class="flue-rewindrow"><button class="flue-btn flue-rewind" data-call="${esc(t.call_id)}" title="Undo what this step and every later step changed (cells, files, variables), newest first">Rewind to before this step</button></div>`;
  }
  if (t.task) body += taskCard(ctx, t.task, key);
  const open = ctx.opened.has(key) || st === "awaiting_approval" || (t.images && t.images.length > 0 && !ctx.closed.has(key));
  return details(key, open, head, `<div class="flue-tbody">${body}</div>`, `flue-tool flue-tool-${st}`, `tool call ${t.name}: ${st}`);
}

/**
 * @param {Ctx} ctx
 * @param {TaskJSON} task
 * @param {string} key
 */
function taskCard(ctx, task, key) {
  const st = task.status;
  const tail = task.error ? `<div class="flue-err">${esc(task.error)}</div>` : "";
  return `<div class="flue-task" role="group" aria-label="subagent ${esc(task.agent)}"><div class="flue-task-head"><span class="flue-glyph flue-st-${st}">${GLYPH[st] || "·"}</span> subagent <b>${esc(task.agent)}</b> <span class="flue-muted">${esc(task.description)}</span></div>${(task.parts || []).map((p, i) => part(ctx, p, key + ":" + i)).join("")}${tail}</div>`;
}

/**
 * @param {Ctx} ctx
 * @param {CompactionJSON} p
 * @param {string} key
 */
function compaction(ctx, p, key) {
  if (p.running) return `<div class="flue-divider"><span>compacting the context (${esc(p.reason)})…</span></div>`;
  let label;
  if (p.is_error) label = `compaction (${esc(p.reason)}) failed: ${esc(p.error || "")}`;
  else if (p.skipped) label = `compaction (${esc(p.reason)}): nothing old enough to fold`;
  else label = `compacted (${esc(p.reason)}): ${fmtTokens(p.tokens_before)} → ${fmtTokens(p.tokens_after)} tokens`;
  const summary = p.summary ? details(key, ctx.opened.has(key), "summary", `<div class="flue-md flue-summary">${ctx.md(p.summary)}</div>`, "flue-sumbox") : "";
  return `<div><div class="flue-divider"><span>${label}</span></div>${summary}</div>`;
}

/**
 * One part as HTML with a single root element (so it can be redrawn on its own).
 * @param {Ctx} ctx
 * @param {PartJSON} p
 * @param {string} key
 * @returns {string}
 */
export function part(ctx, p, key) {
  switch (p.kind) {
    case "text": return `<div class="flue-md flue-answer">${ctx.md(p.text)}</div>`;
    case "thinking": return details(key, ctx.opened.has(key), '<span class="flue-muted">thinking</span>', `<div class="flue-thinking">${esc(p.text)}</div>`, "flue-think");
    case "tool": return toolCard(ctx, p, key);
    case "task": return taskCard(ctx, p, key);
    case "signal": {
      const what = (p.changes && p.changes.length) ? p.changes.map((c) => esc(c).replace(/`([^`]+)`/g, "<code>$1</code>")).join(" · ") : esc(p.signal_type) + " changed";
      return `<div class="flue-chip" title="signal: ${esc(p.signal_type)}"><span class="flue-chip-kind">${esc(p.signal_type)}</span> ${what}</div>`;
    }
    case "compaction": return compaction(ctx, p, key);
    case "user": return `<div class="flue-user flue-joined"><span class="flue-badge">joined</span>${esc(p.text)}</div>`;
    case "note": return `<div class="flue-note">${esc(p.text)}</div>`;
    default: return "<div></div>";
  }
}

/**
 * @param {BlockJSON} b
 * @param {Gone | undefined} gone
 */
function outcomeLine(b, gone) {
  if (gone && ["queued", "joining", "running"].includes(b.state)) {
    return `<div class="flue-outcome flue-gone">the kernel went away before this ended: re-run the cell to see how it ended</div>`;
  }
  if (b.state === "queued") return `<div class="flue-outcome flue-queued">queued: runs when the agent is free</div>`;
  if (b.state === "joining") return `<div class="flue-outcome flue-queued">queued: joins the live response at the next turn</div>`;
  if (b.state === "running") return `<div class="flue-outcome flue-running">running…</div>`;
  if (!b.outcome) return "<div></div>";
  let text = OUTCOME[b.outcome] || b.outcome;
  if (b.error && b.outcome === "failed") text += `: ${esc(b.error.type)}: ${esc(b.error.message)}`;
  else if (b.error && b.outcome === "aborted") text += `: ${esc(b.error.message)}`;
  if (b.recovered) text += " (recovered after a restart)";
  return `<div class="flue-outcome flue-${b.outcome}">${text}</div>`;
}

/**
 * A diff's lines, each coloured as added, removed or context (and by language where highlight.js is loaded).
 * @param {string[]} lines
 * @param {string} lang
 * @param {any} hljs
 */
function diffHtml(lines, lang, hljs) {
  const known = Boolean(hljs && lang && hljs.getLanguage && hljs.getLanguage(lang));
  const body = lines.map((x) => {
    const cls = x.startsWith("@@") ? "flue-hunk" : x.startsWith("+") ? "flue-add" : x.startsWith("-") ? "flue-del" : "flue-ctx";
    if (cls === "flue-hunk" || !known) return `<span class="${cls}">${esc(x) || "&nbsp;"}</span>`;
    let code = esc(x.slice(1));
    try { code = hljs.highlight(x.slice(1), { language: lang, ignoreIllegals: true }).value; } catch (e) { /* plain */ }
    return `<span class="${cls}">${esc(x.slice(0, 1))}${code || "&nbsp;"}</span>`;
  }).join("");
  return `<pre class="flue-diff"><code class="hljs">${body}</code></pre>`;
}

/**
 * A settled run's changes: one line ("3 changes: 1 cell, 1 file, 1 variable — review") until opened,
 * then each item with its diff or summary and Keep / Undo, and Keep all / Undo all.
 * @param {Ctx} ctx
 * @param {ChangesJSON} c
 */
export function changesPanel(ctx, c) {
  const key = "changes:" + c.submission_id;
  const sid = esc(c.submission_id);
  const live = ctx.interactive && ctx.mode === "chat" && !ctx.gone;
  const open = (/** @type {ChangeItemJSON} */ i) => i.undoable && !i.undone && !i.kept;
  const undone = c.items.filter((i) => i.undone).length, kept = c.items.filter((i) => i.kept && !i.undone).length;
  const state = [undone ? `${undone} undone` : "", kept ? `${kept} kept` : ""].filter(Boolean).join(", ");
  const head = `<span class="flue-chg-title">${esc(c.headline)}</span>${state ? ` <span class="flue-muted">(${state})</span>` : ""} <span class="flue-muted">— review</span>`;
  const rows = c.items.map((i) => {
    const mark = i.undone ? `<span class="flue-badge flue-undone">undone</span>` : i.kept ? `<span class="flue-badge">kept</span>` : "";
    const buttons = live && open(i)
      ? `<span class="flue-chg-btns"><button class="flue-btn flue-keep" data-sid="${sid}" data-item="${esc(i.key)}">Keep</button> <button class="flue-btn flue-undo" data-sid="${sid}" data-item="${esc(i.key)}">Undo</button></span>` : "";
    const what = i.kind === "variable" ? esc(i.summary) : `<span title="${esc(i.title)}">${esc(i.target)}</span> <span class="flue-muted">${esc(i.summary)}</span>`;
    const note = i.note && !i.undone ? `<div class="flue-muted">${esc(i.note)}</div>` : "";
    const diff = i.diff.length ? diffHtml(i.diff, i.lang, ctx.libs && ctx.libs.hljs) : "";
    const dnote = i.diff_note ? `<div class="flue-muted">${esc(i.diff_note)}</div>` : "";
    return `<div class="flue-chg flue-chg-${esc(i.kind)}${i.undone ? " flue-chg-undone" : ""}" data-item="${esc(i.key)}"><div class="flue-chg-head"><code>${esc(i.key)}</code> <span class="flue-chg-kind">${esc(i.kind)}</span> ${what} ${mark}${buttons}</div>${note}${i.undone ? "" : diff + dnote}</div>`;
  }).join("");
  const anyOpen = c.items.some(open);
  const all = live && anyOpen
    ? `<div class="flue-chg-all"><button class="flue-btn flue-keep" data-sid="${sid}" data-item="all">Keep all</button> <button class="flue-btn flue-undo" data-sid="${sid}" data-item="all">Undo all</button></div>` : "";
  const hint = !live && anyOpen ? `<div class="flue-muted">undo with <code>%flue undo ${esc(c.items.find(open)?.key || "")}</code>, <code>%flue undo all</code> or <code>%flue rewind STEP</code></div>` : "";
  let said = "";
  if (c.said) {
    const offer = c.offer && live
      ? ` <button class="flue-btn flue-force" data-sid="${sid}" data-what="${esc(c.offer.what)}" data-items="${esc(c.offer.items.join(" "))}">${c.offer.what === "rewind" ? "Rewind anyway" : "Undo anyway"}</button>` : "";
    const why = c.refused.length ? `<ul class="flue-refused">${c.refused.map((r) => `<li>${esc(r)}</li>`).join("")}</ul>` : "";
    const cls = c.offer ? "flue-chg-said flue-chg-refused" : "flue-chg-said";
    said = `<div class="${cls}" role="status"><pre class="flue-pre">${esc(c.said)}</pre>${c.offer ? why : ""}${offer}</div>`;
  }
  const opened = ctx.opened.has(key) || Boolean(c.offer);
  return details(key, opened, head, `<div class="flue-chg-body">${rows}${all}${hint}${said}</div>`, "flue-changes", `changes of this run: ${c.headline}`);
}

/**
 * A block's pieces, each keyed, each one root element: what `patch` redraws one at a time.
 * @param {Ctx} ctx
 * @param {BlockJSON} b
 */
export function blockPieces(ctx, b) {
  /** @type {[string, string][]} */
  const out = [];
  if (b.kind !== "aside") {
    if (ctx.mode === "chat" && b.text) out.push(["user", `<div class="flue-user">${esc(b.text)}</div>`]);
    if (b.recovered) out.push(["rec", `<span class="flue-badge flue-rec">recovered</span>`]);
  }
  b.parts.forEach((p, i) => out.push([`p${i}`, part(ctx, p, `${b.id}:${i}`)]));
  if (b.kind !== "aside") out.push(["outcome", outcomeLine(b, ctx.gone)]);
  const changes = ctx.changes && b.state === "settled" ? ctx.changes[b.id] : undefined;
  if (changes && changes.items.length) out.push(["changes", changesPanel(ctx, changes)]);
  return out;
}

// --- the DOM: keyed redraws -------------------------------------------------------------------

/**
 * A piece's root element; `__html` is the HTML it was made from (redrawn when that changes).
 * @typedef {HTMLElement & { __html?: string }} Piece
 */

/**
 * @param {string} html
 * @returns {Piece}
 */
function fromHtml(html) {
  const t = document.createElement("template");
  t.innerHTML = html;
  const first = t.content.firstElementChild;
  return first instanceof HTMLElement ? first : document.createElement("div");
}

/**
 * Make `box`'s children the keyed pieces, replacing only those whose HTML changed.
 * @param {HTMLElement} box
 * @param {[string, string][]} pieces
 */
function patch(box, pieces) {
  const have = children(box);
  let prev = null;
  for (const [key, html] of pieces) {
    let node = have.get(key);
    if (!node || node.__html !== html) {
      const fresh = fromHtml(html);
      fresh.dataset.piece = key;
      fresh.__html = html;
      if (node) node.replaceWith(fresh); else box.insertBefore(fresh, prev ? prev.nextSibling : box.firstChild);
      node = fresh;
    } else if (node.previousElementSibling !== prev) {
      box.insertBefore(node, prev ? prev.nextSibling : box.firstChild);
    }
    have.delete(key);
    prev = node;
  }
  for (const stale of have.values()) stale.remove();
}

/**
 * `box`'s children by their piece key.
 * @param {HTMLElement} box
 * @returns {Map<string | undefined, Piece>}
 */
function children(box) {
  return new Map([...box.children].filter((c) => c instanceof HTMLElement).map((c) => [c.dataset.piece, c]));
}

/**
 * @param {Ctx} ctx
 * @param {BlockJSON[]} blocks
 * @returns {[string, BlockJSON][]}
 */
function blockElements(ctx, blocks) {
  return blocks.filter((b) => !(b.state === "joined" && ctx.mode === "chat")).map((b) => [b.id, b]);
}

/**
 * @param {Ctx} ctx
 * @param {HTMLElement} box
 * @param {BlockJSON[]} blocks
 */
function patchBlocks(ctx, box, blocks) {
  const want = blockElements(ctx, blocks);
  const have = children(box);
  let prev = null;
  for (const [id, b] of want) {
    let node = have.get(id);
    if (!node) {
      node = document.createElement("div");
      node.dataset.piece = id;
      box.insertBefore(node, prev ? prev.nextSibling : box.firstChild);
    }
    node.className = `flue-block${b.kind === "aside" ? " flue-aside" : ""}`;
    node.dataset.sid = id;
    patch(node, blockPieces(ctx, b));
    have.delete(id);
    prev = node;
  }
  for (const stale of have.values()) stale.remove();
}

/** @param {Partial<StatusJSON>} st */
function gauge(st) {
  const used = st.used_tokens, win = st.context_window, thr = st.threshold;
  /** @type {Partial<UsageJSON>} */
  const u = st.usage || {};
  const pct = used && win ? Math.min(100, (100 * used) / win) : 0;
  const mark = thr && win ? `<div class="flue-gauge-mark" style="left:${Math.min(100, (100 * thr) / win)}%" title="compacts at ${fmtTokens(thr)}"></div>` : "";
  const ctxText = win ? `${fmtTokens(used ?? 0)} / ${fmtTokens(win)} tokens` + (thr ? ` · compacts at ${fmtTokens(thr)}` : "") : "context window unknown";
  const cached = st.cache_share != null ? ` (${Math.round(st.cache_share * 100)} % cached)` : "";
  const counts = st.tokens_reported === false
    ? "tokens not reported by the model server"
    : `in ${fmtTokens(u.input || 0)} · out ${fmtTokens(u.output || 0)} · cache read ${fmtTokens(u.cache_read || 0)} · cache write ${fmtTokens(u.cache_write || 0)}${cached}`;
  const full = `${ctxText} · ${counts}`;
  return `<div class="flue-gauge" role="meter" aria-label="context used" aria-valuemin="0" aria-valuemax="${win || 0}" aria-valuenow="${used || 0}"><div class="flue-gauge-fill" style="width:${pct}%"></div>${mark}</div>` +
    `<div class="flue-gauge-text" title="${esc(full)}${st.cost_note ? " · " + esc(st.cost_note) : ""}">${esc(full)}${st.cost ? ` · ${esc(st.cost)}` : ""}</div>`;
}

// --- the kernel link: is the kernel there, and which messages has it not acknowledged ----------

/** Milliseconds without the kernel's beat (`_heartbeat.py` sends one every 3 s) before a view
 * calls its kernel gone: long enough for a cell holding the GIL in C code for a while. */
export const SILENCE = 20000;

/** What a view knows of its kernel, and the messages it sent that the kernel has not taken yet. */
/** @typedef {{ id: string, text: string, at: number, known: Set<string> }} Pending */

export class Link {
  /** @param {number} now */
  constructor(now) {
    this.lastBeat = now;
    /** @type {Gone} "restarted" (the frontend said so), "dead" or "silent" (no beats) */
    this.gone = "";
    /** @type {Pending[]} */
    this.pending = [];
    /** @type {Pending[]} messages handed back to the input */
    this.returned = [];
    this.seq = 0;
  }

  /** @param {number} now */
  beat(now) {
    this.lastBeat = now;
    if (this.gone === "silent") this.gone = ""; // only quiet (a long C call): it is back
  }

  /**
   * The frontend says the kernel restarted or died: nothing brings this view's model back.
   * @param {"restarted" | "dead"} why
   */
  lost(why) { this.gone = why; }

  /**
   * The state after `now`'s look at the beats.
   * @param {number} now
   */
  check(now) {
    if (!this.gone && now - this.lastBeat > SILENCE) this.gone = "silent";
    return this.gone;
  }

  /**
   * A new message, pending until the kernel acknowledges its id (or draws it: `seen`);
   * `known` are the ids of the blocks drawn when it was sent.
   * @param {string} text
   * @param {number} now
   * @param {string[]} [known]
   */
  add(text, now, known = []) {
    const id = `m${now.toString(36)}.${++this.seq}.${Math.random().toString(36).slice(2, 8)}`;
    this.pending.push({ id, text, at: now, known: new Set(known) });
    return id;
  }

  /**
   * The kernel drew a block for a pending message (a new block with its text) before its
   * acknowledgement arrived: it has it. Each block answers for one message.
   * @param {Pick<BlockJSON, "id" | "text">[]} blocks
   */
  seen(blocks) {
    const used = new Set();
    this.pending = this.pending.filter((p) => {
      const b = blocks.find((x) => x.text === p.text && !p.known.has(x.id) && !used.has(x.id));
      if (!b) return true;
      used.add(b.id);
      return false;
    });
  }

  /**
   * The kernel's acknowledgements (`sent`: id -> submission id, "" when refused): the refused
   * messages, and those handed back that the kernel took after all.
   * @param {Traits["sent"]} sent
   */
  ack(sent) {
    /** @type {Pending[]} */
    const refused = [];
    /** @type {Pending[]} */
    const late = [];
    this.pending = this.pending.filter((p) => {
      if (!Object.prototype.hasOwnProperty.call(sent, p.id)) return true;
      if (!sent[p.id]) refused.push(p);
      return false;
    });
    this.returned = this.returned.filter((p) => {
      if (!Object.prototype.hasOwnProperty.call(sent, p.id)) return true;
      if (sent[p.id]) late.push(p);
      return false;
    });
    return { refused, late };
  }

  /** The kernel is gone: every pending message goes back to the person who typed it. */
  takeBack() {
    const back = this.pending;
    this.pending = [];
    this.returned.push(...back);
    return back;
  }
}

/**
 * What the view says of a kernel that is gone.
 * @param {Gone} why
 */
export function goneText(why) {
  if (why === "restarted") return "the kernel restarted — re-run this cell to chat";
  if (why === "dead") return "the kernel died — re-run this cell to chat";
  return `no word from the kernel for ${Math.round(SILENCE / 1000)} s: it is gone (killed, restarted, or its server stopped) or stuck — re-run this cell to chat`;
}

/**
 * The input's text with `back` (messages not sent) put in front of what is typed there now.
 * @param {string} current
 * @param {{ text: string }[]} back
 */
export function putBack(current, back) {
  const texts = back.map((p) => p.text);
  if (current.trim()) texts.push(current);
  return texts.join("\n\n");
}

// --- a notebook saved while the chat was live (issue 19.1) ---------------------------------------

const STATE = "application/vnd.jupyter.widget-state+json";
const STUB_CLASS = "flue-saved-stub";
/** What the notebook's widget state says of a live chat's model: an HTML widget whose only
 * content is a rule hiding its own output. Reopened where that model is gone (a new kernel), the
 * frontend draws this instead of "Error displaying widget: model not found" (and its
 * disconnected mark), and the static copy under it reads the conversation. */
export const STUB = {
  model_name: "HTMLModel", model_module: "@jupyter-widgets/controls", model_module_version: "2.0.0",
  state: {
    value: `<style>.jp-OutputArea-child:has(.${STUB_CLASS}) { display: none; }</style>`,
    _dom_classes: [STUB_CLASS],
  },
};

/**
 * The model ids the notebook's outputs show.
 * @param {any} nb  JupyterLab's notebook model
 */
function referencedModels(nb) {
  /** @type {Set<string>} */
  const ids = new Set();
  for (const c of nb.cells) {
    const outputs = c.outputs;
    if (!outputs) continue;
    for (let i = 0; i < outputs.length; i++) {
      const view = (outputs.get(i).data || {})["application/vnd.jupyter.widget-view+json"];
      if (view && view.model_id) ids.add(view.model_id);
    }
  }
  return ids;
}

/**
 * @typedef {{ state?: Record<string, any>, [key: string]: unknown }} WidgetState  the notebook's
 *   `application/vnd.jupyter.widget-state+json` metadata
 */

/**
 * The notebook's widget state with `id` as a stub, and the stubs of models no output shows
 * any longer dropped; null when there is nothing to change.
 * @param {WidgetState | null | undefined} saved
 * @param {string} id
 * @param {Set<string> | null} used
 */
export function withStub(saved, id, used) {
  /** @type {Record<string, any>} */
  const was = (saved && saved.state) || {};
  if (was[id]) return null;
  /** @type {Record<string, any>} */
  const state = {};
  for (const [k, v] of Object.entries(was)) {
    const stub = ((v && v.state && v.state._dom_classes) || []).includes(STUB_CLASS);
    if (!stub || !used || used.has(k)) state[k] = v;
  }
  state[id] = STUB;
  return { version_major: 2, version_minor: 0, ...(saved || {}), state };
}

/**
 * In JupyterLab and Notebook 7 (their widget manager knows its notebook), name this chat's
 * model in the notebook's widget state; elsewhere nothing to do.
 * @param {Model} model
 */
function leaveStub(model) {
  try {
    const id = model.get("ref");
    const nb = model.widget_manager && model.widget_manager.context && model.widget_manager.context.model;
    if (!id || !nb || typeof nb.getMetadata !== "function") return;
    const meta = nb.getMetadata("widgets") || {};
    let used = null;
    try { used = referencedModels(nb); used.add(id); } catch (e) { used = null; } // no pruning then
    const saved = withStub(meta[STATE], id, used);
    if (saved) nb.setMetadata("widgets", { ...meta, [STATE]: saved });
  } catch (e) {
    console.warn("flue_nb: could not name the chat in the notebook's widget state", e);
  }
}

// --- loading the vendored libraries (once a page) --------------------------------------------

/** @type {Map<string, Promise<Libs | null>>} one load per vendor model, shared by every chat.js a page loads */
const LOADED = (/** @type {any} */ (globalThis).__flue_nb_vendor ??= new Map());

/** @param {string} src */
async function importSource(src) {
  const url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
  try { return await import(/* webpackIgnore: true */ url); } finally { URL.revokeObjectURL(url); }
}

/**
 * @param {Model} model
 * @returns {Promise<Libs | null>}
 */
function loadLibs(model) {
  const ref = model.get("vendor");
  if (!ref || !model.widget_manager) return Promise.resolve(null);
  const id = String(ref).replace(/^IPY_MODEL_/, "");
  let loading = LOADED.get(id);
  if (!loading) {
    loading = (async () => {
      const vendor = await model.widget_manager.get_model(id);
      /** @type {VendorTraits["sources"]} */
      const src = vendor.get("sources");
      const [marked, purify, hljs, katex] = await Promise.all(["marked", "purify", "hljs", "katex"].map((n) => importSource(src[n])));
      if (!document.getElementById("flue-katex-css")) {
        const style = document.createElement("style");
        style.id = "flue-katex-css";
        style.textContent = src["katex.css"];
        document.head.appendChild(style);
      }
      return { marked, DOMPurify: purify.default, hljs: hljs.default, katex: katex.default };
    })().catch((e) => { console.warn("flue_nb: the chat's libraries did not load; text is shown plain", e); return null; });
    LOADED.set(id, loading);
  }
  return loading;
}

// --- Stop for an outside call holding the kernel's main thread ----------------------------------

const STOP_WAIT_MS = 3000;
const USE_INTERRUPT = "An outside call holds the kernel and this page cannot reach the kernel's control channel: " +
  "stop it with the kernel's interrupt (■); Stop takes effect once the kernel is free.";

/**
 * The kernel connection of the page's widget manager (JupyterLab, Notebook 7, Voilà), if any.
 * @param {Model} model
 */
function controlChannel(model) {
  const kernel = model.widget_manager && model.widget_manager.kernel;
  return kernel && typeof kernel.sendControlMessage === "function" ? kernel : null;
}

function messageId() {
  const c = globalThis.crypto;
  return c && typeof c.randomUUID === "function" ? c.randomUUID()
    : `flue-${Date.now().toString(16)}-${Math.random().toString(16).slice(2)}`;
}

/**
 * Ask the kernel, on its control channel (served off the main thread the call holds), to stop
 * the outside call `callId` (flue_nb/notebook/serve/_stop.py).
 * @param {Model} model
 * @param {string} callId
 * @returns {Promise<"stopped" | "ended" | "unreachable">}
 */
export function stopHeldCall(model, callId) {
  const kernel = controlChannel(model);
  if (!kernel) return Promise.resolve("unreachable");
  /** @type {StopRequest} */
  const content = { call_id: callId };
  const msg = {
    channel: "control", parent_header: {}, metadata: {}, content, buffers: [],
    header: { msg_id: messageId(), msg_type: "flue_stop_request", session: kernel.clientId || "",
      username: kernel.username || "", date: new Date().toISOString(), version: "5.3" },
  };
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve("unreachable"), STOP_WAIT_MS);
    try {
      const future = kernel.sendControlMessage(msg, true, true);
      future.onReply = (/** @type {{ content?: StopReply } | undefined} */ reply) => {
        clearTimeout(timer);
        resolve(reply && reply.content && reply.content.stopped ? "stopped" : "ended");
      };
      if (future.done && future.done.catch) future.done.catch(() => {});
    } catch (e) {
      clearTimeout(timer);
      resolve("unreachable");
    }
  });
}

// --- the widget -------------------------------------------------------------------------------

/**
 * Draw the chat into `el`; the returned function undoes what outlives the view.
 * @param {{ model: Model, el: HTMLElement }} view
 */
async function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "flue-chat";
  root.innerHTML = `<div class="flue-head"><span class="flue-title"></span><span class="flue-state" role="status"></span><span class="flue-hint"></span><button class="flue-btn flue-stop" title="Abort every unsettled message of this conversation">Stop</button></div>
<div class="flue-gaugebox"></div>
<div class="flue-log" role="log" aria-label="conversation" tabindex="0"><div class="flue-earlier"></div><div class="flue-history"></div><div class="flue-live"></div><div class="flue-pending"></div></div>
<div class="flue-gone-note" role="alert"></div>
<div class="flue-error" role="alert"></div>
<div class="flue-announce" aria-live="polite"></div>
<div class="flue-input"><textarea rows="2" aria-label="Message the agent" placeholder="Message the agent (Enter to send, Shift+Enter for a new line)"></textarea><button class="flue-btn flue-send">Send</button></div>
<div class="flue-overlay" hidden><img alt=""></div>`;
  el.appendChild(root);
  /** @type {(selector: string) => HTMLElement} the view's own elements, always there */
  const $ = (s) => /** @type {HTMLElement} */ (root.querySelector(s));
  const log = $(".flue-log");
  const stop = /** @type {HTMLButtonElement} */ ($(".flue-stop"));
  /** @type {Set<string>} */
  const opened = new Set();
  /** @type {Set<string>} */
  const closed = new Set(); // cards with figures start open; these the user closed
  const link = new Link(Date.now());
  let follow = true;
  /** @type {Libs | null} */
  let libs = null;
  /** @returns {Ctx} */
  const ctx = () => ({
    opened, closed, libs, md, images: model.get("images") || {}, mode: model.get("mode"), interactive: model.get("interactive"),
    gone: link.gone, changes: model.get("changes") || {},
  });
  let md = makeMarkdown(null);

  root.addEventListener("toggle", (e) => {
    const d = e.target;
    if (!(d instanceof HTMLDetailsElement) || !d.dataset.key) return;
    if (d.open) { opened.add(d.dataset.key); closed.delete(d.dataset.key); } else { opened.delete(d.dataset.key); closed.add(d.dataset.key); }
  }, true);
  root.addEventListener("click", (e) => {
    if (!(e.target instanceof Element)) return;
    const fig = e.target.closest(".flue-fig");
    if (fig instanceof HTMLElement) {
      const ov = $(".flue-overlay");
      const img = /** @type {HTMLImageElement} */ (ov.querySelector("img"));
      img.src = (model.get("images") || {})[fig.dataset.digest || ""] || "";
      img.alt = fig.getAttribute("aria-label") || "";
      ov.hidden = false;
      return;
    }
    if (e.target.closest(".flue-overlay")) { $(".flue-overlay").hidden = true; return; }
    const b = e.target.closest("button");
    if (b && (b.classList.contains("flue-approve") || b.classList.contains("flue-deny") || b.classList.contains("flue-always"))) {
      const always = b.classList.contains("flue-always");
      if (b.dataset.call) model.send({ type: "approve", call_id: b.dataset.call, approved: always || b.classList.contains("flue-approve"), always });
      b.parentElement?.querySelectorAll("button").forEach((x) => { x.disabled = true; });
      return;
    }
    if (b && !link.gone) changeClick(b);
  });
  /** Keep, Undo (one or all), Undo anyway and Rewind: each a message the widget answers in `changes`. */
  const changeClick = (/** @type {HTMLButtonElement} */ b) => {
    const sid = b.dataset.sid || "";
    const item = b.dataset.item || "";
    if (b.classList.contains("flue-keep")) model.send({ type: "keep", submission_id: sid, items: [item] });
    else if (b.classList.contains("flue-undo")) model.send({ type: "undo", submission_id: sid, items: [item], force: false });
    else if (b.classList.contains("flue-force")) {
      const items = (b.dataset.items || "").split(" ").filter(Boolean);
      if (b.dataset.what === "rewind") model.send({ type: "rewind", submission_id: sid, call_id: items[0] || "", force: true });
      else model.send({ type: "undo", submission_id: sid, items, force: true });
    } else if (b.classList.contains("flue-rewind")) {
      const block = b.closest(".flue-block");
      const run = block instanceof HTMLElement ? block.dataset.sid || "" : "";
      model.send({ type: "rewind", submission_id: run, call_id: b.dataset.call || "", force: false });
      opened.add("changes:" + run); // the answer shows in the run's panel
    } else return;
    b.disabled = true;
  };
  stop.addEventListener("click", async () => {
    if (link.gone) return; // nothing there to stop
    const held = model.get("holding");
    if (!held) { model.send({ type: "stop" }); return; }
    // The `stop` message would wait for the main thread the call holds: go by the control
    // channel; the kernel stops the call (and aborts the conversation) only if it still runs.
    const how = await stopHeldCall(model, held);
    if (how !== "stopped") model.send({ type: "stop" }); // ended meanwhile, or no control channel
    $(".flue-error").textContent = how === "unreachable" ? USE_INTERRUPT : "";
  });
  const ta = /** @type {HTMLTextAreaElement} */ ($("textarea"));
  const notSent = (/** @type {string} */ why) => { $(".flue-error").textContent = `not sent: ${why}`; };
  const send = () => {
    const text = ta.value.trim();
    if (!text) return;
    if (link.gone) { notSent("the kernel is gone; re-run this cell to chat (your text stays here)"); keepUnsent(); return; }
    // Shown at once, even while a cell keeps the kernel busy; pending until the kernel
    // acknowledges its id in `sent`, handed back to the input if the kernel goes first.
    const id = link.add(text, Date.now(), knownBlocks().map((b) => b.id));
    try {
      model.send({ type: "send", text, id });
    } catch (e) {
      link.pending = link.pending.filter((p) => p.id !== id);
      notSent(`the frontend could not reach the kernel (${e}); your text stays here`);
      return;
    }
    ta.value = "";
    follow = true;
    drawPending();
  };
  $(".flue-send").addEventListener("click", send);
  ta.addEventListener("keydown", (e) => {
    const save = (e.ctrlKey || e.metaKey) && !e.altKey && e.key.toLowerCase() === "s";
    if (e.key === "Escape") {
      // Leave the input as Escape leaves a cell's editor: focus goes back to the notebook.
      ta.blur();
      const cell = el.closest(".jp-Cell, .jp-Notebook");
      if (cell instanceof HTMLElement) cell.focus();
      return;
    }
    if (save) return; // JupyterLab's own shortcut handler (on the document) saves the notebook
    e.stopPropagation(); // every other key typed here is the message's, not a notebook shortcut
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
  });
  // Older submissions come a page at a time (the kernel drew the newest page): asked for when
  // the user scrolls to the top or clicks, kept in place when they arrive above.
  let askedOlder = false;
  let keepFromBottom = -1;
  const askOlder = () => {
    if (askedOlder || link.gone || !(model.get("older") > 0)) return;
    askedOlder = true;
    keepFromBottom = log.scrollHeight - log.scrollTop;
    drawEarlier();
    try { model.send({ type: "older" }); } catch (e) { askedOlder = false; drawEarlier(); }
  };
  const drawEarlier = () => {
    const n = model.get("older") || 0;
    const box = $(".flue-earlier");
    if (!n) { box.replaceChildren(); return; }
    const what = `${n.toLocaleString()} earlier submission${n === 1 ? "" : "s"}`;
    box.innerHTML = askedOlder ? `<span class="flue-earlier-note">loading ${esc(what)}…</span>`
      : `<button class="flue-btn flue-older">Show earlier messages</button> <span class="flue-earlier-note">${esc(what)}</span>`;
    const b = box.querySelector("button");
    if (b) b.addEventListener("click", askOlder);
  };
  log.addEventListener("scroll", () => {
    follow = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
    if (log.scrollTop < 40 && log.scrollHeight > log.clientHeight) askOlder();
  });
  const stick = () => { if (follow) log.scrollTop = log.scrollHeight; };
  const resized = typeof ResizeObserver !== "undefined" ? new ResizeObserver(stick) : null;
  if (resized) { resized.observe($(".flue-history")); resized.observe($(".flue-live")); }

  let lastStatus = "";
  let announcedFor = new Set((model.get("history") || []).map((b) => b.id));
  const announce = (/** @type {string} */ text) => {
    // Appended, not replaced: an answer and the "idle" right after it are both read out.
    const box = $(".flue-announce");
    const line = document.createElement("div");
    line.textContent = text;
    box.appendChild(line);
    while (box.firstElementChild && box.children.length > 3) box.firstElementChild.remove();
  };

  function knownBlocks() { return [...(model.get("history") || []), ...(model.get("live") || [])]; }
  function drawPending() {
    link.seen(knownBlocks());
    patch($(".flue-pending"), link.pending.map((p) => [p.id,
      `<div class="flue-block flue-waiting"><div class="flue-user">${esc(p.text)}</div><div class="flue-outcome flue-queued">waiting for the kernel…</div></div>`]));
    stick();
  }
  const onSent = () => {
    const { refused, late } = link.ack(model.get("sent") || {});
    if (refused.length) ta.value = putBack(ta.value, refused); // `error` says why
    for (const p of late) {
      // Handed back when the kernel fell silent, taken after all: not twice in the input.
      if (ta.value.includes(p.text)) ta.value = ta.value.replace(p.text, "").trim();
      $(".flue-error").textContent = "the kernel was only slow: your message was sent after all";
    }
    drawPending();
  };
  // What a dead view's input holds outlives the view: re-running the cell replaces it, and the
  // new chat of the same conversation (this browser) starts with that text in its input.
  const unsentKey = () => `flue-unsent:${model.get("title")}`;
  const keepUnsent = () => {
    try {
      if (!link.gone) return;
      if (ta.value.trim()) localStorage.setItem(unsentKey(), ta.value); else localStorage.removeItem(unsentKey());
    } catch (e) { /* no storage here: the text stays in this view's input */ }
  };
  ta.addEventListener("input", keepUnsent);
  try {
    const unsent = localStorage.getItem(unsentKey());
    if (unsent) {
      localStorage.removeItem(unsentKey());
      ta.value = putBack(ta.value, [{ text: unsent }]);
      $(".flue-error").textContent = "not sent before the last kernel went away: your message is back in the input";
    }
  } catch (e) { /* no storage */ }
  const onGone = () => {
    const back = link.takeBack();
    if (back.length) {
      ta.value = putBack(ta.value, back);
      const what = back.length === 1 ? "your message: it is" : "your messages: they are";
      notSent(`${link.gone === "silent" ? "the kernel went silent before it took" : "the kernel is gone and never took"} ${what} back in the input`);
    }
    keepUnsent();
    drawAll();
  };
  const look = () => {
    let why = link.gone;
    try { // the frontend's own word, where its widget manager says it (JupyterLab, Notebook 7)
      const k = model.widget_manager && model.widget_manager.kernel;
      if (!why && k && k.status === "dead") { link.lost("dead"); why = "dead"; }
    } catch (e) { /* no kernel to ask: the beats decide */ }
    const was = link.gone;
    why = link.check(Date.now());
    if (why && !was) onGone();
    else if (why !== (was || "")) drawAll();
  };
  const onBeat = (/** @type {KernelMsg | undefined} */ msg) => {
    if (!msg || msg.type !== "beat") return;
    const was = link.gone;
    link.beat(Date.now());
    if (was && !link.gone) {
      if ($(".flue-error").textContent.startsWith("not sent: the kernel")) $(".flue-error").textContent = "";
      drawAll();
    }
  };
  // The widget manager marks every model not live when its kernel restarts (a restart from the
  // frontend, or the server's after a crash): the new kernel has no model for this view.
  const onCommLive = () => {
    if (link.gone === "restarted") return;
    const was = link.gone;
    link.lost("restarted");
    if (!was) onGone(); else drawAll();
  };
  const draw = (/** @type {"all" | "live"} */ which) => {
    const c = ctx();
    if (which !== "live") patchBlocks(c, $(".flue-history"), model.get("history") || []);
    patchBlocks(c, $(".flue-live"), model.get("live") || []);
    drawPending();
    for (const b of model.get("history") || []) {
      if (announcedFor.has(b.id)) continue;
      announcedFor.add(b.id);
      const answer = b.parts.flatMap((p) => (p.kind === "text" ? [p.text] : [])).join(" ").slice(0, 300);
      if (b.kind === "submission") announce(b.outcome === "completed" ? `answer: ${answer}` : `${b.outcome || "settled"}`);
    }
    stick();
  };
  const drawStatus = () => {
    const st = model.get("status") || {};
    const mode = model.get("mode");
    root.classList.toggle("flue-mode-cell", mode === "cell");
    const showModel = st.model && st.model !== st.agent; // a hosted ACP agent is its own model: named once
    $(".flue-title").textContent = `flue · ${st.agent || "agent"}${showModel ? " · " + st.model : ""} · ${model.get("title")}`;
    const live = model.get("live") || [];
    const running = st.running || live.some((b) => b.state === "running");
    const queued = live.filter((b) => b.state === "queued" || b.state === "joining").length;
    const state = running ? (queued ? `working · ${queued} queued` : "working") : (queued ? `${queued} queued` : "idle");
    $(".flue-state").textContent = state;
    $(".flue-state").className = "flue-state " + (running ? "flue-busy" : "flue-idle");
    if (state !== lastStatus && lastStatus) announce(state);
    lastStatus = state;
    const interactive = model.get("interactive");
    root.classList.toggle("flue-dead", Boolean(link.gone));
    $(".flue-gone-note").textContent = link.gone ? goneText(link.gone) : "";
    if (link.gone) {
      $(".flue-state").textContent = link.gone === "restarted" ? "kernel restarted" : "kernel gone";
      $(".flue-state").className = "flue-state flue-dead-state";
      stop.disabled = true;
      stop.style.display = interactive ? "" : "none";
      $(".flue-hint").textContent = "";
      $(".flue-gaugebox").innerHTML = gauge(st);
      if (lastStatus !== "gone") announce(goneText(link.gone));
      lastStatus = "gone";
      return;
    }
    stop.disabled = !running && !queued;
    stop.style.display = interactive ? "" : "none";
    // A blocking cell keeps the kernel busy: the kernel's own stop button is the way to stop it.
    $(".flue-hint").textContent = !interactive && running ? "stop with the kernel's interrupt (■)"
      : model.get("holding") && !controlChannel(model) ? "an outside call holds the kernel: stop it with the kernel's interrupt (■)" : "";
    $(".flue-gaugebox").innerHTML = gauge(st);
  };
  const drawError = () => { $(".flue-error").textContent = model.get("error") || ""; };
  const drawAll = () => { draw("all"); drawStatus(); };
  const onHistory = () => {
    drawAll();
    if (keepFromBottom >= 0 && !askedOlder) {
      log.scrollTop = log.scrollHeight - keepFromBottom; // what the user looked at stays in view
      keepFromBottom = -1;
    }
  };
  const onOlder = () => { askedOlder = false; drawEarlier(); };
  const onLive = () => { draw("live"); drawStatus(); };
  const timer = setInterval(() => {
    for (const w of root.querySelectorAll(".flue-wait")) if (w instanceof HTMLElement) w.textContent = fmtWait(Date.now() / 1000 - Number(w.dataset.since));
    look();
  }, 1000);
  /** @type {[string, (...args: any[]) => void][]} */
  const events = [["change:history", onHistory], ["change:live", onLive], ["change:status", drawStatus],
    ["change:error", drawError], ["change:holding", drawStatus], ["change:mode", onHistory], ["change:interactive", onHistory],
    ["change:images", onHistory], ["change:sent", onSent], ["change:changes", onHistory], ["change:older", onOlder], ["msg:custom", onBeat], ["comm_live_update", onCommLive]];
  for (const [name, fn] of events) model.on(name, fn);
  leaveStub(model);
  draw("all"); drawStatus(); drawEarlier();
  if (model.get("error")) drawError();
  requestAnimationFrame(stick); // start at the newest message once the view is laid out
  libs = await loadLibs(model);
  md = makeMarkdown(libs);
  for (const box of root.querySelectorAll(".flue-history, .flue-live")) box.replaceChildren();
  draw("all");
  requestAnimationFrame(stick);
  return () => {
    clearInterval(timer);
    if (resized) resized.disconnect();
    for (const [name, fn] of events) model.off(name, fn);
  };
}

export default { render };
