"""The course's tooling: what only make and CI call.

Notebooks never import this package; they import :mod:`course_utils`. The modules here drive a build, a test lane
or a report from the command line (``python -m course_tools.NAME``) and may use only the standard library at the
top of each module, since ``make`` runs some of them with the machine's Python before any environment exists.
"""
