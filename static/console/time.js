// Keeper console: show <time data-local> in the reader's time zone; the UTC time stays on hover.
(function () {
  "use strict";
  var two = function (n) { return (n < 10 ? "0" : "") + n; };
  function localize(root) {
    var times = (root || document).querySelectorAll("time[data-local]:not([data-localized])");
    for (var i = 0; i < times.length; i++) {
      var t = times[i], d = new Date(t.getAttribute("datetime"));
      if (isNaN(d.getTime())) { continue; }
      var offset = -d.getTimezoneOffset(), sign = offset >= 0 ? "+" : "-", abs = Math.abs(offset);
      // One format everywhere: the day, the time to the second, and the reader's offset from UTC.
      var zone = offset === 0 ? "UTC" : "UTC" + sign + Math.floor(abs / 60) + (abs % 60 ? ":" + two(abs % 60) : "");
      t.textContent = d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) + " " +
        two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds()) + " " + zone;
      t.setAttribute("data-localized", "");
    }
  }
  document.addEventListener("DOMContentLoaded", function () { localize(document); });
  document.addEventListener("htmx:afterSettle", function (e) { localize(document); });
})();
