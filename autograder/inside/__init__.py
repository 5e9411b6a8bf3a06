"""What runs inside the sandbox: the worker that loads a learner's cells and answers calls with plain data
(`worker`, over `protocol`), the notebook's run for the feedback (`execute`), the stand-ins for the course's parts
(`parts`) and the module tracer (`tracer`). The sandbox gets these files, and nothing else of the course, as
/opt/grader; there they import one another by their own names, and nothing outside this folder (a test holds this).
The trusted side imports them as `autograder.inside.<name>`, and never runs a learner's code with them."""
