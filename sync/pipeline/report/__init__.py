"""The pipeline's results for people: the printed summary and the self-contained HTML page."""
