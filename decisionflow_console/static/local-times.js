// Shows each <time datetime="…Z"> of the page in the browser's own time zone, in the shape the
// server wrote it in UTC ("2026-12-02 10:00:00 CET"); the UTC text the page was served with moves
// to the element's title. Without script the page reads the same, in UTC.
(() => {
  "use strict";
  const format = new Intl.DateTimeFormat("en-GB", {
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    hourCycle: "h23",
    timeZoneName: "short",
  });
  const local = (moment) => {
    const part = Object.fromEntries(format.formatToParts(moment).map(({ type, value }) => [type, value]));
    return `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute}:${part.second} ${part.timeZoneName}`;
  };
  for (const element of document.querySelectorAll("time[datetime]")) {
    const moment = new Date(element.getAttribute("datetime"));
    if (Number.isNaN(moment.getTime()) || element.dataset.utc) {
      continue;
    }
    element.dataset.utc = element.textContent;
    element.title = element.textContent;
    element.textContent = local(moment);
  }
})();
