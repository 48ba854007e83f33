"""The parts of scripts/grade.py: the sandbox (sandbox.py), what runs inside it (worker.py: the notebook run;
checkrun.py: the checks on each answer cell), reading a submission (answers.py) and the marks (marks.py).

worker.py and checkrun.py run as scripts inside the sandbox and import nothing of the grader."""
