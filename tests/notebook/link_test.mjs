// Unit test of the chat view's kernel link (issue 19.6) and saved-state stub (issue 19.1), run by
// tests/notebook/test_render_js.py: pure functions of chat.js, no DOM.
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";

const chat = await import(pathToFileURL(`${process.argv[2]}/chat.js`).href);
const { Link, SILENCE, putBack, withStub, STUB, goneText } = chat;

// A message is pending until the kernel acknowledges its own id, whatever other blocks say.
const link = new Link(0);
const a = link.add("yes", 1);
const b = link.add("yes", 2); // the same text twice: two messages
assert.notEqual(a, b);
assert.deepEqual(link.ack({ [a]: "sub-1" }), { refused: [], late: [] });
assert.deepEqual(link.pending.map((p) => p.id), [b]);

// A new block with its text (drawn before the acknowledgement) takes it too; an old block with
// the same text does not, and one block answers for one message.
const s1 = link.add("again", 3, ["old"]);
const s2 = link.add("again", 4, ["old"]);
link.seen([{ id: "old", text: "again" }, { id: "new", text: "again" }]);
assert.deepEqual(link.pending.map((p) => p.id), [b, s2]);
link.ack({ [s1]: "new", [s2]: "newer" });

// Refused by the kernel: handed back (the error trait says why).
const { refused } = link.ack({ [b]: "" });
assert.deepEqual(refused.map((p) => p.text), ["yes"]);
assert.equal(link.pending.length, 0);

// Beats keep it alive; silence past SILENCE calls it gone and the pending go back to the input.
link.beat(1000);
assert.equal(link.check(1000 + SILENCE - 1), "");
const c = link.add("first", 1100);
link.add("second", 1200);
assert.equal(link.check(1001 + SILENCE), "silent");
const back = link.takeBack();
assert.deepEqual(back.map((p) => p.text), ["first", "second"]);
assert.equal(putBack("half typed", back), "first\n\nsecond\n\nhalf typed");
assert.equal(putBack("  ", back), "first\n\nsecond");
assert.match(goneText("silent"), /no word from the kernel for 20 s/);
// Only quiet: a beat brings it back, and a message the kernel took after all is said to be.
link.beat(5000 + SILENCE);
assert.equal(link.check(5000 + SILENCE), "");
assert.deepEqual(link.ack({ [c]: "sub-2" }).late.map((p) => p.text), ["first"]);

// A restart is final: beats do not undo it.
link.lost("restarted");
link.beat(10 ** 9);
assert.equal(link.check(10 ** 9), "restarted");
assert.equal(goneText("restarted"), "the kernel restarted — re-run this cell to chat");

// The notebook's widget state names the chat's model as an HTML widget hiding its own output (no
// widget error, no disconnected mark where the model is gone); other widgets' state is
// kept, stubs of models no output shows any more are dropped, and a known id changes nothing.
const other = { model_name: "IntSliderModel", model_module: "@jupyter-widgets/controls", state: { value: 3 } };
const saved = withStub({ version_major: 2, version_minor: 0, state: { s1: other, old: STUB } }, "chat1", new Set(["chat1", "s1"]));
assert.deepEqual(Object.keys(saved.state).sort(), ["chat1", "s1"]);
assert.equal(saved.state.chat1.model_name, "HTMLModel");
assert.match(saved.state.chat1.state.value, /^<style>\.jp-OutputArea-child:has\(\.flue-saved-stub\) \{ display: none; \}<\/style>$/);
assert.equal(withStub(saved, "chat1", null), null);
assert.deepEqual(Object.keys(withStub(undefined, "x", null).state), ["x"]);
assert.equal(withStub(undefined, "x", null).version_major, 2);
console.log("ok");
