"""The paper's claims, rerun at small scale: `rpgrl reproduce CLAIM`.

claims.py   what each claim runs (arms) and which paired comparisons decide its verdict
runner.py   the runs themselves, cached by resolved config and seed, two at a time
stats.py    means and paired differences with Student-t intervals
report.py   intervals, verdicts, Markdown and plots, generated from the run records
cli.py      the command
"""
