"""The bundled example class that `make` grades: which answer each learner submits.

A value names a variant of `examples/variants/<assignment>.py`, or `reference` (the course's
own solution) or `unanswered` (the released notebook as it is).
"""
CLASS = {
    "ada": {"positional_encoding": "reference"},
    "ben": {"positional_encoding": "sin_cos_swapped"},
    "cleo": {"positional_encoding": "halves_concatenated"},
    "dev": {"positional_encoding": "unanswered"},
}
