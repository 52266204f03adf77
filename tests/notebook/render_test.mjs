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

const denied = chat.part(ctx, {
  kind: "tool", call_id: "c2", name: "bash", summary: "rm -rf /", status: "denied", duration_ms: null,
  input: { text: "", bytes: 0, lines: 0, clipped: false }, code: [], result: { text: "Not run", bytes: 7, lines: 1, clipped: false },
  result_kind: "text", result_lang: "", namespace: null, approval: { approved: false, reason: "policy" }, ask: null,
  asked_at: null, images: [], task: null,
}, "k2");
assert.match(denied, /flue-tool-denied/);
assert.doesNotMatch(denied, /flue-tool-error/);
assert.match(denied, /denied by the approval policy/);

assert.equal(chat.fmtWait(75), "1 min 15 s");

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
