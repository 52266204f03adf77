// The chat widget's wire: generated from flue_nb/notebook/views/chat/wire.py by
// `python -m flue_nb.notebook.views.chat._wire_ts`. Do not edit; change the TypedDicts and regenerate.

/** The start of a long value and its full size. */
export interface ClipJSON {
  text: string;
  bytes: number;
  lines: number;
  clipped: boolean;
}

/** An argument drawn as code. */
export interface CodeJSON {
  arg: string;
  lang: string;
  value: ClipJSON;
}

/** An image reference; its data URL is `images[digest]` in the widget's `images` trait. */
export interface ImageJSON {
  digest: string;
  media_type: string;
  width: number;
  height: number;
  label: string;
}

/** The `python` tool's namespace diff. */
export interface NamespaceJSON {
  added: string[];
  changed: string[];
  removed: string[];
}

/**
 * How an approval was decided (`ApprovalFacts.to_dict()`): unset keys are left out; `by` is
 * where it was answered, `detail` why a request `ended`, `rule` the rule that decided.
 */
export interface ApprovalJSON {
  reason: "approved" | "declined" | "policy" | "allowed" | "headless" | "unanswered" | "ended";
  approved?: boolean;
  policy?: "allow" | "ask" | "deny";
  fallback?: "allow" | "deny";
  by?: string;
  detail?: string;
  rule?: string;
}

/** Answer text or thinking (`kind`). */
export interface TextJSON {
  kind: "text" | "thinking";
  text: string;
}

/** A tool card. */
export interface ToolJSON {
  kind: "tool";
  call_id: string;
  name: string;
  summary: string;
  status: "running" | "awaiting_approval" | "ok" | "error" | "denied" | "aborted" | "failed";
  duration_ms: number | null;
  input: ClipJSON;
  code: CodeJSON[];
  diff: string[];
  result: ClipJSON | null;
  result_kind: "text" | "code" | "list" | "markdown";
  result_lang: string;
  namespace: NamespaceJSON | null;
  approval: ApprovalJSON | null;
  ask: string | null;
  asked_at: number | null;
  always: string | null;
  progress: string;
  images: ImageJSON[];
  task: TaskJSON | null;
  effects: number;
}

/** A subagent's run. */
export interface TaskJSON {
  kind: "task";
  agent: string;
  description: string;
  depth: number;
  status: "running" | "ok" | "error";
  text: string | null;
  error: string | null;
  parts: PartJSON[];
}

/** A signal the model was sent, with what changed. */
export interface SignalJSON {
  signal_type: string;
  changes: string[];
  kind: "signal";
}

/** A compaction: running, folded, skipped or failed. */
export interface CompactionJSON {
  reason: string;
  running: boolean;
  tokens_before: number | null;
  tokens_after: number | null;
  messages_before: number | null;
  messages_after: number | null;
  summary: string | null;
  skipped: boolean;
  is_error: boolean;
  error: string | null;
  kind: "compaction";
}

/** A line of its own (a retry, a recovery, a hint); `log` for a runtime log line. */
export interface NoteJSON {
  text: string;
  log: boolean;
  kind: "note";
}

/** A message that joined this response (`from`: the submission it was admitted as). */
export interface UserJSON {
  kind: "user";
  text: string;
  from: string;
}

export type PartJSON = TextJSON | ToolJSON | TaskJSON | SignalJSON | CompactionJSON | NoteJSON | UserJSON;

/** Why a submission failed or was aborted. */
export interface ErrorJSON {
  type: string;
  message: string;
}

/** One submission (or an `aside` between them) as the widget draws it. */
export interface BlockJSON {
  id: string;
  kind: "submission" | "aside";
  text: string;
  state: "queued" | "joining" | "running" | "joined" | "settled";
  outcome: string | null;
  error: ErrorJSON | null;
  recovered: boolean;
  joined_into: string | null;
  result: string | null;
  attempt: number;
  parts: PartJSON[];
}

/** Token totals of the conversation so far. */
export interface UsageJSON {
  input: number;
  output: number;
  cache_read: number;
  cache_write: number;
}

/** The gauge and the queue (the widget's `status` trait). */
export interface StatusJSON {
  agent: string;
  model: string;
  used_tokens: number | null;
  context_window: number | null;
  threshold: number | null;
  queued: number;
  running: boolean;
  usage: UsageJSON;
  cost: string;
  cost_note: string;
  cache_share: number | null;
  tokens_reported: boolean;
}

/** One item of a run's changes panel (`views.changes.PanelItem`). */
export interface ChangeItemJSON {
  key: string;
  ident: string;
  step: number;
  call_id: string;
  tool: string;
  kind: "cell" | "file" | "variable";
  action: string;
  target: string;
  title: string;
  summary: string;
  diff: string[];
  diff_note: string;
  lang: string;
  undone: boolean;
  undoable: boolean;
  kept: boolean;
  note: string;
}

/** An undo or rewind refused as not exact, offered again with force ("Undo anyway"). */
export interface OfferJSON {
  what: "undo" | "rewind";
  items: string[];
}

/** A settled run's changes panel: its items, and what the last Undo or Rewind said. */
export interface ChangesJSON {
  submission_id: string;
  headline: string;
  items: ChangeItemJSON[];
  said: string;
  refused: string[];
  offer: OfferJSON | null;
}

/** The chat widget's synced traits (`ChatWidget`; a test checks the two name the same). */
export interface Traits {
  mode: "chat" | "cell";
  title: string;
  history: BlockJSON[];
  live: BlockJSON[];
  status: StatusJSON;
  interactive: boolean;
  sent: Record<string, string>;
  error: string;
  holding: string;
  images: Record<string, string>;
  changes: Record<string, ChangesJSON>;
  vendor: string | null;
  older: number;
  ref: string;
}

/** The shared vendor model's synced trait: module sources by short name, and `katex.css`. */
export interface VendorTraits {
  sources: Record<string, string>;
}

/** The browser sends a new message, with its own id for the acknowledgement in `sent`. */
export interface SendMsg {
  type: "send";
  text: string;
  id: string;
}

/** The browser's Stop: abort every unsettled submission of the conversation. */
export interface StopMsg {
  type: "stop";
}

/**
 * The browser's answer to a tool card waiting for approval; `always` with an approval: "always
 * allow this for this conversation" (the grant the rules offered for the call, kept in the store).
 */
export interface ApproveMsg {
  type: "approve";
  call_id: string;
  approved: boolean;
  always?: boolean;
}

/**
 * The browser asks for the page of submissions before the oldest one drawn (the user
 * scrolled to the top of the chat, or clicked to see earlier messages).
 */
export interface OlderMsg {
  type: "older";
}

/** Undo items of a run's panel (`all` for every one); `force` after a refusal. */
export interface UndoMsg {
  type: "undo";
  submission_id: string;
  items: string[];
  force: boolean;
}

/** Keep items of a run's panel (their Undo goes; `all` for every one). */
export interface KeepMsg {
  type: "keep";
  submission_id: string;
  items: string[];
}

/** Rewind to before a tool call's step (that step's effects and every later one's undone). */
export interface RewindMsg {
  type: "rewind";
  submission_id: string;
  call_id: string;
  force: boolean;
}

export type BrowserMsg = SendMsg | StopMsg | ApproveMsg | OlderMsg | UndoMsg | KeepMsg | RewindMsg;

/** The kernel's heartbeat (`chat._heartbeat`): a view whose beats stop says its kernel is gone. */
export interface BeatMsg {
  type: "beat";
}

export type KernelMsg = BeatMsg;

/** `flue_stop_request`'s content on the control channel (`serve._stop`): the call to stop. */
export interface StopRequest {
  call_id: string;
}

/** `flue_stop_reply`'s content: whether the call was stopped (`message` says a bad request). */
export interface StopReply {
  status: "ok" | "error";
  stopped: boolean;
  message?: string;
}
