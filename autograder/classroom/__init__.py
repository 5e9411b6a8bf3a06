"""A whole class: nbgrader's commands as functions (`grade`), a class graded in parallel on Dask (`classgrade`) and
the class report (`report`)."""
