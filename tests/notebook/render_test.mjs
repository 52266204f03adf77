// Unit test of the chat's markdown renderer and cards, run by tests/notebook/test_render_js.py.
// Node has no DOM, so DOMPurify (which needs one) is given as a pass-through here; the hostile
// HTML case runs in Chromium (render_test.html), where the real sanitiser works.
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";

const dir = process.argv[2];
const load = (f) => import(pathToFileURL(`${dir}/${f}`).href);
const chat = await load("chat.js");
const marked = await load("vendor/marked.esm.js");
const hljs = (await load("vendor/highlight.min.js")).default;
const katex = (await load("vendor/katex.mjs")).default;
const passThrough = { sanitize: (html) => html, addHook() {} };
const md = chat.makeMarkdown({ marked, DOMPurify: passThrough, hljs, katex });

const table = md("| region | units |\n|---|---:|\n| north | 120 |\n| south | 95 |");
assert.match(table, /<table>/);
assert.match(table, /<th[^>]*>region<\/th>/);
assert.match(table, /<td[^>]*>120<\/td>/);

const nested = md("- one\n  - one.a\n  - one.b\n- two\n\n1. first\n2. second");
assert.match(nested, /<ul>\s*<li>one\s*<ul>\s*<li>one\.a<\/li>/);
assert.match(nested, /<ol>\s*<li>first<\/li>/);

const code = md("```python\ndef f(x):\n    return x + 1\n```");
assert.match(code, /<pre class="flue-code"><code class="hljs language-python">/);
assert.match(code, /<span class="hljs-keyword">def<\/span>/);

const link = md("see [the docs](https://docs.example.test/a?b=1)");
assert.match(link, /<a href="https:\/\/docs\.example\.test\/a\?b=1">the docs<\/a>/);

const math = md("Euler: $e^{i\\pi} + 1 = 0$ and $$\\sum_{k=1}^n k = \\frac{n(n+1)}{2}$$ but $5 and $6 stay.");
assert.match(math, /class="katex"/);
assert.match(math, /class="katex-display"/);
assert.match(math, /\$5 and \$6 stay/);

const files = md("## Goal\nfix it\n<read-files>\na.py\nb.py\n</read-files>\n<modified-files>\nc.py\n</modified-files>");
assert.doesNotMatch(files, /read-files/);
assert.match(files, /Files read:<\/strong><\/p>\s*<ul>\s*<li><code>a\.py<\/code><\/li>\s*<li><code>b\.py<\/code><\/li>/);
assert.match(files, /Files modified/);

// Code arguments are drawn as code, not as a JSON string with \n.
const ctx = { opened: new Set(), closed: new Set(), libs: { hljs }, md, images: {}, mode: "chat", interactive: true };
const card = chat.part(ctx, {
  kind: "tool", call_id: "c1", name: "python", summary: "x = 1…", status: "ok", duration_ms: 3,
  input: { text: "", bytes: 0, lines: 0, clipped: false },
  code: [{ arg: "code", lang: "python", value: { text: "x = 1\nprint(x)", bytes: 14, lines: 2, clipped: false } }],
  result: { text: "1\n", bytes: 2, lines: 1, clipped: false }, result_kind: "text", result_lang: "",
  namespace: { added: ["x"], changed: [], removed: [] }, approval: null, ask: null, asked_at: null,
  images: [], task: null,
}, "k");
assert.doesNotMatch(card, /\\n/);
assert.match(card, /language-python/);
assert.match(card, /role="group" aria-label="tool call python: ok"/);

// An edit_cell that landed shows the cell's old and new source as a diff (issue 35.4).
const edited = chat.part(ctx, {
  kind: "tool", call_id: "c3", name: "edit_cell", summary: "cell c1", status: "ok", duration_ms: 4,
  input: { text: '{"id": "c1"}', bytes: 12, lines: 1, clipped: false }, code: [],
  diff: ["@@ -1,2 +1,2 @@", "-x = 1", "+x = 10", " print(x)"],
  result: { text: "Edited cell 2 of fix.ipynb in your open tab", bytes: 40, lines: 1, clipped: false },
  result_kind: "text", result_lang: "", namespace: null, approval: null, ask: null, asked_at: null, images: [], task: null,
}, "k3");
assert.match(edited, /flue-celldiff/);
assert.match(edited, /<span class="flue-del">-.*x.*1<\/span>/);
assert.match(edited, /<span class="flue-add">\+.*x.*10<\/span>/);
assert.match(edited, /<span class="flue-ctx"> .*print/);

const denied = chat.part(ctx, {
  kind: "tool", call_id: "c2", name: "bash", summary: "rm -rf /", status: "denied", duration_ms: null,
  input: { text: "", bytes: 0, lines: 0, clipped: false }, code: [], result: { text: "Not run", bytes: 7, lines: 1, clipped: false },
  result_kind: "text", result_lang: "", namespace: null, approval: { approved: false, reason: "policy" }, ask: null,
  asked_at: null, images: [], task: null,
}, "k2");
assert.match(denied, /flue-tool-denied/);
assert.doesNotMatch(denied, /flue-tool-error/);
assert.match(denied, /denied by the approval policy/);

// A card waiting for approval offers "Always allow" when the rules offer a grant (`always`), worded
// by what the grant covers; a card with none (a place that runs code later) offers Approve and Deny.
const asking = (name, always) => chat.part(ctx, {
  kind: "tool", call_id: "c3", name, summary: "s", status: "awaiting_approval", duration_ms: null,
  input: { text: "", bytes: 0, lines: 0, clipped: false }, code: [], result: null, result_kind: "text", result_lang: "",
  namespace: null, approval: null, ask: `${name}: s`, asked_at: null, always, images: [], task: null,
}, "k5");
assert.match(asking("bash", "make test"), /Deny<\/button> <button class="flue-btn flue-always" data-call="c3" title="Approve, and run bash calls matching make test without asking for the rest of this conversation \(%flue status lists it; %flue revoke bash takes it back\)">Always allow this command in this conversation<\/button>/);
assert.match(asking("python", "*"), />Always allow python in this conversation</);
assert.match(asking("write", "data/a.csv"), />Always allow writes to this file in this conversation</);
assert.doesNotMatch(asking("write", null), /flue-always/);
assert.match(asking("write", null), /flue-approve/);
const byGrant = chat.part(ctx, {
  kind: "tool", call_id: "c4", name: "bash", summary: "ls", status: "ok", duration_ms: 1,
  input: { text: "", bytes: 0, lines: 0, clipped: false }, code: [], result: null, result_kind: "text", result_lang: "",
  namespace: null, ask: null, asked_at: null, always: null, images: [], task: null,
  approval: { reason: "allowed", approved: true, policy: "allow", rule: "allowed for this conversation: bash 'ls'" },
}, "k6");
assert.match(byGrant, /<div class="flue-muted flue-answered">allowed for this conversation: bash &#39;ls&#39;<\/div>/);

// Call ids repeat across submissions (issue 33.3): a card's key is its place, so opening the old
// turn's card does not open the new turn's.
const again = (id) => chat.blockPieces(ctx, { id, kind: "submission", text: "", state: "settled", outcome: "completed",
  parts: [{ kind: "tool", call_id: "call_1", name: "bash", summary: "ls", status: "ok", duration_ms: 1,
    input: { text: "", bytes: 0, lines: 0, clipped: false }, code: [], result: { text: "a", bytes: 1, lines: 1, clipped: false },
    result_kind: "text", result_lang: "", namespace: null, approval: null, ask: null, asked_at: null, images: [], task: null }] });
const keyOf = (pieces) => pieces.map(([, html]) => html.match(/data-key="(tool:[^"]*)"/)).filter(Boolean)[0][1];
assert.notEqual(keyOf(again("s1")), keyOf(again("s2")));

assert.equal(chat.fmtWait(75), "1 min 15 s");

// The changes panel: one line until opened; diffs coloured by line and language; Keep / Undo per
// item and for all in a live chat; a refusal says why and offers Undo anyway; a cell view says the magic.
const item = (over) => ({
  key: "1.1", ident: "e1:file:0", step: 1, call_id: "e1", tool: "edit", kind: "file", action: "changed",
  target: "clean.py", title: "/w/clean.py", summary: "changed, 10 bytes → 12 bytes (+1 −1 lines)",
  diff: ["@@ -1,2 +1,2 @@", " import pandas", "-x = 1", "+x = <2>"], diff_note: "", lang: "python",
  undone: false, undoable: true, kept: false, note: "", ...over,
});
const changes = {
  submission_id: "sub_1", headline: "2 changes: 1 file, 1 variable", said: "", refused: [], offer: null,
  items: [item({}), item({ key: "2.1", ident: "p1:variable:0", step: 2, call_id: "p1", tool: "python", kind: "variable",
    target: "df", title: "df", summary: "df: DataFrame 10,000×12 → 9,812×12", diff: [], lang: "" })],
};
const closedPanel = chat.changesPanel(ctx, changes);
assert.match(closedPanel, /^<details class="flue-changes" data-key="changes:sub_1" role="group"/);
assert.doesNotMatch(closedPanel, /<details[^>]* open/);
assert.match(closedPanel, /<summary><span class="flue-chg-title">2 changes: 1 file, 1 variable<\/span> <span class="flue-muted">— review<\/span><\/summary>/);
assert.match(closedPanel, /<span class="flue-del">-x = <span class="hljs-number">1<\/span><\/span>/);
assert.match(closedPanel, /<span class="flue-add">\+x = &lt;<span class="hljs-number">2<\/span>&gt;/);  // escaped, coloured
assert.match(closedPanel, /df: DataFrame 10,000×12 → 9,812×12/);
assert.equal((closedPanel.match(/class="flue-btn flue-undo"/g) || []).length, 3);  // two items and Undo all
assert.match(closedPanel, /data-sid="sub_1" data-item="all">Keep all<\/button> <button class="flue-btn flue-undo" data-sid="sub_1" data-item="all">Undo all/);
const refused = chat.changesPanel(ctx, { ...changes, said: "Nothing was changed: ...", refused: ["1.1 /w/clean.py — changed again since"],
  offer: { what: "undo", items: ["all"] } });
assert.match(refused, /<details[^>]* open/);  // what a click answered is not hidden
assert.match(refused, /<li>1\.1 \/w\/clean\.py — changed again since<\/li>/);
assert.match(refused, /class="flue-btn flue-force" data-sid="sub_1" data-what="undo" data-items="all">Undo anyway/);
const done = chat.changesPanel(ctx, { ...changes, items: [item({ undone: true }), item({ key: "2.1", kept: true })] });
assert.match(done, /\(1 undone, 1 kept\)/);
assert.doesNotMatch(done, /flue-btn flue-undo/);
const cellView = chat.changesPanel({ ...ctx, mode: "cell", interactive: false }, changes);
assert.doesNotMatch(cellView, /<button/);
assert.match(cellView, /<code>%flue undo 1\.1<\/code>/);
const rewindable = chat.part({ ...ctx }, { kind: "tool", call_id: "e1", name: "edit", summary: "clean.py", status: "ok", duration_ms: 1,
  input: { text: "", bytes: 0, lines: 0, clipped: false }, code: [], result: null, result_kind: "text", result_lang: "",
  namespace: null, approval: null, ask: null, asked_at: null, images: [], task: null, effects: 1 }, "k3");
assert.match(rewindable, /<button class="flue-btn flue-rewind" data-call="e1"[^>]*>Rewind to before this step<\/button>/);
assert.doesNotMatch(chat.part({ ...ctx, mode: "cell" }, { kind: "tool", call_id: "e1", name: "edit", summary: "", status: "ok",
  duration_ms: 1, input: { text: "", bytes: 0, lines: 0, clipped: false }, code: [], result: null, result_kind: "text",
  result_lang: "", namespace: null, approval: null, ask: null, asked_at: null, images: [], task: null, effects: 1 }, "k4"), /flue-rewind/);

// Stop on an outside call holding the kernel's main thread: a control-channel request naming it.
assert.equal(await chat.stopHeldCall({ widget_manager: {} }, "mcp_1"), "unreachable");
const sent = [];
const kernel = (stopped) => ({
  clientId: "client-1",
  username: "me",
  sendControlMessage(msg, expectReply) {
    sent.push([msg, expectReply]);
    const future = { done: Promise.resolve() };
    setTimeout(() => future.onReply({ content: { status: "ok", stopped } }), 5);
    return future;
  },
});
assert.equal(await chat.stopHeldCall({ widget_manager: { kernel: kernel(true) } }, "mcp_2"), "stopped");
const [msg, expectReply] = sent[0];
assert.equal(expectReply, true);
assert.equal(msg.channel, "control");
assert.equal(msg.header.msg_type, "flue_stop_request");
assert.equal(msg.header.session, "client-1");
assert.ok(msg.header.msg_id);
assert.deepEqual(msg.content, { call_id: "mcp_2" });
assert.equal(await chat.stopHeldCall({ widget_manager: { kernel: kernel(false) } }, "mcp_3"), "ended");
const throwing = { sendControlMessage() { throw new Error("kernel is dead"); } };
assert.equal(await chat.stopHeldCall({ widget_manager: { kernel: throwing } }, "mcp_4"), "unreachable");
console.log("ok");
