// The live action graph of a cortex view (cortex_jupyter/display/live_graph.py).
//
// The kernel draws every piece of the picture as SVG text (svg.py) and sends, in the
// `value` trait, only what changed: a frame element (the picture's size and the
// kernel's clock), the pieces by `data-key`, and `data-gone` markers for pieces that
// left. Here they are put in place by key. Three more things happen in the page:
// running durations tick (no message per tick), a click on anything marked
// `data-cxj-act` anywhere in the same cortex view (a node, a group, a row of the details
// list, the inspector's links and close button) goes back to the kernel as a message,
// and the inspector's sections stay open or closed as the person left them.
const NS = "http://www.w3.org/2000/svg";

function parse(markup) {
  const holder = document.createElementNS(NS, "svg");
  holder.innerHTML = markup;
  return Array.from(holder.children);
}

function fmt(seconds) {
  // As theme.fmt_duration: 0.42 s, 12.3 s, 2 m 05 s.
  const s = Math.max(seconds, 0);
  if (s < 10) return `${s.toFixed(2)} s`;
  if (s < 60) return `${s.toFixed(1)} s`;
  const whole = Math.round(s);
  return `${Math.floor(whole / 60)} m ${String(whole % 60).padStart(2, "0")} s`;
}

export default () => {
  const pieces = new Map(); // key -> element (never attached; views clone it)
  const views = new Set();
  const sections = new Map(); // "<node>:<section>" -> open, as the person left it
  let frame = { w: 0, h: 0, now: 0, at: 0 };

  function apply(markup) {
    const changed = [];
    for (const el of parse(markup || "")) {
      const kind = el.getAttribute("data-cxj-frame");
      if (kind) {
        if (kind === "full") {
          pieces.clear();
          changed.push(null);
        }
        frame = {
          w: Number(el.getAttribute("data-w")),
          h: Number(el.getAttribute("data-h")),
          now: Number(el.getAttribute("data-now")),
          at: performance.now() / 1000,
        };
        continue;
      }
      const key = el.getAttribute("data-key");
      if (!key) continue;
      if (el.hasAttribute("data-gone")) pieces.delete(key);
      else pieces.set(key, el);
      changed.push(key);
    }
    return changed;
  }

  function kernelNow() {
    return frame.now + (performance.now() / 1000 - frame.at);
  }

  function tick(root) {
    const now = kernelNow();
    for (const el of root.querySelectorAll("[data-cxj-since]")) {
      const since = Number(el.getAttribute("data-cxj-since"));
      const label = el.getAttribute("data-cxj-label") || "";
      const tail = el.getAttribute("data-cxj-tail") || "";
      const text = `${label} · ${fmt(now - since)}${tail}`;
      if (el.textContent !== text) el.textContent = text;
    }
  }

  return {
    initialize({ model }) {
      apply(model.get("value"));
      model.on("change:value", () => {
        const changed = apply(model.get("value"));
        for (const view of views) view(changed);
      });
    },

    render({ model, el }) {
      el.classList.add("cxj-live-graph");
      const svg = document.createElementNS(NS, "svg");
      svg.setAttribute("role", "img");
      svg.setAttribute("aria-label", "action graph");
      const edges = document.createElementNS(NS, "g");
      const boxes = document.createElementNS(NS, "g");
      svg.append(edges, boxes);
      el.append(svg);
      const shown = new Map(); // key -> element in this view

      function put(key) {
        shown.get(key)?.remove();
        shown.delete(key);
        const piece = pieces.get(key);
        if (!piece) return;
        const copy = piece.cloneNode(true);
        if (key === "defs") svg.prepend(copy);
        else (key.startsWith("e:") ? edges : boxes).append(copy);
        shown.set(key, copy);
      }

      function sync(changed) {
        if (changed.includes(null)) {
          for (const copy of shown.values()) copy.remove();
          shown.clear();
          for (const key of pieces.keys()) put(key);
        } else {
          for (const key of changed) put(key);
        }
        const { w, h } = frame;
        svg.setAttribute("width", String(w));
        svg.setAttribute("height", String(h));
        svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
        svg.style.display = w && h ? "block" : "none";
        tick(root);
      }

      // Clicks anywhere in this cortex view, once the view is in the page.
      let root = el;
      const send = (target) =>
        model.send({
          act: target.getAttribute("data-cxj-act"),
          id: target.getAttribute("data-cxj-id") || "",
        });
      const onClick = (event) => {
        const target = event.target.closest?.("[data-cxj-act]");
        if (!target || !root.contains(target)) return;
        event.preventDefault();
        send(target);
      };
      const onKey = (event) => {
        if (event.key !== "Enter" && event.key !== " ") return;
        const target = event.target.closest?.("[data-cxj-act]");
        if (!target || !root.contains(target)) return;
        event.preventDefault();
        send(target);
      };
      const onToggle = (event) => {
        const details = event.target;
        const key = details.getAttribute?.("data-cxj-section");
        const owner = details.closest?.(".cxj-inspector");
        if (key && owner) sections.set(`${owner.getAttribute("data-id")}:${key}`, details.open);
      };
      // A redrawn inspector keeps the sections the person opened or closed.
      const observer = new MutationObserver(() => {
        for (const owner of root.querySelectorAll(".cxj-inspector")) {
          const node = owner.getAttribute("data-id");
          for (const details of owner.querySelectorAll("details[data-cxj-section]")) {
            const open = sections.get(`${node}:${details.getAttribute("data-cxj-section")}`);
            if (open !== undefined && details.open !== open) details.open = open;
          }
        }
      });
      const bind = (target) => {
        target.addEventListener("click", onClick);
        target.addEventListener("keydown", onKey);
        target.addEventListener("toggle", onToggle, true);
      };
      const unbind = (target) => {
        target.removeEventListener("click", onClick);
        target.removeEventListener("keydown", onKey);
        target.removeEventListener("toggle", onToggle, true);
      };
      bind(el);
      let tries = 0;
      const findRoot = () => {
        const found = el.closest(".cortex-view");
        if (found) {
          unbind(el);
          root = found;
          bind(root);
          observer.observe(root, { childList: true, subtree: true });
        } else if (tries++ < 100) {
          setTimeout(findRoot, 50);
        }
      };
      findRoot();

      views.add(sync);
      sync([null]);
      const timer = setInterval(() => tick(root), 250);
      return () => {
        views.delete(sync);
        clearInterval(timer);
        observer.disconnect();
        unbind(root);
      };
    },
  };
};
