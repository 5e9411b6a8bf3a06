// The feedback pages' math, typeset ahead by MathJax 3 (npm's `mathjax`, pinned in package-lock.json) in node:
// reads {"items": [[tex, display, learner], ...], "limits": {"formula": bytes, "page": bytes, "seconds": s}} as JSON
// on stdin and writes {"svgs": [...], "why": [...], "cache": "<defs>...</defs>"} on stdout, each formula an
// <mjx-container> holding an SVG whose glyphs point into the one shared cache of paths.
// Only TeX's own packages are loaded (no \require, no autoload, no \href or \style): the TeX of a learner's markdown
// can draw symbols, nothing else; an unknown macro is shown in red, as MathJax does in a browser.
// The course's formulas are typeset first, all of them; then the learner's, each while the page is within its limits:
// a learner's formula whose SVG is over `formula` bytes, or would take the page's SVG over `page` bytes (and those
// after it), or that comes after `seconds` of typesetting, or that MathJax fails on, gets null, and `why` says which.
"use strict";

async function main() {
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const {items, limits} = JSON.parse(input);
  const MathJax = await require("mathjax").init({
    loader: {load: ["input/tex-base", "[tex]/ams", "[tex]/newcommand", "[tex]/noundefined", "output/svg"]},
    tex: {packages: ["base", "ams", "newcommand", "noundefined"], tags: "ams"},
    svg: {fontCache: "global"},
    startup: {typeset: false},
  });
  const adaptor = MathJax.startup.adaptor;
  const lean = (html) => html.replace(/ data-[a-z-]+="[^"]*"/g, "");      // MathJax's notes to itself, not drawn
  const draw = ([tex, display]) => lean(adaptor.outerHTML(MathJax.tex2svg(tex, {display})));
  const svgs = items.map(() => null), why = items.map(() => null);
  let bytes = 0, full = false;
  for (const [i, item] of items.entries()) {
    if (!item[2]) bytes += (svgs[i] = draw(item)).length;
  }
  const deadline = Date.now() + 1000 * limits.seconds;
  for (const [i, item] of items.entries()) {
    if (!item[2]) continue;
    if (full) why[i] = "page";
    else if (Date.now() >= deadline) why[i] = "time";
    else {
      let svg = null;
      try {
        svg = draw(item);
      } catch (e) {                                  // past MathJax's own stack, say: this formula only
        why[i] = "error";
        continue;
      }
      if (svg.length > limits.formula) why[i] = "formula";
      else if (bytes + svg.length > limits.page) [why[i], full] = ["page", true];
      else bytes += (svgs[i] = svg).length;
    }
  }
  const cache = adaptor.outerHTML(MathJax.startup.output.fontCache.getCache());
  process.stdout.write(JSON.stringify({svgs, why, cache}));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + "\n");
  process.exit(1);
});
