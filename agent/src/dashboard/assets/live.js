// Follows the dashboard's change events and fetches the page again, replacing its main part.
(() => {
  const live = document.getElementById("live");
  const source = new EventSource("/events");
  let busy = false;
  source.onmessage = async () => {
    if (busy) return;
    busy = true;
    try {
      const r = await fetch(location.href, { credentials: "same-origin" });
      if (r.ok) {
        const doc = new DOMParser().parseFromString(await r.text(), "text/html");
        const next = doc.getElementById("main");
        const main = document.getElementById("main");
        if (next && main && !main.contains(document.activeElement)) main.replaceWith(next);
        else if (next && main) main.dataset.version = next.dataset.version;
      }
    } finally {
      busy = false;
    }
  };
  // Closed for good: refused (signed out, too many streams); a reload shows why.
  source.onerror = () => {
    if (live) live.textContent = source.readyState === EventSource.CLOSED ? "not live: reload the page" : "reconnecting";
  };
  source.onopen = () => { if (live) live.textContent = "live"; };
})();
