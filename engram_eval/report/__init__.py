"""report: one self-contained HTML page per finished run (``engram-eval report``).

:mod:`.build` gathers what the page shows from a finished run, its sidecar and summary, and
the package's own analyses (``verify``, ``compare``, ``analyze``, the summaries); it computes
no metric itself. :mod:`.questions` makes the per-question entries (top sessions, traced
stages, best turns). :mod:`.page` renders the document as one HTML file: inline CSS, one
inline script, a JSON data island, every string escaped; :mod:`.assets` holds the CSS and
the script.
"""
