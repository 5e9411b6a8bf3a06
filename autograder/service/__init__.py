"""Check my work: the trusted verdict for a learner while they work (`python -m autograder.service`). A learner
sends a saved notebook; the service grades it with the real `nbgrader autograde` in a scratch grading folder of its
own (never the class's gradebook), and answers with what the learner's feedback would say, nothing else."""
