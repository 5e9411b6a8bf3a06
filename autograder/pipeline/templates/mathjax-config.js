// MathJax 3's configuration for the feedback pages, loaded before MathJax (templates/base/mathjax.html.j2).
window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
                        processEscapes: true, tags: 'ams'}};
