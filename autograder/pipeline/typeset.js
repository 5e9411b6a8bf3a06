// The feedback pages' math, typeset ahead by MathJax 3 (npm's `mathjax`, pinned in package-lock.json) in node:
// reads [[tex, display], ...] as JSON on stdin and writes {"svgs": [...], "cache": "<defs>...</defs>"} on stdout,
// each formula an <mjx-container> holding an SVG whose glyphs point into the one shared cache of paths.
// Only TeX's own packages are loaded (no \require, no autoload, no \href or \style): the TeX of a learner's markdown
// can draw symbols, nothing else; an unknown macro is shown in red, as MathJax does in a browser.
"use strict";

async function main() {
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const items = JSON.parse(input);
  const MathJax = await require("mathjax").init({
    loader: {load: ["input/tex-base", "[tex]/ams", "[tex]/newcommand", "[tex]/noundefined", "output/svg"]},
    tex: {packages: ["base", "ams", "newcommand", "noundefined"], tags: "ams"},
    svg: {fontCache: "global"},
    startup: {typeset: false},
  });
  const adaptor = MathJax.startup.adaptor;
  const lean = (html) => html.replace(/ data-[a-z-]+="[^"]*"/g, "");      // MathJax's notes to itself, not drawn
  const svgs = items.map(([tex, display]) => lean(adaptor.outerHTML(MathJax.tex2svg(tex, {display}))));
  const cache = adaptor.outerHTML(MathJax.startup.output.fontCache.getCache());
  process.stdout.write(JSON.stringify({svgs, cache}));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + "\n");
  process.exit(1);
});
