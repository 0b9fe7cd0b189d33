"""course_tools: what only ``make`` and CI call. A notebook never imports it.

================= ==========================================================
runner            ``make course``: every notebook in a fresh kernel -> ``build/``
testrun           ``make test``: notebooks 01-03, then two pytest streams side by side at one thread each
reports           ``build/RESULTS.md``'s table and the budget report (seconds against each notebook's budget)
seeds             ``make seeds``: the course once per seed -> ``build/SEEDS.md`` and ``docs/results.md``'s table
matrix            ``make matrix``: notebooks 02-13 on two other model families, at the smoke scale
base_model        a small base model of another family, pretrained here: "your own model" at full scale
book              ``make book``: the executed notebooks as a static site (Sphinx + MyST-NB); install cells
browser           a headless Chromium over the DevTools protocol: the book as a reader's browser shows it
bench             ``make bench``: each phase timed against this machine's matmul roofline
assignments       ``make assignments``: the graded functions as stubs; student mode (``COURSE_IMPL=student``)
grader            ``make grade``: a student's functions against the reference, edge cases, gradients, training
latest            ``make latest``: the unit tests and TRL parity checks against the newest TRL and transformers
================= ==========================================================

It imports :mod:`course_utils`; the dependency never runs the other way, except for student mode's hook.
"""
