// The live page: two EventSource streams and a polled backlog table.
// Rows are built with textContent only: nothing from the server is parsed
// as HTML.
(function () {
  "use strict";
  var MAX_ROWS = 200;

  function time(ms) {
    var d = new Date(ms);
    return d.toISOString().slice(11, 23);
  }
  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text === undefined || text === null || text === "" ? "–" : String(text);
    tr.appendChild(td);
    return td;
  }
  function link(tr, text, href, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    if (text) {
      var a = document.createElement("a");
      a.href = href;
      a.textContent = text;
      td.appendChild(a);
    } else {
      td.textContent = "–";
    }
    tr.appendChild(td);
  }
  function badge(tr, text) {
    var td = document.createElement("td");
    var s = document.createElement("span");
    s.className = "state state-" + text;
    s.textContent = text;
    td.appendChild(s);
    tr.appendChild(td);
  }
  function execLink(id) { return "/ff/executions/" + encodeURIComponent(id); }

  var rowOf = {
    lease: function (ev) {
      var tr = document.createElement("tr");
      cell(tr, time(ev.at_ms), "mono");
      badge(tr, ev.type);
      link(tr, ev.execution_id, execLink(ev.execution_id), "mono");
      cell(tr, ev.attempt_index);
      cell(tr, ev.lease_epoch);
      cell(tr, ev.worker);
      cell(tr, ev.namespace);
      return tr;
    },
    completion: function (ev) {
      var tr = document.createElement("tr");
      cell(tr, time(ev.at_ms), "mono");
      badge(tr, ev.outcome);
      link(tr, ev.execution_id, execLink(ev.execution_id), "mono");
      link(tr, ev.flow_id, "/ff/flows/" + encodeURIComponent(ev.flow_id || ""), "mono");
      cell(tr, ev.namespace);
      return tr;
    }
  };

  function stream(section) {
    var kind = section.dataset.kind;
    var src = section.dataset.src;
    var body = section.querySelector("tbody");
    var status = section.querySelector(".live-status");
    var count = section.querySelector(".live-count");
    var pause = section.querySelector(".live-pause");
    var restart = section.querySelector(".live-restart");
    restart.addEventListener("click", function () {
      restart.hidden = true;
      last = "";
      state("connecting", "connecting…");
      connect();
    });
    var n = 0, last = "", es = null;
    // Events are drawn once a frame, however many arrived: a busy stream
    // does not rebuild the table per event.
    var queue = [], drawing = false;

    function draw() {
      drawing = false;
      count.textContent = String(n);
      var rows = document.createDocumentFragment();
      for (var i = queue.length - 1; i >= 0; i--) {
        var ev = JSON.parse(queue[i]);
        var tr = rowOf[kind](ev);
        tr.className = "fresh";
        tr.dataset.execution = ev.execution_id;
        tr.dataset.event = String(ev.event_id);
        rows.appendChild(tr);
      }
      queue = [];
      body.insertBefore(rows, body.firstChild);
      while (body.rows.length > MAX_ROWS) body.deleteRow(body.rows.length - 1);
    }

    function state(s, text) {
      section.dataset.state = s;
      status.textContent = text;
    }
    function connect() {
      // A new EventSource sends no Last-Event-ID: the position goes in
      // the URL. EventSource's own reconnects send the header.
      es = new EventSource(last ? src + (src.indexOf("?") < 0 ? "?" : "&") + "after=" + encodeURIComponent(last) : src);
      es.addEventListener("ready", function (e) {
        last = e.lastEventId || last;
        var d = JSON.parse(e.data);
        state("open", d.resumed ? "connected: resumed after the last event received" : "connected: from now");
      });
      es.addEventListener(kind, function (e) {
        last = e.lastEventId;
        n++;
        if (!pause.checked) {
          queue.push(e.data);
          if (queue.length > MAX_ROWS) queue.shift(); // only the newest are shown
        }
        if (!drawing) {
          drawing = true;
          requestAnimationFrame(draw);
        }
      });
      es.addEventListener("ff-status", function (e) {
        status.textContent = JSON.parse(e.data).message;
      });
      es.addEventListener("ff-error", function (e) {
        es.close();
        state("stopped", "stopped: " + JSON.parse(e.data).message);
        restart.hidden = false;
      });
      es.onerror = function () {
        if (section.dataset.state === "stopped") return;
        section.dataset.reconnects = String(Number(section.dataset.reconnects || 0) + 1);
        if (es.readyState === EventSource.CLOSED) {
          // The server refused (too many streams, shutting down): the
          // browser does not retry by itself.
          state("reconnecting", "refused by the server; retrying in 5 s");
          setTimeout(connect, 5000);
        } else {
          state("reconnecting", "connection lost; reconnecting");
        }
      };
    }
    connect();
  }

  function backlog(table) {
    var body = table.querySelector("tbody");
    var status = document.getElementById("backlog-status");
    function refresh() {
      fetch(table.dataset.src, { headers: { "Accept": "application/json" } })
        .then(function (r) { return r.json(); })
        .then(function (b) {
          if (!b.available) {
            status.textContent = b.error || "not available";
            return;
          }
          var rows = document.createDocumentFragment();
          b.scanners.forEach(function (s) {
            var tr = document.createElement("tr");
            tr.dataset.scanner = s.name;
            cell(tr, s.name + (s.disabled ? " (disabled)" : ""));
            cell(tr, s.interval);
            cell(tr, (s.due_at_least ? "at least " : "") + s.due, "num");
            cell(tr, s.due_partitions, "num");
            cell(tr, s.oldest_overdue, "num");
            cell(tr, s.unprocessable, "num");
            rows.appendChild(tr);
          });
          body.replaceChildren(rows);
          status.textContent = "read at " + new Date(b.at_ms).toISOString().replace("T", " ").slice(0, 23) + " UTC";
        })
        .catch(function (err) { status.textContent = "refresh failed: " + err; })
        .finally(function () { setTimeout(refresh, 2000); });
    }
    setTimeout(refresh, 2000);
  }

  document.querySelectorAll("section.live-stream").forEach(stream);
  var t = document.getElementById("backlog");
  if (t) backlog(t);
})();
