// MathJax 3's configuration for the feedback pages, written into each page before MathJax (feedback.py).
window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
                        processEscapes: true, tags: 'ams'},
                  svg: {fontCache: 'global'}};
