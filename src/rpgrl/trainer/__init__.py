"""The single-machine RL trainer: `train(cfg, out)` in `loop.py`, the `rpgrl train` command in `cli.py`.

loop.py        train() as named phases: open the run, prepare its directory, start RL (warm start, first
               evaluation), the step loop (sample, score, advantages, update, log, checkpoint), finish
setup.py       registries, model, data, optimizer, prompt order; `Run` and `RunState`, `open_run` (and resume)
reference.py   the KL anchor (behaviour / periodic / adaptive / fixed, spec 6)
checkpoint.py  atomic save / resume
rundir.py      which --out can hold a run; SIGTERM/SIGINT -> checkpoint and a clean stop
log.py         metric reduction, metrics.jsonl, progress bar, plots
sft.py         the supervised warm start of the embedded default
"""
