"""``traceread diff``: did the fix work? (README.md: `traceread diff`)

``trace`` -- one diff of two analyses (figures per step / iteration / sample, kernels);
``batch`` -- two ``traceread batch`` output folders, and the multi-rank jobs' changes;
``paths`` -- what the user named (two traces, two folders, two batch outputs) to a diff.
Named ``diffs`` so the package never shadows the ``traceread.diff`` function.
Rendering lives in ``render/diff_text.py`` and ``render/html_diff.py``.
"""
