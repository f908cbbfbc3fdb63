// zlbench report: sortable, filterable, paged tables over a JSON blob.
// Plain script, no library and no network: the page works from file:// and as a CI
// artifact. Only one page of rows is in the DOM at a time.
(function () {
  "use strict";
  var PAGE_SIZES = [50, 100, 500, 1000];

  function esc(text) {
    return String(text).replace(/[&<>"]/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;"}[c];
    });
  }

  function show(col, v) {
    if (v === null || v === undefined || v === "") return "";
    if (col.kind === "num") return typeof v === "number" ? v.toFixed(col.digits) : String(v);
    if (col.kind === "pct") return (v >= 0 ? "+" : "") + (v * 100).toFixed(col.digits) + "%";
    if (col.kind === "spread") return "\u00b1" + (v * 100).toFixed(col.digits) + "%";
    return String(v);
  }

  function tone(col, v) {
    if (v === null || v === undefined || v === "") return "";
    if (col.tone === "ratio") return v > 1 ? "good" : v < 1 ? "poor" : "";
    if (col.tone === "sign") return v > 0 ? "good" : v < 0 ? "poor" : "";
    if (col.tone === "latency") return v < 0 ? "good" : v > 0 ? "poor" : "";
    if (col.tone === "status") {
      var s = String(v).toUpperCase();
      if (s === "SUCCESS" || s === "SAME") return "";
      if (s === "FASTER") return "good";
      if (s.indexOf("UNKNOWN") === 0) return "unk";
      return "poor";
    }
    return "";
  }

  function ZLTable(root) {
    var blob = JSON.parse(root.querySelector("script.zl-data").textContent);
    this.root = root;
    this.cols = blob.columns;
    this.rows = blob.rows;
    this.index = {};
    for (var i = 0; i < this.cols.length; i++) this.index[this.cols[i].key] = i;
    this.sortKey = blob.sort;
    this.desc = !!blob.descending;
    this.pageSize = 100;
    this.page = 0;
    // Lower-cased text of each row, once: filtering 30,000 rows is a scan of strings.
    this.text = this.rows.map(function (r) {
      return r.map(function (v) { return v === null ? "" : String(v); }).join("\u0001").toLowerCase();
    });
    this.view = this.rows.map(function (_, i) { return i; });
    this.build();
    this.sort();
  }

  ZLTable.prototype.build = function () {
    var self = this, root = this.root;
    var head = "<tr>" + this.cols.map(function (c) {
      return "<th data-key=\"" + esc(c.key) + "\" class=\"" + (c.kind !== "text" ? "n" : "") +
        "\" title=\"" + esc(c.title || "sort by " + c.label) + "\">" + esc(c.label) +
        "<span class=\"arrow\"></span></th>";
    }).join("") + "</tr>";
    root.querySelector("thead").innerHTML = head;
    root.querySelector("thead").addEventListener("click", function (e) {
      var th = e.target.closest("th");
      if (!th) return;
      var key = th.getAttribute("data-key");
      if (key === self.sortKey) self.desc = !self.desc;
      else { self.sortKey = key; self.desc = self.cols[self.index[key]].kind !== "text"; }
      self.page = 0;
      self.sort();
    });
    var filter = root.querySelector("input.zl-filter");
    var timer = null;
    filter.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { self.filter(filter.value); }, 120);
    });
    var size = root.querySelector("select.zl-size");
    size.innerHTML = PAGE_SIZES.map(function (n) {
      return "<option" + (n === self.pageSize ? " selected" : "") + ">" + n + "</option>";
    }).join("");
    size.addEventListener("change", function () {
      self.pageSize = parseInt(size.value, 10); self.page = 0; self.render();
    });
    root.querySelector("button.zl-prev").addEventListener("click", function () {
      if (self.page > 0) { self.page--; self.render(); }
    });
    root.querySelector("button.zl-next").addEventListener("click", function () {
      if ((self.page + 1) * self.pageSize < self.view.length) { self.page++; self.render(); }
    });
  };

  // Terms are ANDed; "col:text" matches one column (by key or label), the rest any cell.
  ZLTable.prototype.filter = function (query) {
    var self = this;
    var terms = query.toLowerCase().split(/\s+/).filter(Boolean).map(function (t) {
      var m = /^([a-z_|]+):(.*)$/.exec(t);
      if (m) {
        for (var i = 0; i < self.cols.length; i++) {
          var c = self.cols[i];
          if (c.key === m[1] || c.label.toLowerCase() === m[1]) return {col: i, text: m[2]};
        }
      }
      return {col: -1, text: t};
    });
    var view = [];
    for (var r = 0; r < this.rows.length; r++) {
      var ok = true;
      for (var k = 0; k < terms.length && ok; k++) {
        var t = terms[k];
        if (t.col < 0) ok = this.text[r].indexOf(t.text) >= 0;
        else {
          var v = this.rows[r][t.col];
          ok = v !== null && String(v).toLowerCase().indexOf(t.text) >= 0;
        }
      }
      if (ok) view.push(r);
    }
    this.view = view;
    this.page = 0;
    this.sort();
    this.root.setAttribute("data-filter", query);
  };

  ZLTable.prototype.sort = function () {
    var i = this.index[this.sortKey], rows = this.rows, dir = this.desc ? -1 : 1;
    if (i !== undefined) {
      var numeric = this.cols[i].kind !== "text";
      this.view.sort(function (x, y) {
        var a = rows[x][i], b = rows[y][i];
        // Empty cells last, whichever way the column is sorted.
        var ea = a === null || a === "", eb = b === null || b === "";
        if (ea || eb) return ea === eb ? x - y : ea ? 1 : -1;
        var d = numeric ? a - b : String(a).localeCompare(String(b));
        return d !== 0 ? dir * d : x - y;
      });
    }
    this.render();
  };

  ZLTable.prototype.render = function () {
    var cols = this.cols, rows = this.rows, start = this.page * this.pageSize;
    var end = Math.min(start + this.pageSize, this.view.length);
    var html = [];
    for (var k = start; k < end; k++) {
      var r = rows[this.view[k]], cells = [];
      for (var c = 0; c < cols.length; c++) {
        var cls = (cols[c].kind !== "text" ? "n " : "") + (cols[c].nowrap ? "nw " : "") + tone(cols[c], r[c]);
        cells.push("<td class=\"" + cls + "\">" + esc(show(cols[c], r[c])) + "</td>");
      }
      html.push("<tr>" + cells.join("") + "</tr>");
    }
    this.root.querySelector("tbody").innerHTML = html.join("");
    var ths = this.root.querySelectorAll("thead th");
    for (var t = 0; t < ths.length; t++) {
      var on = ths[t].getAttribute("data-key") === this.sortKey;
      ths[t].setAttribute("aria-sort", on ? (this.desc ? "descending" : "ascending") : "none");
      ths[t].querySelector(".arrow").textContent = on ? (this.desc ? " \u25bc" : " \u25b2") : "";
    }
    var total = this.rows.length, shown = this.view.length;
    this.root.querySelector(".zl-count").textContent =
      (shown ? (start + 1) + "\u2013" + end : "0") + " of " + shown +
      (shown !== total ? " (filtered from " + total + ")" : "") + " rows";
    this.root.setAttribute("data-shown", String(shown));
  };

  document.addEventListener("DOMContentLoaded", function () {
    var roots = document.querySelectorAll(".zl-table");
    for (var i = 0; i < roots.length; i++) roots[i].zlTable = new ZLTable(roots[i]);
  });
})();
