"""A whole class: nbgrader's commands as functions (`grade`), the bundled example class (`grade_examples`), a class
graded in parallel on Dask (`classgrade`) and the class report (`report`)."""
