// flue_nb's front-end half of live edits without real-time collaboration (issue 35).
//
// Hand-written as a prebuilt federated extension, so no build step and no npm: JupyterLab 4 and
// Notebook 7 load `window._JUPYTERLAB["flue-nb"]` as a module-federation container. It imports
// nothing; it uses the application's shell, its event manager (jupyter_server's event bus, the
// channel flue_nb's server extension speaks on: a kernel busy in a %%flue cell cannot read comm
// replies, a server can) and the notebook's shared model.
//
// Every write is a compare-and-set: the cell's source is compared with what the agent last read
// and replaced in the same synchronous step, so no keystroke of the user's can fall between.
// An operation that arrives after its deadline (the tab was asleep or busy and the server has
// already told the kernel it did not answer) is refused, never applied late.
//
// A cell the agent wrote carries a "flue agent" label in the agent's colour (its title says what
// it did and when) until someone else changes its source: without collaboration there is no
// awareness panel or remote cursor to show the agent by, and the user looks at the cell.
(function () {
  'use strict';
  var REQUEST = 'https://flue-nb.github.io/events/frontend-request/v1';
  var REPLY = 'https://flue-nb.github.io/events/frontend-reply/v1';
  var COLOR = '#7c4dff';  // the agent's colour in collaboration's awareness too (_room.AGENT_USER)
  var STYLE = '.flue-agent-edited{position:relative;box-shadow:inset 3px 0 0 ' + COLOR + '}' +
    '.flue-agent-label{position:absolute;top:0;right:8px;z-index:3;padding:0 5px;border-radius:0 0 3px 3px;' +
    'font:10px/15px var(--jp-ui-font-family,sans-serif);background:' + COLOR + ';color:#fff;cursor:default}';
  var client = (self.crypto && self.crypto.randomUUID) ? self.crypto.randomUUID() : String(Math.random()).slice(2);
  var lastActive = Date.now();
  var probed = new Map();  // probe request id -> when this tab answered it (its own clock)

  function notebookPanel(app, path) {
    var main = app.shell.widgets('main');
    for (var widget of main) {
      var context = widget && widget.context;
      var content = widget && widget.content;
      if (context && context.path === path && content && content.model && content.model.sharedModel) {
        return widget;
      }
    }
    return null;
  }

  function unmark(cell) {
    if (cell.__flueUnmark) cell.__flueUnmark();
    cell.__flueUnmark = null;
    cell.node.classList.remove('flue-agent-edited');
    var label = cell.node.querySelector(':scope > .flue-agent-label');
    if (label) label.remove();
  }

  function unmarkId(panel, id) {
    var cell = panel.content.widgets.find(function (w) { return w.model && w.model.id === id; });
    if (cell && !cell.isDisposed) unmark(cell);
  }

  // Once the operation's change is drawn (a new cell's widget is made after the model changes).
  function mark(panel, id, what) {
    setTimeout(function () {
      var cell = panel.content.widgets.find(function (w) { return w.model && w.model.id === id; });
      if (!cell || cell.isDisposed) return;
      unmark(cell);
      cell.node.classList.add('flue-agent-edited');
      var label = document.createElement('div');
      label.className = 'flue-agent-label';
      label.textContent = 'flue agent';
      label.title = 'flue agent ' + what + ' this cell at ' + new Date().toLocaleTimeString() +
        ' (its metadata.flue names the conversation and the tool call)';
      cell.node.appendChild(label);
      var shared = cell.model.sharedModel;
      var written = shared.getSource();
      var onChange = function (sender, change) {
        if (change.sourceChange && sender.getSource() !== written) unmark(cell);
      };
      shared.changed.connect(onChange);
      cell.__flueUnmark = function () { shared.changed.disconnect(onChange); };
    }, 0);
  }

  function indexOf(nb, id) {
    for (var i = 0; i < nb.cells.length; i++) {
      if (nb.cells[i].id === id) return i;
    }
    return -1;
  }

  function needCell(nb, id) {
    var at = indexOf(nb, id);
    if (at < 0) throw new Error('no cell with id ' + JSON.stringify(id) + ' in the open notebook');
    return at;
  }

  function setFlue(cell, flue, undone) {
    if (undone) {  // an undo: the agent's record goes, the cell is the user's again
      if ('flue' in (cell.getMetadata() || {})) cell.deleteMetadata('flue');
      return;
    }
    if (!flue) return;
    var metadata = Object.assign({}, cell.getMetadata() || {});
    metadata.flue = flue;
    cell.setMetadata(metadata);
  }

  function changed(cell, at) {
    return { ok: false, changed: true, index: at, current: cell.getSource() };
  }

  var ops = {
    cells: function (nb) {
      return { ok: true, cells: nb.cells.map(function (c) { return c.toJSON(); }) };
    },
    insert: function (nb, a) {
      var at = a.after == null ? nb.cells.length : needCell(nb, a.after) + 1;
      var cell = { cell_type: a.kind || 'code', source: a.source, metadata: a.metadata || {} };
      var made;
      nb.transact(function () { made = nb.insertCell(at, cell); });
      return { ok: true, id: made.id, index: at };
    },
    edit: function (nb, a) {
      var at = needCell(nb, a.id);
      var cell = nb.cells[at];
      if (cell.getSource() !== a.expected) return changed(cell, at);
      var old = cell.getSource();
      nb.transact(function () { cell.setSource(a.source); setFlue(cell, a.flue, a.undone); });
      return { ok: true, index: at, old: old };
    },
    'delete': function (nb, a) {
      var at = needCell(nb, a.id);
      var cell = nb.cells[at];
      if (cell.getSource() !== a.expected) return changed(cell, at);
      var json = cell.toJSON();
      nb.transact(function () { nb.deleteCell(at); });
      return { ok: true, index: at, cell: json };
    },
    move: function (nb, a) {
      var from = needCell(nb, a.id);
      var to = a.after == null ? 0 : needCell(nb, a.after);
      if (a.after != null && to < from) to += 1;
      if (to !== from) nb.transact(function () { nb.moveCell(from, to); });
      var now = indexOf(nb, a.id);
      return { ok: now === to, index: now, from: from };
    },
    outputs: function (nb, a) {
      var at = needCell(nb, a.id);
      var cell = nb.cells[at];
      if (cell.cell_type !== 'code') throw new Error('cell ' + a.id + ' is not a code cell');
      nb.transact(function () {
        cell.setOutputs(a.outputs || []);
        cell.execution_count = a.execution_count == null ? null : a.execution_count;
        setFlue(cell, a.flue);
      });
      return { ok: true, index: at };
    }
  };

  var MARKS = { insert: 'inserted', edit: 'edited', move: 'moved', outputs: 'ran' };

  function answer(app, req) {
    var now = Date.now();
    if (req.op === 'probe') {
      probed.forEach(function (at, id) { if (now - at > 120000) probed.delete(id); });
      probed.set(req.request, now);
      return {
        ok: true, client: client, open: notebookPanel(app, req.path) !== null,
        focused: document.hasFocus(), visible: document.visibilityState === 'visible', last_active: lastActive
      };
    }
    var answered = probed.get(req.probe);
    if (typeof req.expires_in === 'number' && (answered === undefined || now > answered + req.expires_in)) {
      return { ok: false, expired: true, error: 'the tab got the request after its deadline and did not apply it' };
    }
    var panel = notebookPanel(app, req.path);
    if (panel === null) return { ok: false, closed: true, error: req.path + ' is not open in this tab' };
    var op = ops[req.op];
    if (!op) throw new Error('unknown operation ' + req.op);
    var args = req.args || {};
    var data = op(panel.content.model.sharedModel, args);
    var id = req.op === 'insert' ? data.id : args.id;
    if (data.ok && MARKS[req.op] && id) {
      if (args.undone) unmarkId(panel, id); else mark(panel, id, MARKS[req.op]);
    }
    return data;
  }

  var plugin = {
    id: 'flue-nb:live-edits',
    description: "Applies flue_nb's notebook edits in the open tab (no real-time collaboration needed).",
    autoStart: true,
    activate: function (app) {
      var events = app.serviceManager && app.serviceManager.events;
      if (!events) return;
      var style = document.createElement('style');
      style.id = 'flue-nb-live-edits';
      style.textContent = STYLE;
      document.head.appendChild(style);
      var mark = function () { lastActive = Date.now(); };
      window.addEventListener('focus', mark);
      document.addEventListener('visibilitychange', function () { if (document.visibilityState === 'visible') mark(); });
      events.stream.connect(function (_, event) {
        if (!event || event.schema_id !== REQUEST) return;
        var req = event;
        if (req.client && req.client !== client) return;
        var data;
        try {
          data = answer(app, req);
        } catch (err) {
          data = { ok: false, error: err instanceof Error ? err.message : String(err) };
        }
        events.emit({ schema_id: REPLY, version: '1', data: { request: req.request, client: client, data: data } })
          .catch(function (err) { console.warn('flue-nb: reply not sent', err); });
      });
    }
  };

  var scope = (window._JUPYTERLAB = window._JUPYTERLAB || {});
  scope['flue-nb'] = {
    init: function () { return Promise.resolve(); },
    get: function (module) {
      if (module !== './extension') return Promise.reject(new Error('flue-nb has no module ' + module));
      return Promise.resolve(function () { return { __esModule: true, 'default': [plugin] }; });
    }
  };
})();
