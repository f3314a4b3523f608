"""`station golive`: every gate in order, one JSON and one HTML report (docs/golive.md).

- `cli`: the plan (golive.json), the walk through smoke, tools, agent, needle and bench, the JSON report.
- `page`: the self-contained HTML page of a report (charts from the bench levels).
"""
