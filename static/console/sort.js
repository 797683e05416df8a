// Keeper console: a table marked class="sortable" sorts by any column in the browser (as Flower's
// and the Django admin's lists do): click a heading once for ascending, again for descending. Times
// sort by their <time datetime>, numbers as numbers, the rest as text; the page's data is unchanged.
(function () {
  "use strict";
  function key(cell) {
    if (!cell) { return ""; }
    if (cell.hasAttribute("data-sort")) { return cell.getAttribute("data-sort"); }
    var time = cell.querySelector("time[datetime]");
    if (time) { return time.getAttribute("datetime"); }
    return cell.textContent.trim();
  }
  function compare(a, b) {
    var x = parseFloat(a), y = parseFloat(b);
    var numbers = /^-?[\d.,]+(\s|$)/;
    if (numbers.test(a) && numbers.test(b) && !isNaN(x) && !isNaN(y)) { return x - y; }
    return a.localeCompare(b, undefined, { numeric: true, sensitivity: "base" });
  }
  function sortBy(table, index, th) {
    var body = table.tBodies[0];
    if (!body) { return; }
    var rows = Array.prototype.filter.call(body.rows, function (r) { return r.cells.length > index && !r.querySelector("td[colspan]"); });
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    rows.sort(function (r1, r2) {
      var c = compare(key(r1.cells[index]), key(r2.cells[index]));
      return ascending ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      if (h.hasAttribute("aria-sort")) { h.setAttribute("aria-sort", "none"); }
    });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }
  function enable(root) {
    var tables = (root || document).querySelectorAll("table.sortable:not([data-sortable])");
    Array.prototype.forEach.call(tables, function (table) {
      if (!table.tHead || !table.tHead.rows.length) { return; }
      table.setAttribute("data-sortable", "");
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
        var label = th.textContent.trim();
        if (!label || th.hasAttribute("data-nosort")) { return; }
        var button = document.createElement("button");
        button.type = "button";
        button.className = "sort";
        button.title = "sort by " + label;
        button.textContent = label;
        th.textContent = "";
        th.appendChild(button);
        th.setAttribute("aria-sort", "none");
        button.addEventListener("click", function () { sortBy(table, index, th); });
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { enable(document); });
  document.addEventListener("htmx:afterSettle", function () { enable(document); });
})();
