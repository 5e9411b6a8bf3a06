/* The interactive graph of book/network_graph.md.
   The page holds the pieces of DOT that autograder.graph.explorer_data() wrote; Graphviz, compiled to WebAssembly
   (viz-global.js, served with the site), lays the graph out again whenever a group is collapsed or expanded.
   Click a group's frame to collapse it, a collapsed group to expand it, a node to see what it computes (in the
   panel over the graph's corner, which keeps showing it while the node is drawn, and says what to do when none is).
   The page opens with the groups listed in the data's `collapsed` folded.
   The graph is a window on the drawing: the SVG's viewBox is the camera. Drag (or one finger) pans it; the wheel,
   a pinch or the +/− buttons zoom it; "reset" goes back to the starting view, which is the whole graph where its
   labels stay readable (at least MIN_LABEL_PX) and otherwise that scale, from the top. */
(function () {
  "use strict";

  const MIN_LABEL_PX = 12;          // the smallest label on the screen at the starting view, in CSS pixels
  const NATURAL = 4 / 3;            // Graphviz writes points: 1 pt = 4/3 px is the drawing's own size
  const MAX_ZOOM = 4;               // px per point, at most
  const STEP = 1.25;                // one press of + or −
  const TOP = 48;                   // px at the view's top that the zoom buttons cover
  const DRAG = 4;                   // px a pointer moves before a press becomes a drag (and not a click)

  // The DOT source for a set of collapsed clusters: the same rules as autograder.graph.draw.assemble().
  function assemble(p, collapsed) {
    const kids = new Map(), members = new Map(), parent = new Map(), where = new Map();
    for (const c of p.clusters) {
      if (!kids.has(c.parent)) kids.set(c.parent, []);
      kids.get(c.parent).push(c);
      parent.set(c.id, c.parent);
    }
    for (const n of p.nodes) {
      if (!members.has(n.cluster)) members.set(n.cluster, []);
      members.get(n.cluster).push(n);
      where.set(n.id, n.cluster);
    }
    const owner = (cluster, id) => {
      let top = id;
      for (let c = cluster; c !== null && c !== undefined; c = parent.get(c)) if (collapsed.has(c)) top = c;
      return top;
    };
    const body = (c) => {
      if (collapsed.has(c.id)) return c.node;
      const inner = (members.get(c.id) || []).map((n) => n.stmt).concat((kids.get(c.id) || []).map(body));
      return `subgraph cluster_${c.id} { ${c.attrs} ${inner.join(" ")} }`;
    };
    const lines = ["digraph G {", p.graph];
    for (const n of members.get(null) || []) lines.push(n.stmt);
    for (const c of kids.get(null) || []) lines.push(body(c));
    const seen = new Set();
    for (const [a, b] of p.edges) {
      const e = [owner(where.get(a), a), owner(where.get(b), b)];
      const key = e.join(" ");
      if (e[0] !== e[1] && !seen.has(key)) {
        seen.add(key);
        lines.push(`${e[0]} -> ${e[1]};`);
      }
    }
    return lines.concat(["}"]).join("\n");
  }

  // The camera on one drawing: (x, y) the point of the drawing at the view's top-left corner, k the screen pixels
  // per point. The viewBox always has the view's own proportions, so that k holds in both directions.
  // `inset()` is the width (px) at the view's right that the details panel covers, where it lies over the graph.
  function camera(view, root, inset) {
    let svg = null, box = null, cam = {x: 0, y: 0, k: 1}, least = 1;

    const size = () => ({w: Math.max(view.clientWidth, 1), h: Math.max(view.clientHeight, 1)});

    function apply() {
      if (!svg) return;
      const {w, h} = size();
      // Keep the middle of the view over the drawing, so that the graph can never be lost off the edge.
      const cx = Math.min(Math.max(cam.x + w / (2 * cam.k), box.x), box.x + box.w);
      const cy = Math.min(Math.max(cam.y + h / (2 * cam.k), box.y), box.y + box.h);
      cam.x = cx - w / (2 * cam.k);
      cam.y = cy - h / (2 * cam.k);
      svg.setAttribute("viewBox", [cam.x, cam.y, w / cam.k, h / cam.k].map((v) => v.toFixed(2)).join(" "));
      root.dataset.zoom = cam.k.toFixed(3);
    }

    // Where an element of the drawing lies, in points.
    function where(el) {
      const r = el.getBoundingClientRect(), s = svg.getBoundingClientRect();
      return {x: cam.x + (r.left - s.left) / cam.k, y: cam.y + (r.top - s.top) / cam.k,
              w: r.width / cam.k, h: r.height / cam.k};
    }

    // The starting scale: the whole drawing if its labels stay readable so, never larger than its own size.
    function homeScale() {
      const {w, h} = size(), free = Math.max(w - inset(), w / 2);
      const sizes = [...svg.querySelectorAll("text")].map((t) => parseFloat(t.getAttribute("font-size")))
        .filter((v) => v > 0);
      const readable = MIN_LABEL_PX / Math.min(...sizes, 14);
      const fit = Math.min(free / box.w, (h - TOP) / box.h);
      least = Math.min(fit, readable) * 0.8;
      return Math.min(NATURAL, Math.max(readable, fit));
    }

    // Show `el` (or the whole drawing) at the starting scale: centred where it fits, else from its top (left).
    function frame(el) {
      const {w, h} = size();
      const k = homeScale();
      const t = el ? where(el) : box;
      const free = Math.max(w - inset(), w / 2);
      cam = {k,                                 // from the top: below the zoom buttons (TOP px)
             x: t.w * k <= free ? t.x + t.w / 2 - free / (2 * k) : t.x - 8 / k,
             y: t.h * k <= h - TOP ? t.y + t.h / 2 - (h + TOP) / (2 * k) : t.y - TOP / k};
      apply();
    }

    return {
      // A new drawing: the camera frames `focus` (an id) if it is drawn, else the whole graph.
      show(next, focus) {
        svg = next;
        const vb = svg.viewBox.baseVal;
        box = {x: vb.x, y: vb.y, w: vb.width, h: vb.height};
        svg.removeAttribute("width");
        svg.removeAttribute("height");
        svg.setAttribute("preserveAspectRatio", "xMinYMin meet");
        const el = focus ? svg.getElementById(focus) : null;
        cam = {x: box.x, y: box.y, k: 1};
        apply();                                          // laid out once at a known scale, so that where() holds
        frame(el);
      },
      reset() {
        frame(null);
      },
      // Zoom by factor f about the point (px, py) of the view, in CSS pixels from its top-left corner.
      zoom(f, px, py) {
        if (!svg) return;
        const {w, h} = size();
        px = px === undefined ? w / 2 : px;
        py = py === undefined ? h / 2 : py;
        const k = Math.min(Math.max(cam.k * f, least), MAX_ZOOM);
        const ux = cam.x + px / cam.k, uy = cam.y + py / cam.k;
        cam = {k, x: ux - px / k, y: uy - py / k};
        apply();
      },
      pan(dx, dy) {
        if (!svg) return;
        cam.x -= dx / cam.k;
        cam.y -= dy / cam.k;
        apply();
      },
      // Move the view as little as needed so that `el` is not under `cover` (a rectangle on the screen).
      clear(el, cover) {
        if (!svg || !el) return;
        const r = el.getBoundingClientRect(), v = view.getBoundingClientRect();
        const under = r.right > cover.left && r.left < cover.right && r.bottom > cover.top && r.top < cover.bottom;
        if (!under || cover.left - v.left < r.width + 16) return;
        this.pan(Math.max(cover.left - 8 - r.right, v.left + 8 - r.left), 0);
      },
      centre(el) {
        if (!svg || !el) return;
        const t = where(el), {w, h} = size(), free = Math.max(w - inset(), w / 2);
        cam.x = t.x + t.w / 2 - free / (2 * cam.k);
        cam.y = t.y + t.h / 2 - h / (2 * cam.k);
        apply();
      },
      apply,
    };
  }

  // Drag and one finger pan; the wheel and two fingers zoom. A press that moves less than DRAG px stays a click.
  function gestures(view, cam) {
    const down = new Map();            // pointer id -> its last position
    let moved = false, pinch = null;

    const local = (ev) => {
      const r = view.getBoundingClientRect();
      return {x: ev.clientX - r.left, y: ev.clientY - r.top};
    };
    const spread = () => {
      const [a, b] = [...down.values()];
      return {d: Math.hypot(a.x - b.x, a.y - b.y), x: (a.x + b.x) / 2, y: (a.y + b.y) / 2};
    };

    view.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      down.set(ev.pointerId, {...local(ev), x0: local(ev).x, y0: local(ev).y});
      if (down.size === 1) moved = false;
      pinch = down.size === 2 ? spread() : null;
    });
    view.addEventListener("pointermove", (ev) => {
      const p = down.get(ev.pointerId);
      if (!p) return;
      const q = local(ev);
      if (!moved && Math.hypot(q.x - p.x0, q.y - p.y0) < DRAG && down.size === 1) return;
      if (!moved) {
        moved = true;
        view.setPointerCapture(ev.pointerId);   // only once it is a drag: a click keeps its own target
        view.classList.add("graph-dragging");
      }
      if (down.size === 1) {
        cam.pan(q.x - p.x, q.y - p.y);
      } else if (down.size === 2 && pinch) {
        down.set(ev.pointerId, {...p, x: q.x, y: q.y});
        const now = spread();
        cam.pan(now.x - pinch.x, now.y - pinch.y);
        if (pinch.d > 0 && now.d > 0) cam.zoom(now.d / pinch.d, now.x, now.y);
        pinch = now;
        return;
      }
      down.set(ev.pointerId, {...p, x: q.x, y: q.y});
    });
    const up = (ev) => {
      down.delete(ev.pointerId);
      pinch = down.size === 2 ? spread() : null;
      if (!down.size) view.classList.remove("graph-dragging");
    };
    view.addEventListener("pointerup", up);
    view.addEventListener("pointercancel", up);
    // A drag ends with a click on whatever is under the pointer: it is not one.
    view.addEventListener("click", (ev) => {
      if (moved) {
        ev.stopPropagation();
        ev.preventDefault();
        moved = false;
      }
    }, true);
    view.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const q = local(ev);
      const lines = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? view.clientHeight : 1;
      cam.zoom(Math.exp(-ev.deltaY * lines * 0.002), q.x, q.y);
    }, {passive: false});
    view.addEventListener("keydown", (ev) => {
      const keys = {"+": () => cam.zoom(STEP), "=": () => cam.zoom(STEP), "-": () => cam.zoom(1 / STEP),
                    "0": () => cam.reset(), ArrowLeft: () => cam.pan(40, 0), ArrowRight: () => cam.pan(-40, 0),
                    ArrowUp: () => cam.pan(0, 40), ArrowDown: () => cam.pan(0, -40)};
      if (keys[ev.key] && !ev.ctrlKey && !ev.metaKey && !ev.altKey) {
        ev.preventDefault();
        keys[ev.key]();
      }
    });
  }

  function setup(root) {
    const data = JSON.parse(root.querySelector("script.graph-data").textContent);
    const view = root.querySelector(".graph-view");
    const info = root.querySelector(".graph-info");
    const search = root.querySelector(".graph-search");
    const count = root.querySelector(".graph-count");
    const collapsed = {};
    for (const part of Object.keys(data)) collapsed[part] = new Set(data[part].collapsed);
    let part = "forward", hits = new Set(), drawn = 0, selected = null, at = 0;
    const viz = Viz.instance();
    const hint = info.innerHTML;                       // the panel's text before any node is clicked
    // Where the panel lies over the graph (a wide screen), the part of the view it covers, and a margin.
    const inset = () => getComputedStyle(info).position === "absolute" ?
      view.getBoundingClientRect().right - info.getBoundingClientRect().left + 8 : 0;
    const cam = camera(view, root, inset);
    gestures(view, cam);

    const ancestors = (p, cluster) => {
      const up = new Map(p.clusters.map((c) => [c.id, c.parent]));
      const out = [];
      for (let c = cluster; c !== null && c !== undefined; c = up.get(c)) out.push(c);
      return out;
    };

    // Lay the graph out again; the view starts on `focus` (the group just opened or folded) when it is given.
    async function draw(focus) {
      const p = data[part];
      const svg = (await viz).renderSVGElement(assemble(p, collapsed[part]));
      view.replaceChildren(svg);
      for (const id of hits) {
        const el = svg.getElementById(id);
        if (el) el.classList.add("graph-hit");
      }
      cam.show(svg, focus);
      at = 0;
      const first = hits.size ? svg.getElementById([...hits][0]) : null;
      if (first) cam.centre(first);
      if (selected && svg.getElementById(selected)) show(selected, false);   // still drawn: still shown, marked
      else unselect();
      root.dataset.drawn = String(++drawn);
      root.dataset.nodes = String(svg.querySelectorAll("g.node").length);
    }

    function unselect() {
      selected = null;
      info.innerHTML = hint;
      view.querySelectorAll(".graph-selected").forEach((el) => el.classList.remove("graph-selected"));
    }

    function show(id, reveal = true) {
      selected = id;
      const p = data[part];
      const rows = p.info[id] ? Object.entries(p.info[id]).filter(([, v]) => v !== "") :
        [["group", (p.clusters.find((c) => c.id === id) || {}).label || id]];
      const table = document.createElement("table");
      for (const [k, v] of rows) {
        const tr = table.insertRow();
        tr.insertCell().textContent = k;
        tr.insertCell().textContent = v;
      }
      info.replaceChildren(table);
      const box = info.getBoundingClientRect();                   // keep the details in view (narrow screens)
      if (reveal && (box.top < 0 || box.bottom > window.innerHeight)) info.scrollIntoView({block: "nearest"});
      view.querySelectorAll(".graph-selected").forEach((el) => el.classList.remove("graph-selected"));
      const el = view.querySelector(`svg [id="${CSS.escape(id)}"]`);
      if (el) el.classList.add("graph-selected");
      if (getComputedStyle(info).position === "absolute") cam.clear(el, info.getBoundingClientRect());
    }

    view.addEventListener("click", (ev) => {
      const g = ev.target.closest("g.node, g.cluster");
      if (!g) {
        if (selected) unselect();                               // a click on the background: nothing selected
        return;
      }
      ev.preventDefault();
      if (g.classList.contains("cluster")) {
        collapsed[part].add(g.id);
        draw(g.id);
      } else if (collapsed[part].has(g.id)) {
        collapsed[part].delete(g.id);
        draw(g.id);
      } else {
        show(g.id);
      }
    });

    search.addEventListener("input", () => {
      const q = search.value.trim().toLowerCase();
      const p = data[part];
      hits = new Set();
      if (q) {
        for (const n of p.nodes) {
          const i = p.info[n.id];
          if ([i.name, i.op, i.target, i.group].some((v) => v.toLowerCase().includes(q))) {
            hits.add(n.id);
            for (const c of ancestors(p, n.cluster)) collapsed[part].delete(c);
          }
        }
      }
      count.textContent = q ? `${hits.size} found` : "";
      draw();
    });

    search.addEventListener("keydown", (ev) => {                 // Enter: the next node found, in the middle
      if (ev.key !== "Enter" || !hits.size) return;
      ev.preventDefault();
      at = (at + (ev.shiftKey ? hits.size - 1 : 1)) % hits.size;
      cam.centre(view.querySelector(`svg [id="${CSS.escape([...hits][at])}"]`));
    });

    root.querySelectorAll("button[data-part]").forEach((b) => b.addEventListener("click", () => {
      part = b.dataset.part;
      root.querySelectorAll("button[data-part]").forEach((o) => o.setAttribute("aria-pressed", o === b));
      hits = new Set();
      search.value = "";
      count.textContent = "";
      unselect();
      draw();
    }));
    root.querySelector("button.graph-expand").addEventListener("click", () => {
      collapsed[part].clear();
      draw();
    });
    root.querySelector("button.graph-collapse").addEventListener("click", () => {
      collapsed[part] = new Set(data[part].clusters.filter((c) => c.parent === null).map((c) => c.id));
      draw();
    });
    root.querySelector("button.graph-zoom-in").addEventListener("click", () => cam.zoom(STEP));
    root.querySelector("button.graph-zoom-out").addEventListener("click", () => cam.zoom(1 / STEP));
    root.querySelector("button.graph-reset").addEventListener("click", () => cam.reset());
    new ResizeObserver(() => cam.apply()).observe(view);
    draw();
  }

  document.querySelectorAll(".graph-explorer").forEach(setup);
})();
