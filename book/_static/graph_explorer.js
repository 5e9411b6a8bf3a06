/* The interactive graph of book/network_graph.md.
   The page holds the pieces of DOT that autograder.graph.explorer_data() wrote; Graphviz, compiled to WebAssembly
   (viz-global.js, served with the site), lays the graph out again whenever a group is collapsed or expanded.
   Click a group's frame to collapse it, a collapsed group to expand it, a node to see what it computes (in the
   panel beside the graph, which keeps showing it while the node is drawn, and says what to do when none is). The page
   opens with the groups listed in the data's `collapsed` folded. */
(function () {
  "use strict";

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

  function setup(root) {
    const data = JSON.parse(root.querySelector("script.graph-data").textContent);
    const view = root.querySelector(".graph-view");
    const info = root.querySelector(".graph-info");
    const search = root.querySelector(".graph-search");
    const count = root.querySelector(".graph-count");
    const collapsed = {};
    for (const part of Object.keys(data)) collapsed[part] = new Set(data[part].collapsed);
    let part = "forward", hits = new Set(), drawn = 0, selected = null;
    const viz = Viz.instance();
    const hint = info.innerHTML;                       // the panel's text before any node is clicked

    const ancestors = (p, cluster) => {
      const up = new Map(p.clusters.map((c) => [c.id, c.parent]));
      const out = [];
      for (let c = cluster; c !== null && c !== undefined; c = up.get(c)) out.push(c);
      return out;
    };

    async function draw() {
      const p = data[part];
      const svg = (await viz).renderSVGElement(assemble(p, collapsed[part]));
      view.replaceChildren(svg);
      for (const id of hits) {
        const el = svg.getElementById(id);
        if (el) el.classList.add("graph-hit");
      }
      const first = hits.size ? svg.getElementById([...hits][0]) : null;
      if (first) first.scrollIntoView({block: "center", inline: "center"});
      if (selected && svg.getElementById(selected)) show(selected, false);   // still drawn: still shown, marked
      else unselect();
      root.dataset.drawn = String(++drawn);
      root.dataset.nodes = String(svg.querySelectorAll("g.node").length);
    }

    function unselect() {
      selected = null;
      info.innerHTML = hint;
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
    }

    view.addEventListener("click", (ev) => {
      const g = ev.target.closest("g.node, g.cluster");
      if (!g) return;
      ev.preventDefault();
      const p = data[part];
      if (g.classList.contains("cluster")) {
        collapsed[part].add(g.id);
        draw();
      } else if (collapsed[part].has(g.id)) {
        collapsed[part].delete(g.id);
        draw();
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
    draw();
  }

  document.querySelectorAll(".graph-explorer").forEach(setup);
})();
